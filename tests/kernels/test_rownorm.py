"""domainpar.kernels.rownorm against PyTorch's LayerNorm + activation in float64, values and gradients."""

from __future__ import annotations

import numba
import pytest
import torch
import torch.nn.functional as F

from domainpar.kernels import rownorm

TORCH_ACT = {
    "relu": F.relu, "silu": F.silu, "tanh": torch.tanh, "gelu": F.gelu,
    "elu": lambda y: F.elu(y, 0.7), "leaky_relu": lambda y: F.leaky_relu(y, 0.05),
}
PARAM = {"elu": 0.7, "leaky_relu": 0.05}


@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("name", sorted(TORCH_ACT))
def test_forward_and_backward_equal_torch(name, norm):
    generator = torch.Generator().manual_seed(0)
    rows, width = 5000, 9  # more rows than one block of the column sums
    z = torch.randn(rows, width, dtype=torch.float64, generator=generator, requires_grad=True)
    gamma = (1 + 0.3 * torch.randn(width, dtype=torch.float64, generator=generator)).requires_grad_()
    beta = (0.2 * torch.randn(width, dtype=torch.float64, generator=generator)).requires_grad_()
    grad_a = torch.randn(rows, width, dtype=torch.float64, generator=generator)
    y = F.layer_norm(z, (width,), gamma, beta, 1e-5) if norm else z
    a = TORCH_ACT[name](y)
    want = torch.autograd.grad(a, (z, gamma, beta) if norm else (z,), grad_a)
    code, param = rownorm.ACTIVATION_CODES[name], PARAM.get(name, 0.0)
    g, b = (gamma.detach().numpy(), beta.detach().numpy()) if norm else (None, None)
    out = torch.empty(rows, width, dtype=torch.float64)
    rownorm.ln_act_forward(z.detach().numpy(), g, b, 1e-5, code, param, out.numpy())
    assert torch.allclose(out, a.detach(), rtol=0, atol=1e-12)
    grad_z = torch.empty_like(out)
    g_gamma, g_beta, g_bias = rownorm.ln_act_backward(z.detach().numpy(), g, b, 1e-5, code, param, grad_a.numpy(), grad_z.numpy())
    assert torch.allclose(grad_z, want[0], rtol=0, atol=1e-11)
    assert torch.allclose(torch.from_numpy(g_bias), want[0].sum(0), rtol=0, atol=1e-9)  # the preceding Linear's bias
    if norm:
        assert torch.allclose(torch.from_numpy(g_gamma), want[1], rtol=1e-11, atol=1e-9)
        assert torch.allclose(torch.from_numpy(g_beta), want[2], rtol=1e-11, atol=1e-9)
    else:
        assert g_gamma is None and g_beta is None


def test_column_sums_do_not_depend_on_threads():
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one numba thread only")
    z = torch.randn(9000, 16)
    grad_a = torch.randn(9000, 16)
    gamma, beta = torch.ones(16).numpy(), torch.zeros(16).numpy()
    results = []
    previous = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            grad_z = torch.empty_like(z)
            sums = rownorm.ln_act_backward(z.numpy(), gamma, beta, 1e-5, 0, 0.0, grad_a.numpy(), grad_z.numpy())
            results.append((grad_z, *map(torch.from_numpy, sums)))
    finally:
        torch.set_num_threads(previous)  # later tests in this process run on the count they were given
    for first, second in zip(*results):
        assert torch.equal(first, second)


@pytest.mark.parametrize("dtype,tolerance", [(torch.float64, 1e-12), (torch.float32, 2e-6)])
@pytest.mark.parametrize("width", [64, 9])
def test_layer_norm_rows_in_place_equals_torch(dtype, tolerance, width):
    # The edge filter's inference norm: the bias of the product before it, then torch's LayerNorm, in place, to
    # rounding (its sums are vectorised). Rows of 64 (the filter's) and of an odd width (a vector tail), far from
    # zero mean and unit spread, and a shift that is not constant across the row (a constant one would cancel in
    # the norm), so every term (shift, mean, spread, weight, bias) shows.
    generator = torch.Generator().manual_seed(1)
    z = 4.0 * torch.randn(3000, width, dtype=dtype, generator=generator) + 2.5
    gamma = 1 + 0.5 * torch.randn(width, dtype=dtype, generator=generator)
    beta = 0.7 * torch.randn(width, dtype=dtype, generator=generator)
    shift = 2.0 * torch.randn(width, dtype=dtype, generator=generator)
    want = F.layer_norm(z + shift, (width,), gamma, beta, 1e-5)
    got = z.numpy().copy()
    rownorm.layer_norm_rows(got, shift.numpy(), gamma.numpy(), beta.numpy(), 1e-5)
    assert float((want - z).abs().max()) > 1.0  # the norm changes the rows
    torch.testing.assert_close(torch.from_numpy(got), want, rtol=tolerance, atol=tolerance)

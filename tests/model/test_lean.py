"""The MLP tail as one autograd node (fused, lean) and the recompute region, against plain autograd in float64."""

from __future__ import annotations

import pytest
import torch

from domainpar.model.interaction_network import MLP
from domainpar.model.lean import lean_tail, mlp_tail
from domainpar.model.recompute import recompute


def _mlp(activation: str, layer_norm: bool, depth: int) -> MLP:
    torch.manual_seed(0)
    mlp = MLP(5, 6, depth, activation, layer_norm).double()
    with torch.no_grad():
        for p in mlp.parameters():
            p.add_(0.1 * torch.randn_like(p))  # LayerNorm's weight and bias away from 1 and 0
    return mlp


@pytest.mark.parametrize("depth", [1, 3])
@pytest.mark.parametrize("layer_norm", [True, False])
@pytest.mark.parametrize("activation", ["relu", "leaky_relu", "silu", "gelu", "tanh", "elu"])
def test_tail_equals_plain_autograd(activation, layer_norm, depth):
    mlp = _mlp(activation, layer_norm, depth)
    z = torch.randn(300, 6, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(300, 6, dtype=torch.float64)
    inputs = [z, *mlp.parameters()]
    plain = mlp.tail(z)
    want = torch.autograd.grad(plain, inputs, grad, allow_unused=True)
    outs = {}
    for name, fn in (("lean", lambda: mlp_tail(mlp, z, lean=True)), ("kept", lambda: mlp_tail(mlp, z, lean=False)),
                     ("lean_torch", lambda: lean_tail(mlp, z))):
        out = fn()
        got = torch.autograd.grad(out, inputs, grad, allow_unused=True)
        assert torch.allclose(out, plain, rtol=0, atol=1e-12), name
        for g, w in zip(got, want):
            assert (g is None) == (w is None), name
            if w is not None:
                assert torch.allclose(g, w, rtol=1e-10, atol=1e-12), name
        outs[name] = (out, got)
    # Keeping or recomputing the activations gives bitwise the same numbers.
    assert torch.equal(outs["lean"][0], outs["kept"][0])
    for a, b in zip(outs["lean"][1], outs["kept"][1]):
        assert (a is None and b is None) or torch.equal(a, b)


def test_lean_tail_keeps_only_pre_norm_rows():
    mlp = _mlp("relu", True, 3)
    z = torch.randn(1000, 6, dtype=torch.float64, requires_grad=True)
    saved = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    for lean, rows in ((True, 3), (False, 5)):  # z1..z3, plus a1, a2 when kept
        saved.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            mlp_tail(mlp, z, lean=lean)
        assert sum(n for n in saved.values() if n >= 1000 * 6 * 8) == rows * 1000 * 6 * 8


def test_recompute_gives_the_gradients_of_the_plain_region():
    torch.manual_seed(1)
    linear = torch.nn.Linear(4, 4).double()
    x = torch.randn(10, 4, dtype=torch.float64, requires_grad=True)
    y = torch.randn(10, 4, dtype=torch.float64, requires_grad=True)

    def region(a, b):
        return torch.tanh(linear(a)) * b, a.sum(0)

    grads_out = (torch.randn(10, 4, dtype=torch.float64), torch.randn(4, dtype=torch.float64))
    params = list(linear.parameters())
    want = torch.autograd.grad(region(x, y), [x, y, *params], grads_out)
    got = torch.autograd.grad(recompute(region, (x, y), params), [x, y, *params], grads_out)
    for g, w in zip(got, want):
        assert torch.allclose(g, w, rtol=0, atol=1e-14)
    # Only the inputs are kept for backward: nothing the region computes.
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
        recompute(region, (x, y), params)
    assert len(kept) == 2 and kept[0] is x and kept[1] is y

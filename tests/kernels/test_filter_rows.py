"""domainpar.kernels.filter_rows against torch: the edge filter's input rows and its last layer."""

from __future__ import annotations

import numpy as np
import torch

from domainpar.kernels.filter_rows import logit_rows, standardised_rows


def test_standardised_rows_are_torchs_standardised_gathered_rows_to_the_bit():
    # Node rows gathered at both ends (src and dst differ, so a swapped end shows), a selection of edge columns out of
    # order (a column read in place of another shows), standardised as torch does it: the same bits. Only rows
    # first:last are written, from out[0].
    rng = np.random.default_rng(0)
    x = rng.normal(2.0, 3.0, (50, 3)).astype(np.float32)
    edge_attr = rng.normal(-1.0, 2.0, (400, 5)).astype(np.float32)
    src, dst = rng.integers(0, 50, 400), rng.integers(0, 50, 400)
    columns = np.array([4, 0, 2], np.int64)
    mean = rng.normal(0.0, 1.0, 9).astype(np.float32)
    scale = rng.uniform(0.5, 2.0, 9).astype(np.float32)
    out = np.full((301, 9), np.nan, np.float32)
    standardised_rows(x, src, dst, edge_attr, columns, mean, scale, 70, 370, out)
    inputs = torch.from_numpy(np.concatenate([x[src], x[dst], edge_attr[:, columns]], axis=1)[70:370])
    want = ((inputs - torch.from_numpy(mean)) / torch.from_numpy(scale)).numpy()
    assert out[:300].tobytes() == want.tobytes() and np.isnan(out[300]).all()


def test_logit_rows_is_the_one_output_linear():
    rng = np.random.default_rng(1)
    h = rng.normal(0.5, 2.0, (500, 64)).astype(np.float32)
    linear = torch.nn.Linear(64, 1)
    out = np.empty(500, np.float32)
    logit_rows(h, linear.weight.detach().numpy()[0], np.float32(linear.bias.item()), out)
    with torch.no_grad():
        want = linear(torch.from_numpy(h)).squeeze(1).numpy()
    assert want.std() > 0.1
    np.testing.assert_allclose(out, want, rtol=2e-6, atol=2e-6)

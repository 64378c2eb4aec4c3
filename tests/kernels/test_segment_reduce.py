"""domainpar.kernels.segment_reduce against the plain formulation (index_add / indexing), gradients included."""

from __future__ import annotations

import pytest
import torch

from domainpar.kernels import segment_reduce as sr


@pytest.fixture(params=["numba", "torch"])
def backend(request, monkeypatch):
    """Run each test on the CPU numba kernels and on the device-generic torch path."""
    monkeypatch.setattr(sr, "USE_NUMBA", request.param == "numba")
    return request.param


def _index(num_edges: int, num_rows: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    index = torch.randint(0, num_rows, (num_edges,), generator=generator)
    index[:3] = num_rows - 1  # a crowded row
    return index


def test_sum_equals_index_add_with_empty_and_excluded_rows(backend):
    index = _index(300, 40, seed=1)
    index[index == 7] = 8  # row 7 gets no edge: an empty segment
    values = torch.randn(300, 5, dtype=torch.float64)
    for num_segments in (40, 25):  # 25: edges of rows >= 25 (halo) belong to no segment
        segments = sr.build_segments(index, num_segments)
        expected = torch.zeros(40, 5, dtype=torch.float64).index_add(0, index, values)[:num_segments]
        assert torch.allclose(sr.segment_sum(values, segments), expected, rtol=0, atol=1e-13)
        assert segments.complete == (num_segments == 40)


def test_cpu_grouping_is_the_stable_sort_and_its_offsets():
    """A CPU graph's segments by counting sort: the order and offsets of the stable sort (the device-generic path, run
    here on the same keys through meta-free torch ops), edges of no segment last, empty and crowded segments."""
    index = _index(4000, 300, seed=7)
    index[index == 11] = 12  # an empty segment
    for num_segments in (300, 120, 1):
        segments = sr.build_segments(index, num_segments)
        keys = torch.clamp(index, max=num_segments)
        perm = torch.argsort(keys, stable=True)
        assert torch.equal(segments.perm, perm)
        assert torch.equal(segments.offsets, torch.searchsorted(keys[perm], torch.arange(num_segments + 1)))
    empty = sr.build_segments(torch.zeros(0, dtype=torch.int64), 5)
    assert empty.perm.numel() == 0 and torch.equal(empty.offsets, torch.zeros(6, dtype=torch.int64))


def test_cpu_sum_is_bitwise_index_add_and_repeatable():
    index = _index(5000, 300, seed=2)
    values = torch.randn(5000, 16)
    segments = sr.build_segments(index, 300)
    first = sr.segment_sum(values, segments)
    assert torch.equal(first, torch.zeros(300, 16).index_add(0, index, values))
    assert torch.equal(first, sr.segment_sum(values, segments))


def test_scatter_sum_gradients(backend):
    index = _index(60, 12, seed=3)
    values = torch.randn(60, 3, dtype=torch.float64, requires_grad=True)
    for num_segments in (12, 7):
        segments = sr.build_segments(index, num_segments)
        assert torch.autograd.gradcheck(lambda v: sr.scatter_sum(v, segments), (values,))
        grad = torch.randn(num_segments, 3, dtype=torch.float64)
        (got,) = torch.autograd.grad(sr.scatter_sum(values, segments), values, grad)
        padded = torch.cat([grad, torch.zeros(12 - num_segments, 3, dtype=torch.float64)])
        assert torch.equal(got, padded[index])


def test_gather_add2_values_and_gradients(backend):
    src, dst = _index(80, 15, seed=4), _index(80, 15, seed=5)
    base = torch.randn(80, 4, dtype=torch.float64, requires_grad=True)
    rows_a = torch.randn(15, 4, dtype=torch.float64, requires_grad=True)
    rows_b = torch.randn(15, 4, dtype=torch.float64, requires_grad=True)
    seg_a, seg_b = sr.build_segments(src, 15), sr.build_segments(dst, 15)
    out = sr.gather_rows_add2(base, rows_a, seg_a, rows_b, seg_b)
    assert torch.allclose(out, base + rows_a[src] + rows_b[dst], rtol=0, atol=1e-14)
    grad = torch.randn(80, 4, dtype=torch.float64)
    got = torch.autograd.grad(out, (base, rows_a, rows_b), grad)
    want = torch.autograd.grad(base + rows_a[src] + rows_b[dst], (base, rows_a, rows_b), grad)
    for g, w in zip(got, want):
        assert torch.allclose(g, w, rtol=0, atol=1e-13)
    assert torch.autograd.gradcheck(lambda b, a, c: sr.gather_rows_add2(b, a, seg_a, c, seg_b), (base, rows_a, rows_b))


def test_gather_refuses_incomplete_segments():
    index = torch.tensor([0, 5, 2])
    with pytest.raises(ValueError, match="complete"):
        sr.gather_rows_add2(torch.zeros(3, 2), torch.zeros(3, 2), sr.build_segments(index, 3), torch.zeros(6, 2),
                            sr.build_segments(index, 6))


def test_shapes_without_data_on_meta():
    index = torch.randint(0, 10, (50,)).to("meta")
    segments = sr.build_segments(index, 10)
    out = sr.segment_sum(torch.empty(50, 4, device="meta"), segments)
    assert out.shape == (10, 4) and out.is_meta and segments.complete is False


def test_sums_of_edge_ranges_accumulate_into_out(backend):
    """Consecutive edge ranges summed into one ``out`` give the sum over all edges (on CPU bitwise: each row's
    running sum continues edge by edge, as chunked checkpointing relies on); halo edges are left out."""
    index = _index(3000, 200, seed=6)
    values = torch.randn(3000, 16)
    for num_segments in (200, 150):
        want = sr.segment_sum(values, sr.build_segments(index, num_segments))
        out = None
        for start in range(0, 3000, 700):
            part = sr.build_segments(index[start : start + 700], num_segments)
            chunk = values[start : start + 700]
            out = sr.segment_sum(chunk, part) if out is None else sr.segment_sum(chunk, part, out=out)
        if backend == "numba":
            assert torch.equal(out, want)
        else:
            assert torch.allclose(out, want, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="out must be"):
        sr.segment_sum(values, sr.build_segments(index, 200), out=torch.zeros(199, 16))


@pytest.mark.parametrize("threads", [1, 3])
def test_shared_sum_is_bitwise_segment_sum_on_any_threads(backend, threads, monkeypatch):
    from domainpar.kernels import chunks

    monkeypatch.setattr(chunks, "MIN_CHUNK", 64)  # several spans on a small input
    index = _index(6000, 500, seed=5)
    index[index == 11] = 12  # an empty segment
    values = torch.randn(6000, 8)
    for num_segments in (500, 310):  # 310: edges of the other rows belong to no segment (a part's halo)
        segments = sr.build_segments(index, num_segments)
        with chunks.using_threads(threads):
            shared = sr.segment_sum_shared(values, segments)
        assert torch.equal(shared, sr.segment_sum(values, segments))


def test_in_place_gather_is_bitwise_gather_add2(backend):
    generator = torch.Generator().manual_seed(6)
    base = torch.randn(700, 16, generator=generator)
    rows_a, rows_b = torch.randn(90, 16, generator=generator), torch.randn(120, 16, generator=generator)
    index_a, index_b = _index(700, 90, seed=7), _index(700, 120, seed=8)
    expected = sr.gather_add2(base, rows_a, index_a, rows_b, index_b)
    got = base.clone()
    assert sr.gather_add2_(got, rows_a, index_a, rows_b, index_b) is got
    assert torch.equal(got, expected)
    assert not torch.equal(got, base)

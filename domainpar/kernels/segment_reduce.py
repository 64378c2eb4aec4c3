"""Deterministic segment reductions between edges and nodes: sums over incident edges, and the gathers back.

A message-passing step moves data two ways between an (E, H) edge tensor and
an (N, H) node tensor:

* gather: ``rows[index]`` — every edge reads its node's row;
* segment sum: ``out[n] = Σ_{e : index[e] = n} values[e]`` — every node sums its edges.

Each is the other's adjoint, so the backward of one is the forward of the
other. ``index_add`` / ``index_put(accumulate=True)`` compute the sum with
atomics on GPUs, so their result depends on thread scheduling. Here the
edges are grouped once per graph by node (:class:`Segments`) and every
node's sum runs over its edges in ascending edge order: the result is
bitwise reproducible on every device and thread count, and on CPU bitwise
equal to ``index_add`` (which adds in edge order too).

Kernels: numba on CPU; on other devices ``torch.segment_reduce`` over the
edges in segment order. The gathers can run compiled (``compiled=True``,
:mod:`domainpar.kernels.compile`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from numba import njit, prange

from domainpar.kernels import compile as compiler
from domainpar.kernels.threads import follow_torch_threads


@dataclass(frozen=True, eq=False)
class Segments:
    """Edges grouped by the node (segment) their ``index`` names: the CSR form of an (E,) index vector.

    Edges whose index is ≥ ``num_segments`` belong to no segment (a part's halo
    rows when only owned rows are summed): sums skip them and their gradient is zero.
    """

    index: torch.Tensor
    """(E,) int64 segment of every edge (values ≥ num_segments: none)."""
    perm: torch.Tensor
    """(E,) int64 edge ids sorted by segment, ascending edge id within one; edges of no segment last."""
    offsets: torch.Tensor
    """(num_segments + 1,) int64: segment s holds ``perm[offsets[s]:offsets[s + 1]]``."""
    gather_index: torch.Tensor
    """(E,) int64 ``index`` with edges outside every segment sent to ``num_segments`` (a zero row)."""
    num_segments: int
    """Segments S (rows of a sum)."""
    complete: bool
    """Every edge belongs to a segment (False: some may not; always correct, only slower)."""

    @property
    def num_edges(self) -> int:
        return int(self.index.shape[0])


def _is_concrete(tensor: torch.Tensor) -> bool:
    # Plain tensors with data: not meta, not the fake tensors of memory tracing.
    return type(tensor) is torch.Tensor and not tensor.is_meta


def build_segments(index: torch.Tensor, num_segments: int, complete: bool | None = None) -> Segments:
    """Group the edges of ``index`` by segment (once per graph; a stable sort, O(E log E)).

    Args:
        index: (E,) int64 non-negative segment ids.
        num_segments: S; edges with ``index >= S`` are left out of every segment.
        complete: whether every index is < S, when the caller knows (None: computed, which reads the data).
    """
    if index.ndim != 1:
        raise ValueError(f"segment index must be one-dimensional (got shape {tuple(index.shape)})")
    index = index.to(torch.int64).contiguous()
    keys = torch.clamp(index, max=num_segments)
    if _is_concrete(keys) and keys.device.type == "cpu" and (keys.numel() == 0 or int(keys.min()) >= 0):
        # A counting sort: the stable sort's order and offsets in linear time (two sorts of a full event's edges
        # took 40 ms of a 0.9 s inference).
        from domainpar.kernels.grouping import group_by_key

        start, order = group_by_key(keys.numpy(), num_segments + 1)
        perm, offsets = torch.from_numpy(order), torch.from_numpy(start[: num_segments + 1])
    else:
        perm = torch.argsort(keys, stable=True)
        # Shapes never depend on the data (searchsorted, not bincount), so meta and fake tensors work too.
        offsets = torch.searchsorted(keys.index_select(0, perm), torch.arange(num_segments + 1, device=index.device))
    if complete is None:
        complete = bool(index.numel() == 0 or int(index.max()) < num_segments) if _is_concrete(index) else False
    return Segments(index=index, perm=perm, offsets=offsets, gather_index=keys, num_segments=num_segments, complete=complete)


# ----------------------------------------------------------------------------- CPU kernels (numba)

@njit(parallel=True, cache=True)
def _segment_sum_cpu(values, perm, offsets, out):  # pragma: no cover - compiled
    width = values.shape[1]
    for s in prange(out.shape[0]):
        for k in range(offsets[s], offsets[s + 1]):
            row = perm[k]
            for j in range(width):
                out[s, j] += values[row, j]


@njit(inline="always", cache=True)
def _gather_row(base, rows_a, ia, rows_b, ib, e, out):  # pragma: no cover - compiled
    for j in range(base.shape[1]):
        out[e, j] = base[e, j] + rows_a[ia, j] + rows_b[ib, j]


@njit(parallel=True, cache=True)
def _gather_add2_cpu(base, rows_a, index_a, rows_b, index_b, out):  # pragma: no cover - compiled
    for e in prange(base.shape[0]):
        _gather_row(base, rows_a, index_a[e], rows_b, index_b[e], e, out)


@njit(cache=True, nogil=True)
def _segment_sum_span(values, perm, offsets, out, first, last):  # pragma: no cover - compiled
    width = values.shape[1]
    for s in range(first, last):
        for k in range(offsets[s], offsets[s + 1]):
            row = perm[k]
            for j in range(width):
                out[s, j] += values[row, j]


@njit(cache=True, nogil=True)
def _gather_add2_into(base, rows_a, index_a, rows_b, index_b):  # pragma: no cover - compiled
    for e in range(base.shape[0]):
        _gather_row(base, rows_a, index_a[e], rows_b, index_b[e], e, base)


#: Use the numba kernels for CPU tensors (tests switch it off to check the torch path on CPU).
USE_NUMBA = True


def _numba_ok(*tensors: torch.Tensor) -> bool:
    return USE_NUMBA and all(
        _is_concrete(t) and t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64) for t in tensors
    )


def segment_sum(values: torch.Tensor, segments: Segments, out: torch.Tensor | None = None) -> torch.Tensor:
    """(E, H) values → (S, H) sums of each segment's edges, in ascending edge order (no autograd).

    Args:
        values: (E, H) one row per edge of ``segments``.
        segments: the grouping (:func:`build_segments`).
        out: (S, H) running sums to add into, in place (None: a new tensor). On CPU each row continues
            its running sum edge by edge, so sums over consecutive edge ranges added into one ``out``
            equal the sum over all of them in edge order, bitwise.
    """
    if values.ndim != 2 or values.shape[0] != segments.num_edges:
        raise ValueError(f"segment_sum expects ({segments.num_edges}, H) values (got {tuple(values.shape)})")
    if out is not None and (tuple(out.shape) != (segments.num_segments, values.shape[1]) or out.dtype != values.dtype):
        raise ValueError(f"segment_sum: out must be ({segments.num_segments}, {values.shape[1]}) {values.dtype} "
                         f"(got {tuple(out.shape)} {out.dtype})")
    if _numba_ok(values) and (out is None or (_numba_ok(out) and out.is_contiguous())):
        if out is None:
            out = torch.zeros(segments.num_segments, values.shape[1], dtype=values.dtype)
        follow_torch_threads()
        _segment_sum_cpu(values.detach().contiguous().numpy(), segments.perm.numpy(), segments.offsets.numpy(), out.detach().numpy())
        return out
    ordered = values.index_select(0, segments.perm)
    sums = torch.segment_reduce(ordered, "sum", offsets=segments.offsets, axis=0, unsafe=True)
    return sums if out is None else out.add_(sums)


def _gather_add2_math(static, base, rows_a, index_a, rows_b, index_b):
    return base + rows_a.index_select(0, index_a) + rows_b.index_select(0, index_b)


def gather_add2(
    base: torch.Tensor, rows_a: torch.Tensor, index_a: torch.Tensor, rows_b: torch.Tensor, index_b: torch.Tensor,
    compiled: bool = False,
) -> torch.Tensor:
    """``base + rows_a[index_a] + rows_b[index_b]`` in one pass (no autograd; a new tensor).

    ``compiled``: one Inductor kernel (the caller decided, :func:`domainpar.kernels.compile.use_compile`).
    """
    if compiled and base.ndim == 2 and base.shape[0] > 1:
        compiler.rows_dynamic(base, rows_a, index_a, rows_b, index_b)
        with torch.no_grad():
            return compiler.compiled(_gather_add2_math, None)(base, rows_a, index_a, rows_b, index_b)
    if _numba_ok(base, rows_a, rows_b) and base.dtype == rows_a.dtype == rows_b.dtype:
        out = torch.empty_like(base, memory_format=torch.contiguous_format)
        follow_torch_threads()
        _gather_add2_cpu(
            base.detach().contiguous().numpy(), rows_a.detach().contiguous().numpy(), index_a.numpy(),
            rows_b.detach().contiguous().numpy(), index_b.numpy(), out.numpy(),
        )
        return out
    return (base + rows_a.index_select(0, index_a)).add_(rows_b.index_select(0, index_b))


def segment_sum_shared(values: torch.Tensor, segments: Segments) -> torch.Tensor:
    """:func:`segment_sum` with its segments shared out over :func:`domainpar.kernels.chunks.build_threads` threads.

    Each segment is summed by one thread in ascending edge order, as :func:`segment_sum` sums it: the same bits on
    any number of threads. For callers outside torch's intra-op threads (the streamed inference), where numba's
    parallel launcher must not be entered from two threads at once.
    """
    if not (_numba_ok(values) and values.ndim == 2 and values.shape[0] == segments.num_edges):
        return segment_sum(values, segments)
    from domainpar.kernels import chunks  # the build's thread pool (it imports no torch)

    out = torch.zeros(segments.num_segments, values.shape[1], dtype=values.dtype)
    arrays = (values.detach().contiguous().numpy(), segments.perm.numpy(), segments.offsets.numpy(), out.numpy())
    pieces = max(1, min(4 * chunks.build_threads(), segments.num_edges // chunks.MIN_CHUNK))
    spans = chunks.weighted_bounds(arrays[2], pieces) if segments.num_segments else []
    chunks.run(lambda first, last: _segment_sum_span(*arrays, first, last), spans)
    return out


def gather_add2_(base: torch.Tensor, rows_a: torch.Tensor, index_a: torch.Tensor, rows_b: torch.Tensor,
                 index_b: torch.Tensor) -> torch.Tensor:
    """``base += rows_a[index_a] + rows_b[index_b]`` in place, on the calling thread (no autograd).

    The same sums, in the same order, as :func:`gather_add2` (``(base + a) + b`` per element), without its thread
    pool: a kernel many threads may run at once on rows of their own (the streamed inference of
    :mod:`domainpar.model.chunked`), where numba's parallel launcher must not be entered from two threads.

    Args:
        base: (E', H) contiguous rows, overwritten.
        rows_a, rows_b: (S, H) node rows; index_a, index_b: (E',) int64 rows of them.
    """
    if _numba_ok(base, rows_a, rows_b) and base.dtype == rows_a.dtype == rows_b.dtype and base.is_contiguous():
        _gather_add2_into(base.numpy(), rows_a.detach().contiguous().numpy(), index_a.numpy(),
                          rows_b.detach().contiguous().numpy(), index_b.numpy())
        return base
    return base.add_(rows_a.index_select(0, index_a)).add_(rows_b.index_select(0, index_b))


# ----------------------------------------------------------------------------- autograd

class _SegmentSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values: torch.Tensor, segments: Segments) -> torch.Tensor:  # type: ignore[override]
        ctx.segments = segments
        return segment_sum(values, segments)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        segments = ctx.segments
        if segments.complete:
            return grad.index_select(0, segments.index), None
        padded = torch.cat([grad, grad.new_zeros(1, grad.shape[1])])
        return padded.index_select(0, segments.gather_index), None


class _GatherAdd2(torch.autograd.Function):
    @staticmethod
    def forward(ctx, base, rows_a, segments_a: Segments, rows_b, segments_b: Segments, compiled: bool):  # type: ignore[override]
        ctx.segments = (segments_a, segments_b)
        return gather_add2(base, rows_a, segments_a.index, rows_b, segments_b.index, compiled)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        segments_a, segments_b = ctx.segments
        grad = grad.contiguous()
        grad_a = segment_sum(grad, segments_a) if ctx.needs_input_grad[1] else None
        grad_b = segment_sum(grad, segments_b) if ctx.needs_input_grad[3] else None
        return grad if ctx.needs_input_grad[0] else None, grad_a, None, grad_b, None, None


def scatter_sum(values: torch.Tensor, segments: Segments) -> torch.Tensor:
    """Differentiable :func:`segment_sum`: (E, H) → (S, H); its backward gathers the gradient rows."""
    return _SegmentSum.apply(values, segments)


def gather_rows_add2(
    base: torch.Tensor, rows_a: torch.Tensor, segments_a: Segments, rows_b: torch.Tensor, segments_b: Segments,
    compiled: bool = False,
) -> torch.Tensor:
    """Differentiable ``base + rows_a[a.index] + rows_b[b.index]``: (E, H), (S_a, H), (S_b, H) → (E, H).

    The backward sums the gradient rows of each row's edges with :func:`segment_sum`
    (deterministic, no atomics). Both segment groupings must be complete
    (every index < its number of rows). ``compiled``: the forward as one Inductor kernel.
    """
    if not (segments_a.complete and segments_b.complete):
        raise ValueError("gather_rows_add2 needs every edge index inside its rows (complete segments)")
    return _GatherAdd2.apply(base, rows_a, segments_a, rows_b, segments_b, compiled)

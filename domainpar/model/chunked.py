"""Checkpointed edge MLPs, recomputed in row chunks: backward's transient memory is one chunk.

An edge MLP of the Interaction Network is row-wise: edge k's output depends
on edge k's row of its input and on the rows of its two end nodes only,

    z_1 = W_in u_k + b + (W_src x)[src_k] + (W_dst x)[dst_k],   h_k = tail(z_1),

with u = e (an iteration: out = e + h, plus the sums of out over each owned
node's incoming and outgoing edges), u = edge_attr (the edge encoder: out =
h, no node terms) or u = e (the head: out = w·h + c, one logit).

:func:`chunked_edges` runs it as one autograd node that keeps only its
inputs (u and the node rows x, x_halo; under ``save_on_cpu`` in host
memory). The forward runs without autograd, chunk by chunk of edge rows;
the backward recomputes and back-propagates chunk by chunk, the node
projections' gradients summed per chunk over the chunk's edges grouped by
node (:class:`EdgeChunk`, deterministic segment sums), the parameters'
gradients summed over chunks in chunk order. So only one chunk of the
MLP's activations exists at once, and gradients are those of the plain
formulation up to the association of the sums over chunks (bitwise equal
with one chunk).

Where the MLP's tail runs as the fused CPU row kernels (:func:`~domainpar.model.lean.fusable`) the chunks call
them directly, without autograd, and backward's recomputation stops at z_L (the kernels' backward reads z_L). On
CPU the node projections' gradients accumulate chunk after chunk into one (rows, H) tensor, each row continuing its
running sum edge by edge: bitwise the unchunked sum.

An iteration's sums over incident edges are outputs of the node, so their
gradients arrive as (n_owned, H) rows and are gathered per chunk, fused
with the residual's gradient. The exchange stays outside (the node rows
x_halo are an input), so recomputation never repeats or skips a message.

Inference has its own path (:func:`streamed_edges`, :func:`streamed_rows`): grad mode off on CPU, every MLP runs
forward chunk by chunk of :data:`STREAM_ROWS` rows on the process's threads, so its activations stay in the cache;
each row gets the ops of the whole-tensor forward, so the logits are the same bits, except where
:func:`kernel_tail` runs an MLP's tail in place: there the forward's to float32 rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from domainpar.kernels import chunks as threads
from domainpar.kernels.segment_reduce import Segments, build_segments, gather_add2_, segment_sum, segment_sum_shared
from domainpar.model.lean import _layer_params, fusable, fused_tail_backward, fused_tail_forward

#: The automatic chunk count per device type; backward's transient is about E×H / chunks. Fewer on GPUs, where
#: the host-side cost of each chunk's calls to the compiled tail, not the arithmetic, sets the step time.
AUTO_CHUNKS = {"cpu": 16}
AUTO_CHUNKS_OTHER = 8
MIN_AUTO_ROWS = 4096
#: At most this many chunks: each keeps two groupings with an offset per local row (O(rows) int64 each).
MAX_CHUNKS = 64


def chunk_rows(setting: int, num_edges: int, device_type: str = "cpu") -> int:
    """Rows per chunk for ``num_edges`` edges: ``setting`` if positive, else automatic (see :data:`AUTO_CHUNKS`).

    A positive ``setting`` is raised where it would make more than :data:`MAX_CHUNKS` chunks.

    Args:
        setting: ``ModelConfig.chunk_rows`` (0: automatic).
        num_edges: E.
        device_type: where the edges live (``torch.device.type``): the automatic count depends on it.
    """
    if setting > 0:
        return max(setting, -(-num_edges // MAX_CHUNKS))
    chunks = AUTO_CHUNKS.get(device_type, AUTO_CHUNKS_OTHER)
    return max(MIN_AUTO_ROWS, -(-num_edges // chunks))


@dataclass(frozen=True, eq=False)
class EdgeChunk:
    """A contiguous range of edge rows and, for the node terms' gradients, its edges grouped by node."""

    start: int
    """First edge row."""
    stop: int
    """One past the last edge row."""
    src: Segments | None
    """The chunk's edges by source row among the local rows (None: no node terms)."""
    dst: Segments | None
    """The chunk's edges by destination row among the local rows (None: no node terms)."""


def edge_chunks(src: torch.Tensor | None, dst: torch.Tensor | None, num_edges: int, num_rows: int, rows: int) -> list[EdgeChunk]:
    """Split ``num_edges`` edge rows into chunks of ``rows`` (at least one chunk, maybe empty).

    Args:
        src, dst: (E,) local row of every edge's ends (< ``num_rows``), or None for MLPs without node terms.
        num_edges: E.
        num_rows: local node rows (owned + halo).
        rows: rows per chunk (positive).
    """
    bounds = list(range(0, num_edges, rows)) or [0]
    chunks = []
    for start in bounds:
        stop = min(num_edges, start + rows)
        grouped = src is not None
        chunks.append(EdgeChunk(
            start, stop,
            build_segments(src[start:stop], num_rows, complete=True) if grouped else None,
            build_segments(dst[start:stop], num_rows, complete=True) if grouped else None,
        ))
    return chunks


@dataclass(frozen=True, eq=False)
class EdgePlan:
    """What one chunked edge MLP computes (everything but the tensors)."""

    kind: str
    """``"encoder"`` (out = h), ``"update"`` (out = u + h and its sums per owned node) or ``"head"`` (out = logit)."""
    mlp: nn.Module
    """The MLP (``linears``, ``norms``, ``activation``); for update and head its first layer reads [x_src, x_dst, u]."""
    chunks: list[EdgeChunk]
    """The edge rows in chunks."""
    tail: Callable[[nn.Module, torch.Tensor], torch.Tensor]
    """``tail(mlp, z1)``: the MLP after its first Linear, differentiable (fused, compiled or plain)."""
    gather: Callable[..., torch.Tensor]
    """``gather(base, rows_a, index_a, rows_b, index_b)`` = base + rows_a[index_a] + rows_b[index_b], no autograd."""
    src: Segments | None = None
    """Edges by source among the local rows (update, head)."""
    dst: Segments | None = None
    """Edges by destination among the local rows (update, head)."""
    sum_in: Segments | None = None
    """Edges by destination among the owned rows (update: the sum over incoming edges)."""
    sum_out: Segments | None = None
    """Edges by source among the owned rows (update: the sum over outgoing edges)."""
    out: nn.Linear | None = None
    """The head's output layer (H → 1)."""
    compiled: Callable[[torch.Tensor], bool] = lambda tensor: False
    """Whether ``tail`` runs compiled on a tensor like this one (else the fused CPU row kernels may run it directly)."""

    @property
    def has_nodes(self) -> bool:
        return self.kind != "encoder"


def _params(plan: EdgePlan) -> list[torch.Tensor]:
    first = plan.mlp.linears[0]
    params = [first.weight, first.bias, *_layer_params(plan.mlp)]
    if plan.out is not None:
        params += [plan.out.weight, plan.out.bias]
    return params


def _padded(rows: torch.Tensor) -> torch.Tensor:
    # One zero row more: edges outside every segment (halo rows of an owned-rows sum) gather it.
    return torch.cat([rows, rows.new_zeros(1, rows.shape[1])])


class _ChunkedEdges(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, plan: EdgePlan, u: torch.Tensor, x: torch.Tensor | None, x_halo: torch.Tensor | None, *params):  # type: ignore[override]
        ctx.plan = plan
        ctx.save_for_backward(u, x, x_halo)
        first = plan.mlp.linears[0]
        nodes = _node_terms(plan, first, x, x_halo)
        w_in = first.weight[:, 2 * plan.mlp.linears[0].out_features :] if plan.has_nodes else first.weight
        out = None
        for chunk in plan.chunks:
            u_c = u[chunk.start : chunk.stop]
            z1 = _first_layer(plan, chunk, u_c, w_in, first.bias, nodes)
            if plan.kind != "head" and _fused(plan, z1):
                # The row kernels write the chunk's h into its rows of the output (no chunk-sized copy).
                if out is None:
                    out = z1.new_empty((u.shape[0], z1.shape[1]))
                rows = out[chunk.start : chunk.stop]
                fused_tail_forward(plan.mlp, z1, keep=False, out=rows)
                del z1
                if plan.kind == "update":
                    rows.add_(u_c)  # h + u = u + h bitwise (one rounding of a commutative sum)
                continue
            h = plan.tail(plan.mlp, z1)
            del z1
            if plan.kind == "head":
                value = F.linear(h, plan.out.weight, plan.out.bias).squeeze(-1)
            elif plan.kind == "update":
                value = u_c + h
            else:
                value = h
            del h
            if out is None:
                out = value.new_empty((u.shape[0],) + tuple(value.shape[1:]))
            out[chunk.start : chunk.stop] = value
            del value
        if plan.kind != "update":
            return out
        sum_in = segment_sum(out, plan.sum_in)
        sum_out = segment_sum(out, plan.sum_out)
        return out, sum_in, sum_out

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, *grads: torch.Tensor | None):  # type: ignore[override]
        plan: EdgePlan = ctx.plan
        u, x, x_halo = ctx.saved_tensors
        first = plan.mlp.linears[0]
        hidden = first.out_features
        params = _params(plan)
        tail_params = _layer_params(plan.mlp) + ([plan.out.weight, plan.out.bias] if plan.out is not None else [])
        with torch.no_grad():
            nodes = _node_terms(plan, first, x, x_halo)
            w_in = first.weight[:, 2 * hidden :] if plan.has_nodes else first.weight
            grad_out = grads[0]
            if grad_out is None:
                shape = (u.shape[0],) if plan.kind == "head" else (u.shape[0], hidden)
                grad_out = u.new_zeros(shape)
            if plan.kind == "update":
                grad_in = grads[1] if grads[1] is not None else u.new_zeros(plan.sum_in.num_segments, hidden)
                grad_out_sum = grads[2] if grads[2] is not None else u.new_zeros(plan.sum_out.num_segments, hidden)
                # A complete grouping (no halo rows) never gathers the zero row: no padded copy.
                grad_in = grad_in if plan.sum_in.complete else _padded(grad_in)
                grad_out_sum = grad_out_sum if plan.sum_out.complete else _padded(grad_out_sum)
            grad_u = torch.empty_like(u) if ctx.needs_input_grad[1] else None
            grad_w_in = grad_bias = None
            grad_tail: list[torch.Tensor | None] = [None] * len(tail_params)
            grad_src = grad_dst = None
        for chunk in plan.chunks:
            with torch.no_grad():
                u_c = u[chunk.start : chunk.stop]
                g = grad_out[chunk.start : chunk.stop]
                if plan.kind == "update":
                    # Residual and both sums read e' = u + h: their gradients meet here, gathered per chunk.
                    g = plan.gather(g, grad_in, plan.sum_in.gather_index[chunk.start : chunk.stop],
                                    grad_out_sum, plan.sum_out.gather_index[chunk.start : chunk.stop])
                z1 = _first_layer(plan, chunk, u_c, w_in, first.bias, nodes)
                got = _fused_chunk_grads(plan, z1, g) if _fused(plan, z1) else None
            if got is None:
                with torch.enable_grad():
                    z1 = z1.detach().requires_grad_(True)
                    # The tail reads a view of the leaf: module hooks that watch their inputs' gradients (torch's
                    # MemTracker, register_multi_grad_hook) refuse a leaf inside this nested autograd.grad.
                    h = plan.tail(plan.mlp, z1.view_as(z1))
                    top = F.linear(h, plan.out.weight, plan.out.bias).squeeze(-1) if plan.kind == "head" else h
                    wrt = [z1] + [p for p in tail_params if p.requires_grad]
                    got = list(torch.autograd.grad(top, wrt, g, allow_unused=True))
                del h, top
            with torch.no_grad():
                grad_z1 = got[0]
                rest = iter(got[1:])
                for i, p in enumerate(tail_params):
                    if p.requires_grad:
                        grad_tail[i] = _accumulate(grad_tail[i], next(rest))
                if grad_u is not None:
                    # F.linear's input gradient, plus the residual's for an iteration, into the chunk's rows
                    # (written in place where no autocast would change the product's precision).
                    rows = grad_u[chunk.start : chunk.stop]
                    if grad_z1.dtype == rows.dtype and not torch.is_autocast_enabled(rows.device.type):
                        torch.mm(grad_z1, w_in, out=rows)
                        if plan.kind == "update":
                            rows.add_(g)
                    else:
                        gu = grad_z1.mm(w_in)
                        rows[...] = gu + g if plan.kind == "update" else gu
                        del gu
                grad_w_in = _accumulate(grad_w_in, grad_z1.t().mm(u_c))
                grad_bias = _accumulate(grad_bias, grad_z1.sum(0))
                if plan.has_nodes:
                    grad_src = _sum_into(grad_src, grad_z1, chunk.src)
                    grad_dst = _sum_into(grad_dst, grad_z1, chunk.dst)
            del grad_z1, got, g, z1
        with torch.no_grad():
            grad_x = grad_halo = None
            if plan.has_nodes:
                rows = nodes[2]
                grad_rows = grad_src.mm(nodes[3]) + grad_dst.mm(nodes[4])
                grad_weight = torch.cat([grad_src.t().mm(rows), grad_dst.t().mm(rows), grad_w_in], dim=1)
                n_owned = x.shape[0]
                grad_x = grad_rows[:n_owned] if ctx.needs_input_grad[2] else None
                grad_halo = grad_rows[n_owned:] if ctx.needs_input_grad[3] else None
            else:
                grad_weight = grad_w_in
            out_grads = [grad_weight, grad_bias, *grad_tail]
            out_grads = [None if g is None else g.to(p.dtype) for g, p in zip(out_grads, params)]
        return (None, grad_u, grad_x, grad_halo, *out_grads)


def _fused(plan: EdgePlan, z1: torch.Tensor) -> bool:
    """Whether the chunk's tail runs as the fused CPU row kernels (then forward and backward call them directly)."""
    return fusable(plan.mlp, z1, plan.compiled(z1))


def _fused_chunk_grads(plan: EdgePlan, z1: torch.Tensor, g: torch.Tensor) -> list[torch.Tensor | None]:
    """[grad z_1, grads of the tail's parameters that require grad] of one chunk, by the row kernels (no autograd).

    The recomputation stops at z_L where the output a_L is not needed (encoder, update: the gradient of a_L is
    ``g`` itself, and the kernels' backward reads z_L); the head needs a_L for its output layer's weight.
    """
    head = plan.kind == "head"
    zs, kept, h = fused_tail_forward(plan.mlp, z1, keep=True, last=head)
    extra: list[torch.Tensor] = []
    grad_h = g
    if head:
        # F.linear(h, w, c).squeeze(-1)'s backward, as autograd computes it.
        g_col = g.unsqueeze(1)
        grad_h = g_col.mm(plan.out.weight)
        extra = [g_col.t().mm(h), g_col.sum(0)]
    del h
    grad_z1, tail_grads, _ = fused_tail_backward(plan.mlp, zs, kept, grad_h)
    params = _layer_params(plan.mlp) + ([plan.out.weight, plan.out.bias] if head else [])
    return [grad_z1] + [grad for grad, p in zip(tail_grads + extra, params) if p.requires_grad]


def _sum_into(total: torch.Tensor | None, values: torch.Tensor, segments: Segments) -> torch.Tensor:
    """``total`` plus the segment sums of ``values``: on CPU added row by row into ``total`` (each node's sum then
    runs over the chunks' edges in edge order, as one unchunked sum does), elsewhere summed per chunk and added."""
    if total is not None and total.dtype == values.dtype:
        return segment_sum(values, segments, out=total)
    return _accumulate(total, segment_sum(values, segments))


def _accumulate(total: torch.Tensor | None, part: torch.Tensor | None) -> torch.Tensor | None:
    """``total + part`` over chunks, in chunk order (the first part as is: one chunk is the unchunked value)."""
    if part is None:
        return total
    if part.dtype in (torch.float16, torch.bfloat16):
        part = part.float()  # autocast's half-precision products are summed over chunks in float32
    return part if total is None else total.add_(part)


def _node_terms(plan: EdgePlan, first: nn.Linear, x, x_halo):
    """(W_src rows, W_dst rows, the node rows, W_src, W_dst) of update and head; None for the encoder."""
    if not plan.has_nodes:
        return None
    hidden = first.out_features
    rows = torch.cat([x, x_halo]) if x_halo is not None and x_halo.shape[0] else x
    w_src, w_dst = first.weight[:, :hidden], first.weight[:, hidden : 2 * hidden]
    return F.linear(rows, w_src), F.linear(rows, w_dst), rows, w_src, w_dst


def _first_layer(plan: EdgePlan, chunk: EdgeChunk, u_c, w_in, bias, nodes) -> torch.Tensor:
    """The first Linear's output z_1 of the chunk's edges (the same ops as the unchunked model)."""
    base = F.linear(u_c, w_in, bias)
    if nodes is None:
        return base
    return plan.gather(base, nodes[0], plan.src.index[chunk.start : chunk.stop], nodes[1], plan.dst.index[chunk.start : chunk.stop])


#: Rows per chunk of :func:`streamed_edges`: a chunk's few (rows, H) activations stay in the cache through the whole
#: MLP. A multiple of 64, so every chunk but the last covers whole row blocks of the BLAS's kernels and the last ends
#: where the whole tensor ends: a chunk's products are the bits of the unchunked ones.
STREAM_ROWS = 4096


def streamed_edges(plan: EdgePlan, u: torch.Tensor, x: torch.Tensor | None = None, x_halo: torch.Tensor | None = None,
                   rows: int | None = None, in_place: bool = False):
    """:func:`chunked_edges`' forward for inference: no autograd, the chunks shared over threads (:func:`_share`).

    Every row is computed by one chunk with the ops of the unchunked model, so the output is the same bits on any
    number of threads, and the same as the plain forward's (to float32 rounding where :func:`kernel_tail` runs the
    tail).

    Args and returns: as :func:`chunked_edges`; ``rows``: edge rows per chunk (a positive multiple of 64; None:
    :data:`STREAM_ROWS`); ``in_place``: an update writes e' = u + h into u's rows (u is then the returned e'; each
    chunk reads its rows of u before it writes them, and no other chunk reads them), sparing a new (E, H) tensor.
    """
    rows = STREAM_ROWS if rows is None else rows
    if torch.is_grad_enabled() or u.device.type != "cpu":
        raise RuntimeError("streamed_edges is the CPU inference path: call it with grad mode off on CPU tensors")
    if rows <= 0 or rows % 64:
        raise ValueError(f"rows must be a positive multiple of 64 (got {rows})")
    first = plan.mlp.linears[0]
    hidden = first.out_features
    nodes = _node_terms(plan, first, x, x_halo)
    w_in = first.weight[:, 2 * hidden :] if plan.has_nodes else first.weight
    num_edges = u.shape[0]
    if in_place and plan.kind == "update" and u.is_contiguous():
        out = u
    else:
        out = u.new_empty((num_edges,) if plan.kind == "head" else (num_edges, hidden))
    if num_edges == 0:
        return (out, segment_sum(out, plan.sum_in), segment_sum(out, plan.sum_out)) if plan.kind == "update" else out

    def run(first_chunk: int, last_chunk: int) -> None:
        with torch.no_grad():  # grad mode is per thread
            for start in range(first_chunk * rows, min(last_chunk * rows, num_edges), rows):
                stop = min(start + rows, num_edges)
                u_c = u[start:stop]
                z1 = F.linear(u_c, w_in, first.bias)
                if nodes is not None:
                    gather_add2_(z1, nodes[0], plan.src.index[start:stop], nodes[1], plan.dst.index[start:stop])
                h = None if plan.compiled(z1) else kernel_tail(plan.mlp, z1)
                h = plan.tail(plan.mlp, z1) if h is None else h
                if plan.kind == "head":
                    out[start:stop] = F.linear(h, plan.out.weight, plan.out.bias).squeeze(-1)
                elif plan.kind == "update":
                    torch.add(u_c, h, out=out[start:stop])  # out may be u itself: u_c is read first, row by row
                else:
                    out[start:stop] = h

    _share(run, num_edges, rows, plan.mlp, u)
    if plan.kind != "update":
        return out
    return out, segment_sum_shared(out, plan.sum_in), segment_sum_shared(out, plan.sum_out)


def streamed_rows(mlp: nn.Module, tail: Callable[[nn.Module, torch.Tensor], torch.Tensor], inputs: list[torch.Tensor],
                  residual: torch.Tensor | None = None, rows: int | None = None,
                  compiled: Callable[[torch.Tensor], bool] = lambda rows: False) -> torch.Tensor:
    """``residual + mlp(cat(inputs, dim=1))`` (or without the residual) on node rows, streamed like
    :func:`streamed_edges`: no autograd, chunks of rows in the cache, on the build's threads, the same bits as the
    whole-tensor ops, or their values to float32 rounding where :func:`kernel_tail` runs (the concatenation too is
    made per chunk, never for all rows at once).

    Args:
        mlp: the MLP (``linears``, ``norms``, ``activation``); its first layer reads the concatenated inputs.
        tail: ``tail(mlp, z1)``, the MLP after its first Linear.
        inputs: (n, F_i) row-aligned inputs.
        residual: (n, H) rows added to the output, or None.
        rows: rows per chunk (a positive multiple of 64; None: :data:`STREAM_ROWS`).
        compiled: whether ``tail`` runs compiled on a chunk (then :func:`kernel_tail` does not replace it).
    """
    rows = STREAM_ROWS if rows is None else rows
    if torch.is_grad_enabled() or inputs[0].device.type != "cpu":
        raise RuntimeError("streamed_rows is the CPU inference path: call it with grad mode off on CPU tensors")
    if rows <= 0 or rows % 64:
        raise ValueError(f"rows must be a positive multiple of 64 (got {rows})")
    first = mlp.linears[0]
    num_rows = inputs[0].shape[0]
    out = inputs[0].new_empty((num_rows, first.out_features))

    def run(first_chunk: int, last_chunk: int) -> None:
        with torch.no_grad():
            for start in range(first_chunk * rows, min(last_chunk * rows, num_rows), rows):
                stop = min(start + rows, num_rows)
                pieces = [rows_[start:stop] for rows_ in inputs]
                z1 = first(torch.cat(pieces, dim=1) if len(pieces) > 1 else pieces[0])
                h = None if compiled(z1) else kernel_tail(mlp, z1)
                h = tail(mlp, z1) if h is None else h
                if residual is None:
                    out[start:stop] = h
                else:
                    torch.add(residual[start:stop], h, out=out[start:stop])

    _share(run, num_rows, rows, mlp, out)
    return out


def kernel_tail(mlp: nn.Module, z1: torch.Tensor) -> torch.Tensor | None:
    """``mlp.tail(z1)`` for streamed inference, in ``z1``'s memory and one more chunk, where it pays; None elsewhere.

    It applies to float32 CPU rows of an MLP with a LayerNorm on every layer and SiLU (ReLU and LeakyReLU have the
    fused row kernels, :func:`~domainpar.model.lean.fusable`). Each product is written without its bias
    (``torch.mm``), each norm adds it and normalises in place (:func:`~domainpar.kernels.rownorm.layer_norm_rows`)
    and SiLU runs in place. The values equal ``mlp.tail(z1)``'s to float32 rounding (the norms' sums are
    vectorised); each row's are the same bits on any thread count and in any chunk. ``z1`` is overwritten.
    """
    norms = getattr(mlp, "norms", None)
    if (z1.dtype != torch.float32 or z1.device.type != "cpu" or not z1.is_contiguous() or z1.ndim != 2
            or not isinstance(getattr(mlp, "activation", None), nn.SiLU) or norms is None
            or not all(isinstance(norm, nn.LayerNorm) for norm in norms)):  # fmt: skip
        return None
    from domainpar.kernels.rownorm import layer_norm_rows  # numba loads where the model infers

    rows, spare = z1, None
    for index, (linear, norm) in enumerate(zip(mlp.linears, norms)):
        if index == 0:
            shift = np.zeros(rows.shape[1], np.float32)  # z1 holds the first Linear's bias already
        else:
            out = torch.empty_like(rows) if spare is None else spare
            spare, rows = rows, torch.mm(rows, linear.weight.t(), out=out)
            shift = linear.bias.detach().numpy()
        layer_norm_rows(rows.numpy(), shift, norm.weight.detach().numpy(), norm.bias.detach().numpy(), norm.eps)
        F.silu(rows, inplace=True)
    return rows


def _share(run: Callable[[int, int], None], num_rows: int, rows: int, mlp: nn.Module, like: torch.Tensor) -> None:
    """``run`` over the chunks of ``num_rows`` rows: on the build's threads, or on this one where the MLP's tail
    runs as the numba-parallel fused row kernels (they must not be entered from two threads at once) or where torch
    splits each op over its own intra-op threads already (threads of threads would oversubscribe the cores)."""
    num_chunks = -(-num_rows // rows)
    if num_chunks <= 1 or torch.get_num_threads() > 1 or fusable(mlp, like.new_empty((1, mlp.linears[0].out_features))):
        run(0, num_chunks)
        return
    threads.run(run, threads.bounds(num_chunks, 4 * threads.build_threads(), max(1, threads.MIN_CHUNK // rows)))


def chunked_edges(plan: EdgePlan, u: torch.Tensor, x: torch.Tensor | None = None, x_halo: torch.Tensor | None = None):
    """The edge MLP of ``plan`` on edge rows ``u``, keeping only (u, x, x_halo) for backward.

    Args:
        plan: what to compute (:class:`EdgePlan`).
        u: (E, F) edge rows: edge_attr for the encoder, e for an iteration and the head.
        x: (n_owned, H) owned node rows (update, head).
        x_halo: (n_halo, H) halo node rows (update, head; may have no rows).

    Returns:
        encoder: (E, H) h; update: ((E, H) e' = u + h, (n_owned, H) sums of e' over incoming edges, same over outgoing);
        head: (E,) logits.
    """
    return _ChunkedEdges.apply(plan, u, x, x_halo, *_params(plan))

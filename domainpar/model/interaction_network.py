"""A partition-aware Interaction Network edge classifier.

The network of the HEP.TrkX / Exa.TrkX family (InteractionGNN): node and edge
encoders, ``num_iterations`` residual message-passing steps

    e' = e + phi_e([x_src, x_dst, e])              every local edge
    x' = x + phi_n([x, sum_in e', sum_out e'])     owned nodes only

and an edge classifier head on [x_src, x_dst, e] giving one logit per edge.

It runs on a :class:`~domainpar.partition.local_graph.LocalGraph` and an
:class:`~domainpar.model.exchange.Exchange`. Before every step that reads
neighbour rows (each iteration and the head) the owned node rows are
exchanged, so halo rows always hold their owners' current values; halo nodes
are never updated locally. With :class:`IdentityExchange` and a one-part graph
it is an ordinary single-graph model: same weights, same code path.

The first linear layer of every [x_src, x_dst, e] MLP is split into
W_src x_src + W_dst x_dst + W_e e, and the node terms are computed on node
rows before gathering to edges (project-then-gather). Gathers and sums over
incident edges are the deterministic segment kernels of
:mod:`domainpar.kernels.segment_reduce`.

Without ``overlap`` an iteration is one pass over all local edges. With
``overlap`` it is computed in two segments: (A) projections of owned rows and
the interior edges (both ends owned), which need no halo, while the halo
exchange is in flight; (B) halo projections, boundary edges and the node update.

With ``checkpointing`` every edge MLP is one autograd node that keeps only its
inputs and recomputes its edges in backward chunk by chunk
(:mod:`domainpar.model.chunked`); the node updates and the node encoder are
regions recomputed whole (:mod:`domainpar.model.recompute`). With ``overlap``
each segment is such a region instead, its MLPs keeping only their
pre-normalisation rows (:mod:`domainpar.model.lean`). The exchange itself is
always outside the nodes and regions, so recomputation never repeats or skips
a message and stays exact.

Inference on CPU (grad mode off, no overlap, not compiled) streams every MLP
through the cache in chunks of rows (:func:`~domainpar.model.chunked.streamed_edges`).
``compile`` runs the row-wise pieces as Inductor-compiled fused kernels
(:mod:`domainpar.kernels.compile`); the halo exchange is never inside a
compiled function.
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from domainpar.errors import DomainparError
from domainpar.kernels import compile as compiler
from domainpar.kernels.segment_reduce import Segments, build_segments, gather_add2, gather_rows_add2, scatter_sum
from domainpar.model.chunked import (
    EdgeChunk, EdgePlan, chunk_rows, chunked_edges, edge_chunks, streamed_edges, streamed_rows,
)
from domainpar.model.config import ACTIVATIONS, OPTIONAL_SETTINGS, ModelConfig, check_widths
from domainpar.model.exchange import Exchange, IdentityExchange
from domainpar.model.lean import mlp_tail
from domainpar.model.recompute import recompute
from domainpar.partition.local_graph import LocalGraph

class MLP(nn.Module):
    """``depth`` × (Linear → optional LayerNorm → activation).

    :meth:`tail` continues from the output of the first Linear, so callers can
    compute that first layer themselves (project-then-gather).
    """

    def __init__(self, in_features: int, hidden: int, depth: int, activation: str, layer_norm: bool) -> None:
        super().__init__()
        self.linears = nn.ModuleList(
            [nn.Linear(in_features if i == 0 else hidden, hidden) for i in range(depth)]
        )
        self.norms = nn.ModuleList([nn.LayerNorm(hidden) if layer_norm else nn.Identity() for _ in range(depth)])
        self.activation = ACTIVATIONS[activation]()

    @property
    def first(self) -> nn.Linear:
        return self.linears[0]

    def tail(self, h: torch.Tensor) -> torch.Tensor:
        """(rows, H) output of the first Linear → (rows, H) output of the MLP."""
        h = self.activation(self.norms[0](h))
        for linear, norm in zip(self.linears[1:], self.norms[1:]):
            h = self.activation(norm(linear(h)))
        return h

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tail(self.first(x))


class PairMLP(nn.Module):
    """An MLP on [x_src, x_dst, e] per edge, computed project-then-gather.

    The first layer W [x_src, x_dst, e] + b is split into
    (W_src x)[src] + (W_dst x)[dst] + W_e e + b; the node projections are
    computed once per node row (:meth:`project`) and gathered per edge.
    """

    def __init__(self, hidden: int, depth: int, activation: str, layer_norm: bool) -> None:
        super().__init__()
        self.hidden = hidden
        self.mlp = MLP(3 * hidden, hidden, depth, activation, layer_norm)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(n, H) node rows → ((n, H) W_src x, (n, H) W_dst x)."""
        weight, h = self.mlp.first.weight, self.hidden
        return F.linear(x, weight[:, :h]), F.linear(x, weight[:, h : 2 * h])


#: Graphs whose grouping the model keeps at once (a graph is grouped once; a step uses a few).
MAX_CACHED_GRAPHS = 8


@dataclass(frozen=True, eq=False)
class _Structure:
    """A local graph's edges grouped by node, for the segment kernels (built once per graph)."""

    src_local: Segments | None
    """Edges by source among all local rows (no-overlap gathers)."""
    dst_local: Segments | None
    """Edges by destination among all local rows (no-overlap gathers)."""
    src_interior: Segments | None
    """Interior edges by source among owned rows (overlap segment A)."""
    dst_interior: Segments | None
    """Interior edges by destination among owned rows (overlap segment A)."""
    src_boundary: Segments | None
    """Boundary edges by source among all local rows (overlap segment B)."""
    dst_boundary: Segments | None
    """Boundary edges by destination among all local rows (overlap segment B)."""
    dst_owned: Segments
    """All local edges by destination, owned rows only (the sum over incoming edges)."""
    src_owned: Segments
    """All local edges by source, owned rows only (the sum over outgoing edges)."""
    chunks: dict = field(default_factory=dict)
    """(with node terms, rows per chunk) → the edges in chunks (:func:`~domainpar.model.chunked.edge_chunks`), built on first use."""


class InteractionNetwork(nn.Module):
    """Edge classifier: one logit per local edge of a (local) event graph.

    Args:
        config: hyper-parameters.
    """

    #: Every shared setting of :class:`ModelConfig` (memory and speed options included).
    settings = frozenset(OPTIONAL_SETTINGS)
    description = "domainpar's Interaction Network: residual edge and node updates, project-then-gather, checkpointing, overlap"

    def __init__(self, config: ModelConfig = ModelConfig()) -> None:
        super().__init__()
        c = config
        self.config = config
        self.node_encoder = MLP(c.node_features, c.hidden, c.mlp_layers, c.activation, c.layer_norm)
        if c.edge_inputs:
            self.edge_encoder = MLP(c.edge_inputs, c.hidden, c.mlp_layers, c.activation, c.layer_norm)
        else:
            # No edge inputs: every edge starts from one learned vector; the first
            # iteration's phi_e([x_src, x_dst, e]) makes it edge-specific.
            self.edge_init = nn.Parameter(torch.zeros(c.hidden))
        num_networks = min(1, c.num_iterations) if c.recurrent else c.num_iterations
        self.edge_networks = nn.ModuleList(
            [PairMLP(c.hidden, c.mlp_layers, c.activation, c.layer_norm) for _ in range(num_networks)]
        )
        self.node_networks = nn.ModuleList(
            [MLP(3 * c.hidden, c.hidden, c.mlp_layers, c.activation, c.layer_norm) for _ in range(num_networks)]
        )
        self.head = PairMLP(c.hidden, c.mlp_layers, c.activation, c.layer_norm)
        self.head_output = nn.Linear(c.hidden, 1)
        # id(edge_index) → (weak reference to it, its _Structure): a graph's grouping lives as long as the graph
        # (tensors compare elementwise, so they cannot be WeakKeyDictionary keys).
        self._structures: dict[int, tuple[weakref.ref, _Structure]] = {}

    def __getstate__(self) -> dict:
        # Copies and pickles start with an empty grouping cache (weak references do not copy).
        state = self.__dict__.copy()
        state["_structures"] = {}
        return state

    # ---- graph structure (once per graph) ----

    def _structure(self, graph: LocalGraph) -> _Structure:
        key = graph.edge_index
        found = self._structures.get(id(key))
        if found is not None and found[0]() is key:
            return found[1]
        # Copies, not views of edge_index: a view keeps its base alive, so a grouping holding one would keep its own
        # cache key alive and every graph ever seen would stay cached.
        src, dst = graph.edge_index[0].clone(), graph.edge_index[1].clone()
        n_owned, n_local, n_int = graph.num_owned, graph.num_local_nodes, graph.num_interior_edges
        overlap = self.config.overlap
        # Local ids are < n_local and interior edges join owned rows, so those groupings are complete;
        # the owned-row sums leave out the edges of halo rows.
        whole = graph.num_halo == 0
        src_local = None if overlap else build_segments(src, n_local, complete=True)
        dst_local = None if overlap else build_segments(dst, n_local, complete=True)
        # Without halo rows the owned rows are the local ones (n_owned == n_local): the same groupings, sorted once.
        same = whole and not overlap
        structure = _Structure(
            src_local=src_local,
            dst_local=dst_local,
            src_interior=build_segments(src[:n_int], n_owned, complete=True) if overlap else None,
            dst_interior=build_segments(dst[:n_int], n_owned, complete=True) if overlap else None,
            src_boundary=build_segments(src[n_int:], n_local, complete=True) if overlap else None,
            dst_boundary=build_segments(dst[n_int:], n_local, complete=True) if overlap else None,
            dst_owned=dst_local if same else build_segments(dst, n_owned, complete=whole),
            src_owned=src_local if same else build_segments(src, n_owned, complete=whole),
        )
        self._structures[id(key)] = (weakref.ref(key), structure)
        weakref.finalize(key, self._structures.pop, id(key), None)
        while len(self._structures) > MAX_CACHED_GRAPHS:  # a bound too, whatever else keeps a graph alive
            self._structures.pop(next(iter(self._structures)))
        return structure

    # ---- the pieces (pure functions of tensors; none of them communicates) ----

    def _networks(self, iteration: int) -> tuple["PairMLP", "MLP"]:
        index = min(iteration, len(self.edge_networks) - 1)
        return self.edge_networks[index], self.node_networks[index]

    def _compiled(self, tensor: torch.Tensor) -> bool:
        """Whether the row-wise pieces on ``tensor`` run compiled (``config.compile``)."""
        use = compiler.use_compile(self.config.compile, tensor)
        if use and self.config.compile == "on" and not compiler.available(tensor.device.type):
            raise DomainparError(
                f"model compile is 'on' but torch.compile cannot generate code for {tensor.device.type} here "
                "(CUDA needs Triton, CPU a C++ compiler); use compile 'auto' or 'off'"
            )
        return use

    def _tail(self, mlp: "MLP", z: torch.Tensor) -> torch.Tensor:
        # Checkpointed regions keep only the pre-normalisation rows of their MLPs (recomputed once more in backward).
        return mlp_tail(mlp, z, lean=self.config.checkpointing, compiled=self._compiled(z))

    def _chunk_tail(self, mlp: "MLP", z: torch.Tensor) -> torch.Tensor:
        # Inside a chunk the transient is a chunk: keep what makes backward fastest.
        return mlp_tail(mlp, z, lean=False, compiled=self._compiled(z))

    def _gather(self, base, rows_a, index_a, rows_b, index_b) -> torch.Tensor:
        return gather_add2(base, rows_a, index_a, rows_b, index_b, compiled=self._compiled(base))

    def _mlp(self, mlp: "MLP", h: torch.Tensor) -> torch.Tensor:
        return self._tail(mlp, mlp.first(h))

    def _edges(self, network: "PairMLP", proj_src, seg_src: Segments, proj_dst, seg_dst: Segments, e: torch.Tensor) -> torch.Tensor:
        """MLP output (E', H) of edges with features e (E', H), their ends' projections gathered by segments."""
        first = network.mlp.first
        base = F.linear(e, first.weight[:, 2 * network.hidden :], first.bias)
        z1 = gather_rows_add2(base, proj_src, seg_src, proj_dst, seg_dst, compiled=self._compiled(base))
        return self._tail(network.mlp, z1)

    def _update_nodes(self, iteration: int, s: _Structure, x: torch.Tensor, e_new: torch.Tensor) -> torch.Tensor:
        """x + phi_n([x, sum_in e', sum_out e']) of the owned rows (every edge of an owned node is local)."""
        sum_in = scatter_sum(e_new, s.dst_owned)
        sum_out = scatter_sum(e_new, s.src_owned)
        return self._node_step(iteration, x, sum_in, sum_out)

    def _node_step(self, iteration: int, x: torch.Tensor, sum_in: torch.Tensor, sum_out: torch.Tensor) -> torch.Tensor:
        """x + phi_n([x, sum_in, sum_out]) from the sums over incoming and outgoing edges (owned rows)."""
        _, node_network = self._networks(iteration)
        return x + self._mlp(node_network, torch.cat([x, sum_in, sum_out], dim=1))

    # -- checkpointed without overlap: chunked edge MLPs (domainpar.model.chunked)

    def _chunks(self, s: _Structure, num_edges: int, with_nodes: bool, device_type: str) -> list[EdgeChunk]:
        rows = chunk_rows(self.config.chunk_rows, num_edges, device_type)
        key = (with_nodes, rows)
        if key not in s.chunks:
            src = s.src_local.index if with_nodes else None
            dst = s.dst_local.index if with_nodes else None
            s.chunks[key] = edge_chunks(src, dst, num_edges, s.src_local.num_segments, rows)
        return s.chunks[key]

    def _edge_plan(
        self, kind: str, s: _Structure, num_edges: int | None, mlp: "MLP", out: nn.Linear | None = None
    ) -> EdgePlan:
        """An edge MLP for :func:`~domainpar.model.chunked.chunked_edges`, or with ``num_edges`` None for
        :func:`~domainpar.model.chunked.streamed_edges` (inference: no per-chunk groupings)."""
        nodes = kind != "encoder"
        chunks = [] if num_edges is None else self._chunks(s, num_edges, nodes, mlp.linears[0].weight.device.type)
        return EdgePlan(
            kind=kind, mlp=mlp, chunks=chunks, tail=self._chunk_tail, gather=self._gather, compiled=self._compiled,
            src=s.src_local if nodes else None, dst=s.dst_local if nodes else None,
            sum_in=s.dst_owned if kind == "update" else None, sum_out=s.src_owned if kind == "update" else None, out=out,
        )

    # -- without overlap: one pass over all local edges

    def _iteration(self, iteration: int, s: _Structure, x, x_halo, e):
        network, _ = self._networks(iteration)
        proj_src, proj_dst = network.project(torch.cat([x, x_halo]) if x_halo.shape[0] else x)
        e_new = e + self._edges(network, proj_src, s.src_local, proj_dst, s.dst_local, e)
        return self._update_nodes(iteration, s, x, e_new), e_new

    def _head_all(self, s: _Structure, x, x_halo, e):
        proj_src, proj_dst = self.head.project(torch.cat([x, x_halo]) if x_halo.shape[0] else x)
        hidden = self._edges(self.head, proj_src, s.src_local, proj_dst, s.dst_local, e)
        return self.head_output(hidden).squeeze(-1)

    # -- with overlap: segment A (interior edges, no halo needed), then segment B

    def _interior(self, network: "PairMLP", s: _Structure, num_interior: int, x, e):
        proj_src, proj_dst = network.project(x)
        update = self._edges(network, proj_src, s.src_interior, proj_dst, s.dst_interior, e[:num_interior])
        return proj_src, proj_dst, update

    def _boundary(self, network: "PairMLP", s: _Structure, num_interior: int, x_halo, proj_src_owned, proj_dst_owned, e):
        halo_src, halo_dst = network.project(x_halo)
        proj_src = torch.cat([proj_src_owned, halo_src])
        proj_dst = torch.cat([proj_dst_owned, halo_dst])
        return self._edges(network, proj_src, s.src_boundary, proj_dst, s.dst_boundary, e[num_interior:])

    def _iteration_b(self, iteration: int, s: _Structure, num_interior: int, x, x_halo, proj_src, proj_dst, e, update_interior):
        network, _ = self._networks(iteration)
        update_boundary = self._boundary(network, s, num_interior, x_halo, proj_src, proj_dst, e)
        e_new = e + torch.cat([update_interior, update_boundary])
        return self._update_nodes(iteration, s, x, e_new), e_new

    def _head_a(self, s: _Structure, num_interior: int, x, e):
        proj_src, proj_dst, hidden = self._interior(self.head, s, num_interior, x, e)
        return proj_src, proj_dst, self.head_output(hidden).squeeze(-1)

    def _head_b(self, s: _Structure, num_interior: int, x_halo, proj_src, proj_dst, e, logits_interior):
        hidden = self._boundary(self.head, s, num_interior, x_halo, proj_src, proj_dst, e)
        return torch.cat([logits_interior, self.head_output(hidden).squeeze(-1)])

    def _run(self, fn, *args):
        """One region: recomputed in backward with checkpointing (while autograd records), else run as is."""
        if self.config.checkpointing and torch.is_grad_enabled():
            return recompute(fn, args, list(self.parameters()))
        return fn(*args)

    def _streamed(self, graph: LocalGraph) -> bool:
        """Inference on CPU: every edge MLP streamed through the cache in chunks, on the build's threads."""
        x = graph.x
        # Plain tensors only: traced, fake and meta tensors (export, memory estimates, compilation) take the plain
        # path, which is the same arithmetic in whole-tensor ops.
        return (
            not torch.is_grad_enabled() and not self.config.overlap and type(x) is torch.Tensor and x.device.type == "cpu"
            and not torch.jit.is_tracing() and not torch.compiler.is_compiling()
            and not torch.is_autocast_enabled("cpu") and not self._compiled(x)
        )

    # ---- forward ----

    def forward(self, graph: LocalGraph, exchange: Exchange = IdentityExchange()) -> torch.Tensor:
        """Logits of every local edge.

        Args:
            graph: the part's local graph (x: (n_owned, F), edge_attr: (E_local, F_e)).
            exchange: completes owned rows with halo rows; ``IdentityExchange()`` for one process.

        Returns:
            (E_local,) logits in local edge order (replicated cut edges get identical values on both ranks).
        """
        self._check_inputs(graph, exchange)
        s = self._structure(graph)
        num_owned, num_interior = graph.num_owned, graph.num_interior_edges
        chunked = self.config.checkpointing and not self.config.overlap and torch.is_grad_enabled()
        streamed = self._streamed(graph)
        if streamed:
            x = streamed_rows(self.node_encoder, self._chunk_tail, [graph.x], compiled=self._compiled)
        else:
            x = self._run(functools.partial(self._mlp, self.node_encoder), graph.x)
        if self.config.edge_inputs:
            if streamed:
                e = streamed_edges(self._edge_plan("encoder", s, None, self.edge_encoder), graph.edge_attr)
            elif chunked:
                e = chunked_edges(self._edge_plan("encoder", s, graph.num_edges, self.edge_encoder), graph.edge_attr)
            else:
                e = self._run(functools.partial(self._mlp, self.edge_encoder), graph.edge_attr)  # E×H activations too
        else:
            # A new tensor (the fused kernels read rows by stride, and streamed updates write e in place): contiguous()
            # would return the parameter itself for one edge (a (1, H) expansion counts as contiguous).
            e = self.edge_init.expand(graph.num_edges, -1).clone(memory_format=torch.contiguous_format)
        # The head reads [x_src, x_dst, e] too: iterations 0..T-1, then the head, each after one exchange.
        for step in range(self.config.num_iterations + 1):
            is_head = step == self.config.num_iterations
            pending = exchange.start(x)
            if streamed:
                x_halo = pending.wait()[num_owned:]
                if is_head:
                    plan = self._edge_plan("head", s, None, self.head.mlp, self.head_output)
                    return streamed_edges(plan, e, x, x_halo)
                network, _ = self._networks(step)
                # e is this forward's own tensor (the encoder's output or the last update's): updated in place.
                plan = self._edge_plan("update", s, None, network.mlp)
                e, sum_in, sum_out = streamed_edges(plan, e, x, x_halo, in_place=True)
                x = streamed_rows(self._networks(step)[1], self._chunk_tail, [x, sum_in, sum_out], residual=x,
                                  compiled=self._compiled)
                continue
            if chunked:
                # Each edge MLP keeps (e, x, x_halo) and recomputes in chunks; the node update keeps (x, sums).
                x_halo = pending.wait()[num_owned:]
                if is_head:
                    plan = self._edge_plan("head", s, graph.num_edges, self.head.mlp, self.head_output)
                    return chunked_edges(plan, e, x, x_halo)
                network, _ = self._networks(step)
                e, sum_in, sum_out = chunked_edges(self._edge_plan("update", s, graph.num_edges, network.mlp), e, x, x_halo)
                x = self._run(functools.partial(self._node_step, step), x, sum_in, sum_out)
                continue
            if not self.config.overlap:
                # One region per step: checkpointing keeps only (x, x_halo, e) per iteration.
                x_halo = pending.wait()[num_owned:]
                if is_head:
                    return self._run(functools.partial(self._head_all, s), x, x_halo, e)
                x, e = self._run(functools.partial(self._iteration, step, s), x, x_halo, e)
                continue
            # Overlap: segment A (interior edges) while the halo rows are in flight, then segment B.
            if is_head:
                proj_src, proj_dst, logits_interior = self._run(functools.partial(self._head_a, s, num_interior), x, e)
                x_halo = pending.wait()[num_owned:]
                return self._run(
                    functools.partial(self._head_b, s, num_interior), x_halo, proj_src, proj_dst, e, logits_interior
                )
            network, _ = self._networks(step)
            interior = functools.partial(self._interior, network, s, num_interior)
            proj_src, proj_dst, update_interior = self._run(interior, x, e)
            x_halo = pending.wait()[num_owned:]
            x, e = self._run(
                functools.partial(self._iteration_b, step, s, num_interior),
                x, x_halo, proj_src, proj_dst, e, update_interior,
            )
        raise AssertionError("unreachable: the loop returns at the head step")

    def _check_inputs(self, graph: LocalGraph, exchange: Exchange) -> None:
        check_widths(self.config, graph.x, graph.edge_attr)
        num_halo = getattr(exchange, "num_halo", None)
        if num_halo is not None and num_halo != graph.num_halo:
            raise DomainparError(
                f"exchange delivers {num_halo} halo rows but the local graph has {graph.num_halo}; "
                "build the exchange from the same part plan (IdentityExchange only for a one-part graph)"
            )


#: ModelConfig and ACTIVATIONS live in :mod:`domainpar.model.config`; they stay importable from here.
__all__ = ["ACTIVATIONS", "InteractionNetwork", "MLP", "ModelConfig", "PairMLP"]

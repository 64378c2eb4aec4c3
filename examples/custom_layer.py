"""Plugging your own GNN layer into domainpar's halo exchange.

A layer is domain-parallel *exactly* (same outputs and gradients as one big
device) when the output at a node depends only on that node's incident edges
and their endpoints: every incident edge of an owned node is local to its part,
and every endpoint is owned or a halo row. So the recipe is

1. keep the node state of the *owned* rows only, shape (n_owned, H);
2. before each layer call ``exchange(h)`` to get owned + halo rows, shape
   (n_owned + n_halo, H) — it is differentiable, the backward sends the halo
   gradients back to their owners;
3. compute on the local edges and return the rows of the owned nodes only.

Normalisations over *incident* edges (a softmax over a node's neighbours, mean
or max aggregation) are per node, hence exact. Anything over all edges or all
nodes of the event (BatchNorm, a softmax over every edge, GCN's symmetric
normalisation by the neighbour's degree if the degree is computed locally)
needs its statistics reduced over the domain group first.

The layer below is a GAT-style attention convolution written against the
:class:`domainpar.model.exchange.Exchange` protocol, with no torch.distributed
in sight, and :class:`AttentionEdgeClassifier` is an edge classifier made of
it that implements domainpar's model protocol (docs/models.md): built from a
:class:`~domainpar.model.config.ModelConfig`, with its own options
(:class:`AttentionOptions`), it trains, evaluates and is verified like a
built-in model::

    domainpar train --data graphs/ --mode domain --ranks 2 --model examples/custom_layer.py:AttentionEdgeClassifier \
        --model-option heads=4 --hidden 32 --iterations 2
    domainpar verify --graph graphs/event000000001.npz --parts 3 --model examples/custom_layer.py:AttentionEdgeClassifier

Each rank gets its part and exchange from
:func:`domainpar.parallel.part.rank_part` (the seam every domainpar caller
uses); :func:`run_domain_parallel` runs the model on N spawned gloo ranks and
:func:`compare_with_single_process` checks the gradients against one process.

Run it: ``python examples/custom_layer.py [--parts 2] [--method geometric]``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from domainpar.data.event_graph import EventGraph
from domainpar.errors import FieldError
from domainpar.model.config import ModelConfig
from domainpar.model.exchange import Exchange
from domainpar.model.registry import build_model
from domainpar.parallel.part import rank_part
from domainpar.partition import partition_graph
from domainpar.partition.local_graph import LocalGraph


def segment_softmax(scores: torch.Tensor, segment: torch.Tensor, num_segments: int) -> torch.Tensor:
    """Softmax of ``scores`` within each segment (edges grouped by their receiving node).

    Args:
        scores: (E, K) attention logits.
        segment: (E,) int64 receiving node of every edge.
        num_segments: number of receiving nodes.

    Returns:
        (E, K) weights summing to one over the edges of each segment.
    """
    index = segment.unsqueeze(-1).expand_as(scores)
    # Subtracting the per-segment maximum keeps exp() finite; it cancels in the ratio.
    seg_max = torch.full((num_segments, scores.shape[1]), float("-inf"), dtype=scores.dtype, device=scores.device)
    seg_max = seg_max.scatter_reduce(0, index, scores, reduce="amax", include_self=True)
    weights = torch.exp(scores - seg_max.gather(0, index).detach())
    denom = torch.zeros_like(seg_max).index_add_(0, segment, weights)
    return weights / denom.gather(0, index)


class HaloAttentionConv(nn.Module):
    """GAT-style attention over all incident edges (both directions), residual update.

    ``h'_v = h_v + W_o · concat_k Σ_{u ~ v} α^k_{uv} W^k h_u`` with
    ``α^k_{uv} = softmax_{u ~ v}(LeakyReLU(a^k · [W^k h_v, W^k h_u, W_e e_{uv}]))``.
    The softmax runs over the incident edges of v, so the layer is exact under
    domain partitioning.
    """

    def __init__(self, hidden: int, edge_features: int, heads: int = 2) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden ({hidden}) must be divisible by heads ({heads})")
        self.heads = heads
        self.head_dim = hidden // heads
        self.project = nn.Linear(hidden, hidden, bias=False)
        # Graphs without edge features (edge_features 0): attention from the two nodes alone.
        self.project_edge = nn.Linear(edge_features, hidden, bias=False) if edge_features else None
        self.attend = nn.Parameter(torch.randn(heads, 3 * self.head_dim) / np.sqrt(3 * self.head_dim))
        self.out = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, h_all: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor, num_owned: int) -> torch.Tensor:
        """Update the owned nodes.

        Args:
            h_all: (n_owned + n_halo, H) node states, owned rows first.
            edge_index: (2, E_l) local ids, src → dst.
            edge_attr: (E_l, F_e) edge features.
            num_owned: n_owned.

        Returns:
            (n_owned, H) new states of the owned nodes.
        """
        num_local = h_all.shape[0]
        # Messages in both directions: each node attends over all of its incident edges.
        receiver = torch.cat([edge_index[1], edge_index[0]])
        sender = torch.cat([edge_index[0], edge_index[1]])
        projected = self.project(h_all).view(num_local, self.heads, self.head_dim)
        if self.project_edge is not None:
            edge_term = self.project_edge(edge_attr).view(-1, self.heads, self.head_dim).repeat(2, 1, 1)
        else:
            edge_term = projected.new_zeros(receiver.shape[0], self.heads, self.head_dim)
        features = torch.cat([projected[receiver], projected[sender], edge_term], dim=-1)
        scores = nn.functional.leaky_relu((features * self.attend).sum(-1), 0.2)
        alpha = segment_softmax(scores, receiver, num_local)
        messages = (alpha.unsqueeze(-1) * projected[sender]).reshape(-1, self.heads * self.head_dim)
        aggregated = torch.zeros(num_local, messages.shape[1], dtype=messages.dtype, device=messages.device)
        aggregated.index_add_(0, receiver, messages)
        # Rows of halo nodes saw only part of their edges: they are discarded here, their owners compute them.
        h_owned = h_all[:num_owned]
        return self.norm(h_owned + self.out(aggregated[:num_owned]))


@dataclass(frozen=True)
class AttentionOptions:
    """Settings of :class:`AttentionEdgeClassifier` only (``model.options`` / ``--model-option``)."""

    heads: int = 2
    """Attention heads of every layer (hidden must be a multiple)."""

    def __post_init__(self) -> None:
        if isinstance(self.heads, bool) or not isinstance(self.heads, int) or self.heads < 1:
            raise FieldError("heads", f"must be a positive integer (got {self.heads!r})")


class AttentionEdgeClassifier(nn.Module):
    """Encoder → ``num_iterations`` × (halo exchange → :class:`HaloAttentionConv`) → edge MLP head.

    A user model: domainpar builds it by import path (``examples/custom_layer.py:AttentionEdgeClassifier``) from
    a :class:`ModelConfig` (node_features, edge_features, hidden, num_iterations; ``options``: :class:`AttentionOptions`).
    """

    options_class = AttentionOptions
    description = "example user model: GAT-style attention over every incident edge (examples/custom_layer.py)"

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        options = AttentionOptions(**config.options)
        hidden, edge_features = config.hidden, config.edge_inputs
        if hidden % options.heads:
            raise FieldError("options.heads", f"must divide hidden {hidden} (got {options.heads})")
        self.uses_edges = bool(edge_features)
        self.encode = nn.Sequential(nn.Linear(config.node_features, hidden), nn.Tanh())
        self.layers = nn.ModuleList(HaloAttentionConv(hidden, edge_features, options.heads) for _ in range(config.num_iterations))
        self.head = nn.Sequential(nn.Linear(2 * hidden + edge_features, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, graph: LocalGraph, exchange: Exchange) -> torch.Tensor:
        """Edge logits of the part's local edges.

        Args:
            graph: the part's tensors (owned x, local edges).
            exchange: completes owned rows with halo rows; ``IdentityExchange()`` on one process.

        Returns:
            (E_l,) one logit per local edge.
        """
        h = self.encode(graph.x)
        for layer in self.layers:
            h = layer(exchange(h), graph.edge_index, graph.edge_attr, graph.num_owned)
        h_all = exchange(h)
        src, dst = graph.edge_index
        inputs = [h_all[src], h_all[dst]] + ([graph.edge_attr] if self.uses_edges else [])
        return self.head(torch.cat(inputs, dim=-1)).squeeze(-1)


#: The name domainpar builds the example model by (an import path: this file, this class).
MODEL_NAME = f"{Path(__file__).resolve()}:AttentionEdgeClassifier"


def model_config(graph: EventGraph, hidden: int = 32, num_layers: int = 2, heads: int = 2) -> ModelConfig:
    """The :class:`ModelConfig` of the example model for ``graph``'s feature widths."""
    return ModelConfig(
        name=MODEL_NAME, node_features=int(graph.x.shape[1]), edge_features=int(graph.edge_attr.shape[1]),
        hidden=hidden, num_iterations=num_layers, options={"heads": heads},
    )  # fmt: skip


def part_loss(logits: torch.Tensor, graph: LocalGraph) -> torch.Tensor:
    """This part's share of the event's mean BCE: owned edges only, divided by the global edge count.

    The shares of all parts add up to the full-graph loss, so summing the
    parameter gradients over the ranks gives the full-graph gradient.
    """
    owned = graph.edge_owned
    target = graph.y[owned].to(logits.dtype)
    per_edge = nn.functional.binary_cross_entropy_with_logits(logits[owned], target, reduction="sum")
    return per_edge / graph.num_edges_global


def gradients(model: nn.Module) -> dict[str, torch.Tensor]:
    """Parameter gradients by name (zeros for parameters without a gradient)."""
    return {
        name: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
        for name, p in model.named_parameters()
    }


def single_process_gradients(graph: EventGraph, seed: int = 0, **model_kw) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss and gradients of the whole graph on one process (a one-part plan, identity exchange)."""
    torch.manual_seed(seed)
    model = build_model(model_config(graph, **model_kw)).double()
    whole = rank_part(graph, dtype=torch.float64)  # the one-part plan: local graph = whole graph, identity exchange
    loss = part_loss(model(whole.graph, whole.exchange), whole.graph)
    loss.backward()
    return loss.detach(), gradients(model)


def _rank_gradients(rank: int, world_size: int, graph: EventGraph, method: str, seed: int, model_kw: dict):
    """Body of one spawned rank: its part's loss share and its (unreduced) parameter gradients."""
    import torch.distributed as dist

    torch.manual_seed(seed)  # identical initial weights on every rank
    model = build_model(model_config(graph, **model_kw)).double()
    plan = partition_graph(graph, world_size, method=method, seed=seed)
    # This rank's local graph (owned nodes first, then halo) and the exchange that completes its halo rows.
    rp = rank_part(graph, rank, None, "cpu", torch.float64, plan=plan)
    loss = part_loss(model(rp.graph, rp.exchange), rp.graph)
    loss.backward()
    grads = gradients(model)
    # The domain group's rule: SUM the gradients (and the loss shares) over the ranks.
    for tensor in grads.values():
        dist.all_reduce(tensor)
    total = loss.detach().clone()
    dist.all_reduce(total)
    # numpy, not tensors: torch would share tensor storage through a file descriptor the exiting rank closes.
    return float(total), {name: g.numpy() for name, g in grads.items()}


def run_domain_parallel(
    graph: EventGraph, num_parts: int, method: str = "metis", seed: int = 0, timeout_s: float = 120.0, **model_kw
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss and summed gradients of the model trained on ``num_parts`` spawned gloo ranks."""
    from domainpar.launch.ranks import spawn

    results = spawn(
        _rank_gradients, num_parts, (graph, method, seed, model_kw), timeout_s=timeout_s, backend="gloo", num_threads=1
    )
    loss, grads = results[0]
    return torch.tensor(loss, dtype=torch.float64), {name: torch.from_numpy(g) for name, g in grads.items()}


def max_relative_error(reference: dict[str, torch.Tensor], other: dict[str, torch.Tensor]) -> float:
    """max over parameters of ‖a − b‖∞ / max(‖a‖∞, tiny)."""
    worst = 0.0
    for name, ref in reference.items():
        scale = max(float(ref.abs().max()), 1e-30)
        worst = max(worst, float((ref - other[name]).abs().max()) / scale)
    return worst


def compare_with_single_process(graph: EventGraph, num_parts: int = 2, method: str = "metis", seed: int = 0, **model_kw) -> dict:
    """Run both and report the loss difference and the worst relative gradient error."""
    loss_single, grads_single = single_process_gradients(graph, seed, **model_kw)
    loss_parts, grads_parts = run_domain_parallel(graph, num_parts, method, seed, **model_kw)
    plan = partition_graph(graph, num_parts, method=method, seed=seed)
    return {
        "num_parts": num_parts,
        "method": method,
        "halo_rows": sum(part.num_halo for part in plan.parts),
        "cut_edges": plan.num_cut_edges,
        "loss_single": float(loss_single),
        "loss_parts": float(loss_parts),
        "max_rel_err_grad": max_relative_error(grads_single, grads_parts),
    }


def _demo_graph() -> EventGraph:
    """A small simulated event's hit graph."""
    from domainpar.data.graph import build_graph
    from domainpar.sim.config import SimulationConfig
    from domainpar.sim.event import simulate_event

    event = simulate_event(SimulationConfig(num_particles=300), event_id=1, seed=3)
    graph, _ = build_graph(event["hits"], event["truth"], event["particles"], event_id=1)
    return graph


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=int, default=2, help="number of spawned ranks (parts)")
    # Geometric sectors always cut a small event's edges; METIS may find a zero cut between its disconnected tracks.
    parser.add_argument("--method", default="geometric", choices=["metis", "geometric"], help="partitioner")
    args = parser.parse_args(argv)
    graph = _demo_graph()
    result = compare_with_single_process(graph, args.parts, args.method)
    print(
        f"{graph.num_nodes} nodes, {graph.num_edges} edges, {args.parts} parts ({args.method}, "
        f"{result['cut_edges']} cut edges, {result['halo_rows']} halo rows): "
        f"loss {result['loss_single']:.12f} (one process) vs {result['loss_parts']:.12f} (domain-parallel), "
        f"max relative gradient error {result['max_rel_err_grad']:.2e}"
    )
    return 0 if result["max_rel_err_grad"] < 1e-10 else 1


if __name__ == "__main__":
    sys.exit(main())

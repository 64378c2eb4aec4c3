"""The field's InteractionGNN (Exa.TrkX / GNN4ITk acorn structure), domain-parallel and exact.

What a GNN4ITk/acorn user trains today, with the same structure and
settings, running on a part's :class:`~domainpar.partition.local_graph.LocalGraph`
and an :class:`~domainpar.model.exchange.Exchange` like every domainpar model:

    h = enc_n(x)                                         owned nodes
    e = enc_e([h_src, h_dst(, edge_attr)])               every local edge
    repeat T times:
        m = [agg_{edges into v} e, agg_{edges out of v} e]   owned nodes (``messages: in`` keeps the first)
        h = phi_n([h, m])            (+ h with ``residual``)   owned nodes
        e = phi_e([h_src, h_dst, e]) (+ e with ``residual``)   every local edge, with the *new* h
    logit = phi_out([h_src, h_dst, e])

``agg`` is any of sum, mean, max, min, concatenated (:class:`InteractionGNNOptions`); every MLP is acorn's
(:func:`acorn_mlp`). ``recurrent: false`` gives every iteration its own node and edge networks;
``checkpointing`` recomputes each encoder, node update, edge update and the output in backward
(``torch.utils.checkpoint``, as the field's code does).

Exactness: a node's aggregate reads only its own incident edges, which are
all local for an owned node, and is computed for owned nodes only; every
edge step reads both ends after an exchange, so halo rows hold their owners'
current values. The exchange is outside every checkpointed region. So the
partitioned logits, loss and gradients equal one process's
(``tests/verification``). Halo rows' aggregates, incomplete on this rank,
are never computed.

:meth:`InteractionGNN.deploy` gives the same function as a single-graph
module ``forward(x, edge_index[, edge_attr])`` for TorchScript and ONNX.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from domainpar.errors import FieldError
from domainpar.model.config import ACTIVATIONS, ModelConfig, check_widths
from domainpar.model.exchange import Exchange, IdentityExchange
from domainpar.partition.local_graph import LocalGraph

#: Aggregations a node may apply to its edges' latents.
AGGREGATIONS = ("sum", "mean", "max", "min")
#: Which edges a node reads: incoming and outgoing (acorn), or incoming only (Exa.TrkX).
MESSAGES = ("in_out", "in")


@dataclass(frozen=True)
class InteractionGNNOptions:
    """Settings of :class:`InteractionGNN` only (``model.options``)."""

    aggregation: tuple[str, ...] = ("sum",)
    """How a node combines its edges' latents: any of sum, mean, max, min; several are concatenated (acorn's aggregation)."""
    messages: str = "in_out"
    """in_out: a node reads its incoming and its outgoing edges, aggregated separately (acorn); in: incoming only (Exa.TrkX)."""
    undirected: bool = False
    """Run every edge in both directions and average the two logits (acorn's undirected)."""
    residual: bool = False
    """Add every node and edge update to the previous latents (acorn's InteractionGNN has none)."""
    output_layers: int = 0
    """Hidden layers of the output classifier (0: mlp_layers)."""

    def __post_init__(self) -> None:
        aggregation = (self.aggregation,) if isinstance(self.aggregation, str) else tuple(self.aggregation)
        object.__setattr__(self, "aggregation", aggregation)
        unknown = [a for a in aggregation if a not in AGGREGATIONS]
        if not aggregation or unknown or len(set(aggregation)) != len(aggregation):
            raise FieldError("aggregation", f"must be distinct names among {', '.join(AGGREGATIONS)} (got {list(aggregation)})")
        if self.messages not in MESSAGES:
            raise FieldError("messages", f"must be one of {', '.join(MESSAGES)} (got {self.messages!r})")
        if isinstance(self.output_layers, bool) or not isinstance(self.output_layers, int) or self.output_layers < 0:
            raise FieldError("output_layers", f"must be a non-negative integer (got {self.output_layers!r})")


def acorn_mlp(inputs: int, hidden: int, layers: int, activation: str, layer_norm: bool, outputs: int | None = None) -> nn.Sequential:
    """acorn's ``make_mlp``: (Linear → LayerNorm → activation) per hidden layer, then a Linear without activation.

    Args:
        inputs: input width.
        hidden: hidden width.
        layers: Linear layers to ``hidden`` width; with ``outputs`` all of them are hidden layers and one more Linear
            maps to ``outputs``, otherwise the last of them is the output layer (no norm, no activation).
        activation: a name of :data:`~domainpar.model.config.ACTIVATIONS`.
        layer_norm: LayerNorm (without affine weights, as acorn) after every hidden Linear.
        outputs: width of an extra output layer (the classifier's 1).
    """
    widths = [inputs] + [hidden] * layers + ([outputs] if outputs is not None else [])
    modules: list[nn.Module] = []
    for i in range(len(widths) - 1):
        modules.append(nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            if layer_norm:
                modules.append(nn.LayerNorm(widths[i + 1], elementwise_affine=False))
            modules.append(ACTIVATIONS[activation]())
    return nn.Sequential(*modules)


def aggregate(e: torch.Tensor, index: torch.Tensor, num_rows: int, kinds: list[str]) -> torch.Tensor:
    """(E, H) edge rows combined per node → (num_rows, H · len(kinds)); nodes without edges get zeros.

    Every ``index`` must be below ``num_rows`` (a part's caller leaves out the edges of halo rows first).
    """
    parts = []
    rows = index.unsqueeze(1).expand(-1, e.shape[1])
    for kind in kinds:
        zeros = torch.zeros(num_rows, e.shape[1], dtype=e.dtype, device=e.device)
        if kind == "sum":
            parts.append(zeros.scatter_add(0, rows, e))
        elif kind == "mean":
            ones = torch.ones(index.shape[0], 1, dtype=e.dtype, device=e.device)
            count = torch.zeros(num_rows, 1, dtype=e.dtype, device=e.device).scatter_add(0, index.unsqueeze(1), ones)
            parts.append(zeros.scatter_add(0, rows, e) / count.clamp(min=1.0))
        elif kind == "max":
            parts.append(zeros.scatter_reduce(0, rows, e, reduce="amax", include_self=False))
        else:
            parts.append(zeros.scatter_reduce(0, rows, e, reduce="amin", include_self=False))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


class InteractionGNN(nn.Module):
    """The field's InteractionGNN (Exa.TrkX / acorn structure) as a domain-parallel edge classifier.

    Args:
        config: shared settings (hidden, mlp_layers, num_iterations, activation, layer_norm, recurrent,
            checkpointing, use_edge_features) and :class:`InteractionGNNOptions` in ``config.options``.
    """

    options_class = InteractionGNNOptions
    settings = frozenset({"checkpointing", "recurrent"})
    description = "the field's InteractionGNN (Exa.TrkX / GNN4ITk acorn structure: aggregation, undirected, recurrent)"

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.options = InteractionGNNOptions(**config.options)
        c, o = config, self.options
        hidden, layers = c.hidden, c.mlp_layers
        directions = 2 if o.messages == "in_out" else 1
        node_inputs = (1 + directions * len(o.aggregation)) * hidden
        self.node_encoder = acorn_mlp(c.node_features, hidden, layers, c.activation, c.layer_norm)
        self.edge_encoder = acorn_mlp(2 * hidden + c.edge_inputs, hidden, layers, c.activation, c.layer_norm)
        count = 1 if c.recurrent else max(c.num_iterations, 1)
        self.node_networks = nn.ModuleList(
            [acorn_mlp(node_inputs, hidden, layers, c.activation, c.layer_norm) for _ in range(count)]
        )
        self.edge_networks = nn.ModuleList(
            [acorn_mlp(3 * hidden, hidden, layers, c.activation, c.layer_norm) for _ in range(count)]
        )
        self.output_network = acorn_mlp(3 * hidden, hidden, o.output_layers or layers, c.activation, c.layer_norm, outputs=1)

    def _networks(self, step: int) -> tuple[nn.Module, nn.Module]:
        index = min(step, len(self.node_networks) - 1)
        return self.node_networks[index], self.edge_networks[index]

    def _run(self, fn, *args):
        if self.config.checkpointing and torch.is_grad_enabled():
            return checkpoint(fn, *args, use_reentrant=False)
        return fn(*args)

    # ---- the pieces: functions of tensors, shared with the deployed module; none of them communicates

    def encode_edges(self, h: torch.Tensor, start: torch.Tensor, end: torch.Tensor, edge_attr: torch.Tensor | None) -> torch.Tensor:
        inputs = [h[start], h[end]] + ([edge_attr] if edge_attr is not None else [])
        return self.edge_encoder(torch.cat(inputs, dim=1))

    def update_nodes(self, step: int, h: torch.Tensor, e: torch.Tensor, start: torch.Tensor, end: torch.Tensor,
                     into: torch.Tensor | None = None, out_of: torch.Tensor | None = None) -> torch.Tensor:
        """(n, H) rows of nodes whose every incident edge is in (start, end) → their new rows.

        ``into`` / ``out_of``: the edges whose end / start is one of these rows (None: every edge), so that the
        edges of halo rows, whose aggregates this rank does not compute, are left out.
        """
        node_network, _ = self._networks(step)
        kinds = list(self.options.aggregation)
        rows = h.shape[0]
        messages = [aggregate(e if into is None else e[into], end if into is None else end[into], rows, kinds)]
        if self.options.messages == "in_out":
            messages.append(aggregate(e if out_of is None else e[out_of], start if out_of is None else start[out_of], rows, kinds))
        out = node_network(torch.cat([h] + messages, dim=1))
        return h + out if self.options.residual else out

    def update_edges(self, step: int, h: torch.Tensor, e: torch.Tensor, start: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
        _, edge_network = self._networks(step)
        out = edge_network(torch.cat([h[start], h[end], e], dim=1))
        return e + out if self.options.residual else out

    def classify(self, h: torch.Tensor, e: torch.Tensor, start: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
        logits = self.output_network(torch.cat([h[start], h[end], e], dim=1)).squeeze(-1)
        if self.options.undirected:
            logits = logits.view(2, -1).mean(dim=0)
        return logits

    def directed(self, edge_index: torch.Tensor, edge_attr: torch.Tensor | None):
        """(start, end, edge_attr) the network runs on: the edges, or both directions with ``undirected``."""
        start, end = edge_index[0], edge_index[1]
        if self.options.undirected:
            start, end = torch.cat([start, end]), torch.cat([end, start])
            if edge_attr is not None:
                edge_attr = torch.cat([edge_attr, edge_attr])
        return start, end, edge_attr

    # ---- forward

    def forward(self, graph: LocalGraph, exchange: Exchange = IdentityExchange()) -> torch.Tensor:
        """(E_local,) logits of every local edge of a part (x: (n_owned, F), edge_attr: (E_local, F_e)), in local edge
        order; ``exchange`` completes owned rows with halo rows (``IdentityExchange()`` on one process)."""
        c = self.config
        check_widths(c, graph.x, graph.edge_attr)
        edge_attr = graph.edge_attr if c.edge_inputs else None
        start, end, edge_attr = self.directed(graph.edge_index, edge_attr)
        # Node updates are for owned rows only (a halo node's edges are not all on this rank): the edges whose
        # end (start) is a halo row are left out of the aggregates, once per forward.
        into = out_of = None
        if graph.num_halo:
            into = torch.nonzero(end < graph.num_owned).squeeze(1)
            out_of = torch.nonzero(start < graph.num_owned).squeeze(1)
        h = self._run(self.node_encoder, graph.x)
        h_local = exchange(h)
        e = self._run(self.encode_edges, h_local, start, end, edge_attr)
        for step in range(c.num_iterations):
            h = self._run(self.update_nodes, step, h, e, start, end, into, out_of)
            h_local = exchange(h)
            e = self._run(self.update_edges, step, h_local, e, start, end)
        return self._run(self.classify, h_local, e, start, end)

    def deploy(self) -> nn.Module:
        """The same function on one whole graph: ``forward(x, edge_index[, edge_attr]) -> logits`` (TorchScript, ONNX)."""
        return (InteractionGNNEdges if self.config.edge_inputs else InteractionGNNNodes)(self).eval()


class _Deployed(nn.Module):
    """The trained modules of an :class:`InteractionGNN`, run on one whole graph with plain tensor operations."""

    def __init__(self, model: InteractionGNN) -> None:
        super().__init__()
        o = model.options
        self.node_encoder = model.node_encoder
        self.edge_encoder = model.edge_encoder
        count = max(model.config.num_iterations, 0)
        # A recurrent model lists its one pair of networks T times: the weights are shared, not copied.
        self.node_networks = nn.ModuleList([model._networks(i)[0] for i in range(count)])
        self.edge_networks = nn.ModuleList([model._networks(i)[1] for i in range(count)])
        self.output_network = model.output_network
        self.kinds = list(o.aggregation)
        self.both = o.messages == "in_out"
        self.undirected = o.undirected
        self.residual = o.residual

    def run(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor | None) -> torch.Tensor:
        start = edge_index[0]
        end = edge_index[1]
        if self.undirected:
            start, end = torch.cat([start, end]), torch.cat([end, start])
            if edge_attr is not None:
                edge_attr = torch.cat([edge_attr, edge_attr])
        h = self.node_encoder(x)
        inputs = [h[start], h[end]]
        if edge_attr is not None:
            inputs.append(edge_attr)
        e = self.edge_encoder(torch.cat(inputs, dim=1))
        for node_network, edge_network in zip(self.node_networks, self.edge_networks):
            messages = [h, aggregate(e, end, h.shape[0], self.kinds)]
            if self.both:
                messages.append(aggregate(e, start, h.shape[0], self.kinds))
            out = node_network(torch.cat(messages, dim=1))
            h = h + out if self.residual else out
            out = edge_network(torch.cat([h[start], h[end], e], dim=1))
            e = e + out if self.residual else out
        logits = self.output_network(torch.cat([h[start], h[end], e], dim=1)).squeeze(-1)
        if self.undirected:
            logits = logits.view(2, -1).mean(dim=0)
        return logits


class InteractionGNNEdges(_Deployed):
    """Deployed :class:`InteractionGNN` with edge features: ``forward(x, edge_index, edge_attr) -> logits``."""

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        """(N, F) float32, (2, E) int64, (E, F_e) float32 → (E,) float32 logits."""
        return self.run(x, edge_index, edge_attr)


class InteractionGNNNodes(_Deployed):
    """Deployed :class:`InteractionGNN` without edge features: ``forward(x, edge_index) -> logits``."""

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        """(N, F) float32, (2, E) int64 → (E,) float32 logits."""
        return self.run(x, edge_index, None)


__all__ = ["AGGREGATIONS", "InteractionGNN", "InteractionGNNOptions", "acorn_mlp", "aggregate"]

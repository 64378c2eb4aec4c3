"""An edge classifier assembled from PyTorch Geometric message-passing layers, run domain-parallel.

The model of a PyG user, trained by ``domainpar train`` like every other:

    h = enc_n(x);  e = enc_e(edge_attr)                       (owned nodes; every local edge)
    repeat T times:  h = h + act(norm(conv(h, edges, e)))     (``residual``; conv = one PyG layer)
    logit = head([h_src, h_dst(, e)])

Each ``conv`` runs through :class:`~domainpar.model.pyg.DomainParallelConv`, exact for every layer offered
here; GCN's symmetric normalisation reads global degrees (:func:`~domainpar.model.pyg.gcn_norm_local`).
``undirected`` (the default) gives every edge its reverse, so a hit hears from both its inner and its outer
neighbours. PyG is imported by this module only, and the registry imports it only when this model is chosen.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn
from torch_geometric.nn import EdgeConv, GATConv, GATv2Conv, GCNConv, GINEConv, GraphConv, ResGatedGraphConv, SAGEConv, TransformerConv

from domainpar.errors import FieldError
from domainpar.model.config import ACTIVATIONS, ModelConfig, check_widths
from domainpar.model.exchange import Exchange, IdentityExchange
from domainpar.model.interaction_gnn import acorn_mlp
from domainpar.model.pyg import DomainParallelConv, gcn_norm_local
from domainpar.partition.local_graph import LocalGraph

#: PyG layers the model can stack, and whether each reads edge features.
LAYERS = {
    "gatv2": True,
    "gat": True,
    "transformer": True,
    "gine": True,
    "resgated": True,
    "edgeconv": False,
    "sage": False,
    "graphconv": False,
    "gcn": False,
}
#: Aggregations of the layers that take one (edgeconv, sage, graphconv): our name → PyG's.
AGGREGATIONS = {"sum": "add", "mean": "mean", "max": "max"}


@dataclass(frozen=True)
class PygGnnOptions:
    """Settings of :class:`PygEdgeClassifier` only (``model.options``)."""

    layer: str = "gatv2"
    """PyG layer of every step: gatv2, gat, transformer, gine, resgated (these read edge features), edgeconv, sage, graphconv or gcn."""
    heads: int = 4
    """Attention heads of gatv2, gat and transformer (hidden must be a multiple)."""
    aggregation: str = "sum"
    """Aggregation of edgeconv, sage and graphconv: sum, mean or max."""
    undirected: bool = True
    """Give every edge its reverse for message passing, so a node hears from both ends (logits stay one per edge)."""
    residual: bool = True
    """Add each layer's output to its input."""

    def __post_init__(self) -> None:
        if self.layer not in LAYERS:
            raise FieldError("layer", f"must be one of {', '.join(LAYERS)} (got {self.layer!r})")
        if isinstance(self.heads, bool) or not isinstance(self.heads, int) or self.heads < 1:
            raise FieldError("heads", f"must be a positive integer (got {self.heads!r})")
        if self.aggregation not in AGGREGATIONS:
            raise FieldError("aggregation", f"must be one of {', '.join(AGGREGATIONS)} (got {self.aggregation!r})")


def _conv(options: PygGnnOptions, hidden: int, edge_dim: int | None, activation: str) -> nn.Module:
    """One PyG layer (hidden → hidden) of ``options.layer``."""
    layer, heads = options.layer, options.heads
    if layer in ("gatv2", "gat", "transformer"):
        if hidden % heads:
            raise FieldError("options.heads", f"must divide hidden {hidden} for layer {layer} (got {heads})")
        if layer == "gatv2":
            return GATv2Conv(hidden, hidden // heads, heads=heads, edge_dim=edge_dim, add_self_loops=True)
        if layer == "gat":
            return GATConv(hidden, hidden // heads, heads=heads, edge_dim=edge_dim, add_self_loops=True)
        return TransformerConv(hidden, hidden // heads, heads=heads, edge_dim=edge_dim)
    aggr = AGGREGATIONS[options.aggregation]
    mlp = lambda inputs: nn.Sequential(nn.Linear(inputs, hidden), ACTIVATIONS[activation](), nn.Linear(hidden, hidden))  # noqa: E731
    if layer == "gine":
        return GINEConv(mlp(hidden), edge_dim=edge_dim)
    if layer == "resgated":
        return ResGatedGraphConv(hidden, hidden, edge_dim=edge_dim)
    if layer == "edgeconv":
        return EdgeConv(mlp(2 * hidden), aggr=aggr)
    if layer == "sage":
        return SAGEConv(hidden, hidden, aggr=aggr)
    if layer == "graphconv":
        return GraphConv(hidden, hidden, aggr=aggr)
    return GCNConv(hidden, hidden, normalize=False)


class PygEdgeClassifier(nn.Module):
    """Edge classifier of stacked PyG layers (:class:`PygGnnOptions`), domain-parallel through the halo exchange.

    Args:
        config: shared settings (hidden, mlp_layers for the encoders and the head, num_iterations = layers,
            activation, layer_norm, use_edge_features) and :class:`PygGnnOptions` in ``config.options``.
    """

    options_class = PygGnnOptions
    settings = frozenset()
    description = "stacked PyTorch Geometric layers (GATv2, GAT, Transformer, GINE, EdgeConv, SAGE, ...) through DomainParallelConv"

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.options = PygGnnOptions(**config.options)
        c, o = config, self.options
        hidden = c.hidden
        self.uses_edges = bool(c.edge_inputs)
        self.layer_edges = LAYERS[o.layer] and self.uses_edges
        self.node_encoder = acorn_mlp(c.node_features, hidden, c.mlp_layers, c.activation, c.layer_norm)
        self.edge_encoder = acorn_mlp(c.edge_inputs, hidden, c.mlp_layers, c.activation, c.layer_norm) if self.uses_edges else None
        edge_dim = hidden if self.layer_edges else None
        if o.layer == "gine" and not self.layer_edges:
            raise FieldError("options.layer", "gine reads edge features; the graphs have none (choose gatv2, edgeconv, sage ...)")
        self.convs = nn.ModuleList([DomainParallelConv(_conv(o, hidden, edge_dim, c.activation)) for _ in range(c.num_iterations)])
        self.norms = nn.ModuleList([nn.LayerNorm(hidden) if c.layer_norm else nn.Identity() for _ in range(c.num_iterations)])
        self.activation = ACTIVATIONS[c.activation]()
        head_inputs = (3 if self.uses_edges else 2) * hidden
        self.head = acorn_mlp(head_inputs, hidden, c.mlp_layers, c.activation, c.layer_norm, outputs=1)

    def forward(self, graph: LocalGraph, exchange: Exchange = IdentityExchange()) -> torch.Tensor:
        """(E_local,) logits of every local edge of a part, in local edge order (see :class:`InteractionGNN`'s forward)."""
        c, o = self.config, self.options
        check_widths(c, graph.x, graph.edge_attr)
        src, dst = graph.edge_index[0], graph.edge_index[1]
        e = self.edge_encoder(graph.edge_attr) if self.edge_encoder is not None else None
        edge_index, e_layers = graph.edge_index, e
        if o.undirected:
            edge_index = torch.cat([graph.edge_index, graph.edge_index.flip(0)], dim=1)
            e_layers = None if e is None else torch.cat([e, e])
        kwargs: dict = {}
        if self.layer_edges:
            kwargs["edge_attr"] = e_layers
        if o.layer == "gcn":
            edge_index, kwargs["edge_weight"] = gcn_norm_local(dataclasses.replace(graph, edge_index=edge_index), exchange)
        h = self.node_encoder(graph.x)
        for conv, norm in zip(self.convs, self.norms):
            out = self.activation(norm(conv(h, graph, exchange, edge_index, **kwargs)))
            h = h + out if o.residual else out
        h_local = exchange(h)
        inputs = [h_local[src], h_local[dst]] + ([e] if e is not None else [])
        return self.head(torch.cat(inputs, dim=1)).squeeze(-1)


__all__ = ["LAYERS", "PygEdgeClassifier", "PygGnnOptions"]

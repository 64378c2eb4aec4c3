"""The Interaction Network written the conventional way, as a benchmark reference.

This is how the field's public implementations (HEP.TrkX's MPNN, Exa.TrkX's
InteractionGNN) write the same network: every edge MLP input is built by
concatenating ``[x[src], x[dst], e]`` into an (E, 3H) tensor and the MLP runs
on it; messages are summed with a scatter over all edges; one process, the
whole graph, no halo.

It has exactly the parameter shapes *and names* of
:class:`domainpar.model.interaction_network.InteractionNetwork`, so
``reference.load_state_dict(ours.state_dict())`` copies the weights and both
must give the same logits (same maths, different evaluation order). The
benchmark compares time and memory of the two on the same graph.
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.utils import scatter

from domainpar.model.interaction_network import ACTIVATIONS, ModelConfig


class ConcatMLP(nn.Module):
    """``depth`` × (Linear → optional LayerNorm → activation), applied to its input as is."""

    def __init__(self, in_features: int, hidden: int, depth: int, activation: str, layer_norm: bool) -> None:
        super().__init__()
        self.linears = nn.ModuleList([nn.Linear(in_features if i == 0 else hidden, hidden) for i in range(depth)])
        self.norms = nn.ModuleList([nn.LayerNorm(hidden) if layer_norm else nn.Identity() for _ in range(depth)])
        self.activation = ACTIVATIONS[activation]()

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for linear, norm in zip(self.linears, self.norms):
            h = self.activation(norm(linear(h)))
        return h


class ConcatEdgeMLP(nn.Module):
    """An edge MLP on the concatenated (E, 3H) tensor ``[x[src], x[dst], e]``."""

    def __init__(self, hidden: int, depth: int, activation: str, layer_norm: bool) -> None:
        super().__init__()
        self.mlp = ConcatMLP(3 * hidden, hidden, depth, activation, layer_norm)

    def forward(self, x: torch.Tensor, e: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        return self.mlp(torch.cat([x[src], x[dst], e], dim=1))


class ReferenceInteractionNetwork(nn.Module):
    """Conventional full-graph Interaction Network edge classifier (benchmark reference).

    Args:
        config: the same :class:`ModelConfig` as ours (checkpointing and overlap are ignored).
    """

    def __init__(self, config: ModelConfig = ModelConfig()) -> None:
        super().__init__()
        c = config
        self.config = config
        self.node_encoder = ConcatMLP(c.node_features, c.hidden, c.mlp_layers, c.activation, c.layer_norm)
        self.edge_encoder = ConcatMLP(c.edge_features, c.hidden, c.mlp_layers, c.activation, c.layer_norm)
        num_networks = 1 if c.recurrent else max(c.num_iterations, 1)
        self.edge_networks = nn.ModuleList(
            [ConcatEdgeMLP(c.hidden, c.mlp_layers, c.activation, c.layer_norm) for _ in range(num_networks)]
        )
        self.node_networks = nn.ModuleList(
            [ConcatMLP(3 * c.hidden, c.hidden, c.mlp_layers, c.activation, c.layer_norm) for _ in range(num_networks)]
        )
        self.head = ConcatEdgeMLP(c.hidden, c.mlp_layers, c.activation, c.layer_norm)
        self.head_output = nn.Linear(c.hidden, 1)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        """Logits of every edge of a whole graph.

        Args:
            x: (N, F) node features.
            edge_index: (2, E) int64, src → dst.
            edge_attr: (E, F_e) edge features.

        Returns:
            (E,) logits.
        """
        src, dst = edge_index[0], edge_index[1]
        num_nodes = x.shape[0]
        x = self.node_encoder(x)
        e = self.edge_encoder(edge_attr)
        for iteration in range(self.config.num_iterations):
            edge_network = self.edge_networks[min(iteration, len(self.edge_networks) - 1)]
            node_network = self.node_networks[min(iteration, len(self.node_networks) - 1)]
            e = e + edge_network(x, e, src, dst)
            sum_in = scatter(e, dst, dim=0, dim_size=num_nodes, reduce="sum")
            sum_out = scatter(e, src, dim=0, dim_size=num_nodes, reduce="sum")
            x = x + node_network(torch.cat([x, sum_in, sum_out], dim=1))
        return self.head_output(self.head(x, e, src, dst)).squeeze(-1)

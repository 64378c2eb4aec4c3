"""User models for the locality tests: one local, three that are not (each a mistake a user makes), and the
built-ins under an import path of their own (so the run treats them as a user's model and checks them).

Loaded by file path (``tests/verification/user_models.py:GlobalMeanGNN``), as a user's model is.
"""

from __future__ import annotations

import torch
from torch import nn

from domainpar.model.config import ModelConfig
from domainpar.model.interaction_gnn import InteractionGNN
from domainpar.model.interaction_network import InteractionNetwork


class LocalGNN(nn.Module):
    """Encoder, one exchange, an edge MLP on both ends and the edge: local, exact under partitioning."""

    description = "test model: local"

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        hidden = config.hidden
        self.uses_edges = config.edge_inputs > 0
        self.encode = nn.Sequential(nn.Linear(config.node_features, hidden), nn.Tanh())
        self.node = nn.Linear(hidden, hidden)
        self.edge = nn.Sequential(nn.Linear(2 * hidden + config.edge_inputs, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def nodes(self, h: torch.Tensor) -> torch.Tensor:
        """(n_owned, H) → (n_owned, H): the per-node update the variants below change."""
        return torch.tanh(self.node(h))

    def complete(self, h: torch.Tensor, graph, exchange) -> torch.Tensor:
        """(n_owned, H) → (n_owned + n_halo, H)."""
        return exchange(h)

    def forward(self, graph, exchange) -> torch.Tensor:
        h = self.nodes(self.encode(graph.x))
        h_local = self.complete(h, graph, exchange)
        src, dst = graph.edge_index
        inputs = [h_local[src], h_local[dst]] + ([graph.edge_attr] if self.uses_edges else [])
        return self.edge(torch.cat(inputs, dim=1)).squeeze(-1)


class BatchNormGNN(LocalGNN):
    """A BatchNorm over the nodes: its statistics are those of the rank's owned nodes, not of the event."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        # No running statistics: batch statistics in eval mode too, so inference is not local either.
        self.norm = nn.BatchNorm1d(config.hidden, track_running_stats=False)

    def nodes(self, h: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.norm(self.node(h)))


class GlobalMeanGNN(LocalGNN):
    """Adds the mean over all nodes to every node: on a rank, the mean of its owned nodes only."""

    def nodes(self, h: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.node(h))
        return h + h.mean(dim=0, keepdim=True)


class NoExchangeGNN(LocalGNN):
    """Never asks the exchange for the halo rows: zeros stand in for them (one process has none, so it agrees)."""

    def complete(self, h: torch.Tensor, graph, exchange) -> torch.Tensor:
        return torch.cat([h, h.new_zeros(graph.num_halo, h.shape[1])])


class ForcedInteractionNetwork(InteractionNetwork):
    """The built-in Interaction Network under a user's import path: the run checks it like any user model."""


class ForcedInteractionGNN(InteractionGNN):
    """The built-in InteractionGNN under a user's import path."""

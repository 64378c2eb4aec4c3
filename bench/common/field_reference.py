"""The field's Interaction Network as users run it today (the Exa.TrkX InteractionGNN structure).

Written for this benchmark from the structure described in issue 14, not
copied from any implementation:

* node encoder MLP on the node features x (N, F);
* edge encoder MLP on [x_src, x_dst] (E, 2F) — node features only, no edge features;
* ``iterations`` message-passing steps with the *same* two networks every
  time, both computed from the previous x and e:

      x' = x + φn([x, Σ_{edges entering the node} e])        (N, 2H) → (N, H)
      e' = e + φe([x_src, x_dst, e])                          (E, 3H) → (E, H)

* an output MLP on [x_src, x_dst, e] giving one logit per edge.

Every MLP is (Linear → LayerNorm → ReLU) × 2 followed by a Linear without
activation; the output MLP has three such blocks, then a Linear to 1. The
messages are summed with a scatter-add over destination nodes, the edge
MLP inputs are concatenated (E, 3H) tensors, and ``torch.utils.checkpoint``
wraps the node encoder, the edge encoder, every iteration and the output
step — as the field's code does by default.

It accepts a one-part :class:`~domainpar.partition.local_graph.LocalGraph`
(the whole graph) so the benchmark harness can run it exactly like ours.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


def field_mlp(in_features: int, hidden: int, out_features: int, blocks: int = 2) -> nn.Sequential:
    """(Linear → LayerNorm → ReLU) × ``blocks``, then Linear(hidden, out_features) without activation."""
    layers: list[nn.Module] = []
    for i in range(blocks):
        layers += [nn.Linear(in_features if i == 0 else hidden, hidden), nn.LayerNorm(hidden), nn.ReLU()]
    layers.append(nn.Linear(hidden, out_features))
    return nn.Sequential(*layers)


class FieldInteractionGNN(nn.Module):
    """The field's recurrent Interaction Network edge classifier (benchmark reference).

    Args:
        node_features: F, input features per node.
        hidden: H, width of node and edge latents.
        iterations: message-passing steps.
        checkpointing: wrap encoders, iterations and output in ``torch.utils.checkpoint``.
    """

    def __init__(self, node_features: int = 3, hidden: int = 64, iterations: int = 8, checkpointing: bool = True) -> None:
        super().__init__()
        self.hidden = hidden
        self.iterations = iterations
        self.checkpointing = checkpointing
        self.node_encoder = field_mlp(node_features, hidden, hidden)
        self.edge_encoder = field_mlp(2 * node_features, hidden, hidden)
        self.node_network = field_mlp(2 * hidden, hidden, hidden)
        self.edge_network = field_mlp(3 * hidden, hidden, hidden)
        self.output_network = field_mlp(3 * hidden, hidden, 1, blocks=3)

    @classmethod
    def from_config(cls, config) -> "FieldInteractionGNN":
        """The reference sized like a :class:`~domainpar.model.interaction_network.ModelConfig` (F, H, iterations, checkpointing)."""
        return cls(config.node_features, config.hidden, config.num_iterations, config.checkpointing)

    def _run(self, fn, *args):
        if self.checkpointing and torch.is_grad_enabled():
            return checkpoint(fn, *args, use_reentrant=False)
        return fn(*args)

    def _encode_edges(self, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        return self.edge_encoder(torch.cat([x[src], x[dst]], dim=1))

    def _iteration(self, x: torch.Tensor, e: torch.Tensor, src: torch.Tensor, dst: torch.Tensor):
        aggregated = torch.zeros_like(x).index_add_(0, dst, e)
        x_new = x + self.node_network(torch.cat([x, aggregated], dim=1))
        e_new = e + self.edge_network(torch.cat([x[src], x[dst], e], dim=1))
        return x_new, e_new

    def _output(self, x: torch.Tensor, e: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        return self.output_network(torch.cat([x[src], x[dst], e], dim=1)).squeeze(-1)

    def forward(self, graph, exchange=None) -> torch.Tensor:
        """(E,) logits of every edge of a whole graph (``graph.x``: (N, F), ``graph.edge_index``: (2, E)).

        ``exchange`` is accepted for the harness's calling convention and must have no halo.
        """
        if graph.num_halo or (exchange is not None and getattr(exchange, "num_halo", 0)):
            raise ValueError("the field reference runs whole graphs only (one part, no halo)")
        src, dst = graph.edge_index[0], graph.edge_index[1]
        x_in = graph.x
        x = self._run(self.node_encoder, x_in)
        e = self._run(self._encode_edges, x_in, src, dst)
        for _ in range(self.iterations):
            x, e = self._run(self._iteration, x, e, src, dst)
        return self._run(self._output, x, e, src, dst)

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

Efficiency: the first linear layer of every [x_src, x_dst, e] MLP is split
into W_src x_src + W_dst x_dst + W_e e, and the node terms are computed on node
rows before gathering to edges (project-then-gather: n_local × H work instead
of E × 2H). Sums over incident edges use ``index_add``; there is no dense
adjacency and no Python loop over edges.

Each iteration is computed in two segments: (A) projections of owned rows and
the interior edges (both ends owned), which need no halo; (B) halo
projections, boundary edges and the node update. With ``overlap`` the halo
exchange is in flight during (A). With ``checkpointing`` the local compute is
recomputed in backward (``torch.utils.checkpoint``): one region per iteration
without overlap (only x, x_halo and e are kept: one E×H tensor per
iteration), one per segment with overlap (A's interior edge update is kept
too). The exchange itself is always outside the checkpointed regions, so
recomputation never repeats or skips a message and stays exact.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from domainpar.errors import DomainparError, FieldError
from domainpar.model.exchange import Exchange, IdentityExchange
from domainpar.partition.local_graph import LocalGraph

#: Activation names accepted by :class:`ModelConfig`.
ACTIVATIONS = {
    "silu": nn.SiLU,
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "gelu": nn.GELU,
    "elu": nn.ELU,
    "leaky_relu": nn.LeakyReLU,
}


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of :class:`InteractionNetwork`."""

    node_features: int = 3
    """Input features per node (EventGraph.x columns: r, phi, z)."""
    edge_features: int = 4
    """Input features per edge (EventGraph.edge_attr columns: dr, dphi, dz, dR)."""
    hidden: int = 64
    """Width H of node and edge latent vectors and of every hidden layer."""
    mlp_layers: int = 2
    """Linear layers in each encoder, edge network, node network and head (before the head's output layer)."""
    num_iterations: int = 8
    """Message-passing steps (each costs one halo exchange; the head costs one more)."""
    activation: str = "silu"
    """Hidden activation: one of silu, relu, tanh, gelu, elu, leaky_relu."""
    layer_norm: bool = True
    """LayerNorm after every hidden linear layer (row-wise, so exact under partitioning)."""
    checkpointing: bool = False
    """Recompute each iteration's local compute in backward to save activation memory (exact)."""
    overlap: bool = False
    """Compute interior edges while the halo exchange is in flight (exact)."""
    recurrent: bool = True
    """True: one edge and one node network shared by all iterations; False: separate networks per iteration."""

    def __post_init__(self) -> None:
        for name in ("node_features", "edge_features", "hidden", "mlp_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise FieldError(name, f"must be a positive integer (got {value!r})")
        if not isinstance(self.num_iterations, int) or isinstance(self.num_iterations, bool) or self.num_iterations < 0:
            raise FieldError("num_iterations", f"must be a non-negative integer (got {self.num_iterations!r})")
        if self.activation not in ACTIVATIONS:
            raise FieldError("activation", f"must be one of {', '.join(sorted(ACTIVATIONS))} (got {self.activation!r})")
        for name in ("layer_norm", "checkpointing", "overlap", "recurrent"):
            if not isinstance(getattr(self, name), bool):
                raise FieldError(name, f"must be true or false (got {getattr(self, name)!r})")

    def to_dict(self) -> dict:
        """Plain dict (for checkpoints and YAML)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "ModelConfig":
        """Inverse of :meth:`to_dict`; unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise DomainparError(f"model config has unknown keys {unknown} (expected a subset of {sorted(known)})")
        return cls(**values)


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
    computed once per node row (:meth:`project`) and gathered per edge
    (:meth:`edges`).
    """

    def __init__(self, hidden: int, depth: int, activation: str, layer_norm: bool) -> None:
        super().__init__()
        self.hidden = hidden
        self.mlp = MLP(3 * hidden, hidden, depth, activation, layer_norm)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(n, H) node rows → ((n, H) W_src x, (n, H) W_dst x)."""
        weight, h = self.mlp.first.weight, self.hidden
        return F.linear(x, weight[:, :h]), F.linear(x, weight[:, h : 2 * h])

    def edges(
        self, proj_src: torch.Tensor, proj_dst: torch.Tensor, e: torch.Tensor, src: torch.Tensor, dst: torch.Tensor
    ) -> torch.Tensor:
        """MLP output (E', H) for edges (src, dst) with features e (E', H)."""
        first = self.mlp.first
        pre = proj_src[src] + proj_dst[dst] + F.linear(e, first.weight[:, 2 * self.hidden :], first.bias)
        return self.mlp.tail(pre)


class InteractionNetwork(nn.Module):
    """Edge classifier: one logit per local edge of a (local) event graph.

    Args:
        config: hyper-parameters.
    """

    def __init__(self, config: ModelConfig = ModelConfig()) -> None:
        super().__init__()
        c = config
        self.config = config
        self.node_encoder = MLP(c.node_features, c.hidden, c.mlp_layers, c.activation, c.layer_norm)
        self.edge_encoder = MLP(c.edge_features, c.hidden, c.mlp_layers, c.activation, c.layer_norm)
        num_networks = min(1, c.num_iterations) if c.recurrent else c.num_iterations
        self.edge_networks = nn.ModuleList(
            [PairMLP(c.hidden, c.mlp_layers, c.activation, c.layer_norm) for _ in range(num_networks)]
        )
        self.node_networks = nn.ModuleList(
            [MLP(3 * c.hidden, c.hidden, c.mlp_layers, c.activation, c.layer_norm) for _ in range(num_networks)]
        )
        self.head = PairMLP(c.hidden, c.mlp_layers, c.activation, c.layer_norm)
        self.head_output = nn.Linear(c.hidden, 1)

    @property
    def exchanges_per_forward(self) -> int:
        """Halo exchanges in one forward pass (each iteration, plus the head)."""
        return self.config.num_iterations + 1

    # ---- segments (each may be checkpointed; none of them communicates) ----

    def _interior(
        self, network: PairMLP, x: torch.Tensor, e_interior: torch.Tensor, src: torch.Tensor, dst: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Segment A: owned projections and the interior edges' MLP output (no halo needed)."""
        proj_src, proj_dst = network.project(x)
        return proj_src, proj_dst, network.edges(proj_src, proj_dst, e_interior, src, dst)

    def _boundary(
        self,
        network: PairMLP,
        x_halo: torch.Tensor,
        proj_src_owned: torch.Tensor,
        proj_dst_owned: torch.Tensor,
        e_boundary: torch.Tensor,
        src: torch.Tensor,
        dst: torch.Tensor,
    ) -> torch.Tensor:
        """Boundary edges' MLP output, once the halo rows are in."""
        halo_src, halo_dst = network.project(x_halo)
        proj_src = torch.cat([proj_src_owned, halo_src])
        proj_dst = torch.cat([proj_dst_owned, halo_dst])
        return network.edges(proj_src, proj_dst, e_boundary, src, dst)

    def _finish_iteration(
        self,
        iteration: int,
        x: torch.Tensor,
        x_halo: torch.Tensor,
        proj_src_owned: torch.Tensor,
        proj_dst_owned: torch.Tensor,
        e: torch.Tensor,
        update_interior: torch.Tensor,
        edge_index: torch.Tensor,
        num_interior: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Segment B: boundary edges, residual edge update, node update of owned rows."""
        network = self.edge_networks[min(iteration, len(self.edge_networks) - 1)]
        node_network = self.node_networks[min(iteration, len(self.node_networks) - 1)]
        src, dst = edge_index[0], edge_index[1]
        update_boundary = self._boundary(
            network, x_halo, proj_src_owned, proj_dst_owned, e[num_interior:], src[num_interior:], dst[num_interior:]
        )
        e_new = e + torch.cat([update_interior, update_boundary])
        num_owned = x.shape[0]
        num_local = num_owned + x_halo.shape[0]
        # Every edge incident to an owned node is local, so these sums are complete for owned rows.
        zeros = e_new.new_zeros(num_local, e_new.shape[1])
        sum_in = zeros.index_add(0, dst, e_new)[:num_owned]
        sum_out = zeros.index_add(0, src, e_new)[:num_owned]
        x_new = x + node_network(torch.cat([x, sum_in, sum_out], dim=1))
        return x_new, e_new

    def _run(self, fn, *args):
        if self.config.checkpointing and torch.is_grad_enabled():
            return checkpoint(fn, *args, use_reentrant=False)
        return fn(*args)

    def _whole_iteration(self, iteration: int, x, x_halo, e, edge_index, num_interior: int):
        """Segments A and B back to back (no overlap): one checkpointed region per iteration."""
        network = self.edge_networks[min(iteration, len(self.edge_networks) - 1)]
        src, dst = edge_index[0, :num_interior], edge_index[1, :num_interior]
        proj_src, proj_dst, update_interior = self._interior(network, x, e[:num_interior], src, dst)
        return self._finish_iteration(
            iteration, x, x_halo, proj_src, proj_dst, e, update_interior, edge_index, num_interior
        )

    def _whole_head(self, x, x_halo, e, edge_index, num_interior: int):
        src, dst = edge_index[0, :num_interior], edge_index[1, :num_interior]
        proj_src, proj_dst, logits_interior = self._head_interior(x, e[:num_interior], src, dst)
        return self._head(x_halo, proj_src, proj_dst, e, logits_interior, edge_index, num_interior)

    def _head(self, x_halo, proj_src, proj_dst, e, logits_interior, edge_index, num_interior: int):
        src, dst = edge_index[0, num_interior:], edge_index[1, num_interior:]
        hidden_boundary = self._boundary(self.head, x_halo, proj_src, proj_dst, e[num_interior:], src, dst)
        return torch.cat([logits_interior, self.head_output(hidden_boundary).squeeze(-1)])

    def _head_interior(self, x, e_interior, src, dst):
        proj_src, proj_dst, hidden = self._interior(self.head, x, e_interior, src, dst)
        return proj_src, proj_dst, self.head_output(hidden).squeeze(-1)

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
        edge_index, num_interior = graph.edge_index, graph.num_interior_edges
        num_owned = graph.num_owned
        src, dst = edge_index[0, :num_interior], edge_index[1, :num_interior]
        x = self._run(self.node_encoder, graph.x)
        e = self._run(self.edge_encoder, graph.edge_attr)  # the encoder's E×H activations are large too
        # The head reads [x_src, x_dst, e] too: iterations 0..T-1, then the head, each after one exchange.
        for step in range(self.config.num_iterations + 1):
            is_head = step == self.config.num_iterations
            pending = exchange.start(x)
            if not self.config.overlap:
                # One region per step: checkpointing keeps only (x, x_halo, e) per iteration.
                x_halo = pending.wait()[num_owned:]
                if is_head:
                    return self._run(self._whole_head, x, x_halo, e, edge_index, num_interior)
                x, e = self._run(self._whole_iteration, step, x, x_halo, e, edge_index, num_interior)
                continue
            # Overlap: segment A (interior edges) while the halo rows are in flight, then segment B.
            if is_head:
                proj_src, proj_dst, logits_interior = self._run(self._head_interior, x, e[:num_interior], src, dst)
                x_halo = pending.wait()[num_owned:]
                return self._run(self._head, x_halo, proj_src, proj_dst, e, logits_interior, edge_index, num_interior)
            network = self.edge_networks[min(step, len(self.edge_networks) - 1)]
            proj_src, proj_dst, update_interior = self._run(self._interior, network, x, e[:num_interior], src, dst)
            x_halo = pending.wait()[num_owned:]
            x, e = self._run(
                self._finish_iteration, step, x, x_halo, proj_src, proj_dst, e, update_interior, edge_index, num_interior
            )
        raise AssertionError("unreachable: the loop returns at the head step")

    def _check_inputs(self, graph: LocalGraph, exchange: Exchange) -> None:
        c = self.config
        if graph.x.ndim != 2 or graph.x.shape[1] != c.node_features:
            raise DomainparError(
                f"graph.x must have shape (n_owned, {c.node_features}) for this model (got {tuple(graph.x.shape)})"
            )
        if graph.edge_attr.ndim != 2 or graph.edge_attr.shape[1] != c.edge_features:
            raise DomainparError(
                f"graph.edge_attr must have shape (E, {c.edge_features}) for this model (got {tuple(graph.edge_attr.shape)})"
            )
        num_halo = getattr(exchange, "num_halo", None)
        if num_halo is not None and num_halo != graph.num_halo:
            raise DomainparError(
                f"exchange delivers {num_halo} halo rows but the local graph has {graph.num_halo}; "
                "build the exchange from the same part plan (IdentityExchange only for a one-part graph)"
            )

"""PyTorch Geometric interop: graphs to and from ``Data``, PyG layers run domain-parallel.

:func:`to_pyg` / :func:`from_pyg` convert an :class:`EventGraph` to a
``torch_geometric.data.Data`` and back (lossless for every EventGraph field).

:class:`DomainParallelConv` runs an existing PyG ``MessagePassing`` layer on a
part's local graph: the owned rows are completed with their halo rows by the
exchange, the layer runs on the local edges, and only the owned rows of its
output are kept. This is exact for any layer whose output at a node depends
only on the node's *incoming* edges and their endpoints, because every
incoming edge of an owned node is local and both its endpoints are owned or
halo rows (docs/pyg.md lists the layers). Layers that need statistics over
more than a node's incoming edges need them made global first: ``GCNConv``'s
symmetric normalisation reads the source node's degree (use
:func:`gcn_norm_local`, which completes halo degrees by exchange, and
``normalize=False``); ``BatchNorm``, global pooling or a softmax over all edges
need their statistics reduced over the domain group.

No torch.distributed here: the exchange is an argument.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch_geometric.data import Data
from torch_geometric.nn.conv import MessagePassing

from domainpar.data.event_graph import ARRAY_DTYPES, OPTIONAL_ARRAYS, REQUIRED_ARRAYS, EventGraph
from domainpar.errors import DomainparError
from domainpar.model.exchange import Exchange, IdentityExchange
from domainpar.partition.local_graph import LocalGraph

_ARRAY_FIELDS = REQUIRED_ARRAYS + OPTIONAL_ARRAYS


def to_pyg(graph: EventGraph) -> Data:
    """An EventGraph as a PyG ``Data`` (tensors share no memory with the graph's arrays).

    Every array field becomes an attribute of the same name; ``event_id`` is an int attribute.
    """
    values = {"event_id": int(graph.event_id)}
    for name in _ARRAY_FIELDS:
        array = getattr(graph, name)
        if array is not None:
            values[name] = torch.from_numpy(np.array(array, copy=True))
    return Data(**values)


def from_pyg(data: Data, event_id: int | None = None) -> EventGraph:
    """A PyG ``Data`` as an EventGraph (the inverse of :func:`to_pyg`).

    Args:
        data: needs x, pos, hit_id, layer, edge_index, edge_attr; y, particle_id
            and particle_pt are optional.
        event_id: overrides ``data.event_id`` (default 0 when absent).

    Raises:
        DomainparError: a required attribute is missing, or shapes do not fit.
    """
    missing = [name for name in REQUIRED_ARRAYS if getattr(data, name, None) is None]
    if missing:
        raise DomainparError(f"Data must have attributes {list(REQUIRED_ARRAYS)} to become an EventGraph (missing {missing})")
    arrays = {}
    for name in _ARRAY_FIELDS:
        value = getattr(data, name, None)
        if value is None:
            arrays[name] = None
            continue
        tensor = value.detach().cpu() if isinstance(value, torch.Tensor) else torch.as_tensor(value)
        arrays[name] = np.ascontiguousarray(tensor.numpy()).astype(ARRAY_DTYPES[name], copy=False)
    if event_id is None:
        event_id = int(getattr(data, "event_id", 0) or 0)
    return EventGraph(event_id=int(event_id), **arrays)


class DomainParallelConv(nn.Module):
    """Runs a PyG ``MessagePassing`` layer on a part's local graph; returns the owned rows.

    Args:
        layer: the PyG layer (message flow ``source_to_target``: edge src → dst,
            the EventGraph's inner → outer direction).

    Exact for layers whose output at a node depends only on its incoming edges
    and their endpoints (see the module docstring and docs/pyg.md).
    """

    def __init__(self, layer: MessagePassing) -> None:
        super().__init__()
        if getattr(layer, "flow", "source_to_target") != "source_to_target":
            raise DomainparError(
                f"layer flow must be 'source_to_target' for domain-parallel use (got {layer.flow!r}): "
                "an owned node's complete neighbourhood is its incoming edges"
            )
        self.layer = layer

    def forward(
        self,
        x_owned: torch.Tensor,
        graph: LocalGraph,
        exchange: Exchange = IdentityExchange(),
        edge_index: torch.Tensor | None = None,
        **layer_kwargs,
    ) -> torch.Tensor:
        """Apply the layer.

        Args:
            x_owned: (n_owned, C_in) rows of the owned nodes.
            graph: the part's local graph.
            exchange: completes owned rows with halo rows.
            edge_index: (2, E') local edges to use instead of ``graph.edge_index``
                (e.g. with self-loops from :func:`gcn_norm_local`).
            **layer_kwargs: passed to the layer (``edge_attr=``, ``edge_weight=`` ...).

        Returns:
            (n_owned, C_out) the layer's output at the owned nodes.
        """
        x_local = exchange(x_owned)
        out = self.layer(x_local, graph.edge_index if edge_index is None else edge_index, **layer_kwargs)
        return out[: graph.num_owned]


def gcn_norm_local(
    graph: LocalGraph, exchange: Exchange = IdentityExchange(), *, add_self_loops: bool = True, dtype: torch.dtype | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """GCN's symmetric normalisation with *global* degrees, for ``GCNConv(normalize=False)``.

    The in-degree of an owned node is complete locally (all its incoming edges
    are local); a halo node's is not, so the owners' degrees are exchanged
    like node features. Self-loops are added for owned nodes only (halo
    outputs are discarded anyway).

    Args:
        graph: the part's local graph.
        exchange: the part's exchange (called once, with a (n_owned, 1) tensor).
        add_self_loops: add a self-loop per owned node, as GCNConv does.
        dtype: floating type of the weights (default: graph.x's).

    Returns:
        ((2, E_local + n_owned) edge_index, (E_local + n_owned,) edge_weight)
        with weight deg(src)^-1/2 · deg(dst)^-1/2.
    """
    dtype = dtype or graph.x.dtype
    device = graph.edge_index.device
    edge_index = graph.edge_index
    weight = torch.ones(edge_index.shape[1], dtype=dtype, device=device)
    if add_self_loops:
        loops = torch.arange(graph.num_owned, device=device)
        edge_index = torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
        weight = torch.cat([weight, torch.ones(graph.num_owned, dtype=dtype, device=device)])
    in_degree = torch.zeros(graph.num_local_nodes, dtype=dtype, device=device).index_add_(0, edge_index[1], weight)
    degree = exchange(in_degree[: graph.num_owned].unsqueeze(1)).squeeze(1)
    inv_sqrt = degree.pow(-0.5).masked_fill(degree == 0, 0.0)
    return edge_index, inv_sqrt[edge_index[0]] * weight * inv_sqrt[edge_index[1]]


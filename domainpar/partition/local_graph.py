"""A part's local graph as torch tensors: what the model consumes.

The model sees only local ids: owned nodes ``0 .. num_owned-1`` followed by halo
nodes. With a one-part plan this is the whole event graph, so single-process and
partitioned runs share one code path.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from domainpar.data.event_graph import EventGraph
from domainpar.partition.part_data import PartData
from domainpar.partition.plan import PartPlan


def tensor_of(array: np.ndarray) -> torch.Tensor:
    """A CPU tensor sharing ``array``'s memory, also for the read-only arrays of a plan (copied only if
    ``array`` is not contiguous or its memory is not writable at all).

    Plans are immutable and nothing writes into model inputs, so sharing is safe; torch
    merely refuses read-only buffers, so the tensor views the writable memory underneath.
    """
    array = np.ascontiguousarray(array)
    if not array.flags.writeable:
        view = array.view()
        try:
            view.flags.writeable = True
        except ValueError:  # memory that is read-only at its source (e.g. a read-only mmap)
            view = array.copy()
        array = view
    return torch.from_numpy(array)


@dataclass(frozen=True, eq=False)
class LocalGraph:
    """Tensors of one part. n_o = owned nodes, n_h = halo nodes, E_l = local edges."""

    x: torch.Tensor
    """(n_o, F) input features of the owned nodes (halo features arrive by exchange)."""
    edge_index: torch.Tensor
    """(2, E_l) int64 local ids (owned then halo) of every local edge; interior edges first."""
    edge_attr: torch.Tensor
    """(E_l, F_e) input features of every local edge."""
    num_owned: int
    """Owned nodes n_o; local ids >= n_o are halo."""
    num_halo: int
    """Halo nodes n_h."""
    num_interior_edges: int
    """Edges [0, num_interior_edges) touch owned nodes only."""
    edge_owned: torch.Tensor
    """(E_l,) bool: edges this part counts in the loss and metrics (each global edge owned once)."""
    edge_ids: torch.Tensor
    """(E_l,) int64 global edge ids, to scatter predictions back to the event."""
    y: torch.Tensor | None
    """(E_l,) float labels, or None for a graph without truth."""
    num_edges_global: int
    """Edge count of the whole event the loss is normalised by."""
    num_positive_edges_global: int
    """True edges in the whole event."""

    @property
    def num_local_nodes(self) -> int:
        return self.num_owned + self.num_halo

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> "LocalGraph":
        """Move to ``device``; ``dtype`` converts the floating-point features (not labels)."""
        float_kw = {"device": device} if dtype is None else {"device": device, "dtype": dtype}
        return dataclasses.replace(
            self,
            x=self.x.to(**float_kw),
            edge_index=self.edge_index.to(device),
            edge_attr=self.edge_attr.to(**float_kw),
            edge_owned=self.edge_owned.to(device),
            edge_ids=self.edge_ids.to(device),
            y=None if self.y is None else self.y.to(device),
        )


def _local(part: PartPlan, x: np.ndarray, edge_attr: np.ndarray, y: np.ndarray | None) -> LocalGraph:
    return LocalGraph(
        x=tensor_of(x),
        edge_index=tensor_of(part.edge_index),
        edge_attr=tensor_of(edge_attr),
        num_owned=part.num_owned,
        num_halo=part.num_halo,
        num_interior_edges=part.num_interior_edges,
        edge_owned=tensor_of(part.edge_owned),
        edge_ids=tensor_of(part.edge_ids),
        y=None if y is None else tensor_of(y),
        num_edges_global=part.num_edges_global,
        num_positive_edges_global=part.num_positive_edges_global,
    )


def local_graph(graph: EventGraph, part: PartPlan) -> LocalGraph:
    """Cut ``part``'s tensors out of ``graph`` (CPU; call ``.to(device)`` after)."""
    edge_ids = part.edge_ids
    y = None if graph.y is None else graph.y[edge_ids]
    return _local(part, graph.x[part.owned_ids], graph.edge_attr[edge_ids], y)


def local_graph_of(data: PartData) -> LocalGraph:
    """The CPU tensors of a part (sharing the part's memory, no copies); ``.to(device, dtype)`` after.

    Prefer :func:`domainpar.parallel.part.rank_part`, which also stages the copy to the device and builds the exchange.
    """
    return _local(data.plan, data.x, data.edge_attr, data.y)

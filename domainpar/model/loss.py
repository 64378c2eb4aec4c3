"""The edge classification loss, normalised so that per-rank losses add up.

Each global edge is owned by exactly one part (the owner of its dst node), so
summing the weighted BCE over *owned* local edges and dividing by the global
edge count gives per-rank losses whose sum over the domain group is the
full-graph mean loss; backward of each rank's loss then gives per-rank
gradients whose sum is the full-graph gradient.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from domainpar.errors import DomainparError
from domainpar.partition.local_graph import LocalGraph


def edge_loss(logits: torch.Tensor, graph: LocalGraph, pos_weight: float = 1.0) -> torch.Tensor:
    """This rank's share of the event's weighted BCE-with-logits loss.

    Args:
        logits: (E_local,) model output for every local edge.
        graph: the local graph (needs labels ``y``).
        pos_weight: weight of true edges (false edges weigh 1).

    Returns:
        Scalar: sum over owned local edges of the weighted BCE, divided by
        ``graph.num_edges_global``.
    """
    if graph.y is None:
        raise DomainparError("edge_loss needs a graph with truth labels (got graph.y = None)")
    if logits.shape != (graph.num_edges,):
        raise DomainparError(f"logits must have shape ({graph.num_edges},) (got {tuple(logits.shape)})")
    if pos_weight <= 0:
        raise DomainparError(f"pos_weight must be positive (got {pos_weight})")
    owned = graph.edge_owned
    target = graph.y[owned].to(logits.dtype)
    weight = None if pos_weight == 1.0 else torch.as_tensor(pos_weight, dtype=logits.dtype, device=logits.device)
    total = F.binary_cross_entropy_with_logits(logits[owned], target, pos_weight=weight, reduction="sum")
    return total / max(graph.num_edges_global, 1)

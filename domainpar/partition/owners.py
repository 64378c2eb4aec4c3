"""Checks and repairs shared by every partitioner's owner assignment."""

from __future__ import annotations

import numpy as np

from domainpar.errors import DomainparError


def check_num_parts(num_parts: object, num_nodes: int, *, source: str = "num_parts") -> int:
    """Validate a requested part count against a graph of ``num_nodes`` nodes.

    Every part must own at least one node, so more parts than nodes is refused.
    """
    if isinstance(num_parts, bool) or not isinstance(num_parts, (int, np.integer)):
        raise DomainparError(f"{source} must be an integer (got {type(num_parts).__name__})")
    num_parts = int(num_parts)
    if num_parts < 1:
        raise DomainparError(f"{source} must be at least 1 (got {num_parts})")
    if num_parts > max(num_nodes, 1):
        raise DomainparError(
            f"{source} must be at most the number of nodes ({num_nodes}) so every part owns a node (got {num_parts})"
        )
    return num_parts


def fill_empty_parts(owner: np.ndarray, num_parts: int) -> np.ndarray:
    """Give every empty part one node taken from the currently largest part.

    METIS can leave parts empty on tiny or very disconnected graphs, and
    quantile sectors can when many hits share a coordinate. A plan needs every
    part to own a node (each rank must have something to hold), so for each
    empty part (ascending) the highest-id node of the largest part (lowest part
    index on ties) moves there. Deterministic; a no-op when no part is empty.

    Args:
        owner: (N,) int64 part of every node; N >= num_parts.
        num_parts: number of parts P.

    Returns:
        (N,) int64 owner with every part non-empty (a copy if anything moved).
    """
    counts = np.bincount(owner, minlength=num_parts)
    empty = np.flatnonzero(counts == 0)
    if empty.size == 0:
        return owner
    owner = owner.copy()
    for part in empty:
        donor = int(np.argmax(counts))
        node = int(np.flatnonzero(owner == donor)[-1])
        owner[node] = part
        counts[donor] -= 1
        counts[part] += 1
    return owner

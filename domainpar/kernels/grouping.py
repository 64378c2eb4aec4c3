"""Rows grouped by an integer key in linear time: a stable counting sort (numba).

What ``np.argsort(keys, kind="stable")`` and a ``searchsorted`` of its result give, in O(E + K) instead of
O(E log E): the triplet search's adjacency (:mod:`domainpar.kernels.triplets`) and a graph's edge segments on a
CPU (:func:`domainpar.kernels.segment_reduce.build_segments`).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _group(keys: np.ndarray, start: np.ndarray) -> np.ndarray:
    """(E,) row ids grouped by ``keys`` given the groups' offsets ``start``: a counting sort, stable."""
    fill = start[:-1].copy()
    order = np.empty(keys.shape[0], dtype=np.int64)
    for i in range(keys.shape[0]):
        k = keys[i]
        order[fill[k]] = i
        fill[k] += 1
    return order


def group_by_key(keys: np.ndarray, num_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows grouped by key, ascending row id within a group.

    Args:
        keys: (E,) int64 keys in [0, num_keys).
        num_keys: K.

    Returns:
        ``(start, order)``: (K + 1,) int64 offsets and (E,) int64 row ids; group k is ``order[start[k]:start[k + 1]]``.
    """
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    start = np.zeros(num_keys + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=num_keys), out=start[1:])
    return start, _group(keys, start)

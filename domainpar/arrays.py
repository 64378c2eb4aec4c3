"""Set operations on integer arrays by sorting: hit ids, particle ids, packed edge keys.

numpy 2.4 finds the distinct values of an array with a hash table (``np.unique``, and so ``np.setdiff1d``,
``np.intersect1d`` and ``np.isin``), many times slower than a sort on this project's keys. The functions here give
numpy's results (same values, same order, same dtype) by sorting, for integer and boolean arrays; other dtypes go
to numpy.
"""

from __future__ import annotations

import numpy as np


def _sortable(values: np.ndarray) -> bool:
    return values.dtype.kind in "biu"


def unique(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``values`` (flattened): ``np.unique(values)``.

    Args:
        values: any shape; integer or boolean (other dtypes: ``np.unique``).

    Returns:
        (U,) sorted, of ``values``' dtype.
    """
    values = np.asarray(values).reshape(-1)
    if not _sortable(values):
        return np.unique(values)
    ordered = np.sort(values)
    if ordered.size == 0:
        return ordered
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def member(values: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Whether each value is in ``table``: ``np.isin(values, table)``, by one sort of the table and a binary search
    per value.

    Args:
        values: any shape, integer.
        table: any shape, integer.

    Returns:
        bool, ``values``' shape.
    """
    values, table = np.asarray(values), np.asarray(table).reshape(-1)
    # Signed against unsigned would be compared as floats by searchsorted: numpy's own comparison then.
    if not (_sortable(values) and _sortable(table)) or values.dtype.kind != table.dtype.kind:
        return np.isin(values, table)
    table = np.sort(table)
    if table.size == 0:
        return np.zeros(values.shape, dtype=bool)
    return table[np.minimum(np.searchsorted(table, values), table.size - 1)] == values


def first_and_count(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(key, return_index=True, return_counts=True)[1:]`` by a stable sort: the first index of every
    distinct key, in key order, and its count. Shapes (U,), (U,)."""
    order = np.argsort(key, kind="stable")
    if order.size == 0:
        return order, order.copy()
    ordered = key[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    return order[starts], np.diff(np.r_[starts, key.size])


def difference(values: np.ndarray, table: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``values`` that are not in ``table``: ``np.setdiff1d(values, table)``."""
    distinct = unique(values)
    return distinct[~member(distinct, table)]


__all__ = ["difference", "first_and_count", "member", "unique"]

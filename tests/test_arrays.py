"""domainpar.arrays: numpy's set operations on integer keys by sorting give numpy's own results."""

from __future__ import annotations

import numpy as np
import pytest

from domainpar.arrays import difference, first_and_count, member, unique


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint64, np.int8, np.bool_])
@pytest.mark.parametrize("size", [0, 1, 7, 5000])
def test_the_sorting_versions_equal_numpys(dtype, size):
    rng = np.random.default_rng(size)
    values = rng.integers(0, 100, size).astype(dtype)
    table = rng.integers(0, 100, size // 2 + 1).astype(dtype)
    for got, expected in ((unique(values), np.unique(values)), (member(values, table), np.isin(values, table)),
                          (difference(values, table), np.setdiff1d(values, table))):  # fmt: skip
        assert got.dtype == expected.dtype and np.array_equal(got, expected)
    first, count = first_and_count(values)
    _, numpy_first, numpy_count = np.unique(values, return_index=True, return_counts=True)
    assert np.array_equal(first, numpy_first) and np.array_equal(count, numpy_count)


def test_shapes_keys_at_the_ends_and_other_dtypes():
    grid = np.array([[3, 1], [3, -2]], dtype=np.int64)
    assert unique(grid).tolist() == [-2, 1, 3]
    assert member(grid, np.array([3])).tolist() == [[True, False], [True, False]]
    big = np.array([np.iinfo(np.int64).max, np.iinfo(np.int64).min, 0], dtype=np.int64)
    assert member(big, big[:1]).tolist() == [True, False, False]  # a value past the table's last key
    assert member(big, np.empty(0, np.int64)).tolist() == [False, False, False]
    # Signed against unsigned keys, and floats: numpy's answer (with its NaN handling).
    assert member(np.array([-1, 5], dtype=np.int64), np.array([5, 2**63], dtype=np.uint64)).tolist() == [False, True]
    floats = np.array([1.0, np.nan, 1.0, np.nan])
    assert np.array_equal(unique(floats), np.unique(floats), equal_nan=True)

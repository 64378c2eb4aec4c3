"""The graph build's thread chunks: ranges cover every element once, in order, and the thread count is the one asked."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from domainpar.kernels import chunks


@pytest.mark.parametrize("total, pieces", [(0, 4), (10, 4), (100_000, 3), (1 << 20, 8)])
def test_bounds_cover_every_element_once_in_order(total, pieces):
    ranges = chunks.bounds(total, pieces)
    assert ranges[0][0] == 0 and ranges[-1][1] == total
    assert all(hi == lo for (_, hi), (lo, _) in pairwise(ranges))
    assert len(ranges) <= max(1, total // chunks.MIN_CHUNK)


def test_weighted_bounds_balance_work_and_cover_every_item():
    work = np.array([0, 0, 50, 1, 1, 1, 50, 0, 3])
    cumulative = np.concatenate([[0], np.cumsum(work)])
    ranges = chunks.weighted_bounds(cumulative, 3)
    assert ranges[0][0] == 0 and ranges[-1][1] == work.size
    assert all(hi == lo for (_, hi), (lo, _) in pairwise(ranges))
    assert all(hi > lo for lo, hi in ranges)
    assert chunks.weighted_bounds(np.zeros(1, np.int64), 3) == []


def test_run_keeps_the_order_of_the_ranges_on_any_thread_count():
    ranges = [(k, k + 1) for k in range(40)]
    for threads in (1, 2, 3):
        with chunks.using_threads(threads):
            assert chunks.build_threads() == threads
            assert chunks.run(lambda lo, hi: lo, ranges) == list(range(40))
    with pytest.raises(ValueError), chunks.using_threads(0):
        pass

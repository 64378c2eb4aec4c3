"""The prefetching feeder and the byte-bounded part cache (``domainpar.train.feed``), on CPU with timed fake loads."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from fixtures import random_graph

from domainpar.errors import DomainparError
from domainpar.partition.part_data import whole_graph_part
from domainpar.train.feed import Feeder, PartCache

LOAD_S = 0.15


@pytest.fixture(scope="module")
def parts():
    return [whole_graph_part(random_graph(50 + 10 * i, 200, seed=i)) for i in range(6)]


class SlowLoader:
    """Loads part ``i`` after LOAD_S seconds, records which thread loaded what, can fail on one index."""

    def __init__(self, parts, fail_on=None):
        self.parts = parts
        self.fail_on = fail_on
        self.loaded: list[tuple[int, str]] = []

    def __call__(self, index):
        time.sleep(LOAD_S)
        self.loaded.append((index, threading.current_thread().name))
        if index == self.fail_on:
            raise DomainparError(f"part{index}.npz: damaged")
        return self.parts[index]


def _consume(feeder, order, step_s):
    waits = []
    for index in order:
        staged, waited = feeder.next(index)
        assert staged.data.event_id == index  # random_graph(seed=i) is event i
        waits.append(waited)
        time.sleep(step_s)  # the "step"
    return waits


def test_prefetch_hides_the_reads_behind_slower_steps(parts):
    order = [0, 3, 1, 5, 2]
    loader = SlowLoader(parts)
    with Feeder(loader, order, depth=2, device=torch.device("cpu"), dtype=torch.float64) as feeder:
        waits = _consume(feeder, order, step_s=2 * LOAD_S)
    assert [i for i, _ in loader.loaded] == order
    assert all(name == "domainpar-feed-train" for _, name in loader.loaded)
    # The first event waits for its read; every later one was read while the previous step ran.
    assert waits[0] > 0.5 * LOAD_S
    assert max(waits[1:]) < 0.5 * LOAD_S, waits


def test_without_prefetch_every_step_waits_for_its_read(parts):
    order = [2, 4, 0]
    loader = SlowLoader(parts)
    feeder = Feeder(loader, order, depth=0, device=torch.device("cpu"), dtype=None)
    waits = _consume(feeder, order, step_s=2 * LOAD_S)
    assert min(waits) >= LOAD_S and feeder.wait_seconds == pytest.approx(sum(waits))
    assert all(name == threading.current_thread().name for _, name in loader.loaded)


def test_staged_parts_are_the_parts_in_the_compute_dtype(parts):
    with Feeder(lambda i: parts[i], [1], depth=1, device=torch.device("cpu"), dtype=torch.float64) as feeder:
        staged, _ = feeder.next(1)
    assert staged.graph.x.dtype == torch.float64 and staged.graph.y.dtype == torch.float32
    assert torch.equal(staged.graph.x, torch.tensor(parts[1].x).double())


def test_a_failed_read_is_raised_when_its_event_is_needed(parts):
    order = [0, 1, 2, 3]
    loader = SlowLoader(parts, fail_on=2)
    with Feeder(loader, order, depth=3, device=torch.device("cpu"), dtype=None) as feeder:
        feeder.next(0)
        feeder.next(1)
        with pytest.raises(DomainparError, match="^part2.npz: damaged$"):
            feeder.next(2)
    assert 3 not in [i for i, _ in loader.loaded]  # the thread stopped at the failure


def test_asking_out_of_order_is_a_bug_reported_as_such(parts):
    with Feeder(lambda i: parts[i], [0, 1], depth=1, device=torch.device("cpu"), dtype=None) as feeder:
        with pytest.raises(RuntimeError, match="asked for event 1, the order has 0 next"):
            feeder.next(1)


def test_close_stops_the_thread_of_an_endless_order(parts):
    def endless():
        while True:
            yield 0

    feeder = Feeder(lambda i: parts[i], endless(), depth=2, device=torch.device("cpu"), dtype=None)
    feeder.next(0)
    feeder.close()
    assert not feeder._thread.is_alive()


def test_cache_is_bounded_in_bytes_and_evicts_least_recently_used(parts):
    sizes = [p.nbytes for p in parts]
    cache = PartCache(sizes[0] + sizes[1] + sizes[2])
    for i in range(3):
        cache.put(i, parts[i])
    assert len(cache) == 3 and cache.nbytes == sum(sizes[:3])
    assert cache.get(0) is parts[0]  # 0 is now the most recently used
    cache.put(3, parts[3])  # needs room: 1 goes first, then 2 if still too big
    assert cache.get(1) is None and cache.get(0) is parts[0] and cache.get(3) is parts[3]
    assert cache.nbytes <= cache.max_bytes
    assert PartCache(0).put(0, parts[0]) is None and len(PartCache(0)) == 0


def test_cached_parts_are_not_read_again(parts):
    loader = SlowLoader(parts)
    cache = PartCache(10**9)
    order = [0, 1, 0, 1]
    with Feeder(loader, order, depth=2, device=torch.device("cpu"), dtype=None, cache=cache) as feeder:
        _consume(feeder, order, step_s=0)
    assert [i for i, _ in loader.loaded] == [0, 1] and feeder.fresh == 2 and cache.hits == 2


def test_feeders_never_read_at_the_same_time(parts):
    """Training and validation feeders prefetch at once; their reads must not overlap (numpy header parsing
    through ``ast`` is not thread-safe on CPython 3.11). Fails without ``feed.READ_LOCK``."""
    active, most = [0], [0]
    guard = threading.Lock()

    def load(index):
        with guard:
            active[0] += 1
            most[0] = max(most[0], active[0])
        time.sleep(0.05)
        with guard:
            active[0] -= 1
        return parts[index]

    feeders = [Feeder(load, range(len(parts)), depth=3, device="cpu", dtype=torch.float32, kind=kind) for kind in ("train", "val")]
    try:
        for index in range(len(parts)):
            for feeder in feeders:
                feeder.next(index)
    finally:
        for feeder in feeders:
            feeder.close()
    assert most[0] == 1

"""The failure channel: the first failure wins, every rank reads the same one, peers' failures raise."""

from __future__ import annotations

import signal

import pytest
import torch.distributed as dist

from domainpar.comm.failure import Failure, FailureChannel, PeerFailed, publish_failure, raised
from domainpar.errors import DomainparError, Terminated


def test_first_failure_wins_and_every_rank_reads_it():
    store = dist.HashStore()
    rank0, rank1, rank2 = (FailureChannel(store, r) for r in range(3))
    assert rank0.first() is None
    rank0.raise_if_peer_failed()  # nothing published: no-op
    first = rank1.publish(raised(1, DomainparError("graphs/e.npz: entry x must be float32 (got float64)")))
    assert first.rank == 1 and first.user_error and first.reporter == 1
    assert first.message == "rank 1: graphs/e.npz: entry x must be float32 (got float64)"
    # A later failure (the peer's "connection closed") does not replace it.
    later = rank0.publish(raised(0, RuntimeError("Connection closed by peer")))
    assert later == first
    assert rank2.first() == first == rank0.first()
    with pytest.raises(PeerFailed, match="^rank 1: graphs/e.npz") as info:
        rank2.raise_if_peer_failed()
    assert info.value.failure == first and info.value.stopped_rank == 2
    rank1.raise_if_peer_failed()  # its own failure is not a peer's


def test_failure_lines_are_one_line_and_round_trip():
    failure = raised(3, ValueError("bad\nvalue   here"))
    assert failure.message == "rank 3 failed: ValueError: bad value here" and not failure.user_error
    assert Failure.from_json(failure.to_json()) == failure
    died = Failure(2, "rank 2 died (process 17 on host a is gone)", "died", reporter=0)
    assert Failure.from_json(died.to_json()) == died


def test_acknowledgements_name_the_readers():
    store = dist.HashStore()
    channels = [FailureChannel(store, r) for r in range(4)]
    assert channels[0].acknowledged([1, 2, 3]) == []
    channels[3].acknowledge()
    channels[1].acknowledge()
    channels[1].acknowledge()  # idempotent: a rank is one reader
    assert channels[0].acknowledged([1, 2, 3]) == [1, 3]


def test_a_stop_signal_is_not_published_as_the_ranks_failure(monkeypatch):
    # A launcher stops the survivors of a rank's death: a stop published first would hide that death.
    import domainpar.comm.failure as failure_module

    store = dist.HashStore()
    monkeypatch.setattr(failure_module, "default_channel", lambda: FailureChannel(store, 0))
    stop = Terminated(signal.SIGTERM)
    assert publish_failure(stop) is None and FailureChannel(store, 1).first() is None
    # Carried by another exception (an importer's ImportError made of it): still a stop.
    try:
        raise ImportError("interrupted") from stop
    except ImportError as carried:
        assert publish_failure(carried) is None
    assert FailureChannel(store, 1).first() is None
    # A failure published before is what a stop stands for; a rank's own error is still published.
    died = FailureChannel(store, 1).publish(Failure(1, "rank 1 died (its process 17 on a is gone)", "died", 1))
    assert publish_failure(stop) == died
    assert publish_failure(ValueError("boom")) == died

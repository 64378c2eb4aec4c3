"""Waiting for peers outside any collective: done markers, heartbeats, and the failure channel.

Work that takes an unbounded time (building graphs, partitioning a dataset before training) must not run while
peers wait inside a collective: the process-group timeout would kill a healthy run, and a failure would surface as
a timeout that blames nobody. Instead each rank works, marks itself done in the job's rendezvous store
(:func:`mark_done`), and waits for the others with :func:`wait_for_peers`, which polls the store: a published
failure ends the wait within one poll, and a peer that is not done and whose :class:`Heartbeat` has not moved for
``liveness_s`` is published as dead; a slow but live peer is waited for without a time limit.

Keys (under the channel's ``domainpar/`` prefix): ``wait/heartbeat/<rank>`` and ``wait/<key>/done/<rank>``.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

import torch.distributed as dist

from domainpar.comm.failure import Failure, FailureChannel, PeerFailed

#: Seconds between a waiting rank's polls of the store.
POLL_S = 0.2
#: Seconds between heartbeats.
HEARTBEAT_S = 1.0
#: Default seconds without a heartbeat after which a peer that is not done is declared dead.
LIVENESS_S = 60.0


def _heartbeat_key(rank: int) -> str:
    return f"wait/heartbeat/{rank}"


def _done_key(key: str, rank: int) -> str:
    return f"wait/{key}/done/{rank}"


class Heartbeat:
    """A daemon thread that increments this rank's heartbeat counter every ``interval_s`` while a block runs.

    Use as a context manager around work the peers wait for. The thread also reads the failure channel, so
    :attr:`failure` tells a work loop that the job is over.

    Args:
        channel: a failure channel on a store of its own (``FailureChannel(store.clone(), rank)``):
            the thread must not share a connection with the main thread's blocking calls.
        interval_s: seconds between beats.
    """

    def __init__(self, channel: FailureChannel, interval_s: float = HEARTBEAT_S) -> None:
        self.channel = channel
        self.interval_s = interval_s
        self.failure: Failure | None = None
        """The job's first failure, once a peer published one."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"domainpar-heartbeat-{channel.rank}", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.channel.store.add(_heartbeat_key(self.channel.rank), 1)
                if self.failure is None:
                    first = self.channel.first()
                    if first is not None and first.rank != self.channel.rank:
                        self.failure = first
            except Exception:  # noqa: BLE001 - the waiting side reports a lost store
                pass
            self._stop.wait(self.interval_s)

    def peer_failed(self) -> PeerFailed | None:
        """The exception to stop with when a peer failed (None while every rank is fine)."""
        return None if self.failure is None else PeerFailed(self.failure, self.channel.rank)

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)


def mark_done(channel: FailureChannel, key: str) -> None:
    """Tell the peers waiting in :func:`wait_for_peers` that this rank finished the step ``key``."""
    channel.store.set(_done_key(key, channel.rank), "1")


def wait_for_peers(
    channel: FailureChannel,
    key: str,
    world_size: int,
    *,
    liveness_s: float = LIVENESS_S,
    poll_s: float = POLL_S,
    on_poll: Callable[[], None] | None = None,
) -> None:
    """Wait until every rank called :func:`mark_done` for ``key``; never inside a collective, no time limit.

    A peer that is not done and whose heartbeat has not moved for ``liveness_s`` is published as dead (kind "hung").

    Args:
        channel: this rank's failure channel (the main thread's).
        key: name of the step, unique per run attempt (e.g. ``"prepare-3f2a"``).
        world_size: number of ranks.
        liveness_s: seconds without a heartbeat that make a peer dead.
        poll_s: seconds between polls.
        on_poll: called after every poll (e.g. a progress bar).

    Raises:
        PeerFailed: a peer failed or died (``.failure.message`` names it).
    """
    rank = channel.rank
    store = channel.store
    done_keys = [_done_key(key, r) for r in range(world_size)]
    last_seen: dict[int, tuple[int, float]] = {}
    next_liveness = time.monotonic() + min(liveness_s, 5.0)
    while True:
        channel.raise_if_peer_failed()
        if store.check(done_keys):
            return
        now = time.monotonic()
        if now >= next_liveness:
            next_liveness = now + min(liveness_s / 4, 5.0)
            for r in range(world_size):
                if r == rank or store.check([done_keys[r]]):
                    continue
                beat_key = _heartbeat_key(r)
                beats = int(store.get(beat_key).decode()) if store.check([beat_key]) else -1
                seen, since = last_seen.get(r, (None, now))
                if beats != seen:
                    last_seen[r] = (beats, now)
                elif now - since > liveness_s:
                    what = "no heartbeat" if beats < 0 else "its heartbeat stopped"
                    failure = channel.publish(Failure(
                        r, f"rank {r} stopped responding ({what} for {liveness_s:g} s) before finishing {key}; "
                        "it died or its node is gone", "hung", reporter=rank,
                    ))
                    raise PeerFailed(failure, rank)
        if on_poll is not None:
            on_poll()
        time.sleep(poll_s)


def linger(channel: FailureChannel, world_size: int, timeout_s: float = 5.0) -> None:
    """After publishing this rank's failure: wait (at most ``timeout_s``) until every peer acknowledged it.

    Launchers kill the whole job on the first exit; lingering lets the peers print the cause first. Never raises.
    """
    deadline = time.monotonic() + timeout_s
    peers = [rank for rank in range(world_size) if rank != channel.rank]
    try:
        while time.monotonic() < deadline and len(channel.acknowledged(peers)) < len(peers):
            time.sleep(0.05)
    except Exception:  # noqa: BLE001 - the store may be gone; the failure is being reported anyway
        return


def own_channel(rank: int) -> FailureChannel | None:
    """A failure channel of the default process group on a store connection of its own (for a thread)."""
    if not dist.is_initialized():
        return None
    try:
        store = dist.distributed_c10d._get_default_store().clone()
    except Exception:  # noqa: BLE001 - private accessor; without it there is no channel
        return None
    return FailureChannel(store, rank)


__all__ = ["HEARTBEAT_S", "LIVENESS_S", "POLL_S", "Heartbeat", "linger", "mark_done", "own_channel", "wait_for_peers"]

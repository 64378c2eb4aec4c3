"""The failure channel: the first failure of any rank, readable by every rank within seconds.

A rank that fails publishes one line under one key of the job's rendezvous store with compare-and-set, so the
*first* failure wins: the "connection closed" that its peers see a moment later can never overwrite it, and every
rank names the same culprit. Reading it is one store lookup, cheap enough to poll every second (the watchdog,
:mod:`domainpar.comm.watchdog`) or between units of work outside collectives (:func:`raise_if_peer_failed`).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from domainpar.errors import DomainparError, Terminated, fault_line, interrupt_of, one_line

#: Key prefix of everything domainpar keeps in the rendezvous store.
STORE_PREFIX = "domainpar/"
_FIRST_KEY = "failure/first"
_SEEN_KEY = "failure/seen"


@dataclass(frozen=True)
class Failure:
    """The first failure of a job, as every rank reads it."""

    rank: int
    """The rank that failed."""
    message: str
    """One line naming the rank and what happened (what the user is shown)."""
    kind: str = "raised"
    """raised (an exception on that rank), died (its process is gone) or hung (no heartbeat)."""
    reporter: int = -1
    """The rank that published it (itself when it raised; a peer that saw it die)."""
    user_error: bool = False
    """The failure is a user mistake (a DomainparError: one line, exit status 2)."""

    def to_json(self) -> str:
        return json.dumps(
            {"rank": self.rank, "message": self.message, "kind": self.kind, "reporter": self.reporter,
             "user_error": self.user_error}
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> "Failure":
        data = json.loads(text)
        return cls(int(data["rank"]), str(data["message"]), str(data["kind"]), int(data["reporter"]),
                   bool(data.get("user_error", False)))


def raised(rank: int, exc: BaseException) -> Failure:
    """The failure record of ``exc`` raised on ``rank``: "rank R: <message>" (user mistakes and machine faults keep their
    own line; a bug is named by its type)."""
    if isinstance(exc, DomainparError):
        return Failure(rank, f"rank {rank}: {one_line(exc, limit=500)}", "raised", rank, user_error=True)
    fault = fault_line(exc)
    if fault is not None:
        # This rank's machine failed (memory, disk): named as such, one line, exit status 1.
        return Failure(rank, f"rank {rank}: {fault}", "raised", rank)
    return Failure(rank, f"rank {rank} failed: {type(exc).__name__}: {one_line(exc, limit=500)}", "raised", rank)


class PeerFailed(RuntimeError):
    """This rank stopped because another rank failed first; ``failure`` names it."""

    def __init__(self, failure: Failure, stopped_rank: int) -> None:
        super().__init__(failure.message)
        self.failure = failure
        """The job's first failure."""
        self.stopped_rank = stopped_rank
        """The rank that stopped because of it."""


class FailureChannel:
    """Publish and read the first failure of a job through its rendezvous store.

    Args:
        store: the job's store (every rank must pass the same one); pass a clone when another thread shares it.
        rank: this process's rank.
    """

    def __init__(self, store: Any, rank: int) -> None:
        self.store = dist.PrefixStore(STORE_PREFIX, store)
        self.rank = rank

    def publish(self, failure: Failure) -> Failure:
        """Record ``failure`` unless an earlier one exists; return the job's first failure (either)."""
        current = self.store.compare_set(_FIRST_KEY, "", failure.to_json())
        return Failure.from_json(current)

    def first(self) -> Failure | None:
        """The job's first failure, or None while every rank is fine."""
        if not self.store.check([_FIRST_KEY]):
            return None
        return Failure.from_json(self.store.get(_FIRST_KEY))

    def acknowledge(self) -> None:
        """Record that this rank has read the failure (the rank serving the store waits for that before exiting)."""
        self.store.set(f"{_SEEN_KEY}/{self.rank}", "1")

    def acknowledged(self, ranks: list[int]) -> list[int]:
        """Those of ``ranks`` that have read the failure so far."""
        return [rank for rank in ranks if self.store.check([f"{_SEEN_KEY}/{rank}"])]

    def raise_if_peer_failed(self) -> None:
        """Raise :class:`PeerFailed` when another rank has published a failure."""
        failure = self.first()
        if failure is not None and failure.rank != self.rank:
            raise PeerFailed(failure, self.rank)


_lock = threading.Lock()
_channel: tuple[Any, FailureChannel] | None = None


def default_channel() -> FailureChannel | None:
    """The channel of the default process group (None when there is no group, or no store to share).

    Cached per default group; its store is a clone of the group's, so any thread may use it.
    """
    global _channel
    if not dist.is_initialized():
        return None
    group = dist.group.WORLD
    with _lock:
        if _channel is not None and _channel[0] is group:
            return _channel[1]
        try:
            store = dist.distributed_c10d._get_default_store().clone()
        except Exception:  # noqa: BLE001 - a private accessor; without it there is no channel, not a crash
            return None
        channel = FailureChannel(store, dist.get_rank())
        _channel = (group, channel)
        return channel


def publish_failure(exc_or_failure: BaseException | Failure) -> Failure | None:
    """Publish this rank's failure on the default group's channel; return the job's first failure.

    A :class:`PeerFailed` is not published again, nor is a stop signal (:class:`~domainpar.errors.Terminated`): a
    launcher stops every rank once one died, and a stop published first would hide that death. Returns None when
    there is no channel (one process).
    """
    if isinstance(exc_or_failure, PeerFailed):
        return exc_or_failure.failure
    channel = default_channel()
    if channel is None:
        return None
    if isinstance(exc_or_failure, BaseException) and isinstance(interrupt_of(exc_or_failure), Terminated):
        try:
            return channel.first()
        except Exception:  # noqa: BLE001 - the store may have died with the peer that hosted it
            return None
    failure = exc_or_failure if isinstance(exc_or_failure, Failure) else raised(channel.rank, exc_or_failure)
    try:
        return channel.publish(failure)
    except Exception:  # noqa: BLE001 - the store may have died with the peer that hosted it
        return None


def raise_if_peer_failed() -> None:
    """Raise :class:`PeerFailed` when another rank of the default group has failed (no-op without a group).

    Cheap (one store lookup): call it between units of work that run outside collectives.
    """
    channel = default_channel()
    if channel is not None:
        channel.raise_if_peer_failed()


__all__ = [
    "Failure",
    "FailureChannel",
    "PeerFailed",
    "STORE_PREFIX",
    "default_channel",
    "publish_failure",
    "raise_if_peer_failed",
    "raised",
]

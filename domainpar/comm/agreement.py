"""Ranks that agree before they compute: settings compared with rank 0's, and refusals every rank makes together.

A job whose ranks were given different settings does not fail cleanly on its own: a model of another width
aborts a gloo collective, another epoch count leaves one rank waiting for a step that never comes. :func:`agree`
compares every rank's settings with rank 0's **through the rendezvous store** (a collective would need the ranks
to agree on its shapes first, which is what is being checked), before the job's first collective, and ends a job
that disagrees on every rank with the same line. Each rank does O(1) store operations whatever the world size.

:func:`decide_on_rank0` is the same ending for a verdict that one rank computes for all (a check that costs work
every rank would repeat: the locality of the model, :mod:`domainpar.verification.locality`).

A refusal made together (:func:`refuse_together`) ends every rank alike, with exit status 2 and the line on each
rank's stderr: each rank marks itself finished on the watchdog, and at exit the ranks leave together, so no peer
is ended before it has printed its line.

Keys (under the failure channel's ``domainpar/`` prefix): ``agree/<what>/<attempt>/...``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import time
from dataclasses import dataclass
from typing import Callable, Mapping

import torch.distributed as dist

from domainpar.comm import wait
from domainpar.comm.failure import FailureChannel, default_channel
from domainpar.comm.watchdog import finish_current
from domainpar.errors import DomainparError, MachineFault
from domainpar.signals import STOP_SIGNALS

#: Seconds between polls of the store while waiting for the peers.
POLL_S = 0.05
#: Longest wait at exit for the peers to leave too.
LEAVE_S = 10.0
#: Most settings named in one line (the others are counted).
NAMED = 4


@dataclass(frozen=True)
class Setting:
    """One setting of a rank, as compared and as shown."""

    value: str
    """What is compared: equal text means the ranks agree (a content digest for data, not its path)."""
    shown: str
    """What a message shows of it (a path with its digest, a number as given)."""


class RanksRefused(DomainparError):
    """Every rank of the job refuses with this same line (exit status 2 on each)."""


def _tag(what: str) -> str:
    """Keys of one agreement: per job attempt (torchrun's agent store outlives a restart)."""
    return f"agree/{what}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"


def _deadline_wait(channel: FailureChannel, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll until ``ready()``; a peer's published failure raises at once (PeerFailed), the deadline a MachineFault."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        channel.raise_if_peer_failed()
        if time.monotonic() > deadline:
            raise MachineFault(f"{what}: the ranks did not all answer within {timeout_s:g} s (a rank stopped or a node is gone)")
        time.sleep(POLL_S)


def _describe(differences: Mapping[str, list[str]], rank: int, differing: int, world_size: int, advice: str) -> str:
    """``ranks disagree on optim.lr: rank 0 has 0.004, rank 1 has 0.002; <advice>``, several settings named."""
    names = sorted(differences)
    parts = [f"{key}: rank 0 has {differences[key][0]}, rank {rank} has {differences[key][1]}" for key in names[:NAMED]]
    line = "ranks disagree on " + (parts[0] if len(parts) == 1 else "; ".join(parts))
    if len(names) > NAMED:
        line += f"; and {len(names) - NAMED} more setting(s) ({', '.join(names[NAMED:NAMED + 6])})"
    if differing > 1:
        line += f" ({differing} of {world_size} ranks differ from rank 0)"
    return f"{line}; {advice}" if advice else line


def agree(settings: Mapping[str, Setting], *, what: str, advice: str = "", timeout_s: float = 300.0) -> None:
    """Compare this rank's ``settings`` with rank 0's, on every rank of the default process group.

    Must be called by every rank, before any collective that depends on the settings. A no-op without a process
    group or in a world of one.

    Args:
        settings: dotted name → :class:`Setting`; a name one rank has and another lacks differs.
        what: names the agreement's store keys (one per kind of job: "train", "verify").
        advice: what to do, appended to the line.
        timeout_s: longest wait for the peers.

    Raises:
        RanksRefused: on every rank, the same line naming the setting(s), rank 0's value and a differing rank's.
        PeerFailed: a peer failed before it agreed.
    """
    channel = default_channel()
    if channel is None or dist.get_world_size() < 2:
        return
    store, rank, world_size = channel.store, channel.rank, dist.get_world_size()
    tag = _tag(what)
    mine = {key: [s.value, s.shown] for key, s in settings.items()}
    if rank == 0:
        store.set(f"{tag}/rank0", json.dumps(mine))
    else:
        _deadline_wait(channel, lambda: store.check([f"{tag}/rank0"]), timeout_s, "comparing the ranks' settings")
        theirs = json.loads(store.get(f"{tag}/rank0"))
        unset = [None, "(not set)"]
        differences = {
            key: [theirs.get(key, unset)[1], mine.get(key, unset)[1]]
            for key in sorted(set(theirs) | set(mine))
            if theirs.get(key, unset)[0] != mine.get(key, unset)[0]
        }
        if differences:
            store.set(f"{tag}/differs/{rank}", json.dumps(differences))
            store.add(f"{tag}/differing", 1)
            store.compare_set(f"{tag}/first", "", str(rank))
    store.add(f"{tag}/checked", 1)
    checked = lambda: int(store.add(f"{tag}/checked", 0)) >= world_size  # noqa: E731
    _deadline_wait(channel, checked, timeout_s, "comparing the ranks' settings")
    differing = int(store.add(f"{tag}/differing", 0))
    if differing == 0:
        return
    first = int(store.get(f"{tag}/first"))
    differences = json.loads(store.get(f"{tag}/differs/{first}"))
    raise refuse_together(_describe(differences, first, differing, world_size, advice), tag)


def decide_on_rank0(decide: Callable[[], str | None], *, what: str, liveness_s: float = wait.LIVENESS_S) -> None:
    """Rank 0 runs ``decide`` (None: go on; a line: refuse) and every rank of the default group follows its verdict.

    The others wait outside any collective (the store, :func:`~domainpar.comm.wait.wait_for_peers`), and rank 0
    beats a heartbeat meanwhile, so a long decision is no timeout. Without a process group, or in a world of
    one, ``decide`` runs here. A :class:`~domainpar.errors.DomainparError` that ``decide`` raises is its verdict.

    Raises:
        RanksRefused: on every rank, the line rank 0 decided (DomainparError in a world of one).
        PeerFailed: rank 0 failed otherwise (its own exception on rank 0).
    """
    channel = default_channel()
    if channel is None or dist.get_world_size() < 2:
        line = _verdict(decide)
        if line is not None:
            raise DomainparError(line)
        return
    store, rank, world_size = channel.store, channel.rank, dist.get_world_size()
    tag = _tag(what)
    if rank == 0:
        beat = wait.own_channel(rank)
        with wait.Heartbeat(beat) if beat is not None else contextlib.nullcontext():
            line = _verdict(decide)
        store.set(f"{tag}/verdict", json.dumps(line))
    wait.mark_done(channel, tag)
    wait.wait_for_peers(channel, tag, world_size, liveness_s=liveness_s)
    line = json.loads(store.get(f"{tag}/verdict"))
    if line is not None:
        raise refuse_together(line, tag)


def _verdict(decide: Callable[[], str | None]) -> str | None:
    try:
        return decide()
    except DomainparError as exc:
        return str(exc)


def refuse_together(line: str, tag: str) -> RanksRefused:
    """The exception every rank raises for a refusal all of them reached: this rank is marked finished on its
    watchdog (a peer that exits first is no death), and at exit it waits for the peers to leave too.

    Call on every rank with the same ``line`` and ``tag``, after each has read the verdict.
    """
    channel = default_channel()
    finish_current()
    if channel is not None:
        atexit.register(_leave_together, channel, f"{tag}/left", dist.get_world_size())
    return RanksRefused(line)


def _leave_together(channel: FailureChannel, key: str, world_size: int) -> None:
    """At exit, after this rank printed its line: wait (bounded) until every rank got here, then leave the group."""
    # The launcher stops the others once one exits; this rank is leaving anyway and has said why.
    for signum in STOP_SIGNALS:
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signum, signal.SIG_IGN)
    try:
        channel.store.add(key, 1)
        deadline = time.monotonic() + LEAVE_S
        while int(channel.store.add(key, 0)) < world_size and time.monotonic() < deadline:
            time.sleep(POLL_S)
    except Exception:  # noqa: BLE001 - the store's host may have left already: nothing to wait for
        pass
    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the process ends either way
        pass


__all__ = ["RanksRefused", "Setting", "agree", "decide_on_rank0", "refuse_together"]

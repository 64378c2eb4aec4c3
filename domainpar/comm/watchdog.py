"""Heartbeats and liveness: a rank that dies, hangs or raises is named to every rank within seconds.

A collective never tells who is missing (gloo reports "Connection closed by peer" on whichever rank noticed
first; an NCCL collective waiting for a dead peer returns only at the group timeout). So every rank runs a
:class:`Watchdog` thread that, once per ``interval_s``, writes its heartbeat to the rendezvous store, reads the
job's first failure from the failure channel (:mod:`domainpar.comm.failure`), checks the peers on its own host by
process id and the next rank of the ring by heartbeat age (every rank is watched by at least one other), and
notices when the store itself stops answering (the rank hosting it died).

A failure it finds is published (first one wins), reported once, and the process groups are aborted so that a
blocked NCCL collective returns; a gloo operation cannot be interrupted, so if the main thread has not finished
within ``grace_s`` the watchdog ends the process itself. The main thread asks :meth:`Watchdog.explain` what an
exception means before it reports: its own failure (published now) or the consequence of a peer's.

A rank that finishes calls :meth:`Watchdog.stop`, which marks it done (so its silence is not a death); the rank
hosting the store waits for the others before it exits and takes the store with it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch.distributed as dist

from domainpar.comm.failure import STORE_PREFIX, Failure, FailureChannel, PeerFailed, raised
from domainpar.errors import DomainparError, Terminated, interrupt_of, stop_received

#: Messages of communication errors caused by a peer going away (gloo, NCCL, TCPStore); their rank is a bystander.
_PEER_GONE_HINTS = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "connection refused",
    "timed out",
    "timeout",
    "process group",
    "remote worker",
    "ncclremoteerror",
    "ncclsystemerror",
    "aborted",
)


@dataclass(frozen=True)
class WatchdogConfig:
    """How often ranks check each other and how long they wait."""

    interval_s: float = 1.0
    """Seconds between heartbeats, and between checks of the failure channel and of the watched peers."""
    dead_after_s: float = 30.0
    """A watched rank whose heartbeat has not changed for this long is declared hung or dead."""
    grace_s: float = 10.0
    """After a peer's failure, seconds the main thread gets to report and exit before the watchdog ends the process."""
    linger_s: float = 10.0
    """Longest the rank that hosts the store waits for its peers to read a failure before exiting."""
    launcher_wait_s: float = 5.0
    """Under torchrun, longest a rank stopped by a peer's failure waits for the agent's stop signal before exiting,
    so that the agent sees the peer's failure first and its summary names it as the root cause."""
    finish_s: float = 120.0
    """Longest the rank that hosts the store waits for its peers to finish a successful run before exiting."""
    stop_cause_s: float = 5.0
    """On a stop signal, longest a rank looks for a peer's failure to name as its cause (on a loaded machine the
    peer's death and the store's answer can lag the launcher's signal)."""


def _proc_stat_fields(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name, from the state on (none when unreadable)."""
    stat = _read(f"/proc/{pid}/stat")
    # The command name (field 2) may contain spaces and parentheses: split after its closing bracket.
    return stat[stat.rindex(")") + 2 :].split() if stat else []


def _proc_start_time(pid: int) -> str | None:
    """Start time of ``pid`` (clock ticks since boot) from /proc, to tell a reused pid from the original."""
    fields = _proc_stat_fields(pid)
    return fields[19] if len(fields) > 19 else None


def _proc_state(pid: int) -> str | None:
    fields = _proc_stat_fields(pid)
    return fields[0] if fields else None


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return ""


def process_identity() -> dict[str, Any]:
    """Who this process is: host name, pid, and what makes a pid comparable (boot id, pid namespace, start time)."""
    try:
        pidns = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        pidns = ""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "boot": _read("/proc/sys/kernel/random/boot_id"),
        "pidns": pidns,
        "start": _proc_start_time(os.getpid()) or "",
    }


def same_machine(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when ``a``'s pid can be checked from ``b``'s process (same host, same boot, same pid namespace)."""
    return a["host"] == b["host"] and a["boot"] == b["boot"] and a["pidns"] == b["pidns"]


def process_gone(identity: dict[str, Any]) -> bool:
    """True when the process described by ``identity`` (on this machine) has exited (a zombie counts as gone)."""
    pid = int(identity["pid"])
    if os.path.isdir("/proc/self"):
        state = _proc_state(pid)
        if state is None or state in ("Z", "X", "x"):
            return True
        start = _proc_start_time(pid)
        return bool(identity.get("start")) and start is not None and start != identity["start"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def is_peer_loss(exc: BaseException) -> bool:
    """True when ``exc`` looks like a collective or store failing because a peer went away (not this rank's fault)."""
    if isinstance(exc, PeerFailed):
        return True
    if isinstance(exc, DomainparError):
        return False
    if isinstance(exc, getattr(dist, "DistError", ())):
        return True
    text = str(exc).lower()
    return isinstance(exc, (RuntimeError, ConnectionError, TimeoutError)) and any(h in text for h in _PEER_GONE_HINTS)


def base_store(store: Any) -> Any:
    """The store under ``store``'s prefixes."""
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    return store


def abort_process_groups() -> None:
    """Abort every process group so that blocked NCCL collectives return (best effort; gloo ignores it)."""
    try:
        if dist.is_initialized():
            dist.distributed_c10d._abort_process_group()
    except Exception:  # noqa: BLE001 - emergency path: the groups may be half torn down already
        pass


class Watchdog:
    """Heartbeat and liveness thread of one rank (see the module docstring).

    Args:
        store: the job's rendezvous store (cloned here: the thread gets its own connection).
        rank: this rank.
        world_size: number of ranks.
        config: intervals and timeouts.
        reporter: called once with the failure that ends this process and, for this rank's own bug, its
            traceback text (it prints them, or sends them to the launcher).
        hosts_store: this process serves the store (rank 0 of an ``env://`` rendezvous): it must outlive its peers.
    """

    def __init__(
        self,
        store: Any,
        rank: int,
        world_size: int,
        config: WatchdogConfig = WatchdogConfig(),
        reporter: Callable[[Failure, str], None] | None = None,
        hosts_store: bool = False,
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.config = config
        self.reporter = reporter
        self.hosts_store = hosts_store
        # One connection per thread, the watchdog's and the main thread's (explain, stop, cause): a thread
        # never waits behind the other's store calls.
        thread_store = store.clone()
        self._store = dist.PrefixStore(STORE_PREFIX, thread_store)
        self._thread_channel = FailureChannel(thread_store, rank)
        self.channel = FailureChannel(store.clone(), rank)
        base = base_store(store)
        self._store_address = f"{base.host}:{base.port}" if hasattr(base, "host") and hasattr(base, "port") else ""
        self.identity = process_identity()
        self._peers: dict[int, dict[str, Any]] = {}
        self._successor = (rank + 1) % world_size if world_size > 1 else None
        self._beats: dict[int, tuple[bytes, float]] = {}
        self._stop = threading.Event()
        self._failure: Failure | None = None
        self._failure_seen = threading.Event()
        self._report_lock = threading.Lock()
        self._reported = False
        self._main_done = threading.Event()
        self._stop_lock = threading.Lock()
        self._stopped: Failure | None = None
        self._store_errors_since: float | None = None
        self._store_gone = False
        self.before_exit: list[Callable[[], None]] = []
        """Called (best effort) before the watchdog ends a failed process, e.g. to release the ``--out`` lock."""
        self._thread = threading.Thread(target=self._run, name=f"domainpar-watchdog-r{rank}", daemon=True)

    # ------------------------------------------------------------------ public

    def start(self) -> "Watchdog":
        """Publish this process's identity, write the first heartbeat and start the thread."""
        self._store.set(f"proc/{self.rank}", json.dumps(self.identity))
        self._store.set(f"hb/{self.rank}", "0")
        self._thread.start()
        return self

    @property
    def failure(self) -> Failure | None:
        """The job's first failure once the watchdog has seen it."""
        return self._failure

    def report(self, failure: Failure, traceback_text: str = "") -> bool:
        """Report ``failure`` (with this rank's traceback, if it is its own bug) once per process; True if this call did."""
        # Held while reporting: a second caller (the other thread, about to end the process) waits until the
        # report is out instead of exiting before it is written.
        with self._report_lock:
            if self._reported:
                return False
            self._reported = True
            if self.reporter is not None:
                try:
                    self.reporter(failure, traceback_text)
                except Exception:  # noqa: BLE001 - reporting must never mask the failure itself
                    pass
        return True

    def explain(self, exc: BaseException) -> Failure:
        """The failure that ``exc`` (raised in the main thread) stands for, published if it is this rank's own.

        A peer's failure already in the channel wins. An exception that looks like a lost peer waits (up to
        ``dead_after_s`` plus two intervals) for the watchdog to find who it was before it counts as this rank's own.
        """
        if isinstance(exc, PeerFailed):
            return exc.failure
        if isinstance(interrupt_of(exc), Terminated):
            return self.stopped(exc)
        if is_peer_loss(exc):
            # The watchdog thread finds the culprit (it reads the channel every interval and also notices a
            # store that went away): wait for it rather than poll a store that may be gone from here too.
            deadline = time.monotonic() + self.config.dead_after_s + 2 * self.config.interval_s
            while self._failure is None and time.monotonic() < deadline and self._thread.is_alive():
                self._failure_seen.wait(self.config.interval_s / 4)
        first = self._first()
        if first is not None and first.rank != self.rank:
            if not self._store_gone:
                self._acknowledge(self.channel)
            return first
        own = raised(self.rank, exc)
        try:
            return self.channel.publish(own)
        except Exception:  # noqa: BLE001 - no store: this rank's own view is all there is
            return own

    def stopped(self, exc: BaseException) -> Failure:
        """What a stop signal (``exc`` is, or carries, :class:`~domainpar.errors.Terminated`) stands for; decided once.

        A launcher stops every rank once one died, often before this rank's own collective breaks: the dead peer is
        named if it can be found within ``stop_cause_s``. Otherwise it is this rank's stop (scancel, a user's kill),
        never published: a stop is no rank's failure, and in the channel it would hide the real cause from every rank.
        """
        with self._stop_lock:
            if self._stopped is None:
                stop = interrupt_of(exc) or exc
                found = self.cause(timeout_s=self.config.stop_cause_s)
                self._stopped = found or Failure(self.rank, f"rank {self.rank} {stop}", "raised", self.rank)
            return self._stopped

    def stop(self, done: bool = True) -> None:
        """Stop the thread; with ``done``, mark this rank finished (and, if it hosts the store, wait for the others)."""
        self._main_done.set()
        store = self.channel.store
        if done:
            try:
                store.set(f"done/{self.rank}", "1")
                store.add("done", 1)
            except Exception:  # noqa: BLE001 - the store's host may be gone already; nothing to wait for then
                done = False
        if done and self.hosts_store:
            # The store goes with this process: wait for the others (a peer that dies instead ends the wait).
            deadline = time.monotonic() + self.config.finish_s
            while time.monotonic() < deadline:
                try:
                    if int(store.add("done", 0)) >= self.world_size or self.channel.first() is not None:
                        break
                except Exception:  # noqa: BLE001
                    break
                time.sleep(0.05)
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=max(2 * self.config.interval_s, 1.0))

    def linger_for_readers(self, failure: Failure) -> None:
        """If this process hosts the store, give the peers up to ``linger_s`` to read ``failure`` before exiting."""
        if not self.hosts_store:
            return
        readers = [r for r in range(self.world_size) if r not in (self.rank, failure.rank)]
        deadline = time.monotonic() + self.config.linger_s
        while readers and time.monotonic() < deadline:
            try:
                seen = self.channel.acknowledged(readers)
            except Exception:  # noqa: BLE001
                return
            readers = [r for r in readers if r not in seen]
            if readers:
                time.sleep(0.05)

    def await_launcher(self, failure: Failure) -> None:
        """Under torchrun, a rank stopped by a peer's failure stays until the agent's stop signal (at most
        ``launcher_wait_s``): the agent names as root cause the earliest failure among the ranks that have exited."""
        if failure.rank == self.rank or not os.environ.get("TORCHELASTIC_RUN_ID"):
            return
        deadline = time.monotonic() + self.config.launcher_wait_s
        while stop_received() is None and time.monotonic() < deadline:
            time.sleep(0.05)

    def finish_failed(self, failure: Failure, exit_code: int = 1, linger: bool = True) -> None:
        """The end of a failed rank: report (once), let the peers read the failure, abort the groups, exit now."""
        self._main_done.set()
        self.report(failure)
        if linger:
            self.linger_for_readers(failure)
        abort_process_groups()
        self.await_launcher(failure)
        self._exit(exit_code)

    # ---------------------------------------------------------------- thread

    def _acknowledge(self, channel: FailureChannel) -> None:
        try:
            channel.acknowledge()
        except Exception:  # noqa: BLE001 - only the store's host waits for it, and only for a while
            pass

    def _first(self) -> Failure | None:
        if self._failure is not None:
            return self._failure
        if self._store_gone:
            return None
        try:
            return self.channel.first()
        except Exception:  # noqa: BLE001
            return None

    def _run(self) -> None:
        beat = 0
        while not self._stop.wait(self.config.interval_s):
            beat += 1
            try:
                failure = self._check(beat)
                self._store_errors_since = None
            except Exception as exc:  # noqa: BLE001 - the store stopped answering
                if self._stop.is_set():
                    return
                failure = self._store_lost(exc)
            if failure is not None and not self._stop.is_set():
                self._on_failure(failure)
                return

    def _dead_neighbour(self, peers: dict[int, dict[str, Any]], channel: FailureChannel) -> Failure | None:
        """Publish the first peer on this machine whose process is gone without having finished."""
        for peer, identity in sorted(peers.items()):
            if same_machine(identity, self.identity) and process_gone(identity) and not channel.store.check([f"done/{peer}"]):
                return channel.publish(self._died(peer, identity))
        return None

    def _died(self, peer: int, identity: dict[str, Any]) -> Failure:
        return Failure(peer, f"rank {peer} died (its process {identity['pid']} on {identity['host']} is gone)", "died", self.rank)

    def cause(self, timeout_s: float) -> Failure | None:
        """A peer's failure that explains why this rank is being stopped, looked for now and for up to ``timeout_s``.

        For the main thread (e.g. on SIGTERM from a launcher that saw a rank die).
        """
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                first = self.channel.first()
                if first is None:
                    first = self._dead_neighbour(self._peers_via(self.channel.store), self.channel)
                if first is not None and first.rank != self.rank:
                    self._acknowledge(self.channel)
            except Exception:  # noqa: BLE001 - a store slow on a loaded machine, or gone: keep looking until the deadline
                # Without the store, the peers already known still say whether one of them is gone.
                first = self._failure or next(
                    (self._died(peer, identity) for peer, identity in sorted(self._peers.items())
                     if same_machine(identity, self.identity) and process_gone(identity)),
                    None,
                )  # fmt: skip
            if first is not None and first.rank != self.rank:
                return first
            if time.monotonic() >= deadline:
                return None
            self._failure_seen.wait(min(0.1, max(0.0, deadline - time.monotonic())))

    def _check(self, beat: int) -> Failure | None:
        store = self._store
        store.set(f"hb/{self.rank}", str(beat))
        first = self._thread_channel.first()
        if first is not None:
            return first
        self._load_peers()
        now = time.monotonic()
        dead = self._dead_neighbour(self._peers, self._thread_channel)
        if dead is not None:
            return dead
        peer = self._successor
        if peer is not None and peer != self.rank:
            value = store.get(f"hb/{peer}") if store.check([f"hb/{peer}"]) else b""
            last = self._beats.get(peer)
            if last is None or last[0] != value:
                self._beats[peer] = (value, now)
            elif now - last[1] > self.config.dead_after_s and not store.check([f"done/{peer}"]):
                host = self._peers.get(peer, {}).get("host", "its host")
                return self._publish(
                    Failure(peer, f"rank {peer} stopped responding (no heartbeat for {now - last[1]:.0f} s from {host})",
                            "hung", self.rank)
                )
        return None

    def _peers_via(self, store: Any) -> dict[int, dict[str, Any]]:
        """The peers' identities: those the watchdog thread loaded, plus any it has not, read through ``store``.

        A launcher's SIGTERM may come before the watchdog thread's first look at the peers: without this the dead
        peer could not be named.
        """
        peers = dict(self._peers)
        for peer in range(self.world_size):
            key = f"proc/{peer}"
            if peer != self.rank and peer not in peers and store.check([key]):
                peers[peer] = json.loads(store.get(key))
        return peers

    def _load_peers(self) -> None:
        if len(self._peers) < self.world_size - 1:
            self._peers = self._peers_via(self._store)  # one reference swap: the main thread may be copying it

    def _publish(self, failure: Failure) -> Failure:
        try:
            return self._thread_channel.publish(failure)
        except Exception:  # noqa: BLE001
            return failure

    def _store_reachable(self) -> bool:
        """Whether the store's server still accepts connections (a plain TCP connect: no store call, no log spam)."""
        if not self._store_address:
            return True
        host, _, port = self._store_address.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=min(5.0, self.config.dead_after_s)):
                return True
        except OSError:
            return False

    def _store_lost(self, exc: BaseException) -> Failure | None:
        now = time.monotonic()
        if self._store_errors_since is None:
            self._store_errors_since = now
        # A server that refuses connections is gone; one that accepts them had a hiccup, unless it lasts.
        if self._store_reachable() and now - self._store_errors_since < self.config.dead_after_s:
            return None
        self._store_gone = True
        where = f" at {self._store_address}" if self._store_address else ""
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true":
            return Failure(-1, f"the rendezvous store{where} (served by torchrun on the first node) stopped answering",
                           "died", self.rank)
        return Failure(0, f"rank 0 died (the rendezvous store it served{where} stopped answering)", "died", self.rank)

    def _on_failure(self, failure: Failure) -> None:
        self._failure = failure
        self._failure_seen.set()
        if not self._store_gone:
            self._acknowledge(self._thread_channel)
        if failure.rank == self.rank:
            return  # the main thread published its own failure and reports it
        if self._main_done.is_set():
            return
        self.report(failure)
        abort_process_groups()
        # The main thread usually unwinds now (an aborted or broken collective raises); a blocked gloo op may not.
        if not self._main_done.wait(self.config.grace_s):
            self.linger_for_readers(failure)
            self.await_launcher(failure)
            self._exit(1)

    def _exit(self, code: int) -> None:
        for callback in self.before_exit:
            try:
                callback()
            except Exception:  # noqa: BLE001 - the process ends either way
                pass
        _flush_and_exit(code)


def _flush_and_exit(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(code)


_current: Watchdog | None = None


def current() -> Watchdog | None:
    """The watchdog of this process (None in a one-process run)."""
    return _current


def set_current(watchdog: Watchdog | None) -> None:
    """Register (or clear) this process's watchdog."""
    global _current
    _current = watchdog


def finish_current() -> None:
    """Stop this process's watchdog as done (a peer that exits from now on is no death) and clear it; no-op without one."""
    if _current is not None:
        _current.stop(done=True)
        set_current(None)


__all__ = [
    "Watchdog",
    "WatchdogConfig",
    "abort_process_groups",
    "base_store",
    "current",
    "finish_current",
    "is_peer_loss",
    "process_gone",
    "process_identity",
    "same_machine",
    "set_current",
]

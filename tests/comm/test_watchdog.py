"""The watchdog finds a dead, silent or failed peer within its intervals, names it, and leaves finished ranks alone.

In-process: the "peers" are identity records and heartbeats written into a
FileStore the way other ranks would write them (a real short-lived process
provides a pid that is verifiably gone). The end of the process that a
peer's failure would bring is prevented by stopping the watchdog in time.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
import torch.distributed as dist

from domainpar.comm.failure import STORE_PREFIX, Failure, FailureChannel, PeerFailed, raised
from domainpar.comm.watchdog import Watchdog, WatchdogConfig, is_peer_loss, process_gone, process_identity, same_machine
from domainpar.errors import DomainparError, Terminated

FAST = WatchdogConfig(interval_s=0.1, dead_after_s=1.0, grace_s=600.0, linger_s=1.0, finish_s=2.0)


@pytest.fixture
def store(tmp_path):
    return dist.FileStore(str(tmp_path / "store"), -1)


def _peer(store, rank: int, identity: dict, beat: str = "0") -> None:
    prefixed = dist.PrefixStore(STORE_PREFIX, store)
    prefixed.set(f"proc/{rank}", json.dumps(identity))
    prefixed.set(f"hb/{rank}", beat)


def _gone_identity() -> dict:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    identity = {**process_identity(), "pid": child.pid, "start": ""}
    child.wait()
    return identity


def _watch(store, rank: int, world_size: int, config: WatchdogConfig = FAST):
    reports: list[tuple[Failure, str]] = []
    watchdog = Watchdog(store, rank, world_size, config, reporter=lambda f, t: reports.append((f, t))).start()
    return watchdog, reports


def _wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_a_peer_whose_process_is_gone_is_named_within_an_interval(store):
    _peer(store, 1, _gone_identity())
    _peer(store, 2, process_identity())  # alive (this process), beating below
    watchdog, reports = _watch(store, 0, 3)
    try:
        assert _wait_for(lambda: reports), "the dead peer was not reported"
    finally:
        watchdog.stop(done=False)
    failure, traceback_text = reports[0]
    assert failure.rank == 1 and failure.kind == "died" and failure.reporter == 0 and traceback_text == ""
    assert failure.message.startswith("rank 1 died (its process ") and failure.message.endswith(" is gone)")
    # Published: every other rank reads the same first failure.
    assert FailureChannel(store, 2).first() == failure


def test_a_finished_peer_is_not_a_dead_one(store):
    _peer(store, 1, _gone_identity())
    dist.PrefixStore(STORE_PREFIX, store).set("done/1", "1")
    watchdog, reports = _watch(store, 0, 2)
    try:
        time.sleep(1.0)
    finally:
        watchdog.stop(done=False)
    assert reports == [] and FailureChannel(store, 0).first() is None


def test_a_silent_peer_is_declared_after_dead_after_s(store):
    # Rank 1 (the ring successor of rank 0) lives on another host: only its heartbeat can tell.
    _peer(store, 1, {**process_identity(), "host": "node-b", "boot": "other"})
    watchdog, reports = _watch(store, 0, 2)
    started = time.monotonic()
    try:
        assert _wait_for(lambda: reports, timeout=10.0)
    finally:
        watchdog.stop(done=False)
    elapsed = time.monotonic() - started
    failure = reports[0][0]
    assert failure.rank == 1 and failure.kind == "hung", failure
    assert failure.message.startswith("rank 1 stopped responding (no heartbeat for ") and "from node-b" in failure.message
    assert FAST.dead_after_s <= elapsed < FAST.dead_after_s + 5


def test_a_beating_remote_peer_is_alive(store):
    _peer(store, 1, {**process_identity(), "host": "node-b", "boot": "other"})
    watchdog, reports = _watch(store, 0, 2)
    beats = dist.PrefixStore(STORE_PREFIX, store)
    try:
        for beat in range(25):  # 2.5 s, far beyond dead_after_s, with a fresh beat every 0.1 s
            beats.set("hb/1", str(beat + 1))
            time.sleep(0.1)
    finally:
        watchdog.stop(done=False)
    assert reports == []


def test_a_peers_published_failure_is_reported_once(store):
    _peer(store, 1, process_identity())
    watchdog, reports = _watch(store, 0, 2)
    try:
        first = FailureChannel(store, 1).publish(raised(1, DomainparError("graphs/e.npz: entry x must be float32 (got float64)")))
        assert _wait_for(lambda: reports)
        assert watchdog.failure == first
        assert not watchdog.report(first)  # once per process
    finally:
        watchdog.stop(done=False)
    assert [f for f, _ in reports] == [first]


def test_explain_names_the_peer_behind_a_broken_collective(store):
    dead = _gone_identity()
    watchdog, _ = _watch(store, 0, 2)
    try:
        # The collective broke before the watchdog looked: explain waits for it to find the culprit.
        _peer(store, 1, dead)
        failure = watchdog.explain(RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:4240"))
    finally:
        watchdog.stop(done=False)
    assert failure.rank == 1 and failure.kind == "died"


def test_explain_publishes_the_ranks_own_failure(store):
    _peer(store, 1, process_identity())
    watchdog, _ = _watch(store, 0, 2)
    try:
        failure = watchdog.explain(ValueError("boom"))
        again = watchdog.explain(PeerFailed(failure, 1))
    finally:
        watchdog.stop(done=False)
    assert failure == raised(0, ValueError("boom")) == again
    assert FailureChannel(store, 1).first() == failure


def test_peer_loss_is_told_apart_from_a_ranks_own_error():
    assert is_peer_loss(RuntimeError("[pair.cc:553] Connection closed by peer [127.0.0.1]:4240"))
    assert is_peer_loss(PeerFailed(Failure(1, "rank 1 died", "died"), 0))
    assert not is_peer_loss(ValueError("boom"))
    assert not is_peer_loss(DomainparError("--timeout must be positive seconds (got 0)"))


def test_process_identity_and_liveness():
    me = process_identity()
    assert same_machine(me, process_identity()) and not process_gone(me)
    assert not same_machine(me, {**me, "host": "elsewhere"})
    assert process_gone(_gone_identity())
    # A reused pid (same number, later start) is not the process that was recorded.
    assert process_gone({**me, "start": "1"})


def test_the_end_of_a_failed_rank_runs_its_before_exit_callbacks(store, monkeypatch):
    # What the process must undo itself (rank 0's --out lock) before the watchdog ends it without unwinding.
    import domainpar.comm.watchdog as watchdog_module

    exits: list[int] = []
    monkeypatch.setattr(watchdog_module, "_flush_and_exit", exits.append)
    watchdog, reports = _watch(store, 0, 2)
    calls: list[str] = []
    watchdog.before_exit += [lambda: calls.append("raises") or 1 / 0, lambda: calls.append("second")]
    try:
        watchdog.finish_failed(Failure(0, "rank 0 raised ValueError: boom", "raised", 0), exit_code=3, linger=False)
    finally:
        watchdog.stop(done=False)
    assert calls == ["raises", "second"] and exits == [3]
    assert [failure.message for failure, _ in reports] == ["rank 0 raised ValueError: boom"]


def test_a_stop_signal_before_the_thread_has_seen_the_peers_still_names_the_dead_one(store):
    # A launcher's SIGTERM (a peer died) can reach the main thread before the watchdog thread's first look at
    # the peers — early in a run, or on a loaded machine: cause() must read them itself.
    slow = WatchdogConfig(interval_s=600.0, dead_after_s=1200.0, grace_s=600.0, linger_s=1.0, finish_s=2.0)
    watchdog, reports = _watch(store, 0, 2, slow)
    try:
        _peer(store, 1, _gone_identity())  # published after the thread's first look
        failure = watchdog.cause(timeout_s=0.5)
    finally:
        watchdog.stop(done=False)
    assert failure is not None and failure.rank == 1 and failure.kind == "died", failure
    assert failure.message.startswith("rank 1 died (its process ") and failure.message.endswith(" is gone)")



def test_a_stop_signal_names_the_dead_peer_and_is_never_published_as_the_ranks_own(store, tmp_path):
    # torchrun's agent stops every rank a tenth of a second after one died, often while the survivor is in
    # Python between collectives: the Terminated reaches explain() before any broken collective or watchdog
    # look. Published as this rank's own failure it would be the job's first, and hide the death from everyone.
    slow = WatchdogConfig(interval_s=600.0, dead_after_s=1200.0, grace_s=600.0, linger_s=1.0, finish_s=2.0,
                          stop_cause_s=0.5)
    _peer(store, 1, _gone_identity())
    watchdog, _ = _watch(store, 0, 2, slow)
    try:
        failure = watchdog.explain(Terminated(signal.SIGTERM))
        assert watchdog.stopped(Terminated(signal.SIGTERM)) is failure  # decided once (explain, then fail_rank)
    finally:
        watchdog.stop(done=False)
    assert failure.rank == 1 and failure.kind == "died", failure
    assert FailureChannel(store, 1).first() == failure

    # A stop with no failure to name (scancel, a user's kill): this rank's line, kept out of the channel.
    quiet = dist.FileStore(str(tmp_path / "quiet"), -1)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        _peer(quiet, 1, {**process_identity(), "pid": alive.pid, "start": ""})
        watchdog, _ = _watch(quiet, 0, 2, slow)
        try:
            own = watchdog.explain(Terminated(signal.SIGTERM))
        finally:
            watchdog.stop(done=False)
    finally:
        alive.kill()
        alive.wait()
    assert own == Failure(0, "rank 0 stopped by SIGTERM", "raised", 0)
    assert FailureChannel(quiet, 1).first() is None

"""Ranks started as copies of their parent (``spawn(fork=True)``), where a copy is sound (``can_fork``).

A spawned rank starts a new interpreter and imports torch (~2 s of a core); a copy starts where its parent is.
The copies must compute what spawned ranks compute, and a killed copy or a killed parent must be handled as
for spawned ranks: named in one line, no orphan left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed

DRIVER = Path(__file__).with_name("fork_jobs.py")
REPO = DRIVER.parents[2]


def _start(case: str, tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / "seen.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, str(DRIVER), case, str(out)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True), out  # fmt: skip


def _run(case: str, tmp_path: Path) -> dict:
    process, out = _start(case, tmp_path)
    stdout, stderr = process.communicate(timeout=150)
    assert process.returncode == 0, stderr
    return json.loads(out.read_text())


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ranks are copied only on Linux")


@linux_only
@pytest.mark.timeout(180)
def test_ranks_of_one_thread_are_copies_of_a_lone_parent(tmp_path):
    seen = _run("one", tmp_path)
    assert seen["can_fork_1"] and not seen["can_fork_2"]
    assert seen["hows"] == ["fork"]
    # Copies: the parent's state (set after its imports), each its own process, torch on one thread.
    marks, pids, threads = zip(*seen["values"])
    assert marks == ("set by the parent",) * 2 and len(set(pids)) == 2 and seen["parent"] not in pids
    assert threads == (1, 1)


@linux_only
@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", ["two", "threads"])
def test_ranks_are_spawned_where_a_copy_is_not_sound(tmp_path, case):
    # Two torch threads a rank (a parallel region in a copy of a process whose OpenMP pool is gone), or a parent
    # with another thread running (its locks would be copied held): spawned, a fresh interpreter each.
    seen = _run(case, tmp_path)
    assert seen["hows"] == ["spawn"]
    assert [value[0] for value in seen["values"]] == ["module default"] * 2
    if case == "threads":
        assert not seen["can_fork_1_with_a_thread"]


@linux_only
@pytest.mark.timeout(180)
def test_a_killed_copy_is_named_and_its_peer_stopped(tmp_path):
    seen = _run("killed", tmp_path)
    assert seen["hows"] == ["fork"]
    assert seen["error"] == "rank 1 of 2 died (killed by SIGKILL)" and seen["ranks"] == [1]
    assert seen["seconds"] < 60  # rank 0 (asleep for 120 s) was stopped, not awaited
    assert not _running(int((tmp_path / "rank0").read_text()))


@linux_only
@pytest.mark.timeout(180)
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_copies_die_with_their_parent(tmp_path, signum):
    process, _ = _start("sleep", tmp_path)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all((tmp_path / f"rank{r}").exists() for r in range(2)):
            assert process.poll() is None, process.communicate()[1]
            time.sleep(0.05)
        time.sleep(0.2)  # the pid files are written: read them whole
        pids = [int((tmp_path / f"rank{r}").read_text()) for r in range(2)]
        assert all(_running(pid) for pid in pids)
        os.kill(process.pid, signum)
        process.communicate(timeout=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_running(pid) for pid in pids):
            time.sleep(0.05)
        assert not [pid for pid in pids if _running(pid)]
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


@linux_only
@pytest.mark.timeout(180)
@pytest.mark.parametrize("failing", ["first", "rank0"])
def test_a_mesh_connect_that_fails_transiently_is_tried_again_by_every_rank(tmp_path, failing):
    # gloo's full-mesh connect fails now and then on loopback with every rank alive. Every rank's first attempt
    # failing, or rank 0's alone after its peer joined: both ranks meet again on a fresh store and the job runs.
    seen = _run(f"flaky-{failing}", tmp_path)
    assert "error" not in seen, seen.get("error")
    assert [value[0] for value in seen["values"]] == [["store", "store.1"]] * 2
    assert [value[1] for value in seen["values"]] == [3.0, 3.0]


@linux_only
@pytest.mark.timeout(180)
def test_a_lone_rank_whose_join_fails_transiently_joins_again(tmp_path):
    seen = _run("flaky-first:1", tmp_path)
    assert "error" not in seen, seen.get("error")
    assert seen["values"] == [[["store", "store.1"], 1.0]]


@linux_only
@pytest.mark.timeout(180)
def test_a_mesh_connect_that_keeps_failing_is_named_in_one_line(tmp_path):
    seen = _run("flaky-always", tmp_path)
    assert "connectFullMesh" in seen["error"] and "\n" not in seen["error"]
    assert seen["ranks"] in ([0], [1])

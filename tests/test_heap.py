"""Freed memory stays in the process: the second event's arrays are not faulted in again (domainpar.heap)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from domainpar import heap

pytestmark = pytest.mark.skipif(heap._glibc() is None, reason="glibc's malloc only")

#: A child that allocates and frees a 256 MiB block, then counts the page faults of touching a second one.
_FAULTS = textwrap.dedent(
    """
    import json, os, resource, sys
    import numpy as np
    if sys.argv[1] == "keep":
        from domainpar.heap import keep_freed_memory
        held = keep_freed_memory()
    else:
        held = None
    size = 256 << 20
    first = np.ones(size, dtype=np.uint8)  # every page touched, then freed
    del first
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    second = np.ones(size, dtype=np.uint8)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    print(json.dumps({"held": held, "faults": faults, "env": os.environ.get("MALLOC_MMAP_THRESHOLD_")}))
    """
)


def _faults(mode: str, env: dict[str, str] | None = None) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    done = subprocess.run(
        [sys.executable, "-c", _FAULTS, mode], env={**clean, **(env or {})}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_freed_block_serves_the_next_allocation_without_page_faults():
    plain = _faults("plain")
    kept = _faults("keep")
    assert kept["held"] is True and kept["env"] == str(heap.MMAP_THRESHOLD)
    # 256 MiB is 65,536 pages of 4 KiB (128 huge pages where the kernel gives those): every one faults again when
    # glibc has unmapped the first block; none when it went back to the heap.
    assert plain["faults"] >= 100, plain
    assert kept["faults"] < plain["faults"] / 10, (kept, plain)


def test_processes_it_starts_inherit_the_setting():
    # What a spawned worker or rank sees: the variables glibc reads at a process's start.
    inherited = _faults("plain", env={name: str(value) for name, (_, value) in heap._SETTINGS.items()})
    assert inherited["faults"] < _faults("plain")["faults"] / 10, inherited


def test_a_users_own_setting_wins(monkeypatch):
    monkeypatch.setattr(heap, "_done", None)
    monkeypatch.setattr(heap, "_no_numpy_hugepage_advice", lambda: None)  # this process's numpy left as it is
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    calls = []
    monkeypatch.setattr(heap, "_glibc", lambda: type("C", (), {"mallopt": staticmethod(lambda p, v: calls.append(p.value) or 1)})())
    assert heap.keep_freed_memory() is True
    assert os.environ["MALLOC_MMAP_THRESHOLD_"] == "65536"
    assert os.environ["MALLOC_TRIM_THRESHOLD_"] == str(heap.TRIM_THRESHOLD)
    assert calls == [heap._M_TRIM_THRESHOLD]  # the user's threshold is not overridden in this process either


#: A child that reports numpy's huge-page advice after :func:`keep_freed_memory` (the switch returns its old state).
_ADVICE = textwrap.dedent(
    """
    import json, os
    import numpy as np
    from domainpar.heap import keep_freed_memory
    keep_freed_memory()
    advised = bool(np._core.multiarray._set_madvise_hugepage(True))
    print(json.dumps({"advised": advised, "env": os.environ.get("NUMPY_MADVISE_HUGEPAGE")}))
    """
)


@pytest.mark.parametrize(("user", "advised"), [(None, False), ("1", True), ("0", False)])
def test_numpy_stops_advising_huge_pages_unless_the_user_says(user, advised):
    env = {k: v for k, v in os.environ.items() if k != heap.NUMPY_HUGEPAGE}
    if user is not None:
        env[heap.NUMPY_HUGEPAGE] = user
    done = subprocess.run([sys.executable, "-c", _ADVICE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # Processes started from here read the same value when they import numpy.
    assert json.loads(done.stdout) == {"advised": advised, "env": user or "0"}


def test_nothing_changes_without_glibc(monkeypatch):
    monkeypatch.setattr(heap, "_done", None)
    monkeypatch.setattr(heap, "_no_numpy_hugepage_advice", lambda: None)
    monkeypatch.setattr(heap, "_glibc", lambda: None)
    for name in heap._SETTINGS:
        monkeypatch.delenv(name, raising=False)
    assert heap.keep_freed_memory() is False
    assert not any(name in os.environ for name in heap._SETTINGS)


@pytest.mark.parametrize(("command", "keeps"), [("reconstruct", True), ("evaluate", True), ("build", True), ("train", False), ("verify", False)])
def test_the_event_chain_commands_keep_freed_memory_and_training_does_not(monkeypatch, capsys, command, keeps):
    from domainpar.cli import main as cli_main

    calls = []
    monkeypatch.setattr(cli_main, "keep_freed_memory", lambda: calls.append(command))
    try:
        cli_main.main([command, "--help"])
    except SystemExit as exc:
        assert exc.code in (0, None)
    assert calls == ([command] if keeps else [])


def _second_block_faults(size: int) -> tuple[str | None, int]:
    """In a worker: the page faults of touching a block of ``size`` bytes after one of that size was freed."""
    import resource

    import numpy as np

    first = np.ones(size, dtype=np.uint8)
    del first
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    second = np.ones(size, dtype=np.uint8)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    del second
    return os.environ.get("MALLOC_MMAP_THRESHOLD_"), faults


@pytest.mark.timeout(180)
def test_worker_processes_keep_freed_memory_whoever_started_them(monkeypatch):
    # A recipe's data stages start their workers from a process that is no event-chain command (the bench, a
    # notebook): each worker keeps freed memory on its own.
    from domainpar.workers import run_items

    for name in heap._SETTINGS:
        monkeypatch.delenv(name, raising=False)
    results = run_items(_second_block_faults, [256 << 20] * 2, workers=2, progress=False)
    plain = _faults("plain")["faults"]
    for result in results:
        assert result.ok, result.error
        setting, faults = result.value
        assert setting == str(heap.MMAP_THRESHOLD) and faults < plain / 10, (result.value, plain)

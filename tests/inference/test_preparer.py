"""The preparing process of ``domainpar reconstruct`` (:mod:`domainpar.inference.preparer`): a preparer that dies,
even in the middle of a message, is named within seconds; the host never waits on it for ever."""

from __future__ import annotations

import os
import signal
import struct
import time
from pathlib import Path
from types import SimpleNamespace

import pytest



def _dies_mid_message(stage, threads, jobs, results) -> None:
    """A preparer killed while it writes an event: a length header for a MB and 100 bytes of it, then SIGKILL."""
    writer = getattr(results, "_writer", results)  # the write end of the pipe (a multiprocessing queue keeps one)
    os.write(writer.fileno(), struct.pack("!i", 1 << 20) + b"x" * 100)
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.timeout(60)
def test_a_preparer_killed_mid_message_is_named_within_seconds(monkeypatch):
    """The host read the header and part of the event, then the pipe's end: a named death, not a wait for ever (a
    preparer killed before it wrote anything takes the same path: the end of the pipe, or its sentinel)."""
    # Imported here: the spawned child imports this module for its target, and needs nothing heavy.
    from domainpar.errors import MachineFault
    from domainpar.inference import preparer

    monkeypatch.setattr(preparer, "_preparer_main", _dies_mid_message)
    source = SimpleNamespace(name="event000000001", path=Path("data/event000000001"))
    prepared = preparer.Preparer(None, 1, 1)
    try:
        started = time.monotonic()
        with pytest.raises(MachineFault) as raised:
            prepared.ahead([source], 0)
            prepared.get(source)
        assert time.monotonic() - started < 15.0
    finally:
        prepared.close(False)
    line = raised.value.line()
    assert "\n" not in line
    assert line.startswith("data/event000000001: the process preparing events died (exit code -9; "), line

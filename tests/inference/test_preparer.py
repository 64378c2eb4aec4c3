"""The preparing process of ``domainpar reconstruct`` (:mod:`domainpar.inference.preparer`): a preparer that dies,
even in the middle of a message, is named within seconds; the host never waits on it for ever."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import dying_children
import pytest


@pytest.mark.timeout(60)
def test_a_preparer_killed_mid_message_is_named_within_seconds(monkeypatch):
    """The host read the header and part of the event, then the pipe's end: a named death, not a wait for ever (a
    preparer killed before it wrote anything takes the same path: the end of the pipe, or its sentinel)."""
    from domainpar.errors import MachineFault
    from domainpar.inference import preparer

    monkeypatch.setattr(preparer, "_preparer_main", dying_children.preparer_killed_mid_message)
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

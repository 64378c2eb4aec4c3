"""A spawned rank that dies while it reads its start-up arguments is named at once, in one line, with no traceback.

Its arguments (the training payload lists every event's files) travel through a pipe: before
:mod:`domainpar.launch.bootstrap`, a child that died before reading them all left ``spawn`` blocked in
``Process.start()`` for ever once they exceeded the pipe's buffer, and a child whose unpickling raised printed
``spawn_main``'s traceback and was named "died (exit code 1) without reporting an error".
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from domainpar.launch.ranks import SpawnError, spawn

pytestmark = pytest.mark.distributed

#: Far more than a pipe's buffer (64 KiB on Linux): the parent is still writing when the child dies.
LARGE_PAYLOAD = b"x" * (4 << 20)


def _never_runs(rank: int, world_size: int, *payload) -> int:
    return rank


def _unpickle_bomb(how: str) -> None:
    """Runs in the child while it unpickles its arguments (the parent only pickled a reference to it)."""
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError("cannot unpickle this payload")


class _Bomb:
    """An argument whose unpickling kills the child or raises."""

    def __init__(self, how: str) -> None:
        self.how = how

    def __reduce__(self):
        return (_unpickle_bomb, (self.how,))


@pytest.mark.timeout(60)
def test_a_rank_killed_while_reading_a_large_payload_is_named_at_once(capfd):
    start = time.monotonic()
    with pytest.raises(SpawnError) as info:
        # The rest of the payload follows the bomb: the child dies with most of it unread.
        spawn(_never_runs, 2, args=(_Bomb("kill"), LARGE_PAYLOAD), timeout_s=3600)
    elapsed = time.monotonic() - start
    assert info.value.line == "rank 0 of 2 died (killed by SIGKILL) while reading its start-up arguments"
    assert info.value.ranks == [0] and info.value.traceback_text == ""
    assert elapsed < 10, elapsed
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.timeout(60)
def test_a_rank_whose_arguments_cannot_be_unpickled_says_why_in_one_line(capfd):
    with pytest.raises(SpawnError) as info:
        spawn(_never_runs, 2, args=(_Bomb("raise"),), timeout_s=3600)
    # Both ranks fail alike; the first one seen dead is named.
    assert re.fullmatch(
        r"rank [01] of 2 died \(exit code 1\) while reading its start-up arguments: "
        r"RuntimeError: cannot unpickle this payload",
        str(info.value),
    ), str(info.value)
    assert info.value.traceback_text == ""
    assert "Traceback" not in capfd.readouterr().err

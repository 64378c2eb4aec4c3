"""Children that die in the middle of a message, for the tests of their parents (light: a spawned child imports
this module for its target, and nothing more)."""

from __future__ import annotations

import gc
import multiprocessing.queues
import os
import signal
import struct


def half_message(fd: int) -> None:
    """Write a header for a MB and 100 bytes of it to the pipe ``fd``: the reader waits for the rest."""
    os.write(fd, struct.pack("!i", 1 << 20) + b"x" * 100)


def preparer_killed_mid_message(stage, threads, jobs, results) -> None:
    """A preparing process killed while it writes an event to its host."""
    half_message(getattr(results, "_writer", results).fileno())  # a multiprocessing queue keeps its pipe's end here
    os.kill(os.getpid(), signal.SIGKILL)


def host_rank_killed_mid_message(rank, world, checkpoint, method, seed, timeout_s, jobs, results) -> None:
    """A local group's host rank killed while it writes (its logits to the group's caller, its result to spawn):
    half a message on every queue it holds, then SIGKILL."""
    jobs.get()
    for queue in [q for q in gc.get_objects() if isinstance(q, multiprocessing.queues.Queue)]:
        half_message(queue._writer.fileno())
    os.kill(os.getpid(), signal.SIGKILL)

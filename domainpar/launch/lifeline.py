"""A rank's ties to its launcher: it dies with it, it is named in ``ps``, SIGTERM unwinds it.

* :func:`die_with_parent`: on Linux the kernel sends SIGKILL to this process when its parent dies
  (``prctl(PR_SET_PDEATHSIG)``); everywhere, a thread also watches the parent and ends this process when it is
  gone. So ranks never outlive a launcher that was killed, even with SIGKILL.
* :func:`name_process`: ``domainpar r3`` in ``ps``/``top`` (Linux).
* :func:`terminate_on_signals`: SIGTERM and SIGHUP raise :class:`Terminated` in the main thread, so ``finally``
  blocks run instead of the process vanishing mid-write.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing
import os
import signal
import sys
import threading
from multiprocessing.connection import wait
from typing import Any

# Defined with the other exceptions at the bottom layer (worker pools and every command raise it too).
from domainpar.errors import Terminated, note_stop
from domainpar.signals import raise_outside_finalizers

_PR_SET_NAME = 15
_PR_SET_PDEATHSIG = 1


def _prctl(option: int, value: Any) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent_pid: int, sentinel: int | None, poll_s: float = 1.0) -> None:
    if sentinel is not None:
        wait([sentinel])  # readable (EOF) once the parent has exited
    else:
        stop = threading.Event()
        while os.getppid() == parent_pid:
            stop.wait(poll_s)
    os._exit(1)


def die_with_parent(parent_pid: int | None = None) -> None:
    """End this process when its parent (the launcher) dies, whatever killed the parent.

    Call it first thing in a rank's main thread.

    Args:
        parent_pid: the pid the parent had when it started us (default: the current parent);
            if the parent is already gone, this process exits at once.
    """
    expected = os.getppid() if parent_pid is None else parent_pid
    # The signal is tied to the thread that forked us; spawning from a main thread (ours, torchrun's) is the norm.
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != expected:  # the parent died before prctl took effect
        os._exit(1)
    sentinel = None
    try:
        parent = multiprocessing.parent_process()
        if parent is not None and parent.pid == expected:
            sentinel = parent.sentinel
    except (AttributeError, ValueError):
        sentinel = None
    threading.Thread(
        target=_watch_parent, args=(expected, sentinel), name="domainpar-parent-watch", daemon=True
    ).start()


def name_process(rank: int) -> None:
    """Show this process as ``domainpar r<rank>`` in ps/top (Linux; no-op elsewhere). Call from the main thread."""
    _prctl(_PR_SET_NAME, ctypes.c_char_p(f"domainpar r{rank}".encode()[:15]))


def _raise_terminated(signum: int, frame: Any) -> None:
    note_stop(signum)

    def stop() -> None:
        raise Terminated(signum)

    raise_outside_finalizers(frame, stop)


def terminate_on_signals() -> None:
    """Make SIGTERM and SIGHUP raise :class:`Terminated` in the main thread (no-op outside it)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if signum is not None:
            signal.signal(signum, _raise_terminated)


__all__ = ["Terminated", "die_with_parent", "name_process", "terminate_on_signals"]

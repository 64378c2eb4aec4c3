"""The stop signals (SIGINT, SIGTERM, SIGHUP): how a command answers them, and where.

A command unwinds on a stop signal (:func:`stops_unwind`): its handler raises ``KeyboardInterrupt`` or
:class:`~domainpar.errors.Terminated` in the main thread, so ``finally`` blocks and the atomic writers' clean-up
run. Raised between some bytecodes the interrupt does harm: half way through ``concurrent.futures.wait`` (the
pool's manager thread then blocks for ever), inside numba code that calls back into Python, or inside a finalizer
or a callback from C ("Exception ignored in", and the stop is lost). Code that waits in such places holds the stop
signals (:func:`hold_stops`): a signal is only noted, and acted on at a safe point (:meth:`HeldStops.answer`) or
as the block ends, by raising it again to the handler the hold replaced.

Holds nest: only the outermost replaces the handlers and acts on a signal, so an inner block never raises into a
region the outer one protects; an inner hold still sees what arrived (:attr:`HeldStops.arrived`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Any, Callable, Iterator

from domainpar.errors import Terminated, note_stop

#: The signals that stop a command (SIGHUP where the platform has it).
STOP_SIGNALS = frozenset(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)


def _install(handler: Callable[[int, Any], Any], keep_ignored: bool) -> dict[int, Any]:
    """Set ``handler`` for every stop signal (``keep_ignored``: not for one that is ignored, or whose handler was set
    outside Python); returns the handlers it replaced."""
    replaced = {}
    for signum in sorted(STOP_SIGNALS):
        current = signal.getsignal(signum)
        if keep_ignored and current in (signal.SIG_IGN, None):
            continue
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signum, handler)
            replaced[signum] = current
    return replaced


def _restore(replaced: dict[int, Any]) -> None:
    """Put back the handlers :func:`_install` replaced."""
    for signum, handler in replaced.items():
        with contextlib.suppress(ValueError, OSError, TypeError):  # TypeError: None, a handler set outside Python
            signal.signal(signum, handler)
    replaced.clear()


def _in_main_thread() -> bool:
    # Python runs signal handlers, and lets them be set, in the main thread only.
    return threading.current_thread() is threading.main_thread()


#: Seconds after which a stop that landed in a finalizer is raised again, from the code running by then.
FINALIZER_RETRY_S = 0.01


#: Where Python code runs as a callback from C: llvmlite, through which numba's compiler (a worker's first call of a
#: kernel on a cold cache) calls back into Python from LLVM (its object cache).
_CALLBACK_DIRECTORIES = (f"{os.sep}llvmlite{os.sep}",)


def in_finalizer(frame: Any) -> bool:
    """Whether ``frame`` (where a signal interrupted the main thread) runs inside a finalizer: an object's
    ``__del__`` or a ``weakref.finalize`` callback, which the garbage collector may run at any allocation; or inside
    llvmlite, whose callbacks from C (:data:`_CALLBACK_DIRECTORIES`) are the same trap. An exception raised there
    is printed as "Exception ignored in ..." (or "... on calling ctypes callback function") and lost."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or (code.co_name == "__call__" and code.co_filename.endswith("weakref.py")):
            return True
        if any(directory in code.co_filename for directory in _CALLBACK_DIRECTORIES):
            return True
        frame = frame.f_back
    return False


def raise_outside_finalizers(frame: Any, raise_stop: Callable[[], None]) -> None:
    """Call ``raise_stop`` (it raises the stop) from a signal handler that interrupted ``frame``; inside a finalizer
    (:func:`in_finalizer`), a moment later instead, from wherever the code is then (a one-shot SIGALRM; the
    alarm handler and timer that were set before are put back first)."""
    if not in_finalizer(frame) or not hasattr(signal, "setitimer"):
        raise_stop()
        return
    previous = signal.getsignal(signal.SIGALRM)
    started = time.monotonic()

    def again(_signum: int, later: Any) -> None:
        with contextlib.suppress(ValueError, OSError, TypeError):
            signal.signal(signal.SIGALRM, previous)
        if pending[0] > 0:  # someone's alarm (a test timeout) was running: it keeps its deadline
            signal.setitimer(signal.ITIMER_REAL, max(pending[0] - (time.monotonic() - started), 1e-3), pending[1])
        raise_outside_finalizers(later, raise_stop)

    pending = signal.getitimer(signal.ITIMER_REAL)
    signal.signal(signal.SIGALRM, again)
    signal.setitimer(signal.ITIMER_REAL, FINALIZER_RETRY_S)


def unwind(signum: int, frame: Any) -> None:
    """A command's stop handler: the first stop signal raises (``KeyboardInterrupt`` for SIGINT, else
    :class:`~domainpar.errors.Terminated`), outside any finalizer (:func:`raise_outside_finalizers`); repeats are
    ignored, so the clean-up itself is not interrupted."""
    note_stop(signum)
    for other in STOP_SIGNALS:
        with contextlib.suppress(ValueError, OSError):
            signal.signal(other, signal.SIG_IGN)

    def stop() -> None:
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(signum)

    raise_outside_finalizers(frame, stop)


@contextlib.contextmanager
def stops_unwind() -> Iterator[None]:
    """While the block runs, a stop signal unwinds this process (:func:`unwind`); the handlers are restored after.

    Ignored signals are answered too (a command started as a shell's background job still takes SIGINT). A
    no-op outside the main thread.
    """
    replaced = _install(unwind, keep_ignored=False) if _in_main_thread() else {}
    try:
        yield
    finally:
        _restore(replaced)


class HeldStops:
    """The stop signals a :func:`hold_stops` block holds."""

    def __init__(self, outermost: HeldStops | None = None) -> None:
        self._outermost = outermost  # set in a nested hold: the one that acts, and whose signals it sees
        self._arrived: list[int] = []
        self._replaced: dict[int, Any] = {}

    @property
    def arrived(self) -> tuple[int, ...]:
        """The stop signals noted and not yet acted on, first first (empty outside the main thread)."""
        return tuple((self._outermost or self)._arrived)

    def answer(self) -> None:
        """A safe point: act on the first held signal as the process would have (the replaced handler runs here, and
        usually raises). Nothing happens while none arrived, or in a hold nested in another one."""
        if self._outermost is not None or not self._arrived:
            return
        signum = self._arrived[0]
        self._arrived.clear()  # acted on now, not again as the hold ends; a later repeat is the handler's to judge
        _restore(self._replaced)
        signal.raise_signal(signum)  # the replaced handler runs here, at the caller's safe point
        self._hold()  # it returned (a handler that only records): the block goes on, held again

    def _hold(self) -> None:
        # Ignored stays ignored: nothing to act on later.
        self._replaced = _install(lambda signum, frame: self._arrived.append(signum), keep_ignored=True)


#: The main thread's outermost hold, while one is active.
_ACTIVE: list[HeldStops] = []


@contextlib.contextmanager
def hold_stops() -> Iterator[HeldStops]:
    """Hold the stop signals until a safe point, then act on the first one as the process would have.

    Inside the block a stop signal is only noted. :meth:`HeldStops.answer`, called where an exception may be
    raised safely (between two waits), acts on it; one still held when the block ends is acted on then, also
    when the block ends with an exception. Nested holds share the outermost one (see the module docstring).
    Outside the main thread nothing is held (signals are handled in the main thread only).

    Yields:
        This block's :class:`HeldStops`.
    """
    if not _in_main_thread():
        yield HeldStops()  # it replaces no handler: nothing arrives
        return
    if _ACTIVE:
        yield HeldStops(_ACTIVE[0])
        return
    held = HeldStops()
    _ACTIVE.append(held)
    try:
        held._hold()
        yield held
    finally:
        _ACTIVE.clear()
        _restore(held._replaced)
        if held._arrived:
            signal.raise_signal(held._arrived[0])


@contextlib.contextmanager
def children_start_quietly() -> Iterator[HeldStops]:
    """Start child processes in this block: they start with the stop signals blocked, and this process acts on
    a stop signal only once they have all started.

    The mask is inherited: a child blocks the stop signals until its own handlers are set (a Ctrl-C while it
    imports would print a traceback from each child). This process's answer is held too (:func:`hold_stops`): a
    stop while it hands a child its arguments would leave the child reading half of them.

    Yields:
        The hold: the caller starts no further child once :attr:`HeldStops.arrived` is not empty.
    """
    with hold_stops() as held:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            yield held
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # what was pending for this thread arrives: held


def start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (if it is not running) immune to SIGHUP.

    The tracker ignores SIGINT and SIGTERM itself but not SIGHUP: killed by a hang-up of the process group, it is
    started again on the way out and prints a ``KeyError`` traceback for each semaphore. Started with SIGHUP
    blocked, it keeps it blocked (the mask is inherited).
    """
    from multiprocessing import resource_tracker

    hangup = getattr(signal, "SIGHUP", None)
    if hangup is None:
        resource_tracker.ensure_running()
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {hangup})
    try:
        resource_tracker.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def signal_name(exitcode: int) -> str:
    """The signal that killed a process of (negative) ``exitcode``: ``SIGKILL``, or ``signal 99`` for an unknown one."""
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


__all__ = [
    "FINALIZER_RETRY_S", "STOP_SIGNALS", "HeldStops", "children_start_quietly", "hold_stops", "in_finalizer",
    "raise_outside_finalizers", "signal_name", "start_resource_tracker", "stops_unwind", "unwind",
]

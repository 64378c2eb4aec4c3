"""The stop signals (SIGINT, SIGTERM, SIGHUP): how a command answers them, and where.

A command unwinds on a stop signal (:func:`stops_unwind`): its handler raises ``KeyboardInterrupt`` or
:class:`~domainpar.errors.Terminated` in the main thread, so ``finally`` blocks and the atomic writers' clean-up
run on the way out. But Python runs a handler between any two bytecodes of the main thread, and raised at some
of them the interrupt does harm:

* half way through ``concurrent.futures.wait`` taking the locks of many futures: the pool's manager thread
  then blocks for ever on a lock left held, and the interpreter's exit hook waits for that thread;
* inside numba code that calls back into Python: a ``SystemError`` and a traceback instead of the stop;
* inside a weakref finalizer or a ``__del__`` (the garbage collector runs them wherever the main thread
  allocates): the interpreter prints "Exception ignored in" with a traceback and the stop is lost.

So code that waits in such places, or runs such a region, holds the stop signals (:func:`hold_stops`). While
they are held a signal is only noted; the code acts on it at a safe point of its own
(:meth:`HeldStops.answer`), and a signal still held when the block ends is acted on then. Acting on it means
raising it again to the handler the hold replaced, so the process does what it would have done without the hold
(the command's handler raises, a default action ends the process).

Holds nest: only the outermost one replaces the handlers and acts on a signal. A hold inside it (a helper that
holds on its own, used within a caller's hold) sees what arrived (:attr:`HeldStops.arrived`, e.g. to start no
further child), but its :meth:`~HeldStops.answer` and its end act on nothing: the signal waits for the
outermost hold's next safe point, so an inner block never raises into a region the outer one protects, and a
signal is acted on once.

Child processes start with the stop signals blocked (:func:`children_start_quietly`, the mask is inherited)
until they have set their own handlers.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Callable, Iterator

from domainpar.errors import Terminated, note_stop

#: The signals that stop a command (SIGHUP where the platform has it).
STOP_SIGNALS = frozenset(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)


def _install(handler: Callable[[int, Any], Any], keep_ignored: bool) -> dict[int, Any]:
    """Set ``handler`` for every stop signal; returns the handlers it replaced.

    Args:
        handler: the new handler.
        keep_ignored: leave a signal that is ignored, or whose handler was set outside Python, as it is.
    """
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


def unwind(signum: int, frame: Any) -> None:
    """A command's stop handler: the first stop signal raises (``KeyboardInterrupt`` for SIGINT, else
    :class:`~domainpar.errors.Terminated`); repeats are ignored, so the clean-up itself is not interrupted."""
    note_stop(signum)
    for other in STOP_SIGNALS:
        with contextlib.suppress(ValueError, OSError):
            signal.signal(other, signal.SIG_IGN)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


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


class _Holding:
    """The outermost hold of the main thread: the handlers it replaced and the signals noted since."""

    def __init__(self) -> None:
        self.arrived: list[int] = []
        self.replaced: dict[int, Any] = {}

    def note(self, signum: int, frame: Any) -> None:
        self.arrived.append(signum)

    def hold(self) -> None:
        # Ignored stays ignored: nothing to act on later.
        self.replaced = _install(self.note, keep_ignored=True)

    def release(self) -> None:
        _restore(self.replaced)

    def answer(self) -> None:
        if not self.arrived:
            return
        signum = self.arrived[0]
        self.arrived.clear()  # acted on now, not again as the hold ends; a later repeat is the handler's to judge
        self.release()
        signal.raise_signal(signum)  # the replaced handler runs here, at the caller's safe point
        self.hold()  # it returned (a handler that only records): the block goes on, held again


class HeldStops:
    """One :func:`hold_stops` block's view of the held stop signals."""

    def __init__(self, holding: _Holding | None, outermost: bool) -> None:
        self._holding = holding
        self._outermost = outermost

    @property
    def arrived(self) -> tuple[int, ...]:
        """The stop signals noted and not yet acted on, first first (empty outside the main thread)."""
        return tuple(self._holding.arrived) if self._holding is not None else ()

    def answer(self) -> None:
        """A safe point: act on the first held signal as the process would have (the replaced handler runs
        here, and usually raises). Nothing happens while none arrived, or in a hold nested in another one."""
        if self._outermost and self._holding is not None:
            self._holding.answer()


#: The main thread's outermost hold, while one is active.
_ACTIVE: list[_Holding] = []


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
        yield HeldStops(None, outermost=False)
        return
    if _ACTIVE:
        yield HeldStops(_ACTIVE[0], outermost=False)
        return
    holding = _Holding()
    _ACTIVE.append(holding)
    try:
        holding.hold()
        yield HeldStops(holding, outermost=True)
    finally:
        _ACTIVE.clear()
        holding.release()
        if holding.arrived:
            signal.raise_signal(holding.arrived[0])


@contextlib.contextmanager
def children_start_quietly() -> Iterator[HeldStops]:
    """Start child processes in this block: they start with the stop signals blocked, and this process acts on
    a stop signal only once they have all started.

    The mask is inherited: a child blocks SIGINT, SIGTERM and SIGHUP from its first instruction until its own
    handlers are set (a Ctrl-C while it imports would print a traceback from each child, a SIGTERM would kill it
    half way). This process's own answer is held too (:func:`hold_stops`): a stop that interrupted it while it
    hands a child its arguments would leave the child reading half of them (an unpickling traceback), and
    blocking the signal in this thread alone is not enough (another thread takes it, and Python runs the handler
    here anyway).

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

    The tracker ignores SIGINT and SIGTERM itself but not SIGHUP: a hang-up sent to the command's process group
    would kill it while the workers hold semaphores, and the tracker started again on the way out then prints a
    ``KeyError`` traceback for each. Started with SIGHUP blocked, it keeps it blocked (the mask is inherited and it
    unblocks only the other two); a SIGHUP to this process meanwhile stays pending and is answered right after.
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


__all__ = [
    "STOP_SIGNALS", "HeldStops", "children_start_quietly", "hold_stops", "start_resource_tracker", "stops_unwind", "unwind",
]

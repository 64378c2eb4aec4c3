"""domainpar.signals: held stop signals are acted on once, at the outermost hold's safe point, as the process would have."""

from __future__ import annotations

import signal
import threading

import pytest

from domainpar.signals import STOP_SIGNALS, children_start_quietly, hold_stops, stops_unwind


class _Stopped(Exception):
    pass


@pytest.fixture
def handled():
    """A command's own SIGTERM handler for the test (it raises, as the command's does), restored after."""
    seen: list[int] = []

    def handler(signum, frame):
        seen.append(signum)
        raise _Stopped(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_held_signal_is_acted_on_at_the_safe_point(handled):
    with hold_stops() as held:
        signal.raise_signal(signal.SIGTERM)
        assert handled == [] and held.arrived == (signal.SIGTERM,)
        with pytest.raises(_Stopped):
            held.answer()
    assert handled == [signal.SIGTERM]


def test_a_signal_still_held_is_acted_on_as_the_hold_ends(handled):
    with pytest.raises(_Stopped):
        with hold_stops():
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGTERM)  # a repeat while held: acted on once
    assert handled == [signal.SIGTERM]


def test_an_inner_hold_sees_the_signal_and_leaves_it_to_the_outermost(handled):
    with pytest.raises(_Stopped):
        with hold_stops() as outer:
            with hold_stops() as inner:
                signal.raise_signal(signal.SIGTERM)
                assert inner.arrived == (signal.SIGTERM,)
                inner.answer()  # not the inner block's to act on
            assert handled == [] and outer.arrived == (signal.SIGTERM,)  # nor its end's
            outer.answer()
    assert handled == [signal.SIGTERM]
    # Every handler is the command's again.
    assert signal.getsignal(signal.SIGTERM).__name__ == "handler"


def test_nothing_held_nothing_acted_on(handled):
    with hold_stops() as held:
        held.answer()
    assert handled == [] and held.arrived == ()


def test_a_handler_that_returns_leaves_the_block_held(handled):
    signal.signal(signal.SIGTERM, lambda signum, frame: handled.append(signum))
    with hold_stops() as held:
        signal.raise_signal(signal.SIGTERM)
        held.answer()
        signal.raise_signal(signal.SIGTERM)  # held again: answered as the block ends
        assert handled == [signal.SIGTERM]
    assert handled == [signal.SIGTERM, signal.SIGTERM]


def test_an_ignored_signal_stays_ignored():
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with hold_stops() as held:
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
            signal.raise_signal(signal.SIGTERM)
            held.answer()
        assert held.arrived == ()
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_outside_the_main_thread_nothing_is_held():
    seen = []

    def run():
        with hold_stops() as held:
            seen.append((held.arrived, signal.getsignal(signal.SIGTERM)))
            held.answer()

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [((), before)]


def test_children_start_with_the_stop_signals_blocked(handled):
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    with pytest.raises(_Stopped):
        with children_start_quietly() as starting:
            assert STOP_SIGNALS <= signal.pthread_sigmask(signal.SIG_BLOCK, set())
            signal.raise_signal(signal.SIGTERM)  # pending while blocked, held once it arrives
            assert handled == [] and starting.arrived == ()
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before
    assert handled == [signal.SIGTERM]


def test_a_command_unwinds_once_and_ignores_repeats():
    from domainpar.errors import Terminated, clear_stop, stop_received

    before = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    try:
        with stops_unwind():
            with pytest.raises(Terminated):
                signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGHUP)  # a repeat while the command unwinds: ignored
        assert stop_received() == signal.SIGTERM
    finally:
        clear_stop()
    assert {signum: signal.getsignal(signum) for signum in STOP_SIGNALS} == before  # the caller's, after the block


class _StopsInItsFinalizer:
    """An object whose finalizer takes a SIGTERM: the handler runs inside ``__del__`` (or a weakref.finalize
    callback), where a raised exception is printed as "Exception ignored in" and lost."""

    def __del__(self):
        signal.raise_signal(signal.SIGTERM)


def _wait_for_the_stop() -> None:
    import time

    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        time.sleep(0.001)
    pytest.fail("the stop that landed in a finalizer was lost")


def _call_back_from_c_as_llvmlite_does() -> None:
    """A SIGTERM inside a Python function that C calls through ctypes (libc's qsort and its comparison), the
    function's code placed in an llvmlite directory as numba's compiler's callbacks from LLVM are: an exception
    raised there is printed as "Exception ignored on calling ctypes callback function" and lost."""
    import ctypes
    import ctypes.util
    import os

    namespace: dict = {"signal": signal, "raised": []}
    source = (
        "def compare(a, b):\n"
        "    if not raised:\n"
        "        raised.append(True)\n"
        "        signal.raise_signal(signal.SIGTERM)\n"
        "    return a[0] - b[0]\n"
    )
    exec(compile(source, os.path.join(os.sep, "site-packages", "llvmlite", "binding", "callbacks.py"), "exec"), namespace)
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    comparison = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))
    values = (ctypes.c_int * 3)(3, 1, 2)
    libc.qsort(values, 3, ctypes.sizeof(ctypes.c_int), comparison(namespace["compare"]))
    assert namespace["raised"] and list(values) == [1, 2, 3]  # the sort finished: the stop came after it


@pytest.mark.parametrize("finalizer", ["__del__", "weakref.finalize", "llvmlite callback"])
def test_a_stop_inside_a_finalizer_is_raised_once_it_has_returned(finalizer, capfd):
    import weakref

    from domainpar.errors import Terminated, clear_stop

    def recorded(signum, frame):
        alarms.append(signum)

    alarms: list[int] = []
    previous = signal.signal(signal.SIGALRM, recorded)
    signal.setitimer(signal.ITIMER_REAL, 60.0)  # someone's alarm (pytest-timeout's): kept, with its deadline
    try:
        with stops_unwind():
            with pytest.raises(Terminated):
                if finalizer == "llvmlite callback":
                    _call_back_from_c_as_llvmlite_does()
                    victim = None
                elif finalizer == "__del__":
                    victim = _StopsInItsFinalizer()
                else:
                    victim = type("Victim", (), {})()
                    weakref.finalize(victim, signal.raise_signal, signal.SIGTERM)
                del victim
                _wait_for_the_stop()
        assert signal.getsignal(signal.SIGALRM) is recorded and 50.0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 60.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        clear_stop()
    assert alarms == [] and "Exception ignored" not in capfd.readouterr().err

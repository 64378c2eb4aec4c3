"""domainpar.workers: a stop signal that lands inside the pool's bookkeeping still ends the process; a dead worker is named."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

# A child that runs a two-worker pool and takes SIGINT at the worst moment the main thread has: half way through
# concurrent.futures.wait taking the locks of the pending futures. Raised there, the interrupt leaves those locks
# held, the pool's manager thread blocks on the first one, and the interpreter's exit hook waits for it for ever
# (CI saw `build` print "error: interrupted" and never exit).
_CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    import concurrent.futures._base as base
    from domainpar.workers import run_items

    def item(i):
        time.sleep(0.01)
        return i

    if __name__ == "__main__":
        # As a command does (domainpar.cli.main): answered, even where the launcher left SIGINT ignored (a shell's
        # background job, some CI runners).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        acquire = base._AcquireFutures.__enter__
        calls = [0]

        def enter(self):
            calls[0] += 1
            if calls[0] == 3:  # a few results in: both workers are busy
                futures = sorted(self.futures, key=id)
                futures[0]._condition.acquire()
                os.kill(os.getpid(), signal.SIGINT)  # its handler runs before the next lock is taken
                for future in futures[1:]:
                    future._condition.acquire()
                return None
            return acquire(self)

        base._AcquireFutures.__enter__ = enter
        try:
            run_items(item, list(range(400)), workers=2, progress=False)
        except KeyboardInterrupt as exc:
            print("interrupted", file=sys.stderr)
            if isinstance(exc.__context__, KeyboardInterrupt):
                print("and raised a second time", file=sys.stderr)  # the held signal must be answered once
            sys.exit(130)
        sys.exit(3)
    """
)


@pytest.mark.timeout(120)
def test_an_interrupt_inside_the_pools_wait_still_ends_the_process(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, str(script)], stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = process.communicate(timeout=45)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
        pytest.fail(f"the interrupted pool never let its process exit (stderr: {stderr[-2000:]!r})")
    assert process.returncode == 130, stderr[-2000:]
    assert stderr.strip().splitlines() == ["interrupted"], stderr[-2000:]
    assert time.monotonic() - started < 45


# A child whose pool worker is killed while it writes its result: half of it is in the pipe the pool's manager
# thread reads, and the parent holds the pipe's write end itself, so the rest never comes.
_HALF_RESULT = textwrap.dedent(
    """
    import gc, os, signal, struct, sys
    from multiprocessing.queues import SimpleQueue
    from domainpar import workers
    from domainpar.errors import MachineFault
    from domainpar.workers import run_items

    def item(i):
        if i == 1:
            # The pool's result queue (not the queue of started items: its short messages are whole or nothing).
            for queue in [q for q in gc.get_objects() if isinstance(q, SimpleQueue) and q is not workers._STARTED]:
                os.write(queue._writer.fileno(), struct.pack("!i", 1 << 20) + b"x" * 100)
            os.kill(os.getpid(), signal.SIGKILL)
        return i

    if __name__ == "__main__":
        try:
            run_items(item, [0, 1], names=["event0", "event1"], workers=2, progress=False)
        except MachineFault as exc:
            print(exc.line(), file=sys.stderr)
            sys.exit(1)
        sys.exit(3)
    """
)


@pytest.mark.timeout(120)
def test_a_worker_killed_mid_result_is_named_and_the_process_exits(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(_HALF_RESULT)
    try:
        done = subprocess.run([sys.executable, str(script)], stderr=subprocess.PIPE, text=True, timeout=60,
                              start_new_session=True)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("a worker killed mid-result held the run for ever")
    process, stderr = done, done.stderr
    assert process.returncode == 1, stderr[-2000:]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("event1: a worker process was killed by SIGKILL"), stderr[-2000:]


class _ReapedElsewhere:
    """A pool worker that has ended, seen from a thread that lost the race to reap it: its sentinel is ready, and
    its exit code reads None until ``lands_after`` seconds have passed (the reaping thread stores it then)."""

    def __init__(self, pid: int, code: int, lands_after: float):
        self.pid = pid
        self._code = code
        self._lands_at = time.monotonic() + lands_after
        read, write = os.pipe()
        os.close(write)  # a closed write end: the read end is ready, as an ended process's sentinel is
        self.sentinel = read

    @property
    def exitcode(self):
        return self._code if time.monotonic() >= self._lands_at else None

    def join(self, timeout=None):  # waitpid found no child: returns at once, the code not stored
        return None

    def close(self):
        os.close(self.sentinel)


def test_a_killed_worker_is_named_even_when_another_thread_reaped_it():
    from domainpar.workers import _worker_death

    killed = _ReapedElsewhere(pid=101, code=-signal.SIGKILL, lands_after=0.05)
    stopped = _ReapedElsewhere(pid=100, code=128 + signal.SIGTERM, lands_after=0.0)  # the pool's SIGTERM
    try:
        result = _worker_death("event0", [stopped, killed], {100: "event0", 101: "event1"})
    finally:
        killed.close()
        stopped.close()
    assert result.fault
    assert result.name == "event1", result.error
    assert "was killed by SIGKILL" in result.error, result.error


@pytest.mark.parametrize(
    ("code", "line"),
    [
        (-signal.SIGKILL, "a worker process was killed by SIGKILL (by the system's out-of-memory killer?); try fewer --workers"),
        (-signal.SIGSEGV, "a worker process was killed by SIGSEGV before it returned a result"),
        (1, "a worker process exited with status 1 before it returned a result"),
    ],
)
def test_only_a_sigkill_is_put_down_to_memory(code, line):
    # A worker that crashed or exited on its own (an import failing in it) is not the out-of-memory killer's doing,
    # and fewer workers would not help.
    from domainpar.workers import _worker_death

    ended = _ReapedElsewhere(pid=7, code=code, lands_after=0.0)
    try:
        result = _worker_death("event3", [ended], {7: "event2"})
    finally:
        ended.close()
    assert (result.name, result.error) == ("event2", line)


def test_failure_line_says_whose_failure_it_was():
    from domainpar.errors import DomainparError
    from domainpar.workers import failure_line

    assert failure_line(DomainparError("event1-hits.csv: expected a hit_id column")) == (
        "event1-hits.csv: expected a hit_id column", False, None)
    line, fault, kind = failure_line(OSError(28, "No space left on device", "/out/event1.npz"))
    assert fault and kind == "disk" and "/out/event1.npz" in line
    try:
        raise ValueError("a bug")
    except ValueError as exc:
        bug = exc
    line, fault, kind = failure_line(bug)
    assert line.startswith("ValueError at test_workers.py:") and line.endswith(": a bug") and not fault and kind is None
    assert failure_line(ValueError("never raised")) == ("ValueError: never raised", False, None)  # no traceback, no place


def _odd_fails(item: int) -> int:
    if item % 2:
        raise ValueError(f"odd {item}")
    return item


class _After:
    """A ``should_stop`` that stops the run after ``count`` results."""

    def __init__(self, count: int) -> None:
        self.left = count

    def __call__(self):
        self.left -= 1
        return KeyboardInterrupt() if self.left < 0 else None


@pytest.mark.timeout(60)
def test_a_count_of_items_costs_nothing_up_front():
    # Issue 41 item 7: every item was named (and, in a pool, submitted) before the first ran, so a count a user typed
    # (simulate --events 999999999) allocated in proportion to it. A range of 10**15 items now starts at once.
    from domainpar.workers import FailureTally, run_items

    items = range(10**15)
    tally = FailureTally()
    with pytest.raises(KeyboardInterrupt):
        run_items(_odd_fails, items, names=lambda i: f"event{items[i]:015d}", progress=False, on_result=tally.add,
                  should_stop=_After(6), keep=False)  # fmt: skip
    assert tally.summary().startswith("3 of 6 events failed: event000000000000001, event000000000000003, "
                                      "event000000000000005 (event000000000000001: ValueError at test_workers.py:")


def test_a_default_pool_only_for_work_worth_its_start_up():
    from domainpar.workers import POOL_MIN_SECONDS, pool_size

    assert pool_size(4, [1.0, 1.0, 1.0]) == 1  # a few small events: this process
    assert pool_size(4, [POOL_MIN_SECONDS / 2] * 2) == 4
    assert pool_size(4, [10 * POOL_MIN_SECONDS]) == 1  # one item: nothing to share
    assert pool_size(1, [POOL_MIN_SECONDS] * 4) == 1
    assert pool_size(2, [1.0] * 4, enough=4.0) == 2 and pool_size(2, [1.0] * 3, enough=4.0) == 1

    def estimates():  # read up to where the answer is known: a large dataset is not stat'ed file by file
        yield from (POOL_MIN_SECONDS, POOL_MIN_SECONDS)
        raise AssertionError("read past the answer")

    assert pool_size(2, estimates()) == 2

"""domainpar.workers: a stop signal that lands inside the pool's bookkeeping still ends the process."""

from __future__ import annotations

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

"""Ranks never outlive `domainpar train`, and one run at a time writes an --out.

Before this was built, SIGTERM or SIGKILL of the launcher left its ranks
training and writing checkpoints into --out, and a second run on the same
--out was accepted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from bench.common.jobs import running, start, train_args

from fixtures import write_graphs

pytestmark = pytest.mark.distributed


def _second_run(data, out) -> subprocess.CompletedProcess:
    # --resume: the first run's checkpoints are not in the way, only its lock is; --stop-after-steps 1 pauses at once
    # (a resume keeps the run's schedule, so --max-steps, which would shorten it, is refused).
    argv = [sys.executable, "-m", "domainpar", "train",
            *train_args(data, out, "--mode", "single", "--stop-after-steps", "1", "--resume")]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_ranks_die_with_their_launcher_and_the_lock_names_it(tmp_path, signum):
    data, out = tmp_path / "graphs", tmp_path / "out"
    write_graphs(data, 4)
    job = start("spawn", 2, data, out)
    launcher = job.processes[0]
    try:
        ranks = job.wait_for_ranks(2)
        job.wait_for_steps(2)
        # While it runs, a second run on the same --out is refused, naming the holder.
        second = _second_run(data, out)
        assert second.returncode == 2, second.stderr
        (line,) = second.stderr.strip().splitlines()
        assert line.startswith(f"error: --out {out}: another training run is writing there (pid {launcher.pid} on host ")
        assert line.endswith("wait for it, stop it, or choose another --out"), line
        os.kill(launcher.pid, signum)
        signalled = time.monotonic()
        launcher.wait(timeout=30)
        stopped_in = time.monotonic() - signalled
        # Judged before anything of the test's own kills them: the ranks must be gone by themselves.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(running(pid) for pid in ranks.values()):
            time.sleep(0.05)
        orphans = [rank for rank, pid in ranks.items() if running(pid)]
        (output,) = job.finish(30)
    finally:
        job.kill_all()
        for pid in ranks.values():
            if running(pid):
                os.kill(pid, signal.SIGKILL)
    assert orphans == [], f"ranks {orphans} outlived their launcher"
    logged = job.steps_logged()
    time.sleep(1.0)
    assert job.steps_logged() == logged  # nobody is training into --out any more
    if signum == signal.SIGTERM:
        assert launcher.returncode == 128 + signal.SIGTERM
        # Promptly: a rank its launcher stops reports at once (~1 s here) instead of looking for a failure to
        # name for 5 s, then being killed by the launcher while it looks.
        assert stopped_in < 4.5, stopped_in
        assert output.strip().splitlines() == ["error: domainpar train stopped by SIGTERM; its ranks were stopped"], output
        assert not (out / "train.lock").exists()
    else:
        # A SIGKILLed launcher leaves its lock: the next run names it as stale and takes it over.
        assert (out / "train.lock").exists()
        third = _second_run(data, out)
        assert third.returncode == 0, third.stderr
        assert f"taking over the stale lock of pid {launcher.pid} on host" in third.stderr
        assert not (out / "train.lock").exists()


# A rank's result whose unpickling, in the launcher's main thread, runs a weakref finalizer that sends the launcher
# SIGTERM: the stop lands inside the finalizer, as it does when the garbage collector runs one at that moment.
_PARTING = textwrap.dedent(
    """
    import os, signal, weakref


    class _Token:
        pass


    def _stop_while_finalizing():
        token = _Token()
        weakref.finalize(token, os.kill, os.getpid(), signal.SIGTERM)
        del token  # the finalizer runs here, in the unpickling thread


    class Parting:
        def __reduce__(self):
            return (_stop_while_finalizing, ())


    def rank(rank, world_size):
        return Parting()
    """
)

# The launcher's SIGTERM handler is that of `domainpar train`: it raises Terminated.
_LAUNCHER = textwrap.dedent(
    """
    import sys
    from domainpar.errors import Terminated
    from domainpar.launch.lifeline import terminate_on_signals
    from domainpar.launch.ranks import spawn
    from parting import rank

    if __name__ == "__main__":
        terminate_on_signals()
        try:
            spawn(rank, int(sys.argv[1]), timeout_s=120, watchdog=None)
        except Terminated as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(exc.exit_code)
        sys.exit(3)  # the stop was lost
    """
)


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("ranks", [1, 2], ids=["as-the-wait-ends", "between-waits"])
def test_a_sigterm_inside_a_finalizer_still_stops_the_launcher(tmp_path, ranks):
    # Before the launcher held its stop signals while it waits, the handler raised inside the finalizer: the
    # interpreter printed "Exception ignored in" and a traceback, and the launcher went on as if never stopped.
    (tmp_path / "parting.py").write_text(_PARTING)
    (tmp_path / "launcher.py").write_text(_LAUNCHER)
    done = subprocess.run([sys.executable, str(tmp_path / "launcher.py"), str(ranks)], capture_output=True, text=True,
                          timeout=150, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-3000:]
    assert done.stderr.strip().splitlines() == ["error: stopped by SIGTERM"], done.stderr[-3000:]

"""Pytest configuration shared by the whole test tree (fixtures live in ``fixtures.py`` beside this file).

pytest's default import mode puts this directory on ``sys.path``, so test
modules anywhere below it import ``fixtures``; the repository root goes on it
too, for the ``bench`` package (a top-level directory, not part of the
installed ``domainpar``).
"""

from __future__ import annotations

import os
import sys
from functools import lru_cache
from pathlib import Path

import pytest

# One intra-op thread per process unless the caller chose: two xdist workers on 2 cores, each also spawning 2-4
# ranks, with torch's default of one thread per core would keep several times more threads than cores busy
# (set before any test module imports torch; the workers inherit it).
os.environ.setdefault("OMP_NUM_THREADS", "1")

_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)


#: Names that make a test file share one expensive session-wide object with other files: the session fixture
#: ``checkpointed_run`` (below) and ``engine_jobs``, whose functions cache the 4-process exactness job.
_SESSION_SHARED = ("checkpointed_run", "engine_jobs")
#: Tests that need nothing made for their file's other tests and each run for minutes: xdist may give them to
#: different workers (node id prefixes).
_INDEPENDENT = ("tests/examples/test_docs_commands.py::test_the_commands_of_an_example_run_as_written[",)


@lru_cache(maxsize=None)
def _scope_of_file(path: str) -> str:
    """The worker group of a test file: the session-shared names it uses, else the file itself."""
    try:
        text = (Path(_REPO) / path).read_text()
    except OSError:
        return path
    shared = [name for name in _SESSION_SHARED if name in text]
    return "+".join(shared) or path


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    """On a cold numba cache, compile every kernel once before any test (and before xdist starts its workers:
    its own hook runs last), rather than in every process that reaches a kernel first
    (``tests/kernel_workload.py``). Only in the process that runs an xdist session (not in a worker; one process
    compiles only what its tests reach, and compiles it once)."""
    if hasattr(session.config, "workerinput") or not getattr(session.config.option, "numprocesses", 0):
        return
    if os.environ.get("NUMBA_DISABLE_JIT") == "1":
        return
    import kernel_workload
    from fixtures import EVENT1

    if kernel_workload.cache_is_cold(Path(_REPO)):
        line = kernel_workload.warm(Path(_REPO), EVENT1)
        session.config.get_terminal_writer().line(line)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``make test``'s two pytest-xdist workers: a whole test file goes to one worker, so its module fixtures are
    made once; files that use the same session-wide object (:data:`_SESSION_SHARED`) go to the same worker, so it
    is made once too; the long :data:`_INDEPENDENT` tests spread over the workers. Another ``--dist`` than the
    default is xdist's own."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(_INDEPENDENT):
                return nodeid
            return _scope_of_file(nodeid.split("::", 1)[0])

    return FileGroupScheduling(config, log)


@pytest.fixture(scope="session")
def checkpointed_run(tmp_path_factory) -> Path:
    """A finished 6-step run (3 events, 2 epochs) with a checkpoint at every step, trained once for every test
    that reads one (``<root>/graphs``, ``<root>/run``; see ``fixtures.checkpointed_run_config``). Read-only:
    a test that resumes or edits it works on a copy."""
    from domainpar.train.run import train
    from fixtures import checkpointed_run_config, write_graphs

    root = tmp_path_factory.mktemp("checkpointed_run")
    write_graphs(root / "graphs", 3)
    train(checkpointed_run_config(root / "graphs", root / "run"))
    return root


"""Pytest configuration shared by the whole test tree (fixtures live in ``fixtures.py`` beside this file).

pytest's default import mode puts this directory on ``sys.path``, so test
modules anywhere below it import ``fixtures``; the repository root goes on it
too, for the ``bench`` package (a top-level directory, not part of the
installed ``domainpar``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)


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


"""Pytest configuration shared by the whole test tree (fixtures live in ``fixtures.py`` beside this file).

pytest's default import mode puts this directory on ``sys.path``, so test
modules anywhere below it import ``fixtures``; the repository root goes on it
too, for the ``bench`` package (a top-level directory, not part of the
installed ``domainpar``).
"""

from __future__ import annotations

import sys
from pathlib import Path

_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

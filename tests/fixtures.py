"""Shared test fixtures: where the test data is, and small synthetic graphs and checkpoints.

``tests/conftest.py`` puts this directory on ``sys.path`` (pytest's default
import mode), so any test module can ``from fixtures import ...``.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The repository's root.
REPO = Path(__file__).resolve().parent.parent
#: The real labelled TrackML event 000000001 shipped with the tests (see its README).
TRACKML_DIR = REPO / "tests" / "data" / "trackml"
#: Prefix of that event's files.
EVENT1 = TRACKML_DIR / "event000000001"
#: Real full-occupancy data outside the repository (event 21000): $DOMAINPAR_TRACKML_DIR, else ../shared/data/trackml.
SHARED_TRACKML = Path(os.environ.get("DOMAINPAR_TRACKML_DIR", REPO.parent / "shared" / "data" / "trackml"))
#: Prefix of the full real event, present only where SHARED_TRACKML is.
FULL_EVENT = SHARED_TRACKML / "event000021000"

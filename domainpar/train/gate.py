"""A verdict the launching process hands to the ranks it spawned: they wait for it before their first step.

The launcher of ``--ranks`` runs the locality check (:mod:`domainpar.train.locality`) in a thread while its
ranks start (importing torch, joining the group, loading their first parts: seconds, in which the launcher
would only wait), so the check costs the run nothing when it is shorter than that. The ranks must not train
before the verdict: the launcher writes it to a file in a private directory (atomically: the file is whole
or absent), and every rank waits for the file before its first step. A refusal is read by every rank and
raised as :class:`GateRefused`; the launcher, which knows the line, reports it once.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from domainpar.errors import DomainparError

#: The verdict's file in the gate directory.
VERDICT = "verdict.json"
#: Seconds between a waiting rank's looks at the directory.
POLL_S = 0.01


class GateRefused(DomainparError):
    """The launcher's check refused the run (its line); the ranks stop before their first step."""


def write_verdict(directory: str | os.PathLike, refused: str | None) -> None:
    """Open the gate (``refused`` None) or close it with the refusal's line."""
    directory = Path(directory)
    partial = directory / f".{VERDICT}.{os.getpid()}"
    partial.write_text(json.dumps({"refused": refused}))
    os.replace(partial, directory / VERDICT)


def wait_at_gate(directory: str | os.PathLike) -> float:
    """Wait until the launcher's verdict is written; return the seconds waited.

    The launcher always writes one (its check's outcome, or the line of the check's own failure); a rank
    outlives its launcher by a second at most (:mod:`domainpar.launch.lifeline`), so this wait needs no limit.

    Raises:
        GateRefused: the launcher refused the run.
    """
    path = Path(directory) / VERDICT
    start = time.perf_counter()
    while not path.is_file():
        time.sleep(POLL_S)
    refused = json.loads(path.read_text())["refused"]
    if refused is not None:
        raise GateRefused(refused)
    return time.perf_counter() - start


__all__ = ["GateRefused", "POLL_S", "VERDICT", "wait_at_gate", "write_verdict"]

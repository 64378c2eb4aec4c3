"""numba's on-disk cache serves every kernel to a second process: it starts its first event compiling nothing.

A process runs a workload that calls every numba kernel of the package the way an event's chain does
(``tests/kernel_workload.py``: graph build with triplet and cluster features, the fused row kernels of the model
forward and backward for every activation, segment reductions, walk-through, track fits); a second process with the same cache directory
runs it again and records numba's compile events. Before the fix, the row kernels (``kernels/rownorm``)
took the activation as a first-class function argument, whose type is keyed by the dispatcher object's
identity in the compiling process: their cache never hit, and every process compiled them again (5–15 s each).
"""

from __future__ import annotations

import json
import subprocess

import kernel_workload
import pytest

from fixtures import EVENT1, REPO

pytestmark = pytest.mark.slow


def _run() -> dict:
    process = kernel_workload.start(REPO, EVENT1, "all", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = process.communicate(timeout=900)
    assert process.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def test_a_second_process_compiles_no_kernel():
    """numba's own cache, where every process of a user finds it (beside the sources). The first process compiles
    what no earlier process of the suite has cached (on a cold cache: every kernel, ~180 CPU s; the suite warms
    the cache first, ``tests/kernel_workload.py``) and must reach the row kernels, segment reductions and track
    builders; the second must compile none of them."""
    first = _run()
    for family in ("rownorm", "segments", "track_ckf", "track_fit"):  # the workload reaches them
        assert any(name.startswith(f"domainpar.kernels.{family}.") for name in first["reached"]), (family, first)
    second = _run()
    assert second["compiled"] == [], f"compiled again in a second process: {second['compiled']}"
    assert second["reached"] == first["reached"]

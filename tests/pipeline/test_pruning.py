"""The recipe's pruning item imports what it runs, not the recipe: each spawned worker of its pool imports it."""

from __future__ import annotations

import subprocess
import sys

from fixtures import REPO


def test_a_pruning_worker_does_not_import_the_recipe():
    # What a spawned worker loads to run pruning.pruned_graph: the build and the filter, not the evaluation, the
    # training or the track builders behind domainpar.pipeline.physics (~2.5 s of a core for each worker).
    code = (
        "import sys, domainpar.pipeline.pruning\n"
        "heavy = [m for m in ('domainpar.pipeline.physics', 'domainpar.inference.evaluation', 'domainpar.train.run',"
        " 'domainpar.tracks.candidates') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr

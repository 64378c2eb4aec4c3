"""Kill one rank of a domain-parallel run, resume: the weights equal an uninterrupted run's, bit for bit (CPU).

Rank 0 is the victim: it writes the checkpoints, so the kill may land in the
middle of a write (checkpoints every 2 steps). The job must end naming it; the
resumed job must pick the newest complete checkpoint (chosen by rank 0 and
verified by digest on every rank) and finish exactly where the uninterrupted
run did.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from bench.common.jobs import error_lines, start, train_args
from domainpar.train.checkpoint import checkpoint_files

from fixtures import write_graphs

pytestmark = pytest.mark.distributed

FLAGS = ("--epochs", "4", "--checkpoint-every", "2", "--keep", "3", "--lr", "0.01", "--warmup", "2", "--seed", "3")
TOTAL_STEPS = 16  # 4 events, one per step, 4 epochs


def _run(data, out, *extra) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "domainpar", "train", "--ranks", "2", *train_args(data, out, *FLAGS, *extra)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"})


def _steps(out) -> list[dict]:
    return [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_killed_rank_then_resume_is_bitwise_the_uninterrupted_run(tmp_path):
    data = tmp_path / "graphs"
    write_graphs(data, 4)
    reference = _run(data, tmp_path / "reference")
    assert reference.returncode == 0, reference.stderr

    out = tmp_path / "killed"
    job = start("spawn", 2, data, out, *FLAGS)
    try:
        job.wait_for_ranks(2)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            files = checkpoint_files(out / "checkpoints")
            if files and int(files[-1].stem.split("-")[1]) >= 4:
                break
            job._check_alive()
            time.sleep(0.01)
        os.kill(job.ranks()[0], signal.SIGKILL)
        (output,) = job.finish(90)
    finally:
        job.kill_all()
    assert error_lines(output) == ["error: rank 0 of 2 died (killed by SIGKILL)"], output
    last = int(checkpoint_files(out / "checkpoints")[-1].stem.split("-")[1])
    assert 4 <= last < TOTAL_STEPS, "the run ended before it could be killed"

    resumed = _run(data, out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    ours = torch.load(out / "model.pt", weights_only=True)["model"]
    theirs = torch.load(tmp_path / "reference" / "model.pt", weights_only=True)["model"]
    assert ours.keys() == theirs.keys()
    for name in theirs:
        assert torch.equal(ours[name], theirs[name]), name
    # Every step of the resumed history (logged before and after the kill) is the uninterrupted one's.
    steps, reference_steps = _steps(out), _steps(tmp_path / "reference")
    assert [s["step"] for s in steps] == list(range(1, TOTAL_STEPS + 1))
    assert [(s["loss"], s["grad_norm"]) for s in steps] == [(s["loss"], s["grad_norm"]) for s in reference_steps]

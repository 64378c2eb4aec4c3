"""Exact resume: a training process killed with SIGKILL and resumed ends with the weights of an
uninterrupted run (bitwise on CPU), also when resumed on a different number of ranks (to float64
round-off); corrupted checkpoints are refused with a clear error."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from domainpar.errors import DomainparError
from domainpar.train.checkpoint import checkpoint_files
from domainpar.train.config import load_config
from domainpar.train.run import train
from fixtures import write_graphs

EPOCHS = 10
NUM_EVENTS = 6
TOTAL_STEPS = EPOCHS * NUM_EVENTS
FLAGS = {
    "mode": "single",
    "epochs": EPOCHS,
    "batch-events": 1,
    "checkpoint-every": 4,
    "keep": 2,
    "precision": "fp64",
    "threads": 1,
    "hidden": 16,
    "iterations": 2,
    "lr": 0.01,
    "warmup": 3,
    "seed": 7,
}


def _config(data: Path, val: Path, out: Path, **overrides):
    values = {
        "data.train": str(data),
        "data.val": str(val),
        "run.out": str(out),
        "parallel.mode": "single",
        "run.epochs": EPOCHS,
        "optim.batch_events": 1,
        "run.checkpoint_every": 4,
        "run.keep": 2,
        "run.precision": "fp64",
        "parallel.threads": 1,
        "model.hidden": 16,
        "model.num_iterations": 2,
        "optim.lr": 0.01,
        "optim.warmup": 3,
        "run.seed": 7,
        "run.progress": False,
        "run.curves": False,
        **overrides,
    }
    return load_config(None, values)


def _weights(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(out / "model.pt", weights_only=True)["model"]


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_kill_and_resume_is_exact(tmp_path):
    data, val = tmp_path / "graphs", tmp_path / "val"
    write_graphs(data, NUM_EVENTS)
    write_graphs(val, 1, first_id=100, seed=5)
    reference = train(_config(data, val, tmp_path / "reference"))
    assert reference["steps"] == TOTAL_STEPS

    killed = tmp_path / "killed"
    command = [sys.executable, "-m", "domainpar", "train", "--data", str(data), "--val", str(val), "--out", str(killed),
               "--no-progress", "--no-curves"]
    for flag, value in FLAGS.items():
        command += [f"--{flag}", str(value)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 200
    try:
        while time.monotonic() < deadline and process.poll() is None:
            files = checkpoint_files(killed / "checkpoints")
            if files and int(files[-1].stem.split("-")[1]) >= 8:
                break
            time.sleep(0.005)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait()
        stderr = process.stderr.read().decode()
        process.stderr.close()
    assert process.returncode == -signal.SIGKILL, f"the run ended before it could be killed:\n{stderr}"
    last = int(checkpoint_files(killed / "checkpoints")[-1].stem.split("-")[1])
    assert 8 <= last < TOTAL_STEPS
    other_ranks = tmp_path / "other_ranks"
    shutil.copytree(killed, other_ranks)

    resumed = train(_config(data, val, killed, **{"run.resume": True}))
    assert resumed["steps"] == TOTAL_STEPS and 0 < resumed["steps_this_run"] <= TOTAL_STEPS - last
    ours, theirs = _weights(killed), _weights(tmp_path / "reference")
    for name in theirs:
        assert torch.equal(ours[name], theirs[name]), name
    assert resumed["step_losses"] == reference["step_losses"]
    resumed_records, reference_records = _records(killed), _records(tmp_path / "reference")
    assert [r["epoch"] for r in resumed_records] == list(range(1, EPOCHS + 1))
    for a, b in zip(resumed_records, reference_records):
        assert (a["train_loss"], a["val_loss"], a["auc"]) == (b["train_loss"], b["val_loss"], b["auc"])

    # The plans are made per event, not stored in the checkpoint: 2 ranks can continue a 1-rank run.
    resumed = train(_config(data, val, other_ranks, **{"run.resume": True, "parallel.mode": "domain", "parallel.ranks": 2}))
    assert resumed["steps"] == TOTAL_STEPS and resumed["world_size"] == 2
    ours = _weights(other_ranks)
    for name in theirs:
        torch.testing.assert_close(ours[name], theirs[name], rtol=1e-10, atol=1e-10, msg=name)


@pytest.mark.timeout(120)
def test_resume_from_corrupted_checkpoint_is_a_clear_error(tmp_path):
    data = tmp_path / "graphs"
    write_graphs(data, 2)
    out = tmp_path / "out"
    train(_config(data, data, out, **{"run.epochs": 3}))  # 6 steps: checkpoints at steps 4 and 6
    older, latest = checkpoint_files(out / "checkpoints")
    latest.write_bytes(latest.read_bytes()[: latest.stat().st_size // 3])
    with pytest.raises(DomainparError, match=rf"{latest.name}: expected a domainpar checkpoint, could not load it"):
        train(_config(data, data, out, **{"run.resume": True}))
    with pytest.raises(DomainparError, match=r"resuming needs the same --batch-events as the checkpoint \(1, got 2\)"):
        train(_config(data, data, out, **{"run.resume_from": str(older), "optim.batch_events": 2}))

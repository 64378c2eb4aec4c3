"""Exact resume: a training process killed with SIGKILL and resumed ends with the weights of an
uninterrupted run (bitwise on CPU), also when resumed on a different number of ranks (to float64
round-off); corrupted checkpoints are refused with a clear error.

The reference and the resumed run train in this process, the killed run in a fresh one: whatever
state a process carries between runs (numba's thread pool once reset torch's thread count in the
process that started it first) must not change a result.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from domainpar.errors import DomainparError
from domainpar.train.checkpoint import checkpoint_files, checkpoint_step
from domainpar.train.config import load_config
from domainpar.train.run import train
from fixtures import write_graphs

EPOCHS = 10
NUM_EVENTS = 6
TOTAL_STEPS = EPOCHS * NUM_EVENTS
#: The killed run is killed once its newest checkpoint is at least this step (mid-epoch: 6 steps per epoch).
KILL_AFTER_STEP = 8
#: How long the killed run may take to write that checkpoint (process start included) on a slow, loaded machine.
KILL_WITHIN_S = 300
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
@pytest.mark.timeout(600)
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
    # Killed when a checkpoint appears, not after a delay: the same moment on a fast or a loaded machine. The run
    # is niced, so this polling process gets the CPU first and the kill lands long before the run's last step.
    niced = ["nice", "-n", "10"] if shutil.which("nice") else []
    with open(tmp_path / "killed.stderr", "wb") as stderr_file:
        process = subprocess.Popen(niced + command, stdout=subprocess.DEVNULL, stderr=stderr_file)
        deadline = time.monotonic() + KILL_WITHIN_S
        try:
            while time.monotonic() < deadline and process.poll() is None:
                files = checkpoint_files(killed / "checkpoints")
                if files and checkpoint_step(files[-1]) >= KILL_AFTER_STEP:
                    break
                time.sleep(0.005)
        finally:
            process.kill()  # SIGKILL; nothing if the run has ended
            process.wait()
    stderr = (tmp_path / "killed.stderr").read_text(errors="replace")
    assert process.returncode == -signal.SIGKILL, f"the run ended (status {process.returncode}) before it could be killed:\n{stderr}"
    files = checkpoint_files(killed / "checkpoints")
    last = checkpoint_step(files[-1]) if files else None
    assert last is not None and KILL_AFTER_STEP <= last < TOTAL_STEPS, (
        f"killed with newest checkpoint {last}, expected one of steps {KILL_AFTER_STEP}..{TOTAL_STEPS - 1} "
        f"(within {KILL_WITHIN_S} s):\n{stderr}"
    )
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
    with pytest.raises(DomainparError, match=r"a resume continues the run that wrote this checkpoint, but --batch-events is 2 here and 1 in the checkpoint"):
        train(_config(data, data, out, **{"run.resume_from": str(older), "optim.batch_events": 2}))


@pytest.mark.timeout(300)
def test_a_pause_keeps_the_schedule_and_resumes_exactly(tmp_path):
    """--stop-after-steps is a pause: the cosine schedule still spans the whole run, so pausing and resuming gives
    the uninterrupted run's learning rates and weights bitwise; --max-steps is a shorter run, and a resume that
    would change the schedule's length is refused (it used to reach 0 at the cut and jump back on resume)."""
    data = tmp_path / "graphs"
    write_graphs(data, 2)
    settings = {"run.epochs": 3, "run.checkpoint_every": 0, "optim.warmup": 1}
    whole = train(_config(data, data, tmp_path / "whole", **settings))
    paused_out = tmp_path / "paused"
    paused = train(_config(data, data, paused_out, **settings, **{"run.stop_after_steps": 3}))
    assert paused["paused"] and paused["steps"] == 3 and paused["model"] is None and not (paused_out / "model.pt").exists()
    resumed = train(_config(data, data, paused_out, **settings, **{"run.resume": True}))
    assert resumed["steps"] == whole["steps"] == 6 and resumed["steps_this_run"] == 3
    rates = lambda out: [json.loads(line)["lr"] for line in (out / "steps.jsonl").read_text().splitlines()]  # noqa: E731
    assert rates(paused_out) == rates(tmp_path / "whole") and rates(paused_out)[3] > 0  # no drop to 0 at the pause
    ours, theirs = _weights(paused_out), _weights(tmp_path / "whole")
    for name in theirs:
        assert torch.equal(ours[name], theirs[name]), name
    assert [r["epoch"] for r in _records(paused_out)] == [1, 2, 3]
    # A run shortened by --max-steps ends its schedule there: continuing it past the cut is refused, not reshaped.
    short = tmp_path / "short"
    train(_config(data, data, short, **settings, **{"run.max_steps": 3}))
    assert rates(short)[-1] == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(DomainparError, match=r"its cosine learning-rate schedule spans 3 steps \(--epochs 3, --max-steps 3\) and "
                                             r"this run's would span 6 \(--epochs 3\), so the rate would jump at step 3"):
        train(_config(data, data, short, **settings, **{"run.resume": True}))

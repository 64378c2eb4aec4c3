"""Rank 0 alone chooses the checkpoint a run resumes from; every other rank loads that file and checks its digest.

Simulated in spawned ranks: rank 1 is not allowed to list ``checkpoints/``
(a file system that shows new files late would make it choose another
step), and, in the second case, its file system shows it another file under
the path rank 0 chose.
"""

from __future__ import annotations

import pytest

from domainpar.train import state as state_module
from domainpar.train import trainer as trainer_module
from domainpar.train.checkpoint import checkpoint_files
from domainpar.train.config import load_config
from domainpar.train.launch import SpawnError, spawn
from domainpar.train.run import prepare_payload, train
from fixtures import write_graphs

pytestmark = pytest.mark.distributed


def _rank_with_its_own_file_system(rank: int, world_size: int, payload: dict, shown_instead: str | None):
    if rank != 0:
        def listing(*args, **kwargs):
            raise AssertionError(f"rank {rank} listed checkpoints/ itself")

        state_module.latest_checkpoint = listing
        if shown_instead is not None:
            real = state_module.load_checkpoint

            def other_file(path, expected_digest=None, **kwargs):
                return real(shown_instead, expected_digest, **kwargs)

            state_module.load_checkpoint = other_file
    return trainer_module.run_rank(rank, world_size, payload)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume_agreement")
    write_graphs(root / "graphs", 2)
    # A constant schedule: the resume may add an epoch (a cosine schedule's length must stay the checkpoint's).
    values = {"data.train": str(root / "graphs"), "parallel.mode": "single", "run.epochs": 2, "run.checkpoint_every": 1,
              "optim.schedule": "constant", "run.keep": 4, "model.hidden": 8, "model.num_iterations": 1, "run.progress": False, "run.curves": False,
              "parallel.threads": 1}
    out = root / "out"
    train(load_config(None, {**values, "run.out": str(out)}))  # 4 steps: checkpoints 1, 2, 3, 4
    resume = load_config(None, {**values, "run.out": str(out), "run.epochs": 3, "run.resume": True,
                                "parallel.mode": "domain", "parallel.ranks": 2})
    return out, resume


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_rank_resumes_from_rank_0s_choice(checkpoints):
    out, resume = checkpoints
    newest = checkpoint_files(out / "checkpoints")[-1]
    assert newest.name == "step-00000004.pt"
    summaries = spawn(_rank_with_its_own_file_system, 2, args=(prepare_payload(resume, 2), None), timeout_s=240,
                      num_threads=1)
    assert [s["steps"] for s in summaries] == [6, 6]
    assert [s["steps_this_run"] for s in summaries] == [2, 2]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_rank_shown_another_file_refuses_it(checkpoints):
    out, resume = checkpoints
    older = checkpoint_files(out / "checkpoints")[0]
    with pytest.raises(SpawnError) as info:
        spawn(_rank_with_its_own_file_system, 2, args=(prepare_payload(resume, 2), str(older)), timeout_s=240,
              num_threads=1)
    failure = info.value.failure
    assert failure.rank == 1 and failure.user_error
    assert "this rank loaded a checkpoint with sha256" in failure.message
    assert "the ranks see different files" in failure.message
    assert info.value.line.startswith("rank 1 of 2: ")

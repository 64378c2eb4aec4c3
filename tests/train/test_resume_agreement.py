"""Rank 0 alone chooses the checkpoint a run resumes from; every other rank loads that file and checks its digest.

Simulated in spawned ranks: rank 1 is not allowed to list ``checkpoints/``
(a file system that shows new files late would make it choose another
step), and, in the second case, its file system shows it another file under
the path rank 0 chose.
"""

from __future__ import annotations

import shutil

import pytest

from domainpar.launch.ranks import SpawnError, spawn
from domainpar.train import state as state_module
from domainpar.train import trainer as trainer_module
from domainpar.train.checkpoint import checkpoint_files
from domainpar.train.run import prepare_payload

from fixtures import checkpointed_run_config

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
def checkpoints(checkpointed_run, tmp_path_factory):
    """A copy of the shared 6-step run (3 events, 2 epochs: checkpoints 1 ... 6), to be resumed for a third epoch
    on 2 ranks."""
    out = tmp_path_factory.mktemp("resume_agreement") / "out"
    shutil.copytree(checkpointed_run / "run", out)
    resume = checkpointed_run_config(checkpointed_run / "graphs", out, **{"run.epochs": 3, "run.resume": True,
                                                                          "parallel.mode": "domain", "parallel.ranks": 2})
    return out, resume


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_rank_resumes_from_rank_0s_choice(checkpoints):
    out, resume = checkpoints
    newest = checkpoint_files(out / "checkpoints")[-1]
    assert newest.name == "step-00000006.pt"
    summaries = spawn(_rank_with_its_own_file_system, 2, args=(prepare_payload(resume, 2), None), timeout_s=240,
                      num_threads=1)
    assert [s["steps"] for s in summaries] == [9, 9]
    assert [s["steps_this_run"] for s in summaries] == [3, 3]


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

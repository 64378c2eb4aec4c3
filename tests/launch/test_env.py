"""Which launcher started a process: a torchrun worker or an srun task joins, an sbatch batch script does not."""

from __future__ import annotations

import pytest

from domainpar.errors import DomainparError
from domainpar.launch.ranks import init_from_env
from domainpar.launch.env import detect, first_host, rendezvous_port, slurm_rendezvous

#: What the batch script of `sbatch --nodes=2 --ntasks=8` sees: the allocation, and no step id.
BATCH_STEP = {
    "SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2", "SLURM_NTASKS": "8", "SLURM_NPROCS": "8",
    "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "gpu-a[001-002]",
}  # fmt: skip


def srun_task(rank: int, tasks: int = 8, step: str = "0") -> dict[str, str]:
    """What `srun` gives task ``rank`` of a step of ``tasks`` tasks, 4 per node, inside that allocation."""
    return {
        **BATCH_STEP, "SLURM_STEP_ID": step, "SLURM_STEPID": step, "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank % 4),
        "SLURM_NTASKS": str(tasks), "SLURM_STEP_NUM_TASKS": str(tasks), "SLURM_STEP_NODELIST": "gpu-a[001-002]",
    }  # fmt: skip


def test_the_batch_script_of_sbatch_is_no_rank():
    launcher = detect(BATCH_STEP)
    assert launcher.kind == "none" and not launcher.joins
    assert (launcher.rank, launcher.world_size, launcher.slurm_job, launcher.slurm_nodes) == (0, 1, "4242", 2)
    assert "Slurm job 4242" in launcher.describe()


@pytest.mark.parametrize("step, name", [("4294967291", "batch"), ("-5", "batch"), ("4294967290", "interactive")])
def test_slurm_special_steps_are_no_srun_steps(step, name):
    """Slurm's batch and interactive (salloc) steps, printed as unsigned or (older Slurm) signed ids."""
    launcher = detect({**BATCH_STEP, "SLURM_STEP_ID": step})
    assert not launcher.joins and launcher.slurm_step == name


def test_an_srun_task_joins_with_the_step_world():
    launcher = detect(srun_task(5))
    assert launcher.kind == "srun" and launcher.joins
    assert (launcher.rank, launcher.world_size, launcher.local_rank, launcher.slurm_step) == (5, 8, 1, "0")
    assert launcher.describe() == "task 5 of srun step 4242.0 (8 tasks)"


def test_srun_inside_salloc_joins_too():
    """salloc gives the shell SLURM_JOB_ID but no step; srun from that shell starts step 0, 1, ..."""
    salloc_shell = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NNODES": "2"}
    assert not detect(salloc_shell).joins
    task = {**salloc_shell, "SLURM_STEP_ID": "3", "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"}
    launcher = detect(task)
    assert launcher.kind == "srun" and (launcher.rank, launcher.world_size, launcher.slurm_step) == (1, 2, "3")


def test_a_one_task_srun_step_is_one_process():
    """`srun -n 1 domainpar train --ranks 4` has nothing to join: its --ranks spawn local ranks."""
    assert not detect(srun_task(0, tasks=1)).joins


def test_torchrun_variables_win_over_the_srun_task_that_started_torchrun():
    env = {**srun_task(0, tasks=1), "RANK": "6", "WORLD_SIZE": "8", "LOCAL_RANK": "2", "TORCHELASTIC_RUN_ID": "4242"}
    launcher = detect(env)
    assert launcher.kind == "torchrun" and (launcher.rank, launcher.world_size, launcher.local_rank) == (6, 8, 2)
    assert detect({"RANK": "1", "WORLD_SIZE": "2"}).kind == "env"


def test_a_launcher_variable_that_is_no_integer_is_named():
    with pytest.raises(DomainparError, match=r"environment variable SLURM_PROCID must be an integer \(got 'x'\)"):
        detect({**srun_task(0), "SLURM_PROCID": "x"})
    with pytest.raises(DomainparError, match=r"environment variable SLURM_STEP_ID must be an integer"):
        detect({**BATCH_STEP, "SLURM_STEP_ID": "batch"})


@pytest.mark.parametrize(
    "nodelist, host",
    [("gpu-a[001-002]", "gpu-a001"), ("node7", "node7"), ("n[3,5-9],m1", "n3"), ("c1,c2", "c1"), ("r[2-3]n[010-011]", "r2n010")],
)
def test_first_host_of_a_slurm_node_list(nodelist, host):
    assert first_host(nodelist) == host


def test_first_host_refuses_what_is_no_node_list():
    with pytest.raises(DomainparError, match="Slurm node list"):
        first_host("")


def test_an_srun_step_without_master_addr_meets_on_its_first_host():
    env = srun_task(3)
    launcher = detect(env)
    address, port = slurm_rendezvous(launcher, env)
    assert address == "gpu-a001" and port == str(rendezvous_port(4242, 0))
    assert 20000 <= int(port) < 30000
    # Every task derives the same address; another step of the job another port.
    assert slurm_rendezvous(detect(srun_task(7)), srun_task(7)) == (address, port)
    assert slurm_rendezvous(detect(srun_task(0, step="1")), srun_task(0, step="1"))[1] != port
    # What the script exported wins.
    exported = {**env, "MASTER_ADDR": "head", "MASTER_PORT": "12345"}
    assert slurm_rendezvous(launcher, exported) == ("head", "12345")


def test_init_from_env_in_a_batch_script_names_slurm_and_what_to_run(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_STEP_ID", "SLURM_STEPID", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in BATCH_STEP.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(DomainparError, match=r"batch script|outside any srun step") as info:
        init_from_env(10)
    message = str(info.value)
    assert "Slurm job 4242" in message and "srun" in message and "--ranks" in message
    assert "MASTER_ADDR" not in message

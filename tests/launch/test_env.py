"""Which launcher started a process: a torchrun worker or an srun task joins, an sbatch batch script does not."""

from __future__ import annotations

import socket
import time

import pytest

from domainpar.errors import DomainparError, MachineFault
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


@pytest.mark.parametrize(
    "env, named",
    [
        ({"RANK": "5", "WORLD_SIZE": "2"}, r"RANK must be between 0 and WORLD_SIZE-1 = 1 \(got 5\)"),
        ({"RANK": "-1", "WORLD_SIZE": "2"}, r"RANK must be between 0 and WORLD_SIZE-1 = 1 \(got -1\)"),
        ({"RANK": "0", "WORLD_SIZE": "0"}, r"WORLD_SIZE must be at least 1 \(got 0\)"),
        ({"RANK": "0", "WORLD_SIZE": "-3"}, r"WORLD_SIZE must be at least 1 \(got -3\)"),
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "-2"}, r"LOCAL_RANK must be at least 0 \(got -2\)"),
        ({**srun_task(8)}, r"SLURM_PROCID must be between 0 and SLURM_STEP_NUM_TASKS-1 = 7 \(got 8\)"),
        ({**srun_task(3), "SLURM_LOCALID": "-1"}, r"SLURM_LOCALID must be at least 0 \(got -1\)"),
    ],
)
def test_a_rank_that_cannot_be_in_its_job_is_named(env, named):
    # A stale export (RANK=5 of 2) used to reach the rendezvous and wait there for the timeout.
    with pytest.raises(DomainparError, match=rf"^environment variable {named}$"):
        detect(env)


def test_the_edges_of_the_rank_ranges_are_jobs():
    assert detect({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}).rank == 1
    assert detect({"RANK": "0", "WORLD_SIZE": "1"}).world_size == 1
    # A one-process job may pin a GPU by its local rank (tests/launch/test_ranks.py does).
    assert detect({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "2"}).local_rank == 2
    assert detect(srun_task(7)).rank == 7


def _as_a_job_rank(monkeypatch) -> None:
    """init_from_env in this test process without what it does to a launched rank's process (parent-death signal,
    process name)."""
    from domainpar.launch import ranks

    monkeypatch.setattr(ranks, "die_with_parent", lambda *args: None)
    monkeypatch.setattr(ranks, "name_process", lambda *args: None)


@pytest.mark.parametrize(
    "address, port, named",
    [
        ("127.0.0.1", "99999", r"MASTER_PORT must be a TCP port number 1\.\.65535 .* \(got '99999'\)"),
        ("127.0.0.1", "0", r"MASTER_PORT must be a TCP port number 1\.\.65535 .* \(got '0'\)"),
        ("127.0.0.1", "http", r"MASTER_PORT must be a TCP port number 1\.\.65535 .* \(got 'http'\)"),
        ("no-such-host.invalid", "29500", r"MASTER_ADDR must name a host this machine can resolve .* \(got 'no-such-host\.invalid'"),
    ],
)
def test_a_rendezvous_that_cannot_be_reached_is_named_before_the_wait(monkeypatch, address, port, named):
    _as_a_job_rank(monkeypatch)
    for name in ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_STEPID", "TORCHELASTIC_RUN_ID", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", address)
    monkeypatch.setenv("MASTER_PORT", port)
    started = time.monotonic()
    with pytest.raises(DomainparError, match=named):
        init_from_env(600, device="cpu", watchdog=None)
    assert time.monotonic() - started < 30  # not the 600 s timeout


@pytest.mark.timeout(120)
def test_a_rank_whose_rank_0_never_comes_is_a_machine_fault_within_the_timeout(monkeypatch):
    import torch.distributed as dist

    _as_a_job_rank(monkeypatch)
    for name in ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_STEPID", "TORCHELASTIC_RUN_ID", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    with pytest.raises(MachineFault) as info:
        init_from_env(2, device="cpu", watchdog=None)
    assert not dist.is_initialized()
    message = str(info.value)
    assert message.startswith(f"rank 1 of 2 (RANK/WORLD_SIZE set in the environment): no rendezvous at 127.0.0.1:{port} (")
    assert "check that rank 0 runs on 127.0.0.1" in message and "\n" not in message

"""The spawn harness: results in rank order, child failures and hangs surface with the rank."""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

from domainpar.errors import DomainparError
from bench.common.jobs import free_port
from domainpar.launch.ranks import SpawnError, backend_for, device_for_local_rank, init_from_env, spawn

pytestmark = pytest.mark.distributed


def _fail_on_rank_one(rank: int, world_size: int, message: str) -> int:
    dist.barrier()
    if rank == 1:
        raise ValueError(message)
    time.sleep(60)  # must be terminated by spawn, not waited for
    return rank


def _hang_on_rank_one(rank: int, world_size: int) -> int:
    if rank == 1:
        time.sleep(600)
    return rank


def _rank_and_world(rank: int, world_size: int, tag: str) -> tuple:
    return (rank, world_size, dist.get_rank(), dist.get_world_size(), dist.get_backend(), tag)


@pytest.mark.timeout(120)
def test_child_exception_names_rank_and_carries_traceback():
    start = time.monotonic()
    with pytest.raises(SpawnError, match="rank 1 of 2 failed") as info:
        spawn(_fail_on_rank_one, 2, args=("boom from the child",), timeout_s=100)
    assert info.value.ranks == [1]
    assert "ValueError: boom from the child" in info.value.traceback_text
    assert "_fail_on_rank_one" in str(info.value)
    assert time.monotonic() - start < 55  # rank 0 was terminated, not awaited


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_hung_child_is_killed_at_timeout():
    with pytest.raises(SpawnError, match="did not finish within 12 s") as info:
        spawn(_hang_on_rank_one, 2, timeout_s=12)
    assert 1 in info.value.ranks


def test_backend_and_device_helpers():
    assert backend_for("cpu") == "gloo" and backend_for("cuda:0") == "cpu:gloo,cuda:nccl"
    assert device_for_local_rank(0).type in ("cpu", "cuda")
    assert device_for_local_rank(3, "cpu") == torch.device("cpu")


@pytest.mark.parametrize(
    ("visible", "local_rank", "expected"),
    [(4, 0, 0), (4, 3, 3), (4, 5, 1), (1, 0, 0), (1, 3, 0), (2, 7, 1)],  # 1 visible: srun --gpus-per-task=1
)
def test_gpu_of_a_local_rank_is_local_rank_modulo_visible_gpus(monkeypatch, visible, local_rank, expected):
    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    assert device_for_local_rank(local_rank) == torch.device("cuda", expected)
    assert device_for_local_rank(local_rank, "cuda") == torch.device("cuda", expected)
    assert chosen == [expected, expected]
    # --device cpu on a GPU node: CPU tensors, and so gloo, whatever the node has.
    assert device_for_local_rank(local_rank, "cpu") == torch.device("cpu")
    assert backend_for(device_for_local_rank(local_rank, "cpu")) == "gloo"


def test_cuda_requested_without_a_visible_gpu_is_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DomainparError, match="--device cuda: this process sees no CUDA device"):
        device_for_local_rank(0, "cuda")


def test_init_from_env_needs_rank_variables(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(DomainparError, match="RANK and WORLD_SIZE"):
        init_from_env(10)
    monkeypatch.setenv("RANK", "zero")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(DomainparError, match="RANK must be an integer"):
        init_from_env(10)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    if not dist.is_initialized():
        with pytest.raises(DomainparError, match="MASTER_ADDR must be set"):
            init_from_env(10)


def test_spawn_rejects_zero_processes():
    with pytest.raises(DomainparError, match="nprocs must be at least 1"):
        spawn(_rank_and_world, 0)



_ON_A_GPU_NODE = """
import sys, torch, torch.distributed as dist
# A node with 4 GPUs, as torch would see it; no CUDA call is made on the CPU path.
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 4
torch.cuda.set_device = lambda index: None
from domainpar.launch.ranks import init_from_env
env = init_from_env(30, device=sys.argv[1], watchdog=None)
print(env.device, env.backend, dist.get_backend())
dist.destroy_process_group()
"""


@pytest.mark.timeout(120)
def test_device_cpu_under_torchrun_on_a_gpu_node_uses_gloo(tmp_path):
    # `torchrun ... domainpar train --device cpu` on a GPU node used to pick NCCL and fail at the first collective.
    import os
    import subprocess
    import sys

    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}
    done = subprocess.run([sys.executable, "-c", _ON_A_GPU_NODE, "cpu"], env=env, capture_output=True, text=True,
                          timeout=100)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["cpu", "gloo", "gloo"]

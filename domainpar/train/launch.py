"""Starting the processes of a domain-parallel job.

Two ways in:

* :func:`spawn` runs ``fn(rank, world_size, *args)`` in ``nprocs`` freshly
  spawned local processes with the default process group initialised (a
  FileStore rendezvous in a private temp dir, so no port is ever fixed). It is
  what the tests, ``domainpar verify`` and single-node training use. A child
  that raises makes ``spawn`` terminate the others and raise
  :class:`SpawnError` naming the rank, with the child's traceback text; a job
  that outlives ``timeout_s`` is killed and the error names the ranks that had
  not finished.
* :func:`init_from_env` joins a job started by ``torchrun`` or ``srun``.

The backend follows the device: gloo on CPU, NCCL on CUDA with one GPU per
local rank.
"""

from __future__ import annotations

import os
import pickle
import queue
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from domainpar.errors import DomainparError

#: Default seconds before a process group operation, or a whole spawned job, gives up.
DEFAULT_TIMEOUT_S = 300.0


class SpawnError(RuntimeError):
    """A spawned rank failed, died or hung; the message names the rank(s) and carries the traceback."""

    def __init__(self, message: str, ranks: list[int], traceback_text: str = "") -> None:
        super().__init__(message)
        self.ranks = ranks
        """Ranks that failed (or had not finished at the timeout)."""
        self.traceback_text = traceback_text
        """The first failing child's traceback, as text."""


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in a distributed job."""

    rank: int
    """Global rank."""
    world_size: int
    """Number of processes in the job."""
    local_rank: int
    """Rank on this node (selects the GPU)."""
    device: torch.device
    """Device this rank computes on."""
    backend: str
    """Process group backend: "gloo" or "nccl"."""


def device_for_local_rank(local_rank: int) -> torch.device:
    """The device a local rank computes on: GPU ``local_rank`` when CUDA is available, else CPU.

    Also makes that GPU the current device, which NCCL point-to-point requires.
    """
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        if local_rank >= count:
            raise DomainparError(
                f"local rank {local_rank} needs a GPU of its own (got {count} visible GPUs); "
                "start at most one process per GPU"
            )
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def backend_for(device: torch.device | str) -> str:
    """The process group backend for ``device``: "nccl" for CUDA, "gloo" otherwise."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def _env_int(names: tuple[str, ...]) -> int | None:
    for name in names:
        value = os.environ.get(name)
        if value is not None and value != "":
            try:
                return int(value)
            except ValueError:
                raise DomainparError(f"environment variable {name} must be an integer (got {value!r})") from None
    return None


def running_under_launcher() -> bool:
    """True when torchrun/srun variables say this process is one rank of a job."""
    return _env_int(("RANK", "SLURM_PROCID")) is not None and _env_int(("WORLD_SIZE", "SLURM_NTASKS")) is not None


def init_from_env(timeout_s: float = DEFAULT_TIMEOUT_S) -> DistEnv:
    """Initialise the default process group from torchrun or SLURM variables.

    Reads RANK, WORLD_SIZE and LOCAL_RANK (falling back to SLURM_PROCID,
    SLURM_NTASKS and SLURM_LOCALID) and rendezvous at MASTER_ADDR:MASTER_PORT.
    If the default group already exists it is reused.

    Args:
        timeout_s: process group timeout in seconds.

    Returns:
        This process's :class:`DistEnv`.
    """
    rank = _env_int(("RANK", "SLURM_PROCID"))
    world_size = _env_int(("WORLD_SIZE", "SLURM_NTASKS"))
    local_rank = _env_int(("LOCAL_RANK", "SLURM_LOCALID"))
    if rank is None or world_size is None:
        raise DomainparError(
            "RANK and WORLD_SIZE (or SLURM_PROCID and SLURM_NTASKS) must be set to join a distributed job (got neither); "
            "start with torchrun or srun"
        )
    if local_rank is None:
        local_rank = 0
    device = device_for_local_rank(local_rank)
    backend = backend_for(device)
    if not dist.is_initialized():
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if not os.environ.get(name):
                raise DomainparError(f"environment variable {name} must be set for the rendezvous (got nothing)")
        dist.init_process_group(
            backend=backend,
            init_method="env://",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout_s),
        )
    return DistEnv(rank=rank, world_size=world_size, local_rank=local_rank, device=device, backend=backend)


def _child(
    rank: int,
    world_size: int,
    fn: Callable[..., Any],
    args: tuple,
    init_method: str,
    backend: str | None,
    timeout_s: float,
    num_threads: int | None,
    results: Any,
) -> None:
    """Body of one spawned rank: init the group, run ``fn``, report ("ok", value) or ("error", traceback)."""
    try:
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        device = device_for_local_rank(rank) if backend != "gloo" else torch.device("cpu")
        chosen = backend or backend_for(device)
        os.environ.setdefault("LOCAL_RANK", str(rank))
        dist.init_process_group(
            backend=chosen,
            init_method=init_method,
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout_s),
        )
        try:
            value = fn(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
        # Pickle here, not in the queue's feeder thread, so an unpicklable result is reported as this rank's error.
        results.put((rank, "ok", pickle.dumps(value)))
    except BaseException:  # report everything, including KeyboardInterrupt, to the parent
        results.put((rank, "error", traceback.format_exc()))


def _stop(processes: list) -> None:
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + 5.0
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()


def spawn(
    fn: Callable[..., Any],
    nprocs: int,
    args: tuple = (),
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    backend: str | None = None,
    init_method: str | None = None,
    num_threads: int | None = None,
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` in ``nprocs`` spawned processes.

    Args:
        fn: a module-level (picklable) function; its return value must be picklable.
        nprocs: number of processes (world size).
        args: extra positional arguments, pickled to every child.
        timeout_s: wall-clock limit for the whole job and the process group timeout.
        backend: "gloo" or "nccl"; default: nccl when CUDA is available, else gloo.
        init_method: rendezvous URL; default a FileStore in a fresh temp dir.
        num_threads: torch intra-op threads per child (None leaves torch's default).

    Returns:
        ``fn``'s return values in rank order.

    Raises:
        SpawnError: a child raised (others are terminated), died, or the job timed out.
    """
    if nprocs < 1:
        raise DomainparError(f"nprocs must be at least 1 (got {nprocs})")
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    store_dir = None
    if init_method is None:
        store_dir = tempfile.mkdtemp(prefix="domainpar-rdzv-")
        init_method = "file://" + os.path.join(store_dir, "store")
    processes = [
        ctx.Process(
            target=_child,
            args=(rank, nprocs, fn, args, init_method, backend, timeout_s, num_threads, results),
            daemon=False,
        )
        for rank in range(nprocs)
    ]
    values: dict[int, Any] = {}
    try:
        for process in processes:
            process.start()
        deadline = time.monotonic() + timeout_s
        dead_since: dict[int, float] = {}
        while len(values) < nprocs:
            try:
                rank, status, payload = results.get(timeout=0.1)
            except queue.Empty:
                now = time.monotonic()
                for rank_, process in enumerate(processes):
                    if rank_ in values or process.exitcode is None:
                        continue
                    # A finished child's message may still be in the pipe; give it a moment.
                    first = dead_since.setdefault(rank_, now)
                    if now - first > 2.0:
                        _stop(processes)
                        raise SpawnError(
                            f"rank {rank_} of {nprocs} died with exit code {process.exitcode} without reporting",
                            [rank_],
                        )
                if now > deadline:
                    pending = [r for r in range(nprocs) if r not in values]
                    _stop(processes)
                    raise SpawnError(
                        f"ranks {pending} of {nprocs} did not finish within {timeout_s:g} s; all ranks were killed",
                        pending,
                    )
                continue
            if status == "error":
                _stop(processes)
                raise SpawnError(f"rank {rank} of {nprocs} failed:\n{payload}", [rank], payload)
            values[rank] = pickle.loads(payload)
        for process in processes:
            process.join(10.0)
    finally:
        _stop(processes)
        results.close()
        if store_dir is not None:
            shutil.rmtree(store_dir, ignore_errors=True)
    return [values[rank] for rank in range(nprocs)]

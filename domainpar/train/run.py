"""``train(config)``: the programmatic entry point behind ``domainpar train``.

Three ways a run starts:

* under ``torchrun`` or ``srun`` (RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS
  set): this process is one rank; it joins the job and trains;
* ``parallel.ranks > 1`` (domain or sectors mode): this process spawns that
  many local ranks (gloo on CPU, NCCL with one GPU per rank on CUDA) and
  waits; a rank that raises or dies stops the others and the error names it;
* otherwise (single mode, or one rank): training runs in this process.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from domainpar.errors import DomainparError
from domainpar.output_paths import check_output_dir
from domainpar.train.events import check_feature_widths
from domainpar.train.config import TrainConfig, validate_config

#: Wall-clock limit of a spawned job: training may run for days; hangs are bounded by the process-group timeout.
_SPAWN_JOB_LIMIT_S = 30 * 24 * 3600.0


def _device_kind(config: TrainConfig) -> str:
    if config.parallel.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return config.parallel.device


def _prepare_files(config: TrainConfig, progress: bool) -> tuple[list[str], list[str]]:
    from domainpar.train.events import prepare_event_files

    out = config.run.out
    train_files = prepare_event_files(config.data.train, out, "train", progress)
    val_source = config.data.val or config.data.train
    val_files = prepare_event_files(val_source, out, "val" if config.data.val else "train", progress)
    return [str(f) for f in train_files], [str(f) for f in val_files]


def _check_inputs(config: TrainConfig, world_size: int, train_files: list[str], val_files: list[str]) -> None:
    """Refuse, before the run writes anything, graphs of different feature widths and (domain mode reading
    `domainpar partition` output) missing or mis-sized plans; the ranks would fail on them only after the
    run directory has been started."""
    from domainpar.train.config import domain_size_of
    from domainpar.train.events import check_plans

    files = [Path(f) for f in dict.fromkeys(train_files + val_files)]
    if config.optim.batch_events > len(train_files):
        raise DomainparError(
            f"--batch-events {config.optim.batch_events} must be at most the number of training events "
            f"({len(train_files)} in {config.data.train})"
        )
    check_feature_widths(files)
    if config.parallel.mode == "domain" and config.data.plans is not None:
        check_plans(config.data.plans, files, domain_size_of(config, world_size))


def _payload(config: TrainConfig, train_files: list[str], val_files: list[str]) -> dict[str, Any]:
    return {"config": config.to_dict(), "train_files": train_files, "val_files": val_files, "device": _device_kind(config)}


def prepare_payload(config: TrainConfig, world_size: int, progress: bool = False) -> dict[str, Any]:
    """Validate ``config`` for ``world_size`` ranks, list (or build) its graph files and return the
    argument of :func:`~domainpar.train.trainer.run_rank` (for launching ranks yourself, e.g. in sweeps)."""
    validate_config(config, world_size=world_size)
    train_files, val_files = _prepare_files(config, progress=progress)
    return _payload(config, train_files, val_files)


def _rank_error(exc: Exception) -> Exception:
    """A spawned rank's failure as a one-line DomainparError when it was a user mistake, else unchanged."""
    failure = getattr(exc, "failure", None)
    if failure is not None and failure.user_error:
        return DomainparError(failure.message)
    return exc


def _watchdog_config(config: TrainConfig):
    from domainpar.comm.watchdog import WatchdogConfig

    return WatchdogConfig(dead_after_s=config.parallel.heartbeat_s)


def _train_as_launched_rank(config: TrainConfig) -> dict[str, Any]:
    """This process is one rank of a torchrun/srun job: join it, let rank 0 prepare the run, train."""
    from domainpar.train import launch, runlock
    from domainpar.train.trainer import run_rank

    env = launch.init_from_env(config.parallel.timeout_s, device=_device_kind(config), watchdog=_watchdog_config(config))
    validate_config(config, world_size=env.world_size)
    import torch.distributed as dist

    lock = None
    try:
        # Rank 0 holds the --out lock and builds graphs from raw events (if any) while the others wait,
        # then everyone lists them.
        if env.rank == 0:
            check_output_dir(config.run.out, "--out")
            lock = runlock.acquire(config.run.out)
            train_files, val_files = _prepare_files(config, progress=config.run.progress)
            _check_inputs(config, env.world_size, train_files, val_files)
        if env.world_size > 1:
            dist.barrier()
        train_files, val_files = _prepare_files(config, progress=False)
        payload = _payload(config, train_files, val_files)
        payload["device"] = env.device.type
        return run_rank(env.rank, env.world_size, payload)
    finally:
        if lock is not None:
            runlock.release(lock)


def train(config: TrainConfig) -> dict[str, Any]:
    """Validate ``config``, start the ranks, train, and return rank 0's summary.

    One run at a time writes ``config.run.out`` (:mod:`domainpar.train.runlock`).

    Returns:
        A dict with ``out``, ``mode``, ``world_size``, ``domain_size``,
        ``num_replicas``, ``steps``, ``epochs``, ``final`` (the last
        ``metrics.jsonl`` record), ``step_losses``, ``checkpoint``, ``model``
        (path of ``model.pt``), ``seconds`` and ``steps_per_second``.

    Raises:
        DomainparError: invalid configuration or data, another run holds ``--out``, or a rank failed on a
            user mistake (named).
        SpawnError: a spawned rank crashed, died or stopped answering (the message names the first one).
        PeerFailed: under torchrun/srun, another rank failed first (named).
    """
    from domainpar.train import launch, runlock
    from domainpar.train.trainer import run_rank

    if launch.running_under_launcher():
        return _train_as_launched_rank(config)

    world_size = 1 if config.parallel.mode == "single" else config.parallel.ranks
    validate_config(config, world_size=world_size)
    local_limit = 4 * (os.cpu_count() or 1)
    if world_size > local_limit:
        raise DomainparError(
            f"--ranks {world_size} starts that many local processes: at most {local_limit} on this machine "
            "(4 per CPU core); use torchrun or srun to run on several nodes"
        )
    check_output_dir(config.run.out, "--out")
    with runlock.run_lock(config.run.out):
        train_files, val_files = _prepare_files(config, progress=config.run.progress)
        _check_inputs(config, world_size, train_files, val_files)
        # config.yaml is written by rank 0 when the run has really started (Trainer._start_outputs).
        payload = _payload(config, train_files, val_files)
        if world_size == 1:
            return run_rank(0, 1, payload)
        backend = launch.backend_for(payload["device"])
        threads = config.parallel.threads
        if threads is None and backend == "gloo":
            threads = max(1, (os.cpu_count() or 1) // world_size)
        try:
            results = launch.spawn(
                run_rank,
                world_size,
                args=(payload,),
                timeout_s=_SPAWN_JOB_LIMIT_S,
                backend=backend,
                num_threads=threads,
                watchdog=_watchdog_config(config),
            )
        except launch.SpawnError as exc:
            converted = _rank_error(exc)
            if converted is exc:
                raise
            raise converted from None
    return results[0]

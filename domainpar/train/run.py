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
import sys
from pathlib import Path
from typing import Any

import torch

from domainpar.errors import DomainparError
from domainpar.output_paths import check_output_dir
from domainpar.train.config import TrainConfig, validate_config

#: Wall-clock limit of a spawned job: training may run for days; hangs are bounded by the process-group timeout.
_SPAWN_JOB_LIMIT_S = 30 * 24 * 3600.0


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _device_kind(config: TrainConfig) -> str:
    if config.parallel.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return config.parallel.device


def _payload(config: TrainConfig, inputs) -> dict[str, Any]:
    return {
        "config": config.to_dict(),
        "train_files": inputs.train_files,
        "val_files": inputs.val_files,
        "train_plans": inputs.train_plans,
        "val_plans": inputs.val_plans,
        "device": _device_kind(config),
    }


def prepare_payload(config: TrainConfig, world_size: int, progress: bool = False) -> dict[str, Any]:
    """Validate ``config`` for ``world_size`` ranks, prepare its events (graphs, plans: see
    :mod:`domainpar.train.prepare`) and return the argument of :func:`~domainpar.train.trainer.run_rank`
    (for launching ranks yourself, e.g. in sweeps)."""
    from domainpar.train.prepare import prepare

    validate_config(config, world_size=world_size)
    return _payload(config, prepare(config, world_size, progress=progress))


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
    """This process is one rank of a torchrun/srun job: join it, prepare its shard of the events, train.

    Every rank prepares the events of its shard (graphs, plans: :mod:`domainpar.train.prepare`) and waits for
    the others through the rendezvous store, not in a barrier: no process-group timeout bounds the
    preparation, and a rank's failure reaches every rank within a poll with its line.
    """
    from domainpar.comm.watchdog import current as current_watchdog
    from domainpar.train import launch, runlock
    from domainpar.train.prepare import prepare, prepare_distributed
    from domainpar.train.trainer import check_run_model, run_rank

    env = launch.init_from_env(config.parallel.timeout_s, device=_device_kind(config), watchdog=_watchdog_config(config))
    validate_config(config, world_size=env.world_size)
    lock = None

    def own_out() -> None:
        """Rank 0 checks --out and holds its lock (inside the preparation's failure channel)."""
        nonlocal lock
        check_output_dir(config.run.out, "--out")
        lock = runlock.acquire(config.run.out)
        watchdog = current_watchdog()
        if watchdog is not None:  # a rank ended by its watchdog skips the finally below
            held = lock
            watchdog.before_exit.append(lambda: runlock.release(held))

    try:
        if env.world_size == 1:
            own_out()
            inputs = prepare(config, 1, progress=config.run.progress)
        else:
            inputs = prepare_distributed(
                config, env.rank, env.world_size, before=own_out if env.rank == 0 else None, progress=config.run.progress
            )
        check_run_model(config, inputs.train_files, echo=_stderr if env.rank == 0 else None)
        payload = _payload(config, inputs)
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
    from domainpar.train.trainer import check_run_model, run_rank

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
        from domainpar.train.prepare import prepare

        inputs = prepare(config, world_size, progress=config.run.progress)
        check_run_model(config, inputs.train_files, echo=_stderr)
        # config.yaml is written by rank 0 when the run has really started (Trainer._start_outputs).
        payload = _payload(config, inputs)
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

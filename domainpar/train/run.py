"""``train(config)``: the programmatic entry point behind ``domainpar train``.

Three ways a run starts (:func:`~domainpar.launch.env.detect` reads which):

* as one rank of a torchrun job or a task of an srun step of two or more
  tasks: this process checks the run at the launcher's world size
  (:func:`~domainpar.train.preflight.check_run`), joins the job and trains;
* ``parallel.ranks > 1`` (domain or sectors mode), also inside an sbatch
  batch script, which is no srun step: this process checks the run, spawns
  that many local ranks (gloo on CPU, NCCL with one GPU per rank on CUDA)
  and waits; a rank that raises or dies stops the others and the error
  names it;
* otherwise (single mode, or one rank): training runs in this process.

Before any rank trains: :mod:`domainpar.train.preflight`, :mod:`domainpar.train.agreement` (torchrun/srun) and
:mod:`domainpar.train.locality`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from domainpar.comm.watchdog import WatchdogConfig
from domainpar.comm.watchdog import current as current_watchdog
from domainpar.errors import DomainparError
from domainpar.launch import ranks, runlock
from domainpar.launch.env import LauncherEnv, detect
from domainpar.output_paths import check_output_dir
from domainpar.train.agreement import agree_on_run
from domainpar.train.config import TrainConfig, device_kind
from domainpar.train.locality import LocalityGate, check_launched_run_locality, check_run_locality, graph_given
from domainpar.train.preflight import check_run
from domainpar.train.prepare import precheck_resume, prepare, prepare_distributed
from domainpar.train.trainer import check_run_model, run_rank

#: Wall-clock limit of a spawned job: training may run for days; hangs are bounded by the process-group timeout.
_SPAWN_JOB_LIMIT_S = 30 * 24 * 3600.0


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _payload(config: TrainConfig, inputs) -> dict[str, Any]:
    return {
        "config": config.to_dict(),
        "train_files": inputs.train_files,
        "val_files": inputs.val_files,
        "train_plans": inputs.train_plans,
        "val_plans": inputs.val_plans,
        "device": device_kind(config),
    }


def prepare_payload(config: TrainConfig, world_size: int, progress: bool = False) -> dict[str, Any]:
    """Validate ``config`` for ``world_size`` ranks, prepare its events (graphs, plans: see
    :mod:`domainpar.train.prepare`) and return the argument of :func:`~domainpar.train.trainer.run_rank`
    (for launching ranks yourself, e.g. in sweeps)."""
    config = check_run(config, world_size)
    given = graph_given(config)
    if given is not None:
        check_run_locality(config, given, world_size)
    inputs = prepare(config, world_size, progress=progress)
    if given is None:
        check_run_locality(config, inputs.train_files, world_size)
    return _payload(config, inputs)


def _train_as_launched_rank(config: TrainConfig, launcher: LauncherEnv) -> dict[str, Any]:
    """This process is one rank of a torchrun/srun job: join it, prepare its shard of the events, train.

    Every rank prepares the events of its shard (graphs, plans: :mod:`domainpar.train.prepare`) and waits for
    the others through the rendezvous store, not in a barrier: no process-group timeout bounds the
    preparation, and a rank's failure reaches every rank within a poll with its line.
    """
    # Checked before joining: a mistake ends every rank at once with its line, not after the rendezvous.
    config = check_run(config, launcher.world_size, launcher)
    watchdog = WatchdogConfig(dead_after_s=config.parallel.heartbeat_s)
    env = ranks.init_from_env(config.parallel.timeout_s, device=device_kind(config), watchdog=watchdog)
    # Before any collective and any work: every rank runs the configuration rank 0 runs, or none trains.
    agree_on_run(config, env.world_size)
    lock = None

    def own_out() -> None:
        """Rank 0 checks --out, the checkpoint a resume starts from, and holds the lock (inside the preparation's
        failure channel)."""
        nonlocal lock
        check_output_dir(config.run.out, "--out")
        precheck_resume(config)
        lock = runlock.acquire(config.run.out)
        watchdog = current_watchdog()
        if watchdog is not None:  # a rank ended by its watchdog skips the finally below
            held = lock
            watchdog.before_exit.append(lambda: runlock.release(held))

    given = graph_given(config)
    try:
        if given is not None:
            check_launched_run_locality(config, given, env.world_size, echo=_stderr)
        if env.world_size == 1:
            own_out()
            inputs = prepare(config, 1, progress=config.run.progress)
        else:
            inputs = prepare_distributed(
                config, env.rank, env.world_size, before=own_out if env.rank == 0 else None, progress=config.run.progress
            )
        check_run_model(config, inputs.train_files, echo=_stderr if env.rank == 0 else None)
        if given is None:
            check_launched_run_locality(config, inputs.train_files, env.world_size, echo=_stderr)
        payload = _payload(config, inputs)
        payload["device"] = env.device.type
        return run_rank(env.rank, env.world_size, payload)
    finally:
        if lock is not None:
            runlock.release(lock)


def train(config: TrainConfig, launcher: LauncherEnv | None = None) -> dict[str, Any]:
    """Check ``config``, start the ranks, train, and return rank 0's summary.

    One run at a time writes ``config.run.out`` (:mod:`domainpar.launch.runlock`).

    Args:
        config: the run's configuration.
        launcher: how this process was started (default: read from the environment).

    Returns:
        A dict with ``out``, ``mode``, ``world_size``, ``domain_size``,
        ``num_replicas``, ``steps`` (the run's position), ``steps_this_run``,
        ``epochs``, ``final`` (the last ``metrics.jsonl`` record),
        ``step_losses``, ``checkpoint``, ``model`` (path of ``model.pt``),
        ``seconds`` and ``steps_per_second``.

    Raises:
        DomainparError: invalid configuration or data, another run holds ``--out``, or a rank failed on a
            user mistake (named).
        SpawnError: a spawned rank crashed, died or stopped answering (the message names the first one).
        PeerFailed: under torchrun/srun, another rank failed first (named).
    """
    launcher = detect() if launcher is None else launcher
    if launcher.joins:
        return _train_as_launched_rank(config, launcher)

    world_size = 1 if config.parallel.mode == "single" else config.parallel.ranks
    config = check_run(config, world_size, launcher)
    if world_size > 1 and launcher.slurm_job is not None and (launcher.slurm_nodes or 1) > 1:
        print(
            f"domainpar: {launcher.describe()}: spawning {world_size} local ranks on this node only; "
            "start the ranks with srun to use every node of the allocation",
            file=sys.stderr,
        )
    check_output_dir(config.run.out, "--out")
    # A resume that would not continue its checkpoint's run is refused before anything is prepared or written.
    precheck_resume(config)
    with runlock.run_lock(config.run.out), LocalityGate(config, world_size, echo=_stderr) as gate:
        # A model that is not a built-in proves its locality in a thread while the events are prepared and the
        # ranks start; the ranks wait for its verdict before their first step.
        given = graph_given(config)
        if given is not None:
            gate.start(given)
        inputs = prepare(config, world_size, progress=config.run.progress)
        check_run_model(config, inputs.train_files, echo=_stderr)
        gate.start(inputs.train_files)
        if gate.done:
            gate.raise_if_refused()  # known before any rank starts: none is started
        # config.yaml is written by rank 0 when the run has really started (Trainer._start_outputs).
        payload = _payload(config, inputs)
        payload["locality_gate"] = gate.directory
        if world_size == 1:
            return run_rank(0, 1, payload)
        backend = ranks.backend_for(payload["device"])
        threads = config.parallel.threads
        if threads is None and backend == "gloo":
            threads = max(1, (os.cpu_count() or 1) // world_size)
        try:
            results = ranks.spawn(
                run_rank,
                world_size,
                args=(payload,),
                timeout_s=_SPAWN_JOB_LIMIT_S,
                backend=backend,
                num_threads=threads,
                watchdog=WatchdogConfig(dead_after_s=config.parallel.heartbeat_s),
            )
        except ranks.SpawnError as exc:
            gate.raise_if_refused()  # the ranks stopped at the gate: the check's own line, said once
            failure = getattr(exc, "failure", None)
            if failure is None or not failure.user_error:
                raise
            raise DomainparError(failure.message) from None  # a rank's user mistake: its one line
    return results[0]

"""Everything about a training run that would otherwise fail only once its ranks exist, checked before they start.

:func:`check_run` runs in the process that spawns the ranks (``--ranks``),
and in every rank of a torchrun/srun job *before* it joins the process group
(the world size comes from the launcher's environment), so a job that would
die after the queue wait — or after every rank has loaded its first event —
ends instead at once with one line naming the flag. It resolves the defaults
that depend on the world (:func:`resolve_defaults`), so the shipped configs run
at any world size, validates the config at the launched world size, then runs
every check of :data:`RUN_CHECKS` on a :class:`RunInputsView` of the run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import yaml

from domainpar.data.dataset import event_inputs
from domainpar.data.graph_files import GRAPHS_OR_EVENTS, graph_files, has_graph_files, inspect_graph, load_graph
from domainpar.data.pyg_files import is_pyg_file
from domainpar.errors import DomainparError
from domainpar.partition.geometric import require_positions
from domainpar.partition.io import read_manifest
from domainpar.train.config import SettingError, TrainConfig, device_kind, domain_size_of, validate_config
from domainpar.train.events import plan_directory
from domainpar.launch.env import LauncherEnv, detect


@dataclass(frozen=True)
class RunInputsView:
    """What the pre-start checks see of a run (nothing here is built or partitioned)."""

    config: TrainConfig
    """The configuration, with world-dependent defaults resolved."""
    world_size: int
    """Ranks that will train."""
    domain_size: int
    """Ranks per domain group G."""
    launcher: LauncherEnv
    """How the ranks start: "none" means this process spawns them (or trains alone)."""
    num_train_events: int
    """Training events found under ``data.train`` (graph files or raw events)."""
    first_graph: Path | None
    """The first training graph file; None when the training events are raw TrackML files (built later)."""

    @property
    def replicas(self) -> int:
        """Data-parallel replicas (domain groups)."""
        return self.world_size // self.domain_size


# ------------------------------------------------------------------------ defaults that depend on the world


def _resumed_batch_events(config: TrainConfig) -> int | None:
    """The global batch of the run being resumed, from the ``config.yaml`` it wrote (None: not resuming, or unknown)."""
    run = config.run
    if run.resume_from is not None:
        candidates = [Path(run.resume_from).resolve().parent.parent / "config.yaml"]
    elif run.resume:
        candidates = [Path(run.out) / "config.yaml"]
    else:
        return None
    for path in candidates:
        try:
            saved = yaml.safe_load(path.read_text())
            value = saved["optim"]["batch_events"]
        except (OSError, yaml.YAMLError, KeyError, TypeError):
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
    return None


def resolve_defaults(config: TrainConfig, world_size: int) -> TrainConfig:
    """``config`` with the defaults that depend on the world filled in.

    ``optim.batch_events`` unset (None) becomes the resumed run's global batch when resuming (the event
    order depends on it), else one event per replica — so a config runs unchanged on one domain group or
    on many. A resumed batch that the new replica count does not divide is refused here, naming both.

    Raises:
        DomainparError: the resumed run's batch is not a multiple of this run's replicas.
    """
    if config.optim.batch_events is not None:
        return config
    group = domain_size_of(config, world_size)
    replicas = max(1, world_size // group) if group >= 1 else 1
    resumed = _resumed_batch_events(config)
    if resumed is not None and resumed % replicas:
        raise DomainparError(
            f"--batch-events: the run being resumed used {resumed} events per step, not a multiple of this run's "
            f"{replicas} replicas (world size {world_size} / --domain-size {group}); resume on a world whose replica "
            f"count divides {resumed}, or pass --batch-events"
        )
    return config.replace(**{"optim.batch_events": resumed or replicas})


# ------------------------------------------------------------------------------------------- the checks


def enough_events_for_a_batch(view: RunInputsView) -> None:
    """A step takes ``batch_events`` distinct events: fewer training events than that trains nothing."""
    batch = view.config.optim.batch_events
    if batch > view.num_train_events:
        raise DomainparError(
            f"--batch-events {batch} must be at most the number of training events ({view.num_train_events} in "
            f"{view.config.data.train})"
            + ("; it defaults to one event per replica: use fewer replicas (--domain-size) or more events"
               if view.replicas > 1 else "")
        )


def scheduled_steps(epochs: int, num_train_events: int, batch_events: int) -> int:
    """A run's scheduled length in optimiser steps, as the trainer counts it: ``epochs`` x full batches of
    ``batch_events`` per epoch (``--max-steps`` cuts a run short of it, and is not counted)."""
    return epochs * (num_train_events // batch_events)


def warmup_ends_before_the_run(view: RunInputsView) -> None:
    """A warm-up of the run's length or longer never lets the learning rate reach its peak (--lr): the run would
    train a schedule other than the one asked for. A resume has the same length (a cosine schedule's length is
    compared with its checkpoint's), so a run accepted here resumes. A run cut short by ``--max-steps`` is a
    deliberate short run (a check of a production config on a few steps): its cap is not held against the
    warm-up."""
    config = view.config
    warmup = config.optim.warmup
    steps = scheduled_steps(config.run.epochs, view.num_train_events, config.optim.batch_events)
    if warmup < steps:
        return
    per_epoch = view.num_train_events // config.optim.batch_events
    how = f"{config.run.epochs} epoch(s) x {per_epoch} step(s) of {config.optim.batch_events} event(s)"
    raise SettingError(
        "optim.warmup",
        f"must be fewer than the run's {steps} optimiser steps (got {warmup}): {how}; the warm-up would take the whole run",
    )


def positions_for_sectors(view: RunInputsView) -> None:
    """Geometric plans (and naive sectors) cut the detector by hit position: the graphs must carry positions."""
    config = view.config
    geometric = config.parallel.mode == "sectors" or (config.parallel.mode == "domain" and config.data.method == "geometric"
                                                      and config.data.plans is None)
    if not geometric or view.domain_size < 2 or view.first_graph is None:
        return
    graph = load_graph(view.first_graph) if is_pyg_file(view.first_graph) else None
    if graph is not None:
        pos = graph.pos
    else:
        with np.load(view.first_graph, allow_pickle=False) as npz:
            pos = npz["pos"]
    try:
        require_positions(pos, config.data.method, str(view.first_graph))
    except DomainparError as exc:
        if config.parallel.mode == "sectors":
            raise DomainparError(
                f"--mode sectors: {view.first_graph} has no hit positions (graph files in the Exa.TrkX layout carry none), "
                "and sectors are cut by position; use --mode domain --method metis"
            ) from None
        raise exc from None


def plans_have_one_part_per_rank(view: RunInputsView) -> None:
    """``--plans`` must hold plans of G parts (a rank of a domain group reads its part file)."""
    plans = view.config.data.plans
    if plans is None or view.config.parallel.mode != "domain" or view.domain_size < 2 or view.first_graph is None:
        return
    event_id = inspect_graph(view.first_graph).event_id
    try:
        manifest = read_manifest(plan_directory(Path(plans), event_id, view.first_graph))
    except DomainparError as exc:
        raise DomainparError(f"--plans: {exc}".replace("--plans: --plans", "--plans")) from None
    if manifest["num_parts"] != view.domain_size:
        raise DomainparError(
            f"--plans {plans}: the plan of {view.first_graph.name} has {manifest['num_parts']} parts, but a domain group "
            f"has {view.domain_size} ranks (--domain-size, world size {view.world_size}); partition with "
            f"--parts {view.domain_size} or set --domain-size {manifest['num_parts']}"
        )


def local_ranks_fit_this_machine(view: RunInputsView) -> None:
    """Ranks this process spawns run on this machine: at most 4 per core, and one GPU each under NCCL."""
    if view.launcher.joins or view.world_size == 1:
        return
    limit = 4 * (os.cpu_count() or 1)
    where = f" ({view.launcher.describe()}; srun starts ranks on every node)" if view.launcher.slurm_job else ""
    if view.world_size > limit:
        raise DomainparError(
            f"--ranks {view.world_size} starts that many local processes: at most {limit} on this machine "
            f"(4 per CPU core){where}; use torchrun or srun to run on several nodes"
        )
    if device_kind(view.config) == "cuda":
        gpus = torch.cuda.device_count()
        if view.world_size > gpus:
            raise DomainparError(
                f"--ranks {view.world_size} on CUDA needs one GPU per rank (NCCL refuses two ranks on one GPU) and this "
                f"machine shows {gpus}; use --ranks {gpus} (with --domain-size to match) or --device cpu"
            )


def torchrun_workers_fit_the_gpus(view: RunInputsView) -> None:
    """torchrun's workers of a node all see the node's GPUs: more workers than GPUs put two ranks on one."""
    launcher = view.launcher
    if launcher.kind not in ("torchrun", "env") or device_kind(view.config) != "cuda":
        return
    local_world = os.environ.get("LOCAL_WORLD_SIZE", "")
    gpus = torch.cuda.device_count()
    if local_world.isdigit() and gpus and int(local_world) > gpus:
        raise DomainparError(
            f"--nproc-per-node {local_world} (torchrun) on a node that shows {gpus} GPU(s): NCCL needs one GPU per rank; "
            f"use --nproc-per-node {gpus} or --device cpu"
        )


#: The checks :func:`check_run` runs after the config's own validation, in order; each raises one DomainparError line.
RUN_CHECKS: tuple[Callable[[RunInputsView], None], ...] = (
    enough_events_for_a_batch, warmup_ends_before_the_run, positions_for_sectors, plans_have_one_part_per_rank,
    local_ranks_fit_this_machine, torchrun_workers_fit_the_gpus,
)  # fmt: skip


# ------------------------------------------------------------------------------------------- entry point


def _training_events(config: TrainConfig) -> tuple[int, Path | None]:
    """(number of training events, first graph file or None for raw events), from directory listings only."""
    path = Path(config.data.train)
    if has_graph_files(path):
        files = graph_files(path)
        return len(files), files[0]
    if path.is_dir() and not any(path.glob("event*-hits.csv*")):
        raise DomainparError(f"--data {path}: {GRAPHS_OR_EVENTS}, found neither")
    return len(event_inputs(path)), None


def check_run(config: TrainConfig, world_size: int, launcher: LauncherEnv | None = None) -> TrainConfig:
    """Resolve the world-dependent defaults of ``config`` and run every pre-start check at ``world_size``.

    Args:
        config: the run's configuration as given.
        world_size: ranks that will train (``--ranks``, or the launcher's world).
        launcher: how the ranks start (default: read from the environment).

    Returns:
        The configuration every rank trains with (defaults resolved).

    Raises:
        DomainparError: one line naming the flag of the first problem found.
    """
    launcher = detect() if launcher is None else launcher
    config = resolve_defaults(config, world_size)
    validate_config(config, world_size=world_size)
    count, first = _training_events(config)
    view = RunInputsView(config, world_size, domain_size_of(config, world_size), launcher, count, first)
    for check in RUN_CHECKS:
        check(view)
    return config


__all__ = ["RUN_CHECKS", "RunInputsView", "check_run", "resolve_defaults", "scheduled_steps"]

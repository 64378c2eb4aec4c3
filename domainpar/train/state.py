"""A run's resumable state: its position, what a checkpoint of it holds, and how a resume restores it.

Every rank ends each step with the same weights, optimiser state and
position, so the checkpoint rank 0 writes serves any number of ranks on resume
(:mod:`domainpar.train.checkpoint` owns the file format; this module owns what
goes into it). On resume only rank 0 chooses the file and every rank loads
that one (:func:`agreed_checkpoint`).

A resume continues the run that wrote the checkpoint, so before the first step
:func:`check_resume` refuses, naming the setting and both values, anything that
would change what the weights mean or how they go on being trained. The
comparison is generic — every field of the config and of the model config takes
part unless it is listed in :data:`RESUME_ELASTIC` — so a field added later is
compared by default.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from domainpar.comm.collectives import broadcast_object
from domainpar.comm.groups import Layout
from domainpar.errors import DomainparError, shorten
from domainpar.npzfile import archive_digest
from domainpar.train.checkpoint import (
    CHECKPOINT_FORMAT_VERSION,
    DIGEST_KEY,
    checkpoint_dir,
    latest_checkpoint,
    load_checkpoint,
    rng_state,
    set_rng_state,
)
from domainpar.train.config import DERIVED_FIELDS, TrainConfig, config_from_dict, flag_name
from domainpar.train.schedule import learning_rate, replica_scale

#: Settings a resume may change, and why that is exact (domain vs single is exact too: see ``parallel.mode``).
RESUME_ELASTIC = {
    "data.train": "the training events are compared by content instead (a moved directory is fine)",
    "data.val": "validation only measures (its graphs must have the model's features)",
    "data.plans": "any plan of the same graphs gives the same gradients",
    "data.method": "any partition gives the same gradients",
    "data.prefetch": "input staging",
    "data.cache_gb": "input caching",
    "data.workers": "preparation processes",
    "parallel.ranks": "elastic: the same training on another number of ranks",
    "parallel.domain_size": "elastic: the same training on other domain groups",
    "parallel.timeout_s": "failure detection",
    "parallel.heartbeat_s": "failure detection",
    "parallel.device": "where the same computation runs",
    "parallel.threads": "where the same computation runs",
    "parallel.skip_locality_check": "a check before the first step, not the training",
    "model.checkpointing": "activation checkpointing recomputes the same values",
    "model.overlap": "the same values, computed while the exchange is in flight",
    "model.compile": "fused kernels of the same computation",
    "model.chunk_rows": "recomputation chunks of the same computation",
    "optim.rescale_lr_on_resume": "how a resume on another replica count scales the rate (said on stderr)",
    "run.out": "where the run is",
    "run.resume": "how the run is continued",
    "run.resume_from": "how the run is continued",
    "run.keep": "checkpoints kept",
    "run.checkpoint_every": "when checkpoints are written",
    "run.checkpoint_every_epochs": "when checkpoints are written",
    "run.stop_after_steps": "a pause: the schedule keeps the whole run's length",
    "run.epochs": "compared through the learning-rate schedule's length",
    "run.max_steps": "compared through the learning-rate schedule's length",
    "run.threshold": "reported metrics only",
    "run.tensorboard": "logging",
    "run.progress": "display",
    "run.curves": "display",
}

#: Modes that train the same model the same way (domain mode is exact: the gradients of one process).
_EXACT_MODES = ("domain", "single")


def _comparable(dotted: str, value: Any) -> Any:
    if dotted == "parallel.mode" and value in _EXACT_MODES:
        return "domain or single"
    return value


def _show(value: Any) -> str:
    return shorten(value) if isinstance(value, str) else str(value)


def new_epoch_state() -> dict[str, float]:
    """Running sums of an epoch (checkpointed, so a resumed epoch reports the whole epoch)."""
    return {"loss_sum": 0.0, "steps": 0, "seconds": 0.0, "halo_bytes": 0.0, "events": 0, "data_wait": 0.0}


@dataclass
class Progress:
    """Where a run is: the same on every rank after every step."""

    global_step: int = 0
    """Optimiser steps done."""
    epoch: int = 0
    """Epoch of the next step (0-based)."""
    step_in_epoch: int = 0
    """Position of the next step within its epoch."""
    epoch_state: dict[str, float] = field(default_factory=new_epoch_state)
    """Running sums of the epoch in progress (see :func:`new_epoch_state`)."""
    step_losses: list[float] = field(default_factory=list)
    """Mean loss of every step so far."""

    def advance(self, loss: float, halo_bytes: float, events: int, data_wait: float) -> None:
        """Count one finished optimiser step: its mean event loss, halo bytes, events and input wait (seconds)."""
        self.global_step += 1
        self.step_in_epoch += 1
        state = self.epoch_state
        state["loss_sum"] += loss
        state["steps"] += 1
        state["halo_bytes"] += halo_bytes
        state["events"] += events
        state["data_wait"] += data_wait
        self.step_losses.append(loss)

    def next_epoch(self) -> None:
        """The epoch is complete: the next step is the first of the next epoch."""
        self.epoch += 1
        self.step_in_epoch = 0
        self.epoch_state = new_epoch_state()


def model_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict on the CPU (what checkpoints and ``model.pt`` hold)."""
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def checkpoint_state(
    progress: Progress,
    model: torch.nn.Module,
    model_config,
    optimizer: torch.optim.Optimizer,
    *,
    total_steps: int,
    lr_replicas: int,
    config: TrainConfig,
    data_description: dict,
    layout: Layout,
    inputs: dict[str, Any] | None = None,
    graph: dict | None = None,
    logs: dict | None = None,
) -> dict[str, Any]:
    """Everything a resume needs (the layout is :mod:`domainpar.train.checkpoint`'s table); ``logs`` is
    :meth:`~domainpar.train.logs.RunLogs.history`, from which a resume rebuilds damaged logs."""
    return {
        "format_version": CHECKPOINT_FORMAT_VERSION,
        "step": progress.global_step,
        "epoch": progress.epoch,
        "step_in_epoch": progress.step_in_epoch,
        "model": model_weights(model),
        "model_config": model_config.to_dict(),
        "optimizer": optimizer.state_dict(),
        "schedule": {
            "total_steps": total_steps,
            # The replica count the learning rate is scaled for (kept across resumes unless rescaled).
            "num_replicas": lr_replicas,
            "lr": float(optimizer.param_groups[0]["lr"]),
        },
        "rng": rng_state(),
        "epoch_state": dict(progress.epoch_state),
        "step_losses": list(progress.step_losses),
        "config": config.to_dict(),
        "data": data_description,
        "inputs": inputs,
        "world_size": layout.world_size,
        "domain_size": layout.domain_size,
        # How the training graphs were built (features, cuts, edge filter): inference and export rebuild the same graph.
        **({"graph": dict(graph)} if graph is not None else {}),
        **({"logs": logs} if logs is not None else {}),
    }


def restore(
    path: Path,
    state: dict[str, Any],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    config: TrainConfig,
    device: torch.device,
    dtype: torch.dtype,
) -> Progress:
    """Apply a loaded, verified checkpoint ``state`` (read from ``path``): weights, optimiser, RNG; returns the position.

    Raises:
        DomainparError: the checkpoint does not fit this model, optimiser or batch size (named, one line).
    """
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0]
        raise DomainparError(
            f"{path}: checkpoint weights do not fit this model ({first}); use the same --hidden/--iterations as the run that wrote it"
        ) from None
    model.to(device=device, dtype=dtype)
    try:
        optimizer.load_state_dict(state["optimizer"])
    except (ValueError, KeyError, TypeError, IndexError, RuntimeError) as exc:
        raise DomainparError(
            f"{path}: checkpoint entry 'optimizer' does not fit this model's AdamW ({type(exc).__name__}: {str(exc)[:160]})"
        ) from None
    # load_state_dict does not compare shapes; a moment of the wrong shape would fail in the first step.
    for param, moments in optimizer.state.items():
        for name, value in moments.items():
            if torch.is_tensor(value) and value.dim() > 0 and value.shape != param.shape:
                raise DomainparError(
                    f"{path}: checkpoint entry 'optimizer' holds a {name} of shape {tuple(value.shape)} for a parameter "
                    f"of shape {tuple(param.shape)}"
                )
    if "rng" in state:
        set_rng_state(state["rng"], source=path)
    return Progress(
        global_step=int(state["step"]),
        epoch=int(state["epoch"]),
        step_in_epoch=int(state["step_in_epoch"]),
        epoch_state={**new_epoch_state(), **dict(state.get("epoch_state", {}))},
        step_losses=[float(v) for v in state.get("step_losses", [])],
    )


def training_inputs(files: list[Path], metadata: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint records of its training events: count, one digest of their contents in run order
    (:func:`~domainpar.npzfile.archive_digest` of each graph file), and the feature names."""
    digest = hashlib.sha256("\n".join(archive_digest(f) for f in files).encode()).hexdigest()
    return {
        "num_events": len(files),
        "digest": digest,
        "node_features": metadata.get("node_features"),
        "edge_features": metadata.get("edge_features"),
    }


def _differences(saved: dict[str, Any], current: dict[str, Any], prefix: str) -> list[tuple[str, Any, Any]]:
    """``(dotted, saved, current)`` of every field that differs and is not elastic."""
    found = []
    for name in sorted(set(saved) | set(current)):
        dotted = f"{prefix}{name}"
        if dotted in RESUME_ELASTIC:
            continue
        a, b = saved.get(name), current.get(name)
        if isinstance(a, dict) or isinstance(b, dict):
            found += _differences(a if isinstance(a, dict) else {}, b if isinstance(b, dict) else {}, dotted + ".")
        elif _comparable(dotted, a) != _comparable(dotted, b):
            found.append((dotted, a, b))
    return found


def _setting(dotted: str) -> str:
    if dotted in DERIVED_FIELDS:
        return f"{dotted} ({DERIVED_FIELDS[dotted]})"
    section = dotted.partition(".")[0]
    return flag_name(dotted) if section in ("data", "model", "optim", "parallel", "run") and dotted.count(".") == 1 else dotted


def _head(path: Path) -> str:
    return f"{path}: a resume continues the run that wrote this checkpoint, but"


def _check_settings(path: Path, state: dict[str, Any], config: TrainConfig, model_config: Any | None) -> TrainConfig:
    """Every setting but the elastic ones must be the checkpoint's (the model's feature widths too, when given).

    Returns:
        The checkpoint's configuration.
    """
    saved = config_from_dict(state["config"], source=f"{path}: config")
    found = []
    if model_config is not None:
        saved_model = type(model_config).from_dict(dict(state["model_config"])).to_dict()
        found += _differences(saved_model, model_config.to_dict(), "model.")
    found += [d for d in _differences(saved.to_dict(), config.to_dict(), "") if model_config is None or not d[0].startswith("model.")]
    if found:
        dotted, was, now = found[0]
        others = f" (also different: {', '.join(_setting(d) for d, _, _ in found[1:6])})" if len(found) > 1 else ""
        raise DomainparError(
            f"{_head(path)} {_setting(dotted)} is {_show(now)} here and {_show(was)} in the checkpoint{others}; it changes what "
            f"the weights mean or how they are trained: pass the checkpoint's value, or train into a new --out"
        )
    return saved


def _check_schedule(path: Path, state: dict[str, Any], saved: TrainConfig, config: TrainConfig, total_steps: int) -> None:
    """A cosine schedule's length must stay the checkpoint's (step and constant schedules do not depend on it)."""
    saved_total = (state.get("schedule") or {}).get("total_steps")
    if config.optim.schedule != "cosine" or saved_total is None or saved_total == total_steps:
        return

    def spans(c: TrainConfig) -> str:
        return f"--epochs {c.run.epochs}" + (f", --max-steps {c.run.max_steps}" if c.run.max_steps is not None else "")

    raise DomainparError(
        f"{_head(path)} its cosine learning-rate schedule spans {saved_total} steps ({spans(saved)}) and this run's would span "
        f"{total_steps} ({spans(config)}), so the rate would jump at step {state['step']}; resume with the checkpoint's "
        "--epochs and --max-steps (--stop-after-steps pauses a run without changing its schedule)"
    )


def check_resume_early(path: Path, state: dict[str, Any], config: TrainConfig, num_train_events: int | None) -> None:
    """What can be checked before the run prepares anything (writes nothing): the settings, and the schedule's length
    when the number of training events is known. :func:`check_resume` checks everything again on the ranks."""
    saved = _check_settings(path, state, config, None)
    if num_train_events is not None:
        steps = config.run.epochs * (num_train_events // config.optim.batch_events)
        total = steps if config.run.max_steps is None else min(steps, config.run.max_steps)
        _check_schedule(path, state, saved, config, total)


def check_resume(
    path: Path,
    state: dict[str, Any],
    config: TrainConfig,
    model_config: Any,
    total_steps: int,
    inputs: dict[str, Any],
) -> None:
    """Refuse to resume from ``state`` when this run is not a continuation of the run that wrote it.

    Args:
        path: the checkpoint (named in messages).
        state: its loaded, verified content.
        config: this run's configuration.
        model_config: this run's model configuration (with the graphs' feature widths).
        total_steps: the length of this run's learning-rate schedule.
        inputs: :func:`training_inputs` of this run's training events.

    Raises:
        DomainparError: one line naming the first differing setting with both values (and the others that differ).
    """
    saved = _check_settings(path, state, config, model_config)
    recorded = state.get("inputs")
    if isinstance(recorded, dict):
        for kind in ("node_features", "edge_features"):
            was, now = recorded.get(kind), inputs.get(kind)
            if was is not None and now is not None and list(was) != list(now):
                raise DomainparError(
                    f"{_head(path)} the training graphs' {kind.replace('_', ' ')} are {list(now)} here and {list(was)} in the "
                    "checkpoint; resume on the graphs the run was trained on"
                )
        if recorded.get("num_events") != inputs["num_events"] or recorded.get("digest") != inputs["digest"]:
            raise DomainparError(
                f"{_head(path)} --data holds {inputs['num_events']} training events (content digest {inputs['digest'][:12]}…) and "
                f"the checkpoint was trained on {recorded.get('num_events')} (digest {str(recorded.get('digest'))[:12]}…); the "
                "event order and the weights depend on them: resume on the same training events, or train into a new --out"
            )
    _check_schedule(path, state, saved, config, total_steps)


def resume_candidate(config: TrainConfig) -> Path | None:
    """The checkpoint a run would resume from, as rank 0 chooses it: ``--resume-from``, else the newest in ``--out``."""
    if config.run.resume_from is not None:
        return Path(config.run.resume_from)
    if config.run.resume:
        return latest_checkpoint(checkpoint_dir(Path(config.run.out)))
    return None


def agreed_checkpoint(config: TrainConfig, out: Path, layout: Layout) -> tuple[Path | None, dict[str, Any] | None, str | None]:
    """The checkpoint every rank resumes from, chosen by rank 0 (None if the run does not resume).

    Only rank 0 lists ``checkpoints/`` (or takes ``--resume-from``): a file
    system that shows a new file to some ranks later than to others would
    otherwise let them resume from different steps. It sends the path and
    the content digest of what it loaded; every other rank loads that path
    and refuses a file whose digest differs.

    Returns:
        (path, state, digest): ``state`` is loaded and verified on every rank that gets a path.
    """
    if config.run.resume_from is None and not config.run.resume:
        return None, None, None
    choice: tuple[str | None, str | None] = (None, None)
    state = None
    if layout.is_main:
        path = resume_candidate(config)
        if path is not None:
            state = load_checkpoint(path)
            choice = (str(path), state[DIGEST_KEY])
    path_text, digest = broadcast_object(choice, layout.world_group)
    if path_text is None:
        return None, None, None
    path = Path(path_text)
    if state is None:
        state = load_checkpoint(path, digest)
    return path, state, digest


def resumed_lr_replicas(state: dict[str, Any], step: int, total_steps: int, config: TrainConfig, replicas_now: int) -> tuple[int, str | None]:
    """The replica count the learning rate stays scaled for after a resume, and what to tell the user.

    The checkpoint's scaling is kept unless ``--rescale-lr-on-resume``; with ``--lr-scaling none``
    the count does not matter.

    Returns:
        (replica count for :func:`~domainpar.train.schedule.learning_rate`, note or None when nothing changed).
    """
    saved_replicas = int(state.get("schedule", {}).get("num_replicas", replicas_now))
    if saved_replicas == replicas_now:
        return replicas_now, None
    o = config.optim
    keep_lr = learning_rate(step, total_steps, o, saved_replicas)
    new_lr = learning_rate(step, total_steps, o, replicas_now)
    head = f"resuming step {step} on {replicas_now} replica(s) (checkpoint: {saved_replicas}); "
    if o.lr_scaling == "none":
        return replicas_now, head + f"--lr-scaling none, so the learning rate is unchanged ({keep_lr:.6g})"
    if o.rescale_lr_on_resume:
        return replicas_now, head + (
            f"--lr-scaling {o.lr_scaling} with --rescale-lr-on-resume: learning rate {new_lr:.6g} "
            f"(peak {o.lr:g} x {replica_scale(o.lr_scaling, replicas_now):g}), was {keep_lr:.6g}"
        )
    return saved_replicas, head + (
        f"--lr-scaling {o.lr_scaling}: keeping the checkpoint's learning rate {keep_lr:.6g} "
        f"(peak {o.lr:g} x {replica_scale(o.lr_scaling, saved_replicas):g}); "
        f"--rescale-lr-on-resume would use {new_lr:.6g}"
    )


__all__ = [
    "Progress",
    "RESUME_ELASTIC",
    "agreed_checkpoint",
    "check_resume",
    "check_resume_early",
    "resume_candidate",
    "checkpoint_state",
    "model_weights",
    "new_epoch_state",
    "restore",
    "resumed_lr_replicas",
    "training_inputs",
]

"""A run's resumable state: its position, what a checkpoint of it holds, and how a resume restores it.

Every rank ends each step with the same weights, optimiser state and
position, so the checkpoint rank 0 writes serves any number of ranks on resume
(:mod:`domainpar.train.checkpoint` owns the file format; this module owns what
goes into it). On resume only rank 0 chooses the file and every rank loads
that one (:func:`agreed_checkpoint`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from domainpar.comm.collectives import broadcast_object
from domainpar.comm.groups import Layout
from domainpar.errors import DomainparError
from domainpar.train.checkpoint import (
    CHECKPOINT_FORMAT_VERSION,
    DIGEST_KEY,
    checkpoint_dir,
    latest_checkpoint,
    load_checkpoint,
    rng_state,
    set_rng_state,
)
from domainpar.train.config import TrainConfig, config_from_dict
from domainpar.train.schedule import learning_rate, replica_scale


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
    graph: dict | None = None,
) -> dict[str, Any]:
    """Everything a resume needs (the layout is :mod:`domainpar.train.checkpoint`'s table)."""
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
        "world_size": layout.world_size,
        "domain_size": layout.domain_size,
        # How the training graphs were built (features, cuts, edge filter): inference and export rebuild the same graph.
        **({"graph": dict(graph)} if graph is not None else {}),
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
    saved = config_from_dict(state["config"], source=f"{path}: config")
    if saved.optim.batch_events != config.optim.batch_events:
        raise DomainparError(
            f"{path}: resuming needs the same --batch-events as the checkpoint ({saved.optim.batch_events}, "
            f"got {config.optim.batch_events}), or the event order changes"
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
        path = Path(config.run.resume_from) if config.run.resume_from is not None else latest_checkpoint(checkpoint_dir(out))
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
    "agreed_checkpoint",
    "checkpoint_state",
    "model_weights",
    "new_epoch_state",
    "restore",
    "resumed_lr_replicas",
]

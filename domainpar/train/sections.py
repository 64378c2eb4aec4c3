"""The sections of a training configuration that training owns: ``data``, ``optim``, ``parallel`` and ``run``.

Frozen dataclasses whose fields are YAML keys (``optim.lr``) and flags, documented by their field docstrings;
the domains of their numeric fields (:data:`FIELD_DOMAINS`) and the fixed values of some (:data:`FIELD_CHOICES`)
are written once here, checked alike by the dataclasses (a config file) and by click (a flag).
:class:`~domainpar.train.config.TrainConfig` joins them with the model's own ``model`` and ``loss`` sections.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from domainpar.domains import FLOAT32_MAX, LOSS_WEIGHT_WHY, MAX_LOSS_WEIGHT, MAX_TIMEOUT_S, Domain, check_domains
from domainpar.errors import DomainparError, FieldError, shorten
from domainpar.kernels import compile as compiler
from domainpar.model.config import ACTIVATIONS
from domainpar.model.loss import LOSS_DOMAINS
from domainpar.tracks.methods import DEFAULT_METHOD as DEFAULT_TRACK_METHOD
from domainpar.tracks.methods import METHODS as TRACK_METHODS

MODES = ("domain", "sectors", "single")
PRECISIONS = ("fp32", "bf16", "fp64")
METHODS = ("metis", "geometric")
SCHEDULES = ("cosine", "step", "constant")
LR_SCALINGS = ("none", "linear", "sqrt")
DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class DataConfig:
    """Where events come from and how they are split."""

    train: str = ""
    """Directory (or file) of training graphs (*.npz, or PyG *.pyg/*.pt of Exa.TrkX/acorn), or of raw TrackML events (built or converted once into <out>/graphs)."""
    val: str | None = None
    """Validation graphs or raw events; None validates on the training events."""
    plans: str | None = None
    """Output directory of `domainpar partition` (one plan directory of part files per event); None: each event is partitioned once, before training, into <out>/plans."""
    method: str = "metis"
    """Partitioner of the plans made before training when no plans are given (domain mode): metis or geometric."""
    prefetch: int = 2
    """Events whose parts are read and staged (pinned, copied to the GPU) in the background ahead of the step that needs them (0 = read when needed)."""
    cache_gb: float = 2.0
    """Host memory per rank, GB, for parts kept between epochs (0 = none; a part of a full event at 4 parts is ~20 MB, 4 ranks per node hold 4x this)."""
    workers: int | None = None
    """Processes per rank that build graphs and partition events before training (None: the cores available, shared by the ranks of a node)."""

    def __post_init__(self) -> None:
        check_section(self, "data")


@dataclass(frozen=True)
class OptimConfig:
    """Loss, optimiser and learning-rate schedule."""

    lr: float = 1e-3
    """Base learning rate (before replica scaling)."""
    weight_decay: float = 0.01
    """AdamW decoupled weight decay."""
    beta1: float = 0.9
    """AdamW first-moment decay."""
    beta2: float = 0.999
    """AdamW second-moment decay."""
    eps: float = 1e-8
    """AdamW epsilon."""
    clip: float = 1.0
    """Clip gradients to this global L2 norm (0 = no clipping)."""
    pos_weight: float = 1.0
    """Weight of true edges in the binary cross-entropy."""
    batch_events: int | None = None
    """Events per optimiser step over the whole world (global batch), a multiple of the number of replicas (None: one event per replica, or the resumed run's batch)."""
    schedule: str = "cosine"
    """Learning-rate schedule after warm-up: cosine, step or constant."""
    warmup: int = 0
    """Linear warm-up steps from lr/warmup to lr."""
    min_lr_ratio: float = 0.0
    """Cosine floor as a fraction of the peak learning rate."""
    step_size: int = 100
    """Step schedule: multiply the rate by gamma every step_size steps."""
    gamma: float = 0.5
    """Step schedule decay factor."""
    lr_scaling: str = "none"
    """Scale lr with the number of data-parallel replicas: none, linear or sqrt."""
    rescale_lr_on_resume: bool = False
    """On a resume with another replica count under linear/sqrt scaling, rescale lr to the new count (False: keep the checkpoint's)."""

    def __post_init__(self) -> None:
        check_section(self, "optim")
        decay = _number_or_none(self.lr) and _number_or_none(self.weight_decay)
        if decay and self.lr * self.weight_decay >= 1:
            raise FieldError(
                "weight_decay",
                f"times the learning rate must be below 1 (got {shorten(self.weight_decay)} x lr {shorten(self.lr)}): AdamW "
                "multiplies every weight by 1 - lr x weight_decay per step",
            )


@dataclass(frozen=True)
class ParallelConfig:
    """Process layout."""

    mode: str = "domain"
    """domain (events split over G ranks with halo exchange), sectors (naive, no halo) or single (one process)."""
    ranks: int = 1
    """Local processes to spawn, also inside a Slurm batch script; under torchrun or an srun step the launcher sets the world size (a --ranks flag that differs is refused, a config value ignored)."""
    domain_size: int | None = None
    """Ranks per domain group G (default: the whole world); world_size / G replicas train on different events."""
    timeout_s: float = 300.0
    """Process-group timeout: a dead or stuck rank makes the others fail after at most this long."""
    heartbeat_s: float = 30.0
    """A rank silent for this many seconds is declared dead (ranks on one host are also checked by pid every second)."""
    device: str = "auto"
    """auto (CUDA when available), cpu or cuda; CUDA uses NCCL with one GPU per local rank, CPU uses gloo."""
    threads: int | None = None
    """torch intra-op threads per rank (None: torch's default for one process, cores / ranks for spawned ranks)."""
    skip_locality_check: bool = False
    """Skip the check that a model which is not a built-in is local (its outputs and gradients on a 2-4 part slice of the first graph equal one process's; docs/models.md), run before the first step of domain mode: for a model checked with `domainpar verify`."""

    def __post_init__(self) -> None:
        check_section(self, "parallel")


@dataclass(frozen=True)
class RunConfig:
    """Length, outputs, checkpoints, precision and memory options."""

    out: str = "runs/train"
    """Output directory: checkpoints, metrics.jsonl, curves.png, model.pt."""
    epochs: int = 1
    """Passes over the training events."""
    max_steps: int | None = None
    """Length of the run in optimiser steps, when shorter than its epochs (None = all epochs): the learning-rate schedule is fitted to it and ends there, so a run cut by --max-steps is complete (to pause one, see --stop-after-steps)."""
    stop_after_steps: int | None = None
    """Pause after this many optimiser steps in total: a checkpoint is written and the run stops with its schedule still spanning all --epochs (or --max-steps); --resume continues it exactly (None: run to the end)."""
    seed: int = 0
    """Seed of weights, sampling and every RNG."""
    precision: str = "fp32"
    """fp32, bf16 (autocast on CUDA, reductions in fp32; refused on CPU) or fp64 (verification)."""
    offload: bool = False
    """Keep saved activations in host memory (torch.autograd.graph.save_on_cpu)."""
    checkpoint_every: int = 0
    """Also write a checkpoint every N optimiser steps (0 = only at epoch ends)."""
    checkpoint_every_epochs: int = 1
    """Write a checkpoint every N epochs (the last epoch always gets one)."""
    keep: int = 3
    """Checkpoints kept in <out>/checkpoints (oldest deleted first)."""
    resume: bool = False
    """Continue from the newest checkpoint in <out>/checkpoints."""
    resume_from: str | None = None
    """Continue from this checkpoint file instead."""
    threshold: float = 0.5
    """Score threshold for efficiency and purity."""
    track_method: str = DEFAULT_TRACK_METHOD
    """Track builder of the trained model (recorded in its checkpoint: evaluate and reconstruct build tracks with it)."""
    track_settings: dict = field(default_factory=dict, hash=False)
    """Its other settings (fields of domainpar.tracks.config.TrackConfig, e.g. window=8), recorded like it."""
    tensorboard: bool = False
    """Also write TensorBoard scalars to <out>/tensorboard (needs the tensorboard package)."""
    progress: bool = True
    """Rank 0 shows a progress bar."""
    curves: bool = True
    """Rank 0 redraws <out>/curves.png after every epoch."""

    def __post_init__(self) -> None:
        check_section(self, "run")
        if self.track_settings:
            from domainpar.tracks.config import recorded_tracks  # tracks imports no training code
            try:
                recorded_tracks(self.track_method, self.threshold, self.track_settings)
            except DomainparError as exc:
                raise FieldError("track_settings", f"must hold track builder settings: {exc}") from None


#: Fields with a fixed set of values (checked by :func:`~domainpar.train.config.validate_config` and the dataclasses;
#: shown in ``--help``).
FIELD_CHOICES = {
    "data.method": METHODS,
    "model.activation": tuple(sorted(ACTIVATIONS)),
    "model.compile": compiler.SETTINGS,
    "optim.schedule": SCHEDULES,
    "optim.lr_scaling": LR_SCALINGS,
    "parallel.mode": MODES,
    "parallel.device": DEVICES,
    "run.precision": PRECISIONS,
    "run.track_method": TRACK_METHODS,
}

#: Largest learning rate (also once scaled for the replicas): AdamW moves every weight by about lr per step.
MAX_LR = 10.0

#: Numeric fields and their domains: checked by the dataclasses (config files) and by click (flags) alike.
FIELD_DOMAINS = {
    "data.prefetch": Domain(0, 1024, why="events staged ahead of the step that needs them"),
    "data.cache_gb": Domain(0, 1e6, why="GB of host memory per rank"),
    "data.workers": Domain(1, None),
    "optim.lr": Domain(0, MAX_LR, low_open=True, why="AdamW moves every weight by about lr per step"),
    "optim.weight_decay": Domain(0, FLOAT32_MAX),
    "optim.beta1": Domain(0, 1, high_open=True, why="AdamW's moment decay"),
    "optim.beta2": Domain(0, 1, high_open=True, why="AdamW's moment decay"),
    "optim.eps": Domain(0, 1, low_open=True, why="AdamW divides by sqrt(v) + eps"),
    "optim.clip": Domain(0, FLOAT32_MAX, why="0 turns clipping off"),
    "optim.pos_weight": Domain(0, MAX_LOSS_WEIGHT, low_open=True, why=LOSS_WEIGHT_WHY),
    "optim.batch_events": Domain(1, None),
    "optim.warmup": Domain(0, None),
    "optim.min_lr_ratio": Domain(0, 1),
    "optim.step_size": Domain(1, None),
    "optim.gamma": Domain(0, 1, low_open=True),
    "parallel.ranks": Domain(1, None),
    "parallel.domain_size": Domain(1, None),
    "parallel.timeout_s": Domain(0, MAX_TIMEOUT_S, low_open=True, why="seconds, at most 30 days"),
    "parallel.heartbeat_s": Domain(2, 86400, why="seconds; ranks beat once a second"),
    "parallel.threads": Domain(1, None),
    "run.epochs": Domain(1, None),
    "run.max_steps": Domain(1, None),
    "run.stop_after_steps": Domain(1, None),
    "run.seed": Domain(0, 2**63, high_open=True),
    "run.checkpoint_every": Domain(0, None),
    "run.checkpoint_every_epochs": Domain(1, None),
    "run.keep": Domain(1, None),
    "run.threshold": Domain(0, 1, low_open=True, high_open=True, why="a probability cut"),
}


def section_domains(section: str) -> dict[str, Domain]:
    """``{field: domain}`` of one section of the config (the loss's own, :data:`~domainpar.model.loss.LOSS_DOMAINS`)."""
    if section == "loss":
        return dict(LOSS_DOMAINS)
    return {dotted.partition(".")[2]: d for dotted, d in FIELD_DOMAINS.items() if dotted.startswith(section + ".")}


def check_section(instance: Any, section: str) -> None:
    """The numeric fields of a config section must lie in their domains (raises FieldError naming the field)."""
    check_domains(instance, section_domains(section))


def _number_or_none(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


__all__ = [
    "DEVICES", "FIELD_CHOICES", "FIELD_DOMAINS", "LR_SCALINGS", "MAX_LR", "METHODS", "MODES", "PRECISIONS", "SCHEDULES",
    "TRACK_METHODS", "DataConfig", "OptimConfig", "ParallelConfig", "RunConfig", "check_section", "section_domains",
]

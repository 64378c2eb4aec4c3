"""Training configuration: frozen dataclasses, YAML loading, CLI overrides, validation.

A :class:`TrainConfig` has six sections (``data``, ``model``, ``optim``,
``loss``, ``parallel``, ``run``) that map one-to-one onto the sections of a YAML file
(see ``examples/train_default.yaml``); ``model`` is the model's own
:class:`~domainpar.model.config.ModelConfig` (a name from the registry, shared
settings, the model's options) and ``loss`` the loss's
:class:`~domainpar.model.loss.LossConfig`. Every field is one
YAML key (``optim.lr``) and one command-line flag (:func:`flag_name`, generated
by ``domainpar/cli/options.py`` from these dataclasses and their field
docstrings), so a new field needs one edit here. Everything that can be checked
before any process starts is checked by :func:`validate_config`, which raises
one :class:`~domainpar.errors.DomainparError` line per mistake.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

import torch
import yaml

from domainpar.atomic import atomic_path
from domainpar.domains import FLOAT32_MAX, LOSS_WEIGHT_WHY, MAX_LOSS_WEIGHT, MAX_TIMEOUT_S, Domain, check_domains
from domainpar.errors import DomainparError, FieldError, not_a_file, one_line, shorten
from domainpar.kernels import compile as compiler
from domainpar.model.config import ACTIVATIONS, ModelConfig
from domainpar.model.loss import LOSS_DOMAINS, LossConfig
from domainpar.model.registry import build_model, check_config
from domainpar.parsing import MAX_BYTES, parse_yaml
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
    tensorboard: bool = False
    """Also write TensorBoard scalars to <out>/tensorboard (needs the tensorboard package)."""
    progress: bool = True
    """Rank 0 shows a progress bar."""
    curves: bool = True
    """Rank 0 redraws <out>/curves.png after every epoch."""

    def __post_init__(self) -> None:
        check_section(self, "run")


@dataclass(frozen=True)
class TrainConfig:
    """Everything a training run needs; serialisable to and from YAML."""

    data: DataConfig = field(default_factory=DataConfig)
    """Event sources."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The model: its name, shared settings and options (:class:`ModelConfig`; feature widths are taken from the graphs)."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Loss and optimiser."""
    loss: LossConfig = field(default_factory=LossConfig)
    """Target particles and edge weights of the loss (default: optim.pos_weight, today's loss)."""
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    """Process layout."""
    run: RunConfig = field(default_factory=RunConfig)
    """Outputs and run options."""

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Nested plain dict (YAML- and checkpoint-safe: only str/int/float/bool/None), without derived fields."""
        nested = dataclasses.asdict(self)
        for dotted in DERIVED_FIELDS:
            section, _, name = dotted.partition(".")
            nested[section].pop(name, None)
        return nested

    def replace(self, **dotted: Any) -> "TrainConfig":
        """A copy with fields overridden by dotted name, e.g. ``replace(**{"optim.lr": 0.01})``."""
        return apply_overrides(self, dotted, source="override")


#: Config section name → its dataclass (YAML sections and dotted field names).
SECTION_TYPES = {
    "data": DataConfig,
    "model": ModelConfig,
    "optim": OptimConfig,
    "loss": LossConfig,
    "parallel": ParallelConfig,
    "run": RunConfig,
}


#: Fields with a fixed set of values (checked by :func:`validate_config` and the dataclasses; shown in ``--help``).
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


#: Fields whose flag is not ``--<field-name>`` (kept for the flags users know).
FLAG_NAMES = {
    "data.train": "--data",
    "model.name": "--model",
    "model.options": "--model-option",
    "model.num_iterations": "--iterations",
    "parallel.timeout_s": "--timeout",
    "parallel.heartbeat_s": "--heartbeat",
}
#: Fields set from the data, never from a config file or flag.
DERIVED_FIELDS = {
    "model.node_features": "the graphs' node feature width",
    "model.edge_features": "the graphs' edge feature width",
}


def flag_name(dotted: str) -> str:
    """The command-line flag of a config field, e.g. ``optim.pos_weight`` → ``--pos-weight``."""
    return FLAG_NAMES.get(dotted) or "--" + dotted.partition(".")[2].replace("_", "-")


class SettingError(DomainparError):
    """A setting refused for what it means in this run (not for its own range), named by its flag.

    The value may have come from a YAML file rather than the command line: the command, which knows which,
    names the file's key instead (``run.yaml: optim.warmup must be …``).

    Args:
        dotted: the field's dotted name (e.g. ``"optim.warmup"``).
        message: what was expected and found, without the field's name.
    """

    def __init__(self, dotted: str, message: str) -> None:
        super().__init__(f"{flag_name(dotted)} {message}")
        self.dotted = dotted
        self.message = message


def _display_name(dotted: str, source: str) -> str:
    """How an error names a field: its flag on the command line, its dotted key in a file."""
    if dotted.startswith("model.options.") and source == "command line":
        return f"--model-option {dotted[len('model.options.'):]}"
    return flag_name(dotted) if source == "command line" else dotted


#: Keys of earlier versions and what replaced them (a clear line instead of "unknown key").
_REPLACED = {
    "data.cache_events": "use data.cache_gb, the host memory per rank for cached parts in GB (0 turns the cache off); "
    "a count of events bounded nothing (a full event is ~130 MB)",
}


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls)}


#: Integer fields are stored as signed 64-bit values (torch, numpy, checkpoints).
INT_LIMIT = 2**63 - 1
#: Largest model width accepted (a 65536-wide network has 6e10 parameters).
MAX_HIDDEN = 65536
#: Most message-passing iterations accepted.
MAX_ITERATIONS = 1024
#: Most linear layers per MLP accepted.
MAX_MLP_LAYERS = 64


def _coerce(value: Any, annotation: Any, name: str, source: str) -> Any:
    """Convert a YAML/CLI value to the field's type, or raise one clear line.

    Numbers must be finite (``inf`` and ``nan`` are never a valid setting: a
    timeout of ``inf`` is not "no timeout" to torch) and integers must fit 64
    bits; echoed values are shortened (:func:`~domainpar.errors.shorten`).
    """
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in options:
                return None
        inner = [t for t in options if t is not type(None)]
        return _coerce(value, inner[0], name, source)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "yes", "1", "false", "no", "0"):
            return value.lower() in ("true", "yes", "1")
        raise DomainparError(f"{source}: {name} must be true or false (got {shorten(value)})")
    if annotation is int:
        number = None
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
            number = int(value)
        elif isinstance(value, str) and len(value) < 40:
            try:
                number = int(value)
            except ValueError:
                pass
        if number is None:
            raise DomainparError(f"{source}: {name} must be an integer (got {shorten(value)})")
        if not -INT_LIMIT <= number <= INT_LIMIT:
            raise DomainparError(f"{source}: {name} must be an integer of at most 64 bits (got {shorten(number)})")
        return number
    if annotation is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:
                number = math.inf
        elif isinstance(value, str) and len(value) < 400:
            try:
                number = float(value)
            except ValueError:
                pass
        if number is None:
            raise DomainparError(f"{source}: {name} must be a number (got {shorten(value)})")
        if not math.isfinite(number):
            raise DomainparError(f"{source}: {name} must be a finite number (got {shorten(value)})")
        return number
    if annotation is str:
        if isinstance(value, (str, os.PathLike)):
            return str(value)
        raise DomainparError(f"{source}: {name} must be a string (got {shorten(value)})")
    if annotation is dict:
        return _mapping(value, name, source)
    raise TypeError(f"unsupported config field type {annotation!r} for {name}")


def _mapping(value: Any, name: str, source: str) -> dict[str, Any]:
    """A mapping field (``model.options``): a YAML mapping, or KEY=VALUE texts from the command line (each VALUE
    read as YAML, so ``3``, ``true`` and ``[sum, max]`` keep their types)."""
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise DomainparError(f"{source}: {name} must map option names to values (got {shorten(dict(value))})")
        return dict(value)
    if isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        parsed = {}
        for item in value:
            key, sep, text = item.partition("=")
            if not sep or not key.strip():
                raise DomainparError(f"{source}: {name} must be KEY=VALUE (got {shorten(item)})")
            try:
                parsed[key.strip()] = yaml.safe_load(text) if text.strip() else ""
            except yaml.YAMLError:
                parsed[key.strip()] = text
        return parsed
    raise DomainparError(f"{source}: {name} must be a mapping of option names to values (got {shorten(value)})")


def apply_overrides(config: TrainConfig, overrides: Mapping[str, Any], source: str = "override") -> TrainConfig:
    """Return ``config`` with dotted-name fields replaced (values coerced and type-checked).

    Args:
        config: the base configuration.
        overrides: ``{"section.field": value}``; values may be strings (from a CLI).
        source: named in error messages (a file name, "command line").
    """
    sections = {name: getattr(config, name) for name in SECTION_TYPES}
    changes: dict[str, dict[str, Any]] = {name: {} for name in SECTION_TYPES}
    for dotted, value in overrides.items():
        if dotted in _REPLACED:
            raise DomainparError(f"{source}: config key {dotted!r} was replaced: {_REPLACED[dotted]}")
        section, _, name = dotted.partition(".")
        if section not in SECTION_TYPES or not name:
            raise DomainparError(
                f"{source}: unknown config key {shorten(dotted)} (expected section.field with section one of {sorted(SECTION_TYPES)})"
            )
        types_ = _field_types(SECTION_TYPES[section])
        if name not in types_:
            raise DomainparError(f"{source}: unknown config key {shorten(dotted)} (expected one of {sorted(types_)} in {section})")
        if dotted in DERIVED_FIELDS:
            raise DomainparError(f"{source}: {dotted} cannot be set (it is taken from {DERIVED_FIELDS[dotted]})")
        changes[section][name] = _coerce(value, types_[name], _display_name(dotted, source), source)
    if "options" in changes["model"]:
        # Options given later add to (or change) the ones given before, like every other override.
        changes["model"]["options"] = {**sections["model"].options, **changes["model"]["options"]}
    replaced = {}
    for name in SECTION_TYPES:
        try:
            replaced[name] = dataclasses.replace(sections[name], **changes[name])
            if name == "model" and changes["model"]:
                check_config(replaced[name])  # the name resolves, its settings and options are its own
        except FieldError as exc:
            raise DomainparError(f"{source}: {_display_name(f'{name}.{exc.field}', source)} {exc.message}") from None
    return TrainConfig(**replaced)


def flatten(nested: Mapping[str, Any], source: str) -> dict[str, Any]:
    """``{"optim": {"lr": 1}}`` → ``{"optim.lr": 1}``; a non-mapping section is an error."""
    flat = {}
    for section, values in nested.items():
        if values is None:
            continue
        if not isinstance(values, Mapping):
            raise DomainparError(f"{source}: section {shorten(section)} must be a mapping of fields (got {type(values).__name__})")
        for name, value in values.items():
            flat[f"{section}.{name}"] = value
    return flat


def config_from_dict(nested: Mapping[str, Any], source: str = "config") -> TrainConfig:
    """Build a config from a nested dict (a parsed YAML file or a checkpoint's ``config``)."""
    return apply_overrides(TrainConfig(), flatten(nested, source), source=source)


def load_config(path: str | os.PathLike | None, overrides: Mapping[str, Any] | None = None) -> TrainConfig:
    """Read a YAML file (or start from defaults when ``path`` is None) and apply overrides.

    Raises:
        DomainparError: missing or malformed file, unknown key, wrong value type.
    """
    config = TrainConfig()
    if path is not None:
        path = Path(path)
        if path.is_dir():
            raise DomainparError(f"{path}: expected a YAML config file (found a directory)")
        if not path.is_file():
            raise not_a_file(path, "config file")
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise DomainparError(f"{path}: expected a YAML config file of at most {MAX_BYTES:,} bytes (got {size:,})")
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DomainparError(
                f"{path}: expected a UTF-8 YAML config file (found byte 0x{exc.object[exc.start]:02x} at position {exc.start}, "
                "not UTF-8 text)"
            ) from None
        try:
            nested = parse_yaml(text, str(path), "a YAML config file")
        except yaml.YAMLError as exc:
            raise DomainparError(f"{path}: expected a YAML config file, could not parse it ({one_line(exc, limit=200)})") from None
        if nested is None:
            nested = {}
        if not isinstance(nested, Mapping):
            raise DomainparError(f"{path}: expected a YAML mapping of sections (got {type(nested).__name__})")
        config = config_from_dict(nested, source=str(path))
    if overrides:
        config = apply_overrides(config, overrides, source="command line")
    return config


def dump_config(config: TrainConfig, path: str | os.PathLike) -> None:
    """Write ``config`` as YAML (atomically)."""
    with atomic_path(path) as tmp:
        tmp.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise DomainparError(message)


def model_parameters(model: ModelConfig) -> int:
    """Number of parameters of the model of ``model``, counted without allocating it (meta device)."""
    with torch.device("meta"):
        network = build_model(model)
    return sum(p.numel() for p in network.parameters())


def physical_memory_bytes() -> int | None:
    """This machine's physical memory, None where it cannot be read."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_model_size(model: ModelConfig, precision: str = "fp32", copies: int = 4, options: str = "--hidden/--iterations/--mlp-layers") -> None:
    """Refuse a model whose parameters alone cannot fit this machine's memory.

    Training holds ``copies`` tensors per parameter (weights, gradients and
    AdamW's two moments); a model that cannot even hold those is a typo in
    ``--hidden`` (or its friends), and would otherwise end in an allocation
    failure or the kernel's out-of-memory killer.

    Raises:
        DomainparError: naming the options, the parameter count and the memory needed.
    """
    parameters = model_parameters(model)
    needed = parameters * copies * (8 if precision == "fp64" else 4)
    memory = physical_memory_bytes()
    if memory is not None and needed > memory:
        raise DomainparError(
            f"{options}: a model of hidden size {model.hidden}, {model.num_iterations} iterations and {model.mlp_layers}-layer "
            f"MLPs would have {parameters:.3g} "
            f"parameters, {needed / 2**30:.3g} GiB with gradients and optimiser state, more than this machine's "
            f"{memory / 2**30:.3g} GiB of memory"
        )


def validate_config(config: TrainConfig, world_size: int | None = None, cuda_available: bool | None = None) -> None:
    """Check everything that can be checked before training starts.

    Args:
        config: the configuration.
        world_size: ranks that will train (None: ``parallel.ranks``, or 1 in single mode).
        cuda_available: override CUDA detection (tests).

    Raises:
        DomainparError: one line naming the first offending option.
    """
    # Model fields are validated by ModelConfig itself when the config is built.
    d, o, p, r = config.data, config.optim, config.parallel, config.run
    _require(p.mode in MODES, f"--mode must be one of {', '.join(MODES)} (got {shorten(p.mode)})")
    _require(r.precision in PRECISIONS, f"--precision must be one of {', '.join(PRECISIONS)} (got {shorten(r.precision)})")
    _require(r.track_method in TRACK_METHODS,
             f"--track-method must be one of {', '.join(TRACK_METHODS)} (got {shorten(r.track_method)})")
    _require(d.method in METHODS, f"--method must be one of {', '.join(METHODS)} (got {shorten(d.method)})")
    _require(o.schedule in SCHEDULES, f"--schedule must be one of {', '.join(SCHEDULES)} (got {shorten(o.schedule)})")
    _require(o.lr_scaling in LR_SCALINGS, f"--lr-scaling must be one of {', '.join(LR_SCALINGS)} (got {shorten(o.lr_scaling)})")
    _require(p.device in DEVICES, f"--device must be one of {', '.join(DEVICES)} (got {shorten(p.device)})")
    _require(p.ranks >= 1, f"--ranks must be at least 1 (got {p.ranks})")
    _require(p.domain_size is None or p.domain_size >= 1, f"--domain-size must be at least 1 (got {p.domain_size})")
    _require(
        not (p.mode == "single" and p.ranks > 1),
        f"--ranks must be 1 in single mode (got {p.ranks}); use --mode domain or sectors to train on several ranks",
    )
    _require(p.threads is None or p.threads >= 1, f"--threads must be at least 1 (got {p.threads})")
    # torch creates every thread asked for (100000 crashes the process): a few per core is the useful range.
    most_threads = 4 * (os.cpu_count() or 1)
    _require(
        p.threads is None or p.threads <= most_threads,
        f"--threads must be at most {most_threads} on this machine (4 per CPU core) (got {shorten(p.threads)})",
    )
    _require(p.timeout_s > 0, f"--timeout must be positive seconds (got {p.timeout_s})")
    _require(0 <= r.seed <= INT_LIMIT, f"--seed must be in [0, 2^63) (got {shorten(r.seed)})")
    m = config.model
    # Bounds far beyond any useful model, checked first so that counting the parameters stays cheap.
    for dotted, value, most in (("model.hidden", m.hidden, MAX_HIDDEN), ("model.num_iterations", m.num_iterations, MAX_ITERATIONS),
                                ("model.mlp_layers", m.mlp_layers, MAX_MLP_LAYERS)):  # fmt: skip
        _require(value <= most, f"{flag_name(dotted)} must be at most {most} (got {shorten(value)})")
    check_model_size(m, "fp64" if r.precision == "fp64" else "fp32")
    _require(
        2 <= p.heartbeat_s <= 86400,
        f"--heartbeat must be between 2 and 86400 seconds (got {p.heartbeat_s}); ranks beat once a second",
    )
    _require(r.epochs >= 1, f"--epochs must be at least 1 (got {r.epochs})")
    _require(r.max_steps is None or r.max_steps >= 1, f"--max-steps must be at least 1 (got {r.max_steps})")
    _require(r.stop_after_steps is None or r.stop_after_steps >= 1, f"--stop-after-steps must be at least 1 (got {r.stop_after_steps})")
    _require(o.lr > 0, f"--lr must be positive (got {o.lr})")
    _require(o.weight_decay >= 0, f"--weight-decay must be non-negative (got {o.weight_decay})")
    _require(0 <= o.beta1 < 1 and 0 <= o.beta2 < 1, f"AdamW betas must be in [0, 1) (got {o.beta1}, {o.beta2})")
    _require(o.clip >= 0, f"--clip must be non-negative (got {o.clip}; 0 disables clipping)")
    _require(o.pos_weight > 0, f"--pos-weight must be positive (got {o.pos_weight})")
    _require(o.batch_events is None or o.batch_events >= 1, f"--batch-events must be at least 1 (got {o.batch_events})")
    _require(o.warmup >= 0, f"--warmup must be non-negative steps (got {o.warmup})")
    _require(0 <= o.min_lr_ratio <= 1, f"min_lr_ratio must be in [0, 1] (got {o.min_lr_ratio})")
    _require(o.step_size >= 1, f"step_size must be at least 1 (got {o.step_size})")
    _require(0 < o.gamma <= 1, f"gamma must be in (0, 1] (got {o.gamma})")
    _require(r.checkpoint_every >= 0, f"--checkpoint-every must be non-negative steps (got {r.checkpoint_every})")
    _require(r.checkpoint_every_epochs >= 1, f"checkpoint_every_epochs must be at least 1 (got {r.checkpoint_every_epochs})")
    _require(r.keep >= 1, f"--keep must be at least 1 checkpoint (got {r.keep})")
    _require(0 < r.threshold < 1, f"--threshold must be in (0, 1) (got {r.threshold})")
    _require(d.prefetch >= 0, f"--prefetch must be a non-negative number of events (got {d.prefetch})")
    _require(math.isfinite(d.cache_gb) and d.cache_gb >= 0, f"--cache-gb must be a non-negative number of GB (got {d.cache_gb})")
    _require(d.workers is None or d.workers >= 1, f"--workers must be at least 1 (got {d.workers})")
    _require(bool(d.train), "--data is required: a directory of graphs (*.npz) or raw TrackML events")
    _require(Path(d.train).exists(), f"--data {d.train}: no such file or directory")
    _require(d.val is None or Path(d.val).exists(), f"--val {d.val}: no such file or directory")
    _require(d.plans is None or Path(d.plans).is_dir(), f"--plans {d.plans}: expected a directory written by `domainpar partition`")
    _require(
        r.resume_from is None or Path(r.resume_from).is_file(), f"--resume-from {r.resume_from}: checkpoint file not found"
    )
    existing = sorted((Path(r.out) / "checkpoints").glob("step-*.pt"))
    _require(
        r.resume or r.resume_from is not None or not existing,
        f"--out {r.out} already holds checkpoints (newest {existing[-1].name if existing else ''}); "
        "pass --resume to continue that run or choose another --out",
    )
    if r.tensorboard:
        _require(
            importlib.util.find_spec("torch.utils.tensorboard") is not None
            and importlib.util.find_spec("tensorboard") is not None,
            "--tensorboard needs the tensorboard package (pip install tensorboard)",
        )

    if cuda_available is None:
        cuda_available = torch.cuda.is_available()
    _require(p.device != "cuda" or cuda_available, "--device cuda requested but torch sees no CUDA device")
    on_cuda = p.device == "cuda" or (p.device == "auto" and cuda_available)
    _require(
        r.precision != "bf16" or on_cuda,
        "--precision bf16 needs a CUDA device (autocast on CPU is slow and not exact); use fp32 on CPU",
    )

    if world_size is None:
        world_size = 1 if p.mode == "single" else p.ranks
    _require(world_size >= 1, f"world size must be at least 1 (got {world_size})")
    if p.mode == "single":
        _require(world_size == 1, f"--mode single runs one process (got {world_size} ranks); use --mode domain for several")
    group = domain_size_of(config, world_size)
    _require(group >= 1, f"--domain-size must be at least 1 (got {group})")
    _require(
        world_size % group == 0,
        f"world size {world_size} must be divisible by --domain-size {group} (got remainder {world_size % group})",
    )
    replicas = world_size // group
    # The rate AdamW really uses is lr x the replica scale: the product must stay in lr's domain too.
    scale = {"linear": float(replicas), "sqrt": math.sqrt(replicas)}.get(o.lr_scaling, 1.0)
    peak = o.lr * scale
    _require(
        peak <= MAX_LR,
        f"--lr {o.lr:g} x {scale:g} (--lr-scaling {o.lr_scaling}, {replicas} replicas) = {peak:.4g} must be at most {MAX_LR:g}: "
        "AdamW moves every weight by about lr per step",
    )
    _require(
        peak * o.weight_decay < 1,
        f"--weight-decay {o.weight_decay:g} x the learning rate {peak:.4g} (--lr x the replica scale) must be below 1: AdamW "
        "multiplies every weight by 1 - lr x weight_decay per step",
    )
    _require(
        o.batch_events is None or o.batch_events % replicas == 0,
        f"--batch-events {o.batch_events} must be a multiple of the number of replicas {replicas} "
        f"(world size {world_size} / domain size {group})",
    )
    _require(
        d.plans is None or p.mode == "domain",
        f"--plans is only used in domain mode (got --mode {p.mode}); sectors and single plans are made on the fly",
    )


def domain_size_of(config: TrainConfig, world_size: int) -> int:
    """Ranks per domain group: the configured G, else the whole world (1 in single mode)."""
    if config.parallel.mode == "single":
        return 1
    return world_size if config.parallel.domain_size is None else config.parallel.domain_size

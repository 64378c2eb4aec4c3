"""Checkpoints that cannot lie: atomic, durable, checksummed, type-checked, last-K.

A checkpoint is a dict of tensors and plain containers only (no pickled
objects), so it loads with ``torch.load(weights_only=True)``:

=================  ==========================================================
``format_version`` int, :data:`CHECKPOINT_FORMAT_VERSION`
``sha256``         :func:`state_digest` of every other entry (hex, 64 characters)
``step``           optimiser steps done
``epoch``          epoch of the next step; ``step_in_epoch`` its position
``model``          model ``state_dict``
``model_config``   dict of the model's constructor arguments
``optimizer``      AdamW ``state_dict``
``schedule``       ``{"total_steps", "num_replicas", "lr"}``
``rng``            torch / numpy / python RNG states of rank 0
``epoch_state``    running sums of the epoch in progress (loss, steps, seconds, halo bytes)
``step_losses``    mean loss of every step so far
``config``         the run's :class:`~domainpar.train.config.TrainConfig` as a dict
``inputs``         the training events: ``num_events``, ``digest`` of their contents, feature names
``world_size``     ranks of the run that wrote it; ``domain_size`` ranks per domain group
``logs``           what the run's logs held when it was written: ``metrics`` (the ``metrics.jsonl``
                   records) and ``steps`` (``steps.jsonl`` as a float64 tensor, one row per step, columns
                   :data:`STEP_LOG_COLUMNS`), so a resume rebuilds a damaged log instead of skipping it
=================  ==========================================================

The final ``model.pt`` of a run has the same layout with only
``format_version``, ``sha256``, ``step``, ``model``, ``model_config``,
``config`` and ``metrics``; :func:`load_checkpoint` reads both
(``resumable=True`` demands the full set).

The checksum covers the *content* (every tensor's dtype, shape and bytes, every
key and plain value, in a canonical order), not the zip container, so a file
whose bytes were flipped anywhere that matters — weights, optimiser moments,
step counters — is refused on every load (train ``--resume``/``--resume-from``,
``evaluate``, export), while the file stays an ordinary torch file. The digest
is also the identity of a checkpoint between ranks (``expected_digest`` of
:func:`load_checkpoint`).

Files are ``<out>/checkpoints/step-00000042.pt``, written to a temporary name,
fsynced, renamed, and the directory fsynced, so a process (or machine) killed
while writing leaves the previous checkpoint intact; the temporary files such
a kill leaves are removed by :func:`remove_stale_checkpoint_temporaries` at the
start of the next run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import math
import os
import pickle
import random
import re
import time
import warnings
import zipfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from domainpar.atomic import atomic_path, fsync_directory, remove_stale_temporaries
from domainpar.errors import DomainparError, not_a_file, one_line, reraise_fault, shorten
from domainpar.model.config import ModelConfig
from domainpar.parsing import check_depth
from domainpar.train.config import config_from_dict

#: Version 2 added the ``sha256`` entry; files of version 1 (no checksum) are refused.
CHECKPOINT_FORMAT_VERSION = 2
#: Key of the content checksum inside a checkpoint dict.
DIGEST_KEY = "sha256"
#: Entries of a checkpoint that training can resume from.
REQUIRED_KEYS = ("format_version", "step", "epoch", "step_in_epoch", "model", "model_config", "optimizer", "config")
#: Entries every checkpoint (also a final ``model.pt``) has.
MODEL_KEYS = ("format_version", "model", "model_config")
#: Running sums of the epoch in progress that a resumable checkpoint records.
EPOCH_STATE_KEYS = ("loss_sum", "steps", "seconds", "halo_bytes", "events")
#: Columns of a checkpoint's ``logs.steps`` tensor (a ``steps.jsonl`` record; ``step`` is the row number + 1).
STEP_LOG_COLUMNS = ("epoch", "loss", "lr", "grad_norm", "seconds", "data_wait_seconds")
#: Sub-directory of ``checkpoints/`` where ``--resume-from`` an older checkpoint moves the newer ones.
SUPERSEDED_DIR = "superseded"

_NAME = re.compile(r"^step-(\d{8,})\.pt$")
_NAME_PATTERN = r"step-\d{8,}\.pt"


class _Unhashable(TypeError):
    """A value of a type a checkpoint may not hold."""


# ----------------------------------------------------------------------------- the checksum


def _feed(hasher, value: Any) -> None:
    """Feed ``value`` to ``hasher`` in a canonical, type-tagged, length-prefixed encoding."""
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or value.is_quantized:
            raise _Unhashable(f"tensor of layout {value.layout}")
        tensor = value.detach().cpu().resolve_conj().resolve_neg().contiguous().reshape(-1)
        header = f"T{str(value.dtype)}{tuple(value.shape)}".encode()
        hasher.update(len(header).to_bytes(4, "little") + header)
        hasher.update((tensor.numel() * tensor.element_size()).to_bytes(8, "little"))
        if tensor.numel():
            hasher.update(tensor.view(torch.uint8).numpy())
    elif isinstance(value, dict):
        try:
            keys = sorted(value, key=lambda k: (type(k).__name__, repr(k)))
        except Exception as exc:  # noqa: BLE001 - a key whose repr fails is not plain data
            raise _Unhashable(f"dict key ({type(exc).__name__})") from None
        hasher.update(b"d" + len(keys).to_bytes(8, "little"))
        for key in keys:
            _feed(hasher, key)
            _feed(hasher, value[key])
    elif isinstance(value, (list, tuple)):
        hasher.update((b"l" if isinstance(value, list) else b"t") + len(value).to_bytes(8, "little"))
        for item in value:
            _feed(hasher, item)
    elif isinstance(value, bool):
        hasher.update(b"?1" if value else b"?0")
    elif isinstance(value, int):
        text = str(value).encode()
        hasher.update(b"i" + len(text).to_bytes(4, "little") + text)
    elif isinstance(value, float):
        text = value.hex().encode()
        hasher.update(b"f" + len(text).to_bytes(4, "little") + text)
    elif isinstance(value, str):
        text = value.encode("utf-8", "surrogatepass")
        hasher.update(b"s" + len(text).to_bytes(8, "little") + text)
    elif isinstance(value, (bytes, bytearray)):
        hasher.update(b"b" + len(value).to_bytes(8, "little") + bytes(value))
    elif value is None:
        hasher.update(b"n")
    elif isinstance(value, (torch.dtype, torch.device, torch.Size)):
        text = str(value).encode()
        hasher.update(b"o" + len(text).to_bytes(4, "little") + text)
    else:
        raise _Unhashable(type(value).__name__)


def state_digest(state: dict[str, Any]) -> str:
    """SHA-256 of a checkpoint's content (every entry but :data:`DIGEST_KEY`), as 64 hex digits.

    Independent of dict order and of where tensors live (CPU or GPU); two
    states with equal digests have bitwise equal tensors and equal plain values.

    Raises:
        TypeError: ``state`` holds something a checkpoint may not (an arbitrary object).
    """
    hasher = hashlib.sha256()
    _feed(hasher, {k: v for k, v in state.items() if k != DIGEST_KEY})
    return hasher.hexdigest()


def seal_state(state: dict[str, Any]) -> dict[str, Any]:
    """A shallow copy of ``state`` carrying its :func:`state_digest` under :data:`DIGEST_KEY`."""
    sealed = {k: v for k, v in state.items() if k != DIGEST_KEY}
    sealed[DIGEST_KEY] = state_digest(sealed)
    return sealed


# ----------------------------------------------------------------------------- writing


def write_checkpoint(state: dict[str, Any], path: str | os.PathLike) -> str:
    """Seal ``state`` and write it to ``path`` atomically and durably; return its digest.

    Args:
        state: a checkpoint dict (tensors and plain containers only).
        path: the destination (``step-*.pt`` or ``model.pt``).
    """
    sealed = seal_state(state)
    # Serialised in memory and written by Python: torch's C++ file writer turns a full disk or a file-size
    # limit into an opaque RuntimeError (or an abort); a Python write raises OSError(ENOSPC/EFBIG) naming the file.
    buffer = io.BytesIO()
    torch.save(sealed, buffer)
    with atomic_path(path, durable=True) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(buffer.getbuffer())
    return sealed[DIGEST_KEY]


def checkpoint_dir(out: str | os.PathLike) -> Path:
    """Directory of a run's checkpoints."""
    return Path(out) / "checkpoints"


def checkpoint_step(path: str | os.PathLike) -> int | None:
    """The step in a checkpoint file name (``step-00000042.pt`` → 42), None for any other name."""
    match = _NAME.match(Path(path).name)
    return None if match is None else int(match.group(1))


def checkpoint_files(directory: str | os.PathLike) -> list[Path]:
    """Complete checkpoint files in ``directory``, oldest (fewest steps) first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _NAME.match(p.name)) and p.is_file()]
    return [p for _, p in sorted(found)]


def latest_checkpoint(directory: str | os.PathLike) -> Path | None:
    """Newest checkpoint in ``directory`` or None."""
    files = checkpoint_files(directory)
    return files[-1] if files else None


def save_checkpoint(state: dict[str, Any], directory: str | os.PathLike, keep: int) -> Path:
    """Write ``state`` as ``step-<step>.pt`` (sealed, atomic, durable) and delete all but the newest ``keep``.

    Args:
        state: the checkpoint dict (tensors and plain containers only).
        directory: the run's checkpoint directory.
        keep: checkpoints to keep (>= 1).
    """
    path = Path(directory) / f"step-{int(state['step']):08d}.pt"
    write_checkpoint(state, path)
    for old in checkpoint_files(directory)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def remove_stale_checkpoint_temporaries(out: str | os.PathLike) -> list[Path]:
    """Delete what writers killed mid-write left in a run directory: ``checkpoints/.step-*.pt.tmp-*``, and
    ``.model.pt.tmp-*``, ``.metrics.jsonl.tmp-*`` ... beside them. Call it on the one writer of ``out`` at start."""
    out = Path(out)
    removed = remove_stale_temporaries(checkpoint_dir(out), _NAME_PATTERN)
    removed += remove_stale_temporaries(out, r"model\.pt|config\.yaml|metrics\.jsonl|steps\.jsonl|curves\.png")
    return removed


def retire_newer_checkpoints(directory: str | os.PathLike, step: int, resumed: str | os.PathLike | None = None) -> list[Path]:
    """Move the checkpoints a resume from ``step`` would contradict into ``superseded/<time>-from-step-<step>/``.

    Resuming from an older checkpoint starts a new history from ``step``; the
    files of the old history beyond it (and one at ``step`` itself when the
    resumed file is another one) would otherwise be taken for the newest state
    by a later ``--resume``. They are moved aside, never deleted.

    Args:
        directory: the run's checkpoint directory.
        step: the step being resumed from.
        resumed: the file being resumed (never moved).

    Returns:
        The new paths of the moved files (empty when nothing was newer).
    """
    directory = Path(directory)
    resumed_path = None if resumed is None else Path(resumed).resolve()
    newer = []
    for path in checkpoint_files(directory):
        file_step = checkpoint_step(path)
        if path.resolve() == resumed_path:
            continue
        if file_step > step or (file_step == step and resumed_path is not None):
            newer.append(path)
    if not newer:
        return []
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    target = directory / SUPERSEDED_DIR / f"{stamp}-from-step-{step:08d}"
    suffix = 1
    while target.exists():
        suffix += 1
        target = directory / SUPERSEDED_DIR / f"{stamp}-from-step-{step:08d}-{suffix}"
    target.mkdir(parents=True)
    moved = []
    for path in newer:
        destination = target / path.name
        os.replace(path, destination)
        moved.append(destination)
    fsync_directory(target)
    fsync_directory(directory)
    return moved


# ----------------------------------------------------------------------------- reading


def read_checkpoint_file(path: str | os.PathLike, advice: str = "") -> Any:
    """``torch.load(path, weights_only=True)`` on CPU, any failure to read the file as one line.

    A checkpoint is a user-supplied file: whatever torch raises while reading
    it (a truncated zip, a text file, a pickle with objects) means "this is
    not a readable checkpoint", so every ``Exception`` becomes a DomainparError.
    No checksum or field is checked here; use :func:`load_checkpoint`.

    Args:
        path: the checkpoint file.
        advice: appended to the message (e.g. what to do about it).

    Raises:
        DomainparError: missing, truncated, corrupted or not a torch file of plain containers.
    """
    path = Path(path)
    if path.is_dir():
        raise DomainparError(f"{path}: expected a checkpoint file (found a directory)")
    if not path.is_file():
        raise not_a_file(path, "checkpoint file")
    try:
        # torch warns about the pickle protocol of a foreign file before refusing it: the refusal is the one line.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        reason = "not a torch file of tensors and plain containers"
    except KeyError:
        # torch's legacy reader fails on an unknown magic number with a bare KeyError.
        reason = "not a torch file"
    except (zipfile.BadZipFile, EOFError):
        reason = "corrupted or truncated"
    except PermissionError:
        reason = "permission denied"
    except Exception as exc:  # noqa: BLE001 - any reader failure is a bad file, not a bug of ours
        reraise_fault(exc)  # out of memory or an I/O error of the machine is not a damaged file
        reason = f"corrupted or truncated: {one_line(exc, limit=160)}"
    raise DomainparError(f"{path}: expected a domainpar checkpoint, could not load it ({reason}){advice}")


def _kind(value: Any) -> str:
    return "bool" if isinstance(value, bool) else type(value).__name__


def _fail(path: Path, key: str, expected: str, value: Any) -> DomainparError:
    return DomainparError(f"{path}: checkpoint entry {key!r} must be {expected} (got {_kind(value)} {shorten(value)})")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check(path: Path, state: dict, key: str, ok: Callable[[Any], bool], expected: str, required: bool) -> None:
    if key not in state:
        if required:
            raise DomainparError(f"{path}: checkpoint is missing entry {key!r} (expected {expected})")
        return
    if not ok(state[key]):
        raise _fail(path, key, expected, state[key])


def _tensor_dict(value: Any) -> bool:
    return isinstance(value, dict) and bool(value) and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items())


def _optimizer_state(value: Any) -> bool:
    if not isinstance(value, dict) or not isinstance(value.get("state"), dict) or not isinstance(value.get("param_groups"), list):
        return False
    groups_ok = all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in value["param_groups"])
    states_ok = all(isinstance(s, dict) and all(isinstance(t, (torch.Tensor, int, float)) for t in s.values()) for s in value["state"].values())
    return groups_ok and states_ok


def _rng_state(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    torch_state = value.get("torch")
    numpy_state = value.get("numpy")
    python_state = value.get("python")
    if not (isinstance(torch_state, torch.Tensor) and torch_state.dtype == torch.uint8 and torch_state.dim() == 1):
        return False
    if not (
        isinstance(numpy_state, dict)
        and isinstance(numpy_state.get("kind"), str)
        and isinstance(numpy_state.get("keys"), torch.Tensor)
        and numpy_state["keys"].shape == (624,)
        and not numpy_state["keys"].is_floating_point()
        and _is_int(numpy_state.get("pos"))
        and _is_int(numpy_state.get("has_gauss"))
        and _is_number(numpy_state.get("cached"))
    ):
        return False
    if not (
        isinstance(python_state, dict)
        and _is_int(python_state.get("version"))
        and isinstance(python_state.get("internal"), (list, tuple))
        and len(python_state["internal"]) == 625
        and all(_is_int(v) for v in python_state["internal"])
        and (python_state.get("gauss_next") is None or _is_number(python_state.get("gauss_next")))
    ):
        return False
    cuda = value.get("cuda")
    return cuda is None or (isinstance(cuda, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in cuda))


def _graph_metadata(value: Any) -> bool:
    names_ok = lambda v: v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v))  # noqa: E731
    return (
        isinstance(value, dict)
        and names_ok(value.get("node_features"))
        and names_ok(value.get("edge_features"))
        and (value.get("build_config") is None or isinstance(value.get("build_config"), str))
    )


def _inputs_record(value: Any) -> bool:
    if value is None:
        return True
    names_ok = lambda v: v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v))  # noqa: E731
    return (
        isinstance(value, dict)
        and _is_int(value.get("num_events"))
        and isinstance(value.get("digest"), str)
        and names_ok(value.get("node_features"))
        and names_ok(value.get("edge_features"))
    )


def _finite_number_dict(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and _is_number(v) and math.isfinite(v) for k, v in value.items())


def _plain(value: Any, depth: int = 0) -> bool:
    """JSON-like: numbers, strings, booleans, None, and lists/dicts of them (a log record)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if depth > 4:
        return False
    if isinstance(value, list):
        return all(_plain(v, depth + 1) for v in value)
    return isinstance(value, dict) and all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())


def _logs_record(value: Any) -> bool:
    if not isinstance(value, dict) or not isinstance(value.get("metrics"), list):
        return False
    steps = value.get("steps")
    metrics_ok = all(isinstance(r, dict) and _plain(r) and _is_int(r.get("epoch")) and r["epoch"] >= 1 for r in value["metrics"])
    steps_ok = (
        isinstance(steps, torch.Tensor) and steps.dtype == torch.float64 and steps.dim() == 2
        and steps.shape[1] == len(STEP_LOG_COLUMNS)
    )  # fmt: skip
    return metrics_ok and steps_ok


def _validate_fields(path: Path, state: dict[str, Any], resumable: bool, advice: str) -> None:
    """Type and range of every entry (resumable: the full set training needs; ``advice`` ends a record's refusal)."""
    non_negative = (lambda v: _is_int(v) and v >= 0, "a non-negative integer")
    positive = (lambda v: _is_int(v) and v >= 1, "a positive integer")
    _check(path, state, "step", *non_negative, required=resumable)
    _check(path, state, "epoch", *non_negative, required=resumable)
    _check(path, state, "step_in_epoch", *non_negative, required=resumable)
    _check(path, state, "model", _tensor_dict, "a dict of parameter names to tensors", required=True)
    _check(path, state, "model_config", lambda v: isinstance(v, dict), "a dict of model hyper-parameters", required=True)
    _check(path, state, "optimizer", _optimizer_state, "an optimizer state_dict (state, param_groups)", required=resumable)
    _check(path, state, "config", lambda v: isinstance(v, dict), "a dict of the run's config sections", required=resumable)
    _check(path, state, "schedule", lambda v: isinstance(v, dict), "a dict", required=False)
    _check(path, state, "rng", _rng_state, "the RNG states of torch, numpy and python", required=False)
    _check(
        path, state, "epoch_state",
        lambda v: _finite_number_dict(v) and set(EPOCH_STATE_KEYS) <= set(v),
        f"a dict of finite running sums {list(EPOCH_STATE_KEYS)}", required=False,
    )  # fmt: skip
    _check(
        path, state, "step_losses", lambda v: isinstance(v, list) and all(_is_number(x) for x in v), "a list of numbers", required=False
    )
    _check(path, state, "world_size", *positive, required=False)
    _check(path, state, "domain_size", *positive, required=False)
    _check(path, state, "metrics", lambda v: isinstance(v, dict), "a dict", required=False)
    _check(path, state, "graph", _graph_metadata, "a dict of the training graphs' feature names and build configuration", required=False)
    _check(path, state, "inputs", _inputs_record, "None or a dict of the training events' num_events, digest and feature names", required=False)
    schedule = state.get("schedule")
    if isinstance(schedule, dict):
        for key, (ok, expected) in {
            "total_steps": non_negative,
            "num_replicas": positive,
            "lr": (lambda v: _is_number(v) and math.isfinite(v) and v >= 0, "a finite non-negative number"),
        }.items():
            if key in schedule and not ok(schedule[key]):
                raise _fail(path, f"schedule.{key}", expected, schedule[key])
    _check(path, state, "logs", _logs_record,
           f"a dict of the run's metrics records and a float64 tensor of its steps ({len(STEP_LOG_COLUMNS)} columns)",
           required=False)  # fmt: skip
    if resumable and state["step_in_epoch"] > state["step"]:
        raise _fail(path, "step_in_epoch", f"at most step ({state['step']})", state["step_in_epoch"])
    # The records of the run's position must agree with it: a resumed run reports its figures from them.
    if resumable:
        step, in_epoch = state["step"], state["step_in_epoch"]
        counts = [("step_losses", "one loss per step done", step, len(state["step_losses"]) if "step_losses" in state else None),
                  ("epoch_state.steps", "the steps done in the epoch in progress (step_in_epoch)", in_epoch,
                   state["epoch_state"]["steps"] if "epoch_state" in state else None),
                  ("logs.steps", "one row per step done", step, state["logs"]["steps"].shape[0] if "logs" in state else None)]  # fmt: skip
        for key, what, expected, found in counts:
            if found is not None and found != expected:
                raise DomainparError(
                    f"{path}: checkpoint entry {key!r} must hold {what}, {expected}, as the checkpoint's position says "
                    f"(got {shorten(found)}); the checkpoint's records disagree with it{advice}"
                )
    floating = {v.dtype for v in state["model"].values() if v.is_floating_point()}
    integral = [k for k, v in state["model"].items() if not v.is_floating_point() and not k.endswith("num_batches_tracked")]
    if integral:
        value = state["model"][integral[0]]
        raise _fail(path, f"model.{integral[0]}", "a floating-point tensor", f"tensor of dtype {str(value.dtype).removeprefix('torch.')}")
    if not floating:
        raise DomainparError(f"{path}: checkpoint entry 'model' must hold floating-point weights (got none)")
    if len(floating) > 1:
        raise DomainparError(f"{path}: checkpoint entry 'model' must hold weights of one dtype (got {sorted(map(str, floating))})")
    # A model config that does not construct is a damaged checkpoint, not a bug: name the file.
    annotations = {f.name: f.type for f in dataclasses.fields(ModelConfig)}
    for key, value in state["model_config"].items():
        expected = annotations.get(key)
        if expected in ("bool", bool) and not isinstance(value, bool):
            raise _fail(path, f"model_config.{key}", "true or false", value)
        if expected in ("int", int) and not _is_int(value):
            raise _fail(path, f"model_config.{key}", "an integer", value)
        if expected in ("str", str) and not isinstance(value, str):
            raise _fail(path, f"model_config.{key}", "a string", value)
    try:
        ModelConfig.from_dict(dict(state["model_config"]))
    except (DomainparError, TypeError, ValueError) as exc:
        raise DomainparError(f"{path}: checkpoint entry 'model_config' is not a valid model config ({one_line(exc, limit=200)})") from None
    if "config" in state:
        try:
            config_from_dict(state["config"], source="config")
        except DomainparError as exc:
            raise DomainparError(f"{path}: checkpoint entry {one_line(exc, limit=240)}") from None


def load_checkpoint(
    path: str | os.PathLike, expected_digest: str | None = None, *, resumable: bool = True
) -> dict[str, Any]:
    """Load a checkpoint, verify its checksum and the type of every entry (``weights_only=True``).

    Args:
        path: a ``step-*.pt`` checkpoint or a final ``model.pt``.
        expected_digest: if given, the digest the file must have (what rank 0
            loaded, broadcast to the other ranks); a different file under the
            same path is refused.
        resumable: demand every entry training needs to resume (False: only
            what inference and export need, as in ``model.pt``).

    Returns:
        The state dict; ``state["sha256"]`` is its verified digest.

    Raises:
        DomainparError: missing, truncated or corrupted file, checksum mismatch,
            another format version, a missing entry or one of the wrong type.
    """
    path = Path(path)
    advice = "; delete it to resume from the previous one" if resumable and checkpoint_step(path) is not None else ""
    state = read_checkpoint_file(path, advice=advice)
    if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
        raise DomainparError(f"{path}: expected a domainpar checkpoint dict (got {_kind(state)})")
    if {"weights", "meta"} <= set(state) and "model" not in state:
        # What the physics recipe's filter stage writes (filter.pt): its format version is its own, not a checkpoint's.
        raise DomainparError(
            f"{path}: expected a GNN checkpoint of `domainpar train` (model.pt or checkpoints/step-*.pt), found an edge "
            "filter (the physics recipe's filter.pt, which prunes graphs before the GNN); pass the GNN's model.pt"
        )
    if "format_version" not in state:
        raise DomainparError(f"{path}: expected a domainpar checkpoint dict with a format_version entry (got keys {shorten(sorted(state))})")
    version = state["format_version"]
    if not _is_int(version):
        raise _fail(path, "format_version", "an integer", version)
    if version != CHECKPOINT_FORMAT_VERSION:
        reason = " (written without a checksum by an older domainpar; retrain or resume with that version)" if version == 1 else ""
        raise DomainparError(f"{path}: checkpoint format version must be {CHECKPOINT_FORMAT_VERSION} (got {version}){reason}")
    stored = state.get(DIGEST_KEY)
    if not isinstance(stored, str) or not re.fullmatch(r"[0-9a-f]{64}", stored):
        raise _fail(path, DIGEST_KEY, "a SHA-256 hex digest", stored)
    # The checksum and the checks below walk the entries recursively: a hostile file nested a million deep is refused first.
    check_depth(state, str(path), "a domainpar checkpoint")
    try:
        actual = state_digest(state)
    except _Unhashable as exc:
        raise DomainparError(f"{path}: checkpoint must hold only tensors and plain values (found {exc})") from None
    if actual != stored:
        raise DomainparError(
            f"{path}: checkpoint content does not match its checksum (sha256 {actual[:12]}…, recorded {stored[:12]}…): "
            f"the file is corrupted{advice}"
        )
    if expected_digest is not None and actual != expected_digest:
        raise DomainparError(
            f"{path}: this rank loaded a checkpoint with sha256 {actual[:12]}… but rank 0 loaded {expected_digest[:12]}… "
            "from the same path; the ranks see different files (a lagging or non-shared file system?)"
        )
    missing = [k for k in (REQUIRED_KEYS if resumable else MODEL_KEYS) if k not in state]
    if missing:
        what = "a resumable checkpoint" if resumable else "a checkpoint"
        raise DomainparError(f"{path}: checkpoint is missing entries {missing} (expected {what})")
    _validate_fields(path, state, resumable, advice)
    return state


# ----------------------------------------------------------------------------- RNG state


def rng_state() -> dict[str, Any]:
    """RNG states of torch (CPU and CUDA), numpy and python as tensors and plain lists."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "python": {"version": version, "internal": list(internal), "gauss_next": gauss_next},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any], source: str | os.PathLike = "checkpoint") -> None:
    """Restore what :func:`rng_state` captured.

    Raises:
        DomainparError: a state the RNGs refuse (named after ``source``).
    """
    try:
        torch.set_rng_state(state["torch"])
        numpy_state = state["numpy"]
        np.random.set_state(
            (
                numpy_state["kind"],
                numpy_state["keys"].numpy().astype(np.uint32),
                numpy_state["pos"],
                numpy_state["has_gauss"],
                numpy_state["cached"],
            )
        )
        python_state = state["python"]
        random.setstate((python_state["version"], tuple(python_state["internal"]), python_state["gauss_next"]))
        if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(state["cuda"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise DomainparError(f"{source}: checkpoint entry 'rng' is not a valid RNG state ({one_line(exc, limit=160)})") from None

"""Checkpoints: atomic, last-K, loadable with ``torch.load(weights_only=True)``.

A checkpoint is a dict of tensors and plain containers only (no pickled
objects), so it loads with ``weights_only=True``:

=================  ==========================================================
``format_version`` int, :data:`CHECKPOINT_FORMAT_VERSION`
``step``           optimiser steps done
``epoch``          epoch of the next step; ``step_in_epoch`` its position
``model``          model ``state_dict``
``model_config``   dict of the model's constructor arguments
``optimizer``      AdamW ``state_dict``
``schedule``       ``{"total_steps", "num_replicas", "lr"}``
``rng``            torch / numpy / python RNG states of rank 0
``epoch_state``    running sums of the epoch in progress (loss, steps, seconds, halo bytes)
``config``         the run's :class:`~domainpar.train.config.TrainConfig` as a dict
=================  ==========================================================

Files are ``<out>/checkpoints/step-00000042.pt``, written to a temporary name
and renamed, so a process killed while writing leaves the previous checkpoint
intact (temporary names start with a dot and are ignored).
"""

from __future__ import annotations

import os
import pickle
import random
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from domainpar.atomic import atomic_path
from domainpar.errors import DomainparError, one_line

CHECKPOINT_FORMAT_VERSION = 1
_NAME = re.compile(r"^step-(\d{8,})\.pt$")
REQUIRED_KEYS = ("format_version", "step", "epoch", "step_in_epoch", "model", "model_config", "optimizer", "config")


def checkpoint_dir(out: str | os.PathLike) -> Path:
    """Directory of a run's checkpoints."""
    return Path(out) / "checkpoints"


def checkpoint_files(directory: str | os.PathLike) -> list[Path]:
    """Complete checkpoint files in ``directory``, oldest (fewest steps) first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(directory: str | os.PathLike) -> Path | None:
    """Newest checkpoint in ``directory`` or None."""
    files = checkpoint_files(directory)
    return files[-1] if files else None


def save_checkpoint(state: dict[str, Any], directory: str | os.PathLike, keep: int) -> Path:
    """Write ``state`` as ``step-<step>.pt`` atomically and delete all but the newest ``keep``.

    Args:
        state: the checkpoint dict (tensors and plain containers only).
        directory: the run's checkpoint directory.
        keep: checkpoints to keep (>= 1).
    """
    path = Path(directory) / f"step-{int(state['step']):08d}.pt"
    with atomic_path(path) as tmp:
        torch.save(state, tmp)
        # fsync so that a crash right after the rename cannot leave an empty "complete" file.
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
    for old in checkpoint_files(directory)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def read_checkpoint_file(path: str | os.PathLike, advice: str = "") -> Any:
    """``torch.load(path, weights_only=True)`` on CPU, any failure to read the file as one line.

    A checkpoint is a user-supplied file: whatever torch raises while reading
    it (a truncated zip, a text file, a pickle with objects) means "this is
    not a readable checkpoint", so every ``Exception`` becomes a DomainparError.

    Args:
        path: the checkpoint file.
        advice: appended to the message (e.g. what to do about it).

    Raises:
        DomainparError: missing, truncated, corrupted or not a torch file of plain containers.
    """
    path = Path(path)
    if not path.is_file():
        raise DomainparError(f"{path}: checkpoint file not found")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        reason = "not a torch file of tensors and plain containers"
    except KeyError:
        # torch's legacy reader fails on an unknown magic number with a bare KeyError.
        reason = "not a torch file"
    except (zipfile.BadZipFile, EOFError):
        reason = "corrupted or truncated"
    except Exception as exc:  # noqa: BLE001 - any reader failure is a bad file, not a bug of ours
        reason = f"corrupted or truncated: {one_line(exc, limit=160)}"
    raise DomainparError(f"{path}: expected a domainpar checkpoint, could not load it ({reason}){advice}")


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Load and check a checkpoint (``weights_only=True``).

    Raises:
        DomainparError: missing, truncated or corrupted file, or not a domainpar checkpoint.
    """
    path = Path(path)
    state = read_checkpoint_file(path, advice="; delete it to resume from the previous one")
    if not isinstance(state, dict) or "format_version" not in state:
        raise DomainparError(f"{path}: expected a domainpar checkpoint dict with a format_version entry")
    if state["format_version"] != CHECKPOINT_FORMAT_VERSION:
        raise DomainparError(
            f"{path}: checkpoint format version must be {CHECKPOINT_FORMAT_VERSION} (got {state['format_version']})"
        )
    missing = [k for k in REQUIRED_KEYS if k not in state]
    if missing:
        raise DomainparError(f"{path}: checkpoint is missing entries {missing}")
    return state


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


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
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

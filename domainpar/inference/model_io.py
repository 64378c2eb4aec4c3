"""Restoring a trained edge classifier for inference."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from domainpar.errors import DomainparError
from domainpar.model.config import ModelConfig
from domainpar.model.registry import build_model
from domainpar.train.checkpoint import load_checkpoint
from domainpar.train.config import config_from_dict


@dataclass(frozen=True)
class LoadedModel:
    """A model restored from a checkpoint."""

    model: torch.nn.Module
    """The model (built by the factory from the checkpoint's ``model_config``) in eval mode, on CPU."""
    dtype: torch.dtype
    """Parameter dtype (float32, or float64 for fp64 runs); inputs are cast to it."""
    threshold: float | None
    """The training run's threshold, when the checkpoint records one."""
    step: int | None
    graph: dict | None = None
    """The training graphs' ``node_features``, ``edge_features`` and ``build_config`` (JSON), when recorded."""
    model_config: ModelConfig = ModelConfig()
    """What the model was built from (name, settings, options; activation checkpointing off)."""
    sha256: str | None = None
    """The checkpoint's verified content digest (what scores written by evaluate record)."""
    track_method: str | None = None
    """The track builder the training run recorded (``run.track_method``), when it records one."""
    track_settings: dict | None = None
    """Its other settings the training run recorded (``run.track_settings``)."""


def load_model(path: str | os.PathLike) -> LoadedModel:
    """Restore the model of a ``domainpar train`` checkpoint or ``model.pt`` (``weights_only=True``).

    Raises:
        DomainparError: missing/corrupted file, not a domainpar checkpoint, or weights that do not fit.
    """
    path = Path(path)
    # Checksum, format version and the type of every entry are verified here (also for export).
    state = load_checkpoint(path, resumable=False)
    # Inference never needs activation checkpointing; overlap is exact either way.
    model_config = ModelConfig.from_dict({**dict(state["model_config"]), "checkpointing": False})
    try:
        model = build_model(model_config)
    except DomainparError as exc:
        raise DomainparError(f"{path}: {exc}") from None
    weights = state["model"]
    floating = [v.dtype for v in weights.values() if torch.is_tensor(v) and v.is_floating_point()]
    dtype = floating[0] if floating else torch.float32
    model = model.to(dtype=dtype)
    try:
        model.load_state_dict(weights)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0]
        raise DomainparError(f"{path}: checkpoint weights do not fit its model_config ({first})") from None
    model.eval()
    threshold = track_method = track_settings = None
    config = state.get("config")
    run = config.get("run") if isinstance(config, dict) else None
    if isinstance(run, dict) and ("threshold" in run or "track_method" in run):
        # load_checkpoint checked the entries convert; their ranges are checked here, where they are used.
        recorded = config_from_dict(config, source=f"{path}: config").run
        threshold = recorded.threshold if "threshold" in run else None
        track_method, track_settings = (recorded.track_method if "track_method" in run else None), recorded.track_settings
        if threshold is not None and not 0.0 < threshold < 1.0:
            raise DomainparError(f"{path}: checkpoint entry config.run.threshold must be in (0, 1) (got {threshold})")
    step = int(state["step"]) if "step" in state else None
    return LoadedModel(
        model=model, dtype=dtype, threshold=threshold, step=step, graph=training_graph_record(state), model_config=model_config,
        sha256=str(state["sha256"]), track_method=track_method, track_settings=track_settings,
    )


def _names_of(described: Any) -> list[str] | None:
    """Column names of a description's ``node_features``/``edge_features`` (dicts with a name, or names)."""
    if not isinstance(described, list):
        return None
    names = [item.get("name") if isinstance(item, dict) else item for item in described]
    return names if all(isinstance(n, str) for n in names) else None


def training_graph_record(state: dict) -> dict | None:
    """What a checkpoint says about its training graphs: feature names and build configuration.

    A final ``model.pt`` records them under ``graph``; a step checkpoint only carries the graphs'
    description (``data``), from which the names are taken, so evaluating a step checkpoint checks the
    graphs' features as strictly as evaluating the final model.
    """
    graph = state.get("graph")
    if isinstance(graph, dict) and graph:
        return dict(graph)
    description = state.get("data")
    if not isinstance(description, dict):
        return None
    record = {"node_features": _names_of(description.get("node_features")),
              "edge_features": _names_of(description.get("edge_features")), "build_config": None}  # fmt: skip
    return record if record["node_features"] is not None or record["edge_features"] is not None else None


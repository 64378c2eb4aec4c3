"""What an export starts from: a trained checkpoint, checked, and the description of its inputs.

A checkpoint (``checkpoints/step-*.pt`` or the final ``model.pt``) of any run
— one process, domain-parallel on any number of ranks, with or without
activation checkpointing — holds the same one-process ``state_dict``; the
export is that one-process model. The file is read with the checkpoint
loader of :mod:`domainpar.train.checkpoint` (``weights_only=True``), which
verifies its content checksum and the type of every entry, and refuses a
damaged or incomplete file with one line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from domainpar.errors import DomainparError, FieldError
from domainpar.model.config import ModelConfig
from domainpar.model.registry import build_model, check_config


@dataclass(frozen=True)
class ExportSource:
    """A checkpoint ready to be exported."""

    path: Path
    """The checkpoint file."""
    sha256: str
    """The checkpoint's verified content checksum (:func:`domainpar.train.checkpoint.state_digest`), recorded in the sidecar."""
    model_config: ModelConfig
    """The :class:`~domainpar.model.config.ModelConfig` it was trained with (name, settings, options)."""
    state: dict[str, torch.Tensor]
    """The model ``state_dict`` (CPU)."""
    dtype: torch.dtype
    """Dtype of the trained weights (float32, or float64 for fp64 runs)."""
    step: int | None
    """Optimiser steps of the checkpoint."""
    threshold: float | None
    """The score threshold of the training run (``run.threshold``), None if the checkpoint has no run config."""
    description: dict | None
    """What the input columns are and how the training graphs were built (:mod:`domainpar.data.features`), None if unknown."""


def _load_state(path: Path) -> dict[str, Any]:
    """The checkpoint dict, its checksum and every entry's type verified by the training package's loader."""
    from domainpar.train.checkpoint import load_checkpoint

    return load_checkpoint(path, resumable=False)


def load_export_source(path: str | os.PathLike) -> ExportSource:
    """Read and check a checkpoint for export.

    Raises:
        DomainparError: missing, damaged or incomplete checkpoint, or weights that do not fit its model config.
    """
    path = Path(path)
    state = _load_state(path)
    try:
        config = ModelConfig.from_dict({**dict(state["model_config"]), "checkpointing": False, "overlap": False})
        check_config(config)
    except FieldError as exc:
        raise DomainparError(f"{path}: checkpoint entry model_config.{exc.field} {exc.message}") from None
    except (DomainparError, TypeError) as exc:
        raise DomainparError(f"{path}: checkpoint entry 'model_config' is not a valid model config ({exc})") from None
    weights = {k: v.detach().cpu() for k, v in state["model"].items()}
    floating = [v.dtype for v in weights.values() if v.is_floating_point()]
    threshold = None
    run = state.get("config", {}).get("run") if isinstance(state.get("config"), dict) else None
    if isinstance(run, dict) and isinstance(run.get("threshold"), (int, float)):
        threshold = float(run["threshold"])
    description = state.get("data")
    if description is not None and not isinstance(description, dict):
        raise DomainparError(f"{path}: checkpoint entry 'data' must be a dict describing the input features")
    step = state.get("step")
    return ExportSource(
        path=path,
        sha256=str(state["sha256"]),
        model_config=config,
        state=weights,
        dtype=floating[0] if floating else torch.float32,
        step=int(step) if isinstance(step, int) else None,
        threshold=threshold,
        description=description,
    )


def training_model(source: ExportSource) -> torch.nn.Module:
    """The checkpoint's training model, built by the factory (eval mode, CPU, its own dtype).

    Raises:
        DomainparError: the weights do not fit the model its ``model_config`` builds.
    """
    model = build_model(source.model_config).to(dtype=source.dtype)
    try:
        model.load_state_dict(source.state)
    except RuntimeError as exc:
        first = " ".join(str(exc).split())[:300]
        raise DomainparError(f"{source.path}: checkpoint weights do not fit its model_config ({first})") from None
    return model.eval()


def training_logits(model: torch.nn.Module, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
    """(E,) logits of the training model on one whole graph, in the graph's edge order (one process)."""
    import numpy as np

    from domainpar.model.exchange import IdentityExchange
    from domainpar.partition.local_graph import LocalGraph
    from domainpar.partition.plan import build_plan

    num_nodes = x.shape[0]
    plan = build_plan(edge_index.numpy(), np.zeros(num_nodes, dtype=np.int64), 1).parts[0]
    dtype = next(model.parameters()).dtype
    edge_ids = torch.from_numpy(np.ascontiguousarray(plan.edge_ids))
    local = LocalGraph(
        x=x[torch.from_numpy(np.ascontiguousarray(plan.owned_ids))].to(dtype),
        edge_index=torch.from_numpy(np.ascontiguousarray(plan.edge_index)),
        edge_attr=edge_attr[edge_ids].to(dtype),
        num_owned=plan.num_owned,
        num_halo=plan.num_halo,
        num_interior_edges=plan.num_interior_edges,
        edge_owned=torch.from_numpy(np.ascontiguousarray(plan.edge_owned)),
        edge_ids=edge_ids,
        y=None,
        num_edges_global=plan.num_edges_global,
        num_positive_edges_global=plan.num_positive_edges_global,
    )
    with torch.no_grad():
        local_logits = model(local, IdentityExchange())
    logits = torch.empty(edge_index.shape[1], dtype=local_logits.dtype)
    logits[edge_ids] = local_logits
    return logits

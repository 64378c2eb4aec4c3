"""What an export starts from: a trained checkpoint, checked, and the description of its inputs.

A checkpoint (``checkpoints/step-*.pt`` or the final ``model.pt``) of any run (one process, domain-parallel on any
number of ranks, with or without activation checkpointing) holds the same one-process ``state_dict``; the export is
that one-process model. The file is read with the checkpoint loader of :mod:`domainpar.train.checkpoint`
(``weights_only=True``), which verifies its checksum and every entry's type and refuses a damaged file in one line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from domainpar.data.features import recorded_description
from domainpar.errors import DomainparError, FieldError
from domainpar.filter.edge_filter import load_filter
from domainpar.model.config import ModelConfig
from domainpar.model.exchange import IdentityExchange
from domainpar.model.registry import build_model, check_config
from domainpar.partition.local_graph import LocalGraph, tensor_of
from domainpar.partition.plan import build_plan
from domainpar.tracks.methods import METHODS as TRACK_METHODS
from domainpar.train.checkpoint import load_checkpoint


@dataclass(frozen=True)
class ExportSource:
    """A checkpoint ready to be exported."""

    path: Path
    sha256: str
    """The checkpoint's verified content checksum (:func:`domainpar.train.checkpoint.state_digest`), recorded in the sidecar."""
    model_config: ModelConfig
    """The :class:`~domainpar.model.config.ModelConfig` it was trained with (name, settings, options)."""
    state: dict[str, torch.Tensor]
    """The model ``state_dict`` (CPU)."""
    dtype: torch.dtype
    """Dtype of the trained weights (float32, or float64 for fp64 runs)."""
    step: int | None
    threshold: float | None
    """The score threshold of the training run (``run.threshold``), None if the checkpoint has no run config."""
    track_method: str | None
    """The track builder the training run recorded (``run.track_method``), None when it records none."""
    track_settings: dict | None
    """Its other settings the training run recorded (``run.track_settings``), None when it records none."""
    description: dict | None
    """What the input columns are and how the training graphs were built (:mod:`domainpar.data.features`), None if unknown."""


def load_export_source(path: str | os.PathLike) -> ExportSource:
    """Read and check a checkpoint for export.

    Raises:
        DomainparError: missing, damaged or incomplete checkpoint, or weights that do not fit its model config.
    """
    path = Path(path)
    # Its checksum and every entry's type verified by the training package's loader.
    state = load_checkpoint(path, resumable=False)
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
    track_method = run.get("track_method") if isinstance(run, dict) and run.get("track_method") in TRACK_METHODS else None
    description = state.get("data")
    if description is not None and not isinstance(description, dict):
        raise DomainparError(f"{path}: checkpoint entry 'data' must be a dict describing the input features")
    graph = state.get("graph")
    if description is None and isinstance(graph, dict):
        # Graphs saved without a description entry (e.g. pruned by an edge filter) still named their columns and
        # recorded their build: what the checkpoint's 'graph' entry holds.
        description = recorded_description(graph.get("node_features"), graph.get("edge_features"), graph.get("build_config"))
    step = state.get("step")
    return ExportSource(
        path=path,
        sha256=str(state["sha256"]),
        model_config=config,
        state=weights,
        dtype=floating[0] if floating else torch.float32,
        step=int(step) if isinstance(step, int) else None,
        threshold=threshold,
        track_method=track_method,
        track_settings=run.get("track_settings") if isinstance(run, dict) and isinstance(run.get("track_settings"), dict) else None,
        description=description,
    )


#: File name of a recipe run's edge filter (``domainpar demo``, the physics recipe).
FILTER_FILE = "filter.pt"


def recorded_filter_hash(description: dict | None) -> str | None:
    """Content hash of the edge filter the training graphs were pruned with, None when they were not pruned."""
    cuts = (description or {}).get("cuts")
    record = cuts.get("edge_filter") if isinstance(cuts, dict) else None
    return None if not isinstance(record, dict) else str(record.get("hash"))


def find_filter(checkpoint: Path, wanted_hash: str) -> Path | None:
    """The recipe run's ``filter.pt`` with content hash ``wanted_hash`` beside the checkpoint or up to three
    directories above it (``<run>/train/checkpoints/step-*.pt``), None when there is none."""
    directory = checkpoint.resolve().parent
    for _ in range(4):
        candidate = directory / FILTER_FILE
        if candidate.is_file():
            try:
                if load_filter(candidate).content_hash == wanted_hash:
                    return candidate
            except DomainparError:
                pass  # a damaged or foreign file is not the filter sought; the caller names what is missing
        directory = directory.parent
    return None


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
    num_nodes = x.shape[0]
    plan = build_plan(edge_index.numpy(), np.zeros(num_nodes, dtype=np.int64), 1).parts[0]
    dtype = next(model.parameters()).dtype
    edge_ids = tensor_of(plan.edge_ids)
    local = LocalGraph(
        x=x[tensor_of(plan.owned_ids)].to(dtype),
        edge_index=tensor_of(plan.edge_index),
        edge_attr=edge_attr[edge_ids].to(dtype),
        num_owned=plan.num_owned,
        num_halo=plan.num_halo,
        num_interior_edges=plan.num_interior_edges,
        edge_owned=tensor_of(plan.edge_owned),
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

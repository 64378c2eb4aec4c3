"""The models the benchmarks compare, built by the package's one factory.

``ours`` is domainpar's Interaction Network; ``field`` is the field's
InteractionGNN (:mod:`domainpar.model.interaction_gnn`, the Exa.TrkX / acorn
structure) set up like the issue-14 reference: a node reads its incoming
edges only (summed), residual updates, an output classifier of three hidden
layers, and ``torch.utils.checkpoint`` around every step when checkpointed —
as the field's code runs by default.
"""

from __future__ import annotations

import dataclasses

import torch

from domainpar.model.config import ModelConfig
from domainpar.model.registry import build_model

#: Options of the field's InteractionGNN in the issue-14 comparison.
FIELD_OPTIONS = {"messages": "in", "aggregation": ["sum"], "residual": True, "output_layers": 3}
#: Names of the compared models.
KINDS = ("ours", "field")


def model_config(kind: str, config: ModelConfig) -> ModelConfig:
    """``config`` (widths, size, checkpointing) as the configuration of model ``kind``."""
    if kind == "ours":
        return config
    if kind != "field":
        raise ValueError(f"model kind must be one of {', '.join(KINDS)} (got {kind!r})")
    # Settings of our model only (chunked recomputation, compiled kernels, overlap) do not apply to the field's.
    return dataclasses.replace(config, name="interaction_gnn", options=dict(FIELD_OPTIONS), chunk_rows=0, compile="auto", overlap=False)


def build(kind: str, config: ModelConfig, seed: int = 0) -> torch.nn.Module:
    """Model ``kind`` with seeded weights."""
    torch.manual_seed(seed)
    return build_model(model_config(kind, config))

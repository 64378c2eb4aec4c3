"""What an exactness check compares: cases, jobs and verdicts."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from domainpar.data.event_graph import EventGraph
from domainpar.model.config import ModelConfig
from domainpar.model.loss import LossConfig

#: Pass threshold of every error measure, by dtype name.
TOLERANCES = {"float64": 1e-10, "float32": 1e-5}
#: Deliberately wrong exchanges, to show the check can fail.
FAULTS = ("zero_halo", "drop_halo_grad")

#: Floating-point types a check runs in, by name.
DTYPES = {"float64": torch.float64, "float32": torch.float32}


def max_rel(diff: torch.Tensor, ref: torch.Tensor) -> float:
    """max |diff| / max |ref| (the denominator at least the dtype's smallest normal number); 0 for empty tensors."""
    tiny = torch.finfo(ref.dtype).tiny
    if ref.numel() == 0:
        return 0.0
    return float(diff.abs().max() / max(float(ref.abs().max()), tiny))


@dataclass(frozen=True, eq=False)
class VerifyCase:
    """One comparison of a partitioned run against the single-process run."""

    name: str
    """Label shown in tables and results."""
    graph: EventGraph
    """The event graph (needs labels)."""
    owner: np.ndarray
    """(num_nodes,) owning part of every node; the number of parts must equal the group size."""
    config: ModelConfig
    """The model (any registered or user model, built by the factory; checkpointing/overlap apply to the partitioned run only)."""
    dtype: str = "float64"
    """"float64" or "float32"."""
    seed: int = 0
    """Seed of the model weights (identical on every rank and in the reference)."""
    pos_weight: float = 1.0
    """Loss weight of true edges."""
    fault: str | None = None
    """None, or one of :data:`FAULTS` to break the exchange on purpose."""
    loss: LossConfig | None = None
    """The loss's target weighting (normalised by the event's weight sum, reduced over the group); None: pos_weight."""


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of one :class:`VerifyCase`."""

    name: str
    num_parts: int
    """Ranks (parts) of the partitioned run."""
    dtype: str
    """Floating-point type of the comparison."""
    max_abs_err_logits: float
    """Max |logit_part − logit_full| over every local copy of every edge."""
    rel_err_loss: float
    """|Σ loss_r − loss_full| / |loss_full|."""
    max_rel_err_grad: float
    """Max over parameters of max|g_part − g_full| / max|g_full| (g_part summed over ranks)."""
    worst_parameter: str
    """Parameter with the largest relative gradient error."""
    loss_full: float
    """Single-process loss."""
    loss_parts: float
    """Sum of the ranks' losses."""
    tolerance: float
    """Pass threshold of the three errors."""
    num_halo: tuple[int, ...]
    """Halo rows per rank."""
    passed: bool
    """All three errors within tolerance."""

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "num_parts": self.num_parts,
            "dtype": self.dtype,
            "max_abs_err_logits": self.max_abs_err_logits,
            "rel_err_loss": self.rel_err_loss,
            "max_rel_err_grad": self.max_rel_err_grad,
            "worst_parameter": self.worst_parameter,
            "loss_full": self.loss_full,
            "loss_parts": self.loss_parts,
            "tolerance": self.tolerance,
            "num_halo": list(self.num_halo),
            "passed": self.passed,
        }


@dataclass(frozen=True, eq=False)
class VerifyJob:
    """Cases to run on one domain group: a subset of the spawned ranks."""

    ranks: tuple[int, ...]
    """Global ranks of the group; part p runs on ranks[p]."""
    cases: tuple[VerifyCase, ...] = ()
    """Cases of any model (their owners must have len(ranks) parts)."""

"""The edge classification loss, normalised so that per-rank losses add up; target particles and weights as config.

Each global edge is owned by exactly one part (the owner of its dst node), so
summing the weighted BCE over *owned* local edges and dividing by an
event-wide normaliser gives per-rank losses whose sum over the domain group is
the full-graph loss; backward of each rank's loss then gives per-rank
gradients whose sum is the full-graph gradient.

Two weightings (:class:`LossConfig`): ``pos_weight`` (true edges weigh
``optim.pos_weight``, the sum divided by the event's edge count) and
``targets`` (acorn's: per-edge weights, the sum divided by the event's sum of
weights, which the caller reduces over the domain group: this module never
communicates).

A true edge belongs to the particle of its two hits, so its target test reads
the particle of its dst node — an owned node for every owned edge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from domainpar.domains import LOSS_WEIGHT_WHY, MAX_LOSS_WEIGHT, Domain, check_domains
from domainpar.errors import DomainparError, FieldError
from domainpar.partition.local_graph import LocalGraph
from domainpar.partition.part_data import PartData

#: Loss weightings.
WEIGHTINGS = ("pos_weight", "targets")
#: Domains of the loss's numeric settings (checked here for a config file, by click for a flag).
LOSS_DOMAINS = {
    "target_min_pt": Domain(0, 1e6, why="GeV"),
    "target_min_hits": Domain(0, None),
    "primary_max_r": Domain(0, 1e6, why="mm"),
    "target_weight": Domain(0, MAX_LOSS_WEIGHT, why=LOSS_WEIGHT_WHY),
    "non_target_weight": Domain(0, MAX_LOSS_WEIGHT, why=LOSS_WEIGHT_WHY),
    "fake_weight": Domain(0, MAX_LOSS_WEIGHT, why=LOSS_WEIGHT_WHY),
}
#: Per-node truth each target selection needs (graph and part file entries).
SELECTION_NEEDS = {"target_min_pt": "particle_pt", "target_min_hits": "particle_nhits", "target_primary": "particle_vertex"}


@dataclass(frozen=True)
class LossConfig:
    """Which edges the loss targets and how it weighs them (acorn's weighting; default: today's loss)."""

    weighting: str = "pos_weight"
    """pos_weight: true edges weigh optim.pos_weight, fakes 1, divided by the event's edge count; targets: the weights below, divided by the event's weight sum."""
    target_min_pt: float = 0.0
    """Target particles have pT >= this (GeV; 0: any) [targets]."""
    target_min_hits: int = 0
    """Target particles left at least this many hits in the event (0: any) [targets]."""
    target_primary: bool = False
    """Target particles come from a primary vertex: produced within primary_max_r of the beam line [targets]."""
    primary_max_r: float = 1.0
    """Largest transverse distance (mm) of a primary particle's production vertex from the beam line [targets]."""
    target_weight: float = 1.0
    """Weight of the true edges of target particles [targets]."""
    non_target_weight: float = 0.0
    """Weight of the true edges of other particles (0 leaves them out of the loss) [targets]."""
    fake_weight: float = 1.0
    """Weight of fake edges [targets]."""

    def __post_init__(self) -> None:
        if self.weighting not in WEIGHTINGS:
            raise FieldError("weighting", f"must be one of {', '.join(WEIGHTINGS)} (got {self.weighting!r})")
        for name in ("target_min_pt", "primary_max_r", "target_weight", "non_target_weight", "fake_weight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise FieldError(name, f"must be a non-negative number (got {value!r})")
        if isinstance(self.target_min_hits, bool) or not isinstance(self.target_min_hits, int) or self.target_min_hits < 0:
            raise FieldError("target_min_hits", f"must be a non-negative integer (got {self.target_min_hits!r})")
        if not isinstance(self.target_primary, bool):
            raise FieldError("target_primary", f"must be true or false (got {self.target_primary!r})")
        check_domains(self, LOSS_DOMAINS)
        if self.weighting == "pos_weight":
            defaults = LossConfig(weighting="targets")
            changed = [name for name in ("target_min_pt", "target_min_hits", "target_primary", "primary_max_r", "target_weight",
                                         "non_target_weight", "fake_weight") if getattr(self, name) != getattr(defaults, name)]  # fmt: skip
            if changed:
                raise FieldError(changed[0], "applies to weighting targets only (set loss.weighting: targets, or leave it out)")
        if self.weighting == "targets" and self.target_weight == 0 and self.non_target_weight == 0 and self.fake_weight == 0:
            raise FieldError("target_weight", "and non_target_weight and fake_weight are all 0: the loss would weigh nothing")

    @property
    def needs(self) -> list[tuple[str, str]]:
        """``(setting, per-node truth array)`` the selection reads (e.g. ``("target_min_hits", "particle_nhits")``)."""
        if self.weighting != "targets":
            return []
        active = {"target_min_pt": self.target_min_pt > 0, "target_min_hits": self.target_min_hits > 0,
                  "target_primary": self.target_primary}  # fmt: skip
        return [(name, SELECTION_NEEDS[name]) for name, on in active.items() if on]


def target_mask(config: LossConfig, y: np.ndarray, pt=None, nhits=None, vertex=None) -> np.ndarray:
    """(E,) bool: true edges of target particles.

    Args:
        config: the selection.
        y: (E,) labels.
        pt, nhits, vertex: (E,) / (E,) / (E, 3) truth of each edge's particle (the particle of its dst node);
            needed by the selections that read them.
    """
    mask = y > 0.5
    if config.target_min_pt > 0:
        mask &= pt >= config.target_min_pt
    if config.target_min_hits > 0:
        mask &= nhits >= config.target_min_hits
    if config.target_primary:
        mask &= np.hypot(vertex[:, 0], vertex[:, 1]) <= config.primary_max_r
    return mask


def edge_weights(config: LossConfig, y: np.ndarray, target: np.ndarray) -> np.ndarray:
    """(E,) float64 loss weight of every edge: fake, true non-target or true target weight."""
    weights = np.where(y > 0.5, config.non_target_weight, config.fake_weight).astype(np.float64)
    weights[target] = config.target_weight
    return weights


def part_weights(config: LossConfig, data: PartData) -> np.ndarray:
    """(E_local,) float64 loss weights of a part's local edges (0 on the edges it does not own).

    Raises:
        DomainparError: the part lacks labels, or the per-node truth a selection reads (naming the setting and the part).
    """
    if data.y is None:
        raise DomainparError(f"{data.source}: the loss needs truth labels (the part has none)")
    plan = data.plan
    owned = np.asarray(plan.edge_owned, dtype=bool)
    # An owned edge's dst is an owned node (the owner of dst owns the edge): its particle is the edge's.
    dst = np.where(owned, plan.edge_index[1], 0)
    truth = {}
    for setting, name in config.needs:
        values = getattr(data, name)
        if values is None:
            raise DomainparError(
                f"{data.source}: loss.{setting} needs {name}, which this part does not hold (its graph file does not record "
                "it, or the plan was made by an older domainpar); rebuild the graphs with `domainpar build` and re-partition"
            )
        truth[name] = values[dst]
    target = target_mask(config, data.y, truth.get("particle_pt"), truth.get("particle_nhits"), truth.get("particle_vertex"))
    weights = edge_weights(config, data.y, target)
    weights[~owned] = 0.0
    return weights


def edge_loss(
    logits: torch.Tensor,
    graph: LocalGraph,
    pos_weight: float = 1.0,
    weights: torch.Tensor | None = None,
    weight_sum: float | None = None,
) -> torch.Tensor:
    """This rank's share of the event's weighted BCE-with-logits loss.

    Args:
        logits: (E_local,) model output for every local edge.
        graph: the local graph (needs labels ``y``).
        pos_weight: weight of true edges (false edges weigh 1), without ``weights``.
        weights: (E_local,) per-edge weights (:func:`edge_weights`) instead of ``pos_weight``.
        weight_sum: the event's sum of ``weights`` over every edge (all ranks), needed with ``weights``.

    Returns:
        Scalar: sum over owned local edges of the weighted BCE, divided by
        ``graph.num_edges_global`` (``pos_weight``) or by ``weight_sum`` (``weights``).
    """
    if graph.y is None:
        raise DomainparError("edge_loss needs a graph with truth labels (got graph.y = None)")
    if logits.shape != (graph.num_edges,):
        raise DomainparError(f"logits must have shape ({graph.num_edges},) (got {tuple(logits.shape)})")
    owned = graph.edge_owned
    target = graph.y[owned].to(logits.dtype)
    if weights is not None:
        if weights.shape != (graph.num_edges,) or weight_sum is None:
            raise DomainparError(f"weights must have shape ({graph.num_edges},) and come with the event's weight sum")
        total = F.binary_cross_entropy_with_logits(logits[owned], target, weight=weights[owned].to(logits.dtype), reduction="sum")
        return total / max(weight_sum, torch.finfo(torch.float64).tiny)
    if pos_weight <= 0:
        raise DomainparError(f"pos_weight must be positive (got {pos_weight})")
    weight = None if pos_weight == 1.0 else torch.as_tensor(pos_weight, dtype=logits.dtype, device=logits.device)
    total = F.binary_cross_entropy_with_logits(logits[owned], target, pos_weight=weight, reduction="sum")
    return total / max(graph.num_edges_global, 1)


__all__ = ["LossConfig", "SELECTION_NEEDS", "WEIGHTINGS", "edge_loss", "edge_weights", "part_weights", "target_mask"]

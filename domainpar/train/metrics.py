"""Edge-classification metrics from counts reduced over the whole world.

Every rank adds its *owned* edges (each global edge is owned by exactly one
rank of the group that holds its event) into score histograms and exact
confusion counts; one all-reduce SUM over the world then gives the metrics of
all validation events together, never an average of per-rank metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from domainpar.errors import DomainparError

#: Histogram bins over [0, 1] for the ROC AUC (bin width 1e-4).
NUM_BINS = 10_000


@dataclass(frozen=True)
class EdgeMetrics:
    """Metrics of a set of events."""

    loss: float
    """Mean event loss (weighted BCE normalised by each event's edge count)."""
    efficiency: float
    """True edges scored > threshold / all true edges (recall)."""
    purity: float
    """True edges scored > threshold / all edges scored > threshold (precision)."""
    auc: float
    """ROC area from the score histograms (resolution 1 / NUM_BINS)."""
    num_events: int
    """Events counted."""
    num_edges: int
    """Edges counted."""


class EdgeCounter:
    """Accumulates score histograms, confusion counts and losses; reduce, then summarise.

    Args:
        threshold: score cut for efficiency and purity.
        num_bins: histogram resolution for the AUC.
    """

    def __init__(self, threshold: float = 0.5, num_bins: int = NUM_BINS) -> None:
        self.threshold = float(threshold)
        self.num_bins = int(num_bins)
        self.hist_true = torch.zeros(self.num_bins, dtype=torch.float64)
        self.hist_false = torch.zeros(self.num_bins, dtype=torch.float64)
        # true positives, false positives, false negatives, true negatives, loss sum, events
        self.scalars = torch.zeros(6, dtype=torch.float64)

    def add_edges(self, scores: torch.Tensor, labels: torch.Tensor) -> None:
        """Count edges.

        Args:
            scores: (E,) sigmoid scores in [0, 1] of edges this rank owns.
            labels: (E,) 0/1 truth of the same edges.
        """
        scores = scores.detach().to("cpu", torch.float64)
        if not bool(torch.isfinite(scores).all()):
            # A nan score falls in no histogram bin: the figures would describe edges the model never scored.
            raise DomainparError(
                "validation: the model's edge scores are not finite (nan or inf): the training diverged; lower --lr, "
                "raise --warmup or clip gradients (--clip)"
            )
        scores = scores.clamp(0.0, 1.0)
        truth = labels.detach().to("cpu") > 0.5
        bins = torch.clamp((scores * self.num_bins).long(), max=self.num_bins - 1)
        self.hist_true += torch.bincount(bins[truth], minlength=self.num_bins).double()
        self.hist_false += torch.bincount(bins[~truth], minlength=self.num_bins).double()
        passed = scores > self.threshold  # strict, as in domainpar.tracks.efficiency
        self.scalars[0] += float(torch.count_nonzero(passed & truth))
        self.scalars[1] += float(torch.count_nonzero(passed & ~truth))
        self.scalars[2] += float(torch.count_nonzero(~passed & truth))
        self.scalars[3] += float(torch.count_nonzero(~passed & ~truth))

    def add_loss(self, loss: float, events: int) -> None:
        """Add this rank's share of the loss of ``events`` events (the group's shares sum to the event losses)."""
        self.scalars[4] += float(loss)
        self.scalars[5] += int(events)

    def packed(self) -> torch.Tensor:
        """Everything as one float64 vector (one all-reduce)."""
        return torch.cat([self.hist_true, self.hist_false, self.scalars])

    def load_packed(self, packed: torch.Tensor) -> None:
        packed = packed.to("cpu", torch.float64)
        self.hist_true = packed[: self.num_bins].clone()
        self.hist_false = packed[self.num_bins : 2 * self.num_bins].clone()
        self.scalars = packed[2 * self.num_bins :].clone()

    def summary(self) -> EdgeMetrics:
        tp, fp, fn, tn, loss_sum, events = (float(v) for v in self.scalars)
        return EdgeMetrics(
            loss=loss_sum / events if events else float("nan"),
            efficiency=tp / (tp + fn) if tp + fn else float("nan"),
            purity=tp / (tp + fp) if tp + fp else float("nan"),
            auc=roc_auc_from_histograms(self.hist_true.numpy(), self.hist_false.numpy()),
            num_events=int(events),
            num_edges=int(tp + fp + fn + tn),
        )


def roc_auc_from_histograms(hist_true: np.ndarray, hist_false: np.ndarray) -> float:
    """ROC AUC from score histograms (same bins): trapezoids between bin edges, ties within a bin count half.

    Args:
        hist_true: (B,) counts of true edges per score bin (ascending scores).
        hist_false: (B,) counts of false edges per score bin.
    """
    num_true, num_false = float(hist_true.sum()), float(hist_false.sum())
    if num_true == 0 or num_false == 0:
        return float("nan")
    # Sweep the threshold from high to low scores.
    tpr = np.concatenate([[0.0], np.cumsum(hist_true[::-1]) / num_true])
    fpr = np.concatenate([[0.0], np.cumsum(hist_false[::-1]) / num_false])
    return float(np.sum((fpr[1:] - fpr[:-1]) * (tpr[1:] + tpr[:-1]) / 2))

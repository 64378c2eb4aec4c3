"""What ``domainpar evaluate`` does: :class:`EvaluateConfig`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from domainpar.errors import DomainparError
from domainpar.tracks.methods import DEFAULT_METHOD as DEFAULT_TRACK_METHOD
from domainpar.tracks.methods import METHODS as TRACK_METHODS

#: Partitioners usable for partitioned inference.
PARTITION_METHODS = ("metis", "geometric")


@dataclass(frozen=True)
class EvaluateConfig:
    """What ``domainpar evaluate`` does."""

    checkpoint: Path | None
    """A checkpoint (``checkpoints/step-*.pt``) or final ``model.pt`` of ``domainpar train``; None with ``model``."""
    data: Path
    """A directory of raw TrackML events with truth, a graph file, or a directory of graph files (.npz or PyG) with labels."""
    model: Path | None = None
    """An exported model (``domainpar export``: .onnx, or TorchScript .pt, with its sidecar JSON) to score instead of a checkpoint."""
    num_parts: int = 1
    """Parts per event; > 1 runs that many local processes with halo exchange."""
    method: str = "metis"
    """Partitioner for num_parts > 1: metis or geometric."""
    threshold: float | None = None
    """Edge score cut (sigmoid probability); None: the checkpoint's training threshold, else 0.5."""
    track_method: str = DEFAULT_TRACK_METHOD
    """Track building: one of :data:`~domainpar.tracks.methods.METHODS` (docs/tracks.md)."""
    events_dir: Path | None = None
    """Raw events holding the truth of graph inputs (for the TrackML score); None for raw inputs."""
    edge_filter: Path | None = None
    """The edge filter the model's training graphs were pruned with (applied to graphs built from raw events)."""
    pt_min: float = 1.0
    """Reconstructable particles have pT above this (GeV)."""
    min_layers: int = 3
    """Reconstructable particles hit at least this many distinct layers."""
    min_track_hits: int = 3
    """Tracks with fewer hits are not candidates for the fake and duplicate rates."""
    seed: int = 0
    """METIS seed."""
    timeout_s: float = 1800.0
    """Wall-clock limit of the partitioned inference job (and its process-group timeout)."""
    progress: bool = True
    """Show progress bars."""
    skip_locality_check: bool = False
    """Skip the check that a model which is not a built-in is local, run before partitioned inference (docs/models.md)."""

    def __post_init__(self) -> None:
        if (self.checkpoint is None) == (self.model is None):
            raise DomainparError(
                "give exactly one of --checkpoint (a training checkpoint) and --model (an exported .onnx/.pt model)"
            )
        if self.model is not None and self.num_parts != 1:
            raise DomainparError(
                f"--parts must be 1 with --model (got {self.num_parts}): an exported model scores whole graphs in one "
                "process; partitioned inference needs the training checkpoint"
            )
        if self.model is not None and self.edge_filter is not None:
            raise DomainparError(
                f"--filter {self.edge_filter}: an exported model (--model) runs the edge filter its sidecar records; "
                "give --filter with --checkpoint only"
            )
        if not isinstance(self.num_parts, int) or self.num_parts < 1:
            raise DomainparError(f"--parts must be a positive integer (got {self.num_parts!r})")
        if self.method not in PARTITION_METHODS:
            raise DomainparError(f"--method must be one of {', '.join(PARTITION_METHODS)} (got {self.method!r})")
        if self.threshold is not None and not (0.0 < self.threshold < 1.0):
            raise DomainparError(f"--threshold must be in (0, 1) (got {self.threshold})")
        if self.track_method not in TRACK_METHODS:
            raise DomainparError(f"--tracks must be one of {', '.join(TRACK_METHODS)} (got {self.track_method!r})")
        if not (self.timeout_s > 0):
            raise DomainparError(f"--timeout must be positive seconds (got {self.timeout_s})")
        if not (self.pt_min >= 0):
            raise DomainparError(f"pt_min must be non-negative (got {self.pt_min})")


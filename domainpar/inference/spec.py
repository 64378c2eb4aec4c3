"""What a trained pipeline is asked to do, checked in one place: :class:`PipelineSpec` and the commands' configs.

``domainpar evaluate`` and ``domainpar reconstruct`` run the same pipeline (:mod:`domainpar.inference.pipeline`)
and take the same pipeline options (:func:`domainpar.cli.pipeline_options.pipeline_options`): the model, its edge
filter, the threshold, the track builder and how every event is split for inference. :class:`PipelineSpec` holds
them and refuses a combination that cannot run, with one line naming the option; :class:`EvaluateConfig` and
:class:`ReconstructConfig` add what each command does besides. A setting left at None is the checkpoint's record
(:func:`~domainpar.inference.pipeline.load_pipeline`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from domainpar.errors import DomainparError
from domainpar.tracks.methods import METHODS as TRACK_METHODS

#: Partitioners usable for partitioned inference.
PARTITION_METHODS = ("metis", "geometric")
#: Formats of a reconstruction's tracks files.
TRACK_FORMATS = ("csv", "parquet")


def _positive_int(value, option: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DomainparError(f"{option}: expected a positive integer, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class PipelineSpec:
    """The trained pipeline and how it runs on every event (the options evaluate and reconstruct share)."""

    checkpoint: Path | None = None
    """A ``domainpar train`` checkpoint (``checkpoints/step-*.pt``) or final ``model.pt``; None with ``model``."""
    model: Path | None = None
    """An exported model (``domainpar export``: .onnx or TorchScript .pt, with its sidecar JSON) instead of a checkpoint."""
    edge_filter: Path | None = None
    """With a checkpoint: the edge filter its training graphs were pruned with (``filter.pt``)."""
    threshold: float | None = None
    """Edge score cut (probability); None: the checkpoint's training threshold (else 0.5), or the sidecar's."""
    track_method: str | None = None
    """Track builder (:data:`~domainpar.tracks.methods.METHODS`); None: the one the checkpoint records, else the default."""
    num_parts: int = 1
    """Parts per event: > 1 scores every event on that many processes with halo exchange (exact)."""
    method: str = "metis"
    seed: int = 0
    timeout_s: float = 1800.0
    """Seconds a process group of partitioned inference waits in one collective before it is declared hung."""
    skip_locality_check: bool = False
    """With num_parts > 1 and a model that is not a built-in: do not prove its locality on the first event (docs/models.md)."""

    def __post_init__(self) -> None:
        if (self.checkpoint is None) == (self.model is None):
            raise DomainparError("give exactly one of --checkpoint (a training checkpoint) and --model (an exported .onnx/.pt model)")
        _positive_int(self.num_parts, "--parts")
        if self.model is not None and self.num_parts != 1:
            raise DomainparError(
                f"--parts: expected 1 with --model, got {self.num_parts} (an exported model scores whole graphs in one "
                "process; partitioned inference needs the training checkpoint)"
            )
        if self.model is not None and self.edge_filter is not None:
            raise DomainparError(
                f"--filter {self.edge_filter}: an exported model (--model) runs the edge filter its sidecar records; "
                "give --filter with --checkpoint only"
            )
        if self.method not in PARTITION_METHODS:
            raise DomainparError(f"--method: expected one of {', '.join(PARTITION_METHODS)}, got {self.method!r}")
        if self.threshold is not None and not (0.0 < self.threshold < 1.0):
            raise DomainparError(f"--threshold: expected a probability in (0, 1), got {self.threshold}")
        if self.track_method is not None and self.track_method not in TRACK_METHODS:
            raise DomainparError(f"--tracks: expected one of {', '.join(TRACK_METHODS)}, got {self.track_method!r}")
        if not (self.timeout_s > 0):
            raise DomainparError(f"--timeout: expected positive seconds, got {self.timeout_s}")


@dataclass(frozen=True, kw_only=True)
class EvaluateConfig(PipelineSpec):
    """What ``domainpar evaluate`` does: the pipeline on labelled events, judged against their truth."""

    data: Path
    """Raw TrackML events with truth, a graph file, or a directory of graph files (.npz or PyG) with labels."""
    events_dir: Path | None = None
    """Raw events holding the truth of graph inputs (for the TrackML score); None for raw inputs."""
    pt_min: float = 1.0
    """Reconstructable particles have pT above this (GeV)."""
    min_layers: int = 3
    """Reconstructable particles hit at least this many distinct layers."""
    min_track_hits: int = 3
    """Tracks with fewer hits are not candidates for the fake and duplicate rates."""
    losses: bool = False
    """Also find where each particle that is not perfect is lost (graph, filter, GNN, builder), by pT
    (:mod:`domainpar.tracks.losses`); a graph file pruned already is rebuilt from its raw event for it."""
    progress: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (self.pt_min >= 0):
            raise DomainparError(f"pt_min: expected a non-negative pT in GeV, got {self.pt_min}")


@dataclass(frozen=True, kw_only=True)
class ReconstructConfig(PipelineSpec):
    """What ``domainpar reconstruct`` does: the pipeline over a dataset without truth, as a production job."""

    data: Path
    """Raw TrackML events (hits, and cells when the features need them; truth is never read), or graph files."""
    out: Path
    """Output directory: submissions/, tracks/, events/, reconstruct.json, summary.json."""
    workers: int | None = None
    """Replicas on this machine, each taking its share of the events (each of num_parts processes); None: decided
    from the cores, the memory and the events (:func:`~domainpar.inference.reconstruct.replicas_for`)."""
    prefetch: int | None = None
    """Events a preparing process reads and builds ahead of the one being scored (0: all stages in one process); None:
    1 with one replica, 0 with several (each replica has its cores already)."""
    tracks_format: str = "csv"
    """The tracks file's format: csv, or parquet (needs pyarrow)."""
    redo: bool = False
    """Replace the outputs of another pipeline found in ``out`` (otherwise the run is refused) and redo every event."""
    threads: int | None = None
    """torch threads per scoring process; None: the cores left after the other processes of this machine."""
    progress: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.workers is not None:
            _positive_int(self.workers, "--workers")
        if self.prefetch is not None and (isinstance(self.prefetch, bool) or not isinstance(self.prefetch, int) or self.prefetch < 0):
            raise DomainparError(f"--prefetch: expected a non-negative integer, got {self.prefetch!r}")
        if self.threads is not None:
            _positive_int(self.threads, "--threads")
        if self.tracks_format not in TRACK_FORMATS:
            raise DomainparError(f"--tracks-format: expected one of {', '.join(TRACK_FORMATS)}, got {self.tracks_format!r}")
        if self.tracks_format == "parquet" and not parquet_available():
            raise DomainparError("--tracks-format parquet: expected pyarrow to be installed (pip install pyarrow), got none; "
                                 "or write CSV (the default)")  # fmt: skip


def parquet_available() -> bool:
    """Whether pandas can write Parquet here (pyarrow installed)."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


__all__ = ["EvaluateConfig", "PARTITION_METHODS", "PipelineSpec", "ReconstructConfig", "TRACK_FORMATS", "parquet_available"]

"""The hit graph of one event: the container every later layer reads.

An :class:`EventGraph` is what ``domainpar build`` writes (one ``.npz`` file per
event, no pickle) and what partitioning, training and evaluation read. Edges
point inner → outer (src → dst), see docs/design.md.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from domainpar.atomic import atomic_path
from domainpar.errors import DomainparError

#: Bumped whenever the on-disk layout changes; files of another version are refused.
GRAPH_FORMAT_VERSION = 1

#: Names of the columns of :attr:`EventGraph.x` in the default feature set.
NODE_FEATURES = ("r", "phi", "z")
#: Names of the columns of :attr:`EventGraph.edge_attr`.
EDGE_FEATURES = ("dr", "dphi", "dz", "dR")


@dataclass(frozen=True, eq=False)
class EventGraph:
    """One event's hit graph (numpy arrays; torch conversion happens later).

    Shapes use N = number of nodes (hits), E = number of candidate edges.
    """

    event_id: int
    """TrackML event number (``event000021000`` → 21000)."""
    x: np.ndarray
    """(N, F) float32 node features: r/1000, phi/pi, z/1000 (plus optional cell features)."""
    pos: np.ndarray
    """(N, 3) float32 hit position x, y, z in mm, for geometric partitioning and plots."""
    hit_id: np.ndarray
    """(N,) int64 TrackML hit_id of every node, for scoring and submissions."""
    layer: np.ndarray
    """(N,) int64 global layer index (0..L-1, ordered as in the detector's layer table)."""
    edge_index: np.ndarray
    """(2, E) int64 node indices of every candidate segment, row 0 = inner (src), row 1 = outer (dst)."""
    edge_attr: np.ndarray
    """(E, 4) float32 edge features dr, dphi, dz, dR (scaled like x)."""
    y: np.ndarray | None = None
    """(E,) float32 label: 1 when both hits are consecutive hits of one non-noise particle; None without truth."""
    particle_id: np.ndarray | None = None
    """(N,) int64 truth particle of every hit (0 = noise); None without truth."""
    particle_pt: np.ndarray | None = None
    """(N,) float32 transverse momentum (GeV) of each hit's particle (0 for noise); None without truth."""

    def __post_init__(self) -> None:
        validate_graph(self, source="EventGraph")

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    @property
    def has_labels(self) -> bool:
        return self.y is not None

    @property
    def num_positive_edges(self) -> int:
        return 0 if self.y is None else int(np.count_nonzero(self.y > 0.5))

    def content_hash(self) -> str:
        """Hash of the graph's structure (nodes, hit ids, edges): what a partition plan is tied to."""
        digest = hashlib.sha256()
        digest.update(np.int64(self.num_nodes).tobytes())
        digest.update(np.ascontiguousarray(self.hit_id, dtype=np.int64).tobytes())
        digest.update(np.ascontiguousarray(self.edge_index, dtype=np.int64).tobytes())
        return digest.hexdigest()[:16]


#: Arrays every graph has, arrays a graph without truth lacks, and the dtype of each.
REQUIRED_ARRAYS = ("x", "pos", "hit_id", "layer", "edge_index", "edge_attr")
OPTIONAL_ARRAYS = ("y", "particle_id", "particle_pt")
ARRAY_DTYPES = {
    "x": np.float32,
    "pos": np.float32,
    "hit_id": np.int64,
    "layer": np.int64,
    "edge_index": np.int64,
    "edge_attr": np.float32,
    "y": np.float32,
    "particle_id": np.int64,
    "particle_pt": np.float32,
}


def _fail(source: str, what: str, expected: str, found: str) -> DomainparError:
    return DomainparError(f"{source}: {what} must be {expected} (got {found})")


def validate_graph(graph: EventGraph, source: str) -> None:
    """Check shapes, dtypes and index ranges; raise a one-line :class:`DomainparError`."""
    for name in REQUIRED_ARRAYS + OPTIONAL_ARRAYS:
        value = getattr(graph, name)
        if value is None:
            if name in REQUIRED_ARRAYS:
                raise _fail(source, name, "an array", "None")
            continue
        if not isinstance(value, np.ndarray):
            raise _fail(source, name, "a numpy array", type(value).__name__)
        if value.dtype != ARRAY_DTYPES[name]:
            raise _fail(source, name, f"of dtype {np.dtype(ARRAY_DTYPES[name]).name}", value.dtype.name)
    n = graph.x.shape[0]
    if graph.x.ndim != 2:
        raise _fail(source, "x", "two-dimensional", f"{graph.x.ndim} dimensions")
    if graph.pos.shape != (n, 3):
        raise _fail(source, "pos", f"of shape ({n}, 3)", str(graph.pos.shape))
    for name in ("hit_id", "layer", "particle_id", "particle_pt"):
        value = getattr(graph, name)
        if value is not None and value.shape != (n,):
            raise _fail(source, name, f"of shape ({n},)", str(value.shape))
    if graph.edge_index.ndim != 2 or graph.edge_index.shape[0] != 2:
        raise _fail(source, "edge_index", "of shape (2, E)", str(graph.edge_index.shape))
    e = graph.edge_index.shape[1]
    if graph.edge_attr.ndim != 2 or graph.edge_attr.shape[0] != e:
        raise _fail(source, "edge_attr", f"of shape ({e}, F)", str(graph.edge_attr.shape))
    if graph.y is not None and graph.y.shape != (e,):
        raise _fail(source, "y", f"of shape ({e},)", str(graph.y.shape))
    if e and (graph.edge_index.min() < 0 or graph.edge_index.max() >= n):
        lo, hi = int(graph.edge_index.min()), int(graph.edge_index.max())
        raise _fail(source, "edge_index", f"within [0, {n})", f"values in [{lo}, {hi}]")


def save_graph(graph: EventGraph, path: str | os.PathLike) -> Path:
    """Write ``graph`` to ``path`` (``.npz``, no pickle) atomically."""
    path = Path(path)
    arrays = {"format_version": np.int64(GRAPH_FORMAT_VERSION), "event_id": np.int64(graph.event_id)}
    for f in fields(EventGraph):
        value = getattr(graph, f.name)
        if isinstance(value, np.ndarray):
            arrays[f.name] = value
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)
    return path


def load_graph(path: str | os.PathLike) -> EventGraph:
    """Read and validate a graph written by :func:`save_graph`.

    Raises:
        DomainparError: the file is missing, not a graph file, of another
            format version, or its arrays are inconsistent.
    """
    path = Path(path)
    if not path.is_file():
        raise DomainparError(f"{path}: graph file not found")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise DomainparError(f"{path}: expected a domainpar graph file (.npz), could not read it ({exc})") from None
    if "format_version" not in arrays:
        raise DomainparError(f"{path}: expected a domainpar graph file, found no format_version entry")
    version = int(arrays.pop("format_version"))
    if version != GRAPH_FORMAT_VERSION:
        raise DomainparError(
            f"{path}: graph format version must be {GRAPH_FORMAT_VERSION} (got {version}); rebuild it with `domainpar build`"
        )
    missing = [k for k in ("event_id",) + REQUIRED_ARRAYS if k not in arrays]
    if missing:
        raise DomainparError(f"{path}: graph file is missing entries {missing}")
    kwargs = {k: arrays.get(k) for k in REQUIRED_ARRAYS + OPTIONAL_ARRAYS}
    for key, value in kwargs.items():
        if value is not None and value.dtype != ARRAY_DTYPES[key]:
            raise DomainparError(
                f"{path}: entry {key} must be of dtype {np.dtype(ARRAY_DTYPES[key]).name} (got {value.dtype.name})"
            )
    graph = object.__new__(EventGraph)
    for key, value in {"event_id": int(arrays["event_id"]), **kwargs}.items():
        object.__setattr__(graph, key, value)
    validate_graph(graph, source=str(path))
    return graph


def graph_files(path: str | os.PathLike) -> list[Path]:
    """The graph files at ``path``: the file itself, or every ``*.npz`` in a directory, sorted."""
    path = Path(path)
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(path.glob("*.npz"))
        if not files:
            raise DomainparError(f"{path}: expected graph files (*.npz) in this directory, found none")
        return files
    raise DomainparError(f"{path}: no such graph file or directory")

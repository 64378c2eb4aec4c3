"""The hit graph of one event: the container every later layer reads, and its own file format (``.npz``).

An :class:`EventGraph` is what ``domainpar build`` writes (one ``.npz`` file per
event, no pickle) and what partitioning, training and evaluation read. Edges
point inner → outer (src → dst), see docs/design.md. This module knows only its
own ``.npz`` files; :mod:`domainpar.data.graph_files` reads graph files of
either format (``.npz``, or PyG files of the field's tools).
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from domainpar.atomic import atomic_path
from domainpar.data.features import recorded_description
from domainpar.errors import DomainparError, not_a_file, one_line, shorten
from domainpar.npzfile import write_npz
from domainpar.parsing import parse_json

#: Bumped whenever the on-disk layout changes. Version 2 added the feature names and the build
#: configuration; version 1 files (without them) are still read.
GRAPH_FORMAT_VERSION = 2
#: Versions :func:`load_npz_graph` reads.
READABLE_FORMAT_VERSIONS = (1, 2)
#: Optional entries naming the features and recording the build configuration (format 2).
METADATA = ("node_features", "edge_features", "build_config")

#: Names of the columns of :attr:`EventGraph.x` in the default feature set.
NODE_FEATURES = ("r", "phi", "z")
#: Names of the columns of :attr:`EventGraph.edge_attr` in the default feature set.
EDGE_FEATURES = ("dr", "dphi", "dz", "dR")


@dataclass(frozen=True, eq=False)
class EventGraph:
    """One event's hit graph (numpy arrays; torch conversion happens later).

    Shapes use N = number of nodes (hits), E = number of candidate edges.
    """

    event_id: int
    """TrackML event number (``event000021000`` → 21000)."""
    x: np.ndarray
    """(N, F) float32 node features (default r/1000, phi/pi, z/1000; named by ``node_features``)."""
    pos: np.ndarray
    """(N, 3) float32 hit position x, y, z in mm, for geometric partitioning and plots."""
    hit_id: np.ndarray
    """(N,) int64 TrackML hit_id of every node, for scoring and submissions."""
    layer: np.ndarray
    """(N,) int64 global layer index (0..L-1, ordered as in the detector's layer table)."""
    edge_index: np.ndarray
    """(2, E) int64 node indices of every candidate segment, row 0 = inner (src), row 1 = outer (dst)."""
    edge_attr: np.ndarray
    """(E, F_e) float32 edge features (default dr, dphi, dz, dR scaled like x; named by ``edge_features``); F_e may be 0
    (graphs of other tools)."""
    y: np.ndarray | None = None
    """(E,) float32 label: 1 when both hits are consecutive hits of one non-noise particle; None without truth."""
    particle_id: np.ndarray | None = None
    """(N,) int64 truth particle of every hit (0 = noise); None without truth."""
    particle_pt: np.ndarray | None = None
    """(N,) float32 transverse momentum (GeV) of each hit's particle (0 for noise); None without truth."""
    particle_nhits: np.ndarray | None = None
    """(N,) int64 hits of each hit's particle in the event (0 for noise), for target selections; None when unknown
    (graphs written before domainpar recorded it, or without truth)."""
    particle_vertex: np.ndarray | None = None
    """(N, 3) float32 production vertex x, y, z (mm) of each hit's particle (0 for noise), for the primary-particle
    selection; None when unknown."""
    node_features: tuple[str, ...] | None = None
    """Name of every column of ``x`` (see :mod:`domainpar.data.features`); None when unknown (format 1 files)."""
    edge_features: tuple[str, ...] | None = None
    """Name of every column of ``edge_attr``; None when unknown (format 1 files)."""
    build_config: str | None = None
    """JSON of the :class:`~domainpar.data.graph.GraphConfig` that built the graph; None when unknown."""

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


#: Arrays every graph has, and arrays a graph without truth lacks.
REQUIRED_ARRAYS = ("x", "pos", "hit_id", "layer", "edge_index", "edge_attr")
OPTIONAL_ARRAYS = ("y", "particle_id", "particle_pt", "particle_nhits", "particle_vertex")
#: dtype and shape of every array, the shape in N (nodes), E (edges) and F (feature columns, at least one).
_ARRAYS = {
    "x": (np.float32, ("N", "F")),
    "pos": (np.float32, ("N", 3)),
    "hit_id": (np.int64, ("N",)),
    "layer": (np.int64, ("N",)),
    "edge_index": (np.int64, (2, "E")),
    "edge_attr": (np.float32, ("E", "F")),
    "y": (np.float32, ("E",)),
    "particle_id": (np.int64, ("N",)),
    "particle_pt": (np.float32, ("N",)),
    "particle_nhits": (np.int64, ("N",)),
    "particle_vertex": (np.float32, ("N", 3)),
}
ARRAY_DTYPES = {name: dtype for name, (dtype, _) in _ARRAYS.items()}
ARRAY_SHAPES = {name: shape for name, (_, shape) in _ARRAYS.items()}
#: Scalar entries of a graph file (0-d integer arrays).
SCALARS = ("format_version", "event_id")


def _fail(source: str, what: str, expected: str, found: str) -> DomainparError:
    return DomainparError(f"{source}: {what} must be {expected} (got {found})")


def _shape_text(shape: tuple) -> str:
    return "(" + ", ".join(str(v) for v in shape) + ("," if len(shape) == 1 else "") + ")"


def check_structure(shapes: dict[str, tuple[tuple[int, ...], np.dtype]], source: str) -> tuple[int, int]:
    """Dtype and shape of every array of a graph, from ``{name: (shape, dtype)}``; returns (N, E).

    Shared by the header-only check of :func:`inspect_npz_graph` and the full :func:`validate_graph`.

    Raises:
        DomainparError: a required array missing, or any array of the wrong dtype, rank or size.
    """
    for name in REQUIRED_ARRAYS:
        if name not in shapes:
            raise _fail(source, name, "an array", "none")
    for name in REQUIRED_ARRAYS + OPTIONAL_ARRAYS:
        if name not in shapes:
            continue
        shape, dtype = shapes[name]
        wanted = np.dtype(ARRAY_DTYPES[name])
        if dtype != wanted:
            raise _fail(source, name, f"of dtype {wanted.name}", getattr(dtype, "name", str(dtype)))
        if len(shape) != len(ARRAY_SHAPES[name]):
            pattern = _shape_text(ARRAY_SHAPES[name])
            raise _fail(source, name, f"{len(ARRAY_SHAPES[name])}-dimensional {pattern}", f"shape {_shape_text(shape)}")
    n = shapes["x"][0][0]
    e = shapes["edge_index"][0][1]
    sizes = {"N": n, "E": e}
    for name in REQUIRED_ARRAYS + OPTIONAL_ARRAYS:
        if name not in shapes:
            continue
        shape = shapes[name][0]
        for axis, (found, want) in enumerate(zip(shape, ARRAY_SHAPES[name])):
            if want == "F":
                # Node features are needed; edge features may be absent (graphs of other tools, models without them).
                if found < 1 and name != "edge_attr":
                    raise _fail(source, name, "of at least one feature column", f"shape {_shape_text(shape)}")
                continue
            expected = sizes.get(want, want)
            if found != expected:
                pattern = _shape_text(tuple(sizes.get(w, w) if w != "F" else "F" for w in ARRAY_SHAPES[name]))
                raise _fail(source, name, f"of shape {pattern}", _shape_text(shape))
    return n, e


def validate_graph(graph: EventGraph, source: str) -> None:
    """Check types, dtypes, shapes and content; raise a one-line :class:`DomainparError`.

    Content: every float finite, edge indices within the nodes, labels 0 or 1,
    particle pT non-negative, hit ids unique, layers non-negative.
    """
    if not isinstance(graph.event_id, int) or isinstance(graph.event_id, bool) or graph.event_id < 0:
        raise _fail(source, "event_id", "a non-negative integer", repr(graph.event_id)[:60])
    shapes = {}
    for name in REQUIRED_ARRAYS + OPTIONAL_ARRAYS:
        value = getattr(graph, name)
        if value is None:
            continue
        if not isinstance(value, np.ndarray):
            raise _fail(source, name, "a numpy array", type(value).__name__)
        shapes[name] = (value.shape, value.dtype)
    n, e = check_structure(shapes, source)
    for name in ("x", "pos", "edge_attr", "y", "particle_pt", "particle_vertex"):
        value = getattr(graph, name)
        if value is not None and not np.isfinite(value).all():
            index = np.unravel_index(int(np.flatnonzero(~np.isfinite(value))[0]), value.shape)
            where = ", ".join(str(int(i)) for i in index)
            raise _fail(source, name, "finite numbers", f"{value[index]} at [{where}]")
    if e and (graph.edge_index.min() < 0 or graph.edge_index.max() >= n):
        lo, hi = int(graph.edge_index.min()), int(graph.edge_index.max())
        raise _fail(source, "edge_index", f"within [0, {n})", f"values in [{lo}, {hi}]")
    if graph.y is not None:
        bad = np.flatnonzero((graph.y != 0) & (graph.y != 1))
        if bad.size:
            raise _fail(source, "y", "edge labels 0 or 1", f"{graph.y[bad[0]]} at [{bad[0]}]")
    if graph.particle_pt is not None and (graph.particle_pt < 0).any():
        bad = int(np.flatnonzero(graph.particle_pt < 0)[0])
        raise _fail(source, "particle_pt", "non-negative GeV", f"{graph.particle_pt[bad]} at [{bad}]")
    if graph.particle_nhits is not None and (graph.particle_nhits < 0).any():
        bad = int(np.flatnonzero(graph.particle_nhits < 0)[0])
        raise _fail(source, "particle_nhits", "non-negative hit counts", f"{graph.particle_nhits[bad]} at [{bad}]")
    if n and graph.layer.min() < 0:
        bad = int(np.flatnonzero(graph.layer < 0)[0])
        raise _fail(source, "layer", "non-negative layer indices", f"{graph.layer[bad]} at [{bad}]")
    ordered = np.sort(graph.hit_id)
    repeated = np.flatnonzero(ordered[1:] == ordered[:-1])
    if repeated.size:
        raise _fail(source, "hit_id", "unique hit ids", f"{ordered[repeated[0]]} more than once")
    for name, array in (("node_features", graph.x), ("edge_features", graph.edge_attr)):
        names = getattr(graph, name)
        if names is None:
            continue
        if not isinstance(names, tuple) or not all(isinstance(v, str) and v for v in names):
            raise _fail(source, name, "a tuple of non-empty names", repr(names))
        if len(names) != array.shape[1]:
            column_array = "x" if name == "node_features" else "edge_attr"
            raise _fail(source, name, f"one name per column of {column_array} ({array.shape[1]})", f"{len(names)} names")
    if graph.build_config is not None:
        try:
            parsed = parse_json(graph.build_config, f"{source}: build_config", "a JSON object")
        except DomainparError:
            raise
        except (TypeError, ValueError):
            parsed = None
        if not isinstance(parsed, dict):
            raise _fail(source, "build_config", "a JSON object", shorten(graph.build_config))


#: Entry of a graph file holding the JSON description of its inputs (:mod:`domainpar.data.features`).
DESCRIPTION_ENTRY = "description_json"


def save_graph(
    graph: EventGraph,
    path: str | os.PathLike,
    description: dict | None = None,
    extra: dict[str, np.ndarray] | None = None,
    compress: bool = True,
) -> Path:
    """Write ``graph`` to ``path`` (``.npz``, no pickle) atomically.

    Args:
        graph: the event graph.
        path: the file to write.
        extra: more entries for later stages (e.g. per-edge scores, :mod:`domainpar.inference.scores`); readers of
            the graph ignore them. Their names must not be the graph's own.
        description: what its feature columns are and how it was built
            (:func:`domainpar.data.features.graph_description`), stored as JSON text; None: the one the
            graph's own feature names and build configuration give (a pruned graph keeps its filter's record).
        compress: deflate the members that deflating shrinks (zlib level 1: the edge index and labels, to a few
            percent); False stores every member as it is: a file read back once or twice in the same run (the
            recipe's training graphs, which its edge filter reads) is ~40 % larger and costs no zlib on either side.
    """
    path = Path(path)
    if description is None:
        description = recorded_description(graph.node_features, graph.edge_features, graph.build_config)
    arrays = {"format_version": np.int64(GRAPH_FORMAT_VERSION), "event_id": np.int64(graph.event_id)}
    if description is not None:
        arrays[DESCRIPTION_ENTRY] = np.array(json.dumps(description, sort_keys=True))
    for f in fields(EventGraph):
        value = getattr(graph, f.name)
        if isinstance(value, np.ndarray):
            arrays[f.name] = value
    # Names and configuration as plain unicode arrays (np.load reads them without pickle).
    for name in ("node_features", "edge_features"):
        if getattr(graph, name) is not None:
            arrays[name] = np.array(getattr(graph, name), dtype=np.str_)
    if graph.build_config is not None:
        arrays["build_config"] = np.array(graph.build_config, dtype=np.str_)
    for name, value in (extra or {}).items():
        if name in arrays or name in ARRAY_DTYPES or name in METADATA:
            raise DomainparError(f"{path}: extra entry {name!r} would replace an entry of the graph itself")
        arrays[name] = value
    with atomic_path(path) as tmp:
        # Reproducible bytes: the same graph gives the same file, whatever worker built it and when.
        # zlib level 1: much less CPU than the default level for a few % more bytes.
        write_npz(tmp, arrays, compress=compress, level=1)
    return path


def require_edges(num_edges: int, source: object, purpose: str) -> None:
    """Refuse, by name, an event whose graph has no edge: there is nothing to ``purpose`` (train on, score, partition).

    Such a graph is valid (the cuts kept no pair of its hits, or an edge filter kept none), but a run on it
    "trains" a step of loss 0 or reports figures of no edge at all; it is named instead.

    Raises:
        DomainparError: ``num_edges`` is 0.
    """
    if num_edges == 0:
        raise DomainparError(
            f"{source}: expected a graph with edges to {purpose}, got one with 0 edges (no pair of its hits passed the "
            "graph cuts, or the edge filter); rebuild it with wider cuts, or leave the event out"
        )


@dataclass(frozen=True)
class GraphHeader:
    """What a graph file holds, read from its array headers (no array data decompressed)."""

    path: Path
    """The file."""
    event_id: int
    """TrackML event number."""
    num_nodes: int
    """N."""
    num_edges: int
    """E."""
    node_features: int
    """Columns of x."""
    edge_features: int
    """Columns of edge_attr."""
    has_labels: bool
    """Whether the file holds edge labels y."""


def _not_a_graph(path: Path, reason: str) -> DomainparError:
    return DomainparError(f"{path}: expected a domainpar graph file (.npz), could not read it ({reason})")


def _read_headers(path: Path) -> tuple[dict[str, tuple[tuple[int, ...], np.dtype]], dict[str, int]]:
    """``{name: (shape, dtype)}`` of every array of an npz file, and the values of its scalar entries.

    The declared sizes are checked against the archive's member sizes, so a
    header promising a terabyte array is refused before anything is allocated.
    """
    if path.is_dir():
        raise DomainparError(f"{path}: expected a graph file (found a directory)")
    if not path.is_file():
        raise not_a_file(path, "graph file")
    shapes: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    scalars: dict[str, int] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                name = info.filename[:-4]
                with archive.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    if version == (1, 0):
                        shape, fortran, dtype = np.lib.format.read_array_header_1_0(member)
                    else:
                        shape, fortran, dtype = np.lib.format.read_array_header_2_0(member)
                    if dtype.hasobject:
                        raise DomainparError(f"{path}: entry {name} must be a numeric array (got an array of Python objects)")
                    declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
                    if declared > info.file_size:
                        raise _not_a_graph(path, f"entry {name} declares {declared:,} bytes but holds {info.file_size:,}")
                    if name in SCALARS:
                        if shape != () or dtype != np.int64:
                            found = f"a {dtype.name} array of shape {_shape_text(shape)}" if shape != () else f"a {dtype.name} scalar"
                            raise DomainparError(f"{path}: entry {name} must be an int64 scalar (got {found})")
                        data = member.read(dtype.itemsize)
                        if len(data) != dtype.itemsize:
                            raise _not_a_graph(path, f"entry {name} is truncated")
                        scalars[name] = int(np.frombuffer(data, dtype=dtype)[0])
                    shapes[name] = (tuple(int(v) for v in shape), dtype)
    except DomainparError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError, IndexError, KeyError, OverflowError) as exc:
        raise _not_a_graph(path, one_line(exc, limit=160)) from None
    return shapes, scalars


def _check_scalars(path: Path, scalars: dict[str, int]) -> int:
    if "format_version" not in scalars:
        raise DomainparError(f"{path}: expected a domainpar graph file, found no format_version entry")
    version = scalars["format_version"]
    if version not in READABLE_FORMAT_VERSIONS:
        raise DomainparError(
            f"{path}: graph format version must be one of {list(READABLE_FORMAT_VERSIONS)} (got {version}); "
            "rebuild it with `domainpar build`"
        )
    if "event_id" not in scalars:
        raise DomainparError(f"{path}: graph file is missing entries ['event_id']")
    if scalars["event_id"] < 0:
        raise _fail(str(path), "event_id", "a non-negative integer", str(scalars["event_id"]))
    return scalars["event_id"]


def inspect_npz_graph(path: str | os.PathLike) -> GraphHeader:
    """Check a graph file's structure from its headers only (format version, event id, every array's dtype and
    shape) — cheap enough to run on every file of a dataset before a run writes anything.

    Content (finite features, index ranges, labels) is checked by :func:`load_npz_graph`; graph files of
    either format are inspected by :func:`domainpar.data.graph_files.inspect_graph`.

    Raises:
        DomainparError: not a graph file, another format version, or an entry of the wrong type, dtype or shape.
    """
    path = Path(path)
    shapes, scalars = _read_headers(path)
    event_id = _check_scalars(path, scalars)
    missing = [k for k in REQUIRED_ARRAYS if k not in shapes]
    if missing:
        raise DomainparError(f"{path}: graph file is missing entries {missing}")
    n, e = check_structure({k: v for k, v in shapes.items() if k in ARRAY_DTYPES}, str(path))
    for name, array in (("node_features", "x"), ("edge_features", "edge_attr")):
        if name in shapes:
            shape, dtype = shapes[name]
            if dtype.kind != "U" or len(shape) != 1 or shape[0] != shapes[array][0][1]:
                raise DomainparError(
                    f"{path}: entry {name} must be one name per column of {array} ({shapes[array][0][1]}) "
                    f"(got a {dtype.name} array of shape {_shape_text(shape)})"
                )
    if "build_config" in shapes and (shapes["build_config"][0] != () or shapes["build_config"][1].kind != "U"):
        raise DomainparError(f"{path}: entry build_config must be one JSON string (got {shapes['build_config'][1].name})")
    return GraphHeader(
        path=path,
        event_id=event_id,
        num_nodes=n,
        num_edges=e,
        node_features=shapes["x"][0][1],
        edge_features=shapes["edge_attr"][0][1],
        has_labels="y" in shapes,
    )


def load_npz_graph(path: str | os.PathLike) -> EventGraph:
    """Read and validate a graph written by :func:`save_graph` (structure first, then content).

    Graph files of either format are read by :func:`domainpar.data.graph_files.load_graph`.

    Raises:
        DomainparError: the file is missing, not a graph file, of another
            format version, or its arrays are of the wrong type, shape or dtype, or hold
            non-finite values, out-of-range indices or labels other than 0/1.
    """
    path = Path(path)
    header = inspect_npz_graph(path)
    wanted = [k for k in REQUIRED_ARRAYS + OPTIONAL_ARRAYS]
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in wanted + list(METADATA) if k in npz.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise _not_a_graph(path, one_line(exc, limit=160)) from None
    graph = object.__new__(EventGraph)
    for key in wanted:
        object.__setattr__(graph, key, arrays.get(key))
    object.__setattr__(graph, "event_id", header.event_id)
    for name in ("node_features", "edge_features"):
        value = arrays.get(name)
        object.__setattr__(graph, name, None if value is None else tuple(str(v) for v in value))
    config = arrays.get("build_config")
    object.__setattr__(graph, "build_config", None if config is None else str(config))
    validate_graph(graph, source=str(path))
    return graph


def read_npz_description(path: str | os.PathLike) -> dict | None:
    """The description stored with a graph file; for a file written without one, the description its feature names
    and build configuration give (:func:`~domainpar.data.features.recorded_description`); None for a format-1 file,
    which records neither.

    Reads those entries of the archive, not the arrays.

    Raises:
        DomainparError: not a readable graph file, or a description that is not a JSON object.
    """
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            stored = f"{DESCRIPTION_ENTRY}.npy" in archive.namelist()
        if not stored:
            meta = read_npz_metadata(path)
            return recorded_description(meta["node_features"], meta["edge_features"], meta["build_config"])
        with np.load(path, allow_pickle=False) as npz:
            text = npz[DESCRIPTION_ENTRY]
            names = {kind: [str(v) for v in npz[kind]] for kind in ("node_features", "edge_features") if kind in npz.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise DomainparError(f"{path}: expected a domainpar graph file (.npz), could not read it ({exc})") from None
    try:
        description = parse_json(str(text), f"{path} entry {DESCRIPTION_ENTRY}", "a JSON object")
    except DomainparError:
        raise
    except ValueError:
        description = None
    if not isinstance(description, dict):
        raise DomainparError(f"{path}: entry {DESCRIPTION_ENTRY} must hold a JSON object (got {str(text)[:60]!r})")
    # The description goes into checkpoints and exported models' sidecars: it must describe the columns this file has.
    for kind, found in names.items():
        described = description.get(kind)
        listed = [f.get("name") if isinstance(f, dict) else f for f in described] if isinstance(described, list) else None
        if listed is not None and listed != found:
            raise DomainparError(
                f"{path}: entry {DESCRIPTION_ENTRY} describes {kind.replace('_', ' ')} {shorten(listed)} but the file's "
                f"{kind} are {shorten(found)}; rebuild it with `domainpar build`"
            )
    return description


def read_npz_metadata(path: str | os.PathLike) -> dict:
    """The feature names and build configuration of a graph file, without reading its arrays.

    Returns:
        ``{"node_features": [...] | None, "edge_features": [...] | None, "build_config": str | None}``
        (None for format-1 files, which do not record them).

    Raises:
        DomainparError: the file cannot be read as a graph file.
    """
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            names = set(npz.files)
            meta = {
                "node_features": [str(v) for v in npz["node_features"]] if "node_features" in names else None,
                "edge_features": [str(v) for v in npz["edge_features"]] if "edge_features" in names else None,
                "build_config": str(npz["build_config"]) if "build_config" in names else None,
            }
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise DomainparError(f"{path}: expected a domainpar graph file (.npz), could not read it ({exc})") from None
    return meta

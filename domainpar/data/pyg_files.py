"""Graphs from the field's tools: PyTorch Geometric ``Data`` files (Exa.TrkX, acorn) to and from :class:`EventGraph`.

The Exa.TrkX and acorn (GNN4ITk) pipelines store one event per file, a
``torch_geometric.data.Data`` written with ``torch.save`` (``event<id>.pyg``,
``event<id>-graph.pyg``, ``*.pt``, or Exa.TrkX's bare event numbers).
:func:`load_pyg_file` reads such a file into an :class:`EventGraph`, so the
rest of the engine never sees the difference; :func:`save_pyg_graph` writes
ours in their layout (``domainpar build --format pyg``).

Safety. Files are read with ``torch.load(weights_only=True)`` inside a
``torch.serialization.safe_globals`` context that allows only PyG's data
classes (``Data``, its storages and attribute descriptors) and data-only
stand-ins for two names these pipelines pickle: the Lightning
``AttributeDict`` of acorn's ``config`` (loaded as a plain dict) and the
dynamically created ``DataBatch`` class of PyG batches (loaded as a plain
``Data``). Anything else in the pickle — any other class, any function — is
refused with one line before it runs. Nothing from a file is executed.

torch, torch_geometric and pandas are imported on use: reading ``.npz`` graphs
through :mod:`domainpar.data.graph_files` stays free of them (seconds to import).

Field mapping (first match wins; names are the unprefixed ones of the files,
acorn's ``hit_``/``edge_``/``track_`` prefixed names are accepted too):

=================  ===========================================================================
EventGraph         PyG attribute(s)
=================  ===========================================================================
``x``              ``hit_features`` (N, F) [domainpar]; ``x`` when 2-D (N, F) [Exa.TrkX: taken
                   as stored]; else ``r``, ``phi``, ``z`` (N,) [acorn: mm, rad] as
                   r/1000, phi/pi, z/1000 (domainpar's and acorn's usual scaling)
``pos``            ``hit_pos`` / ``pos`` (N, 3); else (r cos phi, r sin phi, z); else zeros
                   (Exa.TrkX files have none: partition with METIS)
``hit_id``         ``hit_id``, ``hid``; else numbered 1..N (submissions then need real ids)
``layer``          ``hit_layer`` / ``layer`` / ``layers``; else (``volume_id``, ``layer_id``) of the
                   TrackML detector, else those pairs numbered in order; else 0
``edge_index``     ``edge_index``, ``e_radius`` (2, E) [row 0 = source]
``edge_attr``      ``edge_attr`` (E, F_e); else dr, dphi, dz, dR from r, phi, z (as
                   ``domainpar build``); else no edge features (E, 0)
``y``              ``y``, ``edge_y``, ``truth`` (E,) [bool or 0/1]; absent: unlabelled
``particle_id``    ``hit_particle_id`` / ``pid`` / ``particle_id`` of shape (N,); else from
                   ``track_edges`` (2, T) and a per-track-edge ``particle_id`` (T,) [acorn]
``particle_pt``    ``hit_pt`` / ``pt`` of shape (N,); else from ``track_edges`` and ``pt`` (T,)
``particle_nhits`` ``hit_particle_nhits`` (N,); else from ``track_edges`` and ``nhits`` (T,) [acorn]
``particle_vertex`` ``hit_particle_vertex`` (N, 3) [domainpar]
``event_id``       ``event_id`` (int or digits); else the last digits of the file name
=================  ===========================================================================

:func:`save_pyg_graph` writes every field above under its first name, plus
acorn's: ``x`` (hit x coordinate, mm), ``r``, ``phi``, ``z``, ``eta``,
``volume_id``, ``layer_id``, ``track_edges`` (true segments), ``particle_id``
and ``pt`` per track edge, ``truth_map`` (index of each true segment in
``edge_index``, -1 if the graph missed it), ``y`` as bool, ``event_id`` as a
9-digit string, and the graph's description as a ``config`` entry.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import re
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from domainpar.atomic import atomic_path, staged_outputs
from domainpar.data.event_graph import EDGE_FEATURES, EventGraph, save_graph
from domainpar.data.true_segments import pair_keys, true_segments
from domainpar.errors import DomainparError, not_a_file, one_line, reraise_fault
from domainpar.progress import progress as progress_display

#: File suffixes taken for PyG graph files.
PYG_SUFFIXES = (".pyg", ".pt")
#: How a graph read from a PyG file is described (``builder`` of its description).
PYG_BUILDER = "pyg file"


def is_pyg_file(path: str | os.PathLike) -> bool:
    """A PyG graph file by its name: ``*.pyg``, ``*.pt``, or a bare event number (Exa.TrkX)."""
    path = Path(path)
    return path.suffix.lower() in PYG_SUFFIXES or (path.suffix == "" and path.name.isdigit())


def pyg_files_in(directory: str | os.PathLike) -> list[Path]:
    """The PyG graph files of a directory, sorted by name."""
    return sorted(p for p in Path(directory).iterdir() if p.is_file() and is_pyg_file(p) and not p.name.startswith("."))


# ----------------------------------------------------------------------------- safe reading


class _AttributeDict:
    """Unpickled in place of Lightning's ``AttributeDict`` (acorn stores its hyper-parameters in ``config``): a plain dict."""

    def __new__(cls, *args, **kwargs):  # noqa: D102 - NEWOBJ then SETITEMS fill the dict, as for the original
        return {}


def _batch_as_data(cls: Any, base_cls: Any):
    """Stand-in for PyG's ``DynamicInheritanceGetter()(Batch, Data)``: a plain ``Data`` to receive the batch's state."""
    from torch_geometric.data import Data

    return Data()


class _DataBatchGetter:
    """Unpickled in place of ``torch_geometric.data.batch.DynamicInheritanceGetter``; stands for :func:`_batch_as_data`."""

    def __new__(cls):  # noqa: D102 - the unpickler's NEWOBJ gets the allow-listed function, not an object
        return _batch_as_data


class _BatchMarker:
    """Unpickled in place of ``torch_geometric.data.batch.Batch`` (only ever an argument of :func:`_batch_as_data`)."""


def _safe_globals() -> list:
    from torch_geometric.data import Data
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import EdgeStorage, GlobalStorage, NodeStorage

    allowed: list = [Data, DataEdgeAttr, DataTensorAttr, GlobalStorage, NodeStorage, EdgeStorage]
    for name in (
        "lightning_fabric.utilities.data.AttributeDict",
        "lightning.fabric.utilities.data.AttributeDict",
        "pytorch_lightning.utilities.parsing.AttributeDict",
    ):
        allowed.append((_AttributeDict, name))
    allowed += [
        (_DataBatchGetter, "torch_geometric.data.batch.DynamicInheritanceGetter"),
        (_BatchMarker, "torch_geometric.data.batch.Batch"),
        _batch_as_data,
    ]
    return allowed


def read_pyg_object(path: str | os.PathLike) -> Any:
    """``torch.load(path, weights_only=True)`` with PyG's data classes allowed; nothing else.

    Raises:
        DomainparError: missing file, not a torch file, or a pickle holding anything but
            tensors, plain containers and PyG data (refused before it is built).
    """
    import torch

    path = Path(path)
    if not path.is_file():
        raise not_a_file(path, "PyG graph file")
    try:
        # torch warns about the pickle protocol of a foreign file before refusing it: the refusal is the one line.
        with torch.serialization.safe_globals(_safe_globals()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        text = str(exc)
        found = re.search(r"GLOBAL ([\w.]+)", text) or re.search(r"unrecognized function (\S+)", text)
        detail = text.partition("WeightsUnpickler error:")[2].strip().split("\n")[0] or one_line(exc, 120)
        if found or "Can only" in detail:
            what = f"a pickled {found.group(1)}" if found else detail[:120]
            reason = f"it holds {what}, not only tensors and PyG Data; domainpar never unpickles arbitrary objects"
        else:
            reason = f"not a readable torch file ({detail[:120]})"
    except (zipfile.BadZipFile, EOFError, RuntimeError, KeyError, ValueError, AttributeError, TypeError) as exc:
        reraise_fault(exc)  # torch's allocator failing on a huge file is the machine's, not the file's
        reason = f"not a readable torch file ({one_line(exc, 120)})"
    raise DomainparError(f"{path}: refused to load as a PyG graph: {reason}")


# ----------------------------------------------------------------------------- Data → EventGraph


def _fields(obj: Any, path: Path) -> dict[str, Any]:
    """The attributes of a Data (or of a plain dict of tensors) as a dict."""
    from torch_geometric.data import Data

    if isinstance(obj, Data):
        return dict(obj.to_dict())
    if isinstance(obj, dict) and all(isinstance(k, str) for k in obj):
        return dict(obj)
    raise DomainparError(f"{path}: expected a torch_geometric Data object (or a dict of tensors), got {type(obj).__name__}")


def _array(fields: dict[str, Any], name: str, path: Path) -> np.ndarray | None:
    import torch

    value = fields.get(name)
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float, bool)) for v in value):
        return np.asarray(value)
    raise DomainparError(f"{path}: field {name} must be a tensor (got {type(value).__name__})")


def _first(fields: dict, names: tuple[str, ...], path: Path, ndim: int | None = None, length: int | None = None):
    """(name, array) of the first of ``names`` present (with ``ndim`` dims and first dimension ``length`` if given)."""
    for name in names:
        value = _array(fields, name, path)
        if value is None:
            continue
        if ndim is not None and value.ndim != ndim:
            continue
        if length is not None and (value.ndim == 0 or value.shape[0] != length):
            continue
        return name, value
    return None, None


def _names(*names: str) -> tuple[str, ...]:
    """Each name and its acorn-prefixed form."""
    out = []
    for name in names:
        out.append(name)
        for prefix in ("hit_", "edge_", "track_"):
            if not name.startswith(prefix):
                out.append(prefix + name)
    return tuple(dict.fromkeys(out))


def _missing(path: Path, what: str, expected: str) -> DomainparError:
    return DomainparError(f"{path}: missing {what}: expected {expected} (see domainpar/data/pyg_files.py for the field mapping)")


def _finite(path: Path, name: str, array: np.ndarray) -> np.ndarray:
    if array.dtype.kind not in "biuf":
        raise DomainparError(f"{path}: field {name} must hold numbers (got dtype {array.dtype})")
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise DomainparError(f"{path}: field {name} must be finite (found NaN or inf)")
    return array


def _integers(path: Path, name: str, array: np.ndarray) -> np.ndarray:
    """An integer field as int64; float values must be whole numbers within int64 (ids read as floats lose digits)."""
    if array.dtype.kind in "biu":
        if array.dtype.kind == "u" and array.size and array.max() > np.iinfo(np.int64).max:
            raise DomainparError(f"{path}: field {name} must fit in int64 (got values up to {array.max()})")
        return array.astype(np.int64)
    if array.dtype.kind == "f":
        _finite(path, name, array)
        if array.size and (np.any(array != np.round(array)) or np.abs(array).max() >= 2.0**53):
            raise DomainparError(f"{path}: field {name} must hold integers (got non-integral or inexact float values)")
        return array.astype(np.int64)
    raise DomainparError(f"{path}: field {name} must hold integers (got dtype {array.dtype})")


def _event_id(fields: dict, path: Path) -> int:
    import torch

    value = fields.get("event_id")
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = int(value.item())
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 0 <= value < 2**63:
        return int(value)
    digits = re.findall(r"\d+", path.name.split(".")[0] if path.suffix else path.name)
    if digits and int(digits[-1]) < 2**63:
        return int(digits[-1])
    raise _missing(path, "event id", "an event_id field or digits in the file name")


def _per_track_to_hits(values: np.ndarray, track_edges: np.ndarray, num_nodes: int, dtype) -> np.ndarray:
    """acorn stores truth per true segment (track edge); every hit of a segment gets its value (noise: 0)."""
    per_hit = np.zeros(num_nodes, dtype=dtype)
    per_hit[track_edges[0]] = values
    per_hit[track_edges[1]] = values
    return per_hit


def _layers(fields: dict, path: Path, num_nodes: int) -> tuple[np.ndarray, str]:
    name, layer = _first(fields, ("hit_layer", "layer", "layers"), path, ndim=1, length=num_nodes)
    if layer is not None:
        return _integers(path, name, layer), name
    _, volume = _first(fields, _names("volume_id"), path, ndim=1, length=num_nodes)
    _, layer_id = _first(fields, _names("layer_id"), path, ndim=1, length=num_nodes)
    if volume is not None and layer_id is not None:
        from domainpar.data.detector import layer_index_of

        index = layer_index_of(volume, layer_id)
        if (index >= 0).all():
            return index.astype(np.int64), "volume_id,layer_id (TrackML detector)"
        # Another detector: number its (volume, layer) pairs; distinct layers stay distinct.
        keys = volume.astype(np.int64) * 100_000 + layer_id.astype(np.int64)
        return np.unique(keys, return_inverse=True)[1].astype(np.int64), "volume_id,layer_id (numbered)"
    return np.zeros(num_nodes, dtype=np.int64), "none (all 0)"


def _cylindrical(fields: dict, path: Path, num_nodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(r, phi, z) in mm and rad from acorn's raw per-hit fields, None if any is absent."""
    parts = []
    for name in ("r", "phi", "z"):
        _, value = _first(fields, _names(name), path, ndim=1, length=num_nodes)
        if value is None:
            return None
        parts.append(_finite(path, name, value.astype(np.float64)))
    return parts[0], parts[1], parts[2]


@dataclass(frozen=True)
class PygGraph:
    """A graph read from a PyG file, with what was found where."""

    graph: EventGraph
    """The event graph."""
    description: dict
    """Its input description (:func:`domainpar.data.features.graph_description`), with ``source_fields``."""


def graph_from_fields(fields: dict[str, Any], path: str | os.PathLike) -> PygGraph:
    """An :class:`EventGraph` from the attributes of a PyG Data (see the module's field mapping).

    Raises:
        DomainparError: a required field missing, or fields of inconsistent shapes (one line naming ``path``).
    """
    from domainpar.data.features import graph_description

    path = Path(path)
    used: dict[str, str] = {}
    edge_name, edge_index = _first(fields, ("edge_index", "e_radius"), path, ndim=2)
    if edge_index is None or edge_index.shape[0] != 2:
        raise _missing(path, "edges", "edge_index (2, E)")
    used["edge_index"] = edge_name
    id_name, hit_id = _first(fields, ("hit_id", "hid"), path, ndim=1)
    if hit_id is not None:
        num_nodes = int(hit_id.shape[0])
    else:
        _, nodes = _first(fields, ("hit_features", "x"), path, ndim=2)
        if nodes is None:
            _, nodes = _first(fields, _names("r"), path, ndim=1)
        if nodes is None:
            raise _missing(path, "nodes", "hit_id or hid (N,), or node features x (N, F)")
        num_nodes = int(nodes.shape[0])
        hit_id, id_name = np.arange(1, num_nodes + 1, dtype=np.int64), "none (numbered 1..N)"
    used["hit_id"] = id_name
    cylindrical = _cylindrical(fields, path, num_nodes)

    # Node features.
    x_name, x = _first(fields, ("hit_features",), path, ndim=2, length=num_nodes)
    if x is not None:
        names = fields.get("hit_feature_names")
        node_names = [str(n) for n in names] if isinstance(names, (list, tuple)) and len(names) == x.shape[1] else None
    else:
        x_name, x = _first(fields, ("x",), path, ndim=2, length=num_nodes)
        node_names = None
    if x is None and cylindrical is not None:
        r, phi, z = cylindrical
        x, x_name, node_names = np.stack([r / 1000.0, phi / math.pi, z / 1000.0], axis=1), "r,phi,z", ["r", "phi", "z"]
    if x is None:
        raise _missing(path, "node features", f"hit_features (N, F), x (N, F), or r, phi, z ({num_nodes},)")
    used["x"] = x_name
    if node_names is None:
        node_names = [f"{x_name}[{i}]" for i in range(x.shape[1])]

    # Positions.
    pos_name, pos = _first(fields, ("hit_pos", "pos"), path, ndim=2, length=num_nodes)
    if pos is not None and pos.shape[1] != 3:
        pos = None
    if pos is None and cylindrical is not None:
        r, phi, z = cylindrical
        pos, pos_name = np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1), "r,phi,z"
    if pos is None:
        # Exa.TrkX files carry scaled features but no positions; only the geometric partitioner and plots need them.
        pos, pos_name = np.zeros((num_nodes, 3), dtype=np.float32), "none (zeros: partition with metis)"
    used["pos"] = pos_name

    layer, used["layer"] = _layers(fields, path, num_nodes)

    # Edge features.
    num_edges = int(edge_index.shape[1])
    attr_name, edge_attr = _first(fields, ("edge_attr",), path, ndim=2, length=num_edges)
    edge_names = None
    if edge_attr is None and cylindrical is not None:
        from domainpar.data.features import edge_feature_matrix

        r, phi, z = cylindrical
        edges = _integers(path, "edge_index", edge_index)
        if edges.size and (edges.min() < 0 or edges.max() >= num_nodes):
            raise DomainparError(f"{path}: edge_index must be within [0, {num_nodes}) (got values in [{edges.min()}, {edges.max()}])")
        r64, phi64 = np.asarray(r, np.float64), np.asarray(phi, np.float64)
        pos64 = np.stack([r64 * np.cos(phi64), r64 * np.sin(phi64), np.asarray(z, np.float64)], axis=1)
        edge_attr = edge_feature_matrix(EDGE_FEATURES, pos64, edges)
        attr_name, edge_names = "computed from r,phi,z", list(EDGE_FEATURES)
    if edge_attr is None:
        edge_attr, attr_name, edge_names = np.zeros((num_edges, 0), dtype=np.float32), "none", []
    used["edge_attr"] = attr_name
    if edge_names is None:
        names = fields.get("edge_feature_names")
        edge_names = [str(n) for n in names] if isinstance(names, (list, tuple)) and len(names) == edge_attr.shape[1] else [
            f"edge_attr[{i}]" for i in range(edge_attr.shape[1])
        ]

    # Truth.
    y_name, y = _first(fields, ("y", "edge_y", "truth"), path, ndim=1, length=num_edges)
    used["y"] = y_name or "none"
    pid_name, particle_id = _first(fields, ("hit_particle_id", "pid", "particle_id"), path, ndim=1, length=num_nodes)
    pt_name, particle_pt = _first(fields, ("hit_pt", "pt"), path, ndim=1, length=num_nodes)
    nhits_name, particle_nhits = _first(fields, ("hit_particle_nhits",), path, ndim=1, length=num_nodes)
    _, particle_vertex = _first(fields, ("hit_particle_vertex",), path, ndim=2, length=num_nodes)
    _, track_edges = _first(fields, ("track_edges",), path, ndim=2)
    if track_edges is not None and track_edges.shape[0] == 2:
        num_tracks = track_edges.shape[1]
        track_edges = _integers(path, "track_edges", track_edges)
        if num_tracks and (track_edges.min() < 0 or track_edges.max() >= num_nodes):
            raise DomainparError(f"{path}: track_edges must be within [0, {num_nodes})")
        if particle_id is None:
            name, values = _first(fields, _names("particle_id"), path, ndim=1, length=num_tracks)
            if values is not None:
                particle_id, pid_name = _per_track_to_hits(values, track_edges, num_nodes, np.int64), f"{name} per track edge"
        if particle_pt is None:
            name, values = _first(fields, _names("pt") + ("track_particle_pt",), path, ndim=1, length=num_tracks)
            if values is not None:
                particle_pt, pt_name = _per_track_to_hits(values, track_edges, num_nodes, np.float32), f"{name} per track edge"
        if particle_nhits is None:
            name, values = _first(fields, _names("nhits") + ("track_particle_nhits",), path, ndim=1, length=num_tracks)
            if values is not None:
                particle_nhits = _per_track_to_hits(_integers(path, name, values), track_edges, num_nodes, np.int64)
                nhits_name = f"{name} per track edge"
    used["particle_id"] = pid_name or "none"
    used["particle_pt"] = pt_name or "none"
    used["particle_nhits"] = nhits_name or "none"

    arrays = {
        "x": _finite(path, "x", x).astype(np.float32),
        "pos": _finite(path, "pos", pos).astype(np.float32),
        "hit_id": _integers(path, used["hit_id"], hit_id),
        "layer": layer,
        "edge_index": _integers(path, used["edge_index"], edge_index),
        "edge_attr": _finite(path, "edge_attr", edge_attr).astype(np.float32),
        "y": None if y is None else _finite(path, "y", y).astype(np.float32),
        "particle_id": None if particle_id is None else _integers(path, "particle_id", particle_id),
        "particle_pt": None if particle_pt is None else _finite(path, "pt", particle_pt).astype(np.float32),
        "particle_nhits": None if particle_nhits is None else _integers(path, "particle_nhits", particle_nhits),
        "particle_vertex": None
        if particle_vertex is None or particle_vertex.shape[1:] != (3,)
        else _finite(path, "hit_particle_vertex", particle_vertex).astype(np.float32),
    }
    event_id = _event_id(fields, path)
    try:
        graph = EventGraph(event_id=event_id, **arrays)
    except DomainparError as exc:
        raise DomainparError(f"{path}: {str(exc).removeprefix('EventGraph: ')}") from None
    description = _stored_description(fields)
    if description is None:
        description = graph_description(node_names, edge_names, PYG_BUILDER, _source_config(fields))
    description = {**description, "source_fields": used}
    return PygGraph(graph=graph, description=description)


def _source_config(fields: dict) -> dict | None:
    """What the producing pipeline recorded about itself (acorn: its stages' hyper-parameters in ``config``)."""
    config = fields.get("config")
    if config is None:
        return None
    # A JSON-able copy: tensors and other objects become strings.
    return {"config": json.loads(json.dumps(config, default=str))}


def _stored_description(fields: dict) -> dict | None:
    """The description domainpar stored in a file it wrote (an entry of ``config``)."""
    config = fields.get("config")
    if isinstance(config, (list, tuple)):
        for entry in config:
            if isinstance(entry, dict) and isinstance(entry.get("domainpar_description"), dict):
                return dict(entry["domainpar_description"])
    return None


def load_pyg_file(path: str | os.PathLike) -> PygGraph:
    """Read a PyG graph file (safely, see the module docstring) into an :class:`EventGraph` and its description."""
    path = Path(path)
    return graph_from_fields(_fields(read_pyg_object(path), path), path)


# ----------------------------------------------------------------------------- EventGraph → Data


def save_pyg_graph(
    graph: EventGraph,
    path: str | os.PathLike,
    description: dict | None = None,
    vertex: np.ndarray | None = None,
) -> Path:
    """Write ``graph`` as a PyG ``Data`` file in the Exa.TrkX/acorn layout (atomically; see the module docstring).

    Args:
        graph: the event graph.
        path: the file (``event<id>.pyg``).
        description: the graph's input description, stored in ``config``.
        vertex: (N, 3) production vertex of every hit's particle (mm), for the true
            segments ``track_edges``; None measures along tracks from the origin.
    """
    import torch
    from torch_geometric.data import Data

    path = Path(path)
    pos = graph.pos.astype(np.float64)
    r = np.hypot(pos[:, 0], pos[:, 1])
    phi = np.arctan2(pos[:, 1], pos[:, 0])
    eta = np.arcsinh(pos[:, 2] / np.maximum(r, 1e-9))
    t = lambda a, dtype=torch.float32: torch.from_numpy(np.array(a, copy=True)).to(dtype)  # noqa: E731
    values: dict[str, Any] = {
        "event_id": f"{graph.event_id:09d}",
        "hit_id": t(graph.hit_id, torch.int64),
        "x": t(pos[:, 0]),
        "r": t(r),
        "phi": t(phi),
        "z": t(pos[:, 2]),
        "eta": t(eta),
        "hit_pos": t(graph.pos),
        "hit_layer": t(graph.layer, torch.int64),
        "hit_features": t(graph.x),
        "hit_feature_names": [f["name"] for f in description["node_features"]] if description else None,
        "edge_index": t(graph.edge_index, torch.int64),
        "edge_attr": t(graph.edge_attr),
        "edge_feature_names": [f["name"] for f in description["edge_features"]] if description else None,
        "config": [{"domainpar_description": description}] if description else [],
    }
    from domainpar.data.detector import layer_table

    table = layer_table()
    if graph.layer.size and 0 <= graph.layer.min() and graph.layer.max() < len(table):
        order = table.set_index("layer_index").loc[graph.layer]
        values["volume_id"] = t(order["volume_id"].to_numpy(np.int64), torch.int64)
        values["layer_id"] = t(order["layer_id"].to_numpy(np.int64), torch.int64)
    if graph.y is not None:
        values["y"] = t(graph.y > 0.5, torch.bool)
    if graph.particle_id is not None:
        values["hit_particle_id"] = t(graph.particle_id, torch.int64)
        segments = true_segments(graph.particle_id, graph.layer, graph.pos, vertex)
        num_nodes = graph.num_nodes
        edge_keys = pair_keys(graph.edge_index[0], graph.edge_index[1], num_nodes)
        segment_keys = pair_keys(segments[0], segments[1], num_nodes)
        order = np.argsort(edge_keys, kind="stable")
        found = np.searchsorted(edge_keys[order], segment_keys)
        found = np.minimum(found, max(edge_keys.size - 1, 0))
        hit = edge_keys.size > 0
        matched = (edge_keys[order][found] == segment_keys) if hit else np.zeros(segment_keys.size, dtype=bool)
        truth_map = np.where(matched, order[found] if hit else -1, -1)
        values["track_edges"] = t(segments, torch.int64)
        values["particle_id"] = t(graph.particle_id[segments[0]], torch.int64)
        values["truth_map"] = t(truth_map, torch.int64)
        if graph.particle_pt is not None:
            values["pt"] = t(graph.particle_pt[segments[0]])
        if graph.particle_nhits is not None:
            values["nhits"] = t(graph.particle_nhits[segments[0]], torch.int64)
    if graph.particle_pt is not None:
        values["hit_pt"] = t(graph.particle_pt)
    if graph.particle_nhits is not None:
        values["hit_particle_nhits"] = t(graph.particle_nhits, torch.int64)
    if graph.particle_vertex is not None:
        values["hit_particle_vertex"] = t(graph.particle_vertex)
    data = Data(**{k: v for k, v in values.items() if v is not None})
    with atomic_path(path) as tmp:
        torch.save(data, tmp)
    return path


def convert_pyg_files(files: list[Path], target_dir: str | os.PathLike, progress: bool = True) -> list[Path]:
    """Convert PyG graph files once into domainpar graph files ``<target_dir>/<stem>.npz`` (kept: reused later).

    Training reads ``.npz`` graphs (sizes from their headers, plans and part files from their arrays); this is
    the one pass that turns a directory of the field's files into them.

    Args:
        files: PyG graph files.
        target_dir: where the ``.npz`` files go (e.g. ``<out>/graphs/train``).
        progress: show a progress bar.

    Raises:
        DomainparError: two files with one stem, an unreadable or refused file, a missing field, no labels.
    """
    target_dir = Path(target_dir)
    stems: dict[str, Path] = {}
    for file in files:
        if file.stem in stems:
            raise DomainparError(f"{file}: expected one graph file per name (found {stems[file.stem].name} too)")
        stems[file.stem] = file

    converted = []
    # The converted graphs appear only when every file converted: a refused file leaves nothing behind.
    with staged_outputs() as outputs:
        staging = None
        for file in progress_display(files, desc="converting PyG graphs", unit="event", enabled=progress):
            target = target_dir / f"{file.stem}.npz"
            if not target.is_file():
                loaded = load_pyg_file(file)
                if loaded.graph.y is None:
                    raise DomainparError(f"{file}: training needs edge labels (expected a y, edge_y or truth field, found none)")
                staging = staging or outputs.directory(target_dir)
                save_graph(loaded.graph, staging / target.name, loaded.description)
            converted.append(target)
    return converted


def save_event_pyg(graph: EventGraph, prefix: str | os.PathLike, path: str | os.PathLike, description: dict | None) -> Path:
    """:func:`save_pyg_graph` for a graph built from the TrackML event at ``prefix``.

    The true segments (``track_edges``) are ordered from each particle's
    production vertex, read from the event's particles file, exactly as the
    graph's labels were made.
    """
    vertex = None
    if graph.particle_id is not None:
        from domainpar.data.hit_truth import particle_columns
        from domainpar.data.trackml import load_event

        (particles,) = load_event(prefix, parts=("particles",))
        vertex = particle_columns(particles, graph.particle_id)[2]
    return save_pyg_graph(graph, path, description, vertex)

"""Graph files of either format: domainpar's own ``.npz`` or PyG files of the field's tools, told apart by name.

Every reader of graph files goes through here. The formats themselves live in
:mod:`domainpar.data.event_graph` and :mod:`domainpar.data.pyg_files`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from domainpar.data.event_graph import EventGraph, GraphHeader, inspect_npz_graph, load_npz_graph, read_npz_description, read_npz_metadata, save_graph
from domainpar.data.pyg_files import is_pyg_file, load_pyg_file, pyg_files_in, save_event_pyg
from domainpar.errors import DomainparError

#: Graph file formats of ``domainpar build``: domainpar's own, or PyG ``Data`` files for the Exa.TrkX/acorn tools.
GRAPH_FORMATS = ("npz", "pyg")


#: What a directory of training or evaluation inputs must hold (the end of the message that refuses one without).
GRAPHS_OR_EVENTS = "expected graph files (*.npz, or PyG *.pyg / *.pt) or raw TrackML events (event*-hits.csv[.gz])"


def _is_pyg(path: Path) -> bool:
    return is_pyg_file(path) and path.is_file()


def load_graph(path: str | os.PathLike) -> EventGraph:
    """Read and validate a graph file: domainpar's ``.npz`` (structure first, then content),
    or a PyG graph file of the field's tools.

    PyG files (``*.pyg``, ``*.pt``; :mod:`domainpar.data.pyg_files`) are read
    with ``torch.load(weights_only=True)`` and mapped onto an EventGraph.

    Raises:
        DomainparError: as :func:`~domainpar.data.event_graph.load_npz_graph`.
    """
    path = Path(path)
    if _is_pyg(path):
        return load_pyg_file(path).graph
    return load_npz_graph(path)


def inspect_graph(path: str | os.PathLike) -> GraphHeader:
    """Check a graph file's structure: of an ``.npz`` from its headers only (format version, event id, every
    array's dtype and shape), cheap enough to run on every file of a dataset before a run writes anything.

    Content (finite features, index ranges, labels) is checked by :func:`load_graph`.

    Raises:
        DomainparError: as :func:`~domainpar.data.event_graph.inspect_npz_graph`.
    """
    path = Path(path)
    if _is_pyg(path):
        # A PyG file has no array headers to read apart: it is read whole (training converts such files once).
        graph = load_pyg_file(path).graph
        return GraphHeader(
            path=path, event_id=graph.event_id, num_nodes=graph.num_nodes, num_edges=graph.num_edges,
            node_features=int(graph.x.shape[1]), edge_features=int(graph.edge_attr.shape[1]), has_labels=graph.y is not None,
        )  # fmt: skip
    return inspect_npz_graph(path)


def read_graph_description(path: str | os.PathLike) -> dict | None:
    """The description stored with a graph file (None for a file written without one).

    Of an ``.npz``, reads that one entry of the archive, not the arrays.

    Raises:
        DomainparError: not a readable graph file, or a description that is not a JSON object.
    """
    path = Path(path)
    if _is_pyg(path):
        return load_pyg_file(path).description
    return read_npz_description(path)


def read_graph_metadata(path: str | os.PathLike) -> dict:
    """:func:`~domainpar.data.event_graph.read_npz_metadata` of a graph file (all None for PyG files)."""
    path = Path(path)
    if _is_pyg(path):
        # PyG files of other tools name their columns in their description, not in these entries.
        return {"node_features": None, "edge_features": None, "build_config": None}
    return read_npz_metadata(path)


def graph_files(path: str | os.PathLike) -> list[Path]:
    """The graph files at ``path``: the file itself, or every ``*.npz`` in a directory, sorted;
    a directory without ``*.npz`` gives its PyG graph files (``*.pyg``, ``*.pt``).

    Raises:
        DomainparError: no graph files, or a directory holding both formats (one would be left out).
    """
    path = Path(path)
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.glob("*.npz") if not p.name.startswith("."))
        pyg = pyg_files_in(path)
        if files and pyg:
            raise DomainparError(
                f"{path}: expected graph files of one format (found {len(files)} *.npz and {len(pyg)} PyG files, e.g. "
                f"{files[0].name} and {pyg[0].name}); a run reads one format per directory: put the other in a directory of its own"
            )
        files = files or pyg
        if not files:
            raise DomainparError(f"{path}: expected graph files (*.npz, or PyG *.pyg / *.pt) in this directory, found none")
        return files
    raise DomainparError(f"{path}: no such graph file or directory")


def refuse_mixed_inputs(path: Path, option: str) -> None:
    """A directory must hold graph files or raw TrackML events, not both: one kind would be silently left out.
    A file must be a graph file, not one of a raw event's CSV files.

    Raises:
        DomainparError: naming ``option``, the directory and an example of each kind, or the event file.
    """
    if path.is_file() and re.fullmatch(r"event[0-9]+-(hits|cells|particles|truth)\.csv(\.gz)?", path.name):
        # Read as a graph file, it failed as "not a zip file"; the user meant its event, read from its directory.
        raise DomainparError(
            f"{option} {path}: expected a directory of raw TrackML events or a graph file, got one of an event's "
            f"CSV files (give its directory, {path.parent})"
        )
    if not path.is_dir():
        return
    events = sorted(path.glob("event*-hits.csv*"))
    if events and has_graph_files(path):
        graphs = sorted(p.name for p in path.iterdir() if p.suffix in (".npz", ".pyg", ".pt") and not p.name.startswith("."))
        raise DomainparError(
            f"{option} {path}: expected graph files or raw TrackML events, found both (e.g. {graphs[0] if graphs else 'graph files'} "
            f"and {events[0].name}); keep built graphs in a directory of their own"
        )


def has_graph_files(path: str | os.PathLike) -> bool:
    """``path`` is a graph file or a directory holding ``*.npz`` or PyG graph files."""
    path = Path(path)
    if path.is_file():
        return True
    if not path.is_dir():
        return False
    return any(path.glob("*.npz")) or bool(pyg_files_in(path))


def is_pyg_dataset(path: str | os.PathLike) -> bool:
    """Whether ``graph_files(path)`` gives PyG graph files (of the field's tools) rather than ``*.npz``."""
    files = graph_files(path)
    return bool(files) and _is_pyg(files[0])


def save_event_graph(
    graph: EventGraph,
    prefix: str | os.PathLike,
    path: str | os.PathLike,
    description: dict | None,
    fmt: str = "npz",
    compress: bool = True,
) -> Path:
    """Write the graph built from the raw event at ``prefix`` as ``fmt`` (atomically).

    Args:
        graph: the event graph.
        prefix: the raw event it was built from (a PyG file's true segments read its particles' vertices).
        path: the file to write.
        description: what its feature columns are and how it was built (:func:`domainpar.data.features.build_description`).
        fmt: one of :data:`GRAPH_FORMATS`.
        compress: of an ``.npz``, :func:`~domainpar.data.event_graph.save_graph`'s (a PyG file is torch's own).

    Raises:
        DomainparError: an unknown format.
    """
    if fmt == "pyg":
        return save_event_pyg(graph, prefix, path, description)
    if fmt == "npz":
        return save_graph(graph, path, description, compress=compress)
    raise DomainparError(f"--format must be one of {', '.join(GRAPH_FORMATS)} (got {fmt!r})")


__all__ = [
    "GRAPH_FORMATS",
    "graph_files",
    "has_graph_files",
    "inspect_graph",
    "is_pyg_dataset",
    "load_graph",
    "read_graph_description",
    "read_graph_metadata",
    "save_event_graph",
]

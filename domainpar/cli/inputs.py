"""What a command reads, so that none of its outputs is written over it (:func:`domainpar.output_paths.check_apart`).

An input option names a file (a checkpoint, a graph, a config), an event
prefix (``data/event000000001``: its part files) or a directory whose graph
files or raw event files the command reads. :func:`inputs_of` lists the
option's path and every such file, without reading any of them, so the check
costs one directory listing per input and runs before any work.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

#: Suffixes of the graph files a directory input is read for (domainpar npz, PyG).
_GRAPH_SUFFIXES = (".npz", ".pyg", ".pt")
#: A raw TrackML event file (``event000000001-hits.csv`` or ``.csv.gz``).
_EVENT_FILE = re.compile(r"event\d+-[A-Za-z_]+\.csv(\.gz)?")


def inputs_of(option: str, path: str | os.PathLike | None) -> list[tuple[str, Path]]:
    """``(option, path)`` of ``path`` and of the files a command reads through it (none when not given)."""
    if path is None or str(path) == "":
        return []
    path = Path(path)
    found = [(option, path)]
    if path.is_dir():
        try:
            entries = list(path.iterdir())
        except OSError:
            entries = []
        found += [(option, e) for e in entries if e.suffix in _GRAPH_SUFFIXES or _EVENT_FILE.fullmatch(e.name)]
    elif not path.exists() and path.parent.is_dir():
        # An event prefix: data/event000000001 stands for data/event000000001-<part>.csv[.gz].
        found += [(option, part) for part in path.parent.glob(glob_escape(path.name) + "-*") if _EVENT_FILE.fullmatch(part.name)]
    return found


def glob_escape(name: str) -> str:
    """``name`` with glob's special characters made literal."""
    return re.sub(r"([*?\[])", r"[\1]", name)


def all_inputs(*options: tuple[str, str | os.PathLike | None]) -> list[tuple[str, Path]]:
    """:func:`inputs_of` every ``(option, path)`` given."""
    found: list[tuple[str, Path]] = []
    for option, path in options:
        found += inputs_of(option, path)
    return found


def sidecar_inputs(option: str, model: str | os.PathLike | None) -> list[tuple[str, Path]]:
    """An exported model file read with ``option``, and the files read with it: its sidecar and edge filter."""
    if model is None:
        return []
    model = Path(model)
    found = [(option, model), (option, model.with_name(model.name + ".json"))]
    found += [(option, filt) for filt in model.parent.glob(glob_escape(model.stem) + ".filter*")] if model.parent.is_dir() else []
    return found


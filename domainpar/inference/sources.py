"""The events of a run: raw TrackML events or graph files, listed once and each file read once.

An input is named by its event (``event000021000``) and identified by its files: :func:`input_stamp` gives each
file's name, size and modification time (what a rerun compares), and :func:`read_raw_event` reads every file it needs
exactly once, hashes the bytes read (the data digest an output records) and parses them from memory. The truth and
particles files are read only when truth is asked for (evaluate); a reconstruction never opens them.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from domainpar.data.event_graph import EventGraph
from domainpar.data.graph_files import graph_files, has_graph_files, refuse_mixed_inputs
from domainpar.data.trackml import event_file, event_id_of, event_prefixes, has_truth, load_event, unreadable_event_file
from domainpar.errors import DomainparError


@dataclass(frozen=True)
class EventSource:
    """One event to run: a raw TrackML event prefix or a graph file."""

    name: str
    """The event in messages and output names: ``event000021000``."""
    path: Path
    """The event prefix (raw) or the graph file."""
    kind: str
    """``raw`` or ``graph``."""


def list_sources(data: Path, truth: bool = False) -> list[EventSource]:
    """The events of ``--data``: a directory of raw TrackML events, a graph file, or a directory of graph files.

    Args:
        data: the ``--data`` path.
        truth: the run judges against truth: every raw event must have its truth file.

    Raises:
        DomainparError: nothing there, raw events and graph files mixed, two files of one event, or (with
            ``truth``) a raw event without truth.
    """
    data = Path(data)
    if not data.exists():
        raise DomainparError(f"--data {data}: expected raw TrackML events or graph files (not found)")
    refuse_mixed_inputs(data, "--data")
    if data.is_dir() and any(data.glob("event*-hits.csv*")):
        sources = [EventSource(prefix.name, prefix, "raw") for prefix in event_prefixes(data)]
        if not sources:  # event*-hits.csv files, none named as an event (event_prefixes names the odd ones it sees)
            raise DomainparError(f"--data {data}: expected raw TrackML events named event<digits>-hits.csv[.gz] (found none)")
        missing = next((s for s in sources if not has_truth(s.path)), None) if truth else None
        if missing is not None:
            raise DomainparError(
                f"{missing.path}: evaluation needs the truth file (found none: a test-set event?); "
                "`domainpar reconstruct` runs the pipeline on events without truth"
            )
        return sources
    if not has_graph_files(data):
        if data.is_dir():
            event_prefixes(data)  # event files it would not read (upper case, .bz2, ...) are named, as by `build`
        raise DomainparError(
            f"--data {data}: expected raw TrackML events (event*-hits.csv[.gz]) or graph files (*.npz, or PyG *.pyg / *.pt), "
            "found neither"
        )
    sources: dict[str, EventSource] = {}
    for path in graph_files(data):
        name = path.name.split(".")[0]
        if name in sources:
            raise DomainparError(f"--data {data}: expected one graph file per event (found {sources[name].path.name} and {path.name})")
        sources[name] = EventSource(name, path, "graph")
    return list(sources.values())


def raw_parts(needs_cells: bool, truth: bool = False) -> tuple[str, ...]:
    """The files of a raw event a run reads."""
    return ("hits",) + (("cells",) if needs_cells else ()) + (("particles", "truth") if truth else ())


def input_files(source: EventSource, needs_cells: bool) -> list[Path]:
    """The files an event's reconstruction reads (missing ones are named when the event is read)."""
    if source.kind == "graph":
        return [source.path]
    files = []
    for part in raw_parts(needs_cells):
        try:
            files.append(event_file(source.path, part))
        except DomainparError:
            continue
    return files


def input_stamp(files: list[Path]) -> list[dict]:
    """Name, size and modification time (ns) of each input file: what a rerun compares."""
    stamp = []
    for path in files:
        info = os.stat(path)
        stamp.append({"file": path.name, "bytes": int(info.st_size), "mtime_ns": int(info.st_mtime_ns)})
    return stamp


@dataclass(frozen=True)
class RawEvent:
    """A raw event read once: its frames, the digest of the bytes read, and how long reading took."""

    event_id: int
    hits: pd.DataFrame
    cells: pd.DataFrame | None
    """The cells, when the features need them."""
    particles: pd.DataFrame | None
    """The particles, when truth was asked for."""
    truth: pd.DataFrame | None
    """The truth (checked against the hits: one row per hit), when asked for."""
    inputs: list[dict]
    """Each file read but the truth's: name, size, modification time and the SHA-256 of its bytes."""
    seconds: float
    """Reading and parsing."""


def read_raw_event(source: EventSource | Path, needs_cells: bool, truth: bool = False) -> RawEvent:
    """Read the files an event's run needs, each once: bytes → SHA-256 → parsed from memory.

    Raises:
        DomainparError: a missing or malformed file, named.
    """
    prefix = source.path if isinstance(source, EventSource) else Path(source)
    started = time.perf_counter()
    parts = raw_parts(needs_cells, truth)
    contents: dict[str, tuple[Path, bytes]] = {}
    inputs = []
    for part in parts:
        path = event_file(prefix, part)
        try:
            with open(path, "rb") as handle:
                info = os.fstat(handle.fileno())
                content = handle.read()
        except PermissionError:
            raise unreadable_event_file(path) from None
        contents[part] = (path, content)
        if part in ("hits", "cells"):
            inputs.append({"file": path.name, "bytes": len(content), "mtime_ns": int(info.st_mtime_ns),
                           "sha256": hashlib.sha256(content).hexdigest()})  # fmt: skip
    frames = dict(zip(parts, load_event(prefix, parts=parts, contents=contents)))
    return RawEvent(event_id_of(prefix), frames["hits"], frames.get("cells"), frames.get("particles"), frames.get("truth"),
                    inputs, time.perf_counter() - started)  # fmt: skip


def graph_digest(graph: EventGraph) -> str:
    """SHA-256 of what a graph input gives the model (hits, positions, edges, features): its data digest, computed
    from the arrays read, not from a second read of the file."""
    digest = hashlib.sha256()
    for array in (graph.hit_id, graph.pos, graph.edge_index, graph.x, graph.edge_attr):
        array = np.ascontiguousarray(array)
        digest.update(str(array.dtype).encode() + str(array.shape).encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


__all__ = ["EventSource", "RawEvent", "graph_digest", "input_files", "input_stamp", "list_sources", "raw_parts", "read_raw_event"]

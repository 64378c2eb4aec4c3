"""Hit graphs of a whole dataset: one ``event<id>.npz`` per raw event, in parallel, any shard.

:func:`build_graph_files` is what ``domainpar build`` and the preparation of a
training run call: every event is built in its own worker process
(:func:`domainpar.workers.run_items`), written atomically with reproducible
bytes, and an event that fails is reported by name while the others finish.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from domainpar.data.graph import GraphConfig, GraphStats, build_event_graph, graph_file_name
from domainpar.errors import DomainparError
from domainpar.workers import ItemResult, run_items


def event_inputs(input_path: str | os.PathLike) -> list[Path]:
    """Event prefixes of ``input_path``: every event of a directory (sorted by event number), or one prefix.

    Raises:
        DomainparError: neither a directory of TrackML events nor an event prefix.
    """
    from domainpar.data.trackml import event_prefixes

    input_path = Path(input_path)
    if input_path.is_dir():
        prefixes = event_prefixes(input_path)
        if not prefixes:
            raise DomainparError(f"{input_path}: expected TrackML event files event<digits>-<part>.csv[.gz] (found none)")
        return prefixes
    if input_path.parent.is_dir() and any(input_path.parent.glob(input_path.name + "-hits.csv*")):
        return [input_path]
    raise DomainparError(f"{input_path}: expected a directory of TrackML events or an event prefix (found neither)")


def graph_target(prefix: str | os.PathLike, out_dir: str | os.PathLike, fmt: str = "npz") -> Path:
    """Where the graph of raw event ``prefix`` goes: ``<out_dir>/event<id:09d>.<fmt>``."""
    from domainpar.data.trackml import event_id_of

    return Path(out_dir) / graph_file_name(event_id_of(prefix), fmt)


def build_graph_file(
    prefix: str | os.PathLike, out_dir: str | os.PathLike, config: GraphConfig, skip_existing: bool = False, fmt: str = "npz"
) -> GraphStats | None:
    """Build and save the graph of one event (atomically, with the description of its features and cuts);
    None when ``skip_existing`` and it is there already.

    Args:
        prefix: the raw event.
        out_dir: output directory.
        config: the cuts.
        skip_existing: keep a graph already written (a resumed preparation).
        fmt: "npz" (domainpar's graph file) or "pyg" (a PyG Data file, :mod:`domainpar.data.pyg_files`).
    """
    from domainpar.data.event_graph import save_graph
    from domainpar.data.features import build_description

    target = graph_target(prefix, out_dir, fmt)
    if skip_existing and target.is_file():
        return None
    graph, stats = build_event_graph(prefix, config)
    if fmt == "pyg":
        from domainpar.data.pyg_files import save_event_pyg

        save_event_pyg(graph, prefix, target, build_description(config))
    else:
        save_graph(graph, target, build_description(config))
    return stats


def build_graph_files(
    prefixes: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    config: GraphConfig = GraphConfig(),
    *,
    workers: int = 1,
    progress: bool = True,
    skip_existing: bool = False,
    fmt: str = "npz",
    should_stop=None,
    on_result=None,
) -> list[ItemResult]:
    """Build the graph of every event of ``prefixes`` into ``out_dir``, ``workers`` events at a time.

    Args:
        prefixes: raw event prefixes (e.g. a shard of :func:`event_inputs`).
        out_dir: output directory (created with the first graph).
        config: the cuts.
        workers: processes (1: in this process).
        progress: progress bar with events/s.
        skip_existing: keep graphs already in ``out_dir`` (resumed preparation).
        fmt: "npz" or "pyg".
        should_stop, on_result: see :func:`domainpar.workers.run_items`.

    Returns:
        One :class:`ItemResult` per event, in order; ``value`` is its :class:`GraphStats`
        (None if skipped), ``error`` the one-line reason it failed.
    """
    return run_items(
        build_graph_file,
        [str(p) for p in prefixes],
        args=(str(out_dir), config, skip_existing, fmt),
        names=[Path(p).name for p in prefixes],
        workers=workers,
        desc="build",
        progress=progress,
        should_stop=should_stop,
        on_result=on_result,
        temporaries_in=[out_dir],
    )

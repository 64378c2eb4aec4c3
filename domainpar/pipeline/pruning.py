"""One graph pruned by a saved edge filter: the item of the recipe's pool that prunes every set after the filter.

A module of its own so that a spawned worker imports what the item runs (the graph build and the filter) and not
the whole recipe behind :mod:`domainpar.pipeline.physics` (evaluation, training, the track builders: ~2.5 s of a
core for each worker).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from domainpar.data.dataset import graph_target
from domainpar.data.event_graph import save_graph
from domainpar.data.graph import build_event_graph
from domainpar.data.graph_files import load_graph
from domainpar.filter.edge_filter import load_filter

#: Seconds one core takes to read a graph file, score its edges with the filter and write what it keeps, per MB.
PRUNE_SECONDS_PER_MB = 0.05
#: Seconds one core takes to read a graph file and write the edges that its logits, computed already, keep, per MB.
SELECT_SECONDS_PER_MB = 0.0125
#: MB of graph file per second of building it (a full event: ~200 MB in ~4 s), to size a built-and-pruned item.
EVENT_GRAPH_MB_PER_BUILD_SECOND = 50.0


def graph_record(stats) -> dict:
    """A build's :class:`~domainpar.data.graph.GraphStats` as the recipe records it (no timing: the same graph, the
    same record)."""
    return {k: v for k, v in stats.as_record().items() if k != "seconds"}


def filtered_record(before, after) -> dict:
    """Edges kept, share of the graph's true edges kept (all, and of particles above 1 GeV), purity after filtering."""
    true_before = int(np.count_nonzero(before.y > 0.5))
    true_after = int(np.count_nonzero(after.y > 0.5))
    high_before = (before.y > 0.5) & (before.particle_pt[before.edge_index[0]] > 1.0)
    high_after = (after.y > 0.5) & (after.particle_pt[after.edge_index[0]] > 1.0)
    return {
        "event_id": after.event_id,
        "num_edges_before": before.num_edges,
        "num_edges": after.num_edges,
        "efficiency": true_after / true_before if true_before else None,
        "efficiency_pt1": int(high_after.sum()) / int(high_before.sum()) if high_before.any() else None,
        "purity": true_after / after.num_edges if after.num_edges else None,
    }


def pruned_graph(item: tuple[str, str, bool, np.ndarray | None], filter_path: str, out_dir: str, graph_config) -> dict:
    """One graph pruned with the filter saved at ``filter_path`` and written to ``out_dir/<set>/`` (a worker's item).

    Args:
        item: ``(set, source, build, logits)``: a graph file to read, or (``build``) a raw event to build the graph
            of with ``graph_config`` first. Either way the file written holds the same bytes: the graph, as
            :func:`~domainpar.data.event_graph.save_graph` would have written and :func:`load_graph` read it, pruned.
            ``logits``: the filter's logits of a graph file's edges, where they were computed already (else None).

    Returns:
        ``{"built": the build record or None, "filtered": the filter record}``.
    """
    kind, source, build, logits = item
    edge_filter = load_filter(filter_path)
    built = None
    if build:
        graph, stats = build_event_graph(source, graph_config)
        built = graph_record(stats)
        target = graph_target(source, Path(out_dir) / kind)
    else:
        graph = load_graph(source)
        target = Path(out_dir) / kind / Path(source).name
    kept = edge_filter.apply(graph, logits)
    save_graph(kept, target)
    return {"built": built, "filtered": filtered_record(graph, kept)}


__all__ = ["filtered_record", "graph_record", "pruned_graph"]

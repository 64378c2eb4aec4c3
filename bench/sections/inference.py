"""Inference at event scale: one process vs N parts, track building and the TrackML score.

A labelled simulated event (10,000 particles full, 2,000 quick) and a freshly
initialised Interaction Network saved as a checkpoint; then, each a median of
``repeats`` calls:

* whole-event inference in one process (the chain's single-process scorer);
* partitioned inference on a group of N local processes started once, as
  ``domainpar evaluate --parts N`` scores every event
  (:class:`~domainpar.inference.partitioned.LocalGroup`: partition, scatter the
  parts, halo exchange, gather), and the group's start-up (spawn, imports, the
  model) on its own;
* track building from the edge scores, as ``evaluate`` and ``reconstruct``
  build tracks (``build_candidates`` from the hits' positions and layers),
  with every method (``ckf`` the default), and the TrackML score of the
  default method's tracks.

The threshold keeps as many edges as the graph has true ones, so the
edge-only builders see a realistic selection from an untrained model (the
following builders seed and extend below it, as they do in production). The partitioned
logits must equal the single-process ones to float rounding (reported).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common.report import Column, Section, ratio
from bench.common.timing import median_seconds
from bench.common.workloads import Workload


def run(workload: Workload, *, parts: int = 2, repeats: int = 3, hidden: int = 64, iterations: int = 8) -> Section:
    """The inference section (see the module docstring)."""
    import torch

    from bench.common.plans import graph_at
    from domainpar.model.config import ModelConfig
    from domainpar.model.registry import build_model
    from domainpar.tracks.candidates import build_candidates
    from domainpar.tracks.config import TrackConfig
    from domainpar.tracks.methods import DEFAULT_METHOD, METHODS
    from domainpar.tracks.score import score_arrays
    from domainpar.train.checkpoint import CHECKPOINT_FORMAT_VERSION, write_checkpoint
    from domainpar.inference.model_io import load_model
    from domainpar.inference.partitioned import LocalGroup
    from domainpar.inference.runner import whole_graph_logits

    start = time.perf_counter()
    graph = graph_at(workload.path)
    config = ModelConfig(
        node_features=int(graph.x.shape[1]), edge_features=int(graph.edge_attr.shape[1]), hidden=hidden, num_iterations=iterations
    )
    torch.manual_seed(0)
    rows = []
    with tempfile.TemporaryDirectory(prefix="domainpar-bench-inference-") as tmp:
        checkpoint = Path(tmp) / "model.pt"
        write_checkpoint(
            {"format_version": CHECKPOINT_FORMAT_VERSION, "step": 0, "model": build_model(config).state_dict(),
             "model_config": config.to_dict(), "config": {}},
            checkpoint,
        )
        loaded = load_model(checkpoint)
        single = median_seconds(lambda: whole_graph_logits(loaded, graph), repeats, warmup=1)
        group = LocalGroup(checkpoint, parts, "metis")
        try:
            started = time.perf_counter()
            group.logits(graph)
            first = time.perf_counter() - started
            partitioned = median_seconds(lambda: group.logits(graph)[0], repeats, warmup=0)
        finally:
            group.close()
    logits = single.result
    diff = float(np.max(np.abs(partitioned.result - logits)))
    rows.append({"stage": "inference, 1 process", "wall_s": single.seconds, "cpu_s": single.cpu_seconds})
    rows.append({"stage": f"inference, {parts} parts of a started group (partition + scatter + halo exchange + gather)",
                 "wall_s": partitioned.seconds, "cpu_s": None, "ratio_to_single": ratio(partitioned.seconds, single.seconds)})
    rows.append({"stage": f"start-up of the {parts}-process group (spawn, imports, model), once a run",
                 "wall_s": first - partitioned.seconds, "cpu_s": None})
    scores = 1.0 / (1.0 + np.exp(-logits))
    threshold = float(np.quantile(scores, 1.0 - graph.num_positive_edges / graph.num_edges))
    weight = np.ones(graph.num_nodes) / graph.num_nodes
    tracks = None
    for method in (DEFAULT_METHOD, *(m for m in METHODS if m != DEFAULT_METHOD)):
        config = TrackConfig(method=method, threshold=threshold)
        t = median_seconds(lambda: build_candidates(graph.pos, graph.layer, graph.edge_index, scores, config), repeats)
        tracks = t.result.track_id if tracks is None else tracks
        label = f"{method} (default)" if method == DEFAULT_METHOD else method
        rows.append({"stage": f"track building, {label}", "wall_s": t.seconds, "cpu_s": t.cpu_seconds})
    t = median_seconds(lambda: score_arrays(tracks, graph.particle_id, weight).score, repeats)
    rows.append({"stage": "TrackML score", "wall_s": t.seconds, "cpu_s": t.cpu_seconds})
    for row in rows:
        row["num_edges"] = graph.num_edges
    section = Section(
        name="inference",
        title="Inference, track building and scoring at event scale",
        columns=[
            Column("stage", "stage"),
            Column("wall_s", "wall s (median)", "{:.3f}"),
            Column("cpu_s", "CPU s (median)", "{:.3f}"),
            Column("ratio_to_single", "÷ 1 process", "{:.2f}"),
        ],
        rows=rows,
    )
    section.notes += [
        f"Graph: {workload.name} ({workload.num_nodes:,} nodes, {workload.num_edges:,} edges); untrained Interaction "
        f"Network hidden {hidden}, {iterations} iterations; medians of {repeats} calls.",
        f"Partitioned vs single-process logits: max |difference| {diff:.2e}.",
        "Partitioned inference includes partitioning and moving the parts to the ranks: it pays off when the event does "
        "not fit one device, not on a small event. Track building uses the threshold that keeps as many edges as are true; "
        f"the score, of the {DEFAULT_METHOD} tracks, uses uniform hit weights (the cost does not depend on them).",
    ]
    section.seconds = time.perf_counter() - start
    return section


def section(ctx) -> Section:
    """Entry point (see :mod:`bench.sections`): a labelled simulated event."""
    return run(ctx.simulated(ctx.size(2000, 10000)), repeats=ctx.size(1, 3))

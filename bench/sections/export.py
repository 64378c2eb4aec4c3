"""Exported models: export time, and one event's inference as deployed (TorchScript, ONNX Runtime) vs the training model.

A labelled simulated event (10,000 particles full, 2,000 quick) and a freshly
initialised Interaction Network (hidden 64, 8 iterations, edge features)
saved as a checkpoint. ``domainpar export`` writes it as TorchScript and as
ONNX (each export includes loading the file back and checking it against the
training model); then one event's logits, timed in alternating rounds:

* the training model (``InteractionNetwork``, eager PyTorch, one process, no gradients);
* the TorchScript file (``torch.jit.load``, as ACTS's ``TorchEdgeClassifier`` runs it);
* the ONNX file in ONNX Runtime on CPU with one intra-op thread (ACTS's ``OnnxEdgeClassifier`` setting)
  and with as many threads as torch uses.

Each exported file's logits are compared with the training model's (max |difference|).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common.report import Column, Section, ratio
from bench.common.timing import alternate
from bench.common.workloads import Workload


def run(workload: Workload, *, rounds: int = 3, hidden: int = 64, iterations: int = 8) -> Section:
    """The export section (see the module docstring)."""
    import torch

    from bench.common.plans import graph_at
    from domainpar.data.features import build_description
    from domainpar.data.graph import GraphConfig
    from domainpar.export.runtime import _OnnxRunner, load_exported
    from domainpar.export.source import load_export_source, training_logits, training_model
    from domainpar.export.writer import export_model
    from domainpar.model.config import ModelConfig
    from domainpar.model.registry import build_model
    from domainpar.train.checkpoint import CHECKPOINT_FORMAT_VERSION, write_checkpoint

    start = time.perf_counter()
    graph = graph_at(workload.path)
    config = ModelConfig(
        node_features=int(graph.x.shape[1]), edge_features=int(graph.edge_attr.shape[1]), hidden=hidden, num_iterations=iterations
    )
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    rows = []
    with tempfile.TemporaryDirectory(prefix="domainpar-bench-export-") as tmp:
        checkpoint = Path(tmp) / "model.pt"
        write_checkpoint(
            {"format_version": CHECKPOINT_FORMAT_VERSION, "step": 0, "model": build_model(config).state_dict(),
             "model_config": config.to_dict(), "config": {}, "data": build_description(GraphConfig())},
            checkpoint,
        )  # fmt: skip
        source = load_export_source(checkpoint)
        files = {}
        for fmt, name in (("torchscript", "model.pt"), ("onnx", "model.onnx")):
            wall, cpu = time.perf_counter(), time.process_time()
            files[fmt] = export_model(source, fmt, Path(tmp) / name).model_path
            rows.append({"stage": f"export {fmt} (write, load back, check)", "wall_s": time.perf_counter() - wall,
                         "cpu_s": time.process_time() - cpu})  # fmt: skip
        model = training_model(source)
        x, edge_index, edge_attr = (torch.from_numpy(a) for a in (graph.x, graph.edge_index, graph.edge_attr))
        torchscript = load_exported(files["torchscript"])
        onnx_one = load_exported(files["onnx"])
        onnx_all = load_exported(files["onnx"])
        onnx_all.runner = _OnnxRunner(files["onnx"], threads=threads)
        fns = {
            "training model (eager PyTorch)": lambda: training_logits(model, x, edge_index, edge_attr).double().numpy(),
            "TorchScript (torch.jit.load)": lambda: torchscript.logits(graph.x, graph.edge_index, graph.edge_attr),
            "ONNX Runtime CPU, 1 thread (ACTS)": lambda: onnx_one.logits(graph.x, graph.edge_index, graph.edge_attr),
            f"ONNX Runtime CPU, {threads} threads": lambda: onnx_all.logits(graph.x, graph.edge_index, graph.edge_attr),
        }
        timings = alternate(fns, rounds=rounds, warmup=1)
        reference = fns["training model (eager PyTorch)"]()
        base = timings["training model (eager PyTorch)"].seconds
        for name, fn in fns.items():
            diff = float(np.max(np.abs(fn() - reference)))
            t = timings[name]
            rows.append({"stage": f"inference: {name}", "wall_s": t.seconds, "cpu_s": t.cpu_seconds,
                         "ratio_to_training": ratio(t.seconds, base), "max_abs_logit_diff": diff})  # fmt: skip
    for row in rows:
        row["num_edges"] = graph.num_edges
    section = Section(
        name="export",
        title="Exported models: export time and one event's inference as deployed",
        columns=[
            Column("stage", "stage"),
            Column("wall_s", "wall s (median)", "{:.3f}"),
            Column("cpu_s", "CPU s (median)", "{:.3f}"),
            Column("ratio_to_training", "÷ training model", "{:.2f}"),
            Column("max_abs_logit_diff", "max |Δ logit|", "{:.1e}"),
        ],
        rows=rows,
    )
    section.notes += [
        f"Graph: {workload.name} ({workload.num_nodes:,} nodes, {workload.num_edges:,} edges); untrained Interaction "
        f"Network hidden {hidden}, {iterations} iterations, edge features; inference timed in {rounds} alternating "
        f"rounds after one warm-up each (medians); torch uses {threads} threads.",
        "Export rows are single runs (each includes loading the file back and checking it against the training model "
        "on a random graph); the first export also pays for importing the exporter.",
    ]
    section.seconds = time.perf_counter() - start
    return section


def section(ctx) -> Section:
    """Entry point (see :mod:`bench.sections`): a labelled simulated event."""
    return run(ctx.simulated(ctx.size(2000, 10000)), rounds=ctx.size(2, 5))

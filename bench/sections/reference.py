"""Reference section: our Interaction Network against the field's, as users run it today.

The reference is the package's ``interaction_gnn`` model (the Exa.TrkX /
acorn InteractionGNN structure, :mod:`domainpar.model.interaction_gnn`) set up
as in issue 14 (:mod:`bench.common.models`): concatenated [h_src, h_dst, e]
edge MLP inputs, a scatter-add over incoming edges, residual updates,
(Linear → LayerNorm → ReLU) × 2 + Linear MLPs, and ``torch.utils.checkpoint``
around the encoders, every node and edge update and the output step. (Figures
committed before 2026-11-24 were taken with a bench-only reference that
encoded edges from the raw node features and updated edges from the previous
node states.)

Ours runs the same size (hidden 64, 8 iterations, 3-layer MLPs with
LayerNorm and ReLU) with and without checkpointing, on the same graph, one
process (a one-part plan, no halo):

* time: forward + backward of the three configurations alternating step by
  step in one process (``torch`` threads as given), medians over the rounds;
* memory: the RSS high-water mark of a step above the RSS before it, each
  configuration in a fresh process (:mod:`bench.common.probe`), median of
  several steps; beside it the traced peak (fake tensors, no allocation) and
  the bytes autograd keeps at the end of the forward.

Ratios are ours / reference (below 1: ours is faster or smaller). The two
networks differ in what they compute (ours also encodes edge features and
sums outgoing edges, the field's has no activation after its last Linear):
this is the comparison of the code a user runs, not of one formula.
"""

from __future__ import annotations

import time

import torch

from bench.common.memory import SavedTensors, traced_peak
from bench.common.plans import part_at
from bench.common.probe import probe_subprocess
from bench.common.report import Column, Section, ratio
from bench.common.timing import alternate, load_average
from bench.common.workloads import Workload

#: The configurations compared: name → (model, checkpointing).
CONFIGS = {
    "ours, checkpointing": ("ours", True),
    "ours, no checkpointing": ("ours", False),
    "field reference, checkpointing": ("field", True),
}
#: The size of the comparison (issue 14): 3-layer MLPs with LayerNorm and ReLU.
MODEL = {"hidden": 64, "num_iterations": 8, "mlp_layers": 3, "activation": "relu", "layer_norm": True}


def build(kind: str, checkpointing: bool, part) -> torch.nn.Module:
    """Our model or the field's, sized like :data:`MODEL`, with seeded weights."""
    from bench.common.models import build as build_kind
    from domainpar.model.config import ModelConfig

    config = ModelConfig(
        node_features=int(part.x.shape[1]), edge_features=int(part.edge_attr.shape[1]), checkpointing=checkpointing, **MODEL
    )
    return build_kind(kind, config)


def compare_time(workload: Workload, rounds: int, threads: int) -> dict:
    """Alternating forward+backward timings of the configurations in this process."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        part = part_at(workload.path, 1, "metis", 0)
        weights = torch.linspace(-1.0, 1.0, part.num_edges)
        models = {name: build(kind, ckpt, part) for name, (kind, ckpt) in CONFIGS.items()}

        def stepper(model):
            def step() -> None:
                (model(part) * weights).sum().div(part.num_edges).backward()
                model.zero_grad(set_to_none=True)
            return step

        return alternate({name: stepper(m) for name, m in models.items()}, rounds)
    finally:
        torch.set_num_threads(previous)


def traced(workload: Workload) -> dict[str, dict]:
    """Traced peak (fake tensors) and saved bytes at the end of the forward of every configuration."""
    part = part_at(workload.path, 1, "metis", 0)
    out = {}
    for name, (kind, ckpt) in CONFIGS.items():
        model = build(kind, ckpt, part)
        with SavedTensors(exclude=[*model.parameters(), part.x, part.edge_attr]) as saved:
            logits = model(part)
        del logits
        config = model.config if kind == "ours" else build("ours", ckpt, part).config
        factory = (lambda c, k=kind: build(k, c.checkpointing, part))
        out[name] = {"saved_bytes": saved.total, **traced_peak(part, config, model_factory=factory)}
    return out


def run(workload: Workload, *, rounds: int = 5, memory_repeats: int = 3, threads: int = 2) -> Section:
    """The reference section (see the module docstring)."""
    start = time.perf_counter()
    load_before = load_average()
    timing = compare_time(workload, rounds, threads)
    memory = {
        name: probe_subprocess(
            workload.path, parts=1, model=kind, checkpointing=ckpt, hidden=MODEL["hidden"], iterations=MODEL["num_iterations"],
            mlp_layers=MODEL["mlp_layers"], activation=MODEL["activation"], threads=threads, repeats=memory_repeats,
        )
        for name, (kind, ckpt) in CONFIGS.items()
    }
    trace = traced(workload)
    load_after = load_average()
    reference = "field reference, checkpointing"
    rows = []
    for name in CONFIGS:
        rows.append({
            "configuration": name,
            "step_s": timing[name].seconds,
            "time_ratio": ratio(timing[name].seconds, timing[reference].seconds),
            "rss_mib": memory[name]["peak_bytes"] / 2**20 if memory[name]["peak_bytes"] else None,
            "rss_ratio": ratio(memory[name]["peak_bytes"], memory[reference]["peak_bytes"]),
            "traced_mib": trace[name]["total"] / 2**20,
            "traced_ratio": ratio(trace[name]["total"], trace[reference]["total"]),
            "saved_mib": trace[name]["saved_bytes"] / 2**20,
            "step_samples": timing[name].samples,
            "cpu_samples": timing[name].cpu_samples,
            "rss_samples": memory[name]["peak_bytes_samples"],
            "probe_step_s": memory[name]["step_seconds"],
        })
    section = Section(
        name="reference",
        title="Reference: ours vs the field's Interaction Network (one process)",
        columns=[
            Column("configuration", "configuration"),
            Column("step_s", "s/step (median)", "{:.3f}"),
            Column("time_ratio", "time ÷ reference", "{:.2f}"),
            Column("rss_mib", "peak RSS MiB", "{:,.0f}"),
            Column("rss_ratio", "RSS ÷ reference", "{:.2f}"),
            Column("traced_mib", "traced peak MiB", "{:,.0f}"),
            Column("traced_ratio", "traced ÷ reference", "{:.2f}"),
            Column("saved_mib", "kept after forward MiB", "{:,.0f}"),
        ],
        rows=rows,
    )
    section.extra = {"load_average_before": load_before, "load_average_after": load_after, "model": MODEL, "threads": threads}
    section.notes += [
        f"Graph: {workload.name} ({workload.num_nodes:,} nodes, {workload.num_edges:,} edges); hidden {MODEL['hidden']}, "
        f"{MODEL['num_iterations']} iterations, {MODEL['mlp_layers']}-layer MLPs with LayerNorm and ReLU; {threads} threads.",
        f"Time: the three configurations alternate step by step in one process, {rounds} rounds after a warm-up step each; "
        f"memory: each in a fresh process, RSS high-water mark of a step above the RSS before it, median of {memory_repeats}.",
        "Traced: forward + backward on fake tensors under torch's MemTracker (deterministic); kept after forward: the "
        "distinct storages autograd holds for backward when the forward returns (parameters and inputs excluded).",
        "The reference: the interaction_gnn model (Exa.TrkX / acorn InteractionGNN structure, bench/common/models.py), checkpointed as the field runs it.",
        f"Load average (1/5/15 min) before {load_before}, after {load_after}.",
    ]
    section.seconds = time.perf_counter() - start
    return section


def section(ctx) -> Section:
    """Entry point (see :mod:`bench.sections`): the random graph of issue 14 (N=20,000, E=200,000; quick: a tenth)."""
    workload = ctx.random(*ctx.size((2_000, 20_000), (20_000, 200_000)))
    return run(workload, rounds=ctx.size(2, 5), memory_repeats=ctx.size(2, 3))

"""Reference section: our Interaction Network vs the same network written the conventional way.

The reference (:mod:`bench.common.reference_models`) concatenates ``[x[src], x[dst], e]``
into an (E, 3H) tensor before every edge MLP, as the field's public
implementations do; ours projects node rows first and gathers the
projections (project-then-gather) and splits interior from boundary edges.
Same weights (copied), same graph, one process:

* agreement: max |logit difference| after copying the weights;
* time: forward+backward, the two models alternating step by step in one
  process with one thread, medians;
* memory: RSS high-water mark of a step, each model in a fresh process
  (:mod:`bench.common.probe`), median of several steps.

Ratios are ours / reference (below 1: ours is faster or smaller).
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch

from bench.common.probe import probe_subprocess
from bench.common.reference_models import ReferenceInteractionNetwork
from bench.common.report import Column, Section, ratio
from bench.common.workloads import Workload
from domainpar.data.event_graph import load_graph
from domainpar.model.interaction_network import InteractionNetwork, ModelConfig
from domainpar.partition import build_plan
from domainpar.partition.local_graph import local_graph


def compare_time(workload: Workload, hidden: int, iterations: int, steps: int) -> dict:
    """Alternating forward+backward timings and the logit agreement of the two models."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        graph = load_graph(workload.path)
        plan = build_plan(graph.edge_index, np.zeros(graph.num_nodes, np.int64), 1)
        part = local_graph(graph, plan.parts[0])
        config = ModelConfig(
            node_features=int(part.x.shape[1]), edge_features=int(part.edge_attr.shape[1]), hidden=hidden, num_iterations=iterations
        )
        torch.manual_seed(0)
        ours = InteractionNetwork(config)
        reference = ReferenceInteractionNetwork(config)
        reference.load_state_dict(ours.state_dict())
        weights = torch.linspace(-1.0, 1.0, part.num_edges)
        with torch.no_grad():
            ours_logits = ours(part)
            reference_logits = reference(part.x, part.edge_index, part.edge_attr)
        max_abs_diff = float((ours_logits - reference_logits).abs().max())
        scale = float(reference_logits.abs().max())

        def step_ours() -> None:
            (ours(part) * weights).sum().backward()

        def step_reference() -> None:
            (reference(part.x, part.edge_index, part.edge_attr) * weights).sum().backward()

        step_ours()
        step_reference()
        times = {"ours": [], "reference": []}
        for _ in range(steps):
            for name, fn in (("ours", step_ours), ("reference", step_reference)):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        return {"max_abs_logit_diff": max_abs_diff, "max_abs_logit": scale, "times": times}
    finally:
        torch.set_num_threads(threads)


def run(workload: Workload, *, hidden: int = 64, iterations: int = 8, steps: int = 5, memory_repeats: int = 3) -> Section:
    """The reference section (see the module docstring)."""
    start = time.perf_counter()
    timing = compare_time(workload, hidden, iterations, steps)
    ours_s = statistics.median(timing["times"]["ours"])
    reference_s = statistics.median(timing["times"]["reference"])
    memory = {
        model: probe_subprocess(workload.path, parts=1, model=model, hidden=hidden, iterations=iterations, repeats=memory_repeats)
        for model in ("ours", "reference")
    }
    ours_mem, reference_mem = memory["ours"]["peak_bytes"], memory["reference"]["peak_bytes"]
    rows = [
        {"quantity": "forward+backward time (s/step)", "ours": ours_s, "reference": reference_s, "ratio": ratio(ours_s, reference_s),
         "ours_samples": timing["times"]["ours"], "reference_samples": timing["times"]["reference"]},
        {"quantity": "peak memory of a step (MiB, RSS)", "ours": ours_mem / 2**20, "reference": reference_mem / 2**20,
         "ratio": ratio(ours_mem, reference_mem)},
        {"quantity": "saved activations (MiB)", "ours": memory["ours"]["saved_bytes"] / 2**20,
         "reference": memory["reference"]["saved_bytes"] / 2**20,
         "ratio": ratio(memory["ours"]["saved_bytes"], memory["reference"]["saved_bytes"])},
    ]
    section = Section(
        name="reference",
        title="Reference: ours vs the conventional Interaction Network (one process)",
        columns=[
            Column("quantity", "quantity"),
            Column("ours", "ours", "{:,.3f}"),
            Column("reference", "conventional", "{:,.3f}"),
            Column("ratio", "ours / conventional", "{:.3f}"),
        ],
        rows=rows,
    )
    section.notes += [
        f"Graph: {workload.name} ({workload.num_nodes:,} nodes, {workload.num_edges:,} edges); hidden {hidden}, "
        f"{iterations} iterations, weights copied from ours into the reference.",
        f"Agreement: max |logit difference| {timing['max_abs_logit_diff']:.2e} (max |logit| {timing['max_abs_logit']:.2e}).",
        f"Time: the two models alternate step by step in one process, one thread, median of {steps} steps each; "
        f"memory: a fresh process per model, median of {memory_repeats} steps.",
        "The conventional model is the HEP.TrkX / Exa.TrkX InteractionGNN formulation: cat([x[src], x[dst], e]) → MLP, "
        "scatter-sum of edge messages, whole graph on one device.",
    ]
    section.seconds = time.perf_counter() - start
    return section


def section(ctx) -> Section:
    """Entry point (see :mod:`bench.sections`): the small simulated graph."""
    return run(ctx.small(), steps=3, memory_repeats=ctx.size(2, 3))

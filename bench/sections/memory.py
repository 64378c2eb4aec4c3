"""Memory section: per-rank peak memory of a training step vs the number of parts.

For the real full event the step of the largest part (the rank that sets the
peak) is traced on fake tensors (:func:`bench.common.memory.traced_peak`) for 1, 2, 4 and 8
parts, with and without activation checkpointing; the ratio is to the
single-process run of the same setting. On a smaller graph that fits this
machine, the same configurations are also *run* (:mod:`bench.common.probe`, RSS
high-water mark of a real step) so the trace is checked against reality in
the same benchmark run.
"""

from __future__ import annotations

import time

from bench.common.memory import activation_peak_meta, check_meta_accounting, traced_peak
from bench.common.plans import graph_at, largest_part_index, part_at, plan_for
from bench.common.probe import probe_subprocess
from bench.common.report import Column, Section, ratio
from bench.common.workloads import Workload
from domainpar.model.config import ModelConfig

MIB = 2**20


def traced_rows(workload: Workload, parts: tuple[int, ...], method: str, hidden: int, iterations: int) -> list[dict]:
    """Traced peak of the largest part for every part count, without and with checkpointing."""
    rows = []
    for checkpointing, offload in ((False, False), (True, False), (True, True)):
        single = None
        for num_parts in parts:
            plan = plan_for(workload.path, num_parts, method)
            part = part_at(workload.path, num_parts, method, largest_part_index(plan))
            config = ModelConfig(
                node_features=int(part.x.shape[1]),
                edge_features=int(part.edge_attr.shape[1]),
                hidden=hidden,
                num_iterations=iterations,
                checkpointing=checkpointing,
            )
            peak = traced_peak(part, config, offload=offload)
            if num_parts == 1:
                single = peak["total"]
            rows.append(
                {
                    "graph": workload.name,
                    "num_parts": num_parts,
                    "method": method if num_parts > 1 else "–",
                    "checkpointing": "yes + offload" if offload else checkpointing,
                    "offload": offload,
                    "traced_host_mib": peak["host"] / MIB,
                    "local_edges": part.num_edges,
                    "local_nodes": part.num_local_nodes,
                    "traced_peak_mib": peak["total"] / MIB,
                    "traced_activations_mib": peak["activations"] / MIB,
                    "traced_peak_bytes": peak["total"],
                    "ratio_to_single": ratio(peak["total"], single),
                    "bytes_per_local_edge": peak["total"] / max(part.num_edges, 1),
                    "measured_peak_mib": None,
                }
            )
    return rows


def measured_rows(workload: Workload, parts: tuple[int, ...], method: str, hidden: int, iterations: int, repeats: int) -> list[dict]:
    """Traced and really measured (RSS) peak of the largest part on a graph that fits."""
    rows = []
    traced = {(r["num_parts"], r["checkpointing"]): r for r in traced_rows(workload, parts, method, hidden, iterations)}
    for checkpointing in (False, True):
        single = None
        for num_parts in parts:
            record = probe_subprocess(
                workload.path, parts=num_parts, method=method, checkpointing=checkpointing,
                hidden=hidden, iterations=iterations, repeats=repeats,
            )
            row = dict(traced[(num_parts, checkpointing)])
            if num_parts == 1:
                single = record["peak_bytes"]
            row["measured_peak_mib"] = None if record["peak_bytes"] is None else record["peak_bytes"] / MIB
            row["measured_ratio_to_single"] = ratio(record["peak_bytes"], single)
            row["trace_over_measured"] = ratio(row["traced_peak_bytes"], record["peak_bytes"])
            row["step_seconds"] = record["step_seconds"]
            rows.append(row)
    return rows


def _add_saved_bytes_cross_check(
    rows: list[dict], workload: Workload, check: Workload, parts, method: str, hidden: int, iterations: int, section: Section
) -> None:
    """Add the saved-tensor accounting (meta device, every part, the largest reported) as a second opinion."""
    try:
        check_meta_accounting(graph_at(check.path), plan_for(check.path, 2, "geometric").parts[0])
        graph = graph_at(workload.path)
        table = {}
        for num_parts in parts:
            plan = plan_for(workload.path, num_parts, method)
            for checkpointing in (False, True):
                config = ModelConfig(
                    node_features=int(graph.x.shape[1]), edge_features=int(graph.edge_attr.shape[1]), hidden=hidden,
                    num_iterations=iterations, checkpointing=checkpointing,
                )
                table[(num_parts, checkpointing)] = max(activation_peak_meta(graph, part, config) for part in plan.parts)
    except Exception as exc:  # a second opinion must not cost the section
        section.notes.append(f"Saved-tensor cross-check unavailable: {type(exc).__name__}: {exc}")
        return
    for row in rows:
        value = table.get((row["num_parts"], row["checkpointing"]))
        row["saved_meta_mib"] = None if value is None else value / MIB
    section.notes.append(
        "Saved MiB (meta): the bytes of the tensors autograd saves for backward (meta device, the largest over all parts; "
        "with checkpointing plus the largest recomputed region) — activations only, no temporaries; checked first to "
        "equal a real CPU run's count on a small graph."
    )


def run(
    full: Workload | None,
    check: Workload,
    *,
    parts: tuple[int, ...] = (1, 2, 4, 8),
    check_parts: tuple[int, ...] = (1, 2, 4, 8),
    method: str = "metis",
    hidden: int = 64,
    iterations: int = 8,
    repeats: int = 3,
    cross_check: bool = True,
) -> Section:
    """The memory section (see the module docstring)."""
    start = time.perf_counter()
    section = Section(
        name="memory",
        title="Memory: per-rank peak of one training step vs parts",
        columns=[
            Column("graph", "graph"),
            Column("num_parts", "parts"),
            Column("checkpointing", "checkpointing"),
            Column("local_edges", "local edges (largest part)", "{:,}"),
            Column("traced_peak_mib", "peak MiB (traced)", "{:,.0f}"),
            Column("traced_activations_mib", "activations MiB (traced)", "{:,.0f}"),
            Column("saved_meta_mib", "saved MiB (meta)", "{:,.0f}"),
            Column("traced_host_mib", "host MiB (offload)", "{:,.0f}"),
            Column("ratio_to_single", "ratio to 1 part", "{:.3f}"),
            Column("measured_peak_mib", "peak MiB (measured RSS)", "{:,.0f}"),
        ],
    )
    if full is not None:
        rows = traced_rows(full, parts, method, hidden, iterations)
        if cross_check:
            _add_saved_bytes_cross_check(rows, full, check, parts, method, hidden, iterations, section)
        section.rows += rows
    section.rows += measured_rows(check, check_parts, method, hidden, iterations, repeats)
    section.notes[:0] = [
        f"Interaction Network hidden {hidden}, {iterations} iterations, 2-layer MLPs, fp32; {method} partitions; "
        "the part with the most local edges is the one measured (the rank that sets the peak).",
        "Traced: forward+backward run on fake tensors under torch's MemTracker (every storage's lifetime, no allocation); "
        "measured: RSS high-water mark of a real step in a fresh process (median of "
        f"{repeats}), on a graph small enough for this machine — the two agree to within a few per cent there.",
        "Ratio to 1 part: the largest part's peak over the whole graph's peak on one process, same checkpointing setting.",
        "yes + offload: what autograd keeps is moved to host memory during the forward (--offload, save_on_cpu); "
        "the peak is then the compute device's alone (traced with the host as a second device), the host column what "
        "offloading holds there.",
    ]
    if full is None:
        section.notes.append("The real full event was not found, so only the smaller graph was measured.")
    checks = [r["trace_over_measured"] for r in section.rows if r.get("trace_over_measured")]
    if checks:
        section.notes.append(f"Traced / measured peak on {check.name}: {min(checks):.3f} – {max(checks):.3f}.")
    section.seconds = time.perf_counter() - start
    return section


def section(ctx) -> Section:
    """Entry point (see :mod:`bench.sections`): traced on the real full event, run on the small simulated graph."""
    return run(
        ctx.real_full(), ctx.small(), parts=(1, 2, 4, 8), check_parts=ctx.size((1, 4), (1, 2, 4, 8)),
        repeats=ctx.size(2, 3), cross_check=not ctx.quick,
    )

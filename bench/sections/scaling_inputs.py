"""Scaling inputs: what the paper scaling model (:mod:`bench.scaling_model`) is built from, and its predictions.

Measured on the real full event for P = 1 … 64 parts:

* per-rank work: the largest part's local edges and nodes, its interior-edge
  fraction (what overlap can hide the exchange behind);
* halo traffic: for every rank the halo rows it receives from parts on its
  own node and from other nodes, with parts placed on nodes of
  ``gpus_per_node`` GPUs in part order (part p on node p // 4); the largest
  rank's volumes and the total halo rows;
* the largest part's peak memory and matmul FLOPs of a training step,
  traced on fake tensors (:func:`bench.common.memory.traced_peak`), with and without
  checkpointing, where traced; elsewhere the model scales the traced
  bytes-per-local-edge;
* on this machine: seconds per edge of a real step (one thread), from which
  the achieved FLOP rate follows.

A surface-to-volume law ``total halo rows = c · P^alpha`` is fitted to the
2/4/8/16-part cuts and checked against the measured 32- and 64-part cuts.
The section then runs the paper model on these inputs: its table follows the
inputs' table and its figure is written beside the report
(``<stem>-scaling_model.png``).
"""

from __future__ import annotations

import math
import time

import numpy as np

from bench.common.memory import traced_peak
from bench.common.plans import largest_part_index, part_at, plan_for
from bench.common.report import Column, Section
from bench.common.workloads import Workload, missing_full_event
from domainpar.model.config import ModelConfig


def plan_traffic(path, num_parts: int, method: str, gpus_per_node: int) -> dict:
    """Per-rank work and halo rows (on-node / off-node, received and sent) of a ``num_parts``-way plan."""
    plan = plan_for(path, num_parts, method)

    def split(peers: list[int], sizes: list[int], node: int) -> tuple[int, int]:
        on = sum(n for q, n in zip(peers, sizes) if q // gpus_per_node == node)
        return on, sum(sizes) - on

    recv_on, recv_off, send_on, send_off, neighbours = [], [], [], [], []
    for part in plan.parts:
        node = part.part // gpus_per_node
        recv_sizes = np.diff(part.recv_offsets).tolist() if part.recv_parts.size else []
        send_sizes = np.diff(part.send_offsets).tolist() if part.send_parts.size else []
        on, off = split(part.recv_parts.tolist(), recv_sizes, node)
        recv_on.append(on)
        recv_off.append(off)
        on, off = split(part.send_parts.tolist(), send_sizes, node)
        send_on.append(on)
        send_off.append(off)
        neighbours.append(len(set(part.recv_parts.tolist()) | set(part.send_parts.tolist())))
    largest = plan.parts[largest_part_index(plan)]
    local_edges = np.array([p.num_local_edges for p in plan.parts])
    return {
        "num_parts": num_parts,
        "method": method,
        "max_local_edges": int(local_edges.max()),
        "mean_local_edges": float(local_edges.mean()),
        "max_local_nodes": int(max(p.num_local_nodes for p in plan.parts)),
        "largest_part": largest.part,
        "largest_interior_fraction": largest.num_interior_edges / max(largest.num_local_edges, 1),
        "total_halo_rows": int(sum(p.num_halo for p in plan.parts)),
        "max_halo_rows": int(max(p.num_halo for p in plan.parts)),
        "max_intra_rows": int(max(max(recv_on), max(send_on))),
        "max_inter_rows": int(max(max(recv_off), max(send_off))),
        "max_neighbours": int(max(neighbours)),
        # Per rank, per direction: the time model takes the slowest rank (links are full duplex).
        "recv_on_node": [int(v) for v in recv_on],
        "recv_off_node": [int(v) for v in recv_off],
        "send_on_node": [int(v) for v in send_on],
        "send_off_node": [int(v) for v in send_off],
    }


def add_traced_step(record: dict, path, method: str, hidden: int, iterations: int) -> None:
    """Trace a training step of the largest part of ``record``'s plan (:func:`plan_traffic`), with and without
    checkpointing: adds ``peak_bytes``, ``activation_bytes``, ``flops`` (each also ``_ckpt``) and ``parameter_bytes``."""
    part = part_at(path, record["num_parts"], method, record["largest_part"])
    for checkpointing in (False, True):
        config = ModelConfig(
            node_features=int(part.x.shape[1]), edge_features=int(part.edge_attr.shape[1]),
            hidden=hidden, num_iterations=iterations, checkpointing=checkpointing,
        )
        peak = traced_peak(part, config)
        suffix = "_ckpt" if checkpointing else ""
        record[f"peak_bytes{suffix}"] = peak["total"]
        record[f"activation_bytes{suffix}"] = peak["activations"]
        record[f"flops{suffix}"] = peak["flops"]
        record["parameter_bytes"] = peak["parameters"]


def fit_surface_law(parts: list[int], total_halo: list[int]) -> tuple[float, float]:
    """Least-squares fit of log(total halo rows) = log c + alpha log P; returns (c, alpha)."""
    alpha, log_c = np.polyfit(np.log(parts), np.log(total_halo), 1)
    return float(math.exp(log_c)), float(alpha)


def run(
    full: Workload,
    *,
    cpu_seconds_per_step: float | None,
    cpu_edges: int | None,
    cpu_flops: int | None,
    parts: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64),
    trace_parts: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64),
    method: str = "metis",
    gpus_per_node: int = 4,
    hidden: int = 64,
    iterations: int = 8,
) -> Section:
    """Measure the scaling inputs; the section's ``rows`` are one record per part count."""
    start = time.perf_counter()
    rows = []
    for num_parts in parts:
        record = plan_traffic(full.path, num_parts, method, gpus_per_node)
        if num_parts in trace_parts:
            add_traced_step(record, full.path, method, hidden, iterations)
        rows.append(record)
    fit_parts = [r["num_parts"] for r in rows if 2 <= r["num_parts"] <= 16]
    c, alpha = fit_surface_law(fit_parts, [r["total_halo_rows"] for r in rows if r["num_parts"] in fit_parts])
    for r in rows:
        r["law_total_halo_rows"] = c * r["num_parts"] ** alpha if r["num_parts"] > 1 else 0.0
    section = Section(
        name="scaling_inputs",
        title=f"Scaling-model inputs: the real full event cut into 1–{max(parts)} parts ({method})",
        columns=[
            Column("num_parts", "parts"),
            Column("max_local_edges", "largest part: local edges", "{:,}"),
            Column("largest_interior_fraction", "interior fraction", "{:.3f}"),
            Column("total_halo_rows", "halo rows (all)", "{:,}"),
            Column("law_total_halo_rows", "law c·P^α", "{:,.0f}"),
            Column("max_intra_rows", "max rank: rows on-node", "{:,}"),
            Column("max_inter_rows", "max rank: rows off-node", "{:,}"),
            Column("peak_bytes", "peak bytes", "{:,}"),
            Column("peak_bytes_ckpt", "peak bytes (ckpt)", "{:,}"),
            Column("flops", "FLOPs/step", "{:.3g}"),
        ],
        rows=rows,
    )
    extra = {
        "graph": full.name,
        "num_nodes": full.num_nodes,
        "num_edges": full.num_edges,
        "hidden": hidden,
        "iterations": iterations,
        "gpus_per_node": gpus_per_node,
        "law_c": c,
        "law_alpha": alpha,
        "cpu_seconds_per_step": cpu_seconds_per_step,
        "cpu_edges": cpu_edges,
        "cpu_flops": cpu_flops,
        "cpu_seconds_per_edge": None if not cpu_seconds_per_step or not cpu_edges else cpu_seconds_per_step / cpu_edges,
        "cpu_gflops_achieved": None if not cpu_seconds_per_step or not cpu_flops else cpu_flops / cpu_seconds_per_step / 1e9,
    }
    section.extra = extra
    section.notes += [
        f"Surface-to-volume law fitted on 2–16 parts: total halo rows ≈ {c:,.0f} · P^{alpha:.3f}.",
        "Parts are placed on nodes of "
        f"{gpus_per_node} GPUs in part order; 'on-node' halo rows travel over NVLink, 'off-node' rows over InfiniBand.",
    ]
    if extra["cpu_seconds_per_edge"]:
        section.notes.append(
            f"This machine: {extra['cpu_seconds_per_edge'] * 1e6:.2f} µs per edge per training step (one thread), "
            f"{extra['cpu_gflops_achieved']:.1f} GFLOP/s achieved in the matrix products."
        )
    section.seconds = time.perf_counter() - start
    return section


def cpu_probe(ctx) -> dict:
    """One real step of the small simulated graph on this machine (one thread): seconds, edges and FLOPs."""
    from bench.common.probe import probe_subprocess

    small = ctx.small()
    record = probe_subprocess(small.path, parts=1, repeats=ctx.size(2, 3))
    part = part_at(small.path, 1, "metis", 0)
    config = ModelConfig(node_features=int(part.x.shape[1]), edge_features=int(part.edge_attr.shape[1]))
    record["flops"] = traced_peak(part, config)["flops"]
    return record


def append_predictions(section: Section, out, stem: str) -> None:
    """Run the paper model on the section's inputs: its table into the section, its figure beside the report."""
    from bench import scaling_model

    rows, extra = section.rows, section.extra
    predictions = [p for hw in scaling_model.HARDWARE for p in scaling_model.predict(rows, extra, hw)]
    figure = out / f"{stem}-scaling_model.png"
    title = (f"{extra['graph']}: {extra['num_nodes']:,} nodes, {extra['num_edges']:,} edges; "
             f"Interaction Network hidden {extra['hidden']}, {extra['iterations']} iterations")
    scaling_model.plot(predictions, figure, title)
    section.extra["predictions"] = predictions
    section.markdown_extra = (
        "### Scaling model (paper, see docs/scaling.md)\n\n" + scaling_model.markdown_table(predictions)
        + f"\n\n![scaling model]({figure.name})\n"
    )


def section(ctx) -> Section:
    """Entry point (see :mod:`bench.sections`): the real full event cut into 1–64 parts, then the paper model."""
    full = ctx.real_full()
    if full is None:
        return Section(name="scaling_inputs", title="Scaling-model inputs", skipped=missing_full_event())
    probe = cpu_probe(ctx)
    result = run(
        full, cpu_seconds_per_step=probe["step_seconds"], cpu_edges=probe["local_edges"], cpu_flops=probe["flops"],
        parts=(1, 2, 4, 8, 16, 32, 64), trace_parts=ctx.size((1, 64), (1, 2, 4, 8, 16, 32, 64)),
    )
    ctx.out.mkdir(parents=True, exist_ok=True)
    append_predictions(result, ctx.out, ctx.stem)
    return result

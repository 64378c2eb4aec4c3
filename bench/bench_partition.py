"""METIS vs geometric vs sectors on a real event: cut, halo, balance, bytes/step, timings.

Usage (from the repository root)::

    .venv/bin/python bench/bench_partition.py                      # full event 21000, P = 2 4 8 16
    .venv/bin/python bench/bench_partition.py --repeats 5 --json bench/partition.json \
        --figures docs/figures

Builds the graph of ``event000021000`` (no truth) with the default graph builder,
then for every method and part count partitions it ``--repeats`` times and
reports medians of the partition and plan wall times. True edges lost by
sectors need labels, so they are measured on the labelled event 000000001 too.
With ``--figures`` it writes ``partition_metis_4.png`` and
``partition_geometric_4.png`` of the full event.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from domainpar.data.graph import build_graph
from domainpar.data.trackml import load_event
from domainpar.partition import METHODS, partition_graph
from domainpar.partition.report import partition_report

DATA = Path("/work/shared/data/trackml")


def event_graph(prefix: Path, labelled: bool):
    parts = ("hits", "truth", "particles") if labelled else ("hits", "particles")
    frames = load_event(prefix, parts)
    graph, _ = build_graph(
        frames[0], truth=frames[1] if labelled else None, particles=frames[-1], event_id=int(prefix.name[5:])
    )
    return graph


def measure(graph, method: str, num_parts: int, repeats: int, hidden: int) -> dict:
    part_s, plan_s = [], []
    for _ in range(repeats):
        plan = partition_graph(graph, num_parts, method, seed=0)
        part_s.append(plan.seconds_partition)
        plan_s.append(plan.seconds_plan)
    report = partition_report(plan, hidden=hidden, dtype="float32")
    return {
        "event_id": graph.event_id,
        "method": method,
        "num_parts": num_parts,
        "edge_cut_fraction": report.edge_cut_fraction,
        "halo_fraction": report.halo_fraction,
        "imbalance_edges": report.imbalance_edges,
        "imbalance_nodes": report.imbalance_nodes,
        "bytes_per_step": report.bytes_per_step,
        "seconds_partition": statistics.median(part_s),
        "seconds_plan": statistics.median(plan_s),
        "edges_lost": report.edges_lost,
        "true_edges_lost": report.true_edges_lost,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--figures", type=Path, default=None)
    args = parser.parse_args()

    full = event_graph(DATA / "event000021000", labelled=False)
    small = event_graph(DATA / "event000000001", labelled=True)
    print(f"event 21000: {full.num_nodes:,} hits, {full.num_edges:,} edges; "
          f"event 1: {small.num_nodes:,} hits, {small.num_edges:,} edges ({small.num_positive_edges:,} true)")
    rows = [measure(full, m, p, args.repeats, args.hidden) for p in args.parts for m in METHODS]
    lost_small = {p: measure(small, "sectors", p, 1, args.hidden)["true_edges_lost"] for p in args.parts}

    print(f"\n| P | method | edge cut | halo | imbalance edges | imbalance nodes | MB/step (h={args.hidden}, fp32) "
          "| partition s | plan s | edges lost (21000) | true edges lost (event 1) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        sectors = r["method"] == "sectors"
        lost = f"{r['edges_lost']:.2%}" if sectors else "–"
        true_lost = f"{lost_small[r['num_parts']]:.2%}" if sectors else "–"
        print(f"| {r['num_parts']} | {r['method']} | {r['edge_cut_fraction']:.2%} | {r['halo_fraction']:.2%} "
              f"| {r['imbalance_edges']:.3f} | {r['imbalance_nodes']:.3f} | {r['bytes_per_step'] / 1e6:.2f} "
              f"| {r['seconds_partition']:.3f} | {r['seconds_plan']:.3f} | {lost} | {true_lost} |")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "true_edges_lost_event1": lost_small}, indent=1) + "\n")
    if args.figures:
        from domainpar.partition.plot import plot_partition

        for method in ("metis", "geometric"):
            plan = partition_graph(full, 4, method, seed=0)
            path = plot_partition(full, plan, args.figures / f"partition_{method}_4.png")
            print(f"wrote {path}")


if __name__ == "__main__":
    main()

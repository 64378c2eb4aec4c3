"""Preprocessing benchmark: simulate and build times, graph sizes and efficiencies.

    .venv/bin/python bench/bench_preprocess.py [--repeats 3] [--json FILE] [--full-event PREFIX]

Rows (each timed ``repeats`` times after one warm-up call, median reported,
wall clock and process CPU time side by side because the machine is shared):

* simulate a full-scale event (the simulator's default particle count);
* build its labelled graph with the default cuts;
* read the real full event 21000 (hits) from its CSV files and build its graph
  (skipped when /work/shared is absent);
* build the real small labelled event 1 (for the efficiency numbers).

Not collected by pytest (the file name does not start with ``test_``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from domainpar.data.graph import GraphConfig, build_graph  # noqa: E402
from domainpar.data.simulate import SimulationConfig, simulate_event  # noqa: E402
from domainpar.data.trackml import load_event  # noqa: E402

SMALL_EVENT = REPO_ROOT / "tests" / "data" / "trackml" / "event000000001"
FULL_EVENT = Path("/work/shared/data/trackml/event000021000")


def timed(fn, repeats: int, warm_up: bool = True):
    """Median wall and CPU seconds of ``fn()`` over ``repeats`` calls, and its last result."""
    if warm_up:
        fn()
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), result


def _graph_row(stage: str, wall: float, cpu: float, stats) -> dict:
    return {
        "stage": stage,
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "num_nodes": stats.num_nodes,
        "num_edges": stats.num_edges,
        "efficiency": stats.efficiency,
        "efficiency_pt1": stats.efficiency_pt1,
        "purity": stats.purity,
    }


def run(repeats: int, full_event: Path, config: GraphConfig) -> list[dict]:
    rows = []
    sim_config = SimulationConfig()
    wall, cpu, event = timed(lambda: simulate_event(sim_config, 1, 0), repeats, warm_up=False)
    rows.append({"stage": f"simulate ({sim_config.num_particles:,} particles)", "wall_seconds": wall, "cpu_seconds": cpu,
                 "num_nodes": len(event["hits"])})  # fmt: skip
    wall, cpu, (_, stats) = timed(
        lambda: build_graph(event["hits"], event["truth"], event["particles"], config=config, event_id=1), repeats
    )
    rows.append(_graph_row("build simulated event (labelled)", wall, cpu, stats))
    if Path(f"{full_event}-hits.csv.gz").is_file() or Path(f"{full_event}-hits.csv").is_file():
        wall, cpu, (hits,) = timed(lambda: load_event(full_event, parts=("hits",)), repeats, warm_up=False)
        rows.append({"stage": "read real event 21000 hits (CSV)", "wall_seconds": wall, "cpu_seconds": cpu,
                     "num_nodes": len(hits)})  # fmt: skip
        wall, cpu, (_, stats) = timed(lambda: build_graph(hits, config=config, event_id=21000), repeats)
        rows.append(_graph_row("build real event 21000 (no truth)", wall, cpu, stats))
    hits, truth, particles = load_event(SMALL_EVENT, parts=("hits", "truth", "particles"))
    wall, cpu, (_, stats) = timed(lambda: build_graph(hits, truth, particles, config=config, event_id=1), repeats)
    rows.append(_graph_row("build real small event 1 (labelled)", wall, cpu, stats))
    return rows


def markdown(rows: list[dict]) -> str:
    def fmt(value, spec):
        return "–" if value is None else format(value, spec)

    lines = [
        "| stage | wall s (median) | CPU s (median) | nodes | edges | efficiency | eff. pT>1 | purity |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['stage']} | {row['wall_seconds']:.2f} | {row['cpu_seconds']:.2f} | {fmt(row.get('num_nodes'), ',')} "
            f"| {fmt(row.get('num_edges'), ',')} | {fmt(row.get('efficiency'), '.4f')} "
            f"| {fmt(row.get('efficiency_pt1'), '.4f')} | {fmt(row.get('purity'), '.4f')} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per row (median reported)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    parser.add_argument("--full-event", type=Path, default=FULL_EVENT, help="prefix of the real full event")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1 (got {args.repeats})")
    rows = run(args.repeats, args.full_event, GraphConfig())
    print(markdown(rows))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"repeats": args.repeats, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()

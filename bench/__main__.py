"""``python -m bench [--quick] [--out bench/results] [--only SECTION ...]``: every benchmark, one report.

Sections (in order): exactness, memory, speed, communication, reference,
preprocessing, scaling_inputs (+ the paper scaling model and its figure).
Writes ``<out>/<hostname>-<date>.json`` and ``.md`` (``-quick`` appended in
quick mode). A section whose inputs are missing (the real full event, a
command not built yet) is reported as skipped with the reason; a section
that fails is reported as failed with the error's last line, and the others
still run.

``--quick`` shrinks graphs, repeats and part counts so the whole run takes a
few minutes on a 2-core machine; the full run uses the real full event
wherever it fits and takes much longer.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from bench.report import REPO_ROOT, Section, machine_info, write_report

SECTIONS = ("exactness", "memory", "speed", "communication", "reference", "preprocessing", "scaling_inputs")


@dataclass(frozen=True)
class Plan:
    """Sizes of one benchmark run."""

    sim_particles_small: int
    """Particles of the simulated graph used for speed, reference and the memory cross-check."""
    sim_particles_labelled: int
    """Particles of the labelled simulated graph whose sectors cut counts the true edges lost."""
    repeats: int
    """Timed repeats per figure (medians)."""
    speed_rounds: int
    """Alternating rounds of the speed configurations."""
    memory_parts: tuple[int, ...]
    """Part counts of the memory section."""
    check_parts: tuple[int, ...]
    """Part counts really run (RSS) on the small graph."""
    comm_parts: tuple[int, ...]
    """Part counts of the communication section."""
    scaling_parts: tuple[int, ...]
    """Part counts whose plans feed the scaling model."""
    scaling_trace_parts: tuple[int, ...]
    """Part counts whose step is traced for the scaling model (others scale bytes per edge)."""
    exactness_parts: tuple[int, ...]
    """Part counts verified."""
    exactness_dtypes: tuple[str, ...]
    """Precisions verified."""
    exactness_model: tuple[int, int]
    """(hidden, iterations) of the verified model."""


QUICK = Plan(
    sim_particles_small=300, sim_particles_labelled=2000, repeats=1, speed_rounds=1,
    memory_parts=(1, 2, 4, 8), check_parts=(1, 4), comm_parts=(2, 4, 8, 16),
    scaling_parts=(1, 2, 4, 8, 16, 32, 64), scaling_trace_parts=(1, 64), exactness_parts=(2, 3, 4),
    exactness_dtypes=("float32",), exactness_model=(32, 4),
)
FULL = Plan(
    sim_particles_small=1000, sim_particles_labelled=10000, repeats=3, speed_rounds=3,
    memory_parts=(1, 2, 4, 8), check_parts=(1, 2, 4, 8), comm_parts=(2, 4, 8, 16, 32, 64),
    scaling_parts=(1, 2, 4, 8, 16, 32, 64), scaling_trace_parts=(1, 2, 4, 8, 16, 32, 64), exactness_parts=(1, 2, 3, 4),
    exactness_dtypes=("float64",), exactness_model=(64, 8),
)


def _failed(name: str, exc: BaseException, seconds: float) -> Section:
    last = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
    section = Section(name=name, title=f"{name} (failed)", skipped=f"failed: {type(exc).__name__}: {last}", seconds=seconds)
    section.extra["traceback"] = traceback.format_exc()
    return section


def run_all(plan: Plan, only: tuple[str, ...], out: Path, cache: Path, mode: str) -> tuple[Path, Path, list[Section]]:
    """Run the selected sections and write the report."""
    from bench import workloads

    machine = machine_info()
    machine["load_average_start"] = [round(v, 2) for v in os.getloadavg()]
    print(f"[bench] {mode} run on {machine['hostname']} ({machine['cpu']}, {machine['cores']} cores), cache {cache}", flush=True)
    full = workloads.real_full(cache)
    if full is None:
        print("[bench] real full event not found: sections fall back to simulated graphs", flush=True)
    small = workloads.simulated(cache, plan.sim_particles_small)
    sections: list[Section] = []
    cpu_probe: dict | None = None

    def section(name: str, fn) -> None:
        if name not in only:
            return
        start = time.perf_counter()
        print(f"[bench] {name} ...", flush=True)
        try:
            result = fn()
        except Exception as exc:  # one failing section must not lose the others' numbers
            result = _failed(name, exc, time.perf_counter() - start)
            print(f"[bench] {name} FAILED: {result.skipped}", flush=True)
        print(f"[bench] {name} done in {time.perf_counter() - start:.0f} s", flush=True)
        sections.append(result)
        write_report(sections, machine, out, mode)  # partial reports survive an interrupted long run

    def exactness_section() -> Section:
        from bench import exactness

        hidden, iterations = plan.exactness_model
        return exactness.run(
            workloads.real_small(cache), parts=plan.exactness_parts, dtypes=plan.exactness_dtypes, hidden=hidden, iterations=iterations
        )

    def memory_section() -> Section:
        from bench import memory

        return memory.run(
            full, small, parts=plan.memory_parts, check_parts=plan.check_parts, repeats=max(plan.repeats, 2),
            cross_check=plan is FULL,
        )

    def speed_section() -> Section:
        from bench import speed

        return speed.run(small, rounds=plan.speed_rounds, steps=max(plan.repeats, 2))

    def communication_section() -> Section:
        from bench import communication

        labelled = workloads.simulated(cache, plan.sim_particles_labelled)
        return communication.run(full, labelled, parts=plan.comm_parts, repeats=plan.repeats)

    def reference_section() -> Section:
        from bench import bench_reference

        return bench_reference.run(small, steps=max(plan.repeats, 3), memory_repeats=max(plan.repeats, 2))

    def preprocessing_section() -> Section:
        from bench import preprocessing

        return preprocessing.run(full, repeats=plan.repeats)

    def scaling_section() -> Section:
        from bench import bench_scaling
        from bench.probe import probe_subprocess

        nonlocal cpu_probe
        if full is None:
            return Section(name="scaling_inputs", title="Scaling-model inputs", skipped="the real full event was not found")
        cpu_probe = probe_subprocess(small.path, parts=1, repeats=max(plan.repeats, 2))
        from bench.plans import graph_at, plan_for
        from bench.traced_memory import traced_peak
        from domainpar.model.interaction_network import ModelConfig
        from domainpar.partition.local_graph import local_graph

        part = local_graph(graph_at(small.path), plan_for(small.path, 1, "metis").parts[0])
        flops = traced_peak(part, ModelConfig(node_features=int(part.x.shape[1]), edge_features=int(part.edge_attr.shape[1])))["flops"]
        return bench_scaling.run(
            full, cpu_seconds_per_step=cpu_probe["step_seconds"], cpu_edges=cpu_probe["local_edges"], cpu_flops=flops,
            parts=plan.scaling_parts, trace_parts=plan.scaling_trace_parts,
        )

    section("exactness", exactness_section)
    section("memory", memory_section)
    section("speed", speed_section)
    section("communication", communication_section)
    section("reference", reference_section)
    section("preprocessing", preprocessing_section)
    section("scaling_inputs", scaling_section)

    machine["load_average_end"] = [round(v, 2) for v in os.getloadavg()]
    json_path, md_path = write_report(sections, machine, out, mode)
    scaling = next((s for s in sections if s.name == "scaling_inputs" and not s.skipped), None)
    if scaling is not None:
        _append_scaling_model(json_path, md_path, out, mode)
    return json_path, md_path, sections


def _append_scaling_model(json_path: Path, md_path: Path, out: Path, mode: str) -> None:
    """Run the paper model on the report's inputs; add its table to the Markdown, draw the figure."""
    from bench import scaling_model
    from domainpar.atomic import atomic_path

    rows, extra = scaling_model.load_inputs(json_path)
    predictions = [p for hw in scaling_model.HARDWARE for p in scaling_model.predict(rows, extra, hw)]
    figure = out / f"{json_path.stem}-scaling_model.png"
    title = (f"{extra['graph']}: {extra['num_nodes']:,} nodes, {extra['num_edges']:,} edges; "
             f"Interaction Network hidden {extra['hidden']}, {extra['iterations']} iterations")
    scaling_model.plot(predictions, figure, title)
    text = md_path.read_text() + "\n## Scaling model (paper, see docs/scaling.md)\n\n" + scaling_model.markdown_table(predictions)
    text += f"\n\n![scaling model]({figure.name})\n"
    with atomic_path(md_path) as tmp:
        tmp.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small graphs and few repeats: a few minutes on 2 cores")
    parser.add_argument("--out", default=str(REPO_ROOT / "bench" / "results"), help="directory of the report files")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="run only these sections")
    parser.add_argument("--cache", default=None, help="keep built graphs here between runs (default: a temp dir, removed)")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    mode = "quick" if args.quick else "full"
    cache = Path(args.cache) if args.cache else Path(tempfile.mkdtemp(prefix="domainpar-bench-"))
    cache.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        json_path, md_path, sections = run_all(plan, tuple(args.only), Path(args.out), cache, mode)
    finally:
        if args.cache is None:
            shutil.rmtree(cache, ignore_errors=True)
    failed = [s.name for s in sections if s.skipped and s.skipped.startswith("failed")]
    print(f"[bench] wrote {json_path} and {md_path} in {time.perf_counter() - start:.0f} s")
    if failed:
        print(f"[bench] failed sections: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

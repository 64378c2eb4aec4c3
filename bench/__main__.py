"""``python -m bench [--quick] [--only SECTION ...] [--out DIR] [--device cpu|cuda] [--data DIR] [--cache DIR]``.

Runs the report's sections (see :mod:`bench`) and writes
``<out>/<hostname>-<date>[-quick][-cuda].json`` and ``.md``. A section whose
inputs are missing is reported as skipped with the reason; a section that
fails is reported as failed with the error's last line (the exit status is
then 1), and the others still run. ``--device cuda`` on a machine without
CUDA prints one line and exits 0.

Under torchrun (``torchrun --nproc-per-node N -m bench --only scaling``) every
rank runs the multi-rank section and rank 0 alone prints and writes the report;
the other sections measure one process and are refused there.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench import sections as registry
from bench.common.report import REPO_ROOT, Section, machine_info, report_stem, write_report
from bench.common.timing import load_average
from bench.common.workloads import DATA_ENV
from domainpar.launch.env import detect


def _failed(name: str, exc: BaseException, seconds: float) -> Section:
    last = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
    section = Section(name=name, title=f"{name} (failed)", skipped=f"failed: {type(exc).__name__}: {last}", seconds=seconds)
    section.extra["traceback"] = traceback.format_exc()
    return section


#: Sections that run on the ranks of a torchrun job (every other section measures one process).
MULTI_RANK_SECTIONS = ("scaling",)


def run_all(names: tuple[str, ...], ctx: registry.Context, mode: str, *, writer: bool = True) -> tuple[Path | None, Path | None, list[Section]]:
    """Run the named sections in report order and write the report after each one (``writer``: this process reports)."""
    if not writer:
        # A rank other than 0 of a torchrun job: it measures with the others and says nothing.
        return None, None, [registry.load(name).section(ctx) for name in registry.ORDER if name in names]
    machine = machine_info()
    machine["load_average_start"] = load_average()
    machine["device"] = ctx.device
    print(f"[bench] {mode} run on {machine['hostname']} ({machine['cpu']}, {machine['cores']} cores, "
          f"GPU {machine['gpu'] or 'none'}), cache {ctx.cache}", flush=True)
    done: list[Section] = []
    json_path = md_path = None
    for name in registry.ORDER:
        if name not in names:
            continue
        start = time.perf_counter()
        print(f"[bench] {name} ...", flush=True)
        try:
            result = registry.load(name).section(ctx)
            result.seconds = result.seconds or time.perf_counter() - start
        except Exception as exc:  # one failing section must not lose the others' numbers
            result = _failed(name, exc, time.perf_counter() - start)
            print(f"[bench] {name} FAILED: {result.skipped}", flush=True)
        if result.skipped and not result.skipped.startswith("failed"):
            print(f"[bench] {name} skipped: {result.skipped}", flush=True)
        print(f"[bench] {name} done in {time.perf_counter() - start:.0f} s", flush=True)
        done.append(result)
        json_path, md_path = write_report(done, machine, ctx.out, mode)  # partial reports survive an interrupted run
    machine["load_average_end"] = load_average()
    json_path, md_path = write_report(done, machine, ctx.out, mode)
    return json_path, md_path, done


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description="domainpar benchmarks: one report of sections.")
    parser.add_argument("--quick", action="store_true", help="small graphs and few repeats: minutes on 2 cores")
    parser.add_argument("--out", default=str(REPO_ROOT / "bench" / "results"), help="directory of the report files")
    parser.add_argument("--only", nargs="+", choices=registry.ORDER, default=None, metavar="SECTION",
                        help=f"run only these sections (of: {', '.join(registry.ORDER)})")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cpu: the CPU report; cuda: the GPU report (skipped with one line without CUDA)")
    parser.add_argument("--data", default=None,
                        help=f"TrackML data directory holding event000021000-* (default: ${DATA_ENV} or <repo>/../shared/data/trackml)")
    parser.add_argument("--cache", default=None, help="keep built graphs here between runs (default: a temp dir, removed)")
    parser.add_argument("--graph", default=None,
                        help="scaling: measure this event graph (.npz) instead of the real full event")
    parser.add_argument("--hidden", type=int, default=None, help="scaling: model width (default 16 on CPU, 64 on CUDA)")
    parser.add_argument("--iterations", type=int, default=None,
                        help="scaling: message-passing iterations (default 4 on CPU, 8 on CUDA)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("[bench] --device cuda: no CUDA device on this machine, GPU report skipped")
            return 0
    if args.data is not None:
        os.environ[DATA_ENV] = str(Path(args.data).resolve())  # probes and spawned ranks inherit it
    names = tuple(args.only) if args.only else registry.ORDER
    names = tuple(n for n in names if args.device in registry.devices(n))
    launcher = detect()
    if launcher.joins and not set(names) <= set(MULTI_RANK_SECTIONS):
        print(f"error: under torchrun only --only {' '.join(MULTI_RANK_SECTIONS)} runs (the other sections measure one "
              "process: run them with python -m bench)", file=sys.stderr)
        return 2
    if args.graph is not None and not Path(args.graph).is_file():
        print(f"error: --graph {args.graph}: graph file not found", file=sys.stderr)
        return 2
    if not names:
        print(f"[bench] none of the selected sections runs on --device {args.device}")
        return 0
    mode = ("quick" if args.quick else "full") + ("-cuda" if args.device == "cuda" else "")
    cache = Path(args.cache) if args.cache else Path(tempfile.mkdtemp(prefix="domainpar-bench-"))
    cache.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    stem = report_stem(socket.gethostname(), mode)
    ctx = registry.Context(quick=args.quick, device=args.device, cache=cache, out=out, stem=stem,
                           graph=None if args.graph is None else Path(args.graph).resolve(), hidden=args.hidden,
                           iterations=args.iterations)
    start = time.perf_counter()
    writer = launcher.rank == 0
    try:
        json_path, md_path, done = run_all(names, ctx, mode, writer=writer)
    finally:
        if args.cache is None:
            shutil.rmtree(cache, ignore_errors=True)
    if not writer:
        return 0
    failed = [s.name for s in done if s.skipped and s.skipped.startswith("failed")]
    print(f"[bench] wrote {json_path} and {md_path} in {time.perf_counter() - start:.0f} s")
    if failed:
        print(f"[bench] failed sections: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

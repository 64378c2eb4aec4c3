"""The track builders' CPU time per event and the figure of their tracks on a scored event (``docs/tracks.md``).

    python -m bench.tools.track_study timing --scores runs/scores/sim_val \\
        [--methods components,walk,ckf,ambiguity] [--repeat 3] [--set FIELD=VALUE ...]
    python -m bench.tools.track_study examples --scores runs/scores/real_pixel/event000021000.npz \\
        [--method ckf] [--out docs/figures/track_examples_real.png]

Both read graphs written by ``domainpar evaluate --write-scores`` (with their
``edge_score`` and the record of the model that produced them) and build
tracks with :func:`~domainpar.tracks.candidates.build_candidates` at the
threshold the scores were written with.

``timing``: the process CPU seconds of every build (one thread: the kernels
are serial), median over the events and the repeats, beside the wall
seconds; the kernels are compiled (or loaded from numba's cache) before the
first timed build. The load average is printed before and after: on a shared
machine wall time is not the builder's cost, CPU time nearly is.

``examples``: :func:`~domainpar.tracks.plots.plot_track_examples` of the
default builder's tracks, as ``evaluate --plots`` draws them; the title names
the event, the builder and the checkpoint (SHA-256 prefix, step) that scored
the edges.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from domainpar.data.event_graph import EventGraph, load_npz_graph
from domainpar.errors import DomainparError
from domainpar.tracks.candidates import build_candidates
from bench.tools.compare_builders import _parse_setting
from domainpar.tracks.config import TrackConfig
from domainpar.tracks.methods import DEFAULT_METHOD, METHODS
from domainpar.tracks.plots import plot_track_examples

#: Entries of a scored graph file (``domainpar.inference.scores.NPZ_SCORES``, ``NPZ_RECORD``).
SCORES_ENTRY, RECORD_ENTRY = "edge_score", "edge_score_record"


def load_scored_graph(path: Path) -> tuple[EventGraph, np.ndarray, dict]:
    """``(graph, (E,) scores, record of what scored them)`` of one file written by ``evaluate --write-scores``."""
    if not path.is_file():
        raise DomainparError(f"{path}: expected a scored graph file, got none")
    graph = load_npz_graph(path)
    with np.load(path, allow_pickle=False) as npz:
        if SCORES_ENTRY not in npz.files or RECORD_ENTRY not in npz.files:
            raise DomainparError(f"{path}: expected a graph written by evaluate --write-scores, got no {SCORES_ENTRY}")
        scores = npz[SCORES_ENTRY].astype(np.float64)
        record = json.loads(str(npz[RECORD_ENTRY][()]))
    return graph, scores, record


def _model(record: dict) -> str:
    name = Path(str(record.get("checkpoint") or record.get("model") or "?")).name
    sha = str(record.get("checkpoint_sha256") or "")[:12]
    return f"{name} {sha}, step {record.get('checkpoint_step')}"


def timing(scores_dir: Path, methods: list[str], repeat: int, settings: dict | None = None) -> int:
    paths = sorted(scores_dir.glob("*.npz"))
    if not paths:
        raise DomainparError(f"{scores_dir}: expected scored graph files (*.npz), got none")
    events = [load_scored_graph(p) for p in paths]
    print(f"load before {Path('/proc/loadavg').read_text().strip()}")
    print(f"{len(events)} event(s) of {scores_dir}, scores of {_model(events[0][2])}, {repeat} repeat(s)")
    print(f"settings {settings or 'default'}")
    print(f"{'method':>12} {'cpu_s':>7} {'wall_s':>7} {'cpu_max':>7}  (median per event; cpu_max: the slowest build)")
    for method in methods:
        cpu, wall = [], []
        for graph, scores, record in events:
            config = replace(TrackConfig(method=method, threshold=float(record["threshold"])), **(settings or {}))
            args = (graph.pos, graph.layer, graph.edge_index, scores, config)
            if not cpu:
                build_candidates(*args)  # compile (or load the cached kernels) outside the timings
            for _ in range(repeat):
                started = time.process_time()
                built = build_candidates(*args)
                cpu.append(time.process_time() - started)
                wall.append(built.seconds)
        print(f"{method:>12} {np.median(cpu):7.3f} {np.median(wall):7.3f} {np.max(cpu):7.3f}")
    print(f"load after {Path('/proc/loadavg').read_text().strip()}")
    return 0


def examples(path: Path, method: str, count: int, out: Path) -> int:
    graph, scores, record = load_scored_graph(path)
    if graph.particle_id is None or graph.particle_pt is None:
        raise DomainparError(f"{path}: expected a graph with its truth (particle_id, particle_pt), got none")
    config = TrackConfig(method=method, threshold=float(record["threshold"]))
    c = build_candidates(graph.pos, graph.layer, graph.edge_index, scores, config)
    written = plot_track_examples(
        graph.pos, c.offsets, c.hits, c.track_id, graph.particle_id, graph.particle_pt, out, count=count,
        title=f"event {graph.event_id}: {method} tracks whole, broken and fake (scores of {_model(record)})",
    )  # fmt: skip
    print(f"wrote {written}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tools.track_study", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("timing", help="CPU seconds per event of every builder")
    t.add_argument("--scores", required=True, type=Path, help="directory of graphs written by evaluate --write-scores")
    t.add_argument("--methods", default=",".join(METHODS), help="comma-separated methods")
    t.add_argument("--repeat", type=int, default=3, help="timed builds per event and method")
    t.add_argument("--set", action="append", default=[], help="FIELD=VALUE of TrackConfig (repeatable), as in bench.tools.compare_builders")
    e = sub.add_parser("examples", help="figure of built tracks whole, broken and fake")
    e.add_argument("--scores", required=True, type=Path, help="one graph written by evaluate --write-scores")
    e.add_argument("--method", default=DEFAULT_METHOD, choices=METHODS, help="track builder")
    e.add_argument("--count", type=int, default=2, help="examples of each kind")
    e.add_argument("--out", type=Path, default=Path("docs/figures/track_examples_real.png"), help="output PNG")
    args = parser.parse_args(argv)
    try:
        if args.command == "timing":
            methods = args.methods.split(",")
            unknown = [m for m in methods if m not in METHODS]
            if unknown:
                raise DomainparError(f"--methods: expected names from {', '.join(METHODS)}, got {', '.join(unknown)}")
            if args.repeat < 1:
                raise DomainparError(f"--repeat: expected an integer >= 1, got {args.repeat}")
            return timing(args.scores, methods, args.repeat, dict(_parse_setting(x) for x in args.set))
        if args.count < 1:
            raise DomainparError(f"--count: expected an integer >= 1, got {args.count}")
        return examples(args.scores, args.method, args.count, args.out)
    except DomainparError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

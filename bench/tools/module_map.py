"""Learn a module map from simulated events, and measure it against the geometric cuts by pT (``docs/tracks.md``).

    python -m bench.tools.module_map learn --events DIR [--events DIR2] [--num-events N] --margin 0.1 --out map.npz
    python -m bench.tools.module_map table study.json [more.json]
    python -m bench.tools.module_map study --train DIR [--train DIR2] --sizes 4,16,64 --margins 0.1,0.5 \\
        --eval val=DIR --eval real=../shared/data/trackml/pixel --out WORK --json study.json

``study`` learns the map once per training-set size (the first N events of the ``--train`` directories, in name
order) and margin, then builds every ``--eval`` event with the recipe's cuts (``domainpar/pipeline/recipes/
physics.yaml``'s graph section) and with each map (the same features), and reports per construction: edges per
event, true-segment efficiency overall and per pT bin, build seconds, and the fraction of true segments whose
module pair the map lacks (the map's coverage). Training events must be simulated: real events are for evaluation.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

from domainpar.arrays import member
from domainpar.errors import DomainparError

PT_BINS = ((0.1, 0.2), (0.2, 0.3), (0.3, 0.5), (0.5, 0.7), (0.7, 1.0), (1.0, np.inf))
RECIPE = Path(__file__).resolve().parents[2] / "domainpar" / "pipeline" / "recipes" / "physics.yaml"


def _prefixes(directories: list[str]) -> list[str]:
    found = []
    for directory in directories:
        names = sorted({p[: -len("-hits.csv.gz")] for p in glob.glob(str(Path(directory) / "event*-hits.csv.gz"))})
        if not names:
            raise DomainparError(f"--events/--train {directory}: expected TrackML events event*-hits.csv.gz (found none)")
        found += names
    return found


def _simulator_hash() -> str:
    from domainpar.sim.config import SimulationConfig

    return hashlib.sha256(json.dumps(dataclasses.asdict(SimulationConfig()), sort_keys=True, default=str).encode()).hexdigest()[:16]


def _provenance(seed: int | None) -> dict:
    return {"seed": seed, "simulator_config_hash": _simulator_hash(), "source": "simulated"}


def recipe_graph():
    """The recipe's GraphConfig (the cuts the recipe's figures were made with)."""
    import yaml

    from domainpar.data.graph import GraphConfig

    return GraphConfig.from_dict(yaml.safe_load(RECIPE.read_text())["graph"], source=str(RECIPE))


def add_event(learner, prefix: str) -> None:
    """Add the true segments of the simulated event at ``prefix`` (hits, particles and truth) to a ``MapLearner``."""
    from domainpar.data.detector import layer_index_of
    from domainpar.data.hit_truth import truth_per_hit
    from domainpar.data.module_map import module_keys
    from domainpar.data.trackml import has_truth, load_event
    from domainpar.data.true_segments import true_segments

    if not has_truth(prefix):
        raise DomainparError(f"{prefix}: expected a truth file to learn the module map from (found none)")
    hits, particles, truth = load_event(prefix, parts=("hits", "particles", "truth"))
    layer = layer_index_of(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy())
    particle_id, _, vertex = truth_per_hit(hits, truth, particles)
    pos = hits[["x", "y", "z"]].to_numpy(np.float64)
    learner.add(module_keys(layer, hits["module_id"].to_numpy()), pos, true_segments(particle_id, layer, pos, vertex), Path(prefix).name)


def learn_maps(prefixes: list[str], sizes: list[int], margins: list[float], out: Path, seed: int | None) -> dict:
    """Learn incrementally; write ``map_n{N}_m{margin}.npz`` for every size and margin. Returns {(N, m): path}."""
    from domainpar.data.module_map import MapLearner, save_module_map

    out.mkdir(parents=True, exist_ok=True)
    learner, paths, start = MapLearner(), {}, time.perf_counter()
    for index, prefix in enumerate(prefixes[: max(sizes)], start=1):
        add_event(learner, prefix)
        if index in sizes:
            for margin in margins:
                module_map = learner.finish(margin, _provenance(seed))
                path = out / f"map_n{index}_m{margin:g}.npz"
                save_module_map(module_map, path)
                paths[(index, margin)] = path
                print(f"learned {path.name}: {module_map.provenance['num_pairs']} pairs from {index} events "
                      f"({time.perf_counter() - start:.1f} s so far), hash {module_map.content_hash}", file=sys.stderr, flush=True)
    return paths


def load(prefix: str) -> dict:
    """One event's hit arrays and true segments (the graph's nodes: every hit, in file order)."""
    from domainpar.data.detector import layer_index_of
    from domainpar.data.hit_truth import truth_per_hit
    from domainpar.data.module_map import module_keys
    from domainpar.data.trackml import load_event
    from domainpar.data.true_segments import true_segments

    hits, particles, truth = load_event(prefix, parts=("hits", "particles", "truth"))
    layer = layer_index_of(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy())
    particle_id, pt, vertex = truth_per_hit(hits, truth, particles)
    pos = hits[["x", "y", "z"]].to_numpy(np.float64)
    segments = true_segments(particle_id, layer, pos, vertex)
    return {"pos": pos, "layer": layer, "module": module_keys(layer, hits["module_id"].to_numpy()), "segments": segments,
            "segment_pt": pt[segments[0]]}


def measure(event: dict, config, module_map=None, union_with: np.ndarray | None = None) -> dict:
    """Find one event's edges with ``config`` (cuts) or ``module_map``: edges, efficiency per pT bin, seconds of the
    edge finding alone (the features that follow cost the same per edge for both), and the map's coverage.
    With ``union_with`` ((2, E) edges of the cuts), the union of both edge sets is measured instead (a combination)."""
    from domainpar.data.graph import _search_edges
    from domainpar.data.module_map import map_edges
    from domainpar.data.true_segments import pair_keys

    pos, segments, pt = event["pos"], event["segments"], event["segment_pt"]
    n = pos.shape[0]
    start = time.perf_counter()
    if module_map is None:
        r, phi = np.hypot(pos[:, 0], pos[:, 1]), np.arctan2(pos[:, 1], pos[:, 0])
        edges = _search_edges(r, phi, pos[:, 2], event["layer"], config)
    else:
        edges = map_edges(module_map, event["module"], pos)
    seconds = time.perf_counter() - start
    event["last_edges"] = edges
    if union_with is not None:
        keys = np.concatenate([pair_keys(edges[0], edges[1], n), pair_keys(union_with[0], union_with[1], n)])
        keys = np.sort(keys)
        keys = keys[np.append(True, keys[1:] != keys[:-1])]
        edges = np.stack([keys // n, keys % n])
    kept = member(pair_keys(segments[0], segments[1], n), pair_keys(edges[0], edges[1], n))
    record = {"edges": int(edges.shape[1]), "seconds": seconds, "true": int(kept.size), "kept": int(kept.sum()),
              "bins": [[int(((pt >= lo) & (pt < hi)).sum()), int(kept[(pt >= lo) & (pt < hi)].sum())] for lo, hi in PT_BINS]}
    if module_map is not None:
        stride = np.int64(1 << 23)
        module = event["module"]
        known = member(module[segments[0]] * stride + module[segments[1]], module_map.pairs[:, 0] * stride + module_map.pairs[:, 1])
        record["pair_absent"] = int((~known).sum())
        record["bins_absent"] = [int((~known[(pt >= lo) & (pt < hi)]).sum()) for lo, hi in PT_BINS]
    return record


def _summary(records: list[dict]) -> dict:
    true = sum(r["true"] for r in records)
    kept = sum(r["kept"] for r in records)
    bins = np.sum([r["bins"] for r in records], axis=0)
    out = {"events": len(records), "edges_per_event": float(np.mean([r["edges"] for r in records])),
           "seconds_per_event": float(np.mean([r["seconds"] for r in records])), "efficiency": kept / max(true, 1),
           "efficiency_by_pt": [float(k / t) if t else None for t, k in bins]}
    if "pair_absent" in records[0]:
        out["pair_absent"] = sum(r["pair_absent"] for r in records) / max(true, 1)
        absent = np.sum([r["bins_absent"] for r in records], axis=0)
        out["pair_absent_by_pt"] = [float(a / t) if t else None for (t, _), a in zip(bins, absent)]
    return out


def tables(results: dict) -> str:
    """Markdown tables of a ``study`` JSON: one per evaluated data set."""
    lines = []
    for name, rows in results.items():
        lines += [f"**{name}**", "", "| construction | edges / event | edge s / event | true segments kept | "
                  + " | ".join(f"{lo:g}-{hi:g}" if np.isfinite(hi) else f">{lo:g}" for lo, hi in PT_BINS)
                  + " | pair absent from map |", "|---" * (5 + len(PT_BINS)) + "|"]
        for key, row in rows.items():
            # A union's edge finding runs both constructions: the cuts' seconds come on top of the map's.
            seconds = row["seconds_per_event"] + (rows["cuts"]["seconds_per_event"] if key.startswith("cuts + ") else 0.0)
            absent = f"{row['pair_absent']:.3f}" if "pair_absent" in row else ""
            lines.append(f"| {key} | {row['edges_per_event'] / 1e6:.2f}M | {seconds:.2f} | {row['efficiency']:.3f} | "
                         + " | ".join("" if v is None else f"{v:.3f}" for v in row["efficiency_by_pt"]) + f" | {absent} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tools.module_map", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    learn = sub.add_parser("learn")
    learn.add_argument("--events", action="append", required=True)
    learn.add_argument("--num-events", type=int, default=0)
    learn.add_argument("--margin", type=float, default=0.1)
    learn.add_argument("--seed", type=int, default=None, help="Seed the events were simulated with (recorded).")
    learn.add_argument("--out", required=True)
    study = sub.add_parser("study")
    study.add_argument("--train", action="append", required=True)
    study.add_argument("--sizes", default="4,16,64")
    study.add_argument("--margins", default="0.1")
    study.add_argument("--seed", type=int, default=1)
    study.add_argument("--eval", action="append", required=True, metavar="NAME=DIR")
    study.add_argument("--out", required=True)
    study.add_argument("--json", default=None)
    study.add_argument("--union", action="store_true", help="Also measure the union of the cuts' and each map's edges.")
    table = sub.add_parser("table")
    table.add_argument("json_paths", nargs="+", help="study JSONs; later files add their rows to the earlier ones' (the first file's cuts row stays)")
    args = parser.parse_args(argv)
    try:
        if args.command == "table":
            merged: dict = {}
            for path in args.json_paths:
                for name, rows in json.loads(Path(path).read_text()).items():
                    for key, row in rows.items():
                        merged.setdefault(name, {}).setdefault(key, row)
            print(tables(merged))
            return 0
        if args.command == "learn":
            prefixes = _prefixes(args.events)
            prefixes = prefixes[: args.num_events] if args.num_events else prefixes
            from domainpar.data.module_map import MapLearner, save_module_map

            learner = MapLearner()
            for prefix in prefixes:
                add_event(learner, prefix)
            module_map = learner.finish(args.margin, _provenance(args.seed))
            save_module_map(module_map, args.out)
            print(f"{args.out}: {module_map.provenance['num_pairs']} pairs, hash {module_map.content_hash}")
            return 0
        from domainpar.data.module_map import load_module_map

        sizes = [int(s) for s in args.sizes.split(",")]
        margins = [float(m) for m in args.margins.split(",")]
        prefixes = _prefixes(args.train)
        if len(prefixes) < max(sizes):
            raise DomainparError(f"--sizes: expected at most {len(prefixes)} training events (got {max(sizes)})")
        paths = learn_maps(prefixes, sizes, margins, Path(args.out), args.seed)
        cuts = recipe_graph()
        results = {}
        for spec in args.eval:
            name, _, directory = spec.partition("=")
            events = [load(p) for p in _prefixes([directory])]
            rows = {"cuts": _summary([measure(e, cuts) for e in events])}
            for event in events:
                event["cut_edges"] = event.pop("last_edges")
            print(name, "cuts", json.dumps(rows["cuts"]), file=sys.stderr, flush=True)
            for (size, margin), path in paths.items():
                module_map = load_module_map(path)
                key = f"map n={size} m={margin:g}"
                rows[key] = _summary([measure(e, cuts, module_map) for e in events])
                print(name, key, json.dumps(rows[key]), file=sys.stderr, flush=True)
                if args.union:
                    rows[f"cuts + {key}"] = _summary([measure(e, cuts, module_map, e["cut_edges"]) for e in events])
                    print(name, f"cuts + {key}", json.dumps(rows[f"cuts + {key}"]), file=sys.stderr, flush=True)
            results[name] = rows
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
        return 0
    except DomainparError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

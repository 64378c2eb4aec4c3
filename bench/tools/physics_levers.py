"""One lever at a time: the physics recipe's base run, then one training or tracking change per row.

    python -m bench.tools.physics_levers --out DIR --levers LEVERS.json [--recipe FILE] [--real DIR]
        [--filter FILTER.pt] [--set KEY=VALUE ...] [--no-base-model] [--deadline S]

The base row is :func:`domainpar.pipeline.physics.run_recipe` on the recipe as written (simulate → build →
filter → train → evaluate, into ``DIR/base``). Every lever then retrains the GNN on the base row's filtered
graphs with a few training settings changed (dotted keys of :class:`~domainpar.train.config.TrainConfig`,
e.g. ``{"run.epochs": 30, "optim.lr": 0.004}``) and evaluates it on the held-out simulated events and on the
real labelled event, with each track building asked for. One JSON line per (lever, track building) goes to
``DIR/levers.jsonl`` as soon as it is measured, so a run cut short keeps what it measured.

``LEVERS.json`` is a list of ``{"name": str, "train": {key: value}, "tracks": [[method, threshold], ...]}``;
``"reuse": "base/model.pt"`` evaluates a trained model instead of training one (track-building levers; a path
outside ``DIR`` is taken as given: a model trained elsewhere, judged on the same graphs).

``--set KEY=VALUE`` changes the recipe's training for every row, the base row too (``parallel.ranks=1``,
``parallel.device=cuda``, ``model.compile=off``; a value is read as JSON where it parses, else as text).
``--filter`` prunes with a trained edge filter instead of training one (an earlier run's ``filter.pt``; its
settings must be the recipe's): with the same simulation seeds the graphs are then those that run's model saw
(on the same numpy and numba: another version draws slightly other events). ``--no-base-model``: the base row
makes the data only, and the levers have the time the recipe-size model would take (on a lent GPU, the base
row's evaluation alone outlasted what was left of a 10-minute call).
bench/results/h100-2026-11-23-physics-levers.md was measured with it. Slow on CPU (each lever is a training
run): it is meant for a GPU machine, where the base row takes about 100 s and a 600-step lever about 40 s.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import time
from pathlib import Path

from bench.sections.physics import REAL_EVENTS, RECIPE

#: The figures a row keeps, per evaluated dataset.
KEYS = ("auc", "efficiency", "purity", "efficiency_pt1", "efficiency_at_purity90", "purity_at_purity90", "cut_at_purity90",
        "trackml_score", "tracking_efficiency", "perfect_efficiency", "fake_rate", "duplicate_rate")


def _figures(summary: dict) -> dict:
    return {k: round(summary[k], 4) if isinstance(summary.get(k), float) else summary.get(k) for k in KEYS}


def parse_settings(pairs: list[str]) -> dict:
    """``["parallel.ranks=1", "parallel.threads=null"]`` → ``{"parallel.ranks": 1, "parallel.threads": None}``."""
    settings = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set {pair!r}: expected KEY=VALUE")
        try:
            settings[key] = json.loads(text)
        except json.JSONDecodeError:
            settings[key] = text
    return settings


def run(
    out: Path,
    levers: list[dict],
    recipe_path: Path = RECIPE,
    real: Path = REAL_EVENTS,
    deadline: float = float("inf"),
    settings: dict | None = None,
    edge_filter: Path | None = None,
    base_model: bool = True,
) -> list[dict]:
    """The base row, then every lever (skipped once ``deadline`` seconds have passed); returns the rows.

    ``settings``: training changes (dotted keys) applied to every row; ``edge_filter``: a trained filter to prune
    with instead of training one; ``base_model=False``: the base row only makes the data (no recipe-size model is
    trained or judged: on a lent device, its time goes to the levers).
    """
    from domainpar.inference.spec import EvaluateConfig
    from domainpar.inference.evaluation import evaluate
    from domainpar.pipeline.physics import _json_default, prepare_graphs, run_recipe
    from domainpar.pipeline.recipe import load_recipe
    from domainpar.train.run import train

    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    recipe = load_recipe(recipe_path)
    if settings:
        recipe = dataclasses.replace(recipe, train=recipe.train.replace(**settings))
    rows: list[dict] = []
    sink = (out / "levers.jsonl").open("a")

    def emit(row: dict) -> None:
        rows.append(row)
        sink.write(json.dumps(row, default=_json_default) + "\n")
        sink.flush()
        print(json.dumps(row, default=_json_default), flush=True)

    base = out / "base"
    # Each line carries the seconds since the start: a run cut short on a lent device still shows where its time went.
    echo = lambda line: print(f"[base {time.perf_counter() - started:5.0f} s] {line}", flush=True)  # noqa: E731
    if base_model:
        result = run_recipe(recipe, base, real=real, echo=echo, events_cache=out / "events", edge_filter=edge_filter)
        emit({"name": "base", "settings": settings or {}, "steps": result["train"]["steps"], "timings": result["timings"],
              "sim": _figures(result["evaluate"]["simulated"]), "real": _figures(result["evaluate"].get("real", {}))})  # fmt: skip
        graphs = base / "filtered" if result.get("filter") else base / "graphs"
        events = {"val": Path(result["events"]["val"]), "real": real}
    else:
        shutil.rmtree(base, ignore_errors=True)
        sources, gnn_graphs, prepared = prepare_graphs(recipe, base, real, echo, False, out / "events", edge_filter)
        emit({"name": "data (no base model)", "settings": settings or {}, "timings": prepared["timings"]})
        graphs = gnn_graphs["val"].parent
        events = {"val": sources["val"], "real": real}

    def measure(lever: dict) -> None:
        run_dir = out / "levers" / lever["name"]
        shutil.rmtree(run_dir, ignore_errors=True)
        if lever.get("reuse"):
            model, steps, final = out / lever["reuse"], None, {}
        else:
            overrides = {"data.train": str(graphs / "train"), "data.val": str(graphs / "val"), "run.out": str(run_dir), "run.progress": False}
            begin = time.perf_counter()
            summary = train(recipe.train.replace(**overrides, **lever.get("train", {})))
            model, steps, final = Path(summary["model"]), summary.get("steps"), summary.get("final") or {}
            final = {**final, "train_seconds": time.perf_counter() - begin}
        for method, threshold in lever.get("tracks", [[recipe.tracks.method, recipe.tracks.threshold]]):
            figures = {}
            for label, kind in (("sim", "val"), ("real", "real")):
                if not (graphs / kind).is_dir():
                    continue
                report = evaluate(EvaluateConfig(checkpoint=model, data=graphs / kind, events_dir=events[kind], num_parts=1,
                                                 threshold=threshold, track_method=method, progress=False))  # fmt: skip
                figures[label] = _figures(report.summary)
            emit({"name": lever["name"], "train": lever.get("train", {}), "tracks": [method, threshold], "steps": steps,
                  "val_loss": final.get("val_loss"), "train_seconds": final.get("train_seconds"), **figures})  # fmt: skip

    for lever in levers:
        if time.perf_counter() - started > deadline:
            print(f"deadline: {lever['name']} not run", flush=True)
            continue
        try:
            measure(lever)
        except Exception as exc:  # noqa: BLE001 - one lever's failure is its row; the others still run
            emit({"name": lever["name"], "error": f"{type(exc).__name__}: {exc}"})
    sink.close()
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--levers", type=Path, required=True, help="JSON list of levers (see the module docstring)")
    parser.add_argument("--recipe", type=Path, default=RECIPE, help="recipe file (default: examples/physics.yaml)")
    parser.add_argument("--real", type=Path, default=REAL_EVENTS, help="real labelled events evaluated after training")
    parser.add_argument("--deadline", type=float, default=float("inf"), help="seconds after which no lever starts")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                        help="a training setting of every row (dotted key, e.g. parallel.device=cuda); repeatable")
    parser.add_argument("--filter", type=Path, default=None, help="a trained edge filter to prune with (not trained again)")
    parser.add_argument("--no-base-model", dest="base_model", action="store_false",
                        help="the base row makes the data only (no recipe-size model trained and judged)")
    args = parser.parse_args(argv)
    run(args.out, json.loads(args.levers.read_text()), args.recipe, args.real, args.deadline, parse_settings(args.settings), args.filter, args.base_model)


if __name__ == "__main__":
    main()

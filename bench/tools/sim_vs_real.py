"""Simulated events against the real event 21000: occupancy, spectra, secondaries, curlers, graph size, clusters, noise.

    python -m bench.tools.sim_vs_real [--data DIR] [--recipe examples/full_event.yaml] [--events 4]
        [--before DIR] [--json docs/figures/sim_vs_real.json] [--table FILE]

Counts (:mod:`bench.tools.occupancy`) on three kinds of event, the same way:

* the real event 21000 whole (``event000021000-*``: all nine volumes, no truth);
* its pixel detector with truth (``pixel/event000021000-*``);
* simulated events: the recipe's held-out events (its ``validation`` simulation, seed ``val_seed``: the events
  it is judged on; ``after``), its training events (the occupancy mix, ``training``), and, with ``--before DIR``,
  events simulated earlier into DIR (``domainpar simulate``, e.g. by an older simulator: ``before``). A
  simulated event is counted as a whole like the real one (without its truth) and, cut to its pixel
  volumes with its truth, like the real pixel event.

Edges per hit are those of the recipe's graph cuts (its ``graph:`` section) on the whole event and on the pixel
event. Writes the counts and figures as JSON (``bench.tools.plot_sim_vs_real`` draws them) and a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.common.report import REPO_ROOT
from bench.common.workloads import DATA_ENV, FULL_EVENT, trackml_dir
from domainpar.atomic import atomic_path
from domainpar.data.trackml import event_prefixes, load_event
from domainpar.pipeline.recipe import load_recipe
from domainpar.sim.event import simulate_event
from bench.tools.occupancy import PIXEL_VOLUMES, add_counts, event_counts, occupancy_summary, region

#: Where the JSON goes by default (beside the figure it draws).
DEFAULT_JSON = REPO_ROOT / "docs" / "figures" / "sim_vs_real.json"
#: The real event's counts that tests/sim/test_occupancy.py holds the simulation to.
REFERENCE = REPO_ROOT / "tests" / "sim" / "occupancy_event000021000.json"


def _counted(frames: dict, graph) -> tuple[dict, dict]:
    """(whole-event counts without truth, pixel counts with truth) of one simulated event's tables."""
    whole = event_counts(frames["hits"], frames["particles"], None, frames["cells"], graph)
    pixel = region(frames, PIXEL_VOLUMES)
    return whole, event_counts(pixel["hits"], pixel["particles"], pixel["truth"], pixel["cells"], graph)


def _source(events, graph) -> dict:
    """Summed counts, summaries and per-event hit counts of some simulated events (an iterable of frame dicts)."""
    whole = pixel = None
    hits, seconds = [], []
    for frames, elapsed in events:
        one_whole, one_pixel = _counted(frames, graph)
        whole = one_whole if whole is None else add_counts(whole, one_whole)
        pixel = one_pixel if pixel is None else add_counts(pixel, one_pixel)
        hits.append(len(frames["hits"]))
        if elapsed is not None:
            seconds.append(elapsed)
    return {
        "whole": {"counts": whole, "summary": occupancy_summary(whole)},
        "pixel": {"counts": pixel, "summary": occupancy_summary(pixel)},
        "hits_per_event": hits,
        "simulate_seconds": seconds or None,
    }


def _simulated(config, seed: int, first_event_id: int, events: int):
    for event_id in range(first_event_id, first_event_id + events):
        start = time.perf_counter()
        frames = simulate_event(config, event_id, seed)
        yield frames, time.perf_counter() - start


def _from_directory(directory: Path, events: int):
    for prefix in event_prefixes(directory)[:events]:
        hits, cells, particles, truth = load_event(prefix, parts=("hits", "cells", "particles", "truth"))
        yield {"hits": hits, "cells": cells, "particles": particles, "truth": truth}, None


def measure_real(data: Path, graph) -> dict:
    """The real event 21000's counts and figures: whole (no truth) and its pixel detector (truth)."""
    hits, cells, particles = load_event(data / FULL_EVENT, parts=("hits", "cells", "particles"))
    whole = event_counts(hits, particles, None, cells, graph)
    hits, cells, particles, truth = load_event(data / "pixel" / FULL_EVENT, parts=("hits", "cells", "particles", "truth"))
    pixel = event_counts(hits, particles, truth, cells, graph)
    return {
        "whole": {"counts": whole, "summary": occupancy_summary(whole)},
        "pixel": {"counts": pixel, "summary": occupancy_summary(pixel)},
    }


def measure(data: Path, recipe_path: Path, events: int, before: Path | None) -> dict:
    """Every source's counts and figures (see the module docstring)."""
    recipe = load_recipe(recipe_path)
    graph = recipe.graph
    result = {"recipe": str(recipe_path), "events": events, "real": measure_real(data, graph), "simulated": {}}
    if before is not None:
        result["simulated"]["before"] = _source(_from_directory(before, events), graph)
    sim = recipe.simulation
    result["simulated"]["after"] = _source(_simulated(recipe.validation_simulation(), sim.val_seed, 100_001, events), graph)
    if recipe.training_simulation() != recipe.validation_simulation():
        result["simulated"]["training"] = _source(_simulated(recipe.training_simulation(), sim.seed, 1, events), graph)
    return result


def _value(summary: dict, key: str):
    value = summary
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


#: Rows of the table: (label, region, key in the summary, format).
ROWS = (
    ("hits per event", "whole", "hits", "{:,.0f}"),
    ("particles listed", "whole", "particles_listed", "{:,.0f}"),
    ("particles with hits", "whole", "particles_with_hits", "{:,.0f}"),
    ("decay daughters listed (displaced, generation 0)", "whole", "decay_daughters", "{:,.0f}"),
    ("secondaries of interactions listed (generation ≥ 1)", "whole", "secondaries", "{:,.0f}"),
    ("  of which with hits", "whole", "secondaries_with_hits_share", "{:.1%}"),
    ("interaction vertices", "whole", "interaction_vertices", "{:,.0f}"),
    ("noise fraction", "whole", "noise_fraction", "{:.1%}"),
    ("hits per particle with hits", "whole", "hits_per_particle", "{:.2f}"),
    ("displaced share of particles with hits", "whole", "displaced_share", "{:.1%}"),
    ("pT > 1 GeV share of particles with hits", "whole", "pt_above_1_share", "{:.1%}"),
    ("median pT of particles with hits, GeV", "whole", "pt_median", "{:.3f}"),
    ("central primaries 0.3-3 GeV with < 8 hits (stopped)", "whole", "central_stopped_share", "{:.1%}"),
    ("hits of central primaries 0.15-0.3 GeV (curlers)", "whole", "low_pt_central_hits", "{:.2f}"),
    ("graph edges per hit (recipe cuts)", "whole", "edges_per_hit", "{:.1f}"),
    ("graph edges per event", "whole", "edges", "{:,.0f}"),
    ("pixel hits per event", "pixel", "hits", "{:,.0f}"),
    ("particles with pixel hits", "pixel", "particles_with_hits", "{:,.0f}"),
    ("pixel noise fraction", "pixel", "noise_fraction", "{:.2%}"),
    ("  volume 7 / 8 / 9", "pixel", "noise_per_volume", "volumes"),
    ("pixel hits per particle", "pixel", "hits_per_particle", "{:.2f}"),
    ("displaced share of particles with pixel hits", "pixel", "displaced_share", "{:.1%}"),
    ("pT > 1 GeV share of particles with pixel hits", "pixel", "pt_above_1_share", "{:.1%}"),
    ("median pT of particles with pixel hits, GeV", "pixel", "pt_median", "{:.3f}"),
    ("particles with more pixel hits than layers", "pixel", "more_hits_than_layers_share", "{:.1%}"),
    ("particle-layer pairs with two or more hits", "pixel", "double_layer_share", "{:.1%}"),
    ("loopers (two hits on a layer > 20 mm apart)", "pixel", "looper_share", "{:.2%}"),
    ("central primaries 0.3-3 GeV with < 4 pixel hits", "pixel", "central_stopped_share", "{:.1%}"),
    ("pixel graph edges per hit (recipe cuts)", "pixel", "edges_per_hit", "{:.1f}"),
    ("cells per hit, volume 7 / 8 / 9", "pixel", "clusters", "cells"),
    ("summed charge per hit, volume 7 / 8 / 9", "pixel", "clusters", "charge"),
    ("channels along u per hit, volume 7 / 8 / 9", "pixel", "clusters", "channels_u"),
    ("channels along v per hit, volume 7 / 8 / 9", "pixel", "clusters", "channels_v"),
    ("cells per noise hit, volume 7 / 8 / 9", "pixel", "noise_clusters", "cells"),
)


def _cell(summary: dict, key: str, fmt: str) -> str:
    value = _value(summary, key)
    if value is None:
        return "—"
    if fmt == "volumes":
        return " / ".join(f"{value.get(str(v)) or 0:.1%}" for v in PIXEL_VOLUMES)
    if key in ("clusters", "noise_clusters"):
        return " / ".join(f"{value[str(v)][fmt]:.2f}" if str(v) in value else "—" for v in PIXEL_VOLUMES)
    return fmt.format(value)


def markdown_table(result: dict) -> str:
    """The comparison as a Markdown table: the real event, then every simulated source."""
    sources = [name for name in ("before", "after", "training") if name in result["simulated"]]
    sources += [name for name in result["simulated"] if name not in sources]
    header = "| | real event 21000 | " + " | ".join(f"simulated, {name}" for name in sources) + " |"
    lines = [header, "|---" * (2 + len(sources)) + "|"]
    for label, part, key, fmt in ROWS:
        cells = [_cell(result["real"][part]["summary"], key, fmt)]
        cells += [_cell(result["simulated"][name][part]["summary"], key, fmt) for name in sources]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for volume in ("7", "8", "9", "12", "13", "14", "16", "17", "18"):
        cells = [f"{result['real']['whole']['summary']['hits_per_volume'].get(volume, 0):,.0f}"]
        cells += [f"{result['simulated'][name]['whole']['summary']['hits_per_volume'].get(volume, 0):,.0f}" for name in sources]
        lines.append(f"| hits in volume {volume} | " + " | ".join(cells) + " |")
    timing = []
    for name in sources:
        seconds = result["simulated"][name]["simulate_seconds"]
        timing.append(f"{sum(seconds) / len(seconds):.1f} s" if seconds else "—")
    lines.append("| simulate time per event (this run) | — | " + " | ".join(timing) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help=f"TrackML data directory (default: ${DATA_ENV} or <repo>/../shared/data/trackml)")
    parser.add_argument("--recipe", default=str(REPO_ROOT / "examples" / "full_event.yaml"))
    parser.add_argument("--events", type=int, default=4, help="simulated events per source")
    parser.add_argument("--before", default=None, help="directory of events simulated earlier (counted as 'before')")
    parser.add_argument("--json", default=str(DEFAULT_JSON))
    parser.add_argument("--table", default=None, help="write the Markdown table here (default: print it)")
    parser.add_argument(
        "--reference",
        default=None,
        help=f"only write the real event's counts to this file (the tests' reference: {REFERENCE.relative_to(REPO_ROOT)})",
    )
    args = parser.parse_args()

    data = Path(args.data) if args.data else trackml_dir()
    if args.reference:
        recipe = Path(args.recipe).resolve()
        real = measure_real(data, load_recipe(recipe).graph)
        source = {"event": FULL_EVENT, "recipe_graph": recipe.relative_to(REPO_ROOT).as_posix() if recipe.is_relative_to(REPO_ROOT) else str(recipe)}
        with atomic_path(Path(args.reference)) as tmp:
            Path(tmp).write_text(json.dumps({**source, **real}, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.reference}")
        return
    result = measure(data, Path(args.recipe), args.events, Path(args.before) if args.before else None)
    with atomic_path(Path(args.json)) as tmp:
        Path(tmp).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    table = markdown_table(result)
    if args.table:
        with atomic_path(Path(args.table)) as tmp:
            Path(tmp).write_text(table)
    else:
        print(table)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

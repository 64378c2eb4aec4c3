"""The recipe's data stages on a detector region: every event it touches is cut to ``graph.volumes``."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from domainpar.data.trackml import event_prefixes, load_event
from domainpar.pipeline.physics import prepare_graphs
from domainpar.pipeline.recipe import load_recipe

from fixtures import REPO

PIXEL = (7, 8, 9)


def _volumes(directory) -> set[int]:
    found: set[int] = set()
    for prefix in event_prefixes(directory):
        (hits,) = load_event(prefix, parts=("hits",))
        found |= set(np.unique(hits["volume_id"]).tolist())
    return found


def test_a_recipe_on_the_pixel_volumes_builds_pixel_events_only(tmp_path):
    recipe = load_recipe(REPO / "examples" / "pixel_event.yaml")
    small = replace(recipe.simulation, train_events=2, val_events=1, particles=40, particles_spread=0.0)
    recipe = replace(recipe, simulation=small, filter=None)
    sources, graphs, _ = prepare_graphs(recipe, tmp_path / "run", real=REPO / "tests" / "data" / "trackml",
                                        echo=lambda line: None, events_cache=tmp_path / "cache")  # fmt: skip
    assert set(sources) == {"train", "val", "real"}
    for kind in ("train", "val", "real"):
        assert _volumes(sources[kind]) <= set(PIXEL), kind
        assert sorted(graphs[kind].glob("*.npz")), kind
    # What was cut from: the cached simulated events and the real event keep the whole detector.
    (cached,) = [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    assert _volumes(cached / "train") - set(PIXEL) and _volumes(REPO / "tests" / "data" / "trackml") - set(PIXEL)

"""bench.tools.physics_levers, the tool a lent GPU runs (bench/tools/device_full_event.sh): a broken row costs a
session's only device minutes, so its rows and its edge-efficiency figure are checked here, on CPU, shrunk."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from bench.tools import physics_levers
from domainpar.pipeline import recipe as recipe_module

from fixtures import TRACKML_DIR

FULL_EVENT = physics_levers.RECIPE.parent / "full_event.yaml"


def _brute_force(scores: np.ndarray, labels: np.ndarray, floor: float):
    """Every distinct cut tried: the highest efficiency with purity >= floor (None if none)."""
    best = None
    for cut in np.unique(scores):
        kept = scores >= cut
        purity = labels[kept].sum() / kept.sum()
        efficiency = labels[kept].sum() / labels.sum()
        if purity >= floor and (best is None or efficiency > best):
            best = efficiency
    return best


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_efficiency_at_purity_is_the_best_cut_of_the_required_purity(seed):
    rng = np.random.default_rng(seed)
    labels = rng.random(2000) < 0.3
    # Coarse scores: many ties, which a cut cannot split.
    scores = np.round(np.clip(0.45 * labels + 0.7 * rng.random(2000), 0, 1), 2)
    for floor in (0.6, 0.9):
        found = physics_levers.efficiency_at_purity(scores, labels, floor)
        expected = _brute_force(scores, labels.astype(np.float64), floor)
        assert found["efficiency"] == round(expected, 4)
        kept = scores >= found["threshold"]
        assert found["purity"] == round(labels[kept].sum() / kept.sum(), 4) and found["purity"] >= floor


def test_efficiency_at_purity_when_no_cut_reaches_it():
    none = {"efficiency": None, "purity": None, "threshold": None}
    assert physics_levers.efficiency_at_purity(np.array([0.9, 0.9, 0.2]), np.array([1, 0, 1]), 0.9) == none
    assert physics_levers.efficiency_at_purity(np.array([0.5]), np.array([0]), 0.9) == none
    assert physics_levers.efficiency_at_purity(np.array([0.8, 0.3]), np.array([1, 0]), 0.9) == {
        "efficiency": 1.0, "purity": 1.0, "threshold": 0.8}  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_rows_of_the_data_and_of_each_lever(tmp_path, monkeypatch):
    """The full-event recipe shrunk (2 + 1 events of 300 particles, a tiny model): the data row with its stage
    times, a lever's row with its figures on the simulated and the real set, a lever that cannot train as its own
    error row (the next one still runs), every row in levers.jsonl as it was printed."""
    load = recipe_module.load_recipe

    def tiny(path):
        recipe = load(path).scaled(train_events=2, val_events=1, epochs=1, particles=300, filter_steps=20)
        return replace(recipe, filter=replace(recipe.filter, negative_fraction=0.5),
                       train=recipe.train.replace(**{"model.hidden": 8, "model.num_iterations": 1, "run.curves": False,
                                                     "optim.warmup": 0}))  # fmt: skip

    monkeypatch.setattr(recipe_module, "load_recipe", tiny)
    levers = [
        {"name": "wider", "train": {"model.hidden": 12}},
        {"name": "broken", "train": {"model.hidden": -1}},
        {"name": "two iterations", "train": {"model.num_iterations": 2}},
    ]
    settings = {"parallel.ranks": 1, "parallel.threads": 1, "model.checkpointing": False}
    rows = physics_levers.run(tmp_path, levers, FULL_EVENT, TRACKML_DIR, settings=settings, base_model=False)
    assert [r["name"] for r in rows] == ["data (no base model)", "wider", "broken", "two iterations"]
    assert set(rows[0]["timings"]) == {"simulate", "build", "filter"} and rows[0]["settings"] == settings
    for row in (rows[1], rows[3]):
        assert row["steps"] == 2 and row["train_seconds"] > 0 and row["tracks"] == ["ckf", 0.5]
        for label in ("sim", "real"):
            figures = row[label]
            assert set(figures) == {*physics_levers.KEYS, "at_purity_0.90"}
            assert 0.5 < figures["auc"] <= 1 and 0 <= figures["tracking_efficiency"] <= 1
            best = figures["at_purity_0.90"]
            assert best["efficiency"] is None or (best["purity"] >= 0.9 and 0 < best["efficiency"] <= 1)
    assert rows[2]["error"].startswith(("SettingError", "DomainparError")) and "hidden" in rows[2]["error"]
    written = [json.loads(line) for line in (tmp_path / "levers.jsonl").read_text().splitlines()]
    assert [w["name"] for w in written] == [r["name"] for r in rows] and written[1]["sim"] == rows[1]["sim"]

"""bench.tools.physics_levers, the tool a lent GPU runs (bench/tools/device_full_event.sh): a broken row costs a
session's only device minutes, so its rows are checked here, on CPU, shrunk."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from bench.tools import physics_levers
from domainpar.pipeline import recipe as recipe_module

from fixtures import TRACKML_DIR

FULL_EVENT = physics_levers.RECIPE.parent / "full_event.yaml"


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
    assert set(rows[0]["timings"]) == {"simulate", "build", "filter", "build_and_prune"} and rows[0]["settings"] == settings
    for row in (rows[1], rows[3]):
        assert row["steps"] == 2 and row["train_seconds"] > 0 and row["tracks"] == ["ckf", 0.5]
        for label in ("sim", "real"):
            figures = row[label]
            assert set(figures) == set(physics_levers.KEYS)
            assert 0.5 < figures["auc"] <= 1 and 0 <= figures["tracking_efficiency"] <= 1 and 0 <= figures["efficiency_pt1"] <= 1
            assert figures["efficiency_at_purity90"] is None or (figures["purity_at_purity90"] >= 0.9 and 0 < figures["efficiency_at_purity90"] <= 1)
    assert rows[2]["error"].startswith(("SettingError", "DomainparError")) and "hidden" in rows[2]["error"]
    written = [json.loads(line) for line in (tmp_path / "levers.jsonl").read_text().splitlines()]
    assert [w["name"] for w in written] == [r["name"] for r in rows] and written[1]["sim"] == rows[1]["sim"]

"""A smoke run of the physics bench section: the recipe's pipeline end to end, shrunk to seconds.

The full section trains the recipe (≈ 20 minutes); here the same code runs on 3
tiny simulated events and one epoch of a tiny model, and the test checks what
the section promises: the model at ``<out>/model.pt``, ``eval.json`` with the
figures of the held-out simulated events and of the real event, plots, and a
report table holding every figure.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from bench.sections import physics
from domainpar.inference.model_io import load_model

#: The tests that read ``smoke`` (simulation, graph building, filter, training and two evaluations with plots:
#: ~30 s of CPU) are the slow tier.
slow = pytest.mark.slow


def _tiny(recipe):
    recipe = recipe.scaled(train_events=3, val_events=1, epochs=1, particles=150)
    return replace(
        recipe,
        filter=replace(recipe.filter, steps=20, holdout_every=3),
        train=recipe.train.replace(**{"model.hidden": 8, "model.num_iterations": 1, "parallel.threads": 1, "run.curves": False}),
    )


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "physics"
    return out, physics.run(out, overrides=_tiny)


@slow
def test_outputs_are_where_the_section_says(smoke):
    out, section = smoke
    loaded = load_model(out / "model.pt")
    assert loaded.model.config.hidden == 8
    result = json.loads((out / "eval.json").read_text())
    assert set(result["evaluate"]) == {"simulated", "real"}
    for figures in result["evaluate"].values():
        for key, *_ in physics.FIGURES:
            assert key in figures
    for label in ("simulated", "real"):
        for name in ("roc.png", "efficiency_purity_vs_pt.png", "efficiency_purity_vs_eta.png"):
            assert (out / "plots" / label / name).stat().st_size > 0
    assert (out / "filter.pt").is_file()
    assert result["train"]["cpu_seconds"] > 0 and result["train"]["steps"] == 3


@slow
def test_table_holds_every_figure(smoke):
    _, section = smoke
    assert section.name == "physics" and section.skipped is None
    assert [row["key"] for row in section.rows] == [key for key, *_ in physics.FIGURES]
    for row in section.rows:
        for column in ("simulated", "real"):
            value = row[column]
            assert value is None or (isinstance(value, float) and 0.0 <= value <= 1.0 and not math.isnan(value)), row
    real_auc = next(row["real"] for row in section.rows if row["key"] == "auc")
    assert real_auc is not None
    assert any("CPU" in note for note in section.notes)


def test_section_is_registered():
    from bench import sections

    assert "physics" in sections.ORDER and sections.load("physics") is physics

"""``domainpar demo`` (``make run``) is the physics recipe scaled down, run by the recipe's own runner.

Its options map onto the recipe (sizes through ``Recipe.scaled``, ranks, partitioner, model size and seed as
overrides); it hands that recipe to :func:`~domainpar.pipeline.physics.run_recipe` and builds its closing table
and ``summary.json`` from the runner's result, so ``eval.json`` records the recipe the demo ran. The command's
end-to-end run is the deploy page's (``examples/deploy_to_acts.md``, run as written by
``tests/examples/test_docs_commands.py``, which checks the outputs against the recipe the demo's options make).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from domainpar.pipeline import demo
from domainpar.pipeline.demo import DemoConfig, demo_recipe
from domainpar.pipeline.physics import TABLE_KEYS
from domainpar.pipeline.recipe import load_recipe

from fixtures import REPO

RECIPE = REPO / "examples" / "physics.yaml"


def test_every_option_maps_onto_the_recipe_and_nothing_else_changes():
    config = DemoConfig(events=3, val_events=2, particles=123, epochs=4, filter_steps=9, ranks=3, method="geometric",
                        hidden=16, iterations=2, seed=7)  # fmt: skip
    recipe = load_recipe(RECIPE)
    ran = demo_recipe(config)
    sim = ran.simulation
    assert (sim.train_events, sim.val_events, sim.particles) == (3, 2, 123)
    assert (sim.seed, sim.val_seed) == (recipe.simulation.seed, recipe.simulation.val_seed)  # the recipe's events
    assert ran.filter.steps == 9 and replace(ran.filter, steps=recipe.filter.steps) == recipe.filter
    t = ran.train
    assert (t.run.epochs, t.run.seed, t.model.hidden, t.model.num_iterations) == (4, 7, 16, 2)
    assert (t.parallel.mode, t.parallel.ranks, t.data.method) == ("domain", 3, "geometric")
    assert (ran.evaluation.parts, ran.evaluation.method) == (3, "geometric")
    # Everything the options do not name is the recipe's.
    assert ran.name == recipe.name and ran.graph == recipe.graph and ran.tracks == recipe.tracks
    # But the warm-up: 20 steps would take the whole of 3 events x 4 epochs, so it keeps its share (20 of 600 -> 0).
    assert (t.optim, t.loss) == (replace(recipe.train.optim, warmup=0), recipe.train.loss)
    assert replace(t.model, hidden=recipe.train.model.hidden, num_iterations=recipe.train.model.num_iterations) == recipe.train.model


def test_unset_options_keep_the_recipe_and_one_rank_is_a_single_process():
    recipe = load_recipe(RECIPE)
    ran = demo_recipe(DemoConfig(ranks=1))
    assert (ran.train.model.hidden, ran.train.model.num_iterations) == (recipe.train.model.hidden, recipe.train.model.num_iterations)
    assert ran.train.run.seed == recipe.train.run.seed
    assert (ran.train.parallel.mode, ran.train.parallel.ranks, ran.evaluation.parts) == ("single", 1, 1)


def test_recipe_option_chooses_the_recipe(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(RECIPE.read_text().replace("name: physics", "name: mine").replace("hidden: 64\n  num_iterations", "hidden: 24\n  num_iterations"))
    ran = demo_recipe(DemoConfig(recipe=mine))
    assert ran.name == "mine" and ran.train.model.hidden == 24


def test_demo_hands_its_recipe_to_the_runner_and_reports_the_runner_result(tmp_path, monkeypatch):
    """The demo has no chain of its own: it runs what run_recipe runs and shows what run_recipe returns."""
    config = DemoConfig(out=tmp_path / "demo", events=3, particles=50, epochs=2, real=tmp_path / "no-real-events")
    calls = []
    figures = {key: 0.123456 for key in TABLE_KEYS}

    def runner(recipe, out, real=None, echo=print, progress=False, **unused):
        calls.append((recipe, Path(out), real, progress))
        return {"recipe": recipe.to_dict(), "train": {"final": {"epoch": 2, "auc": 0.5}}, "evaluate": {"simulated": figures}}

    monkeypatch.setattr(demo, "run_recipe", runner)
    monkeypatch.setattr(demo, "_show_partition", lambda recipe, out, echo: echo("partition shown"))
    lines = []
    result = demo.run_demo(config, echo=lines.append)

    assert calls == [(demo_recipe(config), config.out, None, True)]
    assert result["evaluate"]["simulated"] is figures
    assert any("0.1235" in line and "simulated" not in line for line in lines), "the closing table shows the runner's figures"
    summary = json.loads((config.out / "summary.json").read_text())
    assert summary["evaluate"]["simulated"] == figures and summary["train"] == {"epoch": 2, "auc": 0.5}
    assert summary["eval"] == str(config.out / "eval.json") and summary["recipe"] == "physics"

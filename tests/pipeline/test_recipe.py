"""The physics recipe file: it loads, validates, and every mistake is one line naming the file and the key."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from domainpar.data.graph import GraphConfig
from domainpar.errors import DomainparError
from domainpar.pipeline.recipe import load_recipe, packaged_recipe_path, recipe_from_dict

from fixtures import REPO

RECIPE = REPO / "examples" / "physics.yaml"


def test_recipe_loads_and_names_everything_it_trains_from():
    recipe = load_recipe(RECIPE)
    assert recipe.name == "physics"
    sim = recipe.simulation
    assert sim.train_events >= 2 and sim.val_events >= 1 and sim.particles >= 10 and sim.seed != sim.val_seed
    assert isinstance(recipe.graph, GraphConfig) and recipe.graph.needs_cells
    assert recipe.filter is not None and 0 < recipe.filter.efficiency <= 1
    assert recipe.train.model.hidden >= 1 and recipe.train.run.epochs >= 1
    # One working point for training metrics, evaluation and track building.
    assert recipe.train.run.threshold == recipe.tracks.threshold
    # The YAML round trip is lossless.
    assert recipe_from_dict(recipe.to_dict(), source="round trip") == recipe


def test_packaged_recipe_is_the_example():
    """`domainpar demo` runs the packaged copy; it must be the file users read in examples/."""
    assert packaged_recipe_path("physics").read_text() == RECIPE.read_text()


def test_scaled_recipe_keeps_everything_but_the_sizes():
    recipe = load_recipe(RECIPE)
    small = recipe.scaled(train_events=3, val_events=1, epochs=2, particles=300)
    assert (small.simulation.train_events, small.simulation.val_events, small.simulation.particles) == (3, 1, 300)
    assert small.train.run.epochs == 2
    assert small.graph == recipe.graph and small.filter == recipe.filter and small.train.model == recipe.train.model
    fewer = recipe.scaled(train_events=3, val_events=1, filter_steps=7)
    assert fewer.filter.steps == 7 and replace(fewer.filter, steps=recipe.filter.steps) == recipe.filter


def _write(tmp_path: Path, change) -> Path:
    nested = yaml.safe_load(RECIPE.read_text())
    change(nested)
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(nested))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(datasets={}), "unknown sections ['datasets']"),
        (lambda d: d["simulation"].update(events=3), "unknown simulation settings ['events']"),
        (lambda d: d["simulation"].update(train_events=1), "simulation.train_events must be an integer of at least 2"),
        (lambda d: d["simulation"].update(val_seed=d["simulation"]["seed"]), "simulation.val_seed must differ"),
        (lambda d: d["graph"].update(node_features=["r", "rho"]), "unknown node features ['rho']"),
        (lambda d: d["graph"].update(phi_slope_max=-1.0), "GraphConfig.phi_slope_max must be a positive finite number"),
        (lambda d: d["filter"].update(efficiency=1.5), "filter.efficiency is out of range"),
        (lambda d: d["filter"].update(node_features="r"), "filter.node_features must be a list of distinct feature names"),
        (lambda d: d["filter"].update(node_features=["r", "pixel_depth"]), "filter.node_features ['pixel_depth'] are not in graph"),
        (lambda d: d["filter"].update(edge_features=["dphi", "eta"]), "filter.edge_features ['eta'] are not in graph"),
        (lambda d: d["model"].update(hiden=3), "unknown config key 'model.hiden'"),
        (lambda d: d["optim"].update(lr="fast"), "optim.lr must be a number"),
        (lambda d: d["tracks"].update(method="hough"), "tracks.method must be one of"),
        (lambda d: d["tracks"].update(threshold=1.0), "tracks.threshold must be a number in (0, 1)"),
        (lambda d: d.update(data={"train": "x"}), "unknown sections ['data']"),
    ],
)
def test_mistakes_are_one_line_naming_the_file(tmp_path, change, message):
    path = _write(tmp_path, change)
    with pytest.raises(DomainparError) as caught:
        load_recipe(path)
    text = str(caught.value)
    assert message in text and str(path) in text and "\n" not in text


def test_missing_or_malformed_file(tmp_path):
    with pytest.raises(DomainparError, match="recipe file not found"):
        load_recipe(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("simulation: [unclosed\n")
    with pytest.raises(DomainparError, match="expected a YAML recipe"):
        load_recipe(bad)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("3\n")
    with pytest.raises(DomainparError, match="expected a YAML mapping of sections"):
        load_recipe(scalar)

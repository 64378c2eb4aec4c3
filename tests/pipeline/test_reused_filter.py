"""A recipe run that prunes with a trained edge filter: only a filter its own settings train is taken."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from domainpar.data.dataset import build_dataset
from domainpar.data.graph_files import load_graph
from domainpar.errors import DomainparError
from domainpar.filter.edge_filter import EdgeFilter, FilterNet
from domainpar.pipeline import physics
from domainpar.pipeline.physics import reused_filter
from domainpar.pipeline.recipe import load_recipe
from domainpar.sim.config import SimulationConfig
from domainpar.sim.dataset import simulate_dataset

from fixtures import REPO

RECIPE = REPO / "examples" / "full_event.yaml"


def _filter_file(tmp_path, config, threshold=0.0):
    """A filter with the recipe's input width (2 x 3 positions + 13 edge features) saved as an earlier run would."""
    torch.manual_seed(0)
    net = FilterNet(2 * 3 + 13, config.hidden, config.layers)
    return EdgeFilter(net.eval(), threshold, None, None, config, {}).save(tmp_path / "filter.pt")


def test_a_filter_of_the_recipes_settings_is_taken(tmp_path):
    recipe = load_recipe(RECIPE)
    taken = reused_filter(_filter_file(tmp_path, recipe.filter, threshold=1.5), recipe)
    assert taken.threshold == 1.5 and taken.config == recipe.filter


@pytest.mark.parametrize("field, value", [("steps", 7), ("efficiency_pt1", 0.9), ("node_features", ("r", "z"))])
def test_a_filter_trained_otherwise_is_refused_naming_the_setting(tmp_path, field, value):
    recipe = load_recipe(RECIPE)
    path = _filter_file(tmp_path, replace(recipe.filter, **{field: value}))
    with pytest.raises(DomainparError, match=rf"filter\.pt: the edge filter must be trained with the recipe's filter\.{field} = "):
        reused_filter(path, recipe)


def test_a_recipe_without_filter_or_a_file_that_is_no_filter_is_refused(tmp_path):
    recipe = load_recipe(RECIPE)
    path = _filter_file(tmp_path, recipe.filter)
    with pytest.raises(DomainparError, match="the recipe has no filter section"):
        reused_filter(path, replace(recipe, filter=None))
    (tmp_path / "other.pt").write_bytes(b"not a filter")
    with pytest.raises(DomainparError, match="other.pt: expected a domainpar edge filter"):
        reused_filter(tmp_path / "other.pt", recipe)


def test_the_filter_stage_prunes_with_the_trained_filter_and_trains_none(tmp_path, monkeypatch):
    recipe = load_recipe(RECIPE)
    simulate_dataset(tmp_path / "events", 2, SimulationConfig(num_particles=100), seed=5, progress=False)
    build_dataset(tmp_path / "events", tmp_path / "graphs", recipe.graph, progress=False)
    trained = reused_filter(_filter_file(tmp_path, recipe.filter), recipe)

    def no_training(*args, **kwargs):
        raise AssertionError("the filter was trained again")

    monkeypatch.setattr(physics, "train_filter", no_training)
    graphs, record = physics._filter(recipe, {"train": tmp_path / "graphs"}, tmp_path / "run", lambda line: None, False, trained)
    for path in sorted(graphs["train"].glob("*.npz")):
        pruned = load_graph(path)
        original = load_graph(tmp_path / "graphs" / path.name)
        assert json.loads(pruned.build_config)["edge_filter"]["hash"] == trained.content_hash
        assert pruned.num_edges == int((trained.logits(original) >= trained.threshold).sum())
    assert record["threshold"] == trained.threshold
    assert (tmp_path / "run" / "filter.pt").is_file()


def test_a_wrong_filter_is_refused_before_anything_is_simulated(tmp_path, monkeypatch):
    recipe = load_recipe(RECIPE)
    path = _filter_file(tmp_path, replace(recipe.filter, steps=7))

    def no_simulation(*args, **kwargs):
        raise AssertionError("events were simulated before the filter was checked")

    monkeypatch.setattr(physics, "simulate_dataset", no_simulation)
    with pytest.raises(DomainparError, match=r"filter\.steps"):
        physics.prepare_graphs(recipe, tmp_path / "run", edge_filter=path, echo=lambda line: None)


def _arrays(path):
    with np.load(path, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def test_the_graphs_are_pruned_alike_in_one_process_or_two(tmp_path, monkeypatch):
    recipe = load_recipe(RECIPE)
    simulate_dataset(tmp_path / "events", 3, SimulationConfig(num_particles=100), seed=6, progress=False)
    build_dataset(tmp_path / "events", tmp_path / "graphs", recipe.graph, progress=False)
    trained = reused_filter(_filter_file(tmp_path, recipe.filter), recipe)
    runs = {}
    for workers in (1, 2):
        monkeypatch.setattr(physics, "_workers", lambda recipe, cores, n=workers: n)
        graphs, record = physics._filter(recipe, {"train": tmp_path / "graphs"}, tmp_path / f"run{workers}", lambda line: None, False, trained)
        runs[workers] = (sorted(graphs["train"].glob("*.npz")), record["graphs"]["train"])
    (one, one_records), (two, two_records) = runs[1], runs[2]
    assert [p.name for p in one] == [p.name for p in two] == sorted(p.name for p in (tmp_path / "graphs").glob("*.npz"))
    assert one_records == two_records and len(one_records) == 3
    for a, b in zip(one, two):
        left, right = _arrays(a), _arrays(b)
        assert left.keys() == right.keys()
        for key in left:
            np.testing.assert_array_equal(left[key], right[key], err_msg=f"{a.name}: {key}")
    assert not [p for p in (tmp_path / "run2" / "filtered" / "train").iterdir() if not p.name.endswith(".npz")]


def test_a_graph_the_filter_cannot_read_is_named(tmp_path, monkeypatch):
    recipe = load_recipe(RECIPE)
    simulate_dataset(tmp_path / "events", 2, SimulationConfig(num_particles=100), seed=7, progress=False)
    build_dataset(tmp_path / "events", tmp_path / "graphs", recipe.graph, progress=False)
    (tmp_path / "graphs" / "event000000009.npz").write_bytes(b"not a graph")
    trained = reused_filter(_filter_file(tmp_path, recipe.filter), recipe)
    monkeypatch.setattr(physics, "_workers", lambda recipe, cores: 2)
    with pytest.raises(DomainparError, match=r"^edge filter: 1 of 3 train graphs failed: event000000009\.npz "):
        physics._filter(recipe, {"train": tmp_path / "graphs"}, tmp_path / "run", lambda line: None, False, trained)

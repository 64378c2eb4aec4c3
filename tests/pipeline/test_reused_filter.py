"""A recipe run that prunes with a trained edge filter: only a filter its own settings train is taken."""

from __future__ import annotations

import json
import zipfile
from dataclasses import replace

import numpy as np
import pytest
import torch

from domainpar.data.dataset import build_dataset
from domainpar.data.graph_files import load_graph
from domainpar.errors import DomainparError
from domainpar.filter.edge_filter import EdgeFilter, FilterNet
from domainpar.pipeline import physics, pruning
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


def _prune(recipe, tmp_path, run, trained, graphs=("train",), sets=("train",), scored=None):
    """``physics._prune`` of the sets ``sets`` (raw events under tmp_path/events), those in ``graphs`` read back from
    tmp_path/graphs, the others built there; ``scored``: logits of graph files computed already."""
    sources = {kind: tmp_path / "events" for kind in sets}
    return physics._prune(recipe, sources, {kind: tmp_path / "graphs" for kind in graphs}, trained, scored or {},
                          tmp_path / run, lambda line: None, False)  # fmt: skip


def test_the_filter_stage_prunes_with_the_trained_filter_and_trains_none(tmp_path, monkeypatch):
    recipe = load_recipe(RECIPE)
    simulate_dataset(tmp_path / "events", 2, SimulationConfig(num_particles=100), seed=5, progress=False)
    build_dataset(tmp_path / "events", tmp_path / "graphs", recipe.graph, progress=False)
    trained = reused_filter(_filter_file(tmp_path, recipe.filter), recipe)

    def no_training(*args, **kwargs):
        raise AssertionError("the filter was trained again")

    monkeypatch.setattr(physics, "train_filter", no_training)
    graphs, built, filtered = _prune(recipe, tmp_path, "run", trained)
    assert built == {} and len(filtered["train"]) == 2
    for path in sorted(graphs["train"].glob("*.npz")):
        pruned = load_graph(path)
        original = load_graph(tmp_path / "graphs" / path.name)
        assert json.loads(pruned.build_config)["edge_filter"]["hash"] == trained.content_hash
        assert pruned.num_edges == int((trained.logits(original) >= trained.threshold).sum())
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


def _same_files(left_files, right_files):
    assert [p.name for p in left_files] == [p.name for p in right_files] and left_files
    for a, b in zip(left_files, right_files):
        left, right = _arrays(a), _arrays(b)
        assert left.keys() == right.keys()
        for key in left:
            np.testing.assert_array_equal(left[key], right[key], err_msg=f"{a.name}: {key}")
        assert a.read_bytes() == b.read_bytes(), a.name


def test_the_graphs_are_pruned_alike_in_one_process_or_two(tmp_path, monkeypatch):
    recipe = load_recipe(RECIPE)
    simulate_dataset(tmp_path / "events", 3, SimulationConfig(num_particles=100), seed=6, progress=False)
    build_dataset(tmp_path / "events", tmp_path / "graphs", recipe.graph, progress=False)
    trained = reused_filter(_filter_file(tmp_path, recipe.filter), recipe)
    runs = {}
    for workers in (1, 2):
        monkeypatch.setattr(physics, "_workers", lambda recipe, cores, n=workers: n)
        graphs, built, filtered = _prune(recipe, tmp_path, f"run{workers}", trained, sets=("train", "val"))
        runs[workers] = ({kind: sorted(graphs[kind].glob("*.npz")) for kind in graphs}, built, filtered)
    (one, one_built, one_filtered), (two, two_built, two_filtered) = runs[1], runs[2]
    assert [p.name for p in one["train"]] == sorted(p.name for p in (tmp_path / "graphs").glob("*.npz"))
    assert one_filtered == two_filtered and len(one_filtered["train"]) == len(one_filtered["val"]) == 3
    assert one_built == two_built and list(one_built) == ["val"]
    for kind in ("train", "val"):
        _same_files(one[kind], two[kind])
    assert not [p for p in (tmp_path / "run2" / "filtered" / "train").iterdir() if not p.name.endswith(".npz")]


def test_a_set_built_and_pruned_in_one_pass_is_the_set_built_whole_then_pruned(tmp_path):
    """The held-out and real sets are built and pruned in one pass, never written whole: the same files and
    records as building them whole, reading them back and pruning them."""
    recipe = load_recipe(RECIPE)
    simulate_dataset(tmp_path / "events", 3, SimulationConfig(num_particles=150), seed=8, progress=False)
    whole = [pruning.graph_record(stats) for stats in build_dataset(tmp_path / "events", tmp_path / "graphs", recipe.graph, progress=False)]
    trained = reused_filter(_filter_file(tmp_path, recipe.filter, threshold=-0.2), recipe)
    read_back, built_none, filtered_read = _prune(recipe, tmp_path, "read", trained, graphs=("val",), sets=("val",))
    in_one_pass, built, filtered_built = _prune(recipe, tmp_path, "built", trained, graphs=(), sets=("val",))
    assert built_none == {} and built == {"val": whole}
    assert filtered_read == filtered_built
    kept = [r["num_edges"] / r["num_edges_before"] for r in filtered_built["val"]]
    assert all(0 < k < 1 for k in kept), kept  # the filter prunes some edges and keeps some: the test can tell
    _same_files(sorted(read_back["val"].glob("*.npz")), sorted(in_one_pass["val"].glob("*.npz")))


def test_graphs_stored_uncompressed_are_the_same_graphs_and_prune_to_the_same_bytes(tmp_path):
    """The recipe's training graphs are written without zlib (read back by the filter, then pruned)."""
    recipe = load_recipe(RECIPE)
    simulate_dataset(tmp_path / "events", 2, SimulationConfig(num_particles=150), seed=11, progress=False)
    stored = build_dataset(tmp_path / "events", tmp_path / "graphs", recipe.graph, progress=False, compress=False)
    deflated = build_dataset(tmp_path / "events", tmp_path / "deflated", recipe.graph, progress=False)
    assert [s.num_edges for s in stored] == [s.num_edges for s in deflated]
    for path in sorted((tmp_path / "graphs").glob("*.npz")):
        other = tmp_path / "deflated" / path.name
        with zipfile.ZipFile(path) as plain, zipfile.ZipFile(other) as packed:
            assert {info.compress_type for info in plain.infolist()} == {zipfile.ZIP_STORED}
            assert zipfile.ZIP_DEFLATED in {info.compress_type for info in packed.infolist()}
        assert path.stat().st_size > other.stat().st_size
        left, right = _arrays(path), _arrays(other)
        assert left.keys() == right.keys()
        for key in left:
            np.testing.assert_array_equal(left[key], right[key], err_msg=key)
    trained = reused_filter(_filter_file(tmp_path, recipe.filter, threshold=-0.2), recipe)
    from_stored = _prune(recipe, tmp_path, "run_stored", trained)
    (tmp_path / "graphs").rename(tmp_path / "graphs_stored")
    (tmp_path / "deflated").rename(tmp_path / "graphs")
    from_deflated = _prune(recipe, tmp_path, "run_deflated", trained)
    assert from_stored[2] == from_deflated[2]
    _same_files(sorted(from_stored[0]["train"].glob("*.npz")), sorted(from_deflated[0]["train"].glob("*.npz")))


def test_a_graph_scored_already_is_pruned_by_its_logits_not_scored_again(tmp_path, monkeypatch):
    """The held-out training graphs were scored to choose the threshold: the pool prunes them by those logits."""
    recipe = load_recipe(RECIPE)
    simulate_dataset(tmp_path / "events", 2, SimulationConfig(num_particles=150), seed=10, progress=False)
    build_dataset(tmp_path / "events", tmp_path / "graphs", recipe.graph, progress=False)
    trained = reused_filter(_filter_file(tmp_path, recipe.filter, threshold=-0.2), recipe)
    first, second = sorted((tmp_path / "graphs").glob("*.npz"))
    scored = {str(first): trained.logits(load_graph(first))}
    monkeypatch.setattr(physics, "_workers", lambda recipe, cores: 1)  # the items in this process: seen scoring
    again = _prune(recipe, tmp_path, "again", trained)
    seen = []
    logits = EdgeFilter.logits
    monkeypatch.setattr(EdgeFilter, "logits", lambda self, graph, *a: seen.append(graph.event_id) or logits(self, graph, *a))
    reused, built, filtered = _prune(recipe, tmp_path, "reused", trained, scored=scored)
    assert seen == [load_graph(second).event_id]
    assert filtered == again[2] and all(0 < r["num_edges"] < r["num_edges_before"] for r in filtered["train"])
    _same_files(sorted(again[0]["train"].glob("*.npz")), sorted(reused["train"].glob("*.npz")))


def test_a_graph_the_filter_cannot_read_is_named(tmp_path, monkeypatch):
    recipe = load_recipe(RECIPE)
    simulate_dataset(tmp_path / "events", 2, SimulationConfig(num_particles=100), seed=7, progress=False)
    build_dataset(tmp_path / "events", tmp_path / "graphs", recipe.graph, progress=False)
    (tmp_path / "graphs" / "event000000009.npz").write_bytes(b"not a graph")
    trained = reused_filter(_filter_file(tmp_path, recipe.filter), recipe)
    monkeypatch.setattr(physics, "_workers", lambda recipe, cores: 2)
    with pytest.raises(DomainparError, match=r"^building and pruning the graphs: 1 of 3 graphs failed: train/event000000009\.npz "):
        _prune(recipe, tmp_path, "run", trained)


def test_an_event_that_cannot_be_built_is_named_with_its_set(tmp_path, monkeypatch):
    # The held-out and real sets are built in the pruning pool: a broken event there is named by set and event.
    import shutil

    recipe = load_recipe(RECIPE)
    simulate_dataset(tmp_path / "events", 2, SimulationConfig(num_particles=100), seed=9, progress=False)
    build_dataset(tmp_path / "events", tmp_path / "graphs", recipe.graph, progress=False)
    shutil.copytree(tmp_path / "events", tmp_path / "held")
    (hits,) = sorted((tmp_path / "held").glob("event000000001-hits.csv*"))
    hits.write_bytes(b"not,a,hits,file\n")
    trained = reused_filter(_filter_file(tmp_path, recipe.filter), recipe)
    monkeypatch.setattr(physics, "_workers", lambda recipe, cores: 2)
    sources = {"train": tmp_path / "events", "val": tmp_path / "held"}
    with pytest.raises(DomainparError, match=r"^building and pruning the graphs: 1 of 4 graphs failed: val/event000000001 .*hits"):
        physics._prune(recipe, sources, {"train": tmp_path / "graphs"}, trained, {}, tmp_path / "run", lambda line: None, False)

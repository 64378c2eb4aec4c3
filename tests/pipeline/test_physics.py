"""The recipe's data stages on a detector region: every event it touches is cut to ``graph.volumes``."""

from __future__ import annotations

import zipfile
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


def _methods(path) -> frozenset:
    with zipfile.ZipFile(path) as archive:
        return frozenset(info.compress_type for info in archive.infolist())


def test_with_a_filter_only_the_training_graphs_are_written_whole(tmp_path):
    from domainpar.data.graph_files import load_graph

    recipe = load_recipe(REPO / "examples" / "full_event.yaml")
    small = replace(recipe.simulation, train_events=3, val_events=2, particles=60, particles_spread=0.0)
    tiny = replace(recipe.filter, steps=5, hidden=4, layers=1, batch_edges=256, holdout_every=3)
    recipe = replace(recipe, simulation=small, filter=tiny)
    stale = tmp_path / "run" / "graphs" / "val" / "event000100001.npz"  # an earlier run's whole graph
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"stale")
    sources, graphs, record = prepare_graphs(recipe, tmp_path / "run", real=REPO / "tests" / "data" / "trackml",
                                             echo=lambda line: None, events_cache=tmp_path / "cache")  # fmt: skip
    kinds = ["train", "val", "val_pixel", "real"]
    assert list(sources) == list(graphs) == list(record["graphs"]) == list(record["filter"]["graphs"]) == kinds
    assert sorted(p.name for p in (tmp_path / "run" / "graphs").iterdir()) == ["train"]
    assert list(record["timings"]) == ["simulate", "build", "filter", "build_and_prune"]
    # The graphs the filter reads back are stored as they are; the GNN's, kept for training, are deflated.
    assert {_methods(path) for path in (tmp_path / "run" / "graphs" / "train").glob("*.npz")} == {frozenset({zipfile.ZIP_STORED})}
    assert all(zipfile.ZIP_DEFLATED in _methods(path) for path in graphs["train"].glob("*.npz"))
    for kind in kinds:
        files = sorted(graphs[kind].glob("*.npz"))
        assert len(files) == len(record["graphs"][kind]) == len(record["filter"]["graphs"][kind]) >= 1, kind
        for path, built, pruned in zip(files, record["graphs"][kind], record["filter"]["graphs"][kind]):
            graph = load_graph(path)
            assert graph.num_edges == pruned["num_edges"] and pruned["num_edges_before"] == built["num_edges"], path
            assert graph.event_id == pruned["event_id"]


def test_with_a_trained_filter_every_set_is_built_and_pruned_in_one_pass(tmp_path):
    from domainpar.data.graph_files import load_graph
    from domainpar.filter.edge_filter import EdgeFilter, FilterNet

    recipe = load_recipe(REPO / "examples" / "full_event.yaml")
    small = replace(recipe.simulation, train_events=2, val_events=1, particles=60, particles_spread=0.0)
    recipe = replace(recipe, simulation=small)
    torch = __import__("torch")
    torch.manual_seed(0)
    net = FilterNet(2 * 3 + 13, recipe.filter.hidden, recipe.filter.layers).eval()
    path = EdgeFilter(net, -0.2, None, None, recipe.filter, {}).save(tmp_path / "filter.pt")
    sources, graphs, record = prepare_graphs(recipe, tmp_path / "run", echo=lambda line: None,
                                             events_cache=tmp_path / "cache", edge_filter=path)  # fmt: skip
    assert list(record["timings"]) == ["simulate", "build_and_prune"]
    assert not (tmp_path / "run" / "graphs").exists() or not any((tmp_path / "run" / "graphs").iterdir())
    kept, before = 0, 0
    for kind in ("train", "val", "val_pixel"):
        files = sorted(graphs[kind].glob("*.npz"))
        assert len(files) == len(record["graphs"][kind]) == len(record["filter"]["graphs"][kind]) >= 1, kind
        for file, built, pruned in zip(files, record["graphs"][kind], record["filter"]["graphs"][kind]):
            graph = load_graph(file)
            assert graph.num_edges == pruned["num_edges"] and pruned["num_edges_before"] == built["num_edges"], file
            kept, before = kept + graph.num_edges, before + built["num_edges"]
    assert 0 < kept < before  # the graphs written are the built ones, pruned

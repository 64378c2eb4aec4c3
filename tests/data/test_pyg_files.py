"""PyG graph files of the field's tools: round trip, acorn and Exa.TrkX layouts, hostile pickles, missing fields."""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from domainpar.data.features import build_description
from domainpar.data.graph import GraphConfig, build_event_graph
from domainpar.data.graph_files import graph_files, load_graph, read_graph_description
from domainpar.data.pyg_files import load_pyg_file, save_pyg_graph
from domainpar.errors import DomainparError
from fixtures import EVENT1

FIELDS = ("x", "pos", "hit_id", "layer", "edge_index", "edge_attr", "y", "particle_id", "particle_pt")


@pytest.fixture(scope="module")
def real_graph():
    graph, _ = build_event_graph(EVENT1, GraphConfig())
    return graph


def test_round_trip_of_a_real_graph(real_graph, tmp_path):
    description = build_description(GraphConfig())
    path = save_pyg_graph(real_graph, tmp_path / "event000000001.pyg", description)
    loaded = load_graph(path)
    for name in FIELDS:
        ours, theirs = getattr(real_graph, name), getattr(loaded, name)
        assert theirs.dtype == ours.dtype and np.array_equal(theirs, ours), name
    assert loaded.event_id == 1
    stored = read_graph_description(path)
    assert {k: v for k, v in stored.items() if k != "source_fields"} == description
    # The acorn fields are there too: true segments with their edge, per-track-edge truth.
    data = torch.load(path, weights_only=False)
    assert data.track_edges.shape[0] == 2 and data.particle_id.shape == data.truth_map.shape
    found = data.truth_map >= 0
    assert data.y[data.truth_map[found]].all()  # every true segment found in the graph is a labelled edge
    assert data.x.shape == (real_graph.num_nodes,)  # acorn's x is the hit's x coordinate
    np.testing.assert_allclose(data.r.numpy(), np.hypot(real_graph.pos[:, 0], real_graph.pos[:, 1]), rtol=1e-6)


def _acorn_fields(graph, prefixed: bool) -> dict:
    """What an acorn graph-construction stage stores for an event: raw hit fields, truth per track edge."""
    pos = graph.pos.astype(np.float64)
    r, phi, z = np.hypot(pos[:, 0], pos[:, 1]), np.arctan2(pos[:, 1], pos[:, 0]), pos[:, 2]
    true = np.flatnonzero(graph.y > 0.5)
    track_edges = graph.edge_index[:, true]
    fields = {
        "hit_id": torch.from_numpy(graph.hit_id),
        "x": torch.from_numpy(pos[:, 0]).float(),
        "r": torch.from_numpy(r).float(),
        "phi": torch.from_numpy(phi).float(),
        "z": torch.from_numpy(z).float(),
        "edge_index": torch.from_numpy(graph.edge_index),
        "y": torch.from_numpy(graph.y > 0.5),
        "track_edges": torch.from_numpy(track_edges),
        "particle_id": torch.from_numpy(graph.particle_id[track_edges[0]]),
        "pt": torch.from_numpy(graph.particle_pt[track_edges[0]]),
        "truth_map": torch.from_numpy(true),
        "event_id": "000000001",
    }
    if prefixed:
        rename = {"x": "hit_x", "r": "hit_r", "phi": "hit_phi", "z": "hit_z", "y": "edge_y",
                  "particle_id": "track_particle_id", "pt": "track_particle_pt", "truth_map": "track_to_edge_map"}  # fmt: skip
        fields = {rename.get(k, k): v for k, v in fields.items()}
    return fields


@pytest.mark.parametrize("prefixed", [False, True], ids=["acorn", "acorn-prefixed"])
def test_acorn_layout(real_graph, tmp_path, prefixed):
    from torch_geometric.data import Data

    path = tmp_path / "event000000001-graph.pyg"
    torch.save(Data(**_acorn_fields(real_graph, prefixed)), path)
    loaded = load_pyg_file(path)
    graph = loaded.graph
    # Features are rebuilt with the documented scaling (r/1000, phi/pi, z/1000), edges get domainpar's edge features.
    np.testing.assert_allclose(graph.x, real_graph.x, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(graph.edge_attr, real_graph.edge_attr, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(graph.pos, real_graph.pos, atol=1e-3)
    assert np.array_equal(graph.y, real_graph.y) and np.array_equal(graph.hit_id, real_graph.hit_id)
    # Per-hit truth from the track edges: every hit of a true segment gets its particle.
    on_track = np.zeros(graph.num_nodes, bool)
    on_track[real_graph.edge_index[:, real_graph.y > 0.5].ravel()] = True
    assert np.array_equal(graph.particle_id[on_track], real_graph.particle_id[on_track])
    assert (graph.particle_id[~on_track] == 0).all()
    assert np.array_equal(graph.particle_pt[on_track], real_graph.particle_pt[on_track])
    assert graph.event_id == 1
    d = loaded.description
    assert [f["name"] for f in d["node_features"]] == ["r", "phi", "z"] and d["node_features"][1]["scale"] == math.pi
    assert [f["name"] for f in d["edge_features"]] == ["dr", "dphi", "dz", "dR"]
    assert d["source_fields"]["x"] == "r,phi,z" and d["source_fields"]["edge_attr"] == "computed from r,phi,z"


def test_exatrkx_layout_and_a_lightning_config(tmp_path, monkeypatch):
    """Exa.TrkX: 2-D x as stored, hid, pid, pt per hit, e_radius; acorn/Lightning's AttributeDict config loads as data."""
    from torch_geometric.data import Data

    rng = np.random.default_rng(0)
    x = rng.standard_normal((50, 3)).astype(np.float32)
    edges = rng.integers(0, 50, (2, 120))
    # A class pickled under Lightning's name, which is not installed here: only our data-only stand-in may load it.
    module = types.ModuleType("lightning_fabric.utilities.data")

    class AttributeDict(dict):
        pass

    AttributeDict.__module__ = module.__name__
    AttributeDict.__qualname__ = "AttributeDict"
    module.AttributeDict = AttributeDict
    for name in ("lightning_fabric", "lightning_fabric.utilities", "lightning_fabric.utilities.data"):
        monkeypatch.setitem(sys.modules, name, module)
    data = Data(x=torch.from_numpy(x), hid=torch.arange(7, 57), pid=torch.from_numpy(rng.integers(0, 5, 50)),
                pt=torch.rand(50), e_radius=torch.from_numpy(edges), y=torch.from_numpy(rng.random(120) < 0.3),
                layers=torch.from_numpy(rng.integers(0, 10, 50)), config=[AttributeDict(node_scales=[3000, 3.14, 400])])  # fmt: skip
    path = tmp_path / "1000"
    torch.save(data, path)
    for name in ("lightning_fabric", "lightning_fabric.utilities", "lightning_fabric.utilities.data"):
        monkeypatch.delitem(sys.modules, name)
    loaded = load_pyg_file(path)
    graph = loaded.graph
    assert np.array_equal(graph.x, x) and np.array_equal(graph.edge_index, edges) and graph.event_id == 1000
    assert np.array_equal(graph.hit_id, np.arange(7, 57)) and graph.edge_attr.shape == (120, 0)
    assert (graph.pos == 0).all() and loaded.description["source_fields"]["pos"].startswith("none")
    assert loaded.description["cuts"] == {"config": [{"node_scales": [3000, 3.14, 400]}]}
    assert [f["name"] for f in loaded.description["node_features"]] == ["x[0]", "x[1]", "x[2]"]
    assert graph_files(tmp_path) == [path]


def test_a_batch_file_loads_as_its_graph(real_graph, tmp_path):
    """acorn's inference stages save PyG batches (a dynamically created DataBatch class)."""
    from torch_geometric.data import Batch

    single = tmp_path / "single.pyg"
    save_pyg_graph(real_graph, single, build_description(GraphConfig()))
    batch = Batch.from_data_list([torch.load(single, weights_only=False)])
    torch.save(batch, tmp_path / "event000000001.pyg")
    loaded = load_graph(tmp_path / "event000000001.pyg")
    for name in FIELDS:
        assert np.array_equal(getattr(loaded, name), getattr(real_graph, name)), name


class _CreatesAFile:
    """Unpickling this calls open(path, "w"): a stand-in for any code a hostile file would run."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.parametrize("where", ["whole-file", "inside-data"])
def test_a_pickle_holding_an_arbitrary_object_is_refused_without_running(where, tmp_path, capsys):
    from torch_geometric.data import Data

    from domainpar.cli.main import main

    marker = tmp_path / "pwned"
    payload = _CreatesAFile(marker)
    (tmp_path / "data").mkdir()
    hostile = tmp_path / "data" / "event000000001.pyg"
    if where == "whole-file":
        torch.save(payload, hostile)
    else:
        torch.save(Data(x=torch.zeros(3, 3), edge_index=torch.zeros(2, 1, dtype=torch.long), evil=payload), hostile)
    assert not marker.exists()
    with pytest.raises(DomainparError, match=r"event000000001.pyg: refused to load as a PyG graph: it holds a pickled (io|builtins).open"):
        load_graph(hostile)
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "run"), "--mode", "single", "--no-progress"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "refused to load as a PyG graph" in err, err
    assert not marker.exists() and not (tmp_path / "run" / "graphs").exists()
    # The payload does work, so the test can fail: an unrestricted unpickler runs it.
    torch.load(hostile, weights_only=False)
    assert marker.exists()


def test_missing_fields_are_named(tmp_path):
    from torch_geometric.data import Data

    cases = {
        "no_edges.pyg": (Data(x=torch.zeros(4, 3), hit_id=torch.arange(4)), r"missing edges: expected edge_index \(2, E\)"),
        "no_nodes.pyg": (Data(edge_index=torch.zeros(2, 3, dtype=torch.long)), r"missing nodes: expected hit_id or hid"),
        "no_features.pyg": (
            Data(hit_id=torch.arange(4), edge_index=torch.zeros(2, 3, dtype=torch.long)),
            r"missing node features: expected hit_features \(N, F\), x \(N, F\), or r, phi, z \(4,\)",
        ),
        "bad_edges.pyg": (
            Data(x=torch.zeros(4, 3), edge_index=torch.tensor([[0, 1], [2, 9]]), event_id=7),
            r"edge_index must be within \[0, 4\) \(got values in \[0, 9\]\)",
        ),
        "nan.pyg": (Data(x=torch.full((4, 3), float("nan")), edge_index=torch.zeros(2, 1, dtype=torch.long), event_id=7), r"field x must be finite"),
        "no_id.pyg": (Data(x=torch.zeros(4, 3), edge_index=torch.zeros(2, 1, dtype=torch.long)), r"missing event id: expected an event_id field or digits in the file name"),
        "list.pyg": ([1, 2, 3], r"expected a torch_geometric Data object \(or a dict of tensors\), got list"),
        "float_ids.pyg": (
            Data(x=torch.zeros(4, 3), hit_id=torch.tensor([1.0, 2.5, 3.0, 4.0]), edge_index=torch.zeros(2, 1, dtype=torch.long), event_id=7),
            r"field hit_id must hold integers \(got non-integral or inexact float values\)",
        ),
    }
    for name, (data, message) in cases.items():
        torch.save(data, tmp_path / name)
        with pytest.raises(DomainparError, match=message) as info:
            load_graph(tmp_path / name)
        assert str(info.value).startswith(str(tmp_path / name)) and "\n" not in str(info.value)
    (tmp_path / "text.pyg").write_text("not a torch file")
    with pytest.raises(DomainparError, match=r"text.pyg: refused to load as a PyG graph: not a readable torch file"):
        load_graph(tmp_path / "text.pyg")


def test_build_writes_pyg_files_their_tools_and_ours_read(real_graph, tmp_path, capsys):
    from domainpar.cli.main import main
    from domainpar.data.trackml import load_event

    main(["build", "--input", str(EVENT1.parent), "--out", str(tmp_path / "pyg"), "--format", "pyg", "--quiet"])
    assert "wrote 1 graphs" in capsys.readouterr().out
    (path,) = graph_files(tmp_path / "pyg")
    assert path.name == "event000000001.pyg"
    loaded = load_graph(path)
    for name in FIELDS:
        assert np.array_equal(getattr(loaded, name), getattr(real_graph, name)), name
    assert read_graph_description(path)["cuts"] == build_description(GraphConfig())["cuts"]
    # With the particles' vertices the true segments are the labels' segments: every labelled edge is one.
    data = torch.load(path, weights_only=False)
    assert int((data.truth_map >= 0).sum()) == int(data.y.sum())
    (truth,) = load_event(EVENT1, parts=("truth",))
    assert set(data.hit_id.tolist()) == set(truth["hit_id"].tolist())

"""A dataset of acorn-style PyG graph files trains domain-parallel with the gradients of one process.

Two checks: the exactness check itself (logits, loss and every parameter
gradient of 2 spawned ranks against one process, float64, METIS and
geometric parts, with and without edge features) on graphs read from PyG
files; and whole training runs on the file directory — single process vs a
2-rank domain group, without gradient clipping so that a wrong gradient
cannot hide — equal step by step in loss and gradient norm, then exported.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fixtures import synthetic_graph

TIGHT = 1e-10


def _write_acorn_dataset(directory: Path, num_events: int) -> list[Path]:
    """Graphs in acorn's on-disk layout: raw r/phi/z per hit, edges, bool labels, truth per track edge."""
    from torch_geometric.data import Data

    directory.mkdir(parents=True)
    paths = []
    for i in range(num_events):
        graph = synthetic_graph(100 + i, seed=10 + i, num_nodes=80 + 10 * i, num_candidates=330 + 40 * i)
        pos = graph.pos.astype(np.float64)
        true = np.flatnonzero(graph.y > 0.5)
        data = Data(
            hit_id=torch.from_numpy(graph.hit_id),
            x=torch.from_numpy(pos[:, 0]).float(),
            r=torch.from_numpy(np.hypot(pos[:, 0], pos[:, 1])).float(),
            phi=torch.from_numpy(np.arctan2(pos[:, 1], pos[:, 0])).float(),
            z=torch.from_numpy(pos[:, 2]).float(),
            edge_index=torch.from_numpy(graph.edge_index),
            y=torch.from_numpy(graph.y > 0.5),
            track_edges=torch.from_numpy(graph.edge_index[:, true]),
            particle_id=torch.arange(1, true.size + 1),
            event_id=f"{100 + i:09d}",
        )
        paths.append(directory / f"event{100 + i:09d}.pyg")
        torch.save(data, paths[-1])
    return paths


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("acorn") / "trainset"
    _write_acorn_dataset(directory, 3)
    return directory


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_partitioned_gradients_equal_one_process_on_pyg_graphs(dataset):
    from domainpar.data.graph_files import graph_files, load_graph
    from domainpar.launch.ranks import spawn
    from domainpar.model.config import ModelConfig
    from domainpar.partition import partition_graph
    from domainpar.verification.cases import VerifyCase
    from domainpar.verification.worker import verify_worker

    cases = []
    for path in graph_files(dataset)[:2]:
        graph = load_graph(path)
        for method in ("metis", "geometric"):
            owner = partition_graph(graph, 2, method, seed=0).owner
            for use_edge_features in (True, False):
                config = ModelConfig(node_features=3, edge_features=4, hidden=8, num_iterations=2, use_edge_features=use_edge_features)
                name = f"{path.name}/{method}/edges={int(use_edge_features)}"
                cases.append(VerifyCase(name, graph, owner, config, dtype="float64", pos_weight=2.0))
    results = spawn(verify_worker, 2, args=(cases,), timeout_s=240, backend="gloo", num_threads=1)[0]
    assert len(results) == len(cases) == 8
    for result in results:
        assert result.passed, result.to_dict()
        assert result.max_rel_err_grad <= TIGHT and result.max_abs_err_logits <= TIGHT
        assert sum(result.num_halo) > 0  # the parts really exchange halo rows


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_training_on_a_pyg_directory_domain_equals_single_and_exports(dataset, tmp_path):
    from domainpar.export.source import load_export_source
    from domainpar.export.writer import export_model
    from domainpar.train.config import load_config
    from domainpar.train.run import train

    base = {
        "data.train": str(dataset), "model.hidden": 8, "model.num_iterations": 2, "run.epochs": 2,
        "optim.batch_events": 1, "optim.lr": 0.01, "optim.clip": 0.0, "optim.pos_weight": 2.0,
        "run.precision": "fp64", "run.progress": False, "run.curves": False, "parallel.threads": 1,
    }  # fmt: skip
    single = train(load_config(None, {**base, "run.out": str(tmp_path / "single"), "parallel.mode": "single"}))
    domain = train(load_config(None, {**base, "run.out": str(tmp_path / "domain"), "parallel.mode": "domain",
                                      "parallel.ranks": 2, "data.method": "geometric"}))  # fmt: skip
    assert single["steps"] == domain["steps"] == 6
    steps = [[json.loads(line) for line in open(Path(run["out"]) / "steps.jsonl")] for run in (single, domain)]
    np.testing.assert_allclose([s["loss"] for s in steps[1]], [s["loss"] for s in steps[0]], rtol=TIGHT, atol=0)
    np.testing.assert_allclose([s["grad_norm"] for s in steps[1]], [s["grad_norm"] for s in steps[0]], rtol=TIGHT, atol=0)
    assert steps[0][0]["loss"] != steps[0][-1]["loss"]
    ours = torch.load(domain["model"], weights_only=True)["model"]
    theirs = torch.load(single["model"], weights_only=True)["model"]
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], rtol=TIGHT, atol=TIGHT, msg=name)
    assert domain["final"]["halo_bytes"] > 0
    # The files were converted once into the run's graph directory; the model knows what its inputs were.
    assert sorted(p.name for p in (tmp_path / "single" / "graphs" / "train").iterdir()) == [
        f"event{100 + i:09d}.npz" for i in range(3)
    ]
    source = load_export_source(single["model"])
    sidecar = export_model(source, "torchscript", tmp_path / "acorn_model.pt").sidecar
    assert sidecar["graph"]["builder"] == "pyg file"
    assert [f["name"] for f in sidecar["node_features"]] == ["r", "phi", "z"]
    assert [f["name"] for f in sidecar["edge_features"]] == ["dr", "dphi", "dz", "dR"]

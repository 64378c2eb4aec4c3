"""Choosing the model of a run: graphs without edge features need no flag, a model that cannot be built is refused
before any rank starts, and the checkpoint records the model's name and every setting so loaders rebuild it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from domainpar.data.event_graph import save_graph
from domainpar.errors import DomainparError
from domainpar.inference.model_io import load_model
from domainpar.model.interaction_gnn import InteractionGNN
from domainpar.train.config import load_config
from domainpar.train.run import train
from fixtures import synthetic_graph


def _graphs(directory, edge_features: bool = True):
    for i in range(2):
        graph = synthetic_graph(i, i, num_nodes=60, num_candidates=240)
        if not edge_features:  # the Exa.TrkX layout: x and edge_index, no edge features
            graph = dataclasses.replace(graph, edge_attr=np.zeros((graph.num_edges, 0), np.float32), edge_features=())
        save_graph(graph, directory / f"event{i:09d}.npz")
    return directory


def _config(data, out, **changes):
    # A constant schedule: the resume below adds an epoch, which a cosine schedule's length refuses.
    base = {"data.train": str(data), "run.out": str(out), "parallel.mode": "single", "model.hidden": 8,
            "model.num_iterations": 2, "optim.schedule": "constant", "run.progress": False, "run.curves": False}  # fmt: skip
    return load_config(None, {**base, **changes})


def test_graphs_without_edge_features_train_without_a_flag(tmp_path, capfd):
    data = _graphs(tmp_path / "graphs", edge_features=False)
    summary = train(_config(data, tmp_path / "run"))
    err = capfd.readouterr().err
    assert "have no edge features: the interaction_network model reads x and edge_index only" in err
    assert err.count("have no edge features") == 1
    loaded = load_model(summary["model"])
    assert loaded.model_config.edge_features == 0 and loaded.model_config.edge_inputs == 0


def test_a_model_that_cannot_be_built_is_refused_before_the_ranks_start(tmp_path):
    data = _graphs(tmp_path / "graphs", edge_features=False)
    config = _config(data, tmp_path / "run", **{"parallel.mode": "domain", "parallel.ranks": 2, "model.name": "pyg_gnn",
                                                 "model.options": ("layer=gine",)})  # fmt: skip
    with pytest.raises(DomainparError, match=r"^model\.options\.layer gine reads edge features; the graphs have none"):
        train(config)
    assert not (tmp_path / "run" / "config.yaml").exists() and not (tmp_path / "run" / "checkpoints").exists()


def test_the_checkpoint_records_the_model_and_loaders_rebuild_it(tmp_path):
    data = _graphs(tmp_path / "graphs")
    options = ("aggregation=[sum, max]", "undirected=true")
    summary = train(_config(data, tmp_path / "run", **{"model.name": "interaction_gnn", "model.options": options,
                                                        "model.recurrent": False}))  # fmt: skip
    state = torch.load(summary["model"], weights_only=True)
    assert state["model_config"]["name"] == "interaction_gnn"
    assert state["model_config"]["options"] == {"aggregation": ["sum", "max"], "messages": "in_out", "undirected": True,
                                                "residual": False, "output_layers": 0}  # fmt: skip
    loaded = load_model(summary["model"])
    assert isinstance(loaded.model, InteractionGNN) and loaded.model.options.undirected and not loaded.model_config.recurrent
    # A resume rebuilds the same model from the run's config and continues.
    resumed = train(_config(data, tmp_path / "run", **{"model.name": "interaction_gnn", "model.options": options,
                                                        "model.recurrent": False, "run.epochs": 2, "run.resume": True}))  # fmt: skip
    assert resumed["steps"] == 2 * summary["steps"]

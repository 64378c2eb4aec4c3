"""examples/run_exported.py: the exported pipeline run from raw CSVs reproduces the training graph, its features
(every named feature, cluster features included: the former script raised KeyError 'cluster_u') and the logits."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest
import torch

from fixtures import EVENT1, REPO


@pytest.mark.parametrize("node_features", [("r", "phi", "z"), ("r", "phi", "z", "cell_count", "cell_charge", "cluster_u", "cluster_v")])
def test_run_exported_runs_the_pipeline_from_raw_csvs(node_features, tmp_path):
    from domainpar.data.graph_files import load_graph, read_graph_description
    from domainpar.data.graph import GraphConfig
    from domainpar.data.dataset import build_dataset
    from domainpar.export.runtime import load_exported
    from domainpar.export.source import load_export_source
    from domainpar.export.writer import export_model
    from domainpar.model.config import ModelConfig
    from domainpar.model.registry import build_model
    from domainpar.train.checkpoint import CHECKPOINT_FORMAT_VERSION, write_checkpoint

    config = GraphConfig(node_features=node_features, edge_features=("dr", "dphi", "dz", "dR", "phi_slope", "curvature"))
    build_dataset(EVENT1.parent, tmp_path / "graphs", config, progress=False)
    graph_path = tmp_path / "graphs" / "event000000001.npz"
    torch.manual_seed(0)
    model_config = ModelConfig(node_features=len(node_features), edge_features=6, hidden=8, num_iterations=2)
    model = build_model(model_config)
    state = {"format_version": CHECKPOINT_FORMAT_VERSION, "model": model.state_dict(), "model_config": model_config.to_dict(),
             "data": read_graph_description(graph_path)}  # fmt: skip
    write_checkpoint(state, tmp_path / "model.pt")
    exported = export_model(load_export_source(tmp_path / "model.pt"), "torchscript", tmp_path / "deployed.pt").model_path

    sys.path.insert(0, str(REPO / "examples"))
    try:
        example = importlib.import_module("run_exported")
    finally:
        sys.path.remove(str(REPO / "examples"))
    result = example.main(["--model", str(exported), "--event", str(EVENT1), "--graph", str(graph_path)])
    assert result["same_edges"] and result["max_diff_x"] == 0.0 and result["max_diff_edge_attr"] == 0.0
    graph = load_graph(graph_path)
    reference = load_exported(exported).logits(graph.x, graph.edge_index, graph.edge_attr)
    assert np.max(np.abs(result["logits"] - reference)) <= 1e-6
    assert result["num_edges"] == graph.num_edges
    assert result["edges_kept"] == int((reference > 0.0).sum())  # threshold 0.5 (no run config): logit > 0

"""The trained pipeline deploys as trained: graphs pruned by an edge filter export with that filter, and the exported
pipeline run from raw CSVs scores the real event like the checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from domainpar.data.dataset import build_dataset
from domainpar.data.graph import GraphConfig
from domainpar.data.graph_files import load_graph, read_graph_description
from domainpar.model.config import ModelConfig
from domainpar.model.registry import build_model, check_config
from domainpar.train.checkpoint import CHECKPOINT_FORMAT_VERSION, write_checkpoint
from fixtures import PRUNED_GRAPH as GRAPH
from fixtures import TRACKML_DIR, edge_filter_of, pruned_recipe_run


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict[str, Path]:
    return pruned_recipe_run(tmp_path_factory.mktemp("recipe"))


def test_pruned_graph_files_describe_themselves(run):
    """A graph saved without a description (the recipes' pruned graphs) gets the one its names and build record give."""
    description = read_graph_description(run["root"] / "filtered" / "event000000001.npz")
    assert [f["name"] for f in description["node_features"]] == list(GRAPH.node_features)
    assert description["cuts"]["phi_slope_max"] == 0.002
    assert description["cuts"]["edge_filter"]["hash"]  # the filter that pruned it


@pytest.mark.parametrize("fmt, suffix", [("onnx", ".onnx"), ("torchscript", ".pt")])
def test_export_writes_the_filter_and_every_stage(run, fmt, suffix, tmp_path, capsys):
    from domainpar.cli.main import main

    out = tmp_path / f"model{suffix}"
    # The filter is found beside the run by the hash the training graphs record; a checkpoint written before
    # checkpoints recorded 'data' exports from its 'graph' record.
    main(["export", "--checkpoint", str(run["before"]), "--format", fmt, "--out", str(out)])
    assert "edge filter:" in capsys.readouterr().out
    sidecar = json.loads(out.with_name(out.name + ".json").read_text())
    assert sidecar["version"] == 3
    assert [stage["stage"] for stage in sidecar["stages"]] == ["graph", "edge_filter", "edge_classifier"]
    graph, edge_filter, classifier = sidecar["stages"]
    assert graph["cuts"]["phi_slope_max"] == 0.002 and "edge_filter" not in graph["cuts"]
    assert graph["node_features"] == list(GRAPH.node_features)
    assert edge_filter["file"] == f"model.filter{suffix}" and (tmp_path / edge_filter["file"]).is_file()
    assert edge_filter["reads"] == {"node_features": ["r", "phi", "z"], "edge_features": list(GRAPH.edge_features)}
    assert edge_filter["verification"]["max_abs_logit_diff"] <= 1e-4
    assert classifier["file"] == out.name and classifier["threshold"] == 0.5


def test_exported_pipeline_on_raw_events_equals_the_checkpoint(run, tmp_path):
    """evaluate --model (graph stage → filter file → model file) on real event 1's raw CSVs gives the figures of
    evaluate --checkpoint --filter; on unpruned graph files the exported filter prunes them the same way."""
    from domainpar.inference import EvaluateConfig, evaluate

    reference = evaluate(EvaluateConfig(checkpoint=run["checkpoint"], data=run["events"], edge_filter=run["filter"],
                                        progress=False)).summary  # fmt: skip
    assert reference["events"][0]["num_edges"] < load_graph(run["root"] / "graphs" / "event000000001.npz").num_edges
    from domainpar.cli.main import main

    for fmt, suffix in (("onnx", ".onnx"), ("torchscript", ".pt")):
        out = tmp_path / f"model{suffix}"
        main(["export", "--checkpoint", str(run["checkpoint"]), "--format", fmt, "--out", str(out), "--filter", str(run["filter"])])
        for data in (run["events"], run["root"] / "graphs"):
            summary = evaluate(EvaluateConfig(checkpoint=None, model=out, data=data, events_dir=run["events"], progress=False)).summary
            assert summary["events"][0]["num_edges"] == reference["events"][0]["num_edges"], (fmt, data)
            for key in ("auc", "trackml_score", "efficiency", "purity"):
                assert abs(summary[key] - reference[key]) <= 1e-4, (fmt, data, key, summary[key], reference[key])


def test_the_checkpoint_and_the_pipeline_refuse_graphs_pruned_otherwise(run, tmp_path):
    from domainpar.errors import DomainparError
    from domainpar.inference import EvaluateConfig, evaluate

    with pytest.raises(DomainparError, match=r"event000000001.npz: the checkpoint's model was trained on graphs pruned by "
                                             r"edge filter \w+ and this graph is not pruned; pass that filter with --filter"):
        evaluate(EvaluateConfig(checkpoint=run["checkpoint"], data=run["root"] / "graphs", progress=False))
    # With --filter, unpruned graph files are pruned like the training graphs.
    pruned = evaluate(EvaluateConfig(checkpoint=run["checkpoint"], data=run["root"] / "graphs", edge_filter=run["filter"],
                                     events_dir=run["events"], progress=False)).summary  # fmt: skip
    assert pruned["events"][0]["num_edges"] == load_graph(run["root"] / "filtered" / "event000000001.npz").num_edges


def test_export_filter_refusals(run, tmp_path, capsys):
    from domainpar.cli.main import main

    lonely = tmp_path / "elsewhere" / "model.pt"
    lonely.parent.mkdir()
    lonely.write_bytes(run["checkpoint"].read_bytes())
    base = ["export", "--format", "onnx", "--out", str(tmp_path / "m.onnx")]
    with pytest.raises(SystemExit) as info:
        main(base + ["--checkpoint", str(lonely)])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1
    assert "was trained on graphs pruned by an edge filter (hash" in err and "pass that filter with --filter" in err
    other = edge_filter_of(load_graph(run["root"] / "graphs" / "event000000001.npz"))
    other.threshold += 0.5
    other.save(tmp_path / "other.pt")
    with pytest.raises(SystemExit):
        main(base + ["--checkpoint", str(lonely), "--filter", str(tmp_path / "other.pt")])
    assert "--filter: expected the edge filter the model's training graphs were pruned with" in capsys.readouterr().err
    assert not (tmp_path / "m.onnx").exists() and not (tmp_path / "m.filter.onnx").exists()


def test_models_with_a_deploy_method_export_and_others_are_refused(tmp_path):
    """The field's InteractionGNN exports through its deploy(); a PyG stack, which has none, is refused in one line."""
    from domainpar.data.features import build_description
    from domainpar.errors import DomainparError
    from domainpar.export.source import load_export_source
    from domainpar.export.writer import export_model

    description = build_description(GraphConfig())
    for name, options in (("interaction_gnn", {"aggregation": ["sum", "max"], "undirected": True}), ("pyg_gnn", {})):
        config = check_config(ModelConfig(name=name, hidden=8, num_iterations=2, options=options))
        state = {"format_version": CHECKPOINT_FORMAT_VERSION, "step": 1, "model": build_model(config).state_dict(),
                 "model_config": config.to_dict(), "data": description}  # fmt: skip
        write_checkpoint(state, tmp_path / f"{name}.pt")
        source = load_export_source(tmp_path / f"{name}.pt")
        if name == "pyg_gnn":
            with pytest.raises(DomainparError, match=r"model pyg_gnn has no deploy-time module .* cannot be exported"):
                export_model(source, "onnx", tmp_path / f"{name}.onnx")
            continue
        for fmt, suffix in (("onnx", ".onnx"), ("torchscript", ".pt")):
            sidecar = export_model(source, fmt, tmp_path / f"{name}-out{suffix}").sidecar
            assert sidecar["verification"]["max_abs_logit_diff"] <= 1e-4 and sidecar["model_config"]["name"] == name


def test_scores_of_a_pruned_pyg_graph_cover_the_files_edges(run, tmp_path):
    """PyG graphs the exported pipeline prunes get scores over the file's own edges: 0 and edge_scored false for the
    edges its filter removed."""
    from domainpar.cli.main import main
    from domainpar.data.pyg_files import read_pyg_object

    build_dataset(TRACKML_DIR, tmp_path / "pyg", GRAPH, progress=False, fmt="pyg")
    main(["export", "--checkpoint", str(run["checkpoint"]), "--format", "torchscript", "--out", str(tmp_path / "m.pt")])
    main(["evaluate", "--model", str(tmp_path / "m.pt"), "--data", str(tmp_path / "pyg"), "--write-scores",
          str(tmp_path / "scores"), "--quiet"])  # fmt: skip
    written = read_pyg_object(tmp_path / "scores" / "event000000001.pyg")
    pruned = load_graph(run["root"] / "filtered" / "event000000001.npz")
    scored = written["edge_scored"].numpy()
    assert scored.shape == (written["edge_index"].shape[1],) and int(scored.sum()) == pruned.num_edges
    scores = written["edge_scores"].numpy()
    assert (scores[~scored] == 0).all() and ((scores[scored] > 0) & (scores[scored] < 1)).all()


def test_an_exported_pipeline_takes_no_filter_from_the_command_line(tmp_path):
    from domainpar.errors import DomainparError
    from domainpar.inference import EvaluateConfig

    with pytest.raises(DomainparError, match=r"^--filter f.pt: an exported model \(--model\) runs the edge filter its sidecar records"):
        EvaluateConfig(checkpoint=None, model=tmp_path / "m.onnx", data=tmp_path, edge_filter=Path("f.pt"))

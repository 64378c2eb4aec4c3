"""``domainpar export``: deploy model == training model, TorchScript and ONNX round trips on the real event, refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from domainpar.errors import DomainparError
from domainpar.train.checkpoint import write_checkpoint

from fixtures import EVENT1 as EVENT
from fixtures import TRACKML_DIR, copy_event1


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _random_graph(num_nodes: int, num_edges: int, node_features: int = 3, edge_features: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = (0.5 * rng.standard_normal((num_nodes, node_features))).astype(np.float32)
    edge_index = rng.integers(0, num_nodes, size=(2, num_edges)).astype(np.int64)
    edge_attr = (0.5 * rng.standard_normal((num_edges, edge_features))).astype(np.float32)
    return x, edge_index, edge_attr


def _perturbed_model(config, seed: int = 0):
    """A model with non-trivial weights everywhere (zero-initialised vectors too)."""
    from domainpar.model.registry import build_model

    torch.manual_seed(seed)
    model = build_model(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.2 * torch.randn_like(parameter))
    return model


# ----------------------------------------------------------------------------- the deploy module


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"use_edge_features": False},
        {"recurrent": False},
        {"use_edge_features": False, "recurrent": False, "activation": "gelu"},
        {"layer_norm": False, "activation": "tanh", "mlp_layers": 3},
        {"checkpointing": True, "overlap": True},
    ],
    ids=["default", "no-edge-features", "per-iteration", "no-edge-gelu", "no-norm-tanh-3", "trained-with-checkpointing"],
)
def test_deploy_model_equals_the_training_model(overrides):
    from domainpar.export.deploy import EdgeClassifier, NodeOnlyEdgeClassifier, deploy_model
    from domainpar.export.source import training_logits
    from domainpar.model.config import ModelConfig

    config = ModelConfig(hidden=12, num_iterations=3, **overrides)
    model = _perturbed_model(config)
    deployed = deploy_model(config, model.state_dict())
    assert isinstance(deployed, EdgeClassifier if config.edge_inputs else NodeOnlyEdgeClassifier)
    for num_nodes, num_edges in ((40, 150), (257, 1001), (3, 2)):
        x, edge_index, edge_attr = (torch.from_numpy(a) for a in _random_graph(num_nodes, num_edges, edge_features=4))
        reference = training_logits(model, x, edge_index, edge_attr)
        inputs = (x, edge_index, edge_attr) if config.edge_inputs else (x, edge_index)
        out = deployed(*inputs)
        assert out.shape == (num_edges,) and out.dtype == torch.float32
        assert torch.max(torch.abs(out - reference)) <= 1e-6 * max(1.0, float(reference.abs().max()))
        # The weights really matter: another model gives other logits.
        other = training_logits(_perturbed_model(config, seed=1), x, edge_index, edge_attr)
        assert torch.max(torch.abs(other - reference)) > 1e-2


def test_deploy_model_refuses_weights_that_do_not_fit():
    from domainpar.export.deploy import deploy_model
    from domainpar.model.config import ModelConfig

    config = ModelConfig(hidden=8, num_iterations=2)
    state = _perturbed_model(config).state_dict()
    with pytest.raises(DomainparError, match=r"checkpoint weights do not fit its model_config \(.*head_output.weight"):
        deploy_model(config, {k: v for k, v in state.items() if k != "head_output.weight"})
    with pytest.raises(DomainparError, match=r"checkpoint weights do not fit its model_config"):
        deploy_model(ModelConfig(hidden=8, num_iterations=2, use_edge_features=False), state)


# ----------------------------------------------------------------------------- a trained model on the real event


def _train_checkpoint(directory: Path, edge_features: bool, description: dict | None) -> Path:
    """A small model trained briefly on the real event, saved with the trainer's checkpoint writer."""
    from domainpar.data.graph import build_graph
    from domainpar.data.trackml import load_event
    from domainpar.model.config import ModelConfig
    from domainpar.model.registry import build_model
    from domainpar.model.loss import edge_loss
    from domainpar.partition.local_graph import local_graph
    from domainpar.partition.plan import build_plan
    from domainpar.train.checkpoint import CHECKPOINT_FORMAT_VERSION, save_checkpoint
    from domainpar.train.config import TrainConfig

    hits, particles, truth = load_event(EVENT, parts=("hits", "particles", "truth"))
    graph, _ = build_graph(hits, truth, particles, event_id=1)
    local = local_graph(graph, build_plan(graph.edge_index, np.zeros(graph.num_nodes, np.int64), 1, y=graph.y).parts[0])
    torch.manual_seed(0)
    config = ModelConfig(hidden=16, num_iterations=2, use_edge_features=edge_features)
    model = build_model(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(15):
        optimizer.zero_grad()
        edge_loss(model(local), local, pos_weight=2.0).backward()
        optimizer.step()
    run = TrainConfig().replace(**{"run.threshold": 0.3})
    state = {
        "format_version": CHECKPOINT_FORMAT_VERSION,
        "step": 15,
        "epoch": 1,
        "step_in_epoch": 0,
        "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "model_config": config.to_dict(),
        "optimizer": optimizer.state_dict(),
        "config": run.to_dict(),
        "data": description,
    }
    return save_checkpoint(state, directory / "checkpoints", keep=1)


@pytest.fixture(scope="module")
def description():
    from domainpar.data.features import build_description
    from domainpar.data.graph import GraphConfig

    return build_description(GraphConfig())


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, description) -> Path:
    return _train_checkpoint(tmp_path_factory.mktemp("run"), edge_features=True, description=description)


@pytest.fixture(scope="module")
def event_dir(tmp_path_factory) -> Path:
    return copy_event1(tmp_path_factory.mktemp("events"))


@pytest.fixture(scope="module")
def evaluation(checkpoint, event_dir, tmp_path_factory):
    """`domainpar evaluate` of the checkpoint on the real event: its JSON and its per-edge logits."""
    from domainpar.cli.main import main
    from domainpar.inference import EvaluateConfig, evaluate

    out = tmp_path_factory.mktemp("eval") / "eval.json"
    main(["evaluate", "--checkpoint", str(checkpoint), "--data", str(event_dir), "--json", str(out), "--quiet"])
    report = evaluate(EvaluateConfig(checkpoint=checkpoint, data=event_dir, progress=False))
    return json.loads(out.read_text()), report.evaluations[0]


def _auc(logits: np.ndarray, labels: np.ndarray) -> float:
    from domainpar.tracks.efficiency import roc_auc

    return float(roc_auc(0.5 * (1.0 + np.tanh(0.5 * logits)), labels))


def _auc_tolerance(logits: np.ndarray, labels: np.ndarray, delta: float) -> float:
    """The most two logit vectors within ``delta`` of each other can differ in ROC AUC.

    Only (true, false) edge pairs whose logits are within 2·delta can change order;
    their fraction of all such pairs bounds the AUC difference. The training model's
    fused row kernels and the runtimes' own kernels round differently (~1e-7), so
    an equality test of the AUC must allow exactly the pairs that rounding can flip.
    """
    positive = np.sort(logits[labels > 0.5])
    negative = np.sort(logits[labels <= 0.5])
    close = np.searchsorted(negative, positive + 2 * delta, side="right") - np.searchsorted(negative, positive - 2 * delta, side="left")
    return float(close.sum()) / (positive.size * negative.size)


@pytest.fixture(scope="module")
def exported(checkpoint, tmp_path_factory) -> dict[str, Path]:
    """The checkpoint exported by the CLI in both formats."""
    from domainpar.cli.main import main

    directory = tmp_path_factory.mktemp("exported")
    files = {"torchscript": directory / "model.pt", "onnx": directory / "model.onnx"}
    for fmt, out in files.items():
        main(["export", "--checkpoint", str(checkpoint), "--format", fmt, "--out", str(out)])
    return files


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_export_round_trip_on_the_real_event(fmt, exported, evaluation):
    """The file, loaded as the deployment side loads it, gives `evaluate`'s logits (1e-5) and AUC on real event 1."""
    evaluate_json, evaluated = evaluation
    out = exported[fmt]
    assert out.is_file() and Path(f"{out}.json").is_file()
    sidecar = json.loads(Path(f"{out}.json").read_text())
    graph = evaluated.graph
    x, edge_index, edge_attr = graph.x, graph.edge_index, graph.edge_attr
    if fmt == "torchscript":
        module = torch.jit.load(str(out))  # what ACTS's TorchEdgeClassifier does
        logits = module(torch.from_numpy(x), torch.from_numpy(edge_index), torch.from_numpy(edge_attr)).numpy()
    else:
        import onnxruntime as ort

        session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        assert [i.name for i in session.get_inputs()] == ["x", "edge_index", "edge_attr"]
        assert [o.name for o in session.get_outputs()] == ["logits"]
        logits = session.run(None, {"x": x, "edge_index": edge_index, "edge_attr": edge_attr})[0]
    assert logits.shape == (graph.num_edges,) and logits.dtype == np.float32
    delta = float(np.max(np.abs(logits - evaluated.logits)))
    assert delta <= 1e-5
    tolerance = _auc_tolerance(evaluated.logits, graph.y, delta)
    # A handful of near-tied pairs at most. evaluate's float32 row kernels (kernel_tail) and the runtimes' kernels
    # round apart by ~2e-6 here (TorchScript 2.4e-6, ONNX 2.1e-6; ONNX alone gave 2.0e-6 and 9.8e-6 of AUC within
    # reach of rounding when evaluate ran torch's modules): about 1.2e-5 of the AUC.
    assert tolerance < 2e-5
    assert abs(_auc(logits.astype(np.float64), graph.y) - evaluate_json["auc"]) <= tolerance
    # The sidecar says how to build these inputs and what they were checked against.
    assert [f["name"] for f in sidecar["node_features"]] == ["r", "phi", "z"]
    assert [f["scale"] for f in sidecar["node_features"]] == [1000.0, pytest.approx(np.pi), 1000.0]
    assert [f["name"] for f in sidecar["edge_features"]] == ["dr", "dphi", "dz", "dR"]
    assert sidecar["threshold"] == 0.3 and sidecar["graph"]["cuts"]["phi_slope_max"] == 0.0006
    assert sidecar["model"]["format"] == fmt and sidecar["model"]["onnx_opset"] == (18 if fmt == "onnx" else None)
    assert sidecar["acts"]["useEdgeFeatures"] is True and sidecar["acts"]["cut"] == 0.3
    assert sidecar["verification"]["max_abs_logit_diff"] <= 1e-5
    assert sidecar["source"]["step"] == 15


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_evaluate_scores_an_exported_model_like_its_checkpoint(fmt, exported, evaluation, checkpoint, event_dir, tmp_path, capsys):
    from domainpar.cli.main import main
    from domainpar.export.runtime import load_exported

    evaluate_json, evaluated = evaluation
    graph = evaluated.graph
    delta = float(np.max(np.abs(load_exported(exported[fmt]).logits(graph.x, graph.edge_index, graph.edge_attr) - evaluated.logits)))
    assert delta <= 1e-5
    # The sidecar's threshold is used: the selections differ at most by the edges within rounding of the cut.
    out = tmp_path / "default.json"
    main(["evaluate", "--model", str(exported[fmt]), "--data", str(event_dir), "--json", str(out), "--quiet"])
    deployed = json.loads(out.read_text())
    assert deployed["model"] == str(exported[fmt]) and deployed["model_format"] == fmt and deployed["checkpoint"] is None
    assert deployed["threshold"] == evaluate_json["threshold"] == 0.3
    near_cut = int(np.sum(np.abs(evaluated.logits - np.log(0.3 / 0.7)) <= delta))
    for key in ("num_predicted_edges", "num_true_positive_edges"):
        assert abs(deployed["events"][0][key] - evaluate_json["events"][0][key]) <= near_cut, key
    assert "1 event(s), 1 part(s), threshold 0.3" in capsys.readouterr().out
    # At a threshold no edge is within rounding of, every figure is the checkpoint's, tracks included.
    candidates = np.linspace(0.2, 0.6, 81)
    safe = next(p for p in candidates if not np.any(np.abs(evaluated.logits - np.log(p / (1 - p))) <= 2 * delta))
    figures = {}
    for name, source in (("model", exported[fmt]), ("checkpoint", checkpoint)):
        main(["evaluate", f"--{name}", str(source), "--data", str(event_dir), "--threshold", str(safe),
              "--json", str(tmp_path / f"{name}.json"), "--quiet"])  # fmt: skip
        figures[name] = json.loads((tmp_path / f"{name}.json").read_text())
    for key in ("efficiency", "purity", "trackml_score", "tracking_efficiency", "fake_rate", "duplicate_rate"):
        assert figures["model"][key] == figures["checkpoint"][key], key
    assert abs(figures["model"]["auc"] - evaluate_json["auc"]) <= _auc_tolerance(evaluated.logits, graph.y, delta)


def test_evaluate_model_refusals(exported, checkpoint, event_dir, tmp_path, capsys):
    from domainpar.data.event_graph import save_graph
    from domainpar.data.graph import GraphConfig, build_event_graph

    model = exported["torchscript"]
    evaluate = ["evaluate", "--data", str(event_dir)]
    code, err = _run_cli(evaluate + ["--model", str(model), "--checkpoint", str(checkpoint)], capsys)
    assert code == 2 and err.count("\n") == 1 and "give exactly one of --checkpoint" in err
    code, err = _run_cli(evaluate + ["--model", str(model), "--parts", "2"], capsys)
    assert code == 2 and "--parts: expected 1 with --model, got 2" in err
    # Graphs whose feature widths differ from the model's inputs.
    graph, _ = build_event_graph(EVENT, GraphConfig(cell_features=True))
    save_graph(graph, tmp_path / "cells" / "event000000001.npz")
    code, err = _run_cli(["evaluate", "--model", str(model), "--data", str(tmp_path / "cells")], capsys)
    assert code == 2 and err.count("\n") == 1 and "graph has 5 node features but model model.pt expects 3" in err
    narrow = graph.__class__(**{**{k: getattr(graph, k) for k in graph.__dataclass_fields__}, "x": graph.x[:, :3], "edge_attr": graph.edge_attr[:, :2],
                                 "node_features": graph.node_features[:3], "edge_features": graph.edge_features[:2]})
    save_graph(narrow, tmp_path / "narrow" / "event000000001.npz")
    code, err = _run_cli(["evaluate", "--model", str(model), "--data", str(tmp_path / "narrow")], capsys)
    assert code == 2 and err.count("\n") == 1 and "graph has 2 edge features but model model.pt expects 4 (dr, dphi, dz, dR)" in err
    # A model without its sidecar, or with the sidecar of another file.
    lonely = tmp_path / "lonely.onnx"
    shutil.copy(exported["onnx"], lonely)
    code, err = _run_cli(["evaluate", "--model", str(lonely)] + evaluate[1:], capsys)
    assert code == 2 and err.count("\n") == 1 and "expected its sidecar lonely.onnx.json beside it" in err
    # A lone TorchScript model is that too; a training checkpoint given as --model is named as what it is.
    shutil.copy(exported["torchscript"], tmp_path / "lonely.pt")
    code, err = _run_cli(["evaluate", "--model", str(tmp_path / "lonely.pt")] + evaluate[1:], capsys)
    assert code == 2 and err.count("\n") == 1 and "expected its sidecar lonely.pt.json beside it" in err
    code, err = _run_cli(["evaluate", "--model", str(checkpoint)] + evaluate[1:], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "found a file of torch.save (a checkpoint or model.pt of `domainpar train`, or an edge filter): give a checkpoint as --checkpoint" in err
    shutil.copy(f"{exported['torchscript']}.json", tmp_path / "lonely.onnx.json")
    code, err = _run_cli(["evaluate", "--model", str(lonely)] + evaluate[1:], capsys)
    assert code == 2 and "the model file does not match its sidecar lonely.onnx.json" in err
    # A hand-edited sidecar that describes other inputs than the ONNX graph takes: its model records another sidecar.
    sidecar = json.loads(Path(f"{exported['onnx']}.json").read_text())
    sidecar["edge_features"] = sidecar["edge_features"][:2]
    Path(f"{lonely}.json").write_text(json.dumps(sidecar))
    code, err = _run_cli(["evaluate", "--model", str(lonely)] + evaluate[1:], capsys)
    assert code == 2 and err.count("\n") == 1 and "lonely.onnx.json: expected the sidecar its model file lonely.onnx records" in err


@pytest.mark.parametrize("fmt, suffix", [("torchscript", ".pt"), ("onnx", ".onnx")])
def test_dynamic_sizes_and_a_model_without_edge_features(fmt, suffix, tmp_path, description):
    """Export once, run on graphs of other sizes; a node-only model has two inputs."""
    from domainpar.export.runtime import load_exported
    from domainpar.export.source import load_export_source, training_logits, training_model
    from domainpar.export.writer import export_model

    checkpoint = _train_checkpoint(tmp_path / "run", edge_features=False, description=description)
    source = load_export_source(checkpoint)
    result = export_model(source, fmt, tmp_path / f"node_only{suffix}")
    assert [i["name"] for i in result.sidecar["inputs"]] == ["x", "edge_index"]
    assert result.sidecar["edge_features"] == [] and result.sidecar["acts"]["useEdgeFeatures"] is False
    exported = load_exported(result.model_path)
    reference_model = training_model(source)
    for num_nodes, num_edges in ((5527, 7749), (50, 49), (2, 1)):
        x, edge_index, _ = _random_graph(num_nodes, num_edges, seed=num_nodes)
        logits = exported.logits(x, edge_index)
        reference = training_logits(reference_model, torch.from_numpy(x), torch.from_numpy(edge_index), torch.zeros(num_edges, 4))
        assert logits.shape == (num_edges,)
        assert np.max(np.abs(logits - reference.double().numpy())) <= 1e-5
    if fmt == "onnx":
        # Hosts run ONNX Runtime with several intra-op threads: the sums over incident edges must stay exact
        # (an index_add export, ScatterND with reduction="add", loses updates here: errors ~1e-2).
        from domainpar.export.runtime import open_model_file

        x, edge_index, _ = _random_graph(20_000, 60_000, seed=3)
        reference = training_logits(reference_model, torch.from_numpy(x), torch.from_numpy(edge_index), torch.zeros(60_000, 4))
        runner = open_model_file(result.model_path, "onnx", threads=4)
        for _ in range(3):
            assert np.max(np.abs(runner([x, edge_index]) - reference.numpy())) <= 1e-5


def test_models_trained_with_checkpointing_export_the_same(checkpoint, tmp_path):
    """model_config.checkpointing/overlap are training-time knobs: the export is the one-process model."""
    from domainpar.export.source import load_export_source
    from domainpar.export.writer import export_model

    state = torch.load(checkpoint, weights_only=True)
    state["model_config"] = {**state["model_config"], "checkpointing": True, "overlap": True}
    variant = tmp_path / "checkpointed.pt"
    write_checkpoint(state, variant)
    plain = export_model(load_export_source(checkpoint), "torchscript", tmp_path / "a.pt")
    checkpointed = export_model(load_export_source(variant), "torchscript", tmp_path / "b.pt")
    x, edge_index, edge_attr = _random_graph(300, 900)
    inputs = (torch.from_numpy(x), torch.from_numpy(edge_index), torch.from_numpy(edge_attr))
    assert torch.equal(torch.jit.load(str(plain.model_path))(*inputs), torch.jit.load(str(checkpointed.model_path))(*inputs))


def _run_cli(args: list[str], capsys) -> tuple[int, str]:
    from domainpar.cli.main import main

    with pytest.raises(SystemExit) as exit_info:
        main(args)
    return exit_info.value.code, capsys.readouterr().err


def test_export_refusals(checkpoint, tmp_path, capsys):
    base = ["export", "--format", "torchscript", "--out", str(tmp_path / "m.pt")]
    state = torch.load(checkpoint, weights_only=True)

    missing = tmp_path / "missing.pt"
    write_checkpoint({k: v for k, v in state.items() if k != "model_config"}, missing)
    code, err = _run_cli(["export", "--checkpoint", str(missing), "--format", "onnx", "--out", str(tmp_path / "m.onnx")], capsys)
    assert code == 2 and err.count("\n") == 1 and "missing.pt: checkpoint is missing entries ['model_config']" in err

    # One weight changed after the checksum was taken: refused, never exported.
    tampered = {**state, "model": {k: v.clone() for k, v in state["model"].items()}}
    tampered["model"]["head_output.bias"] += 1.0
    torch.save(tampered, tmp_path / "tampered.pt")
    code, err = _run_cli(base[:1] + ["--checkpoint", str(tmp_path / "tampered.pt")] + base[1:], capsys)
    assert code == 2 and err.count("\n") == 1 and "tampered.pt: checkpoint content does not match its checksum" in err

    no_description = tmp_path / "old.pt"
    write_checkpoint({k: v for k, v in state.items() if k not in ("data", "graph")}, no_description)
    code, err = _run_cli(base[:1] + ["--checkpoint", str(no_description)] + base[1:], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "old.pt: the checkpoint records neither the features of its training graphs nor how they were built" in err

    code, err = _run_cli(["export", "--checkpoint", str(checkpoint), "--format", "onnx", "--out", str(tmp_path / "m.pt")], capsys)
    assert code == 2 and "an ONNX model file must end in .onnx (got .pt)" in err

    (tmp_path / "text.pt").write_text("not a checkpoint")
    code, err = _run_cli(base[:1] + ["--checkpoint", str(tmp_path / "text.pt")] + base[1:], capsys)
    assert code == 2 and err.count("\n") == 1 and "text.pt: expected a domainpar checkpoint" in err

    code, err = _run_cli(base[:1] + ["--checkpoint", str(checkpoint), "--threshold", "1.5"] + base[1:], capsys)
    assert code == 2 and "--threshold must be in (0, 1) (got 1.5)" in err
    # Nothing was written by any refused export.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["missing.pt", "old.pt", "tampered.pt", "text.pt"]


def test_export_takes_the_description_from_graph_files(checkpoint, tmp_path, capsys):
    """A checkpoint without a description exports with --graphs pointing at `domainpar build` output."""
    from domainpar.cli.main import main
    from domainpar.data.dataset import build_dataset
    from domainpar.data.graph import GraphConfig

    build_dataset(TRACKML_DIR, tmp_path / "graphs", GraphConfig(phi_slope_max=0.0005), progress=False)
    state = torch.load(checkpoint, weights_only=True)
    old = tmp_path / "old.pt"
    write_checkpoint({**state, "data": None}, old)
    main(["export", "--checkpoint", str(old), "--format", "torchscript", "--out", str(tmp_path / "m.pt"),
          "--graphs", str(tmp_path / "graphs"), "--check-graph", str(tmp_path / "graphs")])  # fmt: skip
    sidecar = json.loads((tmp_path / "m.pt.json").read_text())
    assert sidecar["graph"]["cuts"]["phi_slope_max"] == 0.0005 and sidecar["graph"]["builder"] == "domainpar build"
    assert sidecar["verification"]["num_nodes"] == 5527
    assert "checked on" in capsys.readouterr().out


def test_train_records_the_graph_description_and_export_uses_it(tmp_path):
    """`domainpar train` on `domainpar build` output → checkpoint with the features and cuts → sidecar."""
    from domainpar.data.dataset import build_dataset
    from domainpar.data.graph import GraphConfig
    from domainpar.export.source import load_export_source
    from domainpar.export.writer import export_model
    from domainpar.train.config import load_config
    from domainpar.train.run import train

    build_dataset(TRACKML_DIR, tmp_path / "graphs", GraphConfig(cell_features=True, z0_max=150.0), progress=False)
    config = load_config(None, {
        "data.train": str(tmp_path / "graphs"), "run.out": str(tmp_path / "run"), "parallel.mode": "single",
        "model.hidden": 8, "model.num_iterations": 1, "model.use_edge_features": False, "run.epochs": 1,
        "run.threshold": 0.2, "run.progress": False, "run.curves": False,
    })  # fmt: skip
    summary = train(config)
    source = load_export_source(summary["model"])
    assert source.model_config.node_features == 5 and source.model_config.edge_inputs == 0
    assert source.description["cuts"]["z0_max"] == 150.0
    sidecar = export_model(source, "torchscript", tmp_path / "m.pt").sidecar
    assert [f["name"] for f in sidecar["node_features"]] == ["r", "phi", "z", "cell_count", "cell_charge"]
    assert sidecar["edge_features"] == [] and [i["name"] for i in sidecar["inputs"]] == ["x", "edge_index"]
    assert sidecar["threshold"] == 0.2 and sidecar["graph"]["cuts"]["cell_features"] is True


def test_evaluate_reads_pyg_graph_files(checkpoint, evaluation, event_dir, tmp_path):
    """`domainpar build --format pyg` output evaluates to the figures of the raw event."""
    from domainpar.cli.main import main

    evaluate_json, _ = evaluation
    main(["build", "--input", str(event_dir), "--out", str(tmp_path / "pyg"), "--format", "pyg", "--quiet"])
    out = tmp_path / "eval.json"
    main(["evaluate", "--checkpoint", str(checkpoint), "--data", str(tmp_path / "pyg"), "--events", str(event_dir),
          "--json", str(out), "--quiet"])  # fmt: skip
    from_pyg = json.loads(out.read_text())
    for key in ("efficiency", "purity", "auc", "trackml_score", "tracking_efficiency", "fake_rate", "duplicate_rate"):
        assert from_pyg[key] == pytest.approx(evaluate_json[key], abs=1e-12), key

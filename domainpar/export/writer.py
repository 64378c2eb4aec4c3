"""Writing an exported model: TorchScript or ONNX, checked against the training model, then its sidecar.

Every file is written to a temporary name, loaded back the way the deployment side loads it (``torch.jit.load``,
ONNX Runtime on CPU), run on a check graph whose size differs from the one the export was traced with (so the
dynamic N and E are exercised), and compared with the training model's logits on the same graph. Only a file that
reproduces them is renamed into place, with its sidecar; otherwise nothing is written.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from domainpar.atomic import staged_outputs
from domainpar.errors import DomainparError, one_line, reraise_fault
from domainpar.export.deploy import deploy_filter, deploy_model, input_names
from domainpar.export.runtime import open_model_file
from domainpar.export.sidecar import DIGEST_ENTRY, FORMATS, ONNX_OPSET, build_sidecar, file_sha256, sidecar_digest, sidecar_path
from domainpar.export.source import ExportSource, training_logits, training_model
from domainpar.filter.edge_filter import EdgeFilter

#: File suffixes accepted for each format.
SUFFIXES = {"torchscript": (".pt", ".ts", ".torchscript"), "onnx": (".onnx",)}
#: The exported file must reproduce the training model's logits to this fraction of max(1, |logit|max).
CHECK_TOLERANCE = 1e-4
#: ONNX Runtime intra-op thread counts an ONNX export is checked with.
CHECK_THREADS = (1, 4)


@dataclass(frozen=True)
class CheckGraph:
    """The graph an export is checked on."""

    name: str
    """What it is, for the sidecar (a file name, or how it was generated)."""
    x: np.ndarray
    """(N, F) node features."""
    edge_index: np.ndarray
    """(2, E) int64 edges."""
    edge_attr: np.ndarray
    """(E, F_e) edge features (F_e may be 0)."""


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_model` wrote: the model file, its sidecar JSON and content, and the edge filter's file
    (None unless the model's training graphs were pruned by one)."""

    model_path: Path
    sidecar_path: Path
    sidecar: dict[str, Any]
    filter_path: Path | None = None


def check_out_path(out: str | os.PathLike, fmt: str) -> Path:
    """``--out`` must end in a suffix of its format (one line otherwise)."""
    if fmt not in FORMATS:
        raise DomainparError(f"--format must be one of {', '.join(FORMATS)} (got {fmt!r})")
    out = Path(out)
    if out.suffix.lower() not in SUFFIXES[fmt]:
        raise DomainparError(f"--out {out}: {'an ONNX' if fmt == 'onnx' else 'a TorchScript'} model file must end in {' or '.join(SUFFIXES[fmt])} (got {out.suffix or 'no suffix'})")
    return out


def random_check_graph(node_features: int, edge_features: int, num_nodes: int = 4099, num_edges: int = 30011, seed: int = 0) -> CheckGraph:
    """A random graph of the model's widths (features ~ N(0, 0.5²), the range of scaled hit features)."""
    rng = np.random.default_rng(seed)
    return CheckGraph(
        name=f"random graph (seed {seed})",
        x=(0.5 * rng.standard_normal((num_nodes, node_features))).astype(np.float32),
        edge_index=rng.integers(0, num_nodes, size=(2, num_edges)).astype(np.int64),
        edge_attr=(0.5 * rng.standard_normal((num_edges, edge_features))).astype(np.float32),
    )


def _example_inputs(node_features: int, edge_features: int, with_edges: bool) -> tuple[torch.Tensor, ...]:
    """Inputs to trace with: sizes unlike any check graph's, and N != E so neither is specialised."""
    graph = random_check_graph(node_features, edge_features, num_nodes=11, num_edges=17, seed=1)
    inputs = [torch.from_numpy(graph.x), torch.from_numpy(graph.edge_index)]
    if with_edges:
        inputs.append(torch.from_numpy(graph.edge_attr))
    return tuple(inputs)


@contextlib.contextmanager
def _quiet_exporter():
    """The ONNX exporter logs progress and registry warnings; an export command prints its own summary."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _require_onnx_tools() -> None:
    missing = []
    for module in ("onnx", "onnxscript", "onnxruntime"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise DomainparError(f"--format onnx needs {', '.join(missing)} (pip install 'domainpar[export]')")


def _write_module(
    module: torch.nn.Module, names: list[str], fmt: str, path: Path, example: tuple[torch.Tensor, ...]
) -> Callable[[Path, str], None]:
    """Write a single-graph module ``forward(x, edge_index[, edge_attr])`` as TorchScript or ONNX (dynamic N, E).

    Returns:
        ``record(path, digest)``: writes the same program again, with ``digest`` recorded in the file
        (:data:`~domainpar.export.sidecar.DIGEST_ENTRY`: a TorchScript extra file, an ONNX metadata property);
        the computation is the one just written, serialised again with one more entry.
    """
    if fmt == "torchscript":
        # TorchScript is deprecated in torch but it is what ACTS's TorchEdgeClassifier loads.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                scripted = torch.jit.script(module)
            except Exception as exc:  # noqa: BLE001 - the scripting compiler's many failure types all mean "could not export"
                reraise_fault(exc)
                raise DomainparError(f"TorchScript export failed ({one_line(exc, 200)})") from None

        def save_scripted(target: Path, extra: dict[str, str]) -> None:
            buffer = io.BytesIO()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                torch.jit.save(scripted, buffer, _extra_files=extra)
            # Written by Python: a full disk is an OSError naming the file (torch's C++ writer aborts the process instead).
            with open(target, "wb") as fh:
                fh.write(buffer.getbuffer())

        save_scripted(path, {})
        return lambda target, digest: save_scripted(target, {DIGEST_ENTRY: digest})
    nodes, edges = torch.export.Dim("N"), torch.export.Dim("E")
    dynamic = {"x": {0: nodes}, "edge_index": {1: edges}}
    if "edge_attr" in names:
        dynamic["edge_attr"] = {0: edges}
    try:
        with _quiet_exporter():
            program = torch.onnx.export(
                module,
                example,
                None,
                dynamo=True,
                opset_version=ONNX_OPSET,
                input_names=names,
                output_names=["logits"],
                dynamic_shapes=dynamic,
            )
    except Exception as exc:  # noqa: BLE001 - the exporter's many failure types all mean "could not export"
        reraise_fault(exc)
        raise DomainparError(f"ONNX export failed ({one_line(exc, 200)})") from None
    proto = program.model_proto

    def save_proto(target: Path, extra: dict[str, str]) -> None:
        for key, value in extra.items():
            entry = next((p for p in proto.metadata_props if p.key == key), None) or proto.metadata_props.add()
            entry.key, entry.value = key, value
        # Serialised here and written by Python (one file, weights inside): a full disk is an OSError naming the file.
        content = proto.SerializeToString()
        with open(target, "wb") as fh:
            fh.write(content)

    save_proto(path, {})
    return lambda target, digest: save_proto(target, {DIGEST_ENTRY: digest})


def _compare(path: Path, fmt: str, inputs: list[np.ndarray], reference: np.ndarray, what: str, graph: "CheckGraph") -> float:
    """Largest |file logit − reference logit| over the runtime settings the deployment side uses; raises over tolerance."""
    # ONNX Runtime at 1 thread (ACTS's setting) and at several: its parallel kernels must not change the sums.
    threads = (1,) if fmt == "torchscript" else CHECK_THREADS
    diff = 0.0
    for count in threads:
        exported = np.asarray(open_model_file(path, fmt, threads=count)(inputs), dtype=np.float64).reshape(-1)
        if exported.shape != reference.shape:
            raise DomainparError(f"exported {fmt} {what} returned {exported.shape[0]} logits for {reference.shape[0]} edges")
        diff = max(diff, float(np.max(np.abs(exported - reference))) if reference.size else 0.0)
    scale = float(np.max(np.abs(reference))) if reference.size else 0.0
    if not np.isfinite(diff) or diff > CHECK_TOLERANCE * max(1.0, scale):
        raise DomainparError(
            f"exported {fmt} {what} does not reproduce the training one on {graph.name}: logits differ by {diff:.3g} "
            f"(largest logit {scale:.3g}, tolerance {CHECK_TOLERANCE:g} of it); nothing was written"
        )
    return diff


def _runtime_name(fmt: str) -> str:
    if fmt == "onnx":
        import onnxruntime

        return f"onnxruntime {onnxruntime.__version__} CPUExecutionProvider, {' and '.join(map(str, CHECK_THREADS))} intra-op threads"
    return f"torch.jit.load, torch {torch.__version__}"


def verify_file(source: ExportSource, path: Path, fmt: str, graph: CheckGraph) -> dict[str, Any]:
    """Run the written file on ``graph`` and compare with the training model; the verification record.

    Raises:
        DomainparError: the file's logits differ from the training model's by more than the tolerance.
    """
    inputs = [graph.x.astype(np.float32), graph.edge_index.astype(np.int64)]
    if source.model_config.edge_inputs:
        inputs.append(graph.edge_attr.astype(np.float32))
    reference = training_logits(
        training_model(source), torch.from_numpy(graph.x), torch.from_numpy(graph.edge_index), torch.from_numpy(graph.edge_attr)
    ).double().numpy()
    diff = _compare(path, fmt, inputs, reference, "model", graph)
    return {
        "graph": graph.name,
        "num_nodes": int(graph.x.shape[0]),
        "num_edges": int(graph.edge_index.shape[1]),
        "runtime": _runtime_name(fmt),
        "reference": f"training model {source.model_config.name}, one process, {str(source.dtype).removeprefix('torch.')}",
        "max_abs_logit_diff": diff,
        "max_abs_logit": float(np.max(np.abs(reference))) if reference.size else 0.0,
    }


def filter_path(model_path: str | os.PathLike) -> Path:
    """Where the edge filter of an exported pipeline goes: ``model.onnx`` → ``model.filter.onnx``."""
    model_path = Path(model_path)
    return model_path.with_name(f"{model_path.stem}.filter{model_path.suffix}")


def _filter_reference(edge_filter: EdgeFilter, module: torch.nn.Module, graph: CheckGraph) -> np.ndarray:
    """The training filter's logits on ``graph`` (its columns as the deployed module selects them)."""
    x, edge_attr = graph.x[:, module.node_columns.numpy()], graph.edge_attr[:, module.edge_columns.numpy()]
    src, dst = graph.edge_index
    inputs = np.concatenate([x[src], x[dst], edge_attr], axis=1).astype(np.float32)
    with torch.no_grad():
        return edge_filter.net(torch.from_numpy(inputs)).double().numpy()


def check_filter(edge_filter: EdgeFilter | None, description: dict, checkpoint: Path) -> dict | None:
    """The edge filter a model's training graphs record (``cuts.edge_filter``) against the one given; its record.

    Raises:
        DomainparError: the graphs were pruned but no filter is given, one is given for unpruned graphs, or the
            given filter is another than the graphs' (content hashes differ).
    """
    recorded = (description.get("cuts") or {}).get("edge_filter") if isinstance(description.get("cuts"), dict) else None
    if recorded is None:
        if edge_filter is not None:
            raise DomainparError(
                f"--filter: the model's training graphs were not pruned by an edge filter ({checkpoint} records none); "
                "export it without --filter"
            )
        return None
    if edge_filter is None:
        raise DomainparError(
            f"{checkpoint}: the model was trained on graphs pruned by an edge filter (hash {recorded.get('hash')}), "
            "which a deployment must apply too; pass that filter with --filter (filter.pt of the recipe run)"
        )
    if edge_filter.content_hash != recorded.get("hash"):
        raise DomainparError(
            f"--filter: expected the edge filter the model's training graphs were pruned with (hash {recorded.get('hash')}), "
            f"got hash {edge_filter.content_hash}"
        )
    return recorded


def _export_filter(
    edge_filter: EdgeFilter, description: dict, fmt: str, path: Path, tmp: Path, graph: CheckGraph
) -> dict[str, Any]:
    """Write the deployed filter to ``tmp`` (renamed to ``path`` by the caller), check it; its sidecar stage."""
    node_names = [f["name"] for f in description["node_features"]]
    edge_names = [f["name"] for f in description["edge_features"]]
    module = deploy_filter(edge_filter, node_names, edge_names)
    names = ["x", "edge_index", "edge_attr"]
    _write_module(module, names, fmt, tmp, _example_inputs(len(node_names), len(edge_names), True))
    inputs = [graph.x.astype(np.float32), graph.edge_index.astype(np.int64), graph.edge_attr.astype(np.float32)]
    diff = _compare(tmp, fmt, inputs, _filter_reference(edge_filter, module, graph), "edge filter", graph)
    return {
        "stage": "edge_filter",
        "file": path.name,
        "format": fmt,
        "onnx_opset": ONNX_OPSET if fmt == "onnx" else None,
        "sha256": file_sha256(tmp),
        "inputs": names,
        "output": "logits (E,) float32, one per edge of the graph stage",
        "threshold": float(edge_filter.threshold),
        "keep": "the edges whose filter logit is at least threshold (a logit, not a probability); the classifier runs on "
        "the graph with only those edges, nodes unchanged",
        "reads": {"node_features": [node_names[i] for i in module.node_columns.tolist()],
                  "edge_features": [edge_names[i] for i in module.edge_columns.tolist()]},  # fmt: skip
        "acts": {
            "stage": "TorchEdgeClassifier" if fmt == "torchscript" else "OnnxEdgeClassifier",
            "cut": float(1.0 / (1.0 + np.exp(-float(edge_filter.threshold)))),
            "useEdgeFeatures": True,
            "undirected": False,
            "note": "ACTS cuts on sigmoid(logit): the same edges as logit >= threshold; run it before the classifier stage",
        },
        "hash": edge_filter.content_hash,
        "training_record": {k: v for k, v in edge_filter.record.items() if isinstance(v, (int, float, str)) or v is None},
        "verification": {"graph": graph.name, "runtime": _runtime_name(fmt), "max_abs_logit_diff": diff,
                         "reference": "the training edge filter (torch, float32)"},  # fmt: skip
    }


def export_model(
    source: ExportSource,
    fmt: str,
    out: str | os.PathLike,
    *,
    description: dict | None = None,
    threshold: float | None = None,
    check_graph: CheckGraph | None = None,
    edge_filter: EdgeFilter | None = None,
) -> ExportResult:
    """Export a checkpoint as a single-graph model file plus sidecar JSON (and its edge filter, when its graphs had one).

    Args:
        source: the checkpoint (:func:`~domainpar.export.source.load_export_source`).
        fmt: ``torchscript`` or ``onnx``.
        out: the model file (``.pt`` for TorchScript, ``.onnx``); the sidecar is ``<out>.json``, the filter
            (if any) ``<stem>.filter<suffix>`` beside it.
        description: the input description to use instead of the checkpoint's
            (:func:`domainpar.data.event_graph.read_graph_description` of a training graph).
        threshold: score cut to record (default: the training run's, else 0.5).
        check_graph: graph to check the files on (default: a random graph of the model's widths).
        edge_filter: the filter the training graphs were pruned with (required when the description records one).

    Raises:
        DomainparError: bad arguments, no input description, a missing or wrong filter, missing export tools, or a
            file that does not reproduce the training model (then nothing is written).
    """
    out = check_out_path(out, fmt)
    config = source.model_config
    description = source.description if description is None else description
    if description is None:
        raise DomainparError(
            f"{source.path}: the checkpoint records neither the features of its training graphs nor how they were built "
            "(its training graphs carried no feature names: format-1 graph files); pass --graphs with graph files "
            "built like the training graphs"
        )
    recorded_filter = check_filter(edge_filter, description, source.path)
    if threshold is not None and not 0.0 < threshold < 1.0:
        raise DomainparError(f"--threshold must be in (0, 1) (got {threshold})")
    if threshold is not None:
        threshold_source = "--threshold at export"
    elif source.threshold is not None:
        threshold, threshold_source = source.threshold, "the training run's run.threshold"
    else:
        threshold, threshold_source = 0.5, "default 0.5 (the checkpoint records no threshold)"
    if fmt == "onnx":
        _require_onnx_tools()
    if check_graph is None:
        check_graph = random_check_graph(config.node_features, config.edge_features)
    if check_graph.x.shape[1] != config.node_features or (
        config.edge_inputs and check_graph.edge_attr.shape[1] != config.edge_features
    ):
        raise DomainparError(
            f"--check-graph {check_graph.name}: has {check_graph.x.shape[1]} node / {check_graph.edge_attr.shape[1]} edge "
            f"features, the model takes {config.node_features} / {config.edge_features}"
        )
    model = deploy_model(config, source.state)
    side = sidecar_path(out)
    filter_out = filter_path(out) if recorded_filter is not None else None
    # The model, its filter and the sidecar appear together, or none of them (the old ones stay as they were).
    with staged_outputs() as files:
        tmp_model = files.file(out)
        record = _write_module(model, input_names(config), fmt, tmp_model, _example_inputs(config.node_features, config.edge_features, bool(config.edge_inputs)))
        verification = verify_file(source, tmp_model, fmt, check_graph)
        filter_stage = None
        if filter_out is not None:
            tmp_filter = files.file(filter_out)
            filter_stage = _export_filter(edge_filter, description, fmt, filter_out, tmp_filter, check_graph)
        sidecar = build_sidecar(
            model_name=out.name,
            model_sha256="",
            fmt=fmt,
            model_config=config,
            description=description,
            threshold=float(threshold),
            threshold_source=threshold_source,
            source={"checkpoint": str(source.path), "sha256": source.sha256, "step": source.step},
            verification=verification,
            filter_stage=filter_stage,
            track_method=source.track_method,
            track_settings=source.track_settings,
        )
        # The model file records the digest of everything its sidecar says: a sidecar edited afterwards is refused.
        record(tmp_model, sidecar_digest(sidecar))
        sidecar["model"]["sha256"] = file_sha256(tmp_model)
        files.file(side).write_text(json.dumps(sidecar, indent=2) + "\n", encoding="utf-8")
    return ExportResult(model_path=out, sidecar_path=side, sidecar=sidecar, filter_path=filter_out)

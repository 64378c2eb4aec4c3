"""Writing an exported model: TorchScript or ONNX, checked against the training model, then its sidecar.

Every file is written to a temporary name, loaded back the way the
deployment side loads it (``torch.jit.load``, ONNX Runtime on CPU), run on a
check graph whose size differs from the one the export was traced with
(so the dynamic N and E are exercised), and compared with the training
model's logits on the same graph. Only a file that reproduces them is
renamed into place, with its sidecar; otherwise nothing is written.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from domainpar.atomic import atomic_path
from domainpar.errors import DomainparError, one_line
from domainpar.export.deploy import deploy_model, input_names
from domainpar.export.sidecar import FORMATS, ONNX_OPSET, build_sidecar, file_sha256, sidecar_path
from domainpar.export.source import ExportSource, training_logits, training_model

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
    """What :func:`export_model` wrote."""

    model_path: Path
    """The model file."""
    sidecar_path: Path
    """Its sidecar JSON."""
    sidecar: dict[str, Any]
    """The sidecar's content."""


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


def _example_inputs(model_config) -> tuple[torch.Tensor, ...]:
    """Inputs to trace with: sizes unlike any check graph's, and N != E so neither is specialised."""
    graph = random_check_graph(model_config.node_features, model_config.edge_features, num_nodes=11, num_edges=17, seed=1)
    inputs = [torch.from_numpy(graph.x), torch.from_numpy(graph.edge_index)]
    if model_config.edge_inputs:
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


def _write_model(model: torch.nn.Module, model_config, fmt: str, path: Path) -> None:
    if fmt == "torchscript":
        # TorchScript is deprecated in torch but it is what ACTS's TorchEdgeClassifier loads.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.jit.save(torch.jit.script(model), str(path))
        return
    names = input_names(model_config)
    nodes, edges = torch.export.Dim("N"), torch.export.Dim("E")
    dynamic = {"x": {0: nodes}, "edge_index": {1: edges}}
    if model_config.edge_inputs:
        dynamic["edge_attr"] = {0: edges}
    try:
        with _quiet_exporter():
            torch.onnx.export(
                model,
                _example_inputs(model_config),
                str(path),
                dynamo=True,
                opset_version=ONNX_OPSET,
                input_names=names,
                output_names=["logits"],
                dynamic_shapes=dynamic,
                external_data=False,
            )
    except Exception as exc:  # noqa: BLE001 - the exporter's many failure types all mean "could not export"
        raise DomainparError(f"ONNX export failed ({one_line(exc, 200)})") from None


def verify_file(source: ExportSource, path: Path, fmt: str, graph: CheckGraph) -> dict[str, Any]:
    """Run the written file on ``graph`` and compare with the training model; the verification record.

    Raises:
        DomainparError: the file's logits differ from the training model's by more than the tolerance.
    """
    from domainpar.export.runtime import open_model_file

    inputs = [graph.x.astype(np.float32), graph.edge_index.astype(np.int64)]
    if source.model_config.edge_inputs:
        inputs.append(graph.edge_attr.astype(np.float32))
    reference = training_logits(
        training_model(source), torch.from_numpy(graph.x), torch.from_numpy(graph.edge_index), torch.from_numpy(graph.edge_attr)
    ).double().numpy()
    # ONNX Runtime at 1 thread (ACTS's setting) and at several: its parallel kernels must not change the sums.
    threads = (1,) if fmt == "torchscript" else CHECK_THREADS
    diff = 0.0
    for count in threads:
        exported = np.asarray(open_model_file(path, fmt, threads=count)(inputs), dtype=np.float64).reshape(-1)
        if exported.shape != reference.shape:
            raise DomainparError(f"exported {fmt} model returned {exported.shape[0]} logits for {reference.shape[0]} edges")
        diff = max(diff, float(np.max(np.abs(exported - reference))) if reference.size else 0.0)
    scale = float(np.max(np.abs(reference))) if reference.size else 0.0
    if not np.isfinite(diff) or diff > CHECK_TOLERANCE * max(1.0, scale):
        raise DomainparError(
            f"exported {fmt} model does not reproduce the training model on {graph.name}: logits differ by {diff:.3g} "
            f"(largest logit {scale:.3g}, tolerance {CHECK_TOLERANCE:g} of it); nothing was written"
        )
    if fmt == "onnx":
        import onnxruntime

        runtime = f"onnxruntime {onnxruntime.__version__} CPUExecutionProvider, {' and '.join(map(str, CHECK_THREADS))} intra-op threads"
    else:
        runtime = f"torch.jit.load, torch {torch.__version__}"
    return {
        "graph": graph.name,
        "num_nodes": int(graph.x.shape[0]),
        "num_edges": int(graph.edge_index.shape[1]),
        "runtime": runtime,
        "reference": f"training model {source.model_config.name}, one process, {str(source.dtype).removeprefix('torch.')}",
        "max_abs_logit_diff": diff,
        "max_abs_logit": scale,
    }


def export_model(
    source: ExportSource,
    fmt: str,
    out: str | os.PathLike,
    *,
    description: dict | None = None,
    threshold: float | None = None,
    check_graph: CheckGraph | None = None,
) -> ExportResult:
    """Export a checkpoint as a single-graph model file plus sidecar JSON.

    Args:
        source: the checkpoint (:func:`~domainpar.export.source.load_export_source`).
        fmt: ``torchscript`` or ``onnx``.
        out: the model file (``.pt`` for TorchScript, ``.onnx``); the sidecar is ``<out>.json``.
        description: the input description to record when the checkpoint has none
            (:func:`domainpar.data.event_graph.read_graph_description` of a training graph).
        threshold: score cut to record (default: the training run's, else 0.5).
        check_graph: graph to check the file on (default: a random graph of the model's widths).

    Raises:
        DomainparError: bad arguments, no input description, missing export tools, or a file
            that does not reproduce the training model (then nothing is written).
    """
    out = check_out_path(out, fmt)
    config = source.model_config
    description = source.description if source.description is not None else description
    if description is None:
        raise DomainparError(
            f"{source.path}: the checkpoint does not say which features its graphs had or how they were built "
            "(trained before domainpar recorded it); pass --graphs with the training graphs"
        )
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
    with atomic_path(out) as tmp_model:
        _write_model(model, config, fmt, tmp_model)
        verification = verify_file(source, tmp_model, fmt, check_graph)
        sidecar = build_sidecar(
            model_name=out.name,
            model_sha256=file_sha256(tmp_model),
            fmt=fmt,
            model_config=config,
            description=description,
            threshold=float(threshold),
            threshold_source=threshold_source,
            source={"checkpoint": str(source.path), "sha256": source.sha256, "step": source.step},
            verification=verification,
        )
        with atomic_path(side) as tmp_side:
            tmp_side.write_text(json.dumps(sidecar, indent=2) + "\n", encoding="utf-8")
    return ExportResult(model_path=out, sidecar_path=side, sidecar=sidecar)

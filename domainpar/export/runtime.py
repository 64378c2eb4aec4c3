"""Running an exported model file, as the deployment side does.

:class:`ExportedModel` loads a TorchScript file with ``torch.jit.load`` or an ONNX file with ONNX Runtime on CPU
(the settings ACTS's ``OnnxEdgeClassifier`` uses: one intra-op thread, extended graph optimisations), and returns
the logits of every edge of a graph. ``domainpar evaluate --model`` scores events with it, and ``domainpar export``
checks every file it writes with it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from domainpar.data.event_graph import EventGraph
from domainpar.data.graph import GraphConfig
from domainpar.errors import DomainparError, not_a_file, one_line, reraise_fault
from domainpar.export.sidecar import feature_names, filter_stage, graph_stage, read_sidecar, sidecar_path


def _require_onnxruntime(what: str):
    try:
        # Optional dependency (pip install 'domainpar[export]'): probed when an ONNX file is run.
        import onnxruntime
    except ImportError:
        raise DomainparError(f"{what}: needs onnxruntime (pip install 'domainpar[export]')") from None
    return onnxruntime


class _TorchScriptRunner:
    def __init__(self, path: Path) -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                self.module = torch.jit.load(str(path), map_location="cpu").eval()
        except Exception as exc:  # noqa: BLE001 - any reader failure means "not a TorchScript model file"
            reraise_fault(exc)
            raise DomainparError(f"{path}: expected a TorchScript model file, could not load it ({one_line(exc, 160)})") from None

    def __call__(self, inputs: list[np.ndarray]) -> np.ndarray:
        with torch.no_grad():
            out = self.module(*[torch.from_numpy(np.ascontiguousarray(a)) for a in inputs])
        return out.detach().cpu().numpy()


class _OnnxRunner:
    def __init__(self, path: Path, threads: int = 1) -> None:
        ort = _require_onnxruntime(str(path))
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - any reader failure means "not an ONNX model file"
            reraise_fault(exc)
            raise DomainparError(f"{path}: expected an ONNX model file, could not load it ({one_line(exc, 160)})") from None
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.input_shapes = [i.shape for i in self.session.get_inputs()]

    def __call__(self, inputs: list[np.ndarray]) -> np.ndarray:
        feeds = {name: np.ascontiguousarray(a) for name, a in zip(self.input_names, inputs)}
        return self.session.run(None, feeds)[0]


def open_model_file(path: str | os.PathLike, fmt: str, threads: int = 1):
    """A callable ``runner(list of input arrays) -> logits array`` for a model file of format ``fmt``.

    Args:
        path: the model file.
        fmt: ``torchscript`` or ``onnx``.
        threads: ONNX Runtime intra-op threads (1: ACTS's setting); TorchScript uses torch's.
    """
    path = Path(path)
    if not path.is_file():
        raise not_a_file(path, "model file")
    return _TorchScriptRunner(path) if fmt == "torchscript" else _OnnxRunner(path, threads=threads)


@dataclass
class ExportedModel:
    """An exported model file with its sidecar (and its edge filter's file), ready to score graphs."""

    path: Path
    sidecar: dict[str, Any]
    """Its sidecar (see :mod:`domainpar.export.sidecar`)."""
    runner: Any
    """Callable on the list of input arrays."""
    filter_runner: Any = None
    """Callable of the edge filter's file on ``[x, edge_index, edge_attr]``, None when the pipeline has no filter."""

    @property
    def filter_stage(self) -> dict[str, Any] | None:
        """The sidecar's ``edge_filter`` stage (None: the training graphs were not pruned)."""
        return filter_stage(self.sidecar)

    @property
    def filter_hash(self) -> str | None:
        """Content hash of the edge filter the training graphs were pruned with (what pruned graph files record)."""
        stage = self.filter_stage
        return None if stage is None else str(stage.get("hash"))

    def graph_config(self) -> GraphConfig:
        """How to build the model's graphs from raw events: the sidecar's graph stage.

        Raises:
            DomainparError: the training graphs were not built by ``domainpar build`` (no cuts to rebuild them with).
        """
        stage = graph_stage(self.sidecar)
        cuts = stage.get("cuts")
        if not isinstance(cuts, dict) or not str(stage.get("builder", "")).startswith("domainpar build"):
            raise DomainparError(
                f"{self.path}: the model's training graphs were built by {stage.get('builder')!r}, not by `domainpar build`, "
                "so its sidecar holds no cuts to build graphs from raw events with; evaluate it on graph files"
            )
        return GraphConfig.from_dict(cuts, source=f"{sidecar_path(self.path)}: graph stage cuts")

    def _run(self, runner: Any, inputs: list[np.ndarray], what: str) -> np.ndarray:
        """(E,) float64 logits of one of the pipeline's files; a runtime's refusal or a wrong output size is one line."""
        try:
            out = np.asarray(runner(inputs)).reshape(-1)
        except Exception as exc:  # noqa: BLE001 - the runtime's own errors (shape, dtype) mean "these inputs do not fit"
            reraise_fault(exc)
            shapes = ", ".join(str(tuple(a.shape)) for a in inputs)
            raise DomainparError(f"{self.path}: {what} refused inputs of shapes {shapes} ({one_line(exc, 160)})") from None
        if out.shape[0] != inputs[1].shape[1]:
            raise DomainparError(f"{self.path}: {what} returned {out.shape[0]} logits for {inputs[1].shape[1]} edges")
        return out.astype(np.float64)

    def prune(self, graph: EventGraph) -> EventGraph:
        """``graph`` with only the edges the pipeline's edge filter keeps (nodes and edge order kept), recorded in its
        build configuration as :meth:`domainpar.filter.edge_filter.EdgeFilter.apply` does; unchanged without a filter."""
        stage = self.filter_stage
        if stage is None:
            return graph
        # The edge filter's file runs on the graph stage's full inputs.
        inputs = [np.asarray(graph.x, dtype=np.float32), np.asarray(graph.edge_index, dtype=np.int64),
                  np.asarray(graph.edge_attr, dtype=np.float32)]  # fmt: skip
        keep = self._run(self.filter_runner, inputs, "its edge filter") >= float(stage["threshold"])
        build = json.loads(graph.build_config) if graph.build_config else {}
        build["edge_filter"] = {"hash": self.filter_hash, "threshold": float(stage["threshold"]), "exported": stage.get("file")}
        return dataclasses.replace(
            graph,
            edge_index=np.ascontiguousarray(graph.edge_index[:, keep]),
            edge_attr=np.ascontiguousarray(graph.edge_attr[keep]),
            y=None if graph.y is None else np.ascontiguousarray(graph.y[keep]),
            build_config=json.dumps(build, sort_keys=True),
        )

    @property
    def format(self) -> str:
        return self.sidecar["model"]["format"]

    @property
    def threshold(self) -> float:
        """The score cut the model was tuned for."""
        return float(self.sidecar["threshold"])

    @property
    def num_node_features(self) -> int:
        return len(self.sidecar["node_features"])

    @property
    def num_edge_features(self) -> int:
        """0 for a model without edge inputs."""
        return len(self.sidecar["edge_features"])

    def check_widths(self, source: str, node_features: int, edge_features: int) -> None:
        """Refuse a graph whose feature widths do not match the model's inputs (one line naming ``source``)."""
        if node_features != self.num_node_features:
            names = ", ".join(feature_names(self.sidecar["node_features"]))
            raise DomainparError(
                f"{source}: graph has {node_features} node features but model {self.path.name} expects "
                f"{self.num_node_features} ({names})"
            )
        if self.num_edge_features and edge_features != self.num_edge_features:
            names = ", ".join(feature_names(self.sidecar["edge_features"]))
            raise DomainparError(
                f"{source}: graph has {edge_features} edge features but model {self.path.name} expects "
                f"{self.num_edge_features} ({names})"
            )

    def logits(self, x: np.ndarray, edge_index: np.ndarray, edge_attr: np.ndarray | None = None) -> np.ndarray:
        """(E,) float64 logits of every edge of one graph.

        Args:
            x: (N, F) node features (cast to float32).
            edge_index: (2, E) edges (cast to int64).
            edge_attr: (E, F_e) edge features; ignored by a model without edge inputs.
        """
        inputs = [np.asarray(x, dtype=np.float32), np.asarray(edge_index, dtype=np.int64)]
        if self.num_edge_features:
            if edge_attr is None:
                raise DomainparError(f"{self.path}: the model needs edge features (edge_attr), none were given")
            inputs.append(np.asarray(edge_attr, dtype=np.float32))
        return self._run(self.runner, inputs, "the model")


def load_exported(path: str | os.PathLike) -> ExportedModel:
    """Load an exported model file (``.pt`` TorchScript or ``.onnx``) and its sidecar.

    Raises:
        DomainparError: missing/unreadable file or sidecar, a sidecar written for another file,
            or onnxruntime missing for an ONNX file.
    """
    path = Path(path)
    if not path.is_file():
        raise not_a_file(path, "model file", prefix="--model ")
    sidecar = read_sidecar(path)
    runner = open_model_file(path, sidecar["model"]["format"])
    if isinstance(runner, _OnnxRunner):
        _check_onnx_inputs(path, runner, len(sidecar["node_features"]), len(sidecar["edge_features"]))
    stage = filter_stage(sidecar)
    filter_runner = None
    if stage is not None:
        filter_runner = open_model_file(path.with_name(str(stage["file"])), str(stage.get("format", sidecar["model"]["format"])))
    return ExportedModel(path=path, sidecar=sidecar, runner=runner, filter_runner=filter_runner)


def _check_onnx_inputs(path: Path, runner: _OnnxRunner, node_features: int, edge_features: int) -> None:
    """The ONNX graph's declared inputs must be what its sidecar describes (a hand-edited sidecar is caught here)."""
    expected = [["N", node_features], [2, "E"]] + ([["E", edge_features]] if edge_features else [])
    found = [list(shape) for shape in runner.input_shapes]
    widths_ok = len(found) == len(expected) and all(
        len(f) == 2 and (not isinstance(e[1], int) or f[1] == e[1]) and (not isinstance(e[0], int) or f[0] == e[0])
        for f, e in zip(found, expected)
    )
    if not widths_ok:
        raise DomainparError(
            f"{path}: the model's inputs {runner.input_names} have shapes {found}, but its sidecar describes "
            f"{node_features} node and {edge_features} edge features"
        )

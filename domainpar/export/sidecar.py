"""The sidecar JSON of an exported model: everything a user needs to build its inputs.

``domainpar export --out model.onnx`` writes ``model.onnx`` and ``model.onnx.json``
(``format: "domainpar-edge-classifier"``; an example: examples/deploy_to_acts.md). It records the model file
(format, ONNX opset, SHA-256); every input in calling order and the output (``logits`` (E,) float32, score =
sigmoid(logit)); per feature column its name, raw quantity, unit and scale (column = raw / scale) and which end of
an edge is row 0; the threshold, how the training graphs were built and the track builder; ``stages``, the
deployed pipeline in order (``graph``, ``edge_filter`` when the training graphs were pruned, ``edge_classifier``),
so a deployment that follows them feeds the classifier the graphs it was trained on; the matching settings of
ACTS's ExaTrkX edge-classifier stage; the source checkpoint and ``model_config``; and the largest logit
difference to the training model measured at export.

The model file records the digest of everything its sidecar says (:func:`sidecar_digest`; a TorchScript extra
file, an ONNX metadata property, :data:`DIGEST_ENTRY`): :func:`read_sidecar` refuses a sidecar edited after
export, and re-indenting the JSON changes nothing.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import torch

from domainpar import __version__
from domainpar.errors import DomainparError, reraise_fault
from domainpar.npzfile import file_sha256
from domainpar.parsing import load_json

#: Identifies a sidecar file.
SIDECAR_FORMAT = "domainpar-edge-classifier"
#: Bumped when the sidecar layout changes incompatibly. 2: ``stages`` (graph, edge filter, classifier); a reader that
#: knows only version 1 would feed the classifier unpruned graphs, so it must refuse these. 3: the model file records
#: the digest of its sidecar (:func:`sidecar_digest`), so an edited sidecar is refused.
SIDECAR_VERSION = 3
#: Versions :func:`read_sidecar` reads: only sidecars their model file vouches for.
READABLE_VERSIONS = (3,)
#: Name under which a model file records its sidecar's digest: a TorchScript extra file, an ONNX metadata property.
DIGEST_ENTRY = "domainpar_sidecar_sha256"
#: Model file formats.
FORMATS = ("torchscript", "onnx")
#: ONNX opset of exported models (>= 16 is needed for ScatterElements with reduction="add").
ONNX_OPSET = 18


def sidecar_path(model_path: str | os.PathLike) -> Path:
    """Where the sidecar of a model file lives: ``<model file>.json``."""
    model_path = Path(model_path)
    return model_path.with_name(model_path.name + ".json")


def sidecar_digest(sidecar: dict[str, Any]) -> str:
    """SHA-256 of everything a sidecar says but the model file's own SHA-256 (which depends on this digest).

    The JSON is canonical (sorted keys, no whitespace), so the digest is that of the content, not of the
    file's layout: re-indenting a sidecar keeps it valid, changing any value (a feature's scale, a threshold,
    a stage) does not.
    """
    content = copy.deepcopy(sidecar)
    if isinstance(content.get("model"), dict):
        content["model"].pop("sha256", None)
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def recorded_digest(model_path: str | os.PathLike, fmt: str) -> str | None:
    """The sidecar digest a model file records (:data:`DIGEST_ENTRY`), None when it records none.

    A TorchScript file is a zip archive whose extra files sit under ``<archive>/extra/``; an ONNX file keeps it
    in its metadata properties (read with ONNX Runtime, which reads the file anyway to run it).
    """
    model_path = Path(model_path)
    if fmt == "torchscript":
        try:
            with zipfile.ZipFile(model_path) as archive:
                names = [n for n in archive.namelist() if n.endswith(f"/extra/{DIGEST_ENTRY}")]
                return archive.read(names[0]).decode("ascii", "replace").strip() if len(names) == 1 else None
        except (zipfile.BadZipFile, OSError, KeyError, ValueError):
            return None
    try:
        import onnxruntime  # optional dependency, present wherever an ONNX file can be run
    except ImportError:
        return None
    try:
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        session = onnxruntime.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        return session.get_modelmeta().custom_metadata_map.get(DIGEST_ENTRY)
    except Exception as exc:  # noqa: BLE001 - a file ONNX Runtime cannot read records nothing
        reraise_fault(exc)
        return None


def build_sidecar(
    *,
    model_name: str,
    model_sha256: str,
    fmt: str,
    model_config: Any,
    description: dict,
    threshold: float,
    threshold_source: str,
    source: dict[str, Any],
    verification: dict[str, Any],
    filter_stage: dict[str, Any] | None = None,
    track_method: str | None = None,
    track_settings: dict | None = None,
) -> dict[str, Any]:
    """The sidecar dict of a freshly written model file (see the module docstring).

    Args:
        filter_stage: the ``edge_filter`` stage of the pipeline (its file, threshold, ...), None without a filter.
        track_method: the track builder the training run recorded, None when it records none.
        track_settings: its other settings the training run recorded (``run.track_settings``).
    """
    node_features = list(description["node_features"])
    edge_features = list(description["edge_features"]) if model_config.edge_inputs else []
    if len(node_features) != model_config.node_features:
        raise DomainparError(
            f"the description of the training graphs lists {len(node_features)} node features but the model "
            f"takes {model_config.node_features}"
        )
    if len(edge_features) != model_config.edge_inputs:
        raise DomainparError(
            f"the description of the training graphs lists {len(edge_features)} edge features but the model "
            f"takes {model_config.edge_inputs}"
        )
    inputs = [
        {"name": "x", "dtype": "float32", "shape": ["N", model_config.node_features], "meaning": "node features, columns as in node_features"},
        {"name": "edge_index", "dtype": "int64", "shape": [2, "E"], "meaning": "row 0: source node, row 1: destination node (see edge_direction)"},
    ]
    if model_config.edge_inputs:
        inputs.append(
            {"name": "edge_attr", "dtype": "float32", "shape": ["E", model_config.edge_inputs], "meaning": "edge features, columns as in edge_features"}
        )
    cuts = description.get("cuts")
    graph_cuts = {k: v for k, v in cuts.items() if k != "edge_filter"} if isinstance(cuts, dict) else cuts
    stages = [
        {
            "stage": "graph",
            "builder": description.get("builder"),
            "cuts": graph_cuts,
            "node_features": [f.get("name") for f in node_features],
            "edge_features": [f.get("name") for f in list(description["edge_features"])],
            "features": "every column is raw / scale as node_features / edge_features describe; domainpar computes them "
            "with domainpar.data.features.compute_features",
            "edge_direction": description.get("edge_direction"),
        }
    ]
    if filter_stage is not None:
        stages.append(filter_stage)
    stages.append(
        {
            "stage": "edge_classifier",
            "file": model_name,
            "format": fmt,
            "inputs": [i["name"] for i in inputs],
            "threshold": threshold,
            "keep": "the edges whose score sigmoid(logit) is above threshold",
        }
    )
    return {
        "format": SIDECAR_FORMAT,
        "version": SIDECAR_VERSION,
        "stages": stages,
        "model": {
            "file": model_name,
            "format": fmt,
            "onnx_opset": ONNX_OPSET if fmt == "onnx" else None,
            "sha256": model_sha256,
        },
        "inputs": inputs,
        "output": {"name": "logits", "dtype": "float32", "shape": ["E"], "meaning": "one logit per edge; score = sigmoid(logit)"},
        "node_features": node_features,
        "edge_features": edge_features,
        "edge_direction": description.get("edge_direction"),
        "threshold": threshold,
        "threshold_source": threshold_source,
        "graph": {"builder": description.get("builder"), "cuts": description.get("cuts")},
        "tracks": {"method": track_method, "settings": dict(track_settings or {})},
        "acts": {
            "stage": "TorchEdgeClassifier" if fmt == "torchscript" else "OnnxEdgeClassifier",
            "cut": threshold,
            "useEdgeFeatures": bool(model_config.edge_inputs),
            "undirected": False,
            "nChunks": 1,
            "note": "inputs are passed positionally in the order of 'inputs'; ACTS applies the sigmoid and the cut",
        },
        "model_config": model_config.to_dict(),
        "source": source,
        "verification": verification,
        "exported_by": {"domainpar": __version__, "torch": torch.__version__},
    }


def _is_saved_checkpoint(path: Path) -> bool:
    """Whether ``path`` is a ``torch.save`` archive (a training checkpoint or model.pt of ``domainpar train``) rather
    than a TorchScript one: both are zips, only TorchScript's holds ``code/``. Read from the zip's directory only."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile, ValueError):
        return False
    return any(name.endswith("/data.pkl") for name in names) and not any("/code/" in name for name in names)


def read_sidecar(model_path: str | os.PathLike) -> dict[str, Any]:
    """The sidecar of a model file, checked against the file.

    Raises:
        DomainparError: no sidecar, not a sidecar of this format/version, or
            written for another file (its SHA-256 differs).
    """
    model_path = Path(model_path)
    path = sidecar_path(model_path)
    if not path.is_file():
        if _is_saved_checkpoint(model_path):
            raise DomainparError(
                f"{model_path}: expected a model written by `domainpar export` (TorchScript or ONNX, with its sidecar "
                f"{path.name}), found a file of torch.save (a checkpoint or model.pt of `domainpar train`, or an edge "
                "filter): give a checkpoint as --checkpoint"
            )
        raise DomainparError(
            f"{model_path}: expected its sidecar {path.name} beside it (written by `domainpar export`; it names the input features and threshold), found none"
        )
    try:
        sidecar = load_json(path, "the JSON sidecar of an exported model")
    except DomainparError:
        raise
    except (UnicodeDecodeError, ValueError) as exc:
        raise DomainparError(f"{path}: expected the JSON sidecar of an exported model, could not read it ({exc})") from None
    if not isinstance(sidecar, dict) or sidecar.get("format") != SIDECAR_FORMAT:
        raise DomainparError(f"{path}: expected a sidecar with format {SIDECAR_FORMAT!r}")
    if sidecar.get("version") not in READABLE_VERSIONS:
        raise DomainparError(
            f"{path}: sidecar version must be one of {list(READABLE_VERSIONS)} (got {sidecar.get('version')!r}); re-export the model"
        )
    try:
        model = sidecar["model"]
        fmt, digest = model["format"], model["sha256"]
        node_features, edge_features = sidecar["node_features"], sidecar["edge_features"]
        threshold = float(sidecar["threshold"])
    except (KeyError, TypeError, ValueError) as exc:
        raise DomainparError(f"{path}: sidecar is missing or has a malformed entry ({exc})") from None
    if fmt not in FORMATS:
        raise DomainparError(f"{path}: model format must be one of {', '.join(FORMATS)} (got {fmt!r})")
    if not isinstance(node_features, list) or not isinstance(edge_features, list):
        raise DomainparError(f"{path}: node_features and edge_features must be lists")
    if not 0.0 < threshold < 1.0:
        raise DomainparError(f"{path}: threshold must be in (0, 1) (got {threshold})")
    found = file_sha256(model_path)
    if found != digest:
        raise DomainparError(
            f"{model_path}: the model file does not match its sidecar {path.name} (SHA-256 {found[:12]}…, sidecar says {str(digest)[:12]}…); re-export both"
        )
    vouched, content = recorded_digest(model_path, fmt), sidecar_digest(sidecar)
    if vouched != content:
        recorded = "records no sidecar digest" if vouched is None else f"records sidecar digest {vouched[:12]}…"
        raise DomainparError(
            f"{path}: expected the sidecar its model file {model_path.name} records (digest of every field: features and "
            f"their scales, thresholds, stages, cuts), got one with digest {content[:12]}… while the model {recorded}; the "
            "sidecar was edited after export: restore it, or re-export the model"
        )
    stage = filter_stage(sidecar)
    if stage is not None:
        try:
            filter_file = model_path.with_name(str(stage["file"]))
            float(stage["threshold"])
            expected = stage["sha256"]
        except (KeyError, TypeError, ValueError) as exc:
            raise DomainparError(f"{path}: sidecar stage edge_filter is missing or has a malformed entry ({exc})") from None
        if not filter_file.is_file():
            raise DomainparError(f"{model_path}: expected its edge filter {filter_file.name} beside it (the sidecar's edge_filter stage), found none")
        found = file_sha256(filter_file)
        if found != expected:
            raise DomainparError(
                f"{filter_file}: the edge filter does not match the sidecar {path.name} (SHA-256 {found[:12]}…, sidecar says "
                f"{str(expected)[:12]}…); re-export both"
            )
    return sidecar


def _stage(sidecar: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((s for s in sidecar.get("stages") or [] if isinstance(s, dict) and s.get("stage") == name), None)


def filter_stage(sidecar: dict[str, Any]) -> dict[str, Any] | None:
    """The ``edge_filter`` stage of a sidecar, None when its pipeline has none."""
    return _stage(sidecar, "edge_filter")


def graph_stage(sidecar: dict[str, Any]) -> dict[str, Any]:
    """The ``graph`` stage of a sidecar (every sidecar :func:`read_sidecar` reads has one; empty otherwise)."""
    return _stage(sidecar, "graph") or {}


def feature_names(features: list[dict[str, Any]]) -> list[str]:
    """The column names of a sidecar's ``node_features`` / ``edge_features``."""
    return [str(f.get("name")) if isinstance(f, dict) else str(f) for f in features]

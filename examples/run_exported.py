"""Run an exported pipeline the way a deployment does: raw TrackML CSVs in, selected edges out.

``domainpar export`` writes the trained pipeline as model files and one
sidecar JSON whose ``stages`` say what to run, in order:

1. ``graph``: build the event's candidate edges with the recorded cuts and
   compute the named node and edge features (column = raw / scale);
2. ``edge_filter`` (when the training graphs were pruned): run the filter's
   file on ``(x, edge_index, edge_attr)`` and keep the edges whose logit is at
   least its threshold — the classifier never saw the others in training;
3. ``edge_classifier``: run the model file on the pruned graph and keep the
   edges whose score ``sigmoid(logit)`` is above its threshold.

This script does exactly that for one event. The graph construction and the
features come from domainpar (:func:`domainpar.data.graph.build_graph` with the
sidecar's cuts, and :func:`domainpar.data.features.compute_features`, the one
function that computes every named feature in training, inference and here);
the two model files run in their own runtimes (ONNX Runtime with one intra-op
thread, as ACTS's ``OnnxEdgeClassifier``, or ``torch.jit.load``), as a C++ host
would run them:

    python examples/run_exported.py --model model.onnx --event tests/data/trackml/event000000001

With ``--graph FILE`` it also compares the pipeline's graph and inputs with a
graph file built (and pruned) like the training graphs: same edges, features
equal to float32 rounding.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from domainpar.data.features import CELL_NODE_FEATURES, compute_features
from domainpar.data.graph import GraphConfig, build_graph
from domainpar.data.trackml import load_event
from domainpar.errors import DomainparError
from domainpar.export.sidecar import read_sidecar


def stage_of(sidecar: dict, name: str) -> dict | None:
    """The stage ``name`` of the sidecar's pipeline (None when it has none)."""
    return next((stage for stage in sidecar.get("stages", []) if stage["stage"] == name), None)


def run_model(path: Path, fmt: str, inputs: list[np.ndarray]) -> np.ndarray:
    """(E,) float32 logits of a model file on ``inputs`` (passed positionally, as ACTS does)."""
    if fmt == "onnx":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        return session.run(None, dict(zip(names, inputs)))[0]
    import torch

    module = torch.jit.load(str(path))
    with torch.no_grad():
        return module(*[torch.from_numpy(a) for a in inputs]).numpy()


def graph_stage(sidecar: dict, event: str):
    """Stage 1: the event's hits, its candidate edges (the recorded cuts) and the named features of both."""
    stage = stage_of(sidecar, "graph")
    config = GraphConfig.from_dict(stage["cuts"], source="sidecar graph stage")
    needs_cells = any(name in CELL_NODE_FEATURES for name in stage["node_features"])
    hits, *rest = load_event(event, parts=("hits", "cells") if needs_cells else ("hits",))
    cells = rest[0] if rest else None
    # Graph construction is the host's own stage; here it is domainpar's, with the training graphs' cuts.
    graph, _ = build_graph(hits, cells=cells, config=config)
    x, edge_attr = compute_features(
        stage["node_features"], stage["edge_features"], graph.hit_id, graph.pos, graph.edge_index, cells
    )
    return graph, x, graph.edge_index, edge_attr


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="model.onnx or model.pt written by `domainpar export`")
    parser.add_argument("--event", required=True, help="TrackML event prefix, e.g. tests/data/trackml/event000000001")
    parser.add_argument("--graph", type=Path, default=None,
                        help="a graph file built (and pruned) like the training graphs, to compare the pipeline's graph with")
    args = parser.parse_args(argv)

    try:
        # The checks a host must make too: the sidecar's version, the model's and filter's SHA-256, and the digest
        # of every field (features, scales, thresholds) that the model file records.
        sidecar = read_sidecar(args.model)
    except DomainparError as exc:
        raise SystemExit(f"error: {exc}") from None
    graph, x, edge_index, edge_attr = graph_stage(sidecar, args.event)
    num_candidates = edge_index.shape[1]

    filter_stage = stage_of(sidecar, "edge_filter")
    if filter_stage is not None:
        filter_file = args.model.with_name(filter_stage["file"])
        filter_logits = run_model(filter_file, filter_stage["format"], [x, edge_index.astype(np.int64), edge_attr])
        keep = filter_logits >= filter_stage["threshold"]
        edge_index, edge_attr = np.ascontiguousarray(edge_index[:, keep]), np.ascontiguousarray(edge_attr[keep])

    classifier = stage_of(sidecar, "edge_classifier")
    inputs = [x, edge_index.astype(np.int64)] + ([edge_attr] if "edge_attr" in classifier["inputs"] else [])
    logits = run_model(args.model, classifier["format"], inputs)
    scores = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    selected = scores > classifier["threshold"]
    result = {
        "num_nodes": int(x.shape[0]),
        "num_candidates": int(num_candidates),
        "num_edges": int(edge_index.shape[1]),
        "threshold": classifier["threshold"],
        "edges_kept": int(selected.sum()),
        "hit_id": graph.hit_id,
        "edge_index": edge_index,
        "logits": logits,
    }
    kept_by = f", {result['num_edges']} after the edge filter" if filter_stage is not None else ""
    print(f"{result['num_nodes']} hits, {num_candidates} candidate edges{kept_by}, {result['edges_kept']} above "
          f"{classifier['threshold']:g}")  # fmt: skip
    if args.graph is not None:
        with np.load(args.graph, allow_pickle=False) as stored:
            same_edges = np.array_equal(stored["edge_index"], edge_index) and np.array_equal(stored["hit_id"], graph.hit_id)
            result["same_edges"] = bool(same_edges)
            result["max_diff_x"] = float(np.max(np.abs(stored["x"] - x)))
            if same_edges:
                result["max_diff_edge_attr"] = float(np.max(np.abs(stored["edge_attr"] - edge_attr))) if edge_attr.size else 0.0
        print(f"against {args.graph}: same edges {result['same_edges']}, max |x difference| {result['max_diff_x']:.2g}"
              + (f", max |edge_attr difference| {result['max_diff_edge_attr']:.2g}" if same_edges else ""))
    return result


if __name__ == "__main__":
    main()

"""Run an exported edge classifier the way a deployment does: inputs rebuilt from the sidecar alone.

This is what the C++ side (ACTS's ExaTrkX edge-classifier stage, or any ONNX
Runtime / libtorch host) has to do, written in Python with numpy, pandas and
the model's runtime only — no domainpar import. It reads a TrackML event's
hits (and cells, for models with cell features), computes every input column
from the sidecar's ``raw`` quantity and ``scale`` (column = raw / scale), takes
the candidate edges of the event's graph file (graph construction is the
host's own stage; here it is ``domainpar build``'s output), runs the model and
applies the sidecar's threshold:

    python examples/run_exported.py --model model.onnx --event data/event000000001 --graph graphs/event000000001.npz

With ``--check`` it also compares the rebuilt inputs with the graph file's own
``x`` and ``edge_attr`` (they must agree to float32 rounding).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd


def read_csv(prefix: str, part: str) -> pd.DataFrame:
    for suffix in (".csv", ".csv.gz"):
        path = Path(f"{prefix}-{part}{suffix}")
        if path.is_file():
            return pd.read_csv(path)
    raise SystemExit(f"error: no {part} file for {prefix}")


def node_columns(prefix: str, hit_id: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    """The raw per-hit quantities the sidecar may name, in float64, in ``hit_id`` order."""
    hits = read_csv(prefix, "hits").set_index("hit_id").loc[hit_id]
    x, y, z = (hits[c].to_numpy(np.float64) for c in ("x", "y", "z"))
    raw = {"r": np.hypot(x, y), "phi": np.arctan2(y, x), "z": z}
    if {"cell_count", "cell_charge"} & set(names):
        cells = read_csv(prefix, "cells")
        raw["cell_count"] = cells.groupby("hit_id").size().reindex(hit_id, fill_value=0).to_numpy(np.float64)
        raw["cell_charge"] = cells.groupby("hit_id")["value"].sum().reindex(hit_id, fill_value=0.0).to_numpy(np.float64)
    return raw


def edge_columns(raw: dict[str, np.ndarray], edge_index: np.ndarray) -> dict[str, np.ndarray]:
    """The raw per-edge quantities (src = inner hit, dst = outer hit)."""
    src, dst = edge_index
    r, phi, z = raw["r"], raw["phi"], raw["z"]
    dphi = np.mod(phi[dst] - phi[src] + np.pi, 2 * np.pi) - np.pi
    eta = np.arcsinh(z / np.maximum(r, 1e-9))
    return {"dr": r[dst] - r[src], "dphi": dphi, "dz": z[dst] - z[src], "dR": np.hypot(eta[dst] - eta[src], dphi)}


def build_inputs(sidecar: dict, prefix: str, hit_id: np.ndarray, edge_index: np.ndarray) -> list[np.ndarray]:
    """``[x, edge_index(, edge_attr)]`` in the model's calling order, dtypes as the sidecar says."""
    node_names = [f["name"] for f in sidecar["node_features"]]
    raw = node_columns(prefix, hit_id, node_names)
    x = np.stack([raw[f["name"]] / f["scale"] for f in sidecar["node_features"]], axis=1).astype(np.float32)
    inputs = [x, edge_index.astype(np.int64)]
    if sidecar["edge_features"]:
        edges = edge_columns(raw, edge_index)
        inputs.append(np.stack([edges[f["name"]] / f["scale"] for f in sidecar["edge_features"]], axis=1).astype(np.float32))
    return inputs


def run_model(model: Path, fmt: str, inputs: list[np.ndarray]) -> np.ndarray:
    if fmt == "onnx":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        return session.run(None, dict(zip(names, inputs)))[0]
    import torch

    module = torch.jit.load(str(model))
    with torch.no_grad():
        return module(*[torch.from_numpy(a) for a in inputs]).numpy()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="model.onnx or model.pt written by `domainpar export`")
    parser.add_argument("--event", required=True, help="TrackML event prefix, e.g. data/event000000001")
    parser.add_argument("--graph", type=Path, required=True, help="the event's graph file (candidate edges and hit ids)")
    parser.add_argument("--check", action="store_true", help="compare the rebuilt inputs with the graph file's x and edge_attr")
    args = parser.parse_args(argv)

    sidecar = json.loads(Path(f"{args.model}.json").read_text())
    with np.load(args.graph, allow_pickle=False) as graph:
        hit_id, edge_index = graph["hit_id"], graph["edge_index"]
        stored = {"x": graph["x"], "edge_attr": graph["edge_attr"]}
    inputs = build_inputs(sidecar, args.event, hit_id, edge_index)
    logits = run_model(args.model, sidecar["model"]["format"], inputs)
    scores = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    kept = scores > sidecar["threshold"]
    result = {
        "num_nodes": int(inputs[0].shape[0]),
        "num_edges": int(edge_index.shape[1]),
        "threshold": sidecar["threshold"],
        "edges_kept": int(kept.sum()),
        "logits": logits,
    }
    print(f"{result['num_nodes']} hits, {result['num_edges']} edges, {result['edges_kept']} above {sidecar['threshold']:g}")
    if args.check:
        result["max_diff_x"] = float(np.max(np.abs(inputs[0] - stored["x"])))
        print(f"x rebuilt from the sidecar: max |difference| to the graph file {result['max_diff_x']:.2g}")
        if len(inputs) == 3:
            result["max_diff_edge_attr"] = float(np.max(np.abs(inputs[2] - stored["edge_attr"])))
            print(f"edge_attr rebuilt from the sidecar: max |difference| {result['max_diff_edge_attr']:.2g}")
    return result


if __name__ == "__main__":
    main()

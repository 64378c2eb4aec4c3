"""Every numba kernel of the package, called the way an event's chain calls it, in a process of its own.

The workload of ``tests/kernels/test_numba_cache.py`` (``all``: a second process must compile none of them) and
the suite's warm-up (``tests/conftest.py``): on a cold cache (a clean clone, or an edited kernel module) the two
halves, ``model`` (graph build with triplet and cluster features, the edge filter's input rows, the fused row
kernels of the model forward and backward for every activation and dtype, segment reductions) and ``tracks`` (graph build, every track
builder), compile everything once, side by side, before the workers start. Without it every process that
reaches a kernel before its cache entry exists compiles it too: at the start of a clean-clone run two
workers and their spawned ranks each compiled the same kernels (~180 CPU s a copy).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

#: The halves of the workload; ``all`` runs both in one process.
PARTS = ("model", "tracks")

WORKLOAD = r"""
import json, sys, time
started = time.perf_counter()
import numpy as np
import torch
from numba.core import event

from domainpar.data.graph import GraphConfig, build_graph
from domainpar.data.trackml import load_event
from domainpar.kernels import rownorm
from domainpar.model.config import ModelConfig
from domainpar.model.registry import build_model
from domainpar.parallel.part import rank_part
from domainpar.tracks.candidates import build_candidates
from domainpar.tracks.config import TrackConfig
from domainpar.tracks.methods import METHODS

part = sys.argv[2]
torch.set_num_threads(1)
torch.manual_seed(0)  # the same weights, so the same scores and the same code paths in every process
compiled = []
with event.install_recorder("numba:compile") as recorder:
    hits, cells = load_event(sys.argv[1], parts=("hits", "cells"))
    config = GraphConfig(node_features=("r", "phi", "z", "cell_count", "cell_charge", "cluster_u", "cluster_v"),
                         edge_features=("dr", "dphi", "dz", "dR", "curvature", "out_dalpha", "in_dalpha"))
    graph, _ = build_graph(hits, cells=cells, config=config, event_id=1)
    if part in ("model", "all"):
        for activation in ("silu", "relu"):
            model = build_model(ModelConfig(node_features=graph.x.shape[1], edge_features=graph.edge_attr.shape[1],
                                            hidden=8, num_iterations=1, activation=activation, layer_norm=True))
            rp = rank_part(graph)
            logits = model(rp.graph, rp.exchange)
            logits.sum().backward()
            with torch.no_grad():  # inference streams: its in-place gather and shared segment sums
                model(rp.graph, rp.exchange)
        from domainpar.kernels.filter_rows import logit_rows, standardised_rows  # the edge filter's rows

        filter_rows = np.empty((16, 8), np.float32)
        standardised_rows(np.ascontiguousarray(graph.x[:, :3]), np.ascontiguousarray(graph.edge_index[0]),
                          np.ascontiguousarray(graph.edge_index[1]), graph.edge_attr, np.arange(2),
                          np.zeros(8, np.float32), np.ones(8, np.float32), 0, 16, filter_rows)
        rownorm.layer_norm_rows(filter_rows, np.zeros(8, np.float32), np.ones(8, np.float32), np.zeros(8, np.float32), 1e-5)
        logit_rows(filter_rows, np.ones(8, np.float32), np.float32(0.0), np.empty(16, np.float32))
        rows = np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32)
        for name, code in rownorm.ACTIVATION_CODES.items():
            for dtype in (np.float32, np.float64):
                z = rows.astype(dtype)
                out, grad = np.empty_like(z), np.empty_like(z)
                gamma, beta = np.ones(8, dtype), np.zeros(8, dtype)
                rownorm.ln_act_forward(z, gamma, beta, 1e-5, code, 0.1, out)
                rownorm.ln_act_backward(z, gamma, beta, 1e-5, code, 0.1, np.ones_like(z), grad)
    if part in ("tracks", "all"):
        if part == "all":
            scores = 1.0 / (1.0 + np.exp(-logits.detach().double().numpy()))
        else:  # the builders' kernels compile for the scores' type (float64), whatever their values
            scores = np.random.default_rng(0).uniform(size=graph.num_edges)
        for method in METHODS:
            build_candidates(graph.pos, graph.layer, graph.edge_index, scores, TrackConfig(method=method))
for _, data in recorder.buffer:
    dispatcher = data.data["dispatcher"]
    name = f"{dispatcher.py_func.__module__}.{dispatcher.py_func.__qualname__}"
    if name.startswith("domainpar.") and name not in compiled:
        compiled.append(name)
# Every kernel the workload reached, compiled here or read from the cache.
from numba.core.registry import CPUDispatcher
reached = sorted(
    f"{module_name}.{attr}" for module_name, module in list(sys.modules.items()) if module_name.startswith("domainpar.")
    for attr, value in vars(module).items() if isinstance(value, CPUDispatcher) and value.signatures
)
print(json.dumps({"compiled": compiled, "reached": reached, "seconds": time.perf_counter() - started}))
"""


def start(repo: Path, event: Path, part: str, **popen) -> subprocess.Popen:
    """The workload's ``part`` (``model``, ``tracks`` or ``all``) in a new process; one JSON line on its stdout."""
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", WORKLOAD, str(event), part], env=env, text=True, **popen)


def cache_is_cold(repo: Path) -> bool:
    """Whether some module with cached numba kernels has no cache index at least as new as its source (numba
    then compiles them): a clean clone, or an edited kernel module. A custom ``NUMBA_CACHE_DIR`` is not looked at."""
    for source in (repo / "domainpar").rglob("*.py"):
        if "cache=True" not in source.read_text():
            continue
        indexes = list((source.parent / "__pycache__").glob(f"{source.stem}.*.nbi"))
        if not indexes or max(p.stat().st_mtime for p in indexes) < source.stat().st_mtime:
            return True
    return False


def warm(repo: Path, event: Path, timeout_s: float = 900.0) -> str:
    """Both halves side by side; a line saying what was done (a failure is the tests' to show, not this)."""
    started = time.perf_counter()
    processes = [start(repo, event, part, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for part in PARTS]
    codes = []
    for process in processes:
        try:
            codes.append(process.wait(timeout=max(1.0, timeout_s - (time.perf_counter() - started))))
        except subprocess.TimeoutExpired:
            process.kill()
            codes.append("timeout")
    return f"numba kernels compiled into the cache in {time.perf_counter() - started:.0f} s (exit {codes})"

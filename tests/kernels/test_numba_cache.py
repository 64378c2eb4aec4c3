"""numba's on-disk cache serves every kernel to a second process: it starts its first event compiling nothing.

A process runs a workload that calls every numba kernel of the package the way an event's chain does (graph
build with triplet and cluster features, the fused row kernels of the model forward and backward for every
activation, segment reductions, walk-through, track fits); a second process with the same cache directory
runs it again and records numba's compile events. Before the fix, the row kernels (``kernels/rownorm``)
took the activation as a first-class function argument, whose type is keyed by the dispatcher object's
identity in the compiling process: their cache never hit, and every process compiled them again (5–15 s each).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import EVENT1, REPO

pytestmark = pytest.mark.slow

#: Every kernel a reconstruction or a training step calls, through the public functions that call them.
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

torch.set_num_threads(1)
torch.manual_seed(0)  # the same weights, so the same scores and the same code paths in both processes
compiled = []
with event.install_recorder("numba:compile") as recorder:
    hits, cells = load_event(sys.argv[1], parts=("hits", "cells"))
    config = GraphConfig(node_features=("r", "phi", "z", "cell_count", "cell_charge", "cluster_u", "cluster_v"),
                         edge_features=("dr", "dphi", "dz", "dR", "curvature", "out_dalpha", "in_dalpha"))
    graph, _ = build_graph(hits, cells=cells, config=config, event_id=1)
    for activation in ("silu", "relu"):
        model = build_model(ModelConfig(node_features=graph.x.shape[1], edge_features=graph.edge_attr.shape[1], hidden=8,
                                        num_iterations=1, activation=activation, layer_norm=True))
        rp = rank_part(graph)
        logits = model(rp.graph, rp.exchange)
        logits.sum().backward()
    rows = np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32)
    for name, code in rownorm.ACTIVATION_CODES.items():
        for dtype in (np.float32, np.float64):
            z = rows.astype(dtype)
            out, grad = np.empty_like(z), np.empty_like(z)
            gamma, beta = np.ones(8, dtype), np.zeros(8, dtype)
            rownorm.ln_act_forward(z, gamma, beta, 1e-5, code, 0.1, out)
            rownorm.ln_act_backward(z, gamma, beta, 1e-5, code, 0.1, np.ones_like(z), grad)
    scores = 1.0 / (1.0 + np.exp(-logits.detach().double().numpy()))
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


def _run(cache: Path | None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if cache is not None:
        env["NUMBA_CACHE_DIR"] = str(cache)
    done = subprocess.run([sys.executable, "-c", WORKLOAD, str(EVENT1)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_second_process_compiles_no_kernel():
    """numba's own cache, where every process of a user finds it (beside the sources). The first process compiles
    what no earlier process of the suite has cached (on a cold cache: every kernel, ~150 s on 2 cores) and must
    reach the row kernels, segment reductions and track builders; the second must compile none of them."""
    first = _run(None)
    for family in ("rownorm", "segments", "track_ckf", "track_fit"):  # the workload reaches them
        assert any(name.startswith(f"domainpar.kernels.{family}.") for name in first["reached"]), (family, first)
    second = _run(None)
    assert second["compiled"] == [], f"compiled again in a second process: {second['compiled']}"
    assert second["reached"] == first["reached"]

"""Shared test fixtures: where the test data is, and the synthetic event graphs the tests build.

``tests/conftest.py`` puts this directory on ``sys.path`` (pytest's default
import mode), so any test module can ``from fixtures import ...``.

The graph builders, from smallest to most realistic:

* :func:`tiny_graph` — a few straight track chains written to a file (CLI tests).
* :func:`random_graph` — uniformly random edges and features (partitioner and model edge cases).
* :func:`synthetic_graph` / :func:`write_graphs` — labelled outward edges on random hits (training tests).
* :func:`hits_graph` — a real TrackML hits file joined by (eta, phi) windows: a stand-in for the
  graph builder with a real event's topology, so partitioners see what they see in production.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.spatial import cKDTree

from domainpar.data.detector import layer_index_of
from domainpar.data.event_graph import EventGraph, save_graph
from domainpar.data.graph import GraphConfig

#: The repository's root.
REPO = Path(__file__).resolve().parent.parent
#: The real labelled TrackML event 000000001 shipped with the tests (see its README).
TRACKML_DIR = REPO / "tests" / "data" / "trackml"
#: Prefix of that event's files.
EVENT1 = TRACKML_DIR / "event000000001"
#: Real full-occupancy data outside the repository (event 21000): $DOMAINPAR_TRACKML_DIR, else ../shared/data/trackml.
SHARED_TRACKML = Path(os.environ.get("DOMAINPAR_TRACKML_DIR", REPO.parent / "shared" / "data" / "trackml"))
#: Prefix of the full real event, present only where SHARED_TRACKML is.
FULL_EVENT = SHARED_TRACKML / "event000021000"


def trained_event1_checkpoint(directory: Path, hidden: int = 16, iterations: int = 2, **recorded) -> Path:
    """A small Interaction Network trained for 20 steps on real event 1, saved with the trainer's checkpoint writer
    under ``directory/checkpoints`` (one process, whole graph); its path. ``recorded``: training settings the
    checkpoint records by dotted name (``**{"run.track_method": "walk"}``)."""
    import torch

    from domainpar.data.graph import build_graph
    from domainpar.data.trackml import load_event
    from domainpar.model.config import ModelConfig
    from domainpar.model.loss import edge_loss
    from domainpar.model.registry import build_model
    from domainpar.partition.local_graph import local_graph
    from domainpar.partition.plan import build_plan
    from domainpar.train.checkpoint import CHECKPOINT_FORMAT_VERSION, save_checkpoint
    from domainpar.train.config import TrainConfig

    hits, particles, truth = load_event(EVENT1, parts=("hits", "particles", "truth"))
    graph, _ = build_graph(hits, truth, particles, event_id=1)
    local = local_graph(graph, build_plan(graph.edge_index, np.zeros(graph.num_nodes, np.int64), 1, y=graph.y).parts[0])
    torch.manual_seed(0)
    config = ModelConfig(hidden=hidden, num_iterations=iterations)
    model = build_model(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(20):
        optimizer.zero_grad()
        edge_loss(model(local), local, pos_weight=2.0).backward()
        optimizer.step()
    state = {
        "format_version": CHECKPOINT_FORMAT_VERSION,
        "step": 20,
        "epoch": 1,
        "step_in_epoch": 0,
        "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "model_config": config.to_dict(),
        "optimizer": optimizer.state_dict(),
        "config": TrainConfig().replace(**recorded).to_dict(),
    }
    return save_checkpoint(state, directory / "checkpoints", keep=1)


#: Graph cuts and features like the physics recipe's (cluster features from the cells, extra edge features).
PRUNED_GRAPH = GraphConfig(
    phi_slope_max=0.002, dphi_margin=0.005, node_features=("r", "phi", "z", "cell_count", "cluster_u"),
    edge_features=("dr", "dphi", "dz", "dR", "phi_slope", "z0"),
)


def edge_filter_of(graph):
    """An edge filter reading positions and edge features, thresholded to keep ~60 % of ``graph``'s edges."""
    import torch

    from domainpar.filter.edge_filter import EdgeFilter, FilterConfig, FilterNet, edge_inputs

    config = FilterConfig(hidden=8, layers=2, node_features=("r", "phi", "z"))
    inputs = torch.from_numpy(edge_inputs(graph, np.array([0, 1, 2]), None))
    torch.manual_seed(3)
    net = FilterNet(inputs.shape[1], 8, 2)
    net.mean.copy_(inputs.mean(dim=0))
    net.scale.copy_(inputs.std(dim=0).clamp_min(1e-6))
    net.eval()
    with torch.no_grad():
        threshold = float(np.quantile(net(inputs).numpy(), 0.4))
    return EdgeFilter(net, threshold, graph.node_features, graph.edge_features, config, {"holdout_efficiency": 0.9})


def pruned_recipe_run(root: Path) -> dict[str, Path]:
    """A recipe-like run under ``root``: event 1's graph built (``graphs/``) and pruned by an edge filter
    (``filtered/``, ``filter.pt``), a model 'trained' on the pruned graph (random weights: ``train/model.pt``, and
    ``train/before.pt`` as written before checkpoints recorded their data), event 1's raw files in ``events/``."""
    import torch

    from domainpar.data.dataset import build_dataset
    from domainpar.data.graph_files import load_graph, read_graph_description
    from domainpar.model.config import ModelConfig
    from domainpar.model.registry import build_model, check_config
    from domainpar.train.checkpoint import CHECKPOINT_FORMAT_VERSION, write_checkpoint

    build_dataset(TRACKML_DIR, root / "graphs", PRUNED_GRAPH, progress=False)
    graph = load_graph(root / "graphs" / "event000000001.npz")
    edge_filter = edge_filter_of(graph)
    edge_filter.save(root / "filter.pt")
    # The pruned graph is written without a description, as the recipes write them.
    save_graph(edge_filter.apply(graph), root / "filtered" / "event000000001.npz")
    pruned = load_graph(root / "filtered" / "event000000001.npz")
    config = check_config(ModelConfig(node_features=5, edge_features=6, hidden=16, num_iterations=2))
    torch.manual_seed(0)
    model = build_model(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.2 * torch.randn_like(parameter))
    # What the trainer writes into model.pt (before this change 'data' was None for pruned graphs).
    state = {
        "format_version": CHECKPOINT_FORMAT_VERSION, "step": 1, "model": model.state_dict(), "model_config": config.to_dict(),
        "graph": {"node_features": list(pruned.node_features), "edge_features": list(pruned.edge_features),
                  "build_config": pruned.build_config},
        "data": read_graph_description(root / "filtered" / "event000000001.npz"),
    }  # fmt: skip
    write_checkpoint(state, root / "train" / "model.pt")
    write_checkpoint({**state, "data": None}, root / "train" / "before.pt")
    (root / "events").mkdir()
    return {"root": root, "checkpoint": root / "train" / "model.pt", "before": root / "train" / "before.pt",
            "filter": root / "filter.pt", "events": copy_event1(root / "events")}  # fmt: skip


def copy_event1(directory: Path) -> Path:
    """The real labelled event 000000001 alone in ``directory`` (raw TrackML layout: hits, cells, particles, truth)."""
    import shutil

    for part in ("hits", "cells", "particles", "truth"):
        shutil.copy(f"{EVENT1}-{part}.csv.gz", directory)
    return directory


def tiny_graph(path: Path, labels: bool = True, num_tracks: int = 6, hits_per_track: int = 5) -> Path:
    """A small labelled graph: ``num_tracks`` straight chains of hits, one hit per layer."""
    rng = np.random.default_rng(0)
    num_nodes = num_tracks * hits_per_track
    track = np.repeat(np.arange(num_tracks), hits_per_track)
    layer = np.tile(np.arange(hits_per_track), num_tracks)
    phi = 2 * np.pi * track / num_tracks + 0.01 * layer
    r = 50.0 + 100.0 * layer
    pos = np.stack([r * np.cos(phi), r * np.sin(phi), 10.0 * layer + rng.normal(0, 1, num_nodes)], axis=1).astype(np.float32)
    ids = np.arange(num_nodes).reshape(num_tracks, hits_per_track)
    src, dst = ids[:, :-1].ravel(), ids[:, 1:].ravel()
    # a few fake cross-track edges so the labels are not all 1
    src = np.concatenate([src, ids[:-1, 0]])
    dst = np.concatenate([dst, ids[1:, 1]])
    edge_index = np.stack([src, dst]).astype(np.int64)
    x = np.stack([r / 1000.0, phi / np.pi, pos[:, 2] / 1000.0], axis=1).astype(np.float32)
    delta = x[edge_index[1]] - x[edge_index[0]]
    edge_attr = np.concatenate([delta, np.linalg.norm(delta, axis=1, keepdims=True)], axis=1).astype(np.float32)
    y = (track[edge_index[0]] == track[edge_index[1]]).astype(np.float32) if labels else None
    graph = EventGraph(
        event_id=7, x=x, pos=pos, hit_id=np.arange(1, num_nodes + 1, dtype=np.int64), layer=layer.astype(np.int64),
        edge_index=edge_index, edge_attr=edge_attr, y=y,
        particle_id=(track + 1).astype(np.int64) if labels else None,
        particle_pt=np.full(num_nodes, 2.0, dtype=np.float32) if labels else None,
    )  # fmt: skip
    save_graph(graph, path)
    return path


def hits_graph(hits_csv: str | Path, *, window: float = 0.04, labels: bool = True, event_id: int = 0) -> EventGraph:
    """EventGraph of a TrackML hits file with (eta, phi)-window edges between layers."""
    hits = pd.read_csv(hits_csv)
    pos = hits[["x", "y", "z"]].to_numpy(np.float32)
    r = np.hypot(pos[:, 0], pos[:, 1])
    phi = np.arctan2(pos[:, 1], pos[:, 0])
    eta = np.arcsinh(pos[:, 2] / np.maximum(r, 1e-3))
    dist = np.sqrt(r.astype(np.float64) ** 2 + pos[:, 2].astype(np.float64) ** 2)
    layer = layer_index_of(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy())
    tree = cKDTree(np.stack([eta / 2.0, phi], axis=1))
    pairs = tree.query_pairs(window, output_type="ndarray")
    a, b = pairs[:, 0], pairs[:, 1]
    keep = (layer[a] != layer[b]) & (np.abs(dist[a] - dist[b]) < 250.0)
    a, b = a[keep], b[keep]
    swap = dist[a] > dist[b]
    src = np.where(swap, b, a).astype(np.int64)
    dst = np.where(swap, a, b).astype(np.int64)
    order = np.lexsort((dst, src))
    edge_index = np.stack([src[order], dst[order]])
    x = np.stack([r / 1000.0, phi / np.pi, pos[:, 2] / 1000.0], axis=1).astype(np.float32)
    edge_attr = (x[edge_index[1]] - x[edge_index[0]])
    edge_attr = np.concatenate([edge_attr, np.linalg.norm(edge_attr, axis=1, keepdims=True)], axis=1).astype(np.float32)
    y = None
    particle_id = None
    truth_csv = Path(str(hits_csv).replace("-hits.", "-truth."))
    if labels and truth_csv.exists():
        truth = pd.read_csv(truth_csv)
        particle_id = truth["particle_id"].to_numpy(np.int64)
        same = (particle_id[edge_index[0]] == particle_id[edge_index[1]]) & (particle_id[edge_index[0]] != 0)
        y = same.astype(np.float32)
    return EventGraph(
        event_id=event_id,
        x=x,
        pos=pos,
        hit_id=hits["hit_id"].to_numpy(np.int64),
        layer=layer.astype(np.int64),
        edge_index=edge_index,
        edge_attr=edge_attr,
        y=y,
        particle_id=particle_id,
    )


def random_graph(num_nodes: int, num_edges: int, seed: int = 0, *, labels: bool = True) -> EventGraph:
    """EventGraph with uniformly random edges (self-loops and duplicates allowed) and random positions."""
    rng = np.random.default_rng(seed)
    edge_index = rng.integers(0, max(num_nodes, 1), size=(2, num_edges), dtype=np.int64) if num_nodes else np.zeros((2, 0), np.int64)
    pos = (rng.normal(size=(num_nodes, 3)) * [300.0, 300.0, 1000.0]).astype(np.float32)
    return EventGraph(
        event_id=seed,
        x=rng.normal(size=(num_nodes, 3)).astype(np.float32),
        pos=pos,
        hit_id=np.arange(1, num_nodes + 1, dtype=np.int64),
        layer=rng.integers(0, 48, size=num_nodes, dtype=np.int64),
        edge_index=edge_index,
        edge_attr=rng.normal(size=(num_edges, 4)).astype(np.float32),
        y=(rng.random(num_edges) < 0.3).astype(np.float32) if labels else None,
    )


def synthetic_graph(event_id: int, seed: int, num_nodes: int = 90, num_candidates: int = 360) -> EventGraph:
    """Hits on random radii/angles; candidate edges point outwards; an edge is "true" when its Δφ is small."""
    rng = np.random.default_rng(seed)
    r = rng.uniform(30, 1000, num_nodes).astype(np.float32)
    phi = rng.uniform(-np.pi, np.pi, num_nodes).astype(np.float32)
    z = rng.uniform(-1000, 1000, num_nodes).astype(np.float32)
    pos = np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1).astype(np.float32)
    src = rng.integers(0, num_nodes, num_candidates)
    dst = rng.integers(0, num_nodes, num_candidates)
    outward = r[src] < r[dst]
    src, dst = src[outward], dst[outward]
    dphi = np.abs(np.angle(np.exp(1j * (phi[dst] - phi[src]))))
    y = (dphi < 0.6).astype(np.float32)
    x = np.stack([r / 1000, phi / np.pi, z / 1000], axis=1).astype(np.float32)
    edge_attr = np.stack(
        [(r[dst] - r[src]) / 1000, dphi / np.pi, (z[dst] - z[src]) / 1000, np.hypot(r[dst] - r[src], z[dst] - z[src]) / 1000],
        axis=1,
    ).astype(np.float32)
    return EventGraph(
        event_id=event_id,
        x=x,
        pos=pos,
        hit_id=np.arange(1, num_nodes + 1, dtype=np.int64),
        layer=np.zeros(num_nodes, dtype=np.int64),
        edge_index=np.stack([src, dst]).astype(np.int64),
        edge_attr=edge_attr,
        y=y,
    )


def write_graphs(directory: Path, num_events: int, first_id: int = 0, seed: int = 0) -> list[Path]:
    """``num_events`` graphs of growing size in ``directory`` (event ids first_id ..)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(num_events):
        graph = synthetic_graph(first_id + i, seed * 1000 + i, num_nodes=70 + 6 * i, num_candidates=260 + 30 * i)
        paths.append(save_graph(graph, directory / f"event{first_id + i:09d}.npz"))
    return paths


#: The settings of :func:`checkpointed_run_config`: a small single-process run with a checkpoint at every step.
CHECKPOINTED_RUN = {
    "parallel.mode": "single",
    "run.epochs": 2,
    "optim.batch_events": 1,
    "run.checkpoint_every": 1,
    "run.keep": 10,
    "parallel.threads": 1,
    "model.hidden": 8,
    "model.num_iterations": 1,
    "optim.lr": 0.01,
    # Constant: resumes of this run may add an epoch (a cosine schedule's length must stay the checkpoint's).
    "optim.schedule": "constant",
    "run.seed": 3,
    "run.progress": False,
    "run.curves": False,
}


def checkpointed_run_config(data: Path, out: Path, **overrides):
    """The configuration of the shared ``checkpointed_run`` (tests/conftest.py) on ``data`` into ``out``, with
    ``overrides`` (e.g. ``{"run.resume": True}`` to continue a copy of it)."""
    from domainpar.train.config import load_config

    return load_config(None, {**CHECKPOINTED_RUN, "data.train": str(data), "run.out": str(out), **overrides})

def slurm_job_with_free_port() -> tuple[int, int]:
    """A Slurm job id whose derived rendezvous port (step 0, :func:`domainpar.launch.env.rendezvous_port`)
    is free now, and that port: srun-like tests then meet where domainpar looks, without a fixed port."""
    import socket

    from domainpar.launch.env import RENDEZVOUS_PORT_BASE, RENDEZVOUS_PORT_SPAN

    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if RENDEZVOUS_PORT_BASE <= port < RENDEZVOUS_PORT_BASE + RENDEZVOUS_PORT_SPAN:
            break
    else:  # the kernel hands out ports above the range: take one inside it that binds
        for port in range(RENDEZVOUS_PORT_BASE + 1000, RENDEZVOUS_PORT_BASE + RENDEZVOUS_PORT_SPAN):
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            break
    job = ((port - RENDEZVOUS_PORT_BASE) * pow(97, -1, RENDEZVOUS_PORT_SPAN)) % RENDEZVOUS_PORT_SPAN
    return job, port

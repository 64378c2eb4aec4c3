"""Small synthetic labelled event graphs for the training tests (fast to build, partitionable)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from domainpar.data.event_graph import EventGraph, save_graph


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

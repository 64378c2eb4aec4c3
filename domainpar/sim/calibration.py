"""One event's hits with their truth, module rows and cluster shapes: what the simulator is fitted to.

Measured the same way on real and simulated events: :func:`event_truth` aligns truth and particles with the hits,
:func:`module_rows` finds every hit's module, and :func:`cluster_shapes` gives the mean cluster content per volume
and bin of track angle, which the cluster models are fitted to (:mod:`domainpar.sim.cluster_fit`). The per-layer
and per-layer-pair comparisons of a simulation against a real event (hit efficiency, resolution, true segments)
are a measurement tool: ``bench/tools/calibration.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from domainpar.data.detector import layer_index_of, load_detector
from domainpar.data.hit_truth import particle_columns
from domainpar.errors import DomainparError


@dataclass(frozen=True)
class EventTruth:
    """One event's hits with per-hit truth, in hits order (the arrays every statistic needs)."""

    hits: pd.DataFrame
    """hit_id, x, y, z, volume_id, layer_id, module_id."""
    particle_id: np.ndarray
    """(N,) particle of every hit, 0 for noise."""
    particle_pt: np.ndarray
    """(N,) transverse momentum of every hit's particle, GeV (0 for noise)."""
    vertex: np.ndarray
    """(N, 3) production vertex of every hit's particle, mm."""
    true_position: np.ndarray
    """(N, 3) truth tx, ty, tz of every hit, mm."""
    layer: np.ndarray
    """(N,) global layer index of every hit."""
    cells: pd.DataFrame | None = None
    """The event's cells (hit_id, ch0, ch1, value), or None."""


def event_truth(
    hits: pd.DataFrame, truth: pd.DataFrame, particles: pd.DataFrame, cells: pd.DataFrame | None = None
) -> EventTruth:
    """Align truth and particles with the hits (one row per hit, in hits order).

    Raises:
        DomainparError: a hit without a truth row, or a missing column.
    """
    for name, frame, columns in (
        ("hits", hits, ("hit_id", "x", "y", "z", "volume_id", "layer_id", "module_id")),
        ("truth", truth, ("hit_id", "particle_id", "tx", "ty", "tz")),
        ("particles", particles, ("particle_id", "vx", "vy", "vz", "px", "py")),
    ):
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise DomainparError(f"{name} must have columns {missing} (got {list(frame.columns)})")
    indexed = truth.drop_duplicates("hit_id").set_index("hit_id")
    rows = indexed.index.get_indexer(hits["hit_id"].to_numpy())
    if (rows < 0).any():
        raise DomainparError(f"truth must have a row for every hit (got {int((rows < 0).sum())} hits without one)")
    particle_id = indexed["particle_id"].to_numpy(np.int64)[rows]
    _, pt, vertex = particle_columns(particles, particle_id)
    pt[particle_id == 0] = 0.0
    layer = layer_index_of(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy())
    if (layer < 0).any():
        raise DomainparError("hits: every (volume_id, layer_id) must be a layer of the TrackML detector")
    return EventTruth(
        hits=hits.reset_index(drop=True),
        particle_id=particle_id,
        particle_pt=pt,
        vertex=vertex,
        true_position=indexed[["tx", "ty", "tz"]].to_numpy(np.float64)[rows],
        layer=layer.astype(np.int64),
        cells=cells,
    )


def cluster_content(cells: pd.DataFrame) -> pd.DataFrame:
    """Per hit_id: cells, distinct channels along u and v, summed charge."""
    return cells.groupby("hit_id").agg(
        cells=("value", "size"), channels_u=("ch0", "nunique"), channels_v=("ch1", "nunique"), charge=("value", "sum")
    )


def module_rows(hits: pd.DataFrame) -> np.ndarray:
    """Row of every hit's module in :func:`~domainpar.data.detector.load_detector` (-1 where unknown)."""
    modules = load_detector()
    key = (modules["volume_id"].to_numpy(np.int64) * 1000 + modules["layer_id"].to_numpy(np.int64)) * 100_000
    key = key + modules["module_id"].to_numpy(np.int64)
    order = np.argsort(key)
    query = (hits["volume_id"].to_numpy(np.int64) * 1000 + hits["layer_id"].to_numpy(np.int64)) * 100_000
    query = query + hits["module_id"].to_numpy(np.int64)
    where = np.minimum(np.searchsorted(key, query, sorter=order), key.size - 1)
    rows = order[where]
    return np.where(key[rows] == query, rows, -1)


#: Bin edges of the track-angle proxy of :func:`cluster_shapes`: |z|/r on barrels (cot θ of the ray from the origin), r/|z| on endcaps.
BARREL_ANGLE_BINS = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 12.0)
ENDCAP_ANGLE_BINS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.6)


def cluster_shapes(hits: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """Mean cluster content per volume and bin of track angle (all hits, noise included; no truth needed).

    The angle proxy is the ray from the origin through the hit: |z|/r (cot θ) on
    barrel layers, where the cluster length along z grows with it, and r/|z|
    (tan θ) on endcap discs. Measured alike on real and simulated events, it
    is what the simulator's cluster model is fitted to.

    Returns:
        One row per (volume_id, bin): ``count``, mean ``cells``,
        ``channels_u``, ``channels_v`` and median ``charge`` per hit.
    """
    per_hit = cluster_content(cells)
    frame = hits.set_index("hit_id")[["x", "y", "z", "volume_id"]].join(per_hit, how="inner")
    r = np.hypot(frame["x"].to_numpy(), frame["y"].to_numpy())
    z = np.abs(frame["z"].to_numpy())
    barrel = frame["volume_id"].isin((8, 13, 17)).to_numpy()
    rows = []
    for is_barrel, edges, proxy in ((True, BARREL_ANGLE_BINS, z / np.maximum(r, 1e-9)), (False, ENDCAP_ANGLE_BINS, r / np.maximum(z, 1e-9))):
        chosen = frame[barrel == is_barrel].assign(angle_bin=pd.cut(proxy[barrel == is_barrel], list(edges), labels=False))
        grouped = chosen.dropna(subset=["angle_bin"]).groupby(["volume_id", "angle_bin"])
        rows.append(
            grouped.agg(
                count=("cells", "size"), cells=("cells", "mean"), channels_u=("channels_u", "mean"),
                channels_v=("channels_v", "mean"), charge=("charge", "median"),
            ).reset_index()
        )  # fmt: skip
    result = pd.concat(rows, ignore_index=True)
    result["angle_bin"] = result["angle_bin"].astype(np.int64)
    return result



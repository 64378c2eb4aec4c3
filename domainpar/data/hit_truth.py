"""Truth per hit: which particle made every hit of an event, its pT and production vertex, in the hits' order.

Shared by the graph construction (:mod:`domainpar.data.graph`, edge labels) and the module map's learning
(:mod:`domainpar.data.module_map`), which must not import each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from domainpar.errors import DomainparError

if TYPE_CHECKING:
    import pandas as pd


def require_columns(frame: pd.DataFrame, name: str, columns: tuple[str, ...]) -> None:
    """Raise a one-line error naming ``name``'s missing columns."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise DomainparError(f"{name} must have columns {missing} (got {list(frame.columns)})")


def particle_columns(particles: pd.DataFrame, particle_id: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Whether each of ``particle_id`` is listed in ``particles``, its pT (GeV) and production vertex (mm): (P,),
    (P,), (P, 3); zeros where not listed."""
    table = particles.drop_duplicates("particle_id").set_index("particle_id")
    known = table.index.get_indexer(particle_id)
    found = known >= 0
    pt = np.zeros(particle_id.size)
    pt[found] = np.hypot(table["px"].to_numpy(np.float64), table["py"].to_numpy(np.float64))[known[found]]
    vertex = np.zeros((particle_id.size, 3))
    for axis, column in enumerate(("vx", "vy", "vz")):
        vertex[found, axis] = table[column].to_numpy(np.float64)[known[found]]
    return found, pt, vertex


def truth_per_hit(
    hits: pd.DataFrame, truth: pd.DataFrame, particles: pd.DataFrame | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Particle id, particle pT and production vertex of every hit, in hits order."""
    require_columns(truth, "truth", ("hit_id", "particle_id"))
    hit_ids = hits["hit_id"].to_numpy(np.int64)
    truth_ids = truth["hit_id"].to_numpy(np.int64)
    order = np.argsort(truth_ids, kind="stable")
    position = np.searchsorted(truth_ids[order], hit_ids)
    position = np.minimum(position, max(truth_ids.size - 1, 0))
    if truth_ids.size == 0 or not np.array_equal(truth_ids[order][position], hit_ids):
        raise DomainparError(
            f"truth must have one row for every hit_id of the hits ({hits.shape[0]} hits, {truth.shape[0]} truth rows)"
        )
    rows = order[position]
    particle_id = truth["particle_id"].to_numpy(np.int64)[rows]
    vertex = np.zeros((hit_ids.size, 3))
    if particles is not None:
        require_columns(particles, "particles", ("particle_id", "vx", "vy", "vz", "px", "py"))
        found, pt, vertex = particle_columns(particles, particle_id)
        # Particles missing from the table (not the case in TrackML files) fall back to the truth momentum.
        missing = ~found & (particle_id != 0)
        if missing.any() and {"tpx", "tpy"} <= set(truth.columns):
            pt[missing] = np.hypot(truth["tpx"].to_numpy(np.float64)[rows][missing], truth["tpy"].to_numpy(np.float64)[rows][missing])
    elif {"tpx", "tpy"} <= set(truth.columns):
        pt = np.hypot(truth["tpx"].to_numpy(np.float64)[rows], truth["tpy"].to_numpy(np.float64)[rows])
    else:
        raise DomainparError("truth without a particles table must have columns tpx, tpy (for the particle pT)")
    pt[particle_id == 0] = 0.0
    return particle_id, pt, vertex

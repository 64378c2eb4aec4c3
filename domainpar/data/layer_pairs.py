"""Which detector layers are neighbours: the layer pairs a hit graph connects.

The pairs are derived from the geometry alone (no truth), by tracing
trajectories out of the luminous region through the layer table of
:func:`domainpar.data.detector.layer_table` (barrels as cylinders, endcaps as
discs, with the extents of their modules):

* origins on the beam line at ``z0`` spread uniformly over ``±z0_max``;
* directions on a fine grid in pseudorapidity over ``±eta_max``;
* for each direction a straight line (infinite pT) and helices of transverse
  momentum ``min_pt`` bending either way — in the (r, z) plane a helix from the
  beam line follows ``r = 2R sin(s / 2R)``, ``z = z0 + s cot(theta)`` with
  ``R = pT / (0.3 B)``, which only matters where barrels meet endcaps;
* each trajectory crosses a sequence of layers ordered by path length ``s``;
  every two consecutive layers of a sequence form a pair (inner → outer), and
  with ``max_skip = k`` so do layers up to ``k`` places apart, which keeps the
  true segment of a particle that left no hit on one layer.

Besides the pairs, :func:`layers_between` lists for each pair the layers
some trajectory crosses between its two layers; the graph builder tests every
candidate segment against those surfaces, so adjacency is finally decided per
segment (a pixel-barrel → strip-barrel pair is adjacent for steep lines that
pass beyond the last pixel cylinder, not for central ones that cross it).

A trajectory leaves the tracker after its first half-turn (``s < pi R``), so
loopers do not create outer → inner pairs. Every pair is oriented the way the
trajectories cross it; a pair that some trajectories cross in both orders (it
cannot happen for cylinders and discs that do not intersect, but the check is
cheap) is kept in the orientation seen more often.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from domainpar.data.detector import layer_table

if TYPE_CHECKING:
    import pandas as pd

#: Solenoid field of the TrackML detector, tesla.
MAGNETIC_FIELD_T = 2.0


@dataclass(frozen=True)
class LayerPairConfig:
    """How the layer adjacency is traced through the detector."""

    z0_max: float = 200.0
    """Half-length (mm) of the luminous region along the beam the trajectories start from."""
    eta_max: float = 4.2
    """Largest |pseudorapidity| of the traced directions."""
    min_pt: float = 0.5
    """Transverse momentum (GeV) of the most curved helices traced (besides straight lines)."""
    max_skip: int = 1
    """Also pair layers up to this many places apart along a trajectory (0 = only consecutive)."""
    num_eta: int = 4000
    """Number of directions on the pseudorapidity grid."""
    num_z0: int = 9
    """Number of origins on the beam line."""


def _crossings(table: pd.DataFrame, z0: np.ndarray, cot_theta: np.ndarray, radius: float) -> np.ndarray:
    """(T, L) transverse arc length at which each trajectory (origin ``z0`` (T,) mm on the beam line, ``cot_theta``
    (T,), helix ``radius`` mm, ``inf`` for straight lines) crosses each layer of ``table``; ``nan`` where it does not.
    """
    barrel = table["barrel"].to_numpy()
    r_layer = table["r"].to_numpy()
    r_min, r_max = table["r_min"].to_numpy(), table["r_max"].to_numpy()
    z_min, z_max = table["z_min"].to_numpy(), table["z_max"].to_numpy()
    z_disc = table["z"].to_numpy()
    zz0 = z0[:, None]
    cot = cot_theta[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        if np.isinf(radius):
            s_barrel = np.broadcast_to(r_layer[None, :], (z0.size, r_layer.size)).copy()
        else:
            ratio = r_layer / (2.0 * radius)
            s_barrel = np.where(ratio < 1.0, 2.0 * radius * np.arcsin(np.minimum(ratio, 1.0)), np.nan)
            s_barrel = np.broadcast_to(s_barrel[None, :], (z0.size, r_layer.size)).copy()
        z_at_barrel = zz0 + s_barrel * cot
        barrel_ok = (z_at_barrel >= z_min) & (z_at_barrel <= z_max)
        s_disc = (z_disc[None, :] - zz0) / cot
        if np.isinf(radius):
            r_at_disc = s_disc
            turned = np.zeros_like(s_disc, dtype=bool)
        else:
            r_at_disc = 2.0 * radius * np.sin(s_disc / (2.0 * radius))
            turned = s_disc > np.pi * radius
        disc_ok = (s_disc > 0) & ~turned & (r_at_disc >= r_min) & (r_at_disc <= r_max)
    s = np.where(barrel[None, :], np.where(barrel_ok, s_barrel, np.nan), np.where(disc_ok, s_disc, np.nan))
    return s


#: How far apart (places along one trajectory) two layers may be for the layers between
#: them to count as possibly crossed by a segment joining them.
_BETWEEN_REACH = 4


@lru_cache(maxsize=8)
def _layer_pairs_cached(config: LayerPairConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    table = layer_table()
    num_layers = len(table)
    eta = np.linspace(-config.eta_max, config.eta_max, config.num_eta)
    z0 = np.linspace(-config.z0_max, config.z0_max, config.num_z0)
    eta_grid, z0_grid = np.meshgrid(eta, z0, indexing="ij")
    cot_theta = np.sinh(eta_grid.ravel())
    origins = z0_grid.ravel()
    radius_min = config.min_pt / (0.3 * MAGNETIC_FIELD_T) * 1000.0
    votes = np.zeros((num_layers, num_layers), dtype=np.int64)
    between = np.zeros((num_layers, num_layers, num_layers), dtype=bool)
    for radius in (np.inf, radius_min):
        s = _crossings(table, origins, cot_theta, radius)
        order = np.argsort(np.where(np.isnan(s), np.inf, s), axis=1)
        num_crossed = np.count_nonzero(~np.isnan(s), axis=1)
        # Tens of thousands of trajectories cross the layers in a few hundred distinct sequences: each sequence is
        # walked once, its votes weighted by how many trajectories share it.
        crossed = np.where(np.arange(num_layers)[None, :] < num_crossed[:, None], order, -1).astype(np.int16)
        rows = np.ascontiguousarray(crossed).view(np.dtype((np.void, 2 * num_layers))).ravel()
        _, first, weight = np.unique(rows, return_index=True, return_counts=True)
        sequences = crossed[first].astype(np.int64)
        length = np.count_nonzero(sequences >= 0, axis=1)
        for step in range(1, max(config.max_skip + 2, _BETWEEN_REACH + 1)):
            for position in range(num_layers - step):
                valid = position + step < length
                if not valid.any():
                    continue
                inner = sequences[valid, position]
                outer = sequences[valid, position + step]
                if step <= config.max_skip + 1:
                    np.add.at(votes, (inner, outer), weight[valid])
                for middle in range(position + 1, position + step):
                    between[inner, outer, sequences[valid, middle]] = True
    forward = votes > votes.T
    pairs = np.argwhere(forward & (votes > 0)).astype(np.int64)
    middles = [np.flatnonzero(between[i, j]) for i, j in pairs]
    between_start = np.zeros(len(pairs) + 1, dtype=np.int64)
    between_start[1:] = np.cumsum([m.size for m in middles])
    between_layers = np.concatenate(middles).astype(np.int64) if middles else np.zeros(0, dtype=np.int64)
    return pairs, between_start, between_layers


def layer_pairs(config: LayerPairConfig = LayerPairConfig()) -> np.ndarray:
    """The (inner, outer) global layer indices that the hit graph connects.

    Returns:
        (P, 2) int64, sorted by inner then outer layer index.
    """
    return _layer_pairs_cached(config)[0].copy()


def layers_between(config: LayerPairConfig = LayerPairConfig()) -> tuple[np.ndarray, np.ndarray]:
    """For every pair of :func:`layer_pairs`, the layers a segment joining it may pass through (see the module
    docstring).

    Returns:
        ``(between_start, between_layers)``: CSR offsets (P + 1,) and layer indices.
    """
    _, between_start, between_layers = _layer_pairs_cached(config)
    return between_start.copy(), between_layers.copy()

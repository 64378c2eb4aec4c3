"""Detector sectors: φ wedges × η (or z) slices, the scheme physicists use today.

The detector is cut into ``num_eta`` slices along η (or z) and each slice into
``num_phi`` wedges in φ; part = eta_slice * num_phi + phi_wedge.

Balancing: with ``boundaries="quantile"`` (default) the slice boundaries are
weighted quantiles of the hits' η, and the wedge boundaries weighted
quantiles of φ *within each slice*, with a hit's weight ``1 + degree`` — so
every sector gets about the same edge work even though the occupancy peaks at
central η and the pixel layers are denser. Wedges of neighbouring slices are
then not aligned (a brick pattern). ``boundaries="uniform"`` gives the
textbook equal-width sectors: φ in [-π, π) cut into equal angles and the
hits' η (or z) range into equal widths; it is the naive reference and badly
imbalanced on real events.

Default factorisation of P: φ wedges only (``num_eta = 1``) up to
:data:`MAX_DEFAULT_WEDGES` wedges, beyond that the fewest η slices that keep
at most that many wedges per slice (32 → 16×2, 64 → 16×4). Cutting in η (or z)
is expensive: the z0 window of the segment cuts lets many edges cross a slice
boundary near η = 0, where the occupancy peaks. Thin wedges cut curling
low-pT tracks, hence the cap.
"""

from __future__ import annotations

import numpy as np

from domainpar.errors import DomainparError
from domainpar.partition.owners import fill_empty_parts

COORDINATES = ("eta", "z")
BOUNDARY_MODES = ("quantile", "uniform")


#: Most φ wedges the default factorisation uses before it also slices in η.
MAX_DEFAULT_WEDGES = 16


def default_factorisation(num_parts: int) -> tuple[int, int]:
    """(num_phi, num_eta): φ wedges only up to 16, then the fewest η slices with <= 16 wedges each.

    A P with no such split (a prime above 16, say) gets P wedges: thin wedges still cut less than η slices.
    """
    if num_parts <= MAX_DEFAULT_WEDGES:
        return num_parts, 1
    for num_eta in range(2, num_parts):
        if num_parts % num_eta == 0 and num_parts // num_eta <= MAX_DEFAULT_WEDGES:
            return num_parts // num_eta, num_eta
    return num_parts, 1


def require_positions(pos: np.ndarray, method: str, source: str = "the graph") -> None:
    """Refuse sectors of a graph without hit positions (every hit at one point), naming ``source`` and what to use
    instead.

    Graph files of the Exa.TrkX layout carry scaled features but no positions and are read with zeros
    (:mod:`domainpar.data.pyg_files`); φ × η sectors of such a graph are arbitrary.

    Args:
        pos: (N, 3) hit positions.

    Raises:
        DomainparError: every hit at one point.
    """
    pos = np.asarray(pos)
    if not (pos.shape[0] < 2 or np.any(pos != pos[:1])):
        raise DomainparError(
            f"--method {method}: {source} has no hit positions (every hit at {tuple(float(v) for v in np.asarray(pos)[0])}; "
            "graph files in the Exa.TrkX layout carry none), so its detector sectors would be arbitrary; "
            "use --method metis, which needs only the edges"
        )


def _weighted_cuts(values: np.ndarray, weights: np.ndarray, num_slices: int) -> np.ndarray:
    """Slice index (0..num_slices-1) of each value so each slice holds ~equal total weight."""
    if num_slices == 1 or values.size == 0:
        return np.zeros(values.size, dtype=np.int64)
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order], dtype=np.float64)
    total = cumulative[-1]
    # Rank-based cut: hits with equal coordinates may split, which keeps every slice non-empty.
    slice_of_sorted = np.minimum((cumulative - 0.5 * weights[order]) * num_slices / total, num_slices - 1)
    slices = np.empty(values.size, dtype=np.int64)
    slices[order] = slice_of_sorted.astype(np.int64)
    return slices


def _uniform_cuts(values: np.ndarray, lo: float, hi: float, num_slices: int) -> np.ndarray:
    if num_slices == 1 or values.size == 0 or hi <= lo:
        return np.zeros(values.size, dtype=np.int64)
    return np.clip(((values - lo) / (hi - lo) * num_slices).astype(np.int64), 0, num_slices - 1)


def geometric_owners(
    pos: np.ndarray,
    edge_index: np.ndarray,
    num_parts: int,
    *,
    num_phi: int | None = None,
    num_eta: int | None = None,
    coordinate: str = "eta",
    boundaries: str = "quantile",
) -> np.ndarray:
    """Owner part of every hit from φ × η (or z) sectors.

    Args:
        pos: (N, 3) float hit positions x, y, z (mm).
        edge_index: (2, E) int64 edges, for the degree weights of quantile boundaries.
        num_parts: P.
        num_phi: φ wedges per slice; with num_eta, must multiply to P (default: see module doc).
        num_eta: η (or z) slices.
        coordinate: "eta" or "z" for the slicing coordinate.
        boundaries: "quantile" (edge-work balanced) or "uniform" (equal widths).

    Returns:
        (N,) int64 owner = slice * num_phi + wedge, every part non-empty.
    """
    if coordinate not in COORDINATES:
        raise DomainparError(f"coordinate must be one of {', '.join(COORDINATES)} (got {coordinate!r})")
    if boundaries not in BOUNDARY_MODES:
        raise DomainparError(f"boundaries must be one of {', '.join(BOUNDARY_MODES)} (got {boundaries!r})")
    if num_phi is None and num_eta is None:
        num_phi, num_eta = default_factorisation(num_parts)
    elif num_phi is None:
        num_phi = num_parts // num_eta if num_eta and num_eta > 0 else 0
    elif num_eta is None:
        num_eta = num_parts // num_phi if num_phi > 0 else 0
    if num_phi < 1 or num_eta < 1 or num_phi * num_eta != num_parts:
        raise DomainparError(
            f"num_phi x num_eta must equal num_parts={num_parts} with both at least 1 (got {num_phi} x {num_eta})"
        )
    pos = np.asarray(pos, dtype=np.float64)
    num_nodes = pos.shape[0]
    r = np.hypot(pos[:, 0], pos[:, 1])
    phi = np.arctan2(pos[:, 1], pos[:, 0])
    along = np.arcsinh(pos[:, 2] / np.maximum(r, 1e-6)) if coordinate == "eta" else pos[:, 2]
    if boundaries == "uniform":
        slices = _uniform_cuts(along, float(along.min(initial=0.0)), float(along.max(initial=0.0)), num_eta)
        wedges = _uniform_cuts(phi, -np.pi, np.pi, num_phi)
    else:
        src, dst = np.asarray(edge_index, dtype=np.int64)
        weights = 1.0 + np.bincount(src, minlength=num_nodes) + np.bincount(dst, minlength=num_nodes)
        slices = _weighted_cuts(along, weights, num_eta)
        wedges = np.empty(num_nodes, dtype=np.int64)
        for s in range(num_eta):
            members = np.flatnonzero(slices == s)
            wedges[members] = _weighted_cuts(phi[members], weights[members], num_phi)
    owner = slices * num_phi + wedges
    return fill_empty_parts(owner.astype(np.int64), num_parts)

"""Hand-made events for the track-builder tests: particles on helices through the TrackML barrel layers.

Hits are exact helix crossings of the barrel cylinders (a particle from (0, 0, z0) in the 2 T field), so the
geometry is what real tracks look like and the edge scores are what each test says they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from domainpar.kernels.track_fit import PT_PER_TESLA_MM

#: Barrel layers of the TrackML detector: global layer code (EventGraph.layer) → radius (mm): pixel 7-10,
#: short strips 24-27 (strips 1.2 mm long), long strips 40-41 (10.8 mm).
BARREL = {7: 32.0, 8: 72.0, 9: 116.0, 10: 172.0, 24: 260.0, 25: 360.0, 26: 500.0, 27: 660.0, 40: 820.0, 41: 1020.0}


def helix_at(pt: float, phi0: float, charge: int, cot: float, radius: float, z0: float = 5.0, field: float = 2.0,
             second: bool = False) -> np.ndarray:  # fmt: skip
    """Where a particle from (0, 0, z0) crosses the cylinder of ``radius`` (mm): (3,). ``second``: on its way back
    (a curler crosses a cylinder below twice its helix radius twice)."""
    bend = pt / (PT_PER_TESLA_MM * field)
    xc, yc = -charge * bend * np.sin(phi0), charge * bend * np.cos(phi0)
    start = np.arctan2(-yc, -xc)
    if radius >= 2 * bend:
        raise ValueError(f"a particle of pT {pt} GeV never reaches r = {radius} mm")
    turned = 2 * np.arcsin(radius / (2 * bend))
    if second:
        turned = 2 * np.pi - turned
    angle = start - charge * turned
    return np.array([xc + bend * np.cos(angle), yc + bend * np.sin(angle), z0 + bend * turned * cot])


def helix_points(pt: float, phi0: float, charge: int, cot: float, radii, z0: float = 5.0, field: float = 2.0) -> np.ndarray:
    """:func:`helix_at` for each radius: (K, 3), in the order given."""
    return np.array([helix_at(pt, phi0, charge, cot, r, z0, field) for r in radii])


@dataclass
class HandEvent:
    """An event under construction: hits with their layer and particle, and scored graph edges."""

    pos: list = field(default_factory=list)
    layer: list = field(default_factory=list)
    particle: list = field(default_factory=list)
    edges: list = field(default_factory=list)

    def hit(self, point, layer: int, particle: int) -> int:
        """Add a hit; its index."""
        self.pos.append(np.asarray(point, dtype=np.float64))
        self.layer.append(layer)
        self.particle.append(particle)
        return len(self.pos) - 1

    def track(self, particle: int, pt: float, phi0: float, charge: int, cot: float, layers, z0: float = 5.0) -> dict:
        """Hits of one particle on the given barrel layers: {layer: hit index}."""
        return {code: self.hit(helix_at(pt, phi0, charge, cot, BARREL[code], z0), code, particle) for code in layers}

    def edge(self, inner: int, outer: int, score: float) -> None:
        """A graph edge inner → outer with its score."""
        self.edges.append((inner, outer, score))

    def chain(self, hits, score: float) -> None:
        """Edges joining consecutive hits, all with one score."""
        for a, b in zip(hits[:-1], hits[1:]):
            self.edge(a, b, score)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(pos (N,3), layer (N,), edge_index (2,E), scores (E,), particle_id (N,))``."""
        edges = np.array(self.edges, dtype=np.float64).reshape(-1, 3)
        return (
            np.array(self.pos),
            np.array(self.layer, dtype=np.int64),
            edges[:, :2].T.astype(np.int64),
            edges[:, 2].copy(),
            np.array(self.particle, dtype=np.int64),
        )


def whole(track_id: np.ndarray, particle_id: np.ndarray, particle: int) -> bool:
    """The particle's hits are exactly one candidate (a perfect match)."""
    mine = np.flatnonzero(particle_id == particle)
    candidate = np.flatnonzero(track_id == track_id[mine[0]])
    return np.array_equal(np.sort(mine), np.sort(candidate))

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


#: The pixel and the short-strip barrel layers.
PIXEL = [7, 8, 9, 10]
STRIPS = [24, 25, 26, 27]
#: A stiff particle through the pixel barrel and on through the strip barrel.
STIFF = dict(pt=3.0, phi0=0.6, charge=1, cot=0.3)


def ended_or_fragment(continuation: str) -> HandEvent:
    """Particle 1 leaves hits on the four pixel layers only. ``continuation``: what lies where its helix crosses the
    strip layers: ``"nothing"`` (it ended: an interaction), or ``"hits"`` of a particle that went on (its outer hits
    on the helix, on no edge of the pixel ones: a fragment). Particle 2, far away, crosses all eight layers, so the
    strip layers are the event's."""
    ev = HandEvent()
    inner = ev.track(1, layers=PIXEL, **STIFF)
    ev.chain([inner[c] for c in PIXEL], 0.95)
    if continuation == "hits":
        outer = [ev.hit(helix_at(radius=r, **STIFF), code, 3) for code, r in ((24, 260.0), (25, 360.0), (26, 500.0), (27, 660.0))]
        ev.chain(outer, 0.95)
    other = ev.track(2, pt=2.0, phi0=-2.5, charge=-1, cot=-0.2, layers=PIXEL + STRIPS)
    ev.chain([other[c] for c in PIXEL + STRIPS], 0.95)
    return ev


#: The long-strip barrel layers (volume 17): a hit's z is its strip's centre, up to 5.4 mm from the crossing.
LONG_STRIPS = [40, 41]
#: How far along z the long-strip hit lies from the helix: beyond the gate, within its resolution's widening.
OFF_ALONG_STRIP = 9.0


def off_along_its_strip(edge_to_it: bool) -> tuple[HandEvent, dict]:
    """Particle 1 through pixels, short and long strips; its hit on layer 40 lies OFF_ALONG_STRIP mm along z from
    the helix (the strip's centre, and the helix carried 160 mm on from the short strips). ``edge_to_it``: the
    graph joins it to its neighbours (else it has no edge: a module map without that pair)."""
    ev = HandEvent()
    h = ev.track(1, layers=PIXEL + STRIPS + LONG_STRIPS, **STIFF)
    pos = np.array(ev.pos)
    pos[h[40]] += [0.0, 0.0, OFF_ALONG_STRIP]
    ev.pos = list(pos)
    ev.chain([h[c] for c in PIXEL + STRIPS], 0.95)
    if edge_to_it:
        ev.chain([h[27], h[40], h[41]], 0.95)
    else:
        ev.edge(h[27], h[41], 0.95)
    return ev, h


def noise_and_shared_hit() -> HandEvent:
    """A noise hit beside particle 1 scored above its true continuation, and particle 2 crossing particle 1 on one
    layer: it left no hit of its own there (one cluster, particle 1's hit), whose segments to particle 2 are scored
    high."""
    ev = HandEvent()
    a = ev.track(1, pt=1.2, phi0=2.0, charge=1, cot=1.1, layers=[7, 8, 9, 10, 24, 25])
    # Same charge, half the pT, turned so that it crosses particle 1 at r = 116 mm (layer 9).
    b = ev.track(2, pt=0.6, phi0=2.0293, charge=1, cot=1.1, layers=[7, 8, 10, 24, 25])
    away = ev.pos[a[10]] - ev.pos[b[10]]
    away[2] = 0.0
    noise = ev.hit(ev.pos[a[10]] + 2.0 * away / np.linalg.norm(away), 10, 0)  # 2 mm beside particle 1's hit
    ev.chain([a[7], a[8], a[9]], 0.95)
    ev.edge(a[9], noise, 0.97)
    ev.chain([a[9], a[10], a[24], a[25]], 0.9)
    ev.chain([b[7], b[8]], 0.9)
    ev.edge(b[8], a[9], 0.8)
    ev.edge(a[9], b[10], 0.8)
    ev.chain([b[10], b[24], b[25]], 0.9)
    return ev

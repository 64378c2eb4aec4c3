"""The module map: graph construction from the module pairs that true particles connect (GNN4ITk / acorn style).

A module map is learned from simulated events with truth: every true segment
(:mod:`domainpar.data.true_segments`, layer skips included) joins a hit on
module A to a hit on module B, A being the hit earlier along the track. The
map holds every such (A, B) pair with a window per pair on four quantities
of the segment A -> B:

* ``dphi``: phi_B - phi_A wrapped into [-pi, pi) (rad);
* ``deta``: eta_B - eta_A;
* ``z0``: where the straight (r, z) line through both hits meets the beam line (mm);
* ``phi_slope``: dphi / dr (rad/mm).

Each window is [min, max] over the training segments of the pair, widened by
``margin`` times its width plus ``margin`` times a floor per quantity
(:data:`FLOORS`), so a pair seen once still gets a window of finite width.

Building with it (:func:`map_edges`) pairs, for every module pair of the map,
each hit of A with each hit of B and keeps those inside the pair's windows:
hits sorted by module, one numba loop over the pairs, no Python per hit or
edge. Modules are keyed by the global layer index of
:func:`domainpar.data.detector.layer_index_of` and the TrackML ``module_id``.

The artefact is one ``.npz`` (read with ``allow_pickle=False``) whose
``content_hash`` is the SHA-256 of its arrays; a graph built with a map
records that hash, and a build asked for a map of another hash refuses it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np

from domainpar.errors import DomainparError

#: Version of the artefact's layout.
MAP_VERSION = 1
#: The windowed quantities, in column order of ``low`` / ``high``.
QUANTITIES = ("dphi", "deta", "z0", "phi_slope")
#: Absolute window floors per quantity (rad, 1, mm, rad/mm): the padding of a pair seen once is margin x floor.
FLOORS = np.array([0.01, 0.02, 20.0, 1e-4])
#: Module key = layer index x MODULE_STRIDE + module_id (TrackML module ids stay below 10^4 per layer).
MODULE_STRIDE = 100_000
#: Encoded pair = key_A x _PAIR_STRIDE + key_B (module keys stay below 2^23: 48 layers x MODULE_STRIDE).
_PAIR_STRIDE = np.int64(1 << 23)
_ARRAYS = ("pairs", "low", "high", "count")


def module_keys(layer: np.ndarray, module_id: np.ndarray) -> np.ndarray:
    """(N,) int64 global key of every hit's module from its (N,) layer index and (N,) TrackML module_id."""
    return np.asarray(layer, dtype=np.int64) * MODULE_STRIDE + np.asarray(module_id, dtype=np.int64)


@numba.njit(cache=True, inline="always")
def _quantity(ra, pa, za, ea, rb, pb, zb, eb, which):
    # Shared by learning and building so that both compute the same float64 value.
    dphi = pb - pa
    if dphi >= np.pi:
        dphi -= 2 * np.pi
    elif dphi < -np.pi:
        dphi += 2 * np.pi
    if which == 0:
        return dphi
    if which == 1:
        return eb - ea
    dr = rb - ra
    # Disc -> disc segments have dr ~ 0: a floored |dr| keeps z0 and the slope finite (their windows are then wide).
    if abs(dr) < 1e-3:
        dr = 1e-3 if dr >= 0 else -1e-3
    if which == 2:
        return za - ra * (zb - za) / dr
    return dphi / dr


@numba.njit(cache=True)
def _segment_quantities(r, phi, z, eta, src, dst):
    out = np.empty((src.size, 4))
    for k in range(src.size):
        a, b = src[k], dst[k]
        for q in range(4):
            out[k, q] = _quantity(r[a], phi[a], z[a], eta[a], r[b], phi[b], z[b], eta[b], q)
    return out


@numba.njit(cache=True)
def _pair_hits(module_start, pair_a, pair_b, low, high, r, phi, z, eta, fill, offsets, src, dst):
    """Count (fill=False) or write (fill=True, from ``offsets``) the hit pairs inside each map pair's windows."""
    counts = np.zeros(pair_a.size, dtype=np.int64)
    for p in range(pair_a.size):
        a0, a1 = module_start[pair_a[p]], module_start[pair_a[p] + 1]
        b0, b1 = module_start[pair_b[p]], module_start[pair_b[p] + 1]
        n = 0
        for i in range(a0, a1):
            for j in range(b0, b1):
                inside = True
                for q in range(4):
                    v = _quantity(r[i], phi[i], z[i], eta[i], r[j], phi[j], z[j], eta[j], q)
                    if v < low[p, q] or v > high[p, q]:
                        inside = False
                        break
                if inside:
                    if fill:
                        src[offsets[p] + n] = i
                        dst[offsets[p] + n] = j
                    n += 1
        counts[p] = n
    return counts


def _cylindrical(pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    pos = np.asarray(pos, dtype=np.float64)
    r = np.hypot(pos[:, 0], pos[:, 1])
    phi = np.arctan2(pos[:, 1], pos[:, 0])
    z = np.ascontiguousarray(pos[:, 2])
    eta = np.arcsinh(z / np.maximum(r, 1e-9))
    return r, phi, z, eta


@dataclass(frozen=True)
class ModuleMap:
    """A learned module map.

    Attributes:
        pairs: (P, 2) int64 module keys (A, B) of every pair, sorted, A the module earlier along the track.
        low: (P, 4) float64 lower window edges of :data:`QUANTITIES` (margin applied).
        high: (P, 4) float64 upper window edges.
        count: (P,) int64 training segments seen on the pair.
        margin: relative padding the windows were widened by.
        provenance: what it was learned from (events, segments, seed, simulator config hash...).
        content_hash: SHA-256 (hex, first 16) of the arrays and margin.
    """

    pairs: np.ndarray
    low: np.ndarray
    high: np.ndarray
    count: np.ndarray
    margin: float
    provenance: dict
    content_hash: str


def _hash(pairs, low, high, count, margin: float) -> str:
    digest = hashlib.sha256()
    for values in (pairs, low, high, count):
        digest.update(np.ascontiguousarray(values).tobytes())
    digest.update(repr(float(margin)).encode())
    digest.update(str(MAP_VERSION).encode())
    return digest.hexdigest()[:16]


class MapLearner:
    """Accumulates the true segments of events, one at a time, into raw per-pair [min, max] windows."""

    def __init__(self) -> None:
        self._pair = np.zeros(0, np.int64)  # (P,) encoded pair keys, sorted
        self._low = np.zeros((0, 4))
        self._high = np.zeros((0, 4))
        self._count = np.zeros(0, np.int64)
        self.events: list[str] = []

    def add(self, module: np.ndarray, pos: np.ndarray, segments: np.ndarray, name: str) -> None:
        """Add one event.

        Args:
            module: (N,) int64 module key of every hit (:func:`module_keys`).
            pos: (N, 3) hit positions, mm.
            segments: (2, S) node indices of its true segments, row 0 earlier along the track.
            name: what the event is (recorded in the provenance).
        """
        r, phi, z, eta = _cylindrical(pos)
        src, dst = (np.ascontiguousarray(row, dtype=np.int64) for row in segments)
        values = _segment_quantities(r, phi, z, eta, src, dst)
        module = np.asarray(module, dtype=np.int64)
        pair = module[src] * _PAIR_STRIDE + module[dst]
        # Reduce per event: memory stays that of the pairs, not of every segment seen.
        pair = np.concatenate([self._pair, pair])
        low = np.concatenate([self._low, values])
        high = np.concatenate([self._high, values])
        count = np.concatenate([self._count, np.ones(src.size, np.int64)])
        self._pair, inverse = np.unique(pair, return_inverse=True)
        inverse = inverse.reshape(-1)
        self._low = np.full((self._pair.size, 4), np.inf)
        self._high = np.full((self._pair.size, 4), -np.inf)
        np.minimum.at(self._low, inverse, low)
        np.maximum.at(self._high, inverse, high)
        self._count = np.bincount(inverse, weights=count, minlength=self._pair.size).astype(np.int64)
        self.events.append(name)

    def finish(self, margin: float, provenance: dict) -> ModuleMap:
        """The map, windows widened by ``margin`` x (width + :data:`FLOORS`)."""
        if not self.events:
            raise DomainparError("module map: expected at least one training event with truth (got none)")
        if not (np.isfinite(margin) and margin >= 0):
            raise DomainparError(f"module map: margin must be a non-negative number (got {margin})")
        pairs = np.stack([self._pair // _PAIR_STRIDE, self._pair % _PAIR_STRIDE], axis=1)
        raw_low, raw_high = self._low, self._high
        pad = margin * ((raw_high - raw_low) + FLOORS)
        low, high = raw_low - pad, raw_high + pad
        count = self._count.astype(np.int64)
        record = {**provenance, "events": list(self.events), "num_events": len(self.events), "num_pairs": len(pairs),
                  "num_segments": int(count.sum()), "version": MAP_VERSION, "quantities": list(QUANTITIES)}
        return ModuleMap(pairs, low, high, count, float(margin), record, _hash(pairs, low, high, count, margin))


def save_module_map(module_map: ModuleMap, path: str | os.PathLike) -> None:
    """Write ``module_map`` to ``path`` (.npz, no pickles)."""
    np.savez_compressed(
        path, pairs=module_map.pairs, low=module_map.low, high=module_map.high, count=module_map.count,
        margin=np.float64(module_map.margin), provenance=np.array(json.dumps(module_map.provenance, sort_keys=True)),
        content_hash=np.array(module_map.content_hash), version=np.int64(MAP_VERSION),
    )  # fmt: skip


def map_hash_of(path: str | os.PathLike) -> str:
    """The recorded content hash of the map at ``path`` (reads only that entry)."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            return str(npz["content_hash"])
    except (OSError, ValueError, KeyError) as exc:
        raise DomainparError(f"{path}: expected a module map .npz with a content_hash (got {type(exc).__name__}: {exc})") from None


def load_module_map(path: str | os.PathLike, expected_hash: str | None = None) -> ModuleMap:
    """Read the map at ``path``; with ``expected_hash``, refuse a map of another hash.

    Raises:
        DomainparError: not a module map, a damaged one (its arrays do not give its hash), or another map.
    """
    try:
        with np.load(path, allow_pickle=False) as npz:
            version = int(npz["version"])
            if version != MAP_VERSION:
                raise DomainparError(f"{path}: expected module map version {MAP_VERSION} (got {version})")
            arrays = {name: npz[name] for name in _ARRAYS}
            margin = float(npz["margin"])
            provenance = json.loads(str(npz["provenance"]))
            recorded = str(npz["content_hash"])
    except (OSError, ValueError, KeyError) as exc:
        raise DomainparError(f"{path}: expected a module map .npz (got {type(exc).__name__}: {exc})") from None
    found = _hash(arrays["pairs"], arrays["low"], arrays["high"], arrays["count"], margin)
    if found != recorded:
        raise DomainparError(f"{path}: module map arrays hash to {found}, expected the recorded {recorded} (damaged file)")
    if expected_hash and recorded != expected_hash:
        raise DomainparError(f"{path}: expected the module map of hash {expected_hash} the graph was built with (got {recorded})")
    return ModuleMap(arrays["pairs"], arrays["low"], arrays["high"], arrays["count"], margin, provenance, recorded)


_CACHE: dict[tuple, ModuleMap] = {}


def cached_module_map(path: str | os.PathLike, expected_hash: str) -> ModuleMap:
    """:func:`load_module_map`, read once per (file, modification time, hash) in a process that builds many events."""
    try:
        key = (str(Path(path).resolve()), os.stat(path).st_mtime_ns, expected_hash)
    except OSError as exc:
        raise DomainparError(f"GraphConfig.module_map {path}: expected a module map .npz (got {exc.strerror})") from None
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = load_module_map(path, expected_hash)
    return _CACHE[key]


def map_edges(module_map: ModuleMap, module: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Every hit pair of an event that a pair of the map connects within its windows.

    Args:
        module_map: the map.
        module: (N,) int64 module key of every hit (:func:`module_keys`).
        pos: (N, 3) hit positions, mm.

    Returns:
        (2, E) int64 node indices, row 0 the hit on the pair's first module (earlier along a track), sorted by
        (src, dst); a hit pair that two map pairs give (both orders) appears once, in the order met first.
    """
    r, phi, z, eta = _cylindrical(pos)
    order = np.argsort(module, kind="stable")
    sorted_module = np.asarray(module, dtype=np.int64)[order]
    modules, first = np.unique(sorted_module, return_index=True)
    module_start = np.append(first, sorted_module.size).astype(np.int64)
    # Map pairs whose two modules both have hits in this event, as indices into `modules`.
    ia = np.searchsorted(modules, module_map.pairs[:, 0])
    ib = np.searchsorted(modules, module_map.pairs[:, 1])
    ia_c, ib_c = np.minimum(ia, modules.size - 1), np.minimum(ib, modules.size - 1)
    present = (modules[ia_c] == module_map.pairs[:, 0]) & (modules[ib_c] == module_map.pairs[:, 1])
    pa, pb = ia_c[present].astype(np.int64), ib_c[present].astype(np.int64)
    low = np.ascontiguousarray(module_map.low[present])
    high = np.ascontiguousarray(module_map.high[present])
    rs, ps, zs, es = (np.ascontiguousarray(v[order]) for v in (r, phi, z, eta))
    empty = np.zeros(0, np.int64)
    counts = _pair_hits(module_start, pa, pb, low, high, rs, ps, zs, es, False, empty, empty, empty)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    src = np.empty(offsets[-1], np.int64)
    dst = np.empty(offsets[-1], np.int64)
    _pair_hits(module_start, pa, pb, low, high, rs, ps, zs, es, True, offsets, src, dst)
    src, dst = order[src], order[dst]
    n = np.int64(module.size)
    undirected = np.minimum(src, dst) * n + np.maximum(src, dst)
    # Sort-based dedupe: numpy's hash-based unique is several times slower on millions of keys.
    by_key = np.argsort(undirected, kind="stable")
    sorted_keys = undirected[by_key]
    unique_rows = by_key[np.append(True, sorted_keys[1:] != sorted_keys[:-1])]
    src, dst = src[unique_rows], dst[unique_rows]
    sort = np.argsort(src * n + dst, kind="stable")
    return np.stack([src[sort], dst[sort]])

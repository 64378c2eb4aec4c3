"""Hit-graph construction: from one TrackML event to its :class:`EventGraph`.

Nodes are hits (all of them by default). Edges are candidate segments between
hits on geometrically adjacent layers over the whole detector — barrel →
barrel, barrel → endcap, endcap → endcap, both endcaps — directed inner →
outer, found by a binned search (:mod:`domainpar.kernels.segments`), never by
scanning all pairs.

Adjacency. The layer pairs worth searching come from tracing trajectories
out of the luminous region through the layer geometry
(:mod:`domainpar.data.layer_pairs`), together with the layers a segment of
each pair may pass through. Every candidate segment is then checked against
those layers' surfaces (cylinders and discs with their module extents): a
segment whose straight line crosses no other layer (more than
``crossing_margin`` inside its extent) joins adjacent layers. With
``skip_missing`` a segment crossing exactly one layer is kept too — where the
particle left no hit on that layer — under tighter cuts and only when no hit
close to the line between them bridges its two ends (see :func:`_unbridged`).
Layer pairs that are never consecutive along a traced trajectory are searched
with the tighter skip cuts altogether.

Cuts (all edges; the skip cuts, and ``skip_dphi_margin`` when set, replace the first two for layer-jumping ones):

* phi slope: ``|dphi| <= phi_slope_max * dr + dphi_margin`` (a track of
  transverse momentum pT bends by ``dphi ~= 0.0003 dr / pT[GeV]`` in 2 T, so
  0.0006 rad/mm keeps pT above ~0.5 GeV; the margin absorbs the position
  resolution of the short segments between endcap discs);
* z0: the straight (r, z) line through both hits meets the beam line within
  ``|z0| <= z0_max`` and points outward (``dr > 0``);
* eta window, on disc → disc pairs only, where z0 is poorly measured because
  the two hits are a few mm apart in r: ``|deta| <= deta_max``.

With ``trajectory="helix"`` the phi-slope and z0 cuts follow a helix from the
beam line instead of straight lines: the phi window of a circle through the
beam line of curvature up to ``2 phi_slope_max`` (its largest radius at least
``helix_reach`` times the outer hit's), and z0 along the helix through both
hits, z linear in the transverse arc length. Both agree with the straight cuts
for small curvatures and keep the segments of low-pT particles at the strips'
radii, where they run tangential (:func:`domainpar.kernels.segments.helix_dphi`).

Labels and efficiency both use the true-segment definition of
:mod:`domainpar.data.true_segments`.

Node and edge features are named and described in :mod:`domainpar.data.features`.
The graph file records the names and the whole configuration, so a later
stage can rebuild the same graph.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from domainpar.arrays import member
from domainpar.data import features as feature_catalogue
from domainpar.data.detector import layer_index_of, layer_table
from domainpar.data.event_graph import EventGraph
from domainpar.data.layer_pairs import LayerPairConfig, layer_pairs, layers_between
from domainpar.data.hit_truth import require_columns as _require_columns
from domainpar.data.hit_truth import truth_per_hit as _truth_per_hit
from domainpar.data.true_segments import pair_keys, true_segments
from domainpar.errors import DomainparError

if TYPE_CHECKING:  # training ranks import GraphConfig only: pandas and the numba kernels load where graphs are built
    import pandas as pd

#: Edge constructions of :attr:`GraphConfig.construction`.
CONSTRUCTIONS = ("cuts", "module_map", "cuts+module_map")
#: What the cuts of :attr:`GraphConfig.trajectory` extrapolate a hit pair along.
TRAJECTORIES = ("line", "helix")
#: Names of the extra node features appended with ``GraphConfig(cell_features=True)``.
CELL_FEATURES = ("cell_count", "cell_charge")


@dataclass(frozen=True)
class GraphConfig:
    """Cuts and options of the hit-graph construction (defaults: the documented graph)."""

    phi_slope_max: float = 0.0006
    """Largest |dphi| / |dr| of an edge in rad/mm (0.0006 ~ pT > 0.5 GeV in the 2 T field)."""
    dphi_margin: float = 0.003
    """Constant |dphi| allowance added to the phi-slope window, rad (hit resolution on short segments)."""
    z0_max: float = 200.0
    """Largest |z0| (mm) where the (r, z) line through both hits meets the beam line."""
    trajectory: str = "line"
    """What the phi-slope and z0 cuts extrapolate: ``line`` (straight in (r, phi) and (r, z)) or ``helix`` (a circle
    through the beam line of curvature up to 2 ``phi_slope_max`` per mm, z0 along the helix; keeps low-pT segments
    at the strips' radii)."""
    helix_reach: float = 1.0
    """With ``helix``: the phi window's most curved circle turns at this multiple of the outer hit's radius (1: a
    particle turning at the outer layer; more narrows the window where low-pT particles run tangential)."""
    deta_max: float = 0.07
    """Largest |deta| between the two hits of a disc → disc edge (the eta window)."""
    skip_missing: bool = True
    """Also connect hits one layer apart when no hit on the layer between bridges them (a hit the particle missed)."""
    skip_phi_slope_max: float = 0.0003
    """Phi-slope cut of the edges that jump a layer, rad/mm (tighter: they only recover missed hits of pT > ~1 GeV tracks)."""
    skip_z0_max: float = 120.0
    """z0 cut of the edges that jump a layer, mm."""
    skip_dphi_margin: float | None = None
    """Constant |dphi| allowance of the edges that jump a layer, rad; None: ``dphi_margin`` (graphs built before it)."""
    bridge_dphi_margin: float | None = None
    """Constant |dphi| allowance of the bridge test's edges, rad; None: ``dphi_margin`` (graphs built before it)."""
    bridge_tolerance_xy: float = 5.0
    """A hit bridges a layer-jumping edge when within this transverse distance (mm) of its straight line..."""
    bridge_tolerance_rz: float = 10.0
    """... and within this distance along z (barrel hit) or r (disc hit), mm."""
    crossing_margin: float = 10.0
    """A segment crosses a layer between its hits only this far (mm) inside the layer's extent (helices clip edges)."""
    adjacency_min_pt: float = 0.5
    """pT (GeV) of the most curved helices traced when deriving the layer pairs."""
    adjacency_z0_max: float = 200.0
    """Half-length (mm) of the luminous region the layer-pair tracing starts from."""
    num_phi_bins: int = 128
    """Phi bins per layer of the binned search (speed only; the result does not depend on it)."""
    min_pt: float = 0.0
    """Truth-pT filter for studies: keep only hits of particles with pT >= min_pt GeV (0 keeps all hits, noise included)."""
    cell_features: bool = False
    """Append the cell count / 10 and summed cell charge of every hit to the node features."""
    node_features: tuple[str, ...] = ("r", "phi", "z")
    """Names of the node features (columns of x), see :data:`domainpar.data.features.NODE_FEATURES`."""
    edge_features: tuple[str, ...] = ("dr", "dphi", "dz", "dR")
    """Names of the edge features (columns of edge_attr), see :data:`domainpar.data.features.EDGE_FEATURES`."""
    construction: str = "cuts"
    """How edges are found: ``cuts`` (the cuts above), ``module_map`` (:mod:`domainpar.data.module_map`) or ``cuts+module_map`` (both)."""
    module_map: str = ""
    """Path of the module map .npz (the constructions with ``module_map`` only)."""
    module_map_hash: str = ""
    """Content hash of that map; empty: read from the file. A build given a map of another hash refuses it."""
    volumes: tuple[int, ...] = ()
    """Detector volumes whose hits are the graph's nodes (the pixel detector: [7, 8, 9], as the pixel-only studies
    build); not given (the default): every hit, and an empty list given is refused. Recorded like every setting, so
    a model trained on a region builds that region of any event it is given."""

    def __post_init__(self) -> None:
        if self.volumes != ():
            from domainpar.data.subset import check_volumes

            object.__setattr__(self, "volumes", check_volumes(self.volumes, "GraphConfig.volumes"))
        for name in ("node_features", "edge_features"):
            value = getattr(self, name)
            if isinstance(value, str) or not isinstance(value, (tuple, list)):
                raise DomainparError(f"GraphConfig.{name} must be a list of feature names (got {value!r})")
            kind = name.split("_")[0]
            object.__setattr__(self, name, feature_catalogue.check_names(tuple(value), kind, f"GraphConfig.{name}"))
        positive = ("phi_slope_max", "z0_max", "skip_phi_slope_max", "skip_z0_max", "bridge_tolerance_xy", "bridge_tolerance_rz", "deta_max", "adjacency_min_pt", "adjacency_z0_max")
        for name in positive:
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise DomainparError(f"GraphConfig.{name} must be a positive finite number (got {value})")
        for name in ("crossing_margin", "dphi_margin", "min_pt", "skip_dphi_margin", "bridge_dphi_margin"):
            value = getattr(self, name)
            if name.endswith("_dphi_margin") and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) or not (np.isfinite(value) and value >= 0):
                raise DomainparError(f"GraphConfig.{name} must be a non-negative number (got {value!r})")
        if not (isinstance(self.helix_reach, (int, float, np.integer, np.floating)) and not isinstance(self.helix_reach, bool)
                and np.isfinite(self.helix_reach) and self.helix_reach >= 1.0):
            raise DomainparError(f"GraphConfig.helix_reach must be a number >= 1 (got {self.helix_reach!r})")
        if self.trajectory == "line" and self.helix_reach != 1.0:
            raise DomainparError(f"GraphConfig.helix_reach is for trajectory 'helix' (got trajectory {self.trajectory!r})")
        if self.trajectory not in TRAJECTORIES:
            raise DomainparError(f"GraphConfig.trajectory must be one of {list(TRAJECTORIES)} (got {self.trajectory!r})")
        if self.construction not in CONSTRUCTIONS:
            raise DomainparError(f"GraphConfig.construction must be one of {list(CONSTRUCTIONS)} (got {self.construction!r})")
        if self.construction != "cuts":
            if not self.module_map:
                raise DomainparError(f"GraphConfig.module_map must name the module map .npz for construction {self.construction!r} (got none)")
            if not self.module_map_hash:
                from domainpar.data.module_map import map_hash_of

                object.__setattr__(self, "module_map_hash", map_hash_of(self.module_map))
        elif self.module_map or self.module_map_hash:
            raise DomainparError(f"GraphConfig.module_map is for the constructions with a module map (got construction {self.construction!r})")
        if not (isinstance(self.num_phi_bins, (int, np.integer)) and 1 <= self.num_phi_bins <= 4096):
            raise DomainparError(f"GraphConfig.num_phi_bins must be an integer in [1, 4096] (got {self.num_phi_bins})")

    @property
    def node_feature_names(self) -> tuple[str, ...]:
        """The columns of x: ``node_features``, plus the legacy cell features with ``cell_features``."""
        extra = tuple(n for n in CELL_FEATURES if self.cell_features and n not in self.node_features)
        return self.node_features + extra

    @property
    def needs_cells(self) -> bool:
        """Whether building needs the event's cells table."""
        return any(n in feature_catalogue.CELL_NODE_FEATURES for n in self.node_feature_names)

    @property
    def skip_margin(self) -> float:
        """The |dphi| allowance the layer-jumping edges are built with (:attr:`skip_dphi_margin`, else
        :attr:`dphi_margin`)."""
        return self.dphi_margin if self.skip_dphi_margin is None else self.skip_dphi_margin

    @property
    def bridge_margin(self) -> float:
        """The |dphi| allowance of the bridge test's edges (:attr:`bridge_dphi_margin`, else :attr:`dphi_margin`)."""
        return self.dphi_margin if self.bridge_dphi_margin is None else self.bridge_dphi_margin

    def to_dict(self) -> dict:
        """Plain dict (JSON- and YAML-safe; tuples become lists)."""
        values = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        for name in ("skip_dphi_margin", "bridge_dphi_margin"):
            if values[name] is None:
                values.pop(name)  # what graphs built before the setting existed record (same hashes)
        if self.trajectory == "line":
            values.pop("trajectory")  # graphs of straight cuts record what they recorded before (same hashes)
            values.pop("helix_reach")
        if not self.volumes:
            values.pop("volumes")  # the same: whole-detector graphs record what they recorded before
        if self.construction == "cuts":
            # Graphs built with the cuts record what they recorded before the module map existed (same JSON, same hashes).
            for name in ("construction", "module_map", "module_map_hash"):
                values.pop(name)
        return values

    def to_json(self) -> str:
        """The configuration as one JSON object (what a graph file records)."""
        import json

        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, values: dict, source: str = "graph config") -> "GraphConfig":
        """Inverse of :meth:`to_dict`; unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        if not isinstance(values, dict):
            raise DomainparError(f"{source}: expected a mapping of graph settings (got {type(values).__name__})")
        unknown = sorted(set(values) - known)
        if unknown:
            raise DomainparError(f"{source}: unknown graph settings {unknown} (expected a subset of {sorted(known)})")
        converted = {k: tuple(v) if k in ("node_features", "edge_features") and isinstance(v, list) else v for k, v in values.items()}
        try:
            return cls(**converted)
        except DomainparError as exc:
            raise DomainparError(f"{source}: {exc}") from None
        except TypeError as exc:
            raise DomainparError(f"{source}: invalid graph settings ({exc})") from None

    def layer_pair_config(self, max_skip: int = 0) -> LayerPairConfig:
        """How the layer pairs are traced (``max_skip=1`` adds the pairs one layer apart)."""
        return LayerPairConfig(z0_max=self.adjacency_z0_max, min_pt=self.adjacency_min_pt, max_skip=max_skip)


@dataclass(frozen=True)
class GraphStats:
    """What one graph construction produced and how well it kept the true segments."""

    event_id: int
    """TrackML event number."""
    num_nodes: int
    """Nodes (hits) in the graph."""
    num_edges: int
    """Candidate edges in the graph."""
    num_true_segments: int | None
    """True segments among the graph's nodes (None without truth)."""
    num_true_kept: int | None
    """True segments that are edges of the graph (None without truth)."""
    efficiency: float | None
    """num_true_kept / num_true_segments (None without truth or without true segments)."""
    efficiency_pt1: float | None
    """The same for segments of particles with pT > 1 GeV (None without truth or without such segments)."""
    purity: float | None
    """Fraction of edges that are true segments (None without truth or without edges)."""
    seconds: float
    """Wall-clock time of the construction (geometry, search, labels), excluding file reading."""

    def as_record(self) -> dict:
        """The JSON record of ``domainpar build --json``."""
        return asdict(self)


def _search_edges(
    r: np.ndarray, phi: np.ndarray, z: np.ndarray, layer: np.ndarray, config: GraphConfig, event_id: int = 0
) -> np.ndarray:
    """(2, E) int64 inner → outer node indices of every candidate segment, sorted by (src, dst).

    The binned search runs on :func:`domainpar.kernels.chunks.build_threads` threads, a chunk of work items
    (layer pair, inner hits) each; its segments are put in (src, dst) order by one sort of int64 keys.
    """
    import pandas as pd

    from domainpar.kernels import chunks
    from domainpar.kernels.segments import find_segments, work_items

    table = layer_table()
    num_layers = len(table)
    num_bins = int(config.num_phi_bins)
    barrel = table["barrel"].to_numpy(bool)
    eta = np.arcsinh(z / np.maximum(r, 1e-9))
    secondary = np.where(barrel[layer], z, r)
    phi_bin = np.minimum(((phi + np.pi) / (2 * np.pi) * num_bins).astype(np.int64), num_bins - 1)
    phi_bin = np.maximum(phi_bin, 0)
    order = np.lexsort((secondary, phi_bin, layer))
    sorted_layer = layer[order]
    cell = sorted_layer * num_bins + phi_bin[order]
    bin_start = np.searchsorted(cell, np.arange(num_layers * num_bins + 1)).astype(np.int64)
    layer_start = bin_start[::num_bins].copy()
    bin_start_2d = np.stack([bin_start[k * num_bins : (k + 1) * num_bins + 1] for k in range(num_layers)])
    r_s, z_s = r[order], z[order]
    extent = pd.DataFrame({"layer": sorted_layer, "r": r_s, "z": z_s}).groupby("layer").agg(
        r_lo=("r", "min"), r_hi=("r", "max"), z_lo=("z", "min"), z_hi=("z", "max")
    )
    extent = extent.reindex(np.arange(num_layers)).fillna(0.0)
    pair_config = config.layer_pair_config(max_skip=1 if config.skip_missing else 0)
    between_start, between_layers = layers_between(pair_config)
    pairs = layer_pairs(pair_config)
    consecutive = {tuple(pair) for pair in layer_pairs(config.layer_pair_config(max_skip=0)).tolist()}
    pair_jumps = np.array([tuple(pair) not in consecutive for pair in pairs.tolist()], dtype=bool)
    floats = [
        r_s, phi[order], z_s, eta[order], secondary[order],
        extent["r_lo"], extent["r_hi"], extent["z_lo"], extent["z_hi"],
        table["r"], table["z"], table["r_min"], table["r_max"], table["z_min"], table["z_max"],
    ]  # fmt: skip
    # One array type per argument (C-contiguous, writable) so numba compiles find_segments once.
    floats = [np.require(np.asarray(values, dtype=np.float64), np.float64, ["C", "W"]) for values in floats]
    ints = [np.require(values, np.int64, ["C", "W"]) for values in (layer_start, bin_start_2d, pairs, between_start, between_layers)]
    # Items of at most 512 inner hits: ~250 on a full event, grouped into a few chunks per thread of about equal
    # inner hits, handed out as threads free up (the pairs' costs per hit differ).
    items = work_items(ints[2], ints[0], 512)
    hits_done = np.concatenate([[0], np.cumsum(items[:, 2] - items[:, 1])])
    threads = chunks.build_threads()
    pieces = min(8 * threads, max(1, int(hits_done[-1]) // 2048)) if threads > 1 else 1
    n = np.int64(r.size)
    if 2 * n * n >= np.iinfo(np.int64).max:  # never for a detector's hits; the keys below need 2 N^2 < 2^63
        raise DomainparError(f"hits: too many for one graph ({int(n)})")
    node = np.require(order, np.int64, ["C", "W"])

    def search_items(chosen: np.ndarray, capacity: int) -> np.ndarray:
        return find_segments(
            *floats[:5],
            ints[0],
            ints[1],
            num_bins,
            np.require(barrel, np.bool_, ["C", "W"]),
            *floats[5:9],
            ints[2],
            chosen,
            np.require(pair_jumps, np.bool_, ["C", "W"]),
            ints[3],
            ints[4],
            *floats[9:],
            float(config.crossing_margin),
            float(config.phi_slope_max),
            float(config.dphi_margin),
            float(config.z0_max),
            float(config.deta_max),
            float(config.skip_phi_slope_max),
            float(config.skip_z0_max),
            float(config.skip_margin),
            bool(config.skip_missing),
            node,
            capacity,
            config.trajectory == "helix",
            float(config.helix_reach),
        )

    def search(first: int, last: int) -> np.ndarray:
        # Room for the segments of ~8 per inner hit and pair (a full event's average is 6): rarely grown.
        return search_items(items[first:last], 8 * int(hits_done[last] - hits_done[first]))

    _check_room(int(event_id), int(n), items, hits_done, search_items)
    ranges = chunks.weighted_bounds(hits_done, pieces) if items.shape[0] else []
    keys = np.concatenate(chunks.run(search, ranges)) if ranges else np.zeros(0, np.int64)
    # Sorted by key is sorted by (src, dst) (a pair of nodes is one key, whatever the order the search found it in).
    keys.sort()
    crossed = keys & 1
    pair_key = keys >> 1
    src = pair_key // n
    dst = pair_key - src * n
    if config.skip_missing:
        keep = _unbridged(src, dst, crossed, r, phi, z, barrel[layer], config)
        if keep is not None:
            src, dst = src[keep], dst[keep]
    return np.stack([src, dst])


#: Bytes the build holds per candidate edge at its peak (the search's keys and their sort, the triplet table, the
#: edge features, the labels): event 21000's full graph took 165 above the process's own (4.19M edges, 0.66 GB).
BUILD_BYTES_PER_EDGE = 200
#: Candidate edges per hit below which no event is estimated: a full real event has 33 (event 21000).
DENSE_EDGES_PER_HIT = 100
#: Work items of the search a density estimate runs (a sample across layer pairs and the detector).
ESTIMATE_ITEMS = 64


def memory_room() -> tuple[int, str] | None:
    """The memory one build may take at most, and whose limit it is: the machine's or its container's memory, or
    what ``ulimit -v`` leaves this process; None where neither can be read."""
    from domainpar.workers import memory_bytes, process_memory_limit

    found = [memory_bytes()]
    limit = process_memory_limit()
    if limit is not None:
        try:
            with open("/proc/self/statm", encoding="ascii") as fh:
                mapped = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            mapped = 0
        found.append((max(0, limit - mapped), "what this process's address-space limit (ulimit -v) leaves:"))
    found = [room for room in found if room is not None]
    return min(found) if found else None


def _check_room(event_id: int, num_hits: int, items: np.ndarray, hits_done: np.ndarray, search_items) -> None:
    """Refuse, before the search, an event whose graph cannot be built in this machine's memory.

    An event far denser than the cuts were made for (events overlaid into one, coordinates squeezed) has candidate
    edges growing with the square of its density: a full event tiled 16 times (2M hits) took the 21 GB of a 23 GB
    machine before it was killed, with no word of why. Where even a busy event's density
    (:data:`DENSE_EDGES_PER_HIT`) could not fit, the search runs on a sample of its work items first, and the edges
    it finds, scaled to all inner hits, at :data:`BUILD_BYTES_PER_EDGE`, must fit: a necessary condition (other
    processes' memory is not counted), so an event that fits is never refused.

    Raises:
        MachineFault: the estimated build does not fit (exit 1: a machine with more memory could build it).
    """
    room = memory_room()
    total_hits = int(hits_done[-1])
    if room is None or total_hits == 0 or num_hits * DENSE_EDGES_PER_HIT * BUILD_BYTES_PER_EDGE <= room[0]:
        return
    from domainpar.errors import MachineFault

    sample = np.ascontiguousarray(items[:: max(1, items.shape[0] // ESTIMATE_ITEMS)])
    sampled_hits = int((sample[:, 2] - sample[:, 1]).sum())
    if sampled_hits == 0:
        return
    estimate = search_items(sample, 8 * sampled_hits).size * total_hits / sampled_hits
    need = estimate * BUILD_BYTES_PER_EDGE
    if need > room[0]:
        raise MachineFault(
            f"event {event_id}: the graph of its {num_hits:,} hits would have ~{estimate:,.0f} candidate edges (a detector's full "
            f"event has ~4 million), ~{need / 1e9:.1f} GB to build, more than {room[1]} {room[0] / 1e9:.1f} GB; build it "
            "on a machine with more memory, or with tighter graph cuts"
        )


def _unbridged(src, dst, crossed, r, phi, z, is_barrel, config) -> np.ndarray | None:
    """Which edges to keep: all but the layer-jumping ones that a hit on the jumped layer bridges (None: all).

    A particle that left a hit b between a and c has the true segments a–b
    and b–c and not a–c, so a jumping edge a -> c is dropped when some hit b
    has adjacent-layer edges a -> b and b -> c that both pass the (tighter)
    skip cuts and lies within the bridge tolerances of the straight line
    a -> c. The tight cuts and tolerances keep a random hit from bridging the
    true segment of a particle that really missed that layer, while the hit
    b of a track that did leave one still bridges the fake jumps from its
    earlier hits. The test keeps its own margin (``GraphConfig.bridge_margin``)
    when ``skip_dphi_margin`` or ``dphi_margin`` widen the edges themselves: a
    wider bridge lets chance hits drop true jumps (docs/tracks.md).

    Args:
        src, dst: (E,) int64 node indices of every candidate, sorted by (src, dst).
        crossed: (E,) int64 layers its segment crosses (1: it jumps a layer).
        r, phi, z: (N,) float64 hit coordinates.
        is_barrel: (N,) bool, the hit lies on a barrel layer.
        config: the skip cuts and bridge tolerances.

    Returns:
        (E,) bool, or None when no candidate jumps a layer.
    """
    from domainpar.kernels import chunks
    from domainpar.kernels.segments import bridge_candidates, bridged

    jumping = crossed == 1
    if not jumping.any():
        return None
    # One array type per argument for the kernels (z arrives as a column view of the positions).
    r, phi, z = (np.ascontiguousarray(values, dtype=np.float64) for values in (r, phi, z))
    is_barrel = np.ascontiguousarray(is_barrel, dtype=np.bool_)
    src, dst = (np.ascontiguousarray(values, dtype=np.int64) for values in (src, dst))
    bridge = np.empty(src.size, dtype=bool)

    def tight(lo: int, hi: int) -> None:
        bridge_candidates(src, dst, jumping, r, phi, z, float(config.skip_phi_slope_max), float(config.skip_z0_max),
                          float(config.bridge_margin), lo, hi, bridge)  # fmt: skip

    chunks.run(tight, chunks.bounds(src.size, 4 * chunks.build_threads()))
    # A subsequence of edges sorted by (src, dst): the out-edges of every node, their destinations sorted.
    out_dst = dst[bridge]
    out_start = np.zeros(r.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(src[bridge], minlength=r.size), out=out_start[1:])
    skips = np.flatnonzero(jumping)
    skip_src, skip_dst = src[skips], dst[skips]

    def check(lo: int, hi: int) -> np.ndarray:
        return bridged(
            out_start, out_dst, skip_src[lo:hi], skip_dst[lo:hi], r, phi, z, is_barrel,
            float(config.bridge_tolerance_xy), float(config.bridge_tolerance_rz),
        )

    keep = np.ones(src.size, dtype=bool)
    keep[skips[np.concatenate(chunks.run(check, chunks.bounds(skips.size, 4 * chunks.build_threads(), 4096)))]] = False
    return keep


def _map_edges(hits, keep, layer, pos, config: GraphConfig) -> np.ndarray:
    """(2, E) int64 edges of the module map ``config.module_map`` (of hash ``config.module_map_hash``)."""
    from domainpar.data.module_map import cached_module_map, map_edges, module_keys

    _require_columns(hits, "hits", ("module_id",))
    module_id = hits["module_id"].to_numpy()
    if keep is not None:
        module_id = module_id[keep]
    module_map = cached_module_map(config.module_map, config.module_map_hash)
    return map_edges(module_map, module_keys(layer, module_id), pos)


def build_graph(
    hits: pd.DataFrame,
    truth: pd.DataFrame | None = None,
    particles: pd.DataFrame | None = None,
    cells: pd.DataFrame | None = None,
    *,
    config: GraphConfig = GraphConfig(),
    event_id: int = 0,
) -> tuple[EventGraph, GraphStats]:
    """Build the hit graph of one event.

    Args:
        hits: TrackML hits (hit_id, x, y, z, volume_id, layer_id), N rows.
        truth: TrackML truth (hit_id, particle_id[, tpx, tpy]); None builds an
            unlabelled graph.
        particles: TrackML particles (particle_id, vx, vy, vz, px, py) for the
            particle pT and production vertex; optional.
        cells: TrackML cells, needed only when the node features include cluster features (``config.needs_cells``).
        config: the cuts.
        event_id: stored in the graph.

    Returns:
        ``(graph, stats)``. Nodes keep the order of ``hits`` (after the
        optional volume and truth-pT filters); edges are sorted by (src, dst).
    """
    start = time.perf_counter()
    _require_columns(hits, "hits", ("hit_id", "x", "y", "z", "volume_id", "layer_id"))
    if hits.shape[0] == 0:
        raise DomainparError("hits must contain at least one hit (got an empty table)")
    if config.volumes:
        inside = hits["volume_id"].isin(config.volumes).to_numpy()
        if not inside.any():
            raise DomainparError(f"hits: expected hits in the graph's volumes {list(config.volumes)} (found none)")
        hits = hits[inside]  # the region's hits are the nodes, in their order; truth and cells are joined by hit_id
    if config.min_pt > 0 and truth is None:
        raise DomainparError(f"GraphConfig.min_pt={config.min_pt} filters by truth pT, so it needs truth (got none)")
    if config.needs_cells and cells is None:
        if config.cell_features:
            raise DomainparError("GraphConfig.cell_features=True needs the cells table (got none)")
        raise DomainparError(f"GraphConfig.node_features {list(config.node_feature_names)} need the cells table (got none)")
    layer = layer_index_of(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy())
    if (layer < 0).any():
        bad = hits.loc[layer < 0, ["volume_id", "layer_id"]].iloc[0]
        raise DomainparError(
            f"hits: volume_id/layer_id must be a layer of the TrackML detector "
            f"(got volume_id={int(bad['volume_id'])}, layer_id={int(bad['layer_id'])})"
        )
    hit_id = hits["hit_id"].to_numpy(np.int64)
    pos = hits[["x", "y", "z"]].to_numpy(np.float64)
    if truth is not None:
        particle_id, particle_pt, vertex = _truth_per_hit(hits, truth, particles)
        # Hits of each particle in the event as read (before the truth-pT filter): what target selections count.
        _, first_of, count = np.unique(particle_id, return_inverse=True, return_counts=True)
        nhits = np.where(particle_id != 0, count[first_of], 0).astype(np.int64)
        if config.min_pt > 0:
            keep = (particle_id != 0) & (particle_pt >= config.min_pt)
            hit_id, pos, layer = hit_id[keep], pos[keep], layer[keep]
            particle_id, particle_pt, vertex, nhits = particle_id[keep], particle_pt[keep], vertex[keep], nhits[keep]
    r = np.hypot(pos[:, 0], pos[:, 1])
    phi = np.arctan2(pos[:, 1], pos[:, 0])
    z = pos[:, 2]
    edge_index = np.zeros((2, 0), np.int64) if config.construction == "module_map" else _search_edges(r, phi, z, layer, config, event_id)
    if config.construction != "cuts":
        found = _map_edges(hits, keep if truth is not None and config.min_pt > 0 else None, layer, pos, config)
        n = np.int64(pos.shape[0])  # both sets inner → outer: one directed key per edge, sorted, is (src, dst) order
        keys = np.union1d(edge_index[0] * n + edge_index[1], found[0].astype(np.int64) * n + found[1])
        edge_index = np.stack([keys // n, keys % n])
    x, edge_attr = feature_catalogue.compute_features(
        config.node_feature_names, config.edge_features, hit_id, pos, edge_index, cells if config.needs_cells else None
    )
    num_nodes = hit_id.size
    num_edges = edge_index.shape[1]
    y = stats_truth = None
    if truth is not None:
        segments = true_segments(particle_id, layer, pos, vertex)
        segment_keys = pair_keys(segments[0], segments[1], num_nodes)
        edge_keys = pair_keys(edge_index[0], edge_index[1], num_nodes)
        y_bool = member(edge_keys, segment_keys)
        # A true segment is an edge iff its key is among the edge keys that are true segments (a short list).
        kept = member(segment_keys, edge_keys[y_bool])
        high_pt = particle_pt[segments[0]] > 1.0
        y = y_bool.astype(np.float32)
        stats_truth = (
            int(segment_keys.size),
            int(kept.sum()),
            float(kept.mean()) if kept.size else None,
            float(kept[high_pt].mean()) if high_pt.any() else None,
            float(y_bool.mean()) if num_edges else None,
        )
    graph = EventGraph(
        event_id=int(event_id),
        x=x.astype(np.float32),
        pos=pos.astype(np.float32),
        hit_id=hit_id,
        layer=layer.astype(np.int64, copy=False),
        edge_index=edge_index.astype(np.int64, copy=False),  # built here: no one else holds it
        edge_attr=edge_attr,
        y=y,
        particle_id=None if truth is None else particle_id.astype(np.int64),
        particle_pt=None if truth is None else particle_pt.astype(np.float32),
        particle_nhits=None if truth is None else nhits,
        particle_vertex=None if truth is None else np.where((particle_id != 0)[:, None], vertex, 0.0).astype(np.float32),
        node_features=config.node_feature_names,
        edge_features=config.edge_features,
        build_config=config.to_json(),
    )
    num_true, num_kept, efficiency, efficiency_pt1, purity = stats_truth or (None,) * 5
    stats = GraphStats(
        event_id=int(event_id),
        num_nodes=num_nodes,
        num_edges=num_edges,
        num_true_segments=num_true,
        num_true_kept=num_kept,
        efficiency=efficiency,
        efficiency_pt1=efficiency_pt1,
        purity=purity,
        seconds=time.perf_counter() - start,
    )
    return graph, stats


def build_event_graph(prefix: str | os.PathLike, config: GraphConfig = GraphConfig()) -> tuple[EventGraph, GraphStats]:
    """Read the event at ``prefix`` and build its graph (labelled when a truth file exists).

    Args:
        prefix: path without the part suffix, e.g. ``data/event000000001``.
        config: the cuts.
    """
    from domainpar.data.trackml import event_id_of, has_truth, load_event

    labelled = has_truth(prefix)
    if config.min_pt > 0 and not labelled:
        raise DomainparError(
            f"{prefix}: GraphConfig.min_pt {config.min_pt:g} keeps hits by truth pT, so it needs the event's truth file (found none)"
        )
    parts = ["hits"]
    if config.needs_cells:
        parts.append("cells")
    if labelled:
        parts += ["particles", "truth"]
    frames = dict(zip(parts, load_event(prefix, parts=tuple(parts))))
    return build_graph(
        frames["hits"],
        frames.get("truth"),
        frames.get("particles"),
        frames.get("cells"),
        config=config,
        event_id=event_id_of(prefix),
    )

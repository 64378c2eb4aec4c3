"""Where each lost particle is lost: the first stage of the chain that breaks it, by pT (``evaluate --losses``).

Every particle the binned efficiencies count (not noise, hits on at least ``min_layers`` layers; pT bins of
:data:`LOSS_PT_BINS` and one bin above ``pt_min``) is either *perfect* (a track of exactly its hits) or lost at the
first of :data:`STAGES` that breaks its *chain*, its hits joined into one piece by its own true segments
(:mod:`domainpar.data.true_segments`, taken undirected): ``graph`` (a hit is no node, or the segments the
construction built do not join them), ``filter`` (those the edge filter kept do not), ``gnn`` (those scored above
the builder's own cut, :attr:`~domainpar.tracks.config.TrackConfig.follow_threshold`, do not), ``weak`` (those
above the working point ``threshold`` do not), ``builder`` (the chain is whole above the threshold and the builder
still left the particle). A particle a builder bridged is counted perfect (``perfect_broken`` counts them by the
stage that broke their chain); each lost stage is split into ``missed`` (no double-majority track) and
``not_perfect``. The definitions in full, with a particle's double hits and loops: docs/tracks.md, "Where
particles are lost, by pT".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from domainpar.arrays import member, unique
from domainpar.data.true_segments import pair_keys, true_segments
from domainpar.errors import DomainparError
from domainpar.tracks.efficiency import PT_BINS, TrackingMetrics

#: Stages in chain order; a particle's ``chain_lost`` is 1 + the index of the first that breaks it (0: none).
STAGES = ("graph", "filter", "gnn", "weak", "builder")
GRAPH, FILTER, GNN, WEAK, BUILDER = range(1, 6)
#: pT bin edges (GeV) below ``pt_min`` of the losses table: the low end of :data:`~domainpar.tracks.efficiency.PT_BINS`.
LOSS_PT_BINS = PT_BINS[PT_BINS <= 1.0]


@dataclass(frozen=True)
class EventSegments:
    """The true segments among a graph's nodes and which the graph construction built (before any filter)."""

    segments: np.ndarray
    """(2, S) int64 node indices of every true segment between the graph's hits."""
    built: np.ndarray
    """(S,) bool: the construction made an edge of it (either direction)."""


def event_segments(particle_id: np.ndarray, layer: np.ndarray, pos: np.ndarray, vertex: np.ndarray | None,
                   built_edge_index: np.ndarray) -> EventSegments:  # fmt: skip
    """The true segments of a graph's nodes, each flagged built when the unfiltered graph has it.

    Args:
        particle_id: (N,) int64 truth particle of every node (0: noise).
        layer: (N,) int64 layer code of every node.
        pos: (N, 3) hit positions (mm).
        vertex: (N, 3) production vertex of every node's particle (mm), or None (the origin).
        built_edge_index: (2, E_built) int64 the graph's edges as constructed, before the edge filter.
    """
    particle_id = np.asarray(particle_id, np.int64)
    num_nodes = particle_id.shape[0]
    segments = true_segments(particle_id, np.asarray(layer, np.int64), pos, vertex)
    # Only edges within one particle can be true segments: testing those alone is an order of magnitude cheaper.
    inner = built_edge_index[:, _within_particles(particle_id, built_edge_index)]
    built = member(pair_keys(segments[0], segments[1], num_nodes), pair_keys(inner[0], inner[1], num_nodes))
    return EventSegments(segments, built)


def _within_particles(particle_id: np.ndarray, edge_index: np.ndarray) -> np.ndarray:
    """(E,) bool: the edges of ``edge_index`` (2, E) whose two hits belong to one particle (not noise)."""
    first = particle_id[edge_index[0]]
    return (first == particle_id[edge_index[1]]) & (first != 0)


@dataclass(frozen=True)
class ParticleLosses:
    """One event's particles, each with the first stage that breaks its chain (the module docstring)."""

    particle_id: np.ndarray
    """(P,) every non-noise particle with hits, ascending (as :class:`~domainpar.tracks.efficiency.TrackingMetrics`)."""
    pt: np.ndarray
    """(P,) pT (GeV)."""
    nlayers: np.ndarray
    """(P,) distinct layers hit."""
    matched: np.ndarray
    """(P,) bool: a double-majority track."""
    perfect: np.ndarray
    """(P,) bool: a perfectly matching track."""
    chain_lost: np.ndarray
    """(P,) int8: :data:`GRAPH` .. :data:`WEAK`, the first stage that breaks the particle's chain; 0 when intact."""

    @property
    def stage(self) -> np.ndarray:
        """(P,) int8: 0 for a perfect particle, else the first stage that lost it (:data:`BUILDER` when its chain is
        intact)."""
        return np.where(self.perfect, 0, np.where(self.chain_lost > 0, self.chain_lost, BUILDER)).astype(np.int8)


def chain_joined(
    num_nodes: int, segments: np.ndarray, keep: np.ndarray, node_particle: np.ndarray, num_particles: int
) -> np.ndarray:
    """(P,) bool: the particle's graph hits are one connected piece through the kept segments.

    Args:
        num_nodes: N, the graph's nodes.
        segments: (2, S) int64 true segments (:attr:`EventSegments.segments`).
        keep: (S,) bool the segments a stage kept.
        node_particle: (N,) int64 each node's row in the particle arrays, -1 for noise.
        num_particles: P.
    """
    # scipy's graph module on use: only runs with truth call this (~0.2 s of every reconstruct process's start-up)
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    chosen = segments[:, keep]
    ones = np.ones(chosen.shape[1], dtype=np.int8)
    adjacency = coo_matrix((ones, (chosen[0], chosen[1])), shape=(num_nodes, num_nodes))
    num_pieces, piece = connected_components(adjacency.tocsr(), directed=False)
    real = node_particle >= 0
    pairs = unique(node_particle[real].astype(np.int64) * num_pieces + piece[real])
    return np.bincount(pairs // num_pieces, minlength=num_particles) == 1


def _scores_of(
    segments: np.ndarray, edge_index: np.ndarray, scores: np.ndarray, particle_id: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(present (S,), score (S,))``: whether each segment is an edge of the graph, and its score (the highest of
    duplicate edges; -inf when absent). ``particle_id`` (N,) is every node's particle."""
    num_nodes = particle_id.size
    inner = _within_particles(particle_id, edge_index)  # the only edges that can be true segments
    edge_index, scores = edge_index[:, inner], scores[inner]
    keys = pair_keys(edge_index[0], edge_index[1], num_nodes)
    order = np.lexsort((scores, keys))
    sorted_keys = keys[order]
    wanted = pair_keys(segments[0], segments[1], num_nodes)
    at = np.searchsorted(sorted_keys, wanted, side="right") - 1
    present = (at >= 0) & (sorted_keys[np.maximum(at, 0)] == wanted) if keys.size else np.zeros(wanted.size, bool)
    score = np.where(present, scores[order][np.maximum(at, 0)] if keys.size else 0.0, -np.inf)
    return present, score


def particle_losses(
    segments: EventSegments,
    node_particle_id: np.ndarray,
    edge_index: np.ndarray,
    scores: np.ndarray,
    event_particle_id: np.ndarray,
    tracking: TrackingMetrics,
    follow_threshold: float,
    threshold: float,
) -> ParticleLosses:
    """The first stage that breaks every particle's chain (the module docstring).

    Args:
        segments: :func:`event_segments` of the graph's nodes.
        node_particle_id: (N,) int64 truth particle of every graph node.
        edge_index: (2, E) int64 the edges the GNN scored (after the filter).
        scores: (E,) their scores.
        event_particle_id: (M,) int64 truth particle of every hit of the event (the graph may hold fewer).
        tracking: the event's track figures (the particles, their pT, layers, matches).
        follow_threshold: the builder's own cut (:attr:`~domainpar.tracks.config.TrackConfig.follow_threshold`).
        threshold: the working point.

    Raises:
        DomainparError: a graph node whose particle the event does not have.
    """
    node_particle_id = np.asarray(node_particle_id, np.int64)
    num_nodes = node_particle_id.size
    ids = tracking.particle_id
    row = np.searchsorted(ids, node_particle_id)
    real = node_particle_id != 0
    if real.any() and not np.array_equal(ids[np.minimum(row[real], max(ids.size - 1, 0))], node_particle_id[real]):
        raise DomainparError("graph nodes: expected particles of the event's truth, got a particle the event does not have")
    node_particle = np.where(real, row, -1)
    # A particle with a hit the graph has no node for cannot be built whole.
    event_ids, event_hits = np.unique(np.asarray(event_particle_id, np.int64), return_counts=True)
    whole = np.bincount(node_particle[real], minlength=ids.size) == event_hits[np.searchsorted(event_ids, ids)]
    present, score = _scores_of(segments.segments, edge_index, np.asarray(scores, np.float64), node_particle_id)
    kept = segments.built & present
    stages = (
        segments.built,
        kept,
        kept & (score > follow_threshold),
        kept & (score > max(follow_threshold, threshold)),
    )  # fmt: skip
    chain_lost = np.zeros(ids.size, dtype=np.int8)
    chain_lost[~whole] = GRAPH
    for code, keep in zip((GRAPH, FILTER, GNN, WEAK), stages):
        broken = (chain_lost == 0) & ~chain_joined(num_nodes, segments.segments, keep, node_particle, ids.size)
        chain_lost[broken] = code
    return ParticleLosses(ids, tracking.particle_pt, tracking.particle_nlayers, tracking.particle_matched,
                          tracking.particle_perfect, chain_lost)  # fmt: skip


def loss_bins(pt_min: float = 1.0) -> tuple[np.ndarray, list[str]]:
    """The losses table's pT bin edges below ``pt_min`` (GeV) and every bin's name, the last ``>pt_min``."""
    edges = np.append(LOSS_PT_BINS[LOSS_PT_BINS < pt_min], pt_min)
    return edges, [f"{lo:g}-{hi:g}" for lo, hi in zip(edges[:-1], edges[1:])] + [f">{pt_min:g}"]


def loss_bin_index(pt: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """(P,) int64 the bin of :func:`loss_bins` ``edges`` every pT falls in: [low, high) below ``edges[-1]`` (pT equal
    to it in the last of those), above it the last bin; -1 below ``edges[0]``."""
    pt = np.asarray(pt)
    where = np.searchsorted(edges, pt, side="right") - 1
    where[pt == edges[-1]] = edges.size - 2  # pT exactly pt_min: not above it, the last bin below
    where[pt < edges[0]] = -1
    return where


def losses_vs_pt(
    losses: list[ParticleLosses], follow_threshold: float, threshold: float, pt_min: float = 1.0, min_layers: int = 3
) -> dict:
    """Particles by first lost stage per pT bin, pooled over events (JSON-ready).

    The bins below ``pt_min`` hold pT in [low, high) (the last of them [low, pt_min]); the last bin holds pT above
    ``pt_min``: its particles, ``tracking_efficiency`` and ``perfect_efficiency`` are evaluate's overall ones.

    Returns:
        ``bins`` (B names), ``pt_edges``, ``selection``, ``follow_threshold``, ``threshold``, ``stages``; per bin
        (B lists): ``count``, ``tracking_efficiency``, ``perfect_efficiency`` (None in an empty bin),
        and ``missed`` and ``not_perfect``: for every stage of :data:`STAGES` B counts of the particles it lost;
        ``perfect_broken``: the same for perfect particles whose chain that stage broke (``builder``: none).
    """
    edges, names = loss_bins(pt_min)
    pool = {field: np.concatenate([getattr(p, field) for p in losses]) if losses else np.zeros(0)
            for field in ("pt", "nlayers", "matched", "perfect", "chain_lost")}  # fmt: skip
    stage = (ParticleLosses(np.zeros(0), pool["pt"], pool["nlayers"], pool["matched"].astype(bool),
                            pool["perfect"].astype(bool), pool["chain_lost"].astype(np.int8)).stage)  # fmt: skip
    pt = pool["pt"]
    where = loss_bin_index(pt, edges)
    where[pool["nlayers"] < min_layers] = -1
    matched, perfect = pool["matched"].astype(bool), pool["perfect"].astype(bool)
    bins = range(len(names))
    count = [int(np.count_nonzero(where == b)) for b in bins]
    rate = lambda passed: [float(np.count_nonzero(passed & (where == b)) / count[b]) if count[b] else None for b in bins]  # noqa: E731
    per_stage = lambda passed: {  # noqa: E731
        name: [int(np.count_nonzero(passed & (stage == code) & (where == b))) for b in bins]
        for code, name in enumerate(STAGES, start=1)
    }
    return {
        "bins": names,
        "pt_edges": [float(e) for e in edges],
        "selection": f"particles on >= {min_layers} layers, pT >= {edges[0]:g} GeV",
        "follow_threshold": float(follow_threshold),
        "threshold": float(threshold),
        "stages": list(STAGES),
        "count": count,
        "tracking_efficiency": rate(matched),
        "perfect_efficiency": rate(perfect),
        "missed": per_stage(~matched),
        "not_perfect": per_stage(matched & ~perfect),
        "perfect_broken": {
            name: [int(np.count_nonzero(perfect & (pool["chain_lost"] == code) & (where == b))) for b in bins]
            for code, name in enumerate(STAGES, start=1)
        },
    }


def format_losses(table: dict) -> str:
    """:func:`losses_vs_pt` as a Markdown table: per pT bin the particles, the efficiencies, per stage the fraction
    of the bin's particles it lost first, as ``all = missed + not perfect``, and the fraction *bridged*: perfect
    although their chain broke before the builder's cut (graph, filter or GNN)."""
    cut, threshold = table["follow_threshold"], table["threshold"]
    titles = {"graph": "graph", "filter": "filter", "gnn": f"GNN <= {cut:g}", "weak": f"GNN {cut:g}-{threshold:g}",
              "builder": "builder"}  # fmt: skip
    header = ["pT (GeV)", "particles", "tracking eff.", "perfect"] + [titles[s] for s in table["stages"]] + ["bridged"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for b, name in enumerate(table["bins"]):
        n = table["count"][b]
        fraction = lambda k, n=n: f"{k / n:.3f}" if n else "-"  # noqa: E731
        efficiencies = [f"{table[key][b]:.3f}" if table[key][b] is not None else "-"
                        for key in ("tracking_efficiency", "perfect_efficiency")]  # fmt: skip
        cells = []
        for stage in table["stages"]:
            missed, imperfect = table["missed"][stage][b], table["not_perfect"][stage][b]
            cells.append(f"{fraction(missed + imperfect)} = {fraction(missed)} + {fraction(imperfect)}")
        # Perfect although the builder had no chain of true segments above its cut to follow.
        bridged = sum(table["perfect_broken"][stage][b] for stage in ("graph", "filter", "gnn"))
        lines.append("| " + " | ".join([name, str(n), *efficiencies, *cells, fraction(bridged)]) + " |")
    return "\n".join(lines)


__all__ = ["BUILDER", "EventSegments", "FILTER", "GNN", "GRAPH", "LOSS_PT_BINS", "ParticleLosses", "STAGES", "WEAK",
           "chain_joined", "event_segments", "format_losses", "loss_bins", "losses_vs_pt", "particle_losses"]  # fmt: skip

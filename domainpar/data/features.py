"""Named node and edge features of the hit graph: what each column of ``x`` and ``edge_attr`` holds.

A graph's feature set is a tuple of names (``GraphConfig.node_features`` /
``edge_features``); the graph file stores the names next to the arrays, so a
model trained on one feature set refuses graphs of another by name, not only
by width. Every feature has one fixed scale, chosen so that its typical size
is of order one (the first three of each kind keep the scales of format-1
graphs: r/1000, φ/π, z/1000 and dr/1000, dφ/π, dz/1000, ΔR).

Edges point inner → outer (a = src, b = dst); Δ means b − a and Δφ is wrapped
into [−π, π). Cluster features come from the event's cells table: a hit
without cells (never the case in TrackML files) gets zeros.

This module is also the one written description of those inputs, in the
form a user outside Python needs to rebuild them (e.g. the C++ side of ACTS's
ExaTrkX plugin): for every column its name, the raw quantity with its unit,
and the scale it is divided by (``feature = raw / scale``, the convention of
the field's pipelines' ``node_scales``; clipped features say so in ``raw``).
Graph files, checkpoints and exported models' sidecars carry it
(:func:`graph_description`); ``tests/data/test_features.py`` recomputes the
columns of a real event from it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from domainpar.errors import DomainparError

if TYPE_CHECKING:  # a training rank reads features from graph files: neither pandas nor the numba kernels at import
    import pandas as pd

#: Bumped when the layout of a description changes.
DESCRIPTION_VERSION = 1


@dataclass(frozen=True)
class FeatureSpec:
    """One input column."""

    name: str
    """Column name (also the field name in PyG graph files)."""
    raw: str
    """The raw quantity, as a formula of hit coordinates (mm) and TrackML columns."""
    unit: str
    """Unit of the raw quantity."""
    scale: float
    """The column holds ``raw / scale``."""


#: Node feature columns, by name.
NODE_FEATURE_SPECS: dict[str, FeatureSpec] = {
    spec.name: spec
    for spec in (
        FeatureSpec("r", "sqrt(x^2 + y^2) of the hit", "mm", 1000.0),
        FeatureSpec("phi", "atan2(y, x) of the hit, in [-pi, pi]", "rad", math.pi),
        FeatureSpec("z", "z of the hit", "mm", 1000.0),
        FeatureSpec("eta", "asinh(z / r) of the hit (pseudorapidity seen from the origin)", "1", 3.0),
        FeatureSpec("cell_count", "number of cells of the hit (TrackML cells file)", "cells", 10.0),
        FeatureSpec("cell_charge", "sum of the cells' value (TrackML cells file)", "charge", 1.0),
        FeatureSpec("cluster_u", "distinct ch0 values of the hit's cells (cluster length along u)", "channels", 4.0),
        FeatureSpec("cluster_v", "distinct ch1 values of the hit's cells (cluster length along v)", "channels", 8.0),
    )
}

#: Edge feature columns, by name. src is the inner hit, dst the outer one.
EDGE_FEATURE_SPECS: dict[str, FeatureSpec] = {
    spec.name: spec
    for spec in (
        FeatureSpec("dr", "r_dst - r_src", "mm", 1000.0),
        FeatureSpec("dphi", "phi_dst - phi_src wrapped to [-pi, pi)", "rad", math.pi),
        FeatureSpec("dz", "z_dst - z_src", "mm", 1000.0),
        FeatureSpec(
            "dR", "sqrt(deta^2 + dphi^2), eta = asinh(z / r), dphi in rad wrapped to [-pi, pi)", "1", 1.0
        ),
        FeatureSpec("deta", "eta_dst - eta_src, eta = asinh(z / r)", "1", 0.1),
        FeatureSpec(
            "phi_slope", "dphi / dr (dphi wrapped, rad), clipped to [-0.01, 0.01]; 0.3 / pT[GeV] / 1000 for a track "
            "from the beam line in 2 T", "rad/mm", 0.001,
        ),
        FeatureSpec(
            "z0", "z_src - r_src * dz / dr (the (r, z) line through both hits at r = 0), clipped to [-1000, 1000]",
            "mm", 200.0,
        ),
        FeatureSpec(
            "curvature", "2 (x_src y_dst - y_src x_dst) / (r_src r_dst |chord|): signed curvature of the transverse "
            "circle through the origin and both hits", "1/mm", 1.0 / 300.0,
        ),
        *(
            FeatureSpec(f"{side}_{name}", raw.format(side=text), unit, scale)
            for side, text in (("out", "outer continuation (edges dst -> c)"), ("in", "inner continuation (edges w -> src)"))
            for name, raw, unit, scale in (
                ("dalpha", "dalpha of the edge's best triplet with an {side}, see TRIPLETS", "rad", 0.01),
                ("rho", "rho of the edge's best triplet with an {side}, see TRIPLETS", "rad", 0.01),
                ("distance", "log(1 + m) of the edge's best triplet with an {side} (log(1 + 1e6) without one), "
                 "see TRIPLETS", "1", 1.0),
                ("count", "number of triplets with an {side} whose m < 9, see TRIPLETS", "triplets", 10.0),
            )
        ),
    )
}

#: How the triplet features (``out_*``, ``in_*``) are defined: what a user outside Python needs to rebuild them.
TRIPLETS = (
    "Per edge e = (a -> b): alpha_e = atan2(r_b - r_a, z_b - z_a), beta_e = atan2(y_b - y_a, x_b - x_a), "
    "ell_e = transverse distance |ab|, kappa_e = 2 wrap(beta_e - phi_a) / (r_a + ell_e) (curvature of the arc from the "
    "beam line through a and b). A triplet is two edges e = (a -> b), f = (b -> c) of the graph sharing b; its "
    "residuals are dalpha = wrap(alpha_f - alpha_e) and rho = wrap(beta_f - beta_e) - kappa_e (ell_e + ell_f) / 2, "
    "its distance m = (dalpha / 0.01)^2 + (rho / 0.01)^2. An edge's best outer triplet is the one of smallest m among "
    "the triplets where it is e (first in edge order on ties), its best inner triplet the one where it is f; "
    "the triplets are those of every edge of the graph as built (before any edge filter)."
)
#: Residual scale (rad) of the triplet distance m and the m below which a triplet is counted.
TRIPLET_SCALE = 0.01
TRIPLET_LOOSE = 9.0
#: The triplet feature names.
TRIPLET_FEATURES = tuple(f"{side}_{name}" for side in ("out", "in") for name in ("dalpha", "rho", "distance", "count"))

#: Node features: name → what the column holds.
NODE_FEATURES: dict[str, str] = {name: f"{s.raw} / {s.scale:g} {s.unit}" for name, s in NODE_FEATURE_SPECS.items()}
#: Node features that need the event's cells table.
CELL_NODE_FEATURES = ("cell_count", "cell_charge", "cluster_u", "cluster_v")
#: Edge features: name → what the column holds.
EDGE_FEATURES: dict[str, str] = {name: f"{s.raw} / {s.scale:g} {s.unit}" for name, s in EDGE_FEATURE_SPECS.items()}

#: How edges are directed in every graph domainpar builds.
EDGE_DIRECTION = "edge_index[0] (src) is the inner hit, edge_index[1] (dst) the outer one: one directed edge per candidate segment"


def feature_list(names: tuple[str, ...] | list[str], specs: dict[str, FeatureSpec]) -> list[dict[str, Any]]:
    """The JSON description of the columns ``names``; a name without a spec gets only its name.

    Columns of foreign graphs (PyG files of other pipelines) may have names
    this module does not describe; their raw quantity and scale are then
    unknown here and recorded as None.
    """
    return [
        asdict(specs[name]) if name in specs else {"name": name, "raw": None, "unit": None, "scale": None}
        for name in names
    ]


def graph_description(
    node_features: tuple[str, ...] | list[str],
    edge_features: tuple[str, ...] | list[str],
    builder: str,
    cuts: dict[str, Any] | None,
) -> dict[str, Any]:
    """The description of a graph's inputs, as stored with the graph and in checkpoints.

    Args:
        node_features: names of the columns of ``x``, in order.
        edge_features: names of the columns of ``edge_attr``, in order.
        builder: what built the graph (``"domainpar build"``, ``"pyg files"`` ...).
        cuts: the graph construction settings (e.g. ``GraphConfig`` as a dict), None if unknown.
    """
    return {
        "version": DESCRIPTION_VERSION,
        "builder": builder,
        "node_features": feature_list(node_features, NODE_FEATURE_SPECS),
        "edge_features": feature_list(edge_features, EDGE_FEATURE_SPECS),
        "edge_direction": EDGE_DIRECTION,
        "cuts": cuts,
    }


def recorded_description(
    node_features: tuple[str, ...] | list[str] | None, edge_features: tuple[str, ...] | list[str] | None, build_config: str | None
) -> dict[str, Any] | None:
    """The description of a graph from what the graph itself records (its feature names and build configuration),
    for graph files written without one (e.g. graphs pruned by an edge filter); None without feature names.

    The build configuration (with the edge filter's record, when the graph was pruned) becomes ``cuts``.
    """
    if node_features is None or edge_features is None:
        return None
    cuts = None
    if build_config is not None:
        try:
            cuts = json.loads(build_config)
        except ValueError:
            cuts = None
    builder = "domainpar build" if isinstance(cuts, dict) else "unknown"
    if isinstance(cuts, dict) and "edge_filter" in cuts:
        builder += ", pruned by an edge filter"
    return graph_description(node_features, edge_features, builder, cuts if isinstance(cuts, dict) else None)


def build_description(config: Any) -> dict[str, Any]:
    """The description of graphs made by ``domainpar build`` with ``config`` (a GraphConfig)."""
    return graph_description(config.node_feature_names, config.edge_features, "domainpar build", config.to_dict())


def check_names(names: tuple[str, ...], kind: str, source: str) -> tuple[str, ...]:
    """Validate a feature-name tuple against the catalogue of ``kind`` ("node" or "edge").

    Raises:
        DomainparError: empty, duplicated or unknown names.
    """
    catalogue = NODE_FEATURES if kind == "node" else EDGE_FEATURES
    names = tuple(names)
    if not names:
        raise DomainparError(f"{source}: expected at least one {kind} feature (got none)")
    unknown = [n for n in names if n not in catalogue]
    if unknown:
        raise DomainparError(f"{source}: unknown {kind} features {unknown} (expected names from {sorted(catalogue)})")
    if len(set(names)) != len(names):
        raise DomainparError(f"{source}: {kind} features must not repeat (got {list(names)})")
    return names


def cluster_summary(hit_id: np.ndarray, cells: pd.DataFrame) -> np.ndarray:
    """(N, 4) float64 per hit: cells, summed value, distinct channels along u (ch0) and along v (ch1).

    Args:
        hit_id: (N,) hit ids of the graph's nodes.
        cells: TrackML cells (hit_id, ch0, ch1, value).
    """
    missing = [c for c in ("hit_id", "ch0", "ch1", "value") if c not in cells.columns]
    if missing:
        raise DomainparError(f"cells must have columns {missing} (got {list(cells.columns)})")
    hit_id = np.asarray(hit_id, dtype=np.int64)
    result = np.zeros((hit_id.size, 4))
    if hit_id.size == 0 or len(cells) == 0:
        return result
    cell_hits = cells["hit_id"].to_numpy(np.int64)
    order = np.argsort(hit_id, kind="stable")
    position = np.minimum(np.searchsorted(hit_id[order], cell_hits), hit_id.size - 1)
    matched = hit_id[order][position] == cell_hits
    node = order[position[matched]]
    result[:, 0] = np.bincount(node, minlength=hit_id.size)
    result[:, 1] = np.bincount(node, weights=cells["value"].to_numpy(np.float64)[matched], minlength=hit_id.size)
    for column, channel in ((2, "ch0"), (3, "ch1")):
        values = cells[channel].to_numpy(np.int64)[matched]
        if values.size == 0:
            continue
        # Distinct (node, channel) pairs as the distinct int64 keys node * span + channel offset, found by one
        # sort (np.unique along an axis sorts the rows as structured records, ~10x slower; on 1-D it hashes).
        low = int(values.min())
        span = int(values.max()) - low + 1
        if span * hit_id.size >= 2**62:
            raise DomainparError(f"cells: {channel} spans {span} channels, more than any detector has")
        keys = np.sort(node * np.int64(span) + (values - low))
        first = np.ones(keys.size, dtype=bool)
        np.not_equal(keys[1:], keys[:-1], out=first[1:])
        result[:, column] = np.bincount(keys[first] // span, minlength=hit_id.size)
    return result


def node_feature_matrix(
    names: tuple[str, ...], r: np.ndarray, phi: np.ndarray, z: np.ndarray, clusters: np.ndarray | None = None
) -> np.ndarray:
    """(N, F) float32 node features.

    Args:
        names: feature names (see :data:`NODE_FEATURES`).
        r, phi, z: (N,) hit coordinates (mm, rad).
        clusters: (N, 4) from :func:`cluster_summary`, needed by cluster features.
    """
    columns = []
    for name in names:
        if name in CELL_NODE_FEATURES and clusters is None:
            raise DomainparError(f"node feature {name!r} needs the event's cells (got none)")
        if name not in NODE_FEATURE_SPECS:
            raise DomainparError(f"unknown node feature {name!r} (expected one of {sorted(NODE_FEATURES)})")
        if name in CELL_NODE_FEATURES:
            raw = clusters[:, CELL_NODE_FEATURES.index(name)]  # the columns of cluster_summary, in this order
        elif name == "eta":
            raw = np.arcsinh(z / np.maximum(r, 1e-9))
        else:
            raw = {"r": r, "phi": phi, "z": z}[name]
        columns.append(raw / NODE_FEATURE_SPECS[name].scale)
    return np.stack(columns, axis=1).astype(np.float32) if columns else np.zeros((r.size, 0), np.float32)


def compute_features(
    node_features: tuple[str, ...] | list[str],
    edge_features: tuple[str, ...] | list[str],
    hit_id: np.ndarray,
    pos: np.ndarray,
    edge_index: np.ndarray,
    cells: pd.DataFrame | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Every named node and edge feature of a hit graph, from its hits and their cells: THE feature function.

    ``domainpar build`` (:func:`domainpar.data.graph.build_graph`), inference on raw events, the exported
    pipeline (``evaluate --model``) and ``examples/run_exported.py`` all compute the columns of ``x`` and
    ``edge_attr`` here, so a deployed model is fed what it was trained on. Each column is
    ``raw / scale`` as :data:`NODE_FEATURE_SPECS` / :data:`EDGE_FEATURE_SPECS` describe it (what the
    sidecar of an exported model records for a host outside Python).

    Args:
        node_features: names of the columns of ``x`` (:data:`NODE_FEATURES`), in order.
        edge_features: names of the columns of ``edge_attr`` (:data:`EDGE_FEATURES`), in order.
        hit_id: (N,) TrackML hit ids of the nodes.
        pos: (N, 3) hit positions x, y, z in mm.
        edge_index: (2, E) node indices, row 0 the inner hit (src), row 1 the outer one (dst).
        cells: the event's TrackML cells (hit_id, ch0, ch1, value); needed by the cell and cluster features.

    Returns:
        ``(x, edge_attr)``: (N, F) and (E, F_e) float32.

    Raises:
        DomainparError: an unknown name, or cell features without the cells table.
    """
    pos = np.asarray(pos, dtype=np.float64)
    needs_cells = any(name in CELL_NODE_FEATURES for name in node_features)
    if needs_cells and cells is None:
        raise DomainparError(f"node features {[n for n in node_features if n in CELL_NODE_FEATURES]} need the event's cells table (got none)")
    clusters = cluster_summary(hit_id, cells) if needs_cells else None
    r = np.hypot(pos[:, 0], pos[:, 1])
    phi = np.arctan2(pos[:, 1], pos[:, 0])
    x = node_feature_matrix(tuple(node_features), r, phi, pos[:, 2], clusters)
    return x, edge_feature_matrix(tuple(edge_features), pos, np.asarray(edge_index))


def _triplet_columns(x, y, z, r, phi, src, dst, num_nodes: int) -> np.ndarray:
    """(E, 8) raw triplet columns in :data:`TRIPLET_FEATURES` order (distance as m, not yet log(1 + m))."""
    # numba loads only where graphs are built
    from domainpar.kernels import chunks
    from domainpar.kernels.triplets import best_triplets

    num_edges = src.shape[0]
    alpha, beta, ell, kappa = (np.empty(num_edges) for _ in range(4))

    def per_edge(lo: int, hi: int) -> None:
        # numpy on contiguous chunks (the arithmetic of whole columns, element by element), GIL released.
        a, b = src[lo:hi], dst[lo:hi]
        dx, dy = x[b] - x[a], y[b] - y[a]
        ell[lo:hi] = length = np.hypot(dx, dy)
        alpha[lo:hi] = np.arctan2(r[b] - r[a], z[b] - z[a])
        beta[lo:hi] = direction = np.arctan2(dy, dx)
        turn = np.mod(direction - phi[a] + np.pi, 2 * np.pi) - np.pi
        kappa[lo:hi] = 2.0 * turn / np.maximum(r[a] + length, 1e-9)

    chunks.run(per_edge, chunks.bounds(num_edges, 4 * chunks.build_threads()))
    return best_triplets(src, dst, alpha, beta, ell, kappa, num_nodes, TRIPLET_SCALE, TRIPLET_LOOSE)


def edge_feature_matrix(
    names: tuple[str, ...], pos: np.ndarray, edge_index: np.ndarray
) -> np.ndarray:
    """(E, F) float32 edge features.

    Every column is computed in float64 and rounded to float32 once, as it is written into the (E, F) result, by
    one pass over the edges (:func:`domainpar.kernels.edge_features.edge_feature_rows`, numpy's arithmetic
    operation for operation) in contiguous chunks on :func:`domainpar.kernels.chunks.build_threads` threads:
    the same bytes on any number of threads.

    Args:
        names: feature names (see :data:`EDGE_FEATURES`).
        pos: (N, 3) hit positions, mm.
        edge_index: (2, E) inner → outer node indices.
    """
    from domainpar.kernels import chunks
    from domainpar.kernels.edge_features import CODES, TRIPLET_CODE, edge_feature_rows

    for name in names:
        if name not in EDGE_FEATURE_SPECS:
            raise DomainparError(f"unknown edge feature {name!r} (expected one of {sorted(EDGE_FEATURES)})")
    pos = np.asarray(pos, dtype=np.float64)
    src, dst = (np.ascontiguousarray(row, dtype=np.int64) for row in np.asarray(edge_index).reshape(2, -1))
    x, y, z = pos[:, 0], pos[:, 1], pos[:, 2]  # views, as always: per node, r and phi see the same strides
    r = np.hypot(x, y)
    phi = np.arctan2(y, x)
    eta = np.arcsinh(z / np.maximum(r, 1e-9))
    result = np.empty((src.size, len(names)), dtype=np.float32)
    if not names:
        return result
    triplets = _triplet_columns(x, y, z, r, phi, src, dst, pos.shape[0]) if set(names) & set(TRIPLET_FEATURES) else None
    # Chunks of a few MB; more chunks than threads balance them.
    ranges = chunks.bounds(src.size, max(4 * chunks.build_threads(), src.size // 65536))
    if triplets is not None:
        distances = [TRIPLET_FEATURES.index(name) for name in names if name.endswith("_distance")]

        def distance_logs(lo: int, hi: int) -> None:
            for k in distances:
                # numpy's log1p of the strided column view, as the whole column was (its vectorised log1p is
                # not glibc's, which numba would call).
                triplets[lo:hi, k] = np.log1p(triplets[lo:hi, k])

        chunks.run(distance_logs, ranges)
    else:
        triplets = np.zeros((0, len(TRIPLET_FEATURES)), dtype=np.float64)
    codes = np.array(
        [TRIPLET_CODE + TRIPLET_FEATURES.index(name) if name in TRIPLET_FEATURES else CODES[name] for name in names],
        dtype=np.int64,
    )
    scales = np.array([EDGE_FEATURE_SPECS[name].scale for name in names], dtype=np.float64)

    coordinates = [np.ascontiguousarray(values) for values in (x, y, z, r, phi, eta)]  # one numba signature

    def fill(lo: int, hi: int) -> None:
        edge_feature_rows(src, dst, *coordinates, triplets, codes, scales, lo, hi, result)

    chunks.run(fill, ranges)
    return result

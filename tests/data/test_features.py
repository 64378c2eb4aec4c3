"""The written feature description rebuilds a real graph's inputs, as a user outside Python would.

Every column of ``x`` and ``edge_attr`` of real event 1 is recomputed from the
raw hits and cells with nothing but the description's raw quantity and scale
(``column = raw / scale``). A change of the graph builder's features that is
not described in :mod:`domainpar.data.features` fails here.
"""

from __future__ import annotations


import numpy as np
import pytest

from domainpar.data.event_graph import save_graph
from domainpar.data.features import build_description
from domainpar.data.graph import GraphConfig, build_event_graph
from domainpar.data.graph_files import load_graph, read_graph_description

from fixtures import EVENT1 as EVENT


def _raw_node_columns(hit_id: np.ndarray) -> dict[str, np.ndarray]:
    """The raw quantities of the description, computed independently from the TrackML files."""
    from domainpar.data.trackml import load_event

    hits, cells = load_event(EVENT, parts=("hits", "cells"))
    hits = hits.set_index("hit_id").loc[hit_id]
    x, y, z = (hits[c].to_numpy(np.float64) for c in ("x", "y", "z"))
    count = cells.groupby("hit_id").size().reindex(hit_id, fill_value=0).to_numpy(np.float64)
    charge = cells.groupby("hit_id")["value"].sum().reindex(hit_id, fill_value=0.0).to_numpy(np.float64)
    return {"r": np.hypot(x, y), "phi": np.arctan2(y, x), "z": z, "cell_count": count, "cell_charge": charge}


def _raw_edge_columns(nodes: dict[str, np.ndarray], edge_index: np.ndarray) -> dict[str, np.ndarray]:
    src, dst = edge_index
    r, phi, z = nodes["r"], nodes["phi"], nodes["z"]
    dphi = np.mod(phi[dst] - phi[src] + np.pi, 2 * np.pi) - np.pi
    eta = np.arcsinh(z / r)
    return {"dr": r[dst] - r[src], "dphi": dphi, "dz": z[dst] - z[src], "dR": np.hypot(eta[dst] - eta[src], dphi)}


@pytest.mark.parametrize("cell_features", [False, True])
def test_description_rebuilds_the_inputs_of_a_real_graph(cell_features, tmp_path):
    config = GraphConfig(cell_features=cell_features)
    graph, _ = build_event_graph(EVENT, config)
    description = build_description(config)
    path = save_graph(graph, tmp_path / "g.npz", description)
    assert read_graph_description(path) == description
    assert load_graph(path).num_edges == graph.num_edges  # the description entry does not disturb loading
    nodes = _raw_node_columns(graph.hit_id)
    names = [f["name"] for f in description["node_features"]]
    assert len(names) == graph.x.shape[1]
    for column, feature in enumerate(description["node_features"]):
        rebuilt = nodes[feature["name"]] / feature["scale"]
        np.testing.assert_allclose(graph.x[:, column], rebuilt, rtol=1e-6, atol=1e-6, err_msg=feature["name"])
    edges = _raw_edge_columns(nodes, graph.edge_index)
    assert len(description["edge_features"]) == graph.edge_attr.shape[1]
    for column, feature in enumerate(description["edge_features"]):
        rebuilt = edges[feature["name"]] / feature["scale"]
        np.testing.assert_allclose(graph.edge_attr[:, column], rebuilt, rtol=1e-5, atol=1e-6, err_msg=feature["name"])
    assert description["cuts"]["cell_features"] is cell_features


def test_a_graph_saved_without_description_is_described_by_its_names_and_build(tmp_path):
    """Graphs saved without a description (e.g. pruned by an edge filter) describe themselves from what they record;
    only a graph that names none of its columns (format 1) has no description."""
    import dataclasses

    graph, _ = build_event_graph(EVENT, GraphConfig(z0_max=150.0))
    described = read_graph_description(save_graph(graph, tmp_path / "g.npz"))
    assert [f["name"] for f in described["node_features"]] == ["r", "phi", "z"]
    assert described["edge_features"][3]["raw"].startswith("sqrt(deta^2 + dphi^2)")
    assert described["cuts"]["z0_max"] == 150.0 and described["builder"] == "domainpar build"
    unnamed = dataclasses.replace(graph, node_features=None, edge_features=None, build_config=None)
    assert read_graph_description(save_graph(unnamed, tmp_path / "unnamed.npz")) is None
def test_triplet_features_follow_their_description():
    """The out_*/in_* columns recomputed from ``TRIPLETS`` with a plain loop over every pair of edges of real event 1."""
    import math

    from domainpar.data.features import EDGE_FEATURE_SPECS, TRIPLET_FEATURES, TRIPLET_LOOSE, TRIPLET_SCALE, TRIPLETS

    assert "alpha_e = atan2(r_b - r_a, z_b - z_a)" in TRIPLETS and "m = (dalpha / 0.01)^2 + (rho / 0.01)^2" in TRIPLETS
    assert TRIPLET_SCALE == 0.01 and TRIPLET_LOOSE == 9.0
    config = GraphConfig(edge_features=("dr",) + TRIPLET_FEATURES)
    graph, _ = build_event_graph(EVENT, config)
    nodes = _raw_node_columns(graph.hit_id)
    x, y = nodes["r"] * np.cos(nodes["phi"]), nodes["r"] * np.sin(nodes["phi"])
    r, phi, z = nodes["r"], nodes["phi"], nodes["z"]
    wrap = lambda angle: (angle + math.pi) % (2 * math.pi) - math.pi  # noqa: E731
    src, dst = graph.edge_index
    alpha = np.arctan2(r[dst] - r[src], z[dst] - z[src])
    beta = np.arctan2(y[dst] - y[src], x[dst] - x[src])
    ell = np.hypot(x[dst] - x[src], y[dst] - y[src])
    kappa = 2 * wrap(beta - phi[src]) / (r[src] + ell)
    raw = np.zeros((graph.num_edges, 8))
    raw[:, 2] = raw[:, 6] = math.log1p(1e6)
    best_out = np.full(graph.num_edges, np.inf)
    best_in = np.full(graph.num_edges, np.inf)
    for b in np.unique(dst):
        for e in np.flatnonzero(dst == b):
            for f in np.flatnonzero(src == b):
                dalpha = wrap(alpha[f] - alpha[e])
                rho = wrap(beta[f] - beta[e]) - kappa[e] * (ell[e] + ell[f]) / 2
                m = (dalpha / 0.01) ** 2 + (rho / 0.01) ** 2
                raw[e, 3] += m < 9
                raw[f, 7] += m < 9
                if m < best_out[e]:
                    best_out[e], raw[e, :3] = m, (dalpha, rho, math.log1p(m))
                if m < best_in[f]:
                    best_in[f], raw[f, 4:7] = m, (dalpha, rho, math.log1p(m))
    assert np.isfinite(best_out).sum() > graph.num_edges // 4  # most edges have a continuation: not vacuous
    for column, name in enumerate(TRIPLET_FEATURES, start=1):
        rebuilt = raw[:, TRIPLET_FEATURES.index(name)] / EDGE_FEATURE_SPECS[name].scale
        # float32 positions: residuals of a few 1e-4 rad agree to ~1e-3 of the 0.01 scale.
        np.testing.assert_allclose(graph.edge_attr[:, column], rebuilt, rtol=1e-3, atol=2e-3, err_msg=name)

"""The one-pass edge-feature kernel gives numpy's column-by-column bytes (domainpar.kernels.edge_features)."""

from __future__ import annotations

import numpy as np
import pytest

from domainpar.data import features
from domainpar.data.features import EDGE_FEATURE_SPECS, TRIPLET_FEATURES, edge_feature_matrix
from domainpar.data.graph import GraphConfig, build_event_graph
from domainpar.kernels import chunks

from fixtures import EVENT1

ALL = tuple(EDGE_FEATURE_SPECS)


def numpy_columns(names, pos, edge_index) -> np.ndarray:
    """The features as whole-column numpy arithmetic: the formulas of the description, as the builder had them."""
    pos = np.asarray(pos, dtype=np.float64)
    a, b = np.asarray(edge_index, dtype=np.int64)
    x, y, z = pos[:, 0], pos[:, 1], pos[:, 2]
    r, phi = np.hypot(x, y), np.arctan2(y, x)
    eta = np.arcsinh(z / np.maximum(r, 1e-9))
    triplets = features._triplet_columns(x, y, z, r, phi, a, b, pos.shape[0]) if set(names) & set(TRIPLET_FEATURES) else None
    dr, dz = r[b] - r[a], z[b] - z[a]
    dphi = np.mod(phi[b] - phi[a] + np.pi, 2 * np.pi) - np.pi
    deta = eta[b] - eta[a]
    columns = []
    with np.errstate(divide="ignore", invalid="ignore"):
        for name in names:
            if name in TRIPLET_FEATURES:
                column = triplets[:, TRIPLET_FEATURES.index(name)]
                column = (np.log1p(column) if name.endswith("_distance") else column) / EDGE_FEATURE_SPECS[name].scale
            elif name in ("dr", "dz"):
                column = (dr if name == "dr" else dz) / 1000.0
            elif name == "dphi":
                column = dphi / np.pi
            elif name == "dR":
                column = np.hypot(deta, dphi)
            elif name == "deta":
                column = 10.0 * deta
            elif name == "phi_slope":
                slope = np.where(np.abs(dr) > 1e-6, 1000.0 * dphi / dr, np.sign(dphi) * np.inf)
                column = np.clip(np.nan_to_num(slope, nan=0.0), -10.0, 10.0)
            elif name == "z0":
                numerator = z[a] * dr - r[a] * dz
                z0 = np.where(np.abs(dr) > 1e-6, numerator / dr, np.sign(numerator) * np.inf)
                column = np.clip(np.nan_to_num(z0 / 200.0, nan=0.0), -5.0, 5.0)
            else:
                cross = x[a] * y[b] - y[a] * x[b]
                chord = np.hypot(x[b] - x[a], y[b] - y[a])
                column = 300.0 * 2.0 * cross / np.maximum(r[a] * r[b] * chord, 1e-9)
            columns.append(column.astype(np.float32))
    return np.stack(columns, axis=1) if columns else np.zeros((a.size, 0), np.float32)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_real_graphs_columns_are_numpys_bytes(threads):
    graph, _ = build_event_graph(EVENT1, GraphConfig(edge_features=ALL))
    pos = graph.pos.astype(np.float64)
    with chunks.using_threads(threads):
        got = edge_feature_matrix(ALL, pos, graph.edge_index)
    expected = numpy_columns(ALL, pos, graph.edge_index)
    assert got.dtype == np.float32 and got.shape == (graph.num_edges, len(ALL))
    for k, name in enumerate(ALL):
        assert got[:, k].tobytes() == expected[:, k].tobytes(), name


def test_the_corner_cases_of_every_formula_are_numpys():
    # Hits at one radius (dr 0 and below the 1e-6 cut, with dphi and the z0 numerator of either sign or zero),
    # coincident hits (a zero chord: the 1e-9 floor), hits on both sides of phi = +-pi, a hit on the beam line.
    pos = np.array(
        [
            [30.0, 0.0, 10.0], [30.0, 0.0, 50.0], [0.0, 30.0, 10.0], [0.0, -30.0, -20.0],
            [30.0 + 1e-7, 0.0, 10.0], [-30.0, 1e-9, 5.0], [-30.0, -1e-9, 5.0], [-70.0, 1e-3, 7.0],
            [0.0, 0.0, 3.0], [30.0, 0.0, 10.0], [-0.0, 72.0, -0.0], [1e-300, 0.0, 0.0],
        ]
    )
    n = pos.shape[0]
    src, dst = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    edge_index = np.stack([src.ravel(), dst.ravel()])
    names = tuple(name for name in ALL if name not in TRIPLET_FEATURES)
    got = edge_feature_matrix(names, pos, edge_index)
    expected = numpy_columns(names, pos, edge_index)
    for k, name in enumerate(names):
        assert got[:, k].tobytes() == expected[:, k].tobytes(), name
    assert np.isnan(got).any() == np.isnan(expected).any()


def test_any_order_and_subset_of_the_names():
    graph, _ = build_event_graph(EVENT1, GraphConfig())
    pos = graph.pos.astype(np.float64)
    names = ("in_count", "curvature", "dz", "out_distance", "dphi", "z0")
    got = edge_feature_matrix(names, pos, graph.edge_index)
    assert got.tobytes() == numpy_columns(names, pos, graph.edge_index).tobytes()
    assert edge_feature_matrix((), pos, graph.edge_index).shape == (graph.num_edges, 0)

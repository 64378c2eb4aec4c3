"""What every stage reads of an event (:mod:`domainpar.tracks.inputs`): the input checks, the hits' resolutions, the
scored neighbours."""

from __future__ import annotations

import numpy as np
import pytest

from domainpar.errors import DomainparError
from domainpar.tracks.candidates import build_candidates
from domainpar.tracks.inputs import (
    STRIP_SCATTERING,
    best_first,
    check_inputs,
    coarse_resolution,
    hit_variances,
    neighbours,
)

#: Layer codes: a pixel barrel layer (volume 8), a pixel endcap disc (volume 9), a short-strip barrel layer (volume 13).
PIXEL_BARREL, PIXEL_DISC, STRIP_BARREL = 7, 11, 24


def _event():
    pos = np.array([[30.0, 5.0, 1.0], [70.0, 9.0, 2.0], [110.0, 12.0, 3.0]])
    return pos, np.array([7, 8, 9]), np.array([[0, 1], [1, 2]]), np.array([0.9, 0.8])


def test_check_inputs_names_what_it_expected():
    pos, layer, edge_index, scores = _event()
    with pytest.raises(DomainparError, match=r"pos: expected shape \(N, 3\)"):
        build_candidates(pos[:, :2], layer, edge_index, scores)
    with pytest.raises(DomainparError, match="layer: expected shape"):
        build_candidates(pos, layer[:-1], edge_index, scores)
    with pytest.raises(DomainparError, match=r"edge_index: expected node ids in \[0, 3\), got values in \[100, 102\]"):
        build_candidates(pos, layer, edge_index + 100, scores)
    with pytest.raises(DomainparError, match=r"edge_index: expected shape \(2, E\)"):
        build_candidates(pos, layer, edge_index[0], scores)
    with pytest.raises(DomainparError, match="scores: expected shape"):
        build_candidates(pos, layer, edge_index, scores[:-1])
    with pytest.raises(DomainparError, match="scores: expected no NaN"):
        build_candidates(pos, layer, edge_index, np.full(scores.shape, np.nan))
    with pytest.raises(DomainparError, match="pos: expected finite positions"):
        build_candidates(np.where(np.eye(3, dtype=bool), np.inf, pos), layer, edge_index, scores)
    with pytest.raises(DomainparError, match="layer: expected layer codes below 48"):
        build_candidates(pos, layer + 100, edge_index, scores)


def test_check_inputs_gives_the_dtypes_the_kernels_read():
    pos, layer, edge_index, scores = _event()
    pos, layer, edge_index, scores = check_inputs(pos.astype(np.float32), layer.astype(np.int32), edge_index.astype(np.int32), scores.astype(np.float32))
    assert (pos.dtype, layer.dtype, edge_index.dtype, scores.dtype) == (np.float64, np.int64, np.int64, np.float64)


def test_hit_variances_follow_the_modules_pitches():
    sigma = 0.01
    pixel_barrel, pixel_disc, strip_barrel = hit_variances(np.array([PIXEL_BARREL, PIXEL_DISC, STRIP_BARREL]), sigma)
    # Across the track: the pitch along u / sqrt(12), 50 um in the pixels, 80 um in the short strips.
    assert pixel_barrel[0] == pytest.approx(0.05**2 / 12 + sigma**2)
    assert strip_barrel[0] == pytest.approx(0.08**2 / 12 + sigma**2)
    # The coarse coordinate is z on a barrel layer and r on a disc; the other gets sigma_hit alone.
    assert pixel_barrel[1] > sigma**2 and pixel_barrel[2] == sigma**2
    assert pixel_disc[1] == sigma**2 and pixel_disc[2] > sigma**2
    assert strip_barrel[1] == pytest.approx(1.2**2 / 12 + sigma**2)
    # Scattering: the strips' material weighs more.
    assert (pixel_barrel[3], pixel_disc[3], strip_barrel[3]) == (1.0, 1.0, STRIP_SCATTERING)
    # The coarse resolution of a layer is that of its hits.
    coarse = coarse_resolution(sigma)
    assert coarse[STRIP_BARREL] ** 2 == pytest.approx(strip_barrel[1]) and coarse[PIXEL_DISC] ** 2 == pytest.approx(pixel_disc[2])


def test_neighbours_hold_both_directions_best_first_ties_in_edge_order():
    edge_index = np.array([[0, 0, 1, 2, 3], [1, 2, 3, 3, 4]])
    scores = np.array([0.5, 0.9, 0.7, 0.7, 0.01])
    ptr, node, score = neighbours(5, edge_index, scores, 0.02)
    rows = [list(zip(node[ptr[v] : ptr[v + 1]].tolist(), score[ptr[v] : ptr[v + 1]].tolist())) for v in range(5)]
    assert rows[0] == [(2, 0.9), (1, 0.5)]
    assert rows[1] == [(3, 0.7), (0, 0.5)]
    assert rows[3] == [(1, 0.7), (2, 0.7)]
    assert rows[4] == []  # its one edge is scored below min_score


def test_best_first_rows_are_sorted_like_a_stable_sort():
    rng = np.random.default_rng(2)
    n, k = 50, 400
    src, dst = rng.integers(0, n, k), rng.integers(0, n, k)
    score = np.round(rng.random(k), 1)  # many ties
    ptr, node, value = best_first(n, src, dst, score)
    for v in range(n):
        edges = sorted(np.flatnonzero(src == v), key=lambda e: -score[e])  # stable: ties in edge order
        assert node[ptr[v] : ptr[v + 1]].tolist() == dst[edges].tolist()
        assert value[ptr[v] : ptr[v + 1]].tolist() == score[edges].tolist()

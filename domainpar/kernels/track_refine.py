"""Track candidates refined by their helix fits: fragments merged, free hits attached (numba).

Knows nothing of events: hit positions and resolutions, a neighbour list with edge scores, and a label per hit (-1:
on no track) in; new labels out.

* :func:`merge_fragments` — two tracks joined by graph edges become one when the hits of both, ordered along the
  track, fit one helix (the worst windowed chi2/ndf of :func:`~domainpar.kernels.track_fit.window_chi2_ndf` at most
  ``max_chi2_ndf``) and share no layer except through double hits (at most ``max_per_layer`` hits of one layer, all
  within ``double_distance`` of each other: a particle crossing overlapping modules). Pairs are tried by their
  number of joining edges (most first, then the higher summed score); a merged track is judged whole against the
  next fragment. Tracks of at least one hit take part, so a free hit or pair joins a track here too.
* :func:`attach_free` — a hit on no track joins the neighbouring track whose fit it disturbs least (chi2 increment
  of the windowed fit around its place at most ``hit_chi2``, that fit's chi2/ndf at most ``max_chi2_ndf``, with the
  same layer rule), best edge score first.

Hits of a track are ordered by their 3-D distance from the origin (the order of
:func:`~domainpar.tracks.layout.assemble`): outwards along the track for every particle that does not curl back.
"""

from __future__ import annotations

import numba
import numpy as np

from domainpar.kernels.track_fit import HitColumns, circle_distance, insertion_delta, karimaki, perigee, window_chi2_ndf


@numba.njit(cache=True, nogil=True)
def _track_lists(labels):
    """Every track's hits as a linked list, in ascending hit order (labels 0..T-1, -1: on no track).

    Returns:
        ``(head, tail, size, nxt)``: (T,) each track's first and last hit and its number of hits, and (N,) the
        next hit of every hit's track (-1: none).
    """
    n = labels.shape[0]
    num_tracks = 0
    for i in range(n):
        if labels[i] + 1 > num_tracks:
            num_tracks = labels[i] + 1
    head = np.full(num_tracks, -1, dtype=np.int64)
    tail = np.full(num_tracks, -1, dtype=np.int64)
    size = np.zeros(num_tracks, dtype=np.int64)
    nxt = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        t = labels[i]
        if t < 0:
            continue
        if head[t] < 0:
            head[t] = i
        else:
            nxt[tail[t]] = i
        tail[t] = i
        size[t] += 1
    return head, tail, size, nxt


@numba.njit(cache=True, nogil=True)
def _sorted_hits(head, nxt, dist, root, out):
    """The hits of track ``root`` (linked list) into ``out``, sorted by distance; their count."""
    count = 0
    h = head[root]
    while h >= 0 and count < out.shape[0]:
        out[count] = h
        count += 1
        h = nxt[h]
    # Insertion sort: tracks are short.
    for i in range(1, count):
        v = out[i]
        d = dist[v]
        j = i - 1
        while j >= 0 and dist[out[j]] > d:
            out[j + 1] = out[j]
            j -= 1
        out[j + 1] = v
    return count


@numba.njit(cache=True, nogil=True)
def _fit_circle(circle, t, x, y, hits, count):
    """``circle[t]`` = :func:`~domainpar.kernels.track_fit.karimaki` of ``hits[:count]``."""
    circle[t, 0], circle[t, 1], circle[t, 2], circle[t, 3], circle[t, 4], circle[t, 5] = karimaki(x, y, hits, count)


@numba.njit(cache=True, nogil=True)
def _near_circle(circle, t, x, y, h, gate):
    """Whether hit h lies within ``gate`` of track t's circle (``circle[t]``, nan: none, always near)."""
    c = circle[t]
    return not (np.isfinite(c[0]) and circle_distance(c[0], c[1], c[2], c[3], c[4], c[5], x[h], y[h]) > gate)


@numba.njit(cache=True, nogil=True)
def _layers_compatible(x, y, z, layer, hits, count, double_distance, max_per_layer):
    """Hits of one layer only as overlapping-module hits: at most ``max_per_layer``, each pair within double_distance."""
    for i in range(count):
        a = hits[i]
        same = 1
        for j in range(count):
            if i == j:
                continue
            b = hits[j]
            if layer[a] == layer[b]:
                same += 1
                d2 = (x[a] - x[b]) ** 2 + (y[a] - y[b]) ** 2 + (z[a] - z[b]) ** 2
                if d2 > double_distance * double_distance or same > max_per_layer:
                    return False
    return True


@numba.njit(cache=True, nogil=True)
def merge_fragments(
    x, y, z, var_t, var_z, var_r, var_m, layer, labels, pair_a, pair_b, max_chi2_ndf, double_distance, max_per_layer, window,
    gate, field, ms, max_hits,
):  # fmt: skip
    """Merge tracks pair by pair (see the module docstring).

    Args:
        x, y, z, var_t, var_z, var_r, var_m: (N,) positions, resolutions squared and scattering weights.
        layer: (N,) layer codes.
        labels: (N,) track of every hit, -1 for none (tracks numbered 0..T-1).
        pair_a, pair_b: (P,) track pairs to try, in order.
        max_chi2_ndf, double_distance, max_per_layer, window, field, ms: the fit's and the layer rule's settings.
        gate: a pair is fitted only when the hits of the smaller track lie within this (mm) of the larger
            one's circle (tracks of 3 hits or more).
        max_hits: the longest merged track.

    Returns:
        (N,) new labels: every hit of a merged pair carries the label of the pair's root track.
    """
    head, tail, size, nxt = _track_lists(labels)
    parent = np.arange(head.shape[0])
    dist = np.sqrt(x * x + y * y + z * z)
    hits = np.empty(max_hits + 1, dtype=np.int64)
    circle = np.full((head.shape[0], 6), np.nan)  # karimaki() of every root track of 3 hits or more
    for t in range(head.shape[0]):
        if size[t] >= 3:
            _fit_circle(circle, t, x, y, hits, _sorted_hits(head, nxt, dist, t, hits))
    for p in range(pair_a.shape[0]):
        a = pair_a[p]
        while parent[a] != a:
            a = parent[a]
        b = pair_b[p]
        while parent[b] != b:
            b = parent[b]
        if a == b or size[a] + size[b] > max_hits:
            continue
        big, small = (a, b) if size[a] >= size[b] else (b, a)
        if size[big] >= 3:
            h = head[small]
            while h >= 0 and _near_circle(circle, big, x, y, h, gate):
                h = nxt[h]
            if h >= 0:
                continue
        # The union, tentatively linked a -> b, sorted; undone if it does not fit.
        nxt[tail[a]] = head[b]
        count = _sorted_hits(head, nxt, dist, a, hits)
        nxt[tail[a]] = -1
        if not _layers_compatible(x, y, z, layer, hits, count, double_distance, max_per_layer):
            continue
        if count >= 3 and window_chi2_ndf(x, y, z, var_t, var_z, var_r, var_m, hits, count, window, field, ms) > max_chi2_ndf:
            continue
        nxt[tail[a]] = head[b]
        tail[a] = tail[b]
        size[a] += size[b]
        parent[b] = a
        if count >= 3:
            _fit_circle(circle, a, x, y, hits, count)
    out = labels.copy()
    for i in range(labels.shape[0]):
        t = labels[i]
        if t < 0:
            continue
        while parent[t] != t:
            t = parent[t]
        out[i] = t
    return out


@numba.njit(cache=True, nogil=True)
def attach_free(
    x, y, z, var_t, var_z, var_r, var_m, layer, labels, nbr_ptr, nbr_node, nbr_score, order, hit_chi2, max_chi2_ndf,
    double_distance, max_per_layer, window, gate, field, ms, max_hits,
):  # fmt: skip
    """Attach hits on no track to their best neighbouring track (see the module docstring).

    Args:
        labels: (N,) track of every hit, -1 for none.
        nbr_ptr, nbr_node, nbr_score: CSR of every hit's graph neighbours with the edge's score.
        order: (F,) the free hits in the order they are tried.
        gate: a hit further than this (mm) from a track's circle is not fitted with it.
        (others as :func:`merge_fragments`)

    Returns:
        (N,) new labels.
    """
    columns = HitColumns(x, y, z, var_t, var_z, var_r, var_m)
    out = labels.copy()
    head, _, _, nxt = _track_lists(labels)
    dist = np.sqrt(x * x + y * y + z * z)
    hits = np.empty(max_hits + 2, dtype=np.int64)
    circle = np.full((head.shape[0], 6), np.nan)  # karimaki() of every track of 3 hits or more, before attaching
    for t in range(head.shape[0]):
        count = _sorted_hits(head, nxt, dist, t, hits)
        if count >= 3:
            _fit_circle(circle, t, x, y, hits, count)
    for q in range(order.shape[0]):
        h = order[q]
        if out[h] >= 0:
            continue
        best_track = -1
        best_delta = hit_chi2
        for j in range(nbr_ptr[h], nbr_ptr[h + 1]):
            t = out[nbr_node[j]]
            if t < 0 or not _near_circle(circle, t, x, y, h, gate):
                continue
            count = _sorted_hits(head, nxt, dist, t, hits)
            # Too long, or too short to judge (the window around h holds fewer than 3 hits).
            if count >= max_hits or min(window, count + 1) < 3:
                continue
            # Layer rule, and where h goes along the track.
            ok = True
            at = count
            same = 1
            for k in range(count):
                g = hits[k]
                if layer[g] == layer[h]:
                    same += 1
                    d2 = (x[g] - x[h]) ** 2 + (y[g] - y[h]) ** 2 + (z[g] - z[h]) ** 2
                    if d2 > double_distance * double_distance:
                        ok = False
                if at == count and dist[g] > dist[h]:
                    at = k
            if not ok or same > max_per_layer:
                continue
            delta = insertion_delta(columns, hits, count, at, h, window, field, ms, max_chi2_ndf)
            if delta <= best_delta:
                best_delta = delta
                best_track = t
        if best_track >= 0:
            out[h] = best_track
            nxt[h] = head[best_track]
            head[best_track] = h
    return out


@numba.njit(cache=True, nogil=True)
def track_perigees(x, y, z, var_t, var_z, var_r, var_m, labels, field, ms):
    """(T, 5) :func:`~domainpar.kernels.track_fit.perigee` of every track (hits ordered by distance from the origin;
    nan for tracks below 3 hits)."""
    head, _, size, nxt = _track_lists(labels)
    num_tracks = head.shape[0]
    dist = np.sqrt(x * x + y * y + z * z)
    out = np.full((num_tracks, 5), np.nan)
    hits = np.empty(max(size.max() if num_tracks else 1, 1), dtype=np.int64)
    for t in range(num_tracks):
        if size[t] < 3:
            continue
        count = _sorted_hits(head, nxt, dist, t, hits)
        out[t, 0], out[t, 1], out[t, 2], out[t, 3], out[t, 4] = perigee(x, y, z, var_t, var_z, var_r, var_m, hits, count, field, ms)
    return out

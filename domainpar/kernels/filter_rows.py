"""The edge filter's input rows and its last layer, row by row (numba).

A row of the filter's input is ``([x[src], x[dst], edge_attr[e]] - mean) / scale``: the source and destination
nodes' features, the edge's, standardised. :func:`standardised_rows` makes it in one pass, with float32
subtraction and division per element as torch's (the same bits). The filter's last layer has one output column;
:func:`logit_rows` is a dot product per row, vectorised over the hidden width (reassociated: torch's value to
float32 rounding).

Both are serial and release the GIL: the filter shares its chunks over its own threads
(:mod:`domainpar.kernels.chunks`).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def standardised_rows(
    x: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    edge_attr: np.ndarray,
    edge_columns: np.ndarray,
    mean: np.ndarray,
    scale: np.ndarray,
    first: int,
    last: int,
    out: np.ndarray,
) -> None:
    """Rows ``first:last`` of the input, written to ``out[0:last - first]``.

    Args:
        x: (N, F) float32 node features (the filter's columns only).
        src, dst: (E,) int64 edge ends.
        edge_attr: (E, F_all) float32 edge features.
        edge_columns: (F_e,) int64 columns of ``edge_attr`` the filter reads.
        mean, scale: (2 F + F_e,) float32 standardisation.
        first, last: the edges.
        out: (>= last - first, 2 F + F_e) float32.
    """
    num_node = x.shape[1]
    for row in range(last - first):
        e = first + row
        a = src[e]
        b = dst[e]
        for k in range(num_node):
            out[row, k] = (x[a, k] - mean[k]) / scale[k]
            out[row, num_node + k] = (x[b, k] - mean[num_node + k]) / scale[num_node + k]
        base = 2 * num_node
        for k in range(edge_columns.shape[0]):
            out[row, base + k] = (edge_attr[e, edge_columns[k]] - mean[base + k]) / scale[base + k]


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract", "nsz"})
def logit_rows(h: np.ndarray, weight: np.ndarray, bias: float, out: np.ndarray) -> None:
    """``out[r] = h[r] · weight + bias``: the last Linear (one output) of the rows ``h`` (n, H) float32."""
    for r in range(h.shape[0]):
        total = np.float32(0.0)
        for j in range(h.shape[1]):
            total += h[r, j] * weight[j]
        out[r] = total + bias

"""Fits of the simulator's cluster models (:class:`~domainpar.sim.clusters.ClusterModel`, one per volume) to real events.

Both fits re-digitise crossings with candidate parameters and minimise the difference by Nelder–Mead, with common
random numbers so the objective is smooth: :func:`fit_cluster_models` holds a simulated event's
:func:`~domainpar.sim.calibration.cluster_shapes` to a real event's, :func:`fit_cluster_models_to_truth` every
real signal hit to the cluster it really left.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Callable

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from domainpar.data.detector import load_detector
from domainpar.data.features import cluster_summary
from domainpar.sim.calibration import cluster_shapes, module_rows
from domainpar.sim.clusters import CLUSTER_MODELS, ClusterModel, cluster_cells

#: Fitted parameters of the cluster model and their bounds.
_CLUSTER_BOUNDS = {
    "tan_lorentz": (-0.6, 0.6),
    "depth_u": (0.2, 4.0),
    "depth_v": (0.2, 4.0),
    "spread_u": (0.0, 2.5),
    "spread_v": (0.0, 2.5),
    "threshold": (0.0, 0.9),
    "charge": (0.02, 2.0),
}
#: Parameters a strip volume does not fit (pixel volumes fit all): one measured axis, no threshold, no charge.
_STRIPS_FIX = ("threshold", "charge", "depth_v", "spread_v")


def _fit_volume(volume_id: int, crossings: tuple[np.ndarray, ...], modules: pd.DataFrame,
                distance: Callable[[pd.DataFrame, bool], float], seed: int, max_evaluations: int) -> ClusterModel:  # fmt: skip
    """One volume's cluster model: its ``crossings`` (hit ids, module rows, positions, directions) re-digitised
    with candidate parameters, ``distance(cells, is_pixel)`` from what is wanted minimised by Nelder–Mead from
    the current model, each parameter within its :data:`_CLUSTER_BOUNDS`."""
    hit_ids, rows, position, direction = crossings
    pixel = modules["pitch_v"].to_numpy()[rows].mean() < 0.5
    free = [f.name for f in fields(ClusterModel) if pixel or f.name not in _STRIPS_FIX]
    start = CLUSTER_MODELS.get(volume_id, ClusterModel())

    def model_of(values: np.ndarray) -> ClusterModel:
        return replace(start, **{name: float(np.clip(value, *_CLUSTER_BOUNDS[name])) for name, value in zip(free, values)})

    def loss(values: np.ndarray) -> float:
        cells = cluster_cells(np.random.default_rng(seed), hit_ids, rows, position, direction, modules, {volume_id: model_of(values)})
        return distance(cells, pixel)

    x0 = np.array([getattr(start, n) for n in free])
    # A simplex of steps comparable to each parameter's range, so parameters starting at 0 move.
    steps = np.array([0.15 * (_CLUSTER_BOUNDS[n][1] - _CLUSTER_BOUNDS[n][0]) for n in free])
    simplex = np.vstack([x0, x0 + np.diag(steps)])
    return model_of(minimize(loss, x0, method="Nelder-Mead", options={"maxfev": max_evaluations, "initial_simplex": simplex}).x)


def fit_cluster_models(
    real_hits: pd.DataFrame,
    real_cells: pd.DataFrame,
    sim_frames: dict[str, pd.DataFrame],
    volumes: tuple[int, ...] | None = None,
    min_count: int = 200,
    seed: int = 0,
    max_evaluations: int = 250,
) -> dict[int, ClusterModel]:
    """Fit every volume's :class:`~domainpar.sim.clusters.ClusterModel` to real clusters.

    The crossings of a simulated event (truth positions and momenta; noise
    along the sensor normal) are re-digitised and their :func:`cluster_shapes`
    compared with the real event's, bin by bin of track angle (bins with at
    least ``min_count`` real hits): the squared relative differences of mean
    cells, channels along u and v and (pixels) median charge are minimised.

    Returns:
        ``{volume_id: ClusterModel}`` for the fitted volumes.
    """
    real = cluster_shapes(real_hits, real_cells)
    hits, truth = sim_frames["hits"], sim_frames["truth"].set_index("hit_id").loc[sim_frames["hits"]["hit_id"]]
    rows = module_rows(hits)
    modules = load_detector()
    position = truth[["tx", "ty", "tz"]].to_numpy(np.float64)
    momentum = truth[["tpx", "tpy", "tpz"]].to_numpy(np.float64)
    norm = np.linalg.norm(momentum, axis=1)
    normal = modules[["rot_xw", "rot_yw", "rot_zw"]].to_numpy()[rows]
    direction = np.where(norm[:, None] > 0, momentum / np.maximum(norm, 1e-12)[:, None], normal)
    fitted = {}
    for volume_id in volumes or tuple(sorted(real["volume_id"].unique())):
        target = real[(real["volume_id"] == volume_id) & (real["count"] >= min_count)]
        mask = hits["volume_id"].to_numpy() == volume_id
        if target.empty or not mask.any():
            continue
        sub_hits = hits[mask]

        def distance(cells: pd.DataFrame, pixel: bool, sub_hits=sub_hits, target=target) -> float:
            shapes = cluster_shapes(sub_hits, cells).merge(target, on=["volume_id", "angle_bin"], suffixes=("", "_real"))
            if shapes.empty:
                return 1e9
            quantities = ["cells", "channels_u", "channels_v"] + (["charge"] if pixel else [])
            return sum(float(np.sum(((shapes[q] - shapes[f"{q}_real"]) / shapes[f"{q}_real"]) ** 2)) for q in quantities) / len(shapes)

        crossings = (sub_hits["hit_id"].to_numpy(), rows[mask], position[mask], direction[mask])
        fitted[int(volume_id)] = _fit_volume(int(volume_id), crossings, modules, distance, seed, max_evaluations)
    return fitted


def fit_cluster_models_to_truth(
    hits: pd.DataFrame,
    truth: pd.DataFrame,
    cells: pd.DataFrame,
    volumes: tuple[int, ...] | None = None,
    seed: int = 0,
    max_evaluations: int = 300,
) -> dict[int, ClusterModel]:
    """Fit every volume's :class:`~domainpar.sim.clusters.ClusterModel` hit by hit to a real event with truth.

    Every real signal hit is re-digitised from its true crossing point and
    true direction (truth ``tx..tz``, ``tpx..tpz``) and compared with the
    cluster it really left: the mean squared difference of its channels along
    u and along v and of its cell count (and, for pixels, of the log of its
    summed charge) is minimised. Conditioning on each hit's true geometry makes
    the fit sharp with a few hundred hits per volume.

    Returns:
        ``{volume_id: ClusterModel}`` for the fitted volumes.
    """
    merged = hits.merge(truth, on="hit_id")
    merged = merged[merged["particle_id"] != 0].reset_index(drop=True)
    momentum = merged[["tpx", "tpy", "tpz"]].to_numpy(np.float64)
    norm = np.linalg.norm(momentum, axis=1)
    merged, momentum, norm = merged[norm > 0].reset_index(drop=True), momentum[norm > 0], norm[norm > 0]
    rows = module_rows(merged)
    merged, momentum, norm, rows = merged[rows >= 0].reset_index(drop=True), momentum[rows >= 0], norm[rows >= 0], rows[rows >= 0]
    position = merged[["tx", "ty", "tz"]].to_numpy(np.float64)
    direction = momentum / norm[:, None]
    observed = cluster_summary(merged["hit_id"].to_numpy(), cells)
    modules = load_detector()
    fitted = {}
    for volume_id in volumes or tuple(sorted(merged["volume_id"].unique())):
        mask = merged["volume_id"].to_numpy() == volume_id
        if mask.sum() < 20:
            continue
        hit_ids = merged["hit_id"].to_numpy()[mask]

        def distance(simulated: pd.DataFrame, pixel: bool, hit_ids=hit_ids, target=observed[mask]) -> float:
            got = cluster_summary(hit_ids, simulated)
            total = np.mean((got[:, 2] - target[:, 2]) ** 2) + np.mean((got[:, 3] - target[:, 3]) ** 2)
            total += 0.5 * np.mean((got[:, 0] - target[:, 0]) ** 2) / max(float(np.mean(target[:, 0])), 1.0)
            if pixel:
                total += np.mean((np.log(np.maximum(got[:, 1], 1e-3)) - np.log(np.maximum(target[:, 1], 1e-3))) ** 2)
            return float(total)

        crossings = (hit_ids, rows[mask], position[mask], direction[mask])
        fitted[int(volume_id)] = _fit_volume(int(volume_id), crossings, modules, distance, seed, max_evaluations)
    return fitted


__all__ = ["fit_cluster_models", "fit_cluster_models_to_truth"]

"""Measured positions: the crossing point displaced along its module's axes by the volume's residual model.

Two models (:attr:`~domainpar.sim.config.SimulationConfig.resolution`):
``"measured"`` draws the residuals from the real event 1's per-volume
distributions by cluster size (``resources/measurement_model.json``, made by
:func:`bench.tools.calibration.residual_quantiles`); ``"pitch"`` is a
Gaussian of sigma pitch / sqrt(12).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

from domainpar.data.features import cluster_summary
from domainpar.sim.config import SimulationConfig


@lru_cache(maxsize=1)
def measurement_model() -> dict:
    """The per-volume residual quantiles (pitch units) of ``resources/measurement_model.json``."""
    text = (resources.files("domainpar.sim") / "resources" / "measurement_model.json").read_text()
    return json.loads(text)


def measured_residuals(
    rng: np.random.Generator, volume_id: np.ndarray, channels_u: np.ndarray, channels_v: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(K,), (K,) residuals along u and v in pitch units, drawn from the measured distribution of each hit's
    volume and cluster size along that axis (1, 2 or 3+ channels; the volume's whole distribution where a
    size class had too few real hits).

    Inverse-CDF sampling with linear interpolation between the stored quantiles.
    """
    model = measurement_model()
    probabilities = np.asarray(model["probabilities"])
    offsets = {"u": np.zeros(volume_id.size), "v": np.zeros(volume_id.size)}
    draws = rng.random((2, volume_id.size))
    size_classes = {"u": np.clip(channels_u, 1, 3), "v": np.clip(channels_v, 1, 3)}
    for key, per_axis in model["volumes"].items():
        in_volume = volume_id == int(key)
        for row, axis in enumerate(("u", "v")):
            size_class = size_classes[axis]
            # Size classes are named "1", "2", "3" (3 or more channels); "all" takes the hits of the classes not named.
            named = [int(name) for name in per_axis[axis] if name != "all"]
            for name, quantiles in per_axis[axis].items():
                mask = in_volume & (size_class == int(name)) if name != "all" else in_volume & ~np.isin(size_class, named)
                offsets[axis][mask] = np.interp(draws[row, mask], probabilities, quantiles)
    return offsets["u"], offsets["v"]


def measured_positions(
    rng: np.random.Generator,
    config: SimulationConfig,
    modules: pd.DataFrame,
    rows: np.ndarray,
    true_position: np.ndarray,
    signal: np.ndarray,
    cells: pd.DataFrame,
) -> np.ndarray:
    """Where every hit is measured: its true position plus a residual along its module's u and v axes.

    The residual depends on the hit's cluster (its size along each axis), so
    the cells come first; a noise hit is measured where it is; a layer of
    ``config.layer_conditions`` scales its residuals.

    Args:
        rng: random stream.
        config: ``smear``, ``resolution`` and ``layer_conditions`` are used.
        modules: the detector table.
        rows: (K,) module row of every hit, in hit-id order (hit k has hit_id k + 1).
        true_position: (K, 3) true positions, mm.
        signal: (K,) whether the hit belongs to a particle.
        cells: the cells of these hits (:func:`~domainpar.sim.clusters.cluster_cells`).

    Returns:
        (K, 3) measured positions, mm.
    """
    measured = true_position.copy()
    if not config.smear:
        return measured
    pitch_u = modules["pitch_u"].to_numpy()
    pitch_v = modules["pitch_v"].to_numpy()
    if config.resolution == "pitch":
        offset_u = rng.normal(size=len(rows)) * pitch_u[rows] / np.sqrt(12.0)
        offset_v = rng.normal(size=len(rows)) * pitch_v[rows] / np.sqrt(12.0)
    else:
        # Hit k has hit_id k + 1; columns 2 and 3 are the distinct channels along u and v.
        clusters = cluster_summary(np.arange(1, len(rows) + 1), cells)
        offset_u, offset_v = measured_residuals(rng, modules["volume_id"].to_numpy()[rows], *clusters[:, 2:].T)
        offset_u *= pitch_u[rows]
        offset_v *= pitch_v[rows]
    axis_u = modules[["rot_xu", "rot_yu", "rot_zu"]].to_numpy()
    axis_v = modules[["rot_xv", "rot_yv", "rot_zv"]].to_numpy()
    offset = offset_u[:, None] * axis_u[rows] + offset_v[:, None] * axis_v[rows]
    for condition_volume, condition_layer, _, scale in config.layer_conditions:
        on_layer = (modules["volume_id"].to_numpy()[rows] == condition_volume) & (
            modules["layer_id"].to_numpy()[rows] == condition_layer
        )
        offset[on_layer] *= scale
    measured += np.where(signal[:, None], offset, 0.0)
    return measured


__all__ = ["measured_positions", "measured_residuals", "measurement_model"]

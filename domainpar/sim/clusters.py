"""Clusters: the cells (pixels, strip segments) a crossing leaves in its sensor, per volume's cluster model."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from domainpar.arrays import first_and_count, unique


@dataclass(frozen=True)
class ClusterModel:
    """How one volume's sensors turn a crossing into cells (see :func:`cluster_cells`)."""

    tan_lorentz: float = 0.0
    """Tangent of the Lorentz angle: drift along u per unit depth (barrels, whose field lies in the sensor plane)."""
    depth_u: float = 1.0
    """Charge-collection depth seen along u, in units of the module thickness."""
    depth_v: float = 1.0
    """Charge-collection depth seen along v, in units of the module thickness."""
    spread_u: float = 0.0
    """Extra width of the charge line along u (diffusion, capacitive sharing), in pitches."""
    spread_v: float = 0.0
    """Extra width of the charge line along v, in pitches."""
    threshold: float = 0.0
    """Pixel threshold as a fraction of a full-depth pixel's charge (strips are binary: 0)."""
    charge: float = 1.0
    """Charge of a full-depth perpendicular crossing (pixels; strips read 1 per channel)."""


#: Per volume cluster models, fitted to the real event 21000's clusters (per volume and bin of track angle:
#: mean cells, channels along u and v, median summed charge; :func:`domainpar.sim.cluster_fit.fit_cluster_models`).
#: The pixel barrel's drift, depths and spreads are fitted again to the real pixel event's signal hits, each with its
#: direction at the hit (the helix through its vertex), by their channels along u and v against the crossing slope
#: (``bench/tools/cluster_drift.py``): the charge drifts against +u (tan -0.10), where the fit without the direction
#: at the hit had it drift along +u (0.504), and soft tracks crossing the barrel left clusters the real ones
#: contradict (docs/sim_vs_real.md, "The pixel barrel's Lorentz drift").
CLUSTER_MODELS = {
    # Pixel endcaps (7 fitted; 9 is its mirror image), pixel barrel.
    7: ClusterModel(tan_lorentz=0.0, depth_u=4.0, depth_v=3.27, spread_u=0.09, spread_v=0.0, threshold=0.0, charge=0.301),
    8: ClusterModel(tan_lorentz=-0.10, depth_u=1.05, depth_v=1.0, spread_u=0.0, spread_v=0.15, threshold=0.033, charge=0.150),
    9: ClusterModel(tan_lorentz=0.0, depth_u=4.0, depth_v=3.27, spread_u=0.09, spread_v=0.0, threshold=0.0, charge=0.301),
    # Short-strip endcaps (12 and 14 averaged) and barrel.
    12: ClusterModel(tan_lorentz=0.0, depth_u=2.97, depth_v=1.0, spread_u=0.0, spread_v=0.0, threshold=0.0, charge=1.0),
    13: ClusterModel(tan_lorentz=0.430, depth_u=0.749, depth_v=1.0, spread_u=0.051, spread_v=0.0, threshold=0.0, charge=1.0),
    14: ClusterModel(tan_lorentz=0.0, depth_u=2.97, depth_v=1.0, spread_u=0.0, spread_v=0.0, threshold=0.0, charge=1.0),
    # Long-strip endcaps (16 and 18 averaged) and barrel.
    16: ClusterModel(tan_lorentz=0.0, depth_u=2.17, depth_v=1.0, spread_u=0.01, spread_v=0.0, threshold=0.0, charge=1.0),
    17: ClusterModel(tan_lorentz=0.6, depth_u=0.731, depth_v=1.0, spread_u=0.0, spread_v=0.0, threshold=0.0, charge=1.0),
    18: ClusterModel(tan_lorentz=0.0, depth_u=2.17, depth_v=1.0, spread_u=0.01, spread_v=0.0, threshold=0.0, charge=1.0),
}
#: Charge samples per pitch of the charge line (resolution of the path-in-cell integration).
_SAMPLES_PER_PITCH = 6


def varied_cluster_models(rng: np.random.Generator, variation: float) -> dict[int, ClusterModel]:
    """:data:`CLUSTER_MODELS` with every length and the threshold scaled by a factor in [1 - v, 1 + v] (per volume)."""
    varied = {}
    for volume_id, model in CLUSTER_MODELS.items():
        factor = lambda: float(rng.uniform(1.0 - variation, 1.0 + variation))  # noqa: E731
        varied[volume_id] = replace(
            model,
            tan_lorentz=model.tan_lorentz * factor(),
            depth_u=model.depth_u * factor(),
            depth_v=model.depth_v * factor(),
            spread_u=model.spread_u * factor(),
            spread_v=model.spread_v * factor(),
            threshold=model.threshold * factor(),
        )
    return varied


def cluster_cells(
    rng: np.random.Generator,
    hit_id: np.ndarray,
    module_row: np.ndarray,
    position: np.ndarray,
    direction: np.ndarray,
    modules: pd.DataFrame,
    models: dict[int, ClusterModel] | None = None,
) -> pd.DataFrame:
    """A cluster of cells per hit: the channels under the charge the particle left in the sensor.

    The particle deposits charge uniformly along its straight path through the
    sensor; in barrel sensors the charge drifts along u by the Lorentz angle.
    Projected on the readout plane this is a line centred on the crossing point,
    of extent ``depth · (d_u / |d_w| + tan θ_L)`` along u and
    ``depth · d_v / |d_w|`` along v (thickness × the volume's collection
    depths), lengthened by the volume's spread (diffusion and sharing between
    neighbouring channels). Every channel (pixel, or strip segment) the line
    crosses collects the charge of the part of the line above it; pixel cells
    below the threshold are not read out (a hit's largest cell always is).
    Pixels record the charge (full-depth perpendicular crossing: the volume's
    charge, with a 25 % log-normal spread, proportional to the path length);
    strips are binary (value 1). A noise hit is a crossing along the sensor
    normal. The result is line clusters (cells ≈ channels along u + along v − 1),
    as in the real files, not rectangles.

    Args:
        rng: random stream.
        hit_id: (K,) hit ids.
        module_row: (K,) row of every hit's module in ``modules``.
        position: (K, 3) true crossing points, mm.
        direction: (K, 3) unit directions of the particles (the module normal for noise).
        modules: the detector table.
        models: cluster model per volume (default :data:`CLUSTER_MODELS`).

    Returns:
        The cells table (hit_id, ch0, ch1, value), grouped by hit.
    """
    models = CLUSTER_MODELS if models is None else models
    m = modules.iloc[module_row]
    axis_u = m[["rot_xu", "rot_yu", "rot_zu"]].to_numpy()
    axis_v = m[["rot_xv", "rot_yv", "rot_zv"]].to_numpy()
    axis_w = m[["rot_xw", "rot_yw", "rot_zw"]].to_numpy()
    pitch_u, pitch_v = m["pitch_u"].to_numpy(), m["pitch_v"].to_numpy()
    half_u, half_v = m["module_maxhu"].to_numpy(), m["module_hv"].to_numpy()
    volume = m["volume_id"].to_numpy()
    names = ("tan_lorentz", "depth_u", "depth_v", "spread_u", "spread_v", "threshold", "charge")
    columns = {name: np.zeros(volume.size) for name in names}
    for volume_id in unique(volume):
        model = models.get(int(volume_id), ClusterModel())
        mask = volume == volume_id
        for name in names:
            columns[name][mask] = getattr(model, name)
    thickness = m["module_t"].to_numpy()
    local = position - m[["cx", "cy", "cz"]].to_numpy()
    u = np.einsum("ij,ij->i", local, axis_u)
    v = np.einsum("ij,ij->i", local, axis_v)
    num_u_channels = np.maximum(np.round(2 * half_u / pitch_u), 1).astype(np.int64)
    num_v_channels = np.maximum(np.round(2 * half_v / pitch_v), 1).astype(np.int64)

    d_w = np.maximum(np.abs(np.einsum("ij,ij->i", direction, axis_w)), 0.02)
    slope_u = np.einsum("ij,ij->i", direction, axis_u) / d_w
    slope_v = np.einsum("ij,ij->i", direction, axis_v) / d_w
    span_u = thickness * columns["depth_u"] * (slope_u + columns["tan_lorentz"])
    span_v = thickness * columns["depth_v"] * slope_v
    # Diffusion lengthens the line along its own direction (a perpendicular crossing spreads either way).
    sign_u = np.where(span_u != 0, np.sign(span_u), np.where(rng.random(u.size) < 0.5, -1.0, 1.0))
    sign_v = np.where(span_v != 0, np.sign(span_v), np.where(rng.random(u.size) < 0.5, -1.0, 1.0))
    span_u = span_u + sign_u * columns["spread_u"] * pitch_u
    span_v = span_v + sign_v * columns["spread_v"] * pitch_v
    strip = pitch_v > 0.5
    reach = np.maximum(np.abs(span_u) / pitch_u, np.abs(span_v) / pitch_v)
    num_samples = np.minimum(2 + np.ceil(reach * _SAMPLES_PER_PITCH), 400).astype(np.int64)
    owner = np.repeat(np.arange(u.size), num_samples)
    step = np.arange(num_samples.sum()) - np.repeat(np.cumsum(num_samples) - num_samples, num_samples)
    fraction = (step + 0.5) / num_samples[owner] - 0.5
    sample_u = u[owner] + fraction * span_u[owner]
    sample_v = v[owner] + fraction * span_v[owner]
    cell_u = np.clip(np.floor((sample_u + half_u[owner]) / pitch_u[owner]), 0, num_u_channels[owner] - 1).astype(np.int64)
    cell_v = np.clip(np.floor((sample_v + half_v[owner]) / pitch_v[owner]), 0, num_v_channels[owner] - 1).astype(np.int64)
    key = (owner * (1 << 21) + cell_u) * (1 << 21) + cell_v
    first, count = first_and_count(key)
    hit_of = owner[first]
    share = count / num_samples[hit_of]
    path_length = np.sqrt(1.0 + slope_u**2 + slope_v**2)  # in units of the thickness
    hit_charge = columns["charge"] * path_length * np.exp(rng.normal(0.0, 0.25, u.size))
    value = np.where(strip[hit_of], 1.0, hit_charge[hit_of] * share)
    largest = np.zeros(u.size)
    np.maximum.at(largest, hit_of, value)
    keep = strip[hit_of] | (value >= columns["threshold"][hit_of] * columns["charge"][hit_of]) | (value >= largest[hit_of])
    return pd.DataFrame(
        {
            "hit_id": hit_id[hit_of[keep]].astype(np.int32),
            "ch0": cell_u[first[keep]].astype(np.int32),
            "ch1": cell_v[first[keep]].astype(np.int32),
            "value": value[keep].astype(np.float32),
        }
    )


__all__ = ["CLUSTER_MODELS", "ClusterModel", "cluster_cells", "varied_cluster_models"]

"""Detector response per layer and true-segment shapes per layer pair: what the simulator is held to (a measurement tool).

Everything here is measured the same way on real and simulated events, so the
two can be compared number for number (``tests/sim/test_calibration.py``):

Per layer (:func:`layer_response`):

* **hit efficiency**, from the truth alone: along every particle (pT above
  ``min_pt``), consecutive layer groups of its hits (as in
  :mod:`domainpar.data.true_segments`) are joined by straight (r, z) segments.
  A layer that such a segment crosses — more than ``margin`` mm inside the
  layer's extent — is a *miss* of that layer; a layer group with hits of the
  same particle before and after it is a *hit*. efficiency = hits / (hits +
  misses). Only crossings between two hits of a particle count, so where a
  particle starts or stops does not bias the figure; module gaps count as
  inefficiency, as they do for the tracker.
* **resolution**: the measured minus the true position (truth ``tx, ty, tz``)
  projected on the module's local u and v axes; robust sigma (1.4826 × the
  median absolute deviation) and RMS.
* **clusters**: cells per hit, distinct channels along u and v, summed charge
  (needs the cells table).
* **noise**: the fraction of the layer's hits that belong to no particle.
* **double hits**: the fraction of particle crossings of the layer (layer
  groups) with two or more hits — overlapping modules.

Per layer pair (:func:`segment_table`): every true segment between
consecutive layer groups with its Δr, Δz, |Δφ| and whether it jumps a layer.

Per volume and bin of track angle (:func:`domainpar.sim.calibration.cluster_shapes`): the mean cluster
content, which the cluster models are fitted to (:mod:`domainpar.sim.cluster_fit`).
:func:`compare_layers` and :func:`compare_segments` name where a simulation is
further from a real event than :class:`Margins` allow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import binom, ks_2samp, poisson

from domainpar.arrays import unique
from domainpar.data.detector import layer_table, load_detector
from domainpar.data.features import cluster_summary
from domainpar.sim.calibration import EventTruth, cluster_content, module_rows


#: Columns of :func:`layer_response`.
RESPONSE_COLUMNS = (
    "layer", "volume_id", "layer_id", "num_hits", "noise_fraction", "hits", "misses", "efficiency", "groups",
    "double_fraction",
    "sigma_u", "sigma_v", "rms_u", "rms_v", "cells", "channels_u", "channels_v", "charge",
)  # fmt: skip


def _layer_groups(event: EventTruth, min_pt: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Layer groups along every particle above ``min_pt``, ordered by distance from its vertex.

    Returns:
        ``(hit, group_start, group_particle, group_layer)``: ``hit`` the hit
        indices ordered by particle and distance; per group, its first position
        in ``hit``, its particle and its layer.
    """
    pos = event.hits[["x", "y", "z"]].to_numpy(np.float64)
    distance = np.linalg.norm(pos - event.vertex, axis=1)
    chosen = np.flatnonzero((event.particle_id != 0) & (event.particle_pt > min_pt))
    hit = chosen[np.lexsort((distance[chosen], event.particle_id[chosen]))]
    pid, lay = event.particle_id[hit], event.layer[hit]
    new = np.ones(hit.size, dtype=bool)
    new[1:] = (pid[1:] != pid[:-1]) | (lay[1:] != lay[:-1])
    start = np.flatnonzero(new)
    return hit, start, pid[start], lay[start]


def _crossed_layers(r_a, z_a, r_c, z_c, layers: pd.DataFrame, margin: float) -> np.ndarray:
    """(S, L) bool: the straight (r, z) segment from a to c crosses layer l more than ``margin`` inside it."""
    barrel = layers["barrel"].to_numpy()
    radius, z_disc = layers["r"].to_numpy(), layers["z"].to_numpy()
    r_lo, r_hi = layers["r_min"].to_numpy(), layers["r_max"].to_numpy()
    z_lo, z_hi = layers["z_min"].to_numpy(), layers["z_max"].to_numpy()
    r_a, z_a, r_c, z_c = (np.asarray(v, dtype=np.float64)[:, None] for v in (r_a, z_a, r_c, z_c))
    inner_r, outer_r = np.minimum(r_a, r_c), np.maximum(r_a, r_c)
    with np.errstate(divide="ignore", invalid="ignore"):
        z_at = z_a + (radius[None, :] - r_a) * (z_c - z_a) / (r_c - r_a)
        through_barrel = (inner_r < radius) & (radius < outer_r) & (z_lo + margin < z_at) & (z_at < z_hi - margin)
        r_at = r_a + (z_disc[None, :] - z_a) * (r_c - r_a) / (z_c - z_a)
        between_z = (np.minimum(z_a, z_c) < z_disc) & (z_disc < np.maximum(z_a, z_c))
        through_disc = between_z & (r_lo + margin < r_at) & (r_at < r_hi - margin)
    return np.where(barrel[None, :], through_barrel, through_disc)


def _robust_sigma(values: np.ndarray) -> float:
    if values.size == 0:
        return float("nan")
    return float(1.4826 * np.median(np.abs(values - np.median(values))))


def _rms(values: np.ndarray) -> float:
    return float(np.sqrt(np.mean(values**2))) if values.size else float("nan")


def layer_response(events: list[EventTruth], min_pt: float = 0.5, margin: float = 20.0) -> pd.DataFrame:
    """Per layer: hits, noise fraction, hit efficiency, resolution and cluster content (see the module docstring).

    Args:
        events: events with truth (real or simulated); their counts are summed.
        min_pt: particles above this pT (GeV) measure the efficiency (straight segments need stiff tracks).
        margin: a segment crosses a layer only this far (mm) inside the layer's extent.

    Returns:
        One row per layer of the detector (48), columns :data:`RESPONSE_COLUMNS`;
        statistics of layers without entries are NaN.
    """
    layers = layer_table()
    num_layers = len(layers)
    modules = load_detector()
    axes_u = modules[["rot_xu", "rot_yu", "rot_zu"]].to_numpy()
    axes_v = modules[["rot_xv", "rot_yv", "rot_zv"]].to_numpy()

    hits_on = np.zeros(num_layers)
    misses_on = np.zeros(num_layers)
    groups_on = np.zeros(num_layers)
    doubles_on = np.zeros(num_layers)
    num_hits = np.zeros(num_layers)
    num_noise = np.zeros(num_layers)
    residual_u: list[list[np.ndarray]] = [[] for _ in range(num_layers)]
    residual_v: list[list[np.ndarray]] = [[] for _ in range(num_layers)]
    cluster_rows: list[pd.DataFrame] = []
    for event in events:
        num_hits += np.bincount(event.layer, minlength=num_layers)
        num_noise += np.bincount(event.layer[event.particle_id == 0], minlength=num_layers)
        hit, start, group_pid, group_layer = _layer_groups(event, min_pt)
        group_size = np.diff(np.append(start, hit.size))
        groups_on += np.bincount(group_layer, minlength=num_layers)
        doubles_on += np.bincount(group_layer[group_size >= 2], minlength=num_layers)
        if start.size > 1:
            linked = group_pid[:-1] == group_pid[1:]
            interior = np.zeros(start.size, dtype=bool)
            interior[1:-1] = linked[:-1] & linked[1:]
            hits_on += np.bincount(group_layer[interior], minlength=num_layers)
            first, second = hit[start[:-1][linked]], hit[start[1:][linked]]
            pos = event.hits[["x", "y", "z"]].to_numpy(np.float64)
            r = np.hypot(pos[:, 0], pos[:, 1])
            crossed = _crossed_layers(r[first], pos[first, 2], r[second], pos[second, 2], layers, margin)
            # The segment's own layers are never "crossed" (it starts and ends on them).
            own = np.zeros_like(crossed)
            own[np.arange(first.size), event.layer[first]] = True
            own[np.arange(first.size), event.layer[second]] = True
            misses_on += (crossed & ~own).sum(axis=0)
        hits = event.hits
        row = module_rows(hits)
        signal = np.flatnonzero((event.particle_id != 0) & (row >= 0))
        delta = hits[["x", "y", "z"]].to_numpy(np.float64)[signal] - event.true_position[signal]
        du = np.einsum("ij,ij->i", delta, axes_u[row[signal]])
        dv = np.einsum("ij,ij->i", delta, axes_v[row[signal]])
        for layer_index in unique(event.layer[signal]):
            mask = event.layer[signal] == layer_index
            residual_u[layer_index].append(du[mask])
            residual_v[layer_index].append(dv[mask])
        if event.cells is not None and len(event.cells):
            cells = event.cells
            per_hit = cluster_content(cells)
            layer_of = pd.Series(event.layer, index=hits["hit_id"].to_numpy())
            per_hit = per_hit.assign(layer=layer_of.reindex(per_hit.index).to_numpy())
            cluster_rows.append(per_hit.dropna(subset=["layer"]))
    table = layers[["layer_index", "volume_id", "layer_id"]].rename(columns={"layer_index": "layer"}).copy()
    table["num_hits"] = num_hits.astype(np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        table["noise_fraction"] = np.where(num_hits > 0, num_noise / np.maximum(num_hits, 1), np.nan)
        table["hits"] = hits_on.astype(np.int64)
        table["misses"] = misses_on.astype(np.int64)
        table["efficiency"] = np.where(hits_on + misses_on > 0, hits_on / (hits_on + misses_on), np.nan)
        table["groups"] = groups_on.astype(np.int64)
        table["double_fraction"] = np.where(groups_on > 0, doubles_on / np.maximum(groups_on, 1), np.nan)
    joined_u = [np.concatenate(v) if v else np.zeros(0) for v in residual_u]
    joined_v = [np.concatenate(v) if v else np.zeros(0) for v in residual_v]
    table["sigma_u"] = [_robust_sigma(v) for v in joined_u]
    table["sigma_v"] = [_robust_sigma(v) for v in joined_v]
    table["rms_u"] = [_rms(v) for v in joined_u]
    table["rms_v"] = [_rms(v) for v in joined_v]
    if cluster_rows:
        clusters = pd.concat(cluster_rows).groupby("layer")[["cells", "channels_u", "channels_v", "charge"]].mean()
        clusters = clusters.reindex(np.arange(num_layers))
        for column in ("cells", "channels_u", "channels_v", "charge"):
            table[column] = clusters[column].to_numpy()
    else:
        for column in ("cells", "channels_u", "channels_v", "charge"):
            table[column] = np.nan
    return table.loc[:, list(RESPONSE_COLUMNS)].reset_index(drop=True)


def segment_table(events: list[EventTruth], min_pt: float = 0.0) -> pd.DataFrame:
    """Every true segment between consecutive layer groups of a particle (first hit of each group).

    Returns:
        One row per segment: ``inner``, ``outer`` (layer indices, in the order
        along the track), ``dr``, ``dz`` (outer minus inner, mm), ``dphi``
        (|Δφ|, rad), ``pt`` (GeV).
    """
    frames = []
    for event in events:
        hit, start, group_pid, group_layer = _layer_groups(event, min_pt)
        if start.size < 2:
            continue
        linked = np.flatnonzero(group_pid[:-1] == group_pid[1:])
        first, second = hit[start[linked]], hit[start[linked + 1]]
        pos = event.hits[["x", "y", "z"]].to_numpy(np.float64)
        r = np.hypot(pos[:, 0], pos[:, 1])
        phi = np.arctan2(pos[:, 1], pos[:, 0])
        dphi = np.abs(np.mod(phi[second] - phi[first] + np.pi, 2 * np.pi) - np.pi)
        frames.append(
            pd.DataFrame(
                {
                    "inner": event.layer[first],
                    "outer": event.layer[second],
                    "dr": r[second] - r[first],
                    "dz": pos[second, 2] - pos[first, 2],
                    "dphi": dphi,
                    "pt": event.particle_pt[first],
                }
            )
        )
    if not frames:
        return pd.DataFrame({c: np.zeros(0) for c in ("inner", "outer", "dr", "dz", "dphi", "pt")})
    return pd.concat(frames, ignore_index=True)


#: Probabilities at which :func:`residual_quantiles` samples each residual distribution.
RESIDUAL_PROBABILITIES = (0.0, 0.005, 0.01, 0.025) + tuple(np.round(np.arange(0.05, 0.951, 0.05), 3)) + (0.975, 0.99, 0.995, 1.0)


def residual_quantiles(events: list[EventTruth], probabilities=RESIDUAL_PROBABILITIES, min_class_count: int = 40) -> dict:
    """Quantiles of the measured − true position along each module's u and v, in pitch units, per volume.

    This is the measurement model the simulator draws from (``resolution="measured"``):
    real clusters give non-Gaussian residuals (pixel-barrel hits are shifted
    by a fifth of a pitch along u — the uncorrected Lorentz drift — with a
    narrow core; binary strips are flat over a pitch along v), so the shape is
    kept, not only its width. The error depends on the cluster's size along
    the axis (one channel: flat over the pitch; two: the charge sharing
    locates the track), so each volume and axis has one distribution per size
    class ("1", "2", "3" for three or more channels; needs the events' cells),
    kept where a class has at least ``min_class_count`` hits, plus "all".

    Returns:
        ``{"probabilities": [...], "volumes": {volume_id: {"count": n, "u": {class: [...]}, "v": {class: [...]}}}}``.
    """
    modules = load_detector()
    axes = {axis: modules[[f"rot_x{axis}", f"rot_y{axis}", f"rot_z{axis}"]].to_numpy() for axis in ("u", "v")}
    pitch = {axis: modules[f"pitch_{axis}"].to_numpy() for axis in ("u", "v")}
    collected: dict[int, dict[str, list[tuple[np.ndarray, np.ndarray]]]] = {}
    for event in events:
        rows = module_rows(event.hits)
        signal = np.flatnonzero((event.particle_id != 0) & (rows >= 0))
        delta = event.hits[["x", "y", "z"]].to_numpy(np.float64)[signal] - event.true_position[signal]
        volume = event.hits["volume_id"].to_numpy()[signal]
        if event.cells is not None:
            clusters = cluster_summary(event.hits["hit_id"].to_numpy()[signal], event.cells)
            size = {"u": clusters[:, 2], "v": clusters[:, 3]}
        else:
            size = {"u": np.zeros(signal.size), "v": np.zeros(signal.size)}
        for axis in ("u", "v"):
            scaled = np.einsum("ij,ij->i", delta, axes[axis][rows[signal]]) / pitch[axis][rows[signal]]
            for volume_id in unique(volume):
                chosen = volume == volume_id
                entry = collected.setdefault(int(volume_id), {"u": [], "v": []})
                entry[axis].append((scaled[chosen], size[axis][chosen]))
    result = {"probabilities": [float(p) for p in probabilities], "volumes": {}}
    for volume_id, per_axis in sorted(collected.items()):
        entry = {}
        for axis in ("u", "v"):
            values = np.concatenate([v for v, _ in per_axis[axis]])
            sizes = np.clip(np.concatenate([c for _, c in per_axis[axis]]), 0, 3)
            classes = {"all": values}
            for size_class in (1, 2, 3):
                chosen = values[sizes == size_class]
                if chosen.size >= min_class_count:
                    classes[str(size_class)] = chosen
            entry[axis] = {name: [round(float(q), 5) for q in np.quantile(v, probabilities)] for name, v in classes.items()}
            entry[f"{axis}_counts"] = {name: int(v.size) for name, v in classes.items()}
        result["volumes"][str(volume_id)] = {"count": int(values.size), **entry}
    return result


@dataclass(frozen=True)
class Margins:
    """How far the simulation may be from the real event before :func:`compare_layers` / :func:`compare_segments` object.

    Every comparison allows the set margin plus the statistical uncertainty of
    the real event's small samples, tested at significance ``alpha`` per
    comparison (Bonferroni-corrected over all comparisons made).
    """

    efficiency: float = 0.03
    """A layer's hit efficiency may differ by this much (absolute) before its real miss count is tested."""
    resolution: float = 0.40
    """A layer's robust resolution (u and v) may differ by this fraction (the measurement model is per volume
    and cluster size, so layers of one volume share it)."""
    double_fraction: float = 0.05
    """A layer's fraction of crossings with two hits (overlapping modules) may differ by this much (absolute)."""
    min_crossings: int = 60
    """Layers with fewer real crossings (hits + misses) are not tested for efficiency."""
    min_hits: int = 80
    """Layers with fewer real signal hits are not tested for resolution."""
    min_segments: int = 40
    """Layer pairs with fewer real true segments are not tested."""
    alpha: float = 0.01
    """Family-wise significance of the whole comparison."""


def compare_layers(sim: pd.DataFrame, real: pd.DataFrame, margins: Margins = Margins()) -> list[str]:
    """Problems of a simulated :func:`layer_response` table against the real one (empty: consistent).

    Double hits: the real count of crossings with two hits must be a
    plausible binomial draw for some fraction within ``margins.double_fraction``
    of the simulated one. Efficiency: the real layer's miss count must be a plausible Poisson draw
    (two-sided, at the corrected significance) for some efficiency within
    ``margins.efficiency`` of the simulated one. Resolution: the ratio of the
    robust sigmas along u and along v must be within ``1 ± margins.resolution``
    widened by three standard errors of the real estimate (1.17 σ / sqrt(2 n)
    for a median absolute deviation).
    """
    merged = real.merge(sim, on="layer", suffixes=("_real", "_sim"))
    eff_rows = merged[(merged["hits_real"] + merged["misses_real"]) >= margins.min_crossings]
    res_rows = merged[(merged["num_hits_real"] * (1 - merged["noise_fraction_real"].fillna(0))) >= margins.min_hits]
    # Volumes pool their layers' counts, so endcap discs with few crossings each are tested together.
    pooled = {
        name: table.groupby("volume_id")[["hits", "misses"]].sum() for name, table in (("real", real), ("sim", sim))
    }
    volumes = pooled["real"].add_suffix("_real").join(pooled["sim"].add_suffix("_sim"))
    volumes = volumes[(volumes["hits_real"] + volumes["misses_real"]) >= margins.min_crossings]
    double_rows = merged[merged["groups_real"] >= margins.min_crossings]
    num_tests = max(len(eff_rows) + len(volumes) + 2 * len(res_rows) + len(double_rows), 1)
    alpha = margins.alpha / num_tests
    problems = []
    efficiency_checks = [
        (f"layer {row.volume_id_real}:{row.layer_id_real}", row.hits_real, row.misses_real, row.efficiency_sim)
        for row in eff_rows.itertuples(index=False)
    ]
    for volume_id, row in volumes.iterrows():
        total = row["hits_sim"] + row["misses_sim"]
        efficiency_checks.append((f"volume {volume_id}", row["hits_real"], row["misses_real"], row["hits_sim"] / max(total, 1)))
    for name, hits, observed, sim_efficiency in efficiency_checks:
        crossings = hits + observed
        low_eff = max(sim_efficiency - margins.efficiency, 0.0)
        high_eff = min(sim_efficiency + margins.efficiency, 1.0)
        # Expected misses range over the allowed efficiencies; the count must fit one of them.
        most = crossings * (1 - low_eff)
        least = crossings * (1 - high_eff)
        too_many = observed > 0 and poisson.sf(observed - 1, most) < alpha / 2
        too_few = poisson.cdf(observed, least) < alpha / 2
        if too_many or too_few:
            problems.append(
                f"{name} efficiency: real {int(hits)}/{int(crossings)} ({1 - observed / crossings:.3f}) "
                f"vs simulated {sim_efficiency:.3f}"
            )
    for row in double_rows.itertuples(index=False):
        # Binomial: the real count of double crossings must fit some fraction within the margin of the simulated one.
        low = max(row.double_fraction_sim - margins.double_fraction, 0.0)
        high = min(row.double_fraction_sim + margins.double_fraction, 1.0)
        doubles = int(round(row.double_fraction_real * row.groups_real))
        if binom.sf(doubles - 1, row.groups_real, high) < alpha / 2 or binom.cdf(doubles, row.groups_real, low) < alpha / 2:
            problems.append(
                f"layer {row.volume_id_real}:{row.layer_id_real} double hits: real {row.double_fraction_real:.3f} of "
                f"{row.groups_real} crossings vs simulated {row.double_fraction_sim:.3f}"
            )
    for row in res_rows.itertuples(index=False):
        count = row.num_hits_real * (1 - (row.noise_fraction_real or 0))
        spread = 3 * 1.17 / np.sqrt(2 * count)
        for axis in ("u", "v"):
            real_sigma = getattr(row, f"sigma_{axis}_real")
            sim_sigma = getattr(row, f"sigma_{axis}_sim")
            if not (np.isfinite(real_sigma) and np.isfinite(sim_sigma)) or real_sigma <= 0:
                continue
            ratio = sim_sigma / real_sigma
            if not (1 - margins.resolution - spread <= ratio <= 1 + margins.resolution + spread):
                problems.append(
                    f"layer {row.volume_id_real}:{row.layer_id_real} resolution {axis}: real {real_sigma:.4f} mm vs "
                    f"simulated {sim_sigma:.4f} mm"
                )
    return problems


def compare_segments(sim: pd.DataFrame, real: pd.DataFrame, margins: Margins = Margins()) -> list[str]:
    """Problems of simulated true segments (:func:`segment_table`) against real ones, per layer pair.

    For every (inner, outer) pair with at least ``margins.min_segments`` real
    segments, the distributions of Δr, |Δz| and |Δφ| are compared with a
    two-sample Kolmogorov–Smirnov test at the corrected significance; a pair
    the simulation never produces is a problem too.
    """
    real_counts = real.groupby(["inner", "outer"]).size()
    tested = real_counts[real_counts >= margins.min_segments].index
    num_tests = max(3 * len(tested), 1)
    alpha = margins.alpha / num_tests
    sim_groups = {key: frame for key, frame in sim.groupby(["inner", "outer"])}
    real_groups = {key: frame for key, frame in real.groupby(["inner", "outer"])}
    table = layer_table()
    name = lambda index: f"{table['volume_id'].iloc[index]}:{table['layer_id'].iloc[index]}"  # noqa: E731
    problems = []
    for key in tested:
        pair = f"{name(key[0])}->{name(key[1])}"
        simulated = sim_groups.get(key)
        if simulated is None or len(simulated) < margins.min_segments:
            problems.append(f"pair {pair}: {real_counts[key]} real segments, {0 if simulated is None else len(simulated)} simulated")
            continue
        for column, values in (("dr", lambda f: f["dr"]), ("dz", lambda f: f["dz"].abs()), ("dphi", lambda f: f["dphi"])):
            result = ks_2samp(values(simulated).to_numpy(), values(real_groups[key]).to_numpy())
            if result.pvalue < alpha:
                problems.append(
                    f"pair {pair} {column}: KS {result.statistic:.3f} (p {result.pvalue:.1e}); median real "
                    f"{np.median(values(real_groups[key])):.4g} vs simulated {np.median(values(simulated)):.4g}"
                )
    return problems

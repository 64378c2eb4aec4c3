"""Sensors: which modules a layer crossing passes through, where on them, and whether it leaves a hit.

Each crossing of a layer's cylinder or disc is moved along the track onto the
plane of the module it passes through (``module_planes``), so barrel hits
spread in radius and disc hits in z by the modules' tilt and stagger, as in
the real files; a crossing through two overlapping modules leaves a hit in
each. Without ``module_planes`` a crossing stays on its layer's surface, in
its nearest module, and leaves a second hit in the neighbour with the ring's
geometric overlap fraction as probability. A hit is then kept inside its
layer's extent with the hit efficiency (per layer: ``layer_conditions``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from domainpar.arrays import unique
from domainpar.sim.config import SimulationConfig
from domainpar.sim.geometry import DetectorGeometry, layer_position
from domainpar.sim.propagation import Crossings

#: Module centres tried per crossing when finding the modules it passes through.
_MODULE_CANDIDATES = 4
#: Longest move (mm) of a crossing from its layer's cylinder or disc onto its module's plane, and the
#: largest sagitta (mm) of the helix over that move for the straight step to stand for it (beyond it the
#: straight step is no better than the layer surface, whose error is the modules' few-mm stagger).
_MAX_PLANE_STEP_MM = 100.0
_MAX_TANGENT_SAGITTA_MM = 1.0


def land_on_modules(
    rng: np.random.Generator, crossings: Crossings, config: SimulationConfig, geometry: DetectorGeometry
) -> Crossings:
    """The crossings on the modules they pass through, plus the second crossing of every module overlap.

    Args:
        rng: random stream (overlaps, without ``module_planes``).
        crossings: crossings of the layers' surfaces (:func:`~domainpar.sim.propagation.propagate`).
        config: ``module_planes`` and ``module_overlaps`` are used.
        geometry: the detector.

    Returns:
        The crossings with their ``module_row``, grouped by particle in order along each track.
    """
    if config.module_planes:
        module_row, s, position, direction, overlap = _on_module_planes(crossings, config, geometry)
    else:
        module_row, s, position, direction, overlap = _on_nearest_modules(rng, crossings, config, geometry)
    part, layer, p, barrel = (
        np.concatenate([a, a[overlap]]) for a in (crossings.part, crossings.layer, crossings.p, crossings.barrel)
    )
    order = np.lexsort((s, part))
    return Crossings(
        part=part[order], layer=layer[order], s=s[order], position=position[order], direction=direction[order],
        p=p[order], barrel=barrel[order], module_row=module_row[order],
    )  # fmt: skip


def _on_module_planes(crossings: Crossings, config: SimulationConfig, geometry: DetectorGeometry):
    """Module rows, arc lengths, positions and directions of the crossings moved onto their modules' planes,
    followed by the overlaps' second crossings; and which crossings those overlaps come from."""
    s, layer, position, direction, p = crossings.s, crossings.layer, crossings.position, crossings.direction, crossings.p
    # The modules the crossing passes through: of the few nearest module centres, those whose
    # plane the track meets inside the module. The first is its hit; a second one (an overlap of
    # neighbouring modules, by the detector's own geometry) leaves a second hit on the layer.
    candidates = np.empty((len(s), _MODULE_CANDIDATES), dtype=np.int64)
    for layer_index in unique(layer):
        mask = layer == layer_index
        k = min(_MODULE_CANDIDATES, geometry.module_rows[layer_index].size)
        _, nearest = geometry.trees[layer_index].query(position[mask], k=k)
        nearest = nearest.reshape(int(mask.sum()), k)
        if k < _MODULE_CANDIDATES:
            nearest = np.concatenate([nearest, np.repeat(nearest[:, :1], _MODULE_CANDIDATES - k, axis=1)], axis=1)
        candidates[mask] = geometry.module_rows[layer_index][nearest]
    first, second, landing, passes_second = _modules_crossed(position, direction, candidates, geometry.modules)
    radius = config.helix_radius_mm(p * np.hypot(direction[:, 0], direction[:, 1]))
    # The move follows the straight tangent; where the helix would leave that tangent by more than
    # 1 mm over it (a looper grazing a layer at its apex) — as far as the modules' stagger the move
    # corrects — the crossing keeps its layer-surface point and nearest module.
    moved = landing - position[:, None, :]
    transverse = np.hypot(moved[..., 0], moved[..., 1])
    straight = (transverse**2 / (2.0 * np.maximum(radius, 1e-9))[:, None] <= _MAX_TANGENT_SAGITTA_MM) & (
        np.linalg.norm(moved, axis=2) <= _MAX_PLANE_STEP_MM
    )
    rows = np.arange(len(s))
    use_first = straight[rows, first]
    primary_position = np.where(use_first[:, None], landing[rows, first], position)
    primary_row = np.where(use_first, candidates[rows, first], candidates[:, 0])
    overlap = np.flatnonzero(passes_second & straight[rows, second] & use_first) if config.module_overlaps else np.zeros(0, np.int64)
    step_of = lambda choice: np.einsum("ij,ij->i", landing[rows, choice] - position, direction)  # noqa: E731
    s_first = s + np.where(use_first, step_of(first), 0.0) * np.hypot(direction[:, 0], direction[:, 1])
    s_second = s + step_of(second) * np.hypot(direction[:, 0], direction[:, 1])
    module_row = np.concatenate([primary_row, candidates[overlap, second[overlap]]])
    s = np.concatenate([s_first, s_second[overlap] + np.where(s_second[overlap] == s_first[overlap], 1e-6, 0.0)])
    position = np.concatenate([primary_position, landing[overlap, second[overlap]]])
    direction = np.concatenate([direction, direction[overlap]])
    return module_row, s, position, direction, overlap


def _on_nearest_modules(
    rng: np.random.Generator, crossings: Crossings, config: SimulationConfig, geometry: DetectorGeometry
):
    """As :func:`_on_module_planes`, with every crossing on its layer's surface in the nearest module, and an
    overlap's second crossing drawn with its ring's overlap fraction."""
    s, layer, barrel = crossings.s, crossings.layer, crossings.barrel
    position, direction = crossings.position, crossings.direction
    # Nearest module centre of every crossing's layer (and the runner-up, its overlapping neighbour).
    nearest_row = np.empty((len(s), 2), dtype=np.int64)
    for layer_index in unique(layer):
        mask = layer == layer_index
        _, nearest = geometry.trees[layer_index].query(position[mask], k=2)
        nearest_row[mask] = geometry.module_rows[layer_index][nearest]
    # Module overlaps: where neighbouring modules of a ring overlap, the crossing also passes
    # through the neighbour a few mm further on (radial stagger on barrels, the other disc face
    # on endcaps). The probability is the geometric overlap fraction of the module's ring.
    if config.module_overlaps:
        overlap_probability = geometry.overlap_probability[nearest_row[:, 0]]
    else:
        overlap_probability = np.zeros(len(s))
    overlap = np.flatnonzero(rng.random(len(s)) < overlap_probability)
    module_row = np.concatenate([nearest_row[:, 0], nearest_row[overlap, 1]])
    offset = geometry.overlap_offset[nearest_row[overlap, 0]]
    step = _step_to_staggered_surface(position[overlap], direction[overlap], barrel[overlap], offset)[:, None] * direction[overlap]
    position = np.concatenate([position, position[overlap] + step])
    direction = np.concatenate([direction, direction[overlap]])
    s = np.concatenate([s, s[overlap] + np.hypot(step[:, 0], step[:, 1]) + 1e-6])
    return module_row, s, position, direction, overlap


def detect(rng: np.random.Generator, crossings: Crossings, config: SimulationConfig, layers: pd.DataFrame) -> Crossings:
    """The crossings that leave a hit: inside their layer's extent, and kept with the (per-layer) hit efficiency.

    Raises:
        DomainparError: a layer of ``config.layer_conditions`` that the detector lacks.
    """
    position, layer, barrel = crossings.position, crossings.layer, crossings.barrel
    r_now = np.hypot(position[:, 0], position[:, 1])
    inside = np.where(
        barrel,
        (position[:, 2] >= layers["z_min"].to_numpy()[layer]) & (position[:, 2] <= layers["z_max"].to_numpy()[layer]),
        (r_now >= layers["r_min"].to_numpy()[layer]) & (r_now <= layers["r_max"].to_numpy()[layer]),
    )
    efficiency = np.full(len(crossings), config.hit_efficiency)
    for condition_volume, condition_layer, layer_efficiency, _ in config.layer_conditions:
        efficiency[layer == layer_position(layers, condition_volume, condition_layer)] = layer_efficiency
    detected = inside & (rng.random(len(crossings)) < efficiency)
    return crossings.take(detected)


def _modules_crossed(
    position: np.ndarray, direction: np.ndarray, candidates: np.ndarray, modules: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Which candidate modules a straight track through ``position`` crosses, and where.

    ``position`` (K, 3) are crossings of a layer's ideal surface, ``direction`` (K, 3) the unit directions there,
    ``candidates`` (K, C) the module rows to try, nearest centre first.

    Returns:
        ``(first, second, landing, passes_second)``: per crossing the column of
        the candidate it hits (the nearest one that contains the point where
        the track meets its plane, else the one it misses by least), the next
        such column, the (K, C, 3) points on every candidate's plane, and
        whether the second one contains its point too (an overlap).
    """
    centre = modules[["cx", "cy", "cz"]].to_numpy()[candidates]
    normal = modules[["rot_xw", "rot_yw", "rot_zw"]].to_numpy()[candidates]
    axis_u = modules[["rot_xu", "rot_yu", "rot_zu"]].to_numpy()[candidates]
    axis_v = modules[["rot_xv", "rot_yv", "rot_zv"]].to_numpy()[candidates]
    min_u = modules["module_minhu"].to_numpy()[candidates]
    max_u = modules["module_maxhu"].to_numpy()[candidates]
    half_v = modules["module_hv"].to_numpy()[candidates]
    along = np.einsum("kj,kcj->kc", direction, normal)
    distance = np.einsum("kcj,kcj->kc", centre - position[:, None, :], normal)
    safe = np.where(np.abs(along) < 1e-3, np.where(along < 0, -1e-3, 1e-3), along)
    landing = position[:, None, :] + (distance / safe)[..., None] * direction[:, None, :]
    local = landing - centre
    v = np.einsum("kcj,kcj->kc", local, axis_v)
    # Trapezoids (endcaps): the half-width grows from module_minhu at v = -hv to module_maxhu at v = +hv.
    half_u = min_u + (max_u - min_u) * np.clip((v / np.maximum(half_v, 1e-9) + 1.0) / 2.0, 0.0, 1.0)
    excess = np.maximum(np.abs(np.einsum("kcj,kcj->kc", local, axis_u)) - half_u, np.abs(v) - half_v)
    inside = excess <= 0
    rank = np.arange(candidates.shape[1])[None, :]
    # Inside beats outside; among the inside ones the nearest centre, among the outside ones the least miss.
    score = np.where(inside, rank, 1e3 + excess)
    # Repeated candidates (a layer with few modules) must not count twice.
    duplicate = np.zeros_like(inside)
    for c in range(1, candidates.shape[1]):
        duplicate[:, c] = (candidates[:, :c] == candidates[:, c : c + 1]).any(axis=1)
    score = np.where(duplicate, np.inf, score)
    order = np.argsort(score, axis=1, kind="stable")
    first, second = order[:, 0], order[:, 1]
    rows = np.arange(candidates.shape[0])
    passes_second = inside[rows, second] & ~duplicate[rows, second]
    return first, second, landing, passes_second


def _step_to_staggered_surface(position: np.ndarray, direction: np.ndarray, barrel: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """(K,) straight-line distance (mm) from the (K, 3) crossings to the surface ``offset`` (K,) mm further on
    along the track: on barrels the cylinder of radius r ± offset (as the track moves), on endcaps |z| + offset."""
    radius = np.hypot(position[:, 0], position[:, 1])
    d_xy_sq = np.maximum(direction[:, 0] ** 2 + direction[:, 1] ** 2, 1e-12)
    radial = position[:, 0] * direction[:, 0] + position[:, 1] * direction[:, 1]
    target = radius + np.where(radial >= 0, offset, -offset)
    disc = np.maximum(radial**2 - d_xy_sq * (radius**2 - target**2), 0.0)
    barrel_step = np.where(radial >= 0, -radial + np.sqrt(disc), -radial - np.sqrt(disc)) / d_xy_sq
    endcap_step = offset / np.maximum(np.abs(direction[:, 2]), 1e-6)
    return np.where(barrel, barrel_step, endcap_step)


__all__ = ["detect", "land_on_modules"]

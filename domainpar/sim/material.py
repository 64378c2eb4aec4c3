"""The tracker's material as seen by hadronic interactions: the layers, and the passive surfaces between them.

Every detector layer carries, besides its silicon, its support and services:
one thickness per barrel layer, one per endcap volume (the discs of an endcap
alike: a disc alone holds too few of the real interactions to tell it from its
neighbours). Three passive surfaces carry only support: the beam pipe, the
pixel support tube and the end plates of the pixel barrel. Each surface's
thickness is given in nuclear interaction lengths at normal incidence; a
particle crossing it at an angle sees thickness / |cos(incidence)|. The
material groups (:func:`material_group`) are these: a barrel layer
("8:2"), an endcap volume ("7") or a passive surface ("beam_pipe").

The thicknesses are fitted to the real event 21000 (``python -m
bench.tools.fit_interactions``): its particles file names every interaction
secondary (TrackML's particle_id carries the generation) and its production
vertex, so the interactions per surface, counted without truth, are held
against the simulation's (``tests/sim/test_interactions.py``).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from domainpar.data.detector import layer_table

#: A vertex within this distance of a surface (mm) is on it (:func:`material_group`): the modules' stagger and tilt
#: put real vertices up to ~6 mm off their layer's mean radius or z.
SURFACE_TOLERANCE_MM = 10.0
#: Nuclear interaction length of silicon, mm.
SILICON_LAMBDA_MM = 465.2
#: Per material group (a barrel layer "volume:layer", an endcap volume): support and services per layer, in
#: nuclear interaction lengths at normal incidence, on top of the modules' silicon. Fitted to event 21000
#: (bench/tools/fit_interactions.py); its outermost barrel layer (17:4) holds no interaction vertex, as if
#: nothing were made there.
SUPPORT_LAMBDA = {
    "8:2": 0.00475, "8:4": 0.00655, "8:6": 0.00481, "8:8": 0.00422,
    "13:2": 0.01244, "13:4": 0.00796, "13:6": 0.00883, "13:8": 0.00719,
    "17:2": 0.00856, "17:4": 0.0,
    "7": 0.00679, "9": 0.00679, "12": 0.01273, "14": 0.01273, "16": 0.00893, "18": 0.00893,
}  # fmt: skip
#: Passive surfaces: name → (barrel, radius or |z| of the surface, extent low, extent high, thickness in nuclear
#: interaction lengths). Cylinders extend over |z| in [low, high]; discs (at ±z) over r in [low, high]. mm.
PASSIVE_SURFACES = {
    "beam_pipe": (True, 19.0, 0.0, 3000.0, 0.00199),
    "pixel_support_tube": (True, 200.0, 0.0, 3000.0, 0.00455),
    "pixel_barrel_end_plate": (False, 571.0, 30.0, 175.0, 0.01809),
}


@lru_cache(maxsize=1)
def material_surfaces() -> pd.DataFrame:
    """Every surface that particles interact in: the detector's layers, then the passive surfaces (both ends of a disc).

    Returns:
        One row per surface with the columns of :func:`~domainpar.data.detector.layer_table` that
        :func:`~domainpar.sim.propagation.layer_crossings` reads (``barrel``, ``r``, ``z``, ``z_min``, ``z_max``,
        ``r_min``, ``r_max``, ``layer_index``), plus ``name`` (its material group),
        ``passive`` and ``interaction_lengths`` (thickness at normal incidence). A detector layer keeps its
        ``layer_index``; passive surfaces get ``layer_index`` -1, -2, ...
    """
    layers = layer_table()
    group = [
        f"{volume}:{layer}" if barrel else str(volume)
        for volume, layer, barrel in zip(layers["volume_id"], layers["layer_id"], layers["barrel"])
    ]
    detector = layers[["barrel", "r", "z", "z_min", "z_max", "r_min", "r_max", "layer_index"]].assign(
        name=group,
        passive=False,
        interaction_lengths=layers["thickness"].to_numpy(np.float64) / SILICON_LAMBDA_MM
        + np.array([SUPPORT_LAMBDA[name] for name in group]),
    )
    rows = []
    for name, (barrel, where, low, high, thickness) in PASSIVE_SURFACES.items():
        if barrel:
            rows.append((True, where, 0.0, -high, high, 0.0, where, name, thickness))
        else:
            rows += [(False, 0.0, side * where, side * where, side * where, low, high, name, thickness) for side in (-1, 1)]
    passive = pd.DataFrame(rows, columns=["barrel", "r", "z", "z_min", "z_max", "r_min", "r_max", "name", "interaction_lengths"])
    passive["layer_index"] = -np.arange(1, len(passive) + 1, dtype=np.int64)
    passive["passive"] = True
    return pd.concat([detector, passive[detector.columns]], ignore_index=True)


def material_group(position: np.ndarray, tolerance: float = SURFACE_TOLERANCE_MM) -> np.ndarray:
    """The material group (:func:`surface_groups`) of the surface nearest to each point, "" where none lies within
    ``tolerance`` mm (across the surface, inside its extent widened by the tolerance).

    Args:
        position: (K, 3) points, mm (interaction vertices).
    """
    surfaces = material_surfaces()
    r = np.hypot(position[:, 0], position[:, 1])
    z = position[:, 2]
    best = np.full(len(position), np.inf)
    group = np.full(len(position), "", dtype=object)
    for row in surfaces.itertuples(index=False):
        if row.barrel:
            distance = np.where((z >= row.z_min - tolerance) & (z <= row.z_max + tolerance), np.abs(r - row.r), np.inf)
        else:
            distance = np.where((r >= row.r_min - tolerance) & (r <= row.r_max + tolerance), np.abs(z - row.z), np.inf)
        closer = (distance < best) & (distance <= tolerance)
        best[closer] = distance[closer]
        group[closer] = row.name
    return group.astype(str)


def surface_groups() -> tuple[str, ...]:
    """Names of the material groups, as :func:`material_surfaces` names them (layers and volumes, then passive surfaces)."""
    return tuple(SUPPORT_LAMBDA) + tuple(PASSIVE_SURFACES)


__all__ = [
    "PASSIVE_SURFACES",
    "SILICON_LAMBDA_MM",
    "SURFACE_TOLERANCE_MM",
    "SUPPORT_LAMBDA",
    "material_group",
    "material_surfaces",
    "surface_groups",
]

"""The detector as the simulator sees it: layer surfaces, the modules of every layer, and where modules overlap.

Built once per process from the real TrackML detector description
(:mod:`domainpar.data.detector`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd
from scipy.spatial import cKDTree

from domainpar.data.detector import BARREL_VOLUMES, layer_table, load_detector
from domainpar.errors import DomainparError

#: Per volume: distance in mm between the two hits of a crossing through overlapping modules
#: (radial stagger on barrels, disc faces on endcaps); median of the real labelled event 1.
OVERLAP_OFFSET_MM = {7: 4.5, 8: 1.9, 9: 4.0, 12: 3.0, 13: 5.8, 14: 3.0, 16: 5.0, 17: 5.4, 18: 5.0}


@dataclass(frozen=True)
class DetectorGeometry:
    """Layer surfaces and per-layer module lookup, built once per process."""

    layers: pd.DataFrame
    """The layer table (:func:`~domainpar.data.detector.layer_table`): surfaces and extents, by layer index."""
    modules: pd.DataFrame
    """The detector's modules (:func:`~domainpar.data.detector.load_detector`)."""
    module_rows: tuple
    """Per layer: row indices into ``modules``."""
    trees: tuple
    """Per layer: cKDTree of its module centres."""
    overlap_probability: np.ndarray
    """Per module: geometric overlap fraction of its ring."""
    overlap_offset: np.ndarray
    """Per module: distance to the overlapping neighbour, mm."""


@lru_cache(maxsize=1)
def detector_geometry() -> DetectorGeometry:
    """The TrackML detector's geometry as the simulator uses it (built once per process)."""
    layers = layer_table()
    modules = load_detector()
    keys = modules["volume_id"].to_numpy(np.int64) * 1000 + modules["layer_id"].to_numpy(np.int64)
    centres = modules[["cx", "cy", "cz"]].to_numpy(np.float64)
    rows, trees = [], []
    for volume_id, layer_id in zip(layers["volume_id"], layers["layer_id"]):
        layer_rows = np.flatnonzero(keys == volume_id * 1000 + layer_id)
        rows.append(layer_rows)
        trees.append(cKDTree(centres[layer_rows]))
    probability, offset = module_overlaps(modules)
    return DetectorGeometry(
        layers=layers,
        modules=modules,
        module_rows=tuple(rows),
        trees=tuple(trees),
        overlap_probability=probability,
        overlap_offset=offset,
    )


def module_overlaps(modules: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per module: the fraction of its ring covered twice, and the distance between the two layers of modules.

    A ring is the modules of one layer at one radius (endcaps) or one z position
    (barrels). Its azimuthal overlap fraction is total module width over the
    circumference minus one; barrel layers add the overlap along z.
    """
    r = np.hypot(modules["cx"].to_numpy(), modules["cy"].to_numpy())
    barrel = modules["volume_id"].isin(BARREL_VOLUMES).to_numpy()
    width = modules["module_minhu"].to_numpy() + modules["module_maxhu"].to_numpy()
    ring_key = np.where(barrel, np.round(modules["cz"].to_numpy()), np.round(r))
    frame = modules[["volume_id", "layer_id"]].assign(ring=ring_key, r=r, width=width, hv=modules["module_hv"].to_numpy())
    ring = frame.groupby(["volume_id", "layer_id", "ring"])
    phi_overlap = (ring["width"].transform("sum") / (2 * np.pi * ring["r"].transform("mean")) - 1.0).clip(0.0, 1.0)
    layer = frame.groupby(["volume_id", "layer_id"])
    num_z = layer["ring"].transform("nunique")
    z_length = layer["ring"].transform("max") - layer["ring"].transform("min") + 2 * layer["hv"].transform("mean")
    z_overlap = (num_z * 2 * frame["hv"] / z_length - 1.0).clip(0.0, 1.0)
    probability = np.where(barrel, 1.0 - (1.0 - phi_overlap) * (1.0 - z_overlap), phi_overlap)
    offsets = modules["volume_id"].map(OVERLAP_OFFSET_MM).to_numpy(np.float64)
    return probability.astype(np.float64), offsets


def layer_position(layers: pd.DataFrame, volume_id: int, layer_id: int) -> int:
    """Row of (volume_id, layer_id) in the layer table; a layer the detector lacks is an error."""
    match = np.flatnonzero((layers["volume_id"].to_numpy() == volume_id) & (layers["layer_id"].to_numpy() == layer_id))
    if match.size == 0:
        raise DomainparError(f"SimulationConfig.layer_conditions: no layer {volume_id}:{layer_id} in the TrackML detector")
    return int(match[0])


__all__ = ["OVERLAP_OFFSET_MM", "DetectorGeometry", "detector_geometry", "layer_position", "module_overlaps"]

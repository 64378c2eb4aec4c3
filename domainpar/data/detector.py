"""The TrackML detector description: modules, and the layer table derived from them.

The module table (``detectors.csv[.gz]``, 18,728 modules) is the challenge's own.
A copy ships inside the package, so the simulator and the graph builder work
without any external data. The layer table approximates every barrel layer as
a cylinder and every endcap layer as a disc, with extents taken from the module
centres widened by the module half-sizes (barrel: half-length along z, thickness
and half-width in radius; endcap: radial half-length and half-width in radius,
half-thickness in z).
"""

from __future__ import annotations

import os
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from domainpar.errors import DomainparError, one_line

if TYPE_CHECKING:  # pandas loads when the detector is read, not when a training rank imports the graph config
    import pandas as pd

MODULE_COLUMNS = (
    "volume_id", "layer_id", "module_id", "cx", "cy", "cz",
    "rot_xu", "rot_xv", "rot_xw", "rot_yu", "rot_yv", "rot_yw", "rot_zu", "rot_zv", "rot_zw",
    "module_t", "module_minhu", "module_maxhu", "module_hv", "pitch_u", "pitch_v",
)  # fmt: skip

#: Barrel volumes (cylindrical layers); every other volume is an endcap (discs).
BARREL_VOLUMES = (8, 13, 17)


def load_detector(path: str | os.PathLike | None = None) -> pd.DataFrame:
    """Read a TrackML detector description (with or without a leading index column).

    Args:
        path: ``detectors.csv`` or ``.csv.gz``; None reads the packaged copy.

    Returns:
        One row per module with the columns of :data:`MODULE_COLUMNS`.
    """
    import pandas as pd

    packaged = resources.files("domainpar.data") / "resources" / "detectors.csv.gz"
    path = Path(str(packaged)) if path is None else Path(path)
    if not path.is_file():
        raise DomainparError(f"{path}: detector description not found")
    try:
        table = pd.read_csv(path)
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, EOFError) as exc:
        raise DomainparError(f"{path}: expected a CSV detector description, could not parse it ({one_line(exc)})") from None
    # The Codalab copy carries an unnamed leading index column; drop it if present.
    unnamed = [c for c in table.columns if str(c).startswith("Unnamed") or str(c) == ""]
    table = table.drop(columns=unnamed)
    missing = [c for c in MODULE_COLUMNS if c not in table.columns]
    if missing:
        raise DomainparError(f"{path}: detector description must have columns {missing} (got {list(table.columns)})")
    return table.loc[:, list(MODULE_COLUMNS)].reset_index(drop=True)


@lru_cache(maxsize=4)
def _layer_table_cached(path: str | None) -> pd.DataFrame:
    modules = load_detector(path)
    r = np.hypot(modules["cx"].to_numpy(), modules["cy"].to_numpy())
    cz = modules["cz"].to_numpy()
    half_t = 0.5 * modules["module_t"].to_numpy()
    half_u = modules["module_maxhu"].to_numpy()
    half_v = modules["module_hv"].to_numpy()
    barrel = modules["volume_id"].isin(BARREL_VOLUMES).to_numpy()
    # Local v runs along z on barrel modules and radially on endcap modules; a flat
    # module's corners reach out to hypot(r, half-width) in radius.
    radial_half = np.where(barrel, half_t, half_v)
    z_half = np.where(barrel, half_v, half_t)
    work = modules.assign(
        r=r,
        r_lo=r - radial_half,
        r_hi=np.hypot(r + radial_half, half_u),
        z_lo=cz - z_half,
        z_hi=cz + z_half,
    )
    table = (
        work.groupby(["volume_id", "layer_id"], sort=True)
        .agg(
            num_modules=("module_id", "size"),
            r=("r", "mean"),
            z=("cz", "mean"),
            r_min=("r_lo", "min"),
            r_max=("r_hi", "max"),
            z_min=("z_lo", "min"),
            z_max=("z_hi", "max"),
            pitch_u=("pitch_u", "mean"),
            pitch_v=("pitch_v", "mean"),
            thickness=("module_t", "mean"),
        )
        .reset_index()
    )
    table["barrel"] = table["volume_id"].isin(BARREL_VOLUMES)
    table["layer_index"] = np.arange(len(table), dtype=np.int64)
    return table


def layer_table(path: str | os.PathLike | None = None) -> pd.DataFrame:
    """One row per (volume_id, layer_id), sorted, with its cylinder/disc geometry.

    Columns: volume_id, layer_id, num_modules, r, z (mean module centre), r_min,
    r_max, z_min, z_max (extent in mm), pitch_u, pitch_v, thickness (mean, mm),
    barrel (bool) and layer_index (0..47, the global layer id used in graphs).
    """
    return _layer_table_cached(None if path is None else str(path)).copy()


def layer_index_of(volume_id: np.ndarray, layer_id: np.ndarray, table: pd.DataFrame | None = None) -> np.ndarray:
    """Global layer index of every (volume_id, layer_id) pair; -1 where unknown."""
    table = layer_table() if table is None else table
    keys = table["volume_id"].to_numpy(np.int64) * 1000 + table["layer_id"].to_numpy(np.int64)
    query = np.asarray(volume_id, dtype=np.int64) * 1000 + np.asarray(layer_id, dtype=np.int64)
    pos = np.searchsorted(keys, query)
    pos_clipped = np.minimum(pos, keys.size - 1)
    found = keys[pos_clipped] == query
    return np.where(found, table["layer_index"].to_numpy(np.int64)[pos_clipped], -1)

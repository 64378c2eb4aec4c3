"""Events restricted to some detector volumes: the pixel detector of a full event, say.

Pipelines that run on one region of the detector (the Exa.TrkX and GNN4ITk
pixel-only studies) read events that hold only that region's hits. A subset
event is written in the challenge's layout like any other, so every command
reads it as it reads a whole event: the hits of the chosen volumes, their
cells and truth rows, and every particle with its ``nhits`` recounted over the
hits kept (a particle that left no hit there keeps a row with ``nhits`` 0, as
the challenge's particles files list particles without hits).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from domainpar.arrays import member
from domainpar.data.detector import layer_table
from domainpar.data.trackml import PARTS, event_id_of, event_prefixes, load_event, write_event
from domainpar.errors import DomainparError

#: The pixel detector's volumes (barrel 8, endcaps 7 and 9).
PIXEL_VOLUMES = (7, 8, 9)


def _has_part(prefix: Path, part: str) -> bool:
    return Path(f"{prefix}-{part}.csv").is_file() or Path(f"{prefix}-{part}.csv.gz").is_file()


def check_volumes(volumes, source: str) -> tuple[int, ...]:
    """``volumes`` as a sorted tuple of the detector's volume ids.

    Raises:
        DomainparError: empty, repeated, or a volume the detector does not have.
    """
    known = sorted(int(v) for v in np.unique(layer_table()["volume_id"]))
    if isinstance(volumes, (str, bytes)) or not hasattr(volumes, "__iter__"):
        raise DomainparError(f"{source}: expected a list of volume ids (got {volumes!r})")
    values = list(volumes)
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise DomainparError(f"{source}: expected a non-empty list of integer volume ids (got {values!r})")
    if len(set(values)) != len(values) or not set(values) <= set(known):
        raise DomainparError(f"{source}: expected distinct volume ids of the detector {known} (got {values})")
    return tuple(sorted(values))


def subset_event(prefix: str | os.PathLike, out_dir: str | os.PathLike, volumes) -> Path:
    """Write the event at ``prefix`` restricted to ``volumes`` into ``out_dir`` (same event id); its new prefix.

    Raises:
        DomainparError: bad volume ids, a malformed event, or an event without a hit in ``volumes``.
    """
    volumes = check_volumes(volumes, "volumes")
    parts = [p for p in PARTS if p == "hits" or _has_part(Path(prefix), p)]
    frames = dict(zip(parts, load_event(prefix, parts=tuple(parts))))
    hits = frames["hits"]
    keep = hits["volume_id"].isin(volumes).to_numpy()
    if not keep.any():
        raise DomainparError(f"{prefix}: expected hits in volumes {list(volumes)} (found none)")
    kept_ids = hits["hit_id"].to_numpy()[keep]
    subset = {"hits": hits[keep]}
    for part in ("cells", "truth"):
        if part in frames:
            frame = frames[part]
            subset[part] = frame[member(frame["hit_id"].to_numpy(), kept_ids)]
    if "particles" in frames:
        particles = frames["particles"].copy()
        if "truth" in subset:
            counts = subset["truth"]["particle_id"].value_counts()
            particles["nhits"] = particles["particle_id"].map(counts).fillna(0).astype(np.int32)
        subset["particles"] = particles
    return write_event(out_dir, event_id_of(prefix), subset)


def write_volume_subset(source: str | os.PathLike, out_dir: str | os.PathLike, volumes) -> list[Path]:
    """Write every event of the directory ``source`` restricted to ``volumes`` into ``out_dir`` (:func:`subset_event`).

    Returns:
        The prefixes written, in event order.

    Raises:
        DomainparError: no events, or what :func:`subset_event` raises.
    """
    volumes = check_volumes(volumes, "volumes")
    prefixes = event_prefixes(source)
    if not prefixes:
        raise DomainparError(f"{source}: expected TrackML events (event*-hits.csv[.gz]), found none")
    return [subset_event(prefix, out_dir, volumes) for prefix in prefixes]


def volume_subset_dir(source: str | os.PathLike, out_dir: str | os.PathLike, volumes) -> Path:
    """:func:`write_volume_subset` into a fresh ``out_dir`` (a previous copy there is replaced)."""
    out_dir = Path(out_dir)
    shutil.rmtree(out_dir, ignore_errors=True)
    write_volume_subset(source, out_dir, volumes)
    return out_dir

"""Read and write events in the TrackML challenge's CSV layout, with validation.

An event is four files sharing a prefix, ``{prefix}-{part}.csv`` or
``{prefix}-{part}.csv.gz`` for part in hits, cells, particles, truth, exactly as
the challenge distributed them (and as its ``trackml`` library reads them).
:func:`load_event` returns the requested parts as a tuple of DataFrames in the
order asked for (always a tuple, also for a single part, as in the challenge's
library), with the challenge's dtypes (hit_id i4, x y z f4, particle_id i8, ...).

Every malformed input raises one :class:`~domainpar.errors.DomainparError` whose
single line names the file, the column, what was expected and what was found.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from domainpar.atomic import atomic_path
from domainpar.data.detector import layer_index_of
from domainpar.errors import DomainparError, one_line

#: The four parts of an event, in the challenge's order.
PARTS = ("hits", "cells", "particles", "truth")

#: Required columns of each part and their dtypes (the challenge's).
COLUMNS: dict[str, dict[str, str]] = {
    "hits": {
        "hit_id": "int32", "x": "float32", "y": "float32", "z": "float32",
        "volume_id": "int32", "layer_id": "int32", "module_id": "int32",
    },
    "cells": {"hit_id": "int32", "ch0": "int32", "ch1": "int32", "value": "float32"},
    "particles": {
        "particle_id": "int64", "vx": "float32", "vy": "float32", "vz": "float32",
        "px": "float32", "py": "float32", "pz": "float32", "q": "int32", "nhits": "int32",
    },
    "truth": {
        "hit_id": "int32", "particle_id": "int64", "tx": "float32", "ty": "float32", "tz": "float32",
        "tpx": "float32", "tpy": "float32", "tpz": "float32", "weight": "float32",
    },
}  # fmt: skip

#: Optional columns that keep a fixed dtype when present (the Codalab particles file has particle_type).
OPTIONAL_COLUMNS: dict[str, dict[str, str]] = {"particles": {"particle_type": "int32"}}

_UMASK = os.umask(0)
os.umask(_UMASK)

_EVENT_FILE = re.compile(r"^event(\d+)-(hits|cells|particles|truth)\.csv(\.gz)?$")


def event_id_of(prefix: str | os.PathLike) -> int:
    """The event number of a prefix (``.../event000021000`` → 21000)."""
    match = re.fullmatch(r"event(\d+)", Path(prefix).name)
    if match is None:
        raise DomainparError(f"{prefix}: event prefix must be named event<digits> (got {Path(prefix).name!r})")
    return int(match.group(1))


def event_file(prefix: str | os.PathLike, part: str) -> Path:
    """The one file holding ``part`` of the event at ``prefix`` (``.csv`` or ``.csv.gz``)."""
    if part not in PARTS:
        raise DomainparError(f"part must be one of {list(PARTS)} (got {part!r})")
    plain = Path(f"{prefix}-{part}.csv")
    gzipped = Path(f"{prefix}-{part}.csv.gz")
    if plain.is_file() and gzipped.is_file():
        raise DomainparError(f"{prefix}-{part}: expected exactly one of {plain.name} and {gzipped.name} (found both)")
    if gzipped.is_file():
        return gzipped
    if plain.is_file():
        return plain
    raise DomainparError(f"{gzipped}: {part} file not found (expected {plain.name} or {gzipped.name})")


def has_truth(prefix: str | os.PathLike) -> bool:
    """Whether the event at ``prefix`` has a truth file (test-set events do not)."""
    return Path(f"{prefix}-truth.csv").is_file() or Path(f"{prefix}-truth.csv.gz").is_file()


def event_prefixes(path: str | os.PathLike) -> list[Path]:
    """Prefixes of all events in a directory, sorted by event number.

    An event counts when at least one of its part files is present; a missing
    part is reported when the event is loaded.
    """
    directory = Path(path)
    if not directory.is_dir():
        raise DomainparError(f"{directory}: expected a directory of TrackML events (not found)")
    ids = {
        int(match.group(1)): match.group(0).split("-")[0]
        for match in (_EVENT_FILE.match(entry.name) for entry in directory.iterdir())
        if match is not None
    }
    return [directory / ids[event_id] for event_id in sorted(ids)]


def _read_part(path: Path, part: str) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise DomainparError(f"{path}: expected a CSV table with columns {list(COLUMNS[part])} (found an empty file)") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, EOFError) as exc:
        raise DomainparError(f"{path}: expected a CSV table, could not parse it ({one_line(exc)})") from None
    wanted = dict(COLUMNS[part])
    missing = [column for column in wanted if column not in frame.columns]
    if missing:
        raise DomainparError(
            f"{path}: column {missing[0]!r} missing (expected columns {list(wanted)}, found {list(frame.columns)})"
        )
    wanted.update({k: v for k, v in OPTIONAL_COLUMNS.get(part, {}).items() if k in frame.columns})
    for column, dtype in wanted.items():
        frame[column] = _checked_column(frame[column], path, column, dtype)
    return frame


def _checked_column(values: pd.Series, path: Path, column: str, dtype: str) -> pd.Series:
    if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
        numeric = pd.to_numeric(values, errors="coerce")
        bad = np.flatnonzero(numeric.isna().to_numpy() & values.notna().to_numpy())
        if bad.size:
            raise DomainparError(
                f"{path}: column {column!r} must be numeric (found {values.iloc[bad[0]]!r} in row {bad[0] + 1})"
            )
        values = numeric
    array = values.to_numpy(dtype=np.float64, na_value=np.nan)
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise DomainparError(f"{path}: column {column!r} must be finite numbers (found {array[bad[0]]} in row {bad[0] + 1})")
    if dtype.startswith("int"):
        bad = np.flatnonzero(array != np.round(array))
        if bad.size:
            raise DomainparError(f"{path}: column {column!r} must be integers (found {array[bad[0]]} in row {bad[0] + 1})")
        info = np.iinfo(dtype)
        bad = np.flatnonzero((array < info.min) | (array > info.max))
        if bad.size:
            raise DomainparError(f"{path}: column {column!r} must fit {dtype} (found {array[bad[0]]:.0f} in row {bad[0] + 1})")
        # Read integers through int64, not float64, so large particle ids keep every digit.
        return values.astype(np.int64).astype(dtype) if values.dtype.kind in "iu" else values.round().astype(dtype)
    return values.astype(dtype)


def _validate_hits(hits: pd.DataFrame, path: Path) -> None:
    if len(hits) == 0:
        raise DomainparError(f"{path}: expected at least one hit (found an empty table)")
    hit_ids = hits["hit_id"].to_numpy()
    duplicated = hits["hit_id"].duplicated().to_numpy()
    if duplicated.any():
        row = int(np.flatnonzero(duplicated)[0])
        raise DomainparError(f"{path}: column 'hit_id' must be unique (found {hit_ids[row]} again in row {row + 1})")
    unknown = layer_index_of(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy()) < 0
    if unknown.any():
        row = int(np.flatnonzero(unknown)[0])
        raise DomainparError(
            f"{path}: columns 'volume_id', 'layer_id' must name a TrackML detector layer "
            f"(found ({hits['volume_id'].iloc[row]}, {hits['layer_id'].iloc[row]}) in row {row + 1})"
        )


def _validate_against_hits(frame: pd.DataFrame, path: Path, hits: pd.DataFrame, exact: bool) -> None:
    """Check that ``frame.hit_id`` refers to the hits (and, if ``exact``, covers every hit once)."""
    hit_ids = hits["hit_id"].to_numpy()
    ids = frame["hit_id"].to_numpy()
    unknown = ~np.isin(ids, hit_ids)
    if unknown.any():
        row = int(np.flatnonzero(unknown)[0])
        raise DomainparError(
            f"{path}: column 'hit_id' must match the hits file's hit_ids "
            f"(found {int(unknown.sum())} unknown, first {ids[row]} in row {row + 1})"
        )
    if not exact:
        return
    duplicated = frame["hit_id"].duplicated().to_numpy()
    if duplicated.any():
        row = int(np.flatnonzero(duplicated)[0])
        raise DomainparError(f"{path}: column 'hit_id' must be unique (found {ids[row]} again in row {row + 1})")
    uncovered = ~np.isin(hit_ids, ids)
    if uncovered.any():
        raise DomainparError(
            f"{path}: column 'hit_id' must match the hits file's hit_ids "
            f"(found {int(uncovered.sum())} hits without a truth row, first hit_id {hit_ids[uncovered][0]})"
        )


def load_event(
    prefix: str | os.PathLike, parts: Sequence[str] = PARTS
) -> tuple[pd.DataFrame, ...]:
    """Load the requested parts of one event, validated, with the challenge's dtypes.

    Args:
        prefix: path without the part suffix, e.g. ``data/event000000001``.
        parts: any of hits, cells, particles, truth, in the order wanted.

    Returns:
        One DataFrame per requested part, in ``parts`` order (always a tuple,
        ``(hits,) = load_event(prefix, parts=("hits",))`` for a single part).
        Cells and truth hit_ids are checked against the hits when hits are
        loaded too (every hit needs exactly one truth row).
    """
    if isinstance(parts, str):
        parts = (parts,)
    unknown = [part for part in parts if part not in PARTS]
    if unknown or not parts:
        raise DomainparError(f"parts must be a non-empty selection of {list(PARTS)} (got {list(parts)})")
    paths = {part: event_file(prefix, part) for part in parts}
    frames = {part: _read_part(paths[part], part) for part in parts}
    if "hits" in frames:
        _validate_hits(frames["hits"], paths["hits"])
        if "truth" in frames:
            _validate_against_hits(frames["truth"], paths["truth"], frames["hits"], exact=True)
        if "cells" in frames:
            _validate_against_hits(frames["cells"], paths["cells"], frames["hits"], exact=False)
    return tuple(frames[part] for part in parts)


def load_dataset(
    path: str | os.PathLike, nevents: int | None = None, parts: Sequence[str] = PARTS
) -> Iterator[tuple]:
    """Iterate over the events of a directory in event order.

    Args:
        path: directory holding ``event*-{part}.csv[.gz]`` files.
        nevents: stop after this many events (None: all).
        parts: as in :func:`load_event`.

    Yields:
        ``(event_id, *frames)`` with the frames in ``parts`` order.
    """
    if nevents is not None and nevents < 0:
        raise DomainparError(f"nevents must be non-negative (got {nevents})")
    prefixes = event_prefixes(path)
    if not prefixes:
        raise DomainparError(f"{path}: expected TrackML event files event<digits>-<part>.csv[.gz] (found none)")
    for prefix in prefixes[:nevents]:
        yield (event_id_of(prefix), *load_event(prefix, parts=parts))


def write_event(
    directory: str | os.PathLike, event_id: int, frames: Mapping[str, pd.DataFrame], compress: bool = True
) -> Path:
    """Write an event in the challenge's layout, each file atomically (temp name, then rename).

    Args:
        directory: output directory (created if needed).
        event_id: event number; files are named ``event{event_id:09d}-{part}.csv[.gz]``.
        frames: part name → DataFrame with at least the part's required columns;
            columns are cast to the challenge's dtypes, extra columns kept.
        compress: write ``.csv.gz`` (fast gzip level) instead of ``.csv``.

    Returns:
        The event prefix (``directory/event{event_id:09d}``).
    """
    if event_id < 0:
        raise DomainparError(f"event_id must be non-negative (got {event_id})")
    prefix = Path(directory) / f"event{event_id:09d}"
    for part, frame in frames.items():
        if part not in PARTS:
            raise DomainparError(f"frames keys must be among {list(PARTS)} (got {part!r})")
        missing = [column for column in COLUMNS[part] if column not in frame.columns]
        if missing:
            raise DomainparError(f"{part} frame: column {missing[0]!r} missing (expected columns {list(COLUMNS[part])})")
        dtypes = {**COLUMNS[part], **{k: v for k, v in OPTIONAL_COLUMNS.get(part, {}).items() if k in frame.columns}}
        frame = frame.astype(dtypes)
        target = Path(f"{prefix}-{part}.csv.gz" if compress else f"{prefix}-{part}.csv")
        compression = {"method": "gzip", "compresslevel": 1, "mtime": 0} if compress else None
        with atomic_path(target) as tmp:
            frame.to_csv(tmp, index=False, compression=compression)
            # mkstemp creates owner-only files; give event files the usual umask-based mode.
            os.chmod(tmp, 0o666 & ~_UMASK)
        # A stale file with the other extension would make the event ambiguous to readers.
        stale = Path(f"{prefix}-{part}.csv" if compress else f"{prefix}-{part}.csv.gz")
        stale.unlink(missing_ok=True)
    return prefix

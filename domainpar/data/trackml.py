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

import gzip
import io
import os
import re
from zlib import error as zlib_error
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from domainpar.arrays import member, unique
from domainpar.atomic import atomic_path
from domainpar.data.detector import layer_index_of, layer_table
from domainpar.errors import DomainparError, one_line, shorten, what_is

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

# ASCII digits only: Python's \d also matches other scripts' digits (event١ would be event 1).
_EVENT_FILE = re.compile(r"^event([0-9]+)-(hits|cells|particles|truth)\.csv(\.gz)?$")

# What looks like an event's part file but is not read (upper-case .CSV/.GZ, another compression): listing the
# directory must not skip it silently, or an event (or all of them) goes missing without a word.
_UNREAD_EVENT_FILE = re.compile(
    r"^event[0-9]+-(hits|cells|particles|truth)\.csv(\.(gz|bz2|xz|zip|zst|zstd|lz4|lzma|z|7z|tar|tgz))?$", re.IGNORECASE
)
#: An event's part file whose event number is not digits (``eventabc-hits.csv``, ``event-1-hits.csv``): no event id.
_UNNUMBERED_EVENT_FILE = re.compile(r"^event[^/]*-(hits|cells|particles|truth)\.csv(\.gz)?$", re.IGNORECASE)

#: The largest event number: submissions and graph files store it as int64.
MAX_EVENT_ID = int(np.iinfo(np.int64).max)


def event_id_of(prefix: str | os.PathLike) -> int:
    """The event number of a prefix (``.../event000021000`` → 21000)."""
    match = re.fullmatch(r"event([0-9]+)", Path(prefix).name)
    if match is None:
        raise DomainparError(f"{prefix}: event prefix must be named event<digits> (got {Path(prefix).name!r})")
    digits = match.group(1).lstrip("0") or "0"
    # Judged by length first: Python refuses to convert digit strings of thousands of characters.
    if len(digits) > 19 or int(digits) > MAX_EVENT_ID:
        raise DomainparError(f"{prefix}: event number must be at most {MAX_EVENT_ID} (int64) (got {shorten(digits)})")
    return int(digits)


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
    for path in (plain, gzipped):
        # A name that exists but is no regular file (a directory, a FIFO that would block the read, a link
        # loop) is named as what it is: "not found" would send the user looking for a file that is there.
        if os.path.lexists(path):
            raise DomainparError(f"{path}: expected the event's {part} file, found {what_is(path)}")
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
    names: dict[int, set[str]] = {}
    for entry in sorted(directory.iterdir()):
        match = _EVENT_FILE.match(entry.name)
        if match is not None:
            names.setdefault(int(match.group(1)), set()).add(match.group(0).split("-")[0])
        elif _UNREAD_EVENT_FILE.match(entry.name):
            suffix = entry.suffix.lower()
            found = (
                f"{entry.name!r}, compressed as {entry.suffix}, which is not read: decompress it or gzip it"
                if suffix not in (".csv", ".gz") else f"{entry.name!r}, which is not read: rename it in lower case"
            )
            raise DomainparError(f"{entry}: expected event files named event<digits>-<part>.csv or .csv.gz (found {found})")
        elif _UNNUMBERED_EVENT_FILE.match(entry.name):
            raise DomainparError(
                f"{entry}: expected event files named event<digits>-<part>.csv or .csv.gz "
                f"(found {entry.name!r}, whose event number is not digits)"
            )
    for event_id, prefixes in sorted(names.items()):
        # event1-hits.csv beside event000000001-hits.csv: two events or one event's parts under two spellings;
        # reading one and dropping the other silently would lose an event, or mix two.
        if len(prefixes) > 1:
            first, second = sorted(prefixes)[:2]
            raise DomainparError(
                f"{directory}: expected one prefix per event number, found {first} and {second} (both event {event_id})"
            )
    return [directory / next(iter(names[event_id])) for event_id in sorted(names)]


#: The most CSV text one event file may hold (after decompressing). A full TrackML event's largest file (its
#: cells) is some 40 MB; a gzip bomb (kilobytes that inflate to terabytes) would exhaust the memory unbounded.
MAX_EVENT_FILE_BYTES = 1 << 30

_READ_CHUNK = 1 << 24


def unreadable_event_file(path: Path) -> DomainparError:
    """The error of an event file this user may not read: theirs to mend (its mode or owner), exit 2, not a fault."""
    return DomainparError(f"{path}: expected an event file this user can read (permission denied)")


def read_event_bytes(path: Path) -> bytes:
    """The bytes of an event file; one that this user may not read is named as the user's to mend, not the machine's.

    Raises:
        DomainparError: permission denied (exit 2: the file's mode or owner, as any unreadable input).
    """
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except PermissionError:
        raise unreadable_event_file(path) from None


def _open_gzip(path: Path) -> gzip.GzipFile:
    """``gzip.open(path)``, streamed (an archive is inflated chunk by chunk, up to the limit); unreadable: named."""
    try:
        return gzip.open(path, "rb")
    except PermissionError:
        raise unreadable_event_file(path) from None


def _csv_text(path: Path, content: bytes | None) -> bytes:
    """The CSV text of an event file (decompressed when ``.gz``), at most :data:`MAX_EVENT_FILE_BYTES`.

    ``content``: the file's bytes when the caller has read them already (to hash them).
    """
    limit = MAX_EVENT_FILE_BYTES
    if not path.name.endswith(".gz"):
        size = len(content) if content is not None else path.stat().st_size
        if size > limit:
            raise DomainparError(f"{path}: expected at most {limit >> 30} GiB of CSV text in an event file (found {size:,} bytes)")
        return content if content is not None else read_event_bytes(path)
    text = io.BytesIO()
    with gzip.GzipFile(fileobj=io.BytesIO(content)) if content is not None else _open_gzip(path) as stream:
        # In chunks, so that a bomb is stopped at the limit rather than inflated whole.
        while chunk := stream.read(_READ_CHUNK):
            text.write(chunk)
            if text.tell() > limit:
                raise DomainparError(
                    f"{path}: expected at most {limit >> 30} GiB of CSV text in an event file "
                    f"(found more after decompressing: a damaged or hostile archive)"
                )
    return text.getvalue()


def _read_part(path: Path, part: str, content: bytes | None = None) -> pd.DataFrame:
    try:
        # Decompressed here, bounded, and parsed from memory (the caller's bytes are not read from disk again).
        frame = pd.read_csv(io.BytesIO(_csv_text(path, content)), low_memory=False)
    except DomainparError:
        raise
    except pd.errors.EmptyDataError:
        raise DomainparError(f"{path}: expected a CSV table with columns {list(COLUMNS[part])} (found an empty file)") from None
    except UnicodeDecodeError as exc:
        raise DomainparError(f"{path}: expected a UTF-8 CSV table, found a byte that is not text (position {exc.start})") from None
    except (pd.errors.ParserError, ValueError, OSError, EOFError, zlib_error) as exc:
        raise DomainparError(f"{path}: expected a CSV table, could not parse it ({one_line(exc, limit=200)})") from None
    wanted = dict(COLUMNS[part])
    check_header(frame, path, [*wanted, *OPTIONAL_COLUMNS.get(part, {})], content)
    missing = [column for column in wanted if column not in frame.columns]
    if missing:
        found = shorten([str(c) for c in frame.columns], limit=160)
        raise DomainparError(f"{path}: column {missing[0]!r} missing (expected columns {list(wanted)}, found {found})")
    wanted.update({k: v for k, v in OPTIONAL_COLUMNS.get(part, {}).items() if k in frame.columns})
    for column, dtype in wanted.items():
        convert = _integer_column if dtype.startswith("int") else _float_column
        frame[column] = pd.Series(convert(frame[column], path, column, dtype), index=frame.index, name=column)
    return frame


def check_header(frame: pd.DataFrame, path: Path, columns: Sequence[str], content: bytes | None = None) -> None:
    """Refuse a table pandas parsed with its fields under the wrong names.

    Args:
        frame: the table as ``pd.read_csv`` returned it (default ``header`` and ``index_col``).
        path: the file, named in the message (and read again for its header when needed).
        columns: the columns the caller reads: each must appear once in the header.
        content: the file's bytes when the caller parsed them from memory.

    Raises:
        DomainparError: data rows with more fields than the header (pandas would take the first field as the
            index and read every column from its neighbour's field), or a column of ``columns`` named twice
            (pandas renames the second ``x`` to ``x.1``: which one the user meant would be a guess).
    """
    if not isinstance(frame.index, pd.RangeIndex):
        raise DomainparError(
            f"{path}: expected every row to have the header's {len(frame.columns)} fields "
            f"(found {len(frame.columns) + frame.index.nlevels} in the data rows: a trailing comma?)"
        )
    if not any(f"{column}.1" in frame.columns for column in columns):
        return
    source = path if content is None else io.BytesIO(content)
    compression = "infer" if content is None else ("gzip" if path.name.endswith(".gz") else None)
    header = pd.read_csv(source, header=None, nrows=1, dtype=str, keep_default_na=False, compression=compression)
    names = [str(name) for name in header.iloc[0]]
    for column in columns:
        fields = [index + 1 for index, name in enumerate(names) if name == column]
        if len(fields) > 1:
            raise DomainparError(f"{path}: column {column!r} must appear once in the header (found it as fields {fields[0]} and {fields[1]})")


def _raw_column(path: Path, column: str) -> pd.Series:
    """The text of every field of ``column`` exactly as written (read again, only on the error path)."""
    return pd.read_csv(path, usecols=[column], dtype=str, keep_default_na=False, na_filter=False, low_memory=False)[column]


_INTEGER_TEXT = re.compile(r"\s*[+-]?\d+\s*")


def _field(text: str) -> str:
    """A field's text for a message: numbers as written (nan, inf, 1e+40), an empty field named, text quoted and shortened."""
    stripped = text.strip()
    if not stripped:
        return "an empty field"
    try:
        float(stripped)
    except ValueError:
        return shorten(text)
    return stripped if len(stripped) <= 40 else shorten(stripped)


def _integer_column(values: pd.Series, path: Path, column: str, dtype: str) -> np.ndarray:
    """``column`` as exact integers of ``dtype``: integer text only, never through float64.

    pandas parses a column of integer literals that fit int64 (or uint64) exactly;
    anything else (a float-formatted or empty field, text, a value beyond 64
    bits) makes it another dtype, and then every field is judged from its text.
    """
    info = np.iinfo(dtype)
    if values.dtype.kind in "iu":
        array = values.to_numpy()
        bad = np.flatnonzero(array > info.max) if array.dtype.kind == "u" else np.flatnonzero((array < info.min) | (array > info.max))
        if bad.size:
            raise DomainparError(
                f"{path}: column {column!r} must be integers in [{info.min}, {info.max}] ({dtype}) "
                f"(found {array[bad[0]]} in row {bad[0] + 1})"
            )
        return array.astype(dtype)
    return integers_from_text(_raw_column(path, column), dtype, f"{path}: column {column!r}")


def integers_from_text(texts: pd.Series, dtype: str, what: str) -> np.ndarray:
    """Exact integers of ``dtype`` from text fields (never through float64, so ids above 2^53 keep every digit).

    Args:
        texts: one string per row.
        dtype: the integer dtype the values must fit (int32, int64).
        what: names the column in the message, e.g. ``"sub.csv: column 'track_id'"``.

    Raises:
        DomainparError: a field that is not an integer literal (float-formatted, empty, text) or out of range,
            naming its row (1 = the first data row).
    """
    info = np.iinfo(dtype)
    values = texts.to_numpy(dtype=object)
    literal = texts.astype(str).str.fullmatch(_INTEGER_TEXT).to_numpy(dtype=bool)
    if not literal.all():
        row = int(np.flatnonzero(~literal)[0])
        raise DomainparError(
            f"{what} must be integers written as digits (found {_field(str(values[row]))} in row {row + 1}); "
            "a float-formatted id loses digits"
        )
    # More than 20 digits is beyond 64 bits: judged by length, as Python refuses to convert huge digit strings.
    numbers = [int(text) if len(text) < 40 else (info.max + 1) for text in values]
    for row, number in enumerate(numbers):
        if not info.min <= number <= info.max:
            raise DomainparError(f"{what} must be integers in [{info.min}, {info.max}] ({dtype}) (found {_field(values[row])} in row {row + 1})")
    return np.array(numbers, dtype=dtype)


def _float_column(values: pd.Series, path: Path, column: str, dtype: str) -> np.ndarray:
    """``column`` as finite numbers of the stored ``dtype`` (checked after the conversion: 1e40 is inf in float32)."""
    if pd.api.types.is_bool_dtype(values):
        # pandas reads a column of True/False as booleans, which would pass as 1.0 and 0.0.
        raise DomainparError(f"{path}: column {column!r} must be numeric (found {shorten(_raw_column(path, column).iloc[0])} in row 1)")
    if not pd.api.types.is_numeric_dtype(values):
        numeric = pd.to_numeric(values, errors="coerce")
        bad = np.flatnonzero(numeric.isna().to_numpy() & values.notna().to_numpy())
        if bad.size:
            raise DomainparError(f"{path}: column {column!r} must be numeric (found {shorten(values.iloc[bad[0]])} in row {bad[0] + 1})")
        values = numeric
    wide = values.to_numpy(dtype=np.float64, na_value=np.nan)
    with np.errstate(over="ignore", invalid="ignore"):
        stored = wide.astype(dtype)
    bad = np.flatnonzero(~np.isfinite(stored))
    if bad.size:
        row = int(bad[0])
        if np.isfinite(wide[row]):
            limit = float(np.finfo(dtype).max)
            raise DomainparError(
                f"{path}: column {column!r} must be finite {dtype} numbers, |value| <= {limit:.4g} "
                f"(found {wide[row]:g} in row {row + 1}, which overflows to {stored[row]})"
            )
        raise DomainparError(
            f"{path}: column {column!r} must be finite numbers (found {_field(_raw_column(path, column).iloc[row])} in row {row + 1})"
        )
    return stored


#: How far (mm) a hit may lie outside the extent of its layer in the detector description. Real hits lie
#: within 3.5 mm of it (event 21000), simulated within 6 mm; anything farther is not a hit of that layer.
LAYER_MARGIN_MM = 20.0


def _validate_hits(hits: pd.DataFrame, path: Path) -> None:
    if len(hits) == 0:
        raise DomainparError(f"{path}: expected at least one hit (found an empty table)")
    hit_ids = hits["hit_id"].to_numpy()
    duplicated = hits["hit_id"].duplicated().to_numpy()
    if duplicated.any():
        row = int(np.flatnonzero(duplicated)[0])
        raise DomainparError(f"{path}: column 'hit_id' must be unique (found {hit_ids[row]} again in row {row + 1})")
    layer = layer_index_of(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy())
    unknown = layer < 0
    if unknown.any():
        row = int(np.flatnonzero(unknown)[0])
        raise DomainparError(
            f"{path}: columns 'volume_id', 'layer_id' must name a TrackML detector layer "
            f"(found ({hits['volume_id'].iloc[row]}, {hits['layer_id'].iloc[row]}) in row {row + 1})"
        )
    _validate_positions(hits, layer, path)


def _validate_positions(hits: pd.DataFrame, layer: np.ndarray, path: Path) -> None:
    """Every hit inside its layer's extent (± :data:`LAYER_MARGIN_MM`), and not all hits at one point."""
    x = hits["x"].to_numpy(np.float64)
    y = hits["y"].to_numpy(np.float64)
    z = hits["z"].to_numpy(np.float64)
    if x.size > 1 and (x == x[0]).all() and (y == y[0]).all() and (z == z[0]).all():
        raise DomainparError(
            f"{path}: columns 'x', 'y', 'z' must be hit positions on the detector (found all {x.size} hits at one point "
            f"({x[0]:g}, {y[0]:g}, {z[0]:g}))"
        )
    table = layer_table()
    r = np.hypot(x, y)
    margin = LAYER_MARGIN_MM
    r_lo, r_hi = table["r_min"].to_numpy()[layer] - margin, table["r_max"].to_numpy()[layer] + margin
    z_lo, z_hi = table["z_min"].to_numpy()[layer] - margin, table["z_max"].to_numpy()[layer] + margin
    outside = (r < r_lo) | (r > r_hi) | (z < z_lo) | (z > z_hi)
    if outside.any():
        row = int(np.flatnonzero(outside)[0])
        raise DomainparError(
            f"{path}: columns 'x', 'y', 'z' must lie on the hit's detector layer (volume {hits['volume_id'].iloc[row]}, "
            f"layer {hits['layer_id'].iloc[row]}: r in [{r_lo[row]:.0f}, {r_hi[row]:.0f}] mm, z in [{z_lo[row]:.0f}, "
            f"{z_hi[row]:.0f}] mm, {margin:g} mm margin included) (found r = {r[row]:.4g} mm, z = {z[row]:.4g} mm "
            f"in row {row + 1}; coordinates in mm?)"
        )


def _validate_truth(truth: pd.DataFrame, path: Path) -> None:
    weight = truth["weight"].to_numpy()
    negative = np.flatnonzero(weight < 0)
    if negative.size:
        row = int(negative[0])
        raise DomainparError(f"{path}: column 'weight' must be non-negative (found {weight[row]:g} in row {row + 1})")


def _in_hit_id_order(hits: pd.DataFrame) -> pd.DataFrame:
    """The hits in increasing hit_id, as TrackML writes them (then as they are: a check of ~0.1 ms).

    A file whose rows come in another order (sorted by module, merged, shuffled) is the same event, and must give the
    same graph, scores and tracks: the nodes are the hits in row order, and the track builder breaks ties by node.
    Truth and cells are joined by hit_id, so their row order never mattered.
    """
    ids = hits["hit_id"].to_numpy()
    if ids.size < 2 or bool((ids[1:] > ids[:-1]).all()):
        return hits
    return hits.iloc[np.argsort(ids, kind="stable")].reset_index(drop=True)


def _validate_cells(cells: pd.DataFrame, path: Path) -> None:
    """Cells are the only source of the cluster features: an empty table or negative charges or channels would
    train and score on features of zeros or of nonsense without a word."""
    if len(cells) == 0:
        raise DomainparError(f"{path}: expected the cells of the event's hits (found an empty table)")
    for column, what in (("ch0", "a channel number"), ("ch1", "a channel number"), ("value", "a deposited charge")):
        values = cells[column].to_numpy()
        negative = np.flatnonzero(values < 0)
        if negative.size:
            row = int(negative[0])
            raise DomainparError(f"{path}: column {column!r} must be {what}, >= 0 (found {values[row]:g} in row {row + 1})")
    if not cells["value"].to_numpy().any():
        # As degenerate as all hits at one point: every hit's charge feature 0 (a column zeroed on export).
        raise DomainparError(f"{path}: column 'value' must hold the cells' deposited charges (found 0 in every row)")
    repeated, first = _repeated_cells(cells)
    if repeated > REPEATED_CELLS_LIMIT * len(cells):
        raise DomainparError(
            f"{path}: expected each channel (ch0, ch1) of a hit once, as in TrackML's cells files to within a few in "
            f"10,000 rows (found {repeated} of {len(cells)} rows repeating one, first in row {first + 1}: rows written twice?)"
        )


#: Largest fraction of a cells file's rows that may repeat a (hit_id, ch0, ch1) of an earlier row. TrackML's own
#: files have a few (event 21000: 37 of 431,521 rows, 4 of them whole-row copies), so repeats alone are no error;
#: a file with its rows written twice (concatenated, appended to) has half, and its cell counts and charges,
#: the cluster features, would double without a word.
REPEATED_CELLS_LIMIT = 0.01


def _repeated_cells(cells: pd.DataFrame) -> tuple[int, int]:
    """(rows repeating an earlier row's (hit_id, ch0, ch1), the 0-based index of the first such row; -1 if none).

    The count is one sort of int64 keys (~10 ms for a full event's ~430k cells); the row only where it is needed,
    above :data:`REPEATED_CELLS_LIMIT`.
    """
    hit, ch0, ch1 = (cells[column].to_numpy(np.int64) for column in ("hit_id", "ch0", "ch1"))
    span = int(max(ch0.max(), ch1.max())) + 1  # channels are >= 0 (checked before)
    if (int(hit.max()) - int(hit.min()) + 1) * span * span < 2**62:
        keys = ((hit - hit.min()) * span + ch0) * span + ch1
        ordered = np.sort(keys)
        repeated = int(np.count_nonzero(ordered[1:] == ordered[:-1]))
        if repeated <= REPEATED_CELLS_LIMIT * len(cells):
            return repeated, -1
        order = np.argsort(keys, kind="stable")
        same = keys[order][1:] == keys[order][:-1]
    else:  # channel numbers too wide to pack: sort the columns themselves
        order = np.lexsort((ch1, ch0, hit))
        columns = np.stack([hit[order], ch0[order], ch1[order]])
        same = (columns[:, 1:] == columns[:, :-1]).all(axis=0)
        repeated = int(np.count_nonzero(same))
    return repeated, (int(order[1:][same].min()) if repeated else -1)


def _validate_particles(particles: pd.DataFrame, path: Path) -> None:
    ids = particles["particle_id"]
    duplicated = ids.duplicated().to_numpy()
    if duplicated.any():
        row = int(np.flatnonzero(duplicated)[0])
        raise DomainparError(f"{path}: column 'particle_id' must be unique (found {ids.iloc[row]} again in row {row + 1})")
    charge = particles["q"].to_numpy()
    bad = np.flatnonzero(np.abs(charge) > 10)
    if bad.size:
        row = int(bad[0])
        raise DomainparError(f"{path}: column 'q' must be a charge in units of e (found {charge[row]} in row {row + 1})")


def _validate_truth_particles(truth: pd.DataFrame, truth_path: Path, particles: pd.DataFrame, particles_path: Path) -> None:
    """Every particle of the truth (0 is noise) is listed in the particles file: its pT and eta come from there."""
    ids = truth["particle_id"].to_numpy()
    unknown = (ids != 0) & ~member(ids, particles["particle_id"].to_numpy())
    if unknown.any():
        row = int(np.flatnonzero(unknown)[0])
        raise DomainparError(
            f"{particles_path}: column 'particle_id' must list every particle of the truth file "
            f"(found {unique(ids[unknown]).size} missing, first {ids[row]} in {truth_path.name} row {row + 1})"
        )


def _validate_against_hits(frame: pd.DataFrame, path: Path, hits: pd.DataFrame, exact: bool) -> None:
    """Check that ``frame.hit_id`` refers to the hits and covers every hit (once, if ``exact``: the truth; at least
    once otherwise: the cells, a hit of none being a file cut short or an event's files mixed)."""
    hit_ids = hits["hit_id"].to_numpy()
    ids = frame["hit_id"].to_numpy()
    unknown = ~member(ids, hit_ids)
    if unknown.any():
        row = int(np.flatnonzero(unknown)[0])
        raise DomainparError(
            f"{path}: column 'hit_id' must match the hits file's hit_ids "
            f"(found {int(unknown.sum())} unknown, first {ids[row]} in row {row + 1})"
        )
    if not exact:
        uncovered = ~member(hit_ids, ids)
        if uncovered.any():
            raise DomainparError(
                f"{path}: column 'hit_id' must give every hit of the hits file its cells "
                f"(found {int(uncovered.sum())} hits without a cell, first hit_id {hit_ids[uncovered][0]})"
            )
        return
    duplicated = frame["hit_id"].duplicated().to_numpy()
    if duplicated.any():
        row = int(np.flatnonzero(duplicated)[0])
        raise DomainparError(f"{path}: column 'hit_id' must be unique (found {ids[row]} again in row {row + 1})")
    uncovered = ~member(hit_ids, ids)
    if uncovered.any():
        raise DomainparError(
            f"{path}: column 'hit_id' must match the hits file's hit_ids "
            f"(found {int(uncovered.sum())} hits without a truth row, first hit_id {hit_ids[uncovered][0]})"
        )


def load_event(
    prefix: str | os.PathLike, parts: Sequence[str] = PARTS, contents: Mapping[str, tuple[Path, bytes]] | None = None
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
        contents: part → (its file, the file's bytes) for parts the caller has read already (to hash them):
            those are parsed from memory, not read again.
    """
    if isinstance(parts, str):
        parts = (parts,)
    unknown = [part for part in parts if part not in PARTS]
    if unknown or not parts:
        raise DomainparError(f"parts must be a non-empty selection of {list(PARTS)} (got {list(parts)})")
    contents = contents or {}
    paths = {part: contents[part][0] if part in contents else event_file(prefix, part) for part in parts}
    frames = {part: _read_part(paths[part], part, contents[part][1] if part in contents else None) for part in parts}
    if "truth" in frames:
        _validate_truth(frames["truth"], paths["truth"])
    if "particles" in frames:
        _validate_particles(frames["particles"], paths["particles"])
    if "cells" in frames:
        _validate_cells(frames["cells"], paths["cells"])
    if "truth" in frames and "particles" in frames:
        _validate_truth_particles(frames["truth"], paths["truth"], frames["particles"], paths["particles"])
    if "hits" in frames:
        _validate_hits(frames["hits"], paths["hits"])
        frames["hits"] = _in_hit_id_order(frames["hits"])
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
        with atomic_path(target) as tmp:
            if compress:
                # The gzip header names the final file, not the random temporary one: the same event, the same bytes.
                with open(tmp, "wb") as raw, gzip.GzipFile(target.name, "wb", 1, raw, mtime=0) as zipped:
                    frame.to_csv(zipped, index=False, mode="wb")
            else:
                frame.to_csv(tmp, index=False)
            # mkstemp creates owner-only files; give event files the usual umask-based mode.
            os.chmod(tmp, 0o666 & ~_UMASK)
        # A stale file with the other extension would make the event ambiguous to readers.
        stale = Path(f"{prefix}-{part}.csv" if compress else f"{prefix}-{part}.csv.gz")
        stale.unlink(missing_ok=True)
    return prefix

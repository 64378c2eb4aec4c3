"""What a reconstruction writes for every event, and how a rerun knows an event is done.

Under ``--out`` (docs/reconstruct.md, "What it writes"): ``submissions/<event>-submission.csv``, the TrackML
submission; ``tracks/<event>-tracks.csv`` (or ``.parquet``), one row per hit of every track candidate
(:func:`tracks_table`); and ``events/<event>.json``, the event's record: the pipeline's digest, every input file
and the SHA-256 of both files above. An event is done when its record is there and names this run's pipeline and
the input files as they are now (:func:`is_done`).

Every file is written to a temporary name and renamed, the record after the two files it names, so an interrupted
event has no record and is redone; nothing here depends on timing or on how the run was split.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from domainpar.atomic import atomic_path
from domainpar.inference.spec import TRACK_FORMATS
from domainpar.tracks.layout import TrackCandidates
from domainpar.tracks.submission import submission

#: Sub-directories of ``--out`` holding per-event outputs.
SUBMISSIONS, TRACKS, RECORDS = "submissions", "tracks", "events"


def submission_path(out: Path, name: str) -> Path:
    return Path(out) / SUBMISSIONS / f"{name}-submission.csv"


def tracks_path(out: Path, name: str, fmt: str) -> Path:
    return Path(out) / TRACKS / f"{name}-tracks.{fmt}"


def record_path(out: Path, name: str) -> Path:
    return Path(out) / RECORDS / f"{name}.json"


def submission_bytes(table: pd.DataFrame) -> bytes:
    """The CSV file of a submission table (:func:`domainpar.tracks.submission.submission`: what ``domainpar score``
    and the challenge read)."""
    fast = _csv_bytes(table, floats=False)
    return fast if fast is not None else table.to_csv(index=False, lineterminator="\n").encode()


def tracks_table(candidates: TrackCandidates, graph_hit_id: np.ndarray) -> pd.DataFrame:
    """One row per hit of every candidate, candidate by candidate, each candidate's hits in order along the track
    from its innermost: ``track_id``, ``hit_order``, ``hit_id``, ``edge_score`` (of the graph edge from the
    previous hit; NaN at a first hit or where no edge joins them), the candidate's ``num_hits`` and helix fit."""
    sizes = candidates.sizes()
    track_of_row = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
    order = np.arange(candidates.hits.size, dtype=np.int64) - np.repeat(candidates.offsets[:-1], sizes)
    return pd.DataFrame({
        "track_id": track_of_row,
        "hit_order": order,
        "hit_id": np.asarray(graph_hit_id, dtype=np.int64)[candidates.hits],
        "edge_score": candidates.edge_score.astype(np.float32),
        "num_hits": sizes[track_of_row],
        "fit_chi2_ndf": candidates.fit_chi2_ndf[track_of_row],
        "fit_pt": candidates.fit_pt[track_of_row],
    })  # fmt: skip


def _float_fields(values: np.ndarray) -> tuple[list[str], np.ndarray]:
    """A float column's CSV fields as ``DataFrame.to_csv(float_format="%.7g", na_rep="")`` writes them: the distinct
    fields and, per row, which one (NaN empty).

    Each distinct value (by its bits, so -0.0 stays apart from 0.0) is formatted once: a track's fit repeats on
    every hit of the track, and pandas formats every element in Python.
    """
    bits = np.ascontiguousarray(values).view(f"u{values.dtype.itemsize}")
    _, first, inverse = np.unique(bits, return_index=True, return_inverse=True)
    fields = ["%.7g" % v if v == v else "" for v in values[first].tolist()]  # NaN != NaN
    return fields, inverse.reshape(-1).astype(np.int64)


def _as_int64(values: np.ndarray) -> np.ndarray | None:
    """An integer column as int64 (its decimal text unchanged); None for an unsigned one beyond int64's range."""
    if values.dtype.kind == "u" and values.size and int(values.max()) > np.iinfo(np.int64).max:
        return None
    return np.ascontiguousarray(values, dtype=np.int64)


def _csv_bytes(table: pd.DataFrame, floats: bool) -> bytes | None:
    """The bytes of ``table.to_csv(index=False, lineterminator="\\n")`` (with ``float_format="%.7g", na_rep=""`` when
    ``floats``) for a table of plain-named integer (and float) columns, made without pandas' per-element
    formatting (:func:`domainpar.kernels.csv_rows.csv_body`); None for any other table (the caller then asks
    pandas)."""
    from domainpar.kernels.csv_rows import INTEGER, TEXT, csv_body  # numba loads where files are written

    if not all(isinstance(name, str) and name.isidentifier() for name in table.columns):
        return None
    rows = table.shape[0]
    ints, fields, index, kinds, slots = [], [], [], [], []
    for name in table.columns:
        values = table[name].to_numpy()
        if values.dtype.kind in "iu" and (as_int := _as_int64(values)) is not None:
            kinds.append(INTEGER)
            slots.append(len(ints))
            ints.append(as_int)
        elif values.dtype.kind == "f" and floats:
            distinct, which = _float_fields(values)
            kinds.append(TEXT)
            slots.append(len(index))
            index.append(which + len(fields))
            fields += distinct
        else:
            return None
    text = "".join(fields).encode()  # ASCII: a field's characters are its bytes
    text_start = np.zeros(len(fields) + 1, dtype=np.int64)
    np.cumsum([len(field) for field in fields], out=text_start[1:])
    body = csv_body(
        np.stack(ints) if ints else np.zeros((0, rows), np.int64),
        np.frombuffer(text, dtype=np.uint8) if text else np.zeros(0, np.uint8),
        text_start,
        np.stack(index) if index else np.zeros((0, rows), np.int64),
        np.array(kinds, dtype=np.int64),
        np.array(slots, dtype=np.int64),
    )
    return (",".join(table.columns) + "\n").encode() + body.tobytes()


def tracks_bytes(table: pd.DataFrame, fmt: str) -> bytes:
    """The tracks file's bytes: CSV (scores and fits to 7 significant digits) or Parquet (float32/float64 as is)."""
    if fmt == "csv":
        fast = _csv_bytes(table, floats=True)
        return fast if fast is not None else table.to_csv(index=False, lineterminator="\n", float_format="%.7g", na_rep="").encode()
    buffer = io.BytesIO()
    table.to_parquet(buffer, index=False, engine="pyarrow", compression="zstd")
    return buffer.getvalue()


def _write(path: Path, content: bytes) -> dict:
    with atomic_path(path) as tmp:
        tmp.write_bytes(content)
    return {"file": f"{path.parent.name}/{path.name}", "bytes": len(content), "sha256": hashlib.sha256(content).hexdigest()}


@dataclass(frozen=True)
class EventOutputs:
    """An event's outputs, rendered and ready to be written (the record is completed by :func:`write_event`)."""

    name: str
    """The event's name (``event000021000``)."""
    submission: bytes
    tracks: bytes
    record: dict
    """The event's record without its outputs' digests."""


def event_counts(result, threshold: float) -> dict:
    """Hits, edges and candidates of one event through the chain (an :class:`~domainpar.inference.runner.EventResult`):
    what its record holds, the same however the run was split."""
    graph, sizes = result.event.graph, result.candidates.sizes()
    counts = {"num_hits": int(result.event.event_hit_id.size), "num_graph_nodes": int(graph.num_nodes),
              "num_edges_built": int(result.event.num_edges_built), "num_edges": int(graph.num_edges),
              "num_selected_edges": int(np.count_nonzero(result.scores > threshold)),
              "num_candidates": int(sizes.size), "num_candidates_3plus": int(np.count_nonzero(sizes >= 3)),
              "num_tracks": int(result.track_id.max()) + 1 if result.track_id.size else 0}  # fmt: skip
    return counts


def event_outputs(result, digest: str, threshold: float, fmt: str) -> EventOutputs:
    """An event's outputs rendered from its :class:`~domainpar.inference.runner.EventResult`: the submission, the
    tracks file, and the record naming the pipeline (``digest``) and the input files."""
    event = result.event
    record = {"event": event.source.name, "event_id": event.event_id, "pipeline": digest, "inputs": event.inputs,
              "data_sha256": data_digest(event.inputs), **event_counts(result, threshold)}  # fmt: skip
    return EventOutputs(
        name=event.source.name,
        submission=submission_bytes(submission(event.event_id, event.event_hit_id, result.track_id)),
        tracks=tracks_bytes(tracks_table(result.candidates, event.graph.hit_id), fmt),
        record=record,
    )


def write_event(out: Path, outputs: EventOutputs, fmt: str) -> dict:
    """Write the submission, the tracks file and, last, the record (each atomically); the record as written.

    An event is written whole or not at all: where a later file fails (a full disk, a stop), the files already
    written are removed, since a submission without its tracks file and record looks finished to whoever scores
    ``submissions/`` (a rerun redoes the event either way).
    """
    record = dict(outputs.record)
    try:
        record["outputs"] = {
            "submission": _write(submission_path(out, outputs.name), outputs.submission),
            "tracks": _write(tracks_path(out, outputs.name, fmt), outputs.tracks),
        }
        _write(record_path(out, outputs.name), (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    except BaseException:
        with contextlib.suppress(OSError):
            remove_event(out, outputs.name)
        raise
    return record


def read_record(out: Path, name: str) -> dict | None:
    """An event's record, None when it is missing or unreadable (the event is then not done)."""
    try:
        record = json.loads(record_path(out, name).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) else None


def is_done(out: Path, name: str, pipeline: str, stamp: list[dict], fmt: str) -> bool:
    """Whether an event's outputs are there, whole, made by this pipeline from the input files as they are now."""
    record = read_record(out, name)
    if record is None or record.get("pipeline") != pipeline:
        return False
    recorded = [{k: item.get(k) for k in ("file", "bytes", "mtime_ns")} for item in record.get("inputs", [])]
    if recorded != stamp:
        return False
    outputs = record.get("outputs") or {}
    for key, path in (("submission", submission_path(out, name)), ("tracks", tracks_path(out, name, fmt))):
        entry = outputs.get(key)
        if not isinstance(entry, dict) or not path.is_file() or path.stat().st_size != entry.get("bytes"):
            return False
    return True


def remove_event(out: Path, name: str) -> None:
    """Remove an event's outputs, its record first (so that nothing left names files that are gone)."""
    paths = [record_path(out, name), submission_path(out, name)] + [tracks_path(out, name, fmt) for fmt in TRACK_FORMATS]
    for path in paths:
        path.unlink(missing_ok=True)


def outputs_of(out: Path) -> list[str]:
    """Names of the events that have a record under ``out``."""
    directory = Path(out) / RECORDS
    if not directory.is_dir():
        return []
    return sorted(p.name[: -len(".json")] for p in directory.iterdir() if p.name.endswith(".json") and not p.name.startswith("."))


def write_json(path: Path, content: dict) -> None:
    """A JSON file, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(content, indent=2, sort_keys=True, default=str) + "\n")


def data_digest(inputs: list[dict]) -> str:
    """One SHA-256 over an event's input files' digests (their order fixed by the reading)."""
    return hashlib.sha256("".join(f"{item['file']}:{item['sha256']};" for item in inputs).encode()).hexdigest()


__all__ = [
    "EventOutputs",
    "event_counts",
    "event_outputs",
    "data_digest",
    "is_done",
    "outputs_of",
    "read_record",
    "record_path",
    "remove_event",
    "submission_bytes",
    "submission_path",
    "tracks_bytes",
    "tracks_path",
    "tracks_table",
    "write_event",
    "write_json",
]


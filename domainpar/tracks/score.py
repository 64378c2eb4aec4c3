"""The TrackML challenge score, with the challenge library's exact semantics.

Rules (``trackml.score.score_event`` of the challenge's own library):

* every hit carries a truth weight; noise hits (``particle_id == 0``) weigh 0;
* a track's *majority particle* is the particle contributing most of its hits; ties go to the lower particle id.
  Noise (particle 0) takes part like any other particle, so a track made mostly of noise has majority particle 0
  and scores nothing, because noise weighs 0;
* a track is *good* when MORE than half of its hits come from its majority particle and MORE than half of that
  particle's hits (counted over the whole event) are in the track — both inequalities strict;
* the score is the summed weight of the majority particle's hits in the good tracks divided by the event's total
  weight, which renormalises events whose weights do not sum to one (a subsampled event).

The implementation is vectorised (group-by over (track, particle) pairs) rather than the library's per-hit loop;
``tests/tracks/test_score.py`` checks the two agree on random submissions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from domainpar.arrays import difference, member, unique
from domainpar.errors import DomainparError

#: Columns a submission must have (``event_id`` is optional and ignored).
SUBMISSION_COLUMNS = ("hit_id", "track_id")
#: Columns the truth table must have.
TRUTH_COLUMNS = ("hit_id", "particle_id", "weight")


@dataclass(frozen=True, eq=False)
class TrackTable:
    """Per-track majority analysis of one submission; arrays of shape (T,), T = number of tracks."""

    track_id: np.ndarray
    """(T,) int64 submitted track ids, ascending."""
    nhits: np.ndarray
    """(T,) int64 hits in the track."""
    major_particle_id: np.ndarray
    """(T,) int64 majority particle (most hits, ties → lower id; 0 = noise)."""
    major_particle_nhits: np.ndarray
    """(T,) int64 hits of the majority particle in the whole event."""
    major_nhits: np.ndarray
    """(T,) int64 hits of the majority particle inside the track."""
    major_weight: np.ndarray
    """(T,) float64 weight of the majority particle's hits in the track, divided by the event's total weight."""

    @property
    def good(self) -> np.ndarray:
        """(T,) bool: the double-majority rule (both fractions strictly above one half)."""
        # Integer comparison: 2a > b is exactly a/b > 0.5, with no rounding to argue about.
        return (2 * self.major_nhits > self.nhits) & (2 * self.major_nhits > self.major_particle_nhits)

    @property
    def score(self) -> float:
        """The TrackML score of the submission."""
        return float(self.major_weight[self.good].sum())


def _integer_column(frame: pd.DataFrame, column: str, source: str) -> np.ndarray:
    """``frame[column]`` as exact int64, or a one-line error naming the first bad value and its row.

    Text columns (a submission read as text, as ``domainpar score`` does) are parsed as integer literals, never
    through float64; integer columns are taken as they are; float columns (a DataFrame built in Python) must hold
    integral values of magnitude at most 2^53, where floats are still exact.
    """
    from domainpar.data.trackml import integers_from_text

    values = frame[column]
    if pd.api.types.is_integer_dtype(values) and not pd.api.types.is_bool_dtype(values):
        array = values.to_numpy()
        if array.dtype.kind == "u" and (array > np.iinfo(np.int64).max).any():
            row = int(np.flatnonzero(array > np.iinfo(np.int64).max)[0])
            raise DomainparError(f"{source}: column {column} must be integers that fit int64 (got {array[row]} in row {row + 1})")
        return array.astype(np.int64)
    if pd.api.types.is_float_dtype(values):
        as_float = values.to_numpy(dtype=np.float64)
        for bad, found in (
            (~np.isfinite(as_float), "{}"),
            (as_float != np.round(as_float), "non-integral value {}"),
            (np.abs(as_float) > 2.0**53, "{}, beyond 2^53 where floats lose digits"),
        ):
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                raise DomainparError(f"{source}: column {column} must be integer (got {found.format(as_float[row])} in row {row + 1})")
        return as_float.astype(np.int64)
    if pd.api.types.is_bool_dtype(values):
        raise DomainparError(f"{source}: column {column} must be integer (got booleans)")
    return integers_from_text(values.astype(str), "int64", f"{source}: column {column}")


def validate_submission(submission: pd.DataFrame, truth_hit_id: np.ndarray, source: str = "submission",
                        truth_hits_only: bool = False) -> pd.DataFrame:  # fmt: skip
    """Check a submission against the event's hits; return it as int64 ``hit_id, track_id``. A valid submission
    names every hit of the event exactly once and no other hit (the challenge refused anything else).

    Args:
        submission: table with columns ``hit_id`` and ``track_id`` (``event_id`` optional, ignored).
        truth_hit_id: (N,) hit ids of the event.
        source: file or argument name used in error messages.
        truth_hits_only: keep only the rows of the truth's hits (a whole-event submission judged on the truth of a
            part of the detector); every row is still parsed and checked for duplicates first.

    Raises:
        DomainparError: missing columns, non-integer values, duplicate,
            unknown or missing hit ids.
    """
    missing = [c for c in SUBMISSION_COLUMNS if c not in submission.columns]
    if missing:
        raise DomainparError(
            f"{source}: submission must have columns {list(SUBMISSION_COLUMNS)} (missing {missing}; "
            f"found {[str(c) for c in submission.columns]})"
        )
    submission = submission.reset_index(drop=True)
    hit_id = _integer_column(submission, "hit_id", source)
    track_id = _integer_column(submission, "track_id", source)
    unique_hits, first, counts = np.unique(hit_id, return_index=True, return_counts=True)
    if (counts > 1).any():
        dup = np.flatnonzero(counts > 1)
        raise DomainparError(
            f"{source}: every hit_id must appear once (got {dup.size} duplicated hit_ids, "
            f"e.g. hit_id {int(unique_hits[dup[0]])} {int(counts[dup[0]])} times)"
        )
    truth_hit_id = np.asarray(truth_hit_id, dtype=np.int64)
    if truth_hits_only:
        keep = member(hit_id, truth_hit_id)
        hit_id, track_id = hit_id[keep], track_id[keep]
        unique_hits = unique_hits[member(unique_hits, truth_hit_id)]
    unknown = difference(unique_hits, truth_hit_id)
    if unknown.size:
        raise DomainparError(
            f"{source}: hit_ids must belong to the event (got {unknown.size} unknown hit_ids, e.g. {int(unknown[0])}; "
            "a whole-event submission judged on the truth of a part of the detector: domainpar score --truth-hits-only)"
        )
    absent = difference(truth_hit_id, unique_hits)
    if absent.size:
        raise DomainparError(
            f"{source}: submission must assign every hit of the event a track "
            f"(missing {absent.size} of {truth_hit_id.size} hits, e.g. hit_id {int(absent[0])})"
        )
    return pd.DataFrame({"hit_id": hit_id, "track_id": track_id})


def _validate_truth(truth: pd.DataFrame, source: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    missing = [c for c in TRUTH_COLUMNS if c not in truth.columns]
    if missing:
        raise DomainparError(f"{source}: truth must have columns {list(TRUTH_COLUMNS)} (missing {missing})")
    hit_id = truth["hit_id"].to_numpy(dtype=np.int64)
    particle_id = truth["particle_id"].to_numpy(dtype=np.int64)
    weight = truth["weight"].to_numpy(dtype=np.float64)
    if unique(hit_id).size != hit_id.size:
        raise DomainparError(f"{source}: truth hit_ids must be unique (got duplicates)")
    if not np.isfinite(weight).all() or (weight < 0).any():
        raise DomainparError(f"{source}: truth weights must be finite and non-negative")
    if not weight.sum() > 0:
        raise DomainparError(f"{source}: truth weights must have a positive sum (got {weight.sum()})")
    return hit_id, particle_id, weight


def analyze_tracks(
    truth: pd.DataFrame, submission: pd.DataFrame, source: str = "submission", truth_source: str = "truth",
    truth_hits_only: bool = False,
) -> TrackTable:
    """Majority particle, hit counts and weight of every submitted track.

    Args:
        truth: the event's truth with columns ``hit_id, particle_id, weight``.
        submission: ``hit_id, track_id`` covering every truth hit exactly once.
        source: name of the submission in error messages.
        truth_source: name of the truth in error messages.
        truth_hits_only: score only the rows of the truth's hits (:func:`validate_submission`).

    Returns:
        The :class:`TrackTable`, tracks in ascending ``track_id``.
    """
    hit_id, particle_id, weight = _validate_truth(truth, truth_source)
    checked = validate_submission(submission, hit_id, source, truth_hits_only)
    # Align submission rows to truth rows by hit id.
    order = np.argsort(checked["hit_id"].to_numpy())
    sub_hits = checked["hit_id"].to_numpy()[order]
    track_of_hit = checked["track_id"].to_numpy()[order][np.searchsorted(sub_hits, hit_id)]
    return _analyze_arrays(track_of_hit, particle_id, weight)


def _analyze_arrays(track_id: np.ndarray, particle_id: np.ndarray, weight: np.ndarray) -> TrackTable:
    """The vectorised core of :func:`analyze_tracks` on aligned per-hit arrays (N,)."""
    total_weight = float(weight.sum())
    particles, particle_nhits = np.unique(particle_id, return_counts=True)

    # (track, particle) groups: hit count and weight.
    pair_order = np.lexsort((particle_id, track_id))
    t_sorted = track_id[pair_order]
    p_sorted = particle_id[pair_order]
    w_sorted = weight[pair_order]
    new_pair = np.ones(t_sorted.size, dtype=bool)
    new_pair[1:] = (t_sorted[1:] != t_sorted[:-1]) | (p_sorted[1:] != p_sorted[:-1])
    starts = np.flatnonzero(new_pair)
    pair_track = t_sorted[starts]
    pair_particle = p_sorted[starts]
    pair_nhits = np.diff(np.append(starts, t_sorted.size))
    pair_weight = np.add.reduceat(w_sorted, starts) if starts.size else np.zeros(0)

    # Majority per track: most hits, ties to the lower particle id (the library
    # walks particles in ascending id and replaces the majority only on a strict excess).
    best = np.lexsort((pair_particle, -pair_nhits, pair_track))
    first_of_track = np.ones(best.size, dtype=bool)
    first_of_track[1:] = pair_track[best][1:] != pair_track[best][:-1]
    major = best[first_of_track]

    track_ids, track_nhits = np.unique(track_id, return_counts=True)
    major_particle = pair_particle[major]
    return TrackTable(
        track_id=track_ids.astype(np.int64),
        nhits=track_nhits.astype(np.int64),
        major_particle_id=major_particle.astype(np.int64),
        major_particle_nhits=particle_nhits[np.searchsorted(particles, major_particle)].astype(np.int64),
        major_nhits=pair_nhits[major].astype(np.int64),
        major_weight=(pair_weight[major] / total_weight).astype(np.float64),
    )


def check_aligned(**arrays: np.ndarray) -> None:
    """Raise unless the named arrays are one-dimensional of one length (per-hit or per-edge arrays side by side)."""
    shapes = [np.shape(a) for a in arrays.values()]
    if len(shapes[0]) != 1 or any(shape != shapes[0] for shape in shapes):
        names = list(arrays)
        raise DomainparError(
            f"{', '.join(names[:-1])} and {names[-1]} must be one-dimensional of equal length "
            f"(got shapes {', '.join(map(str, shapes))})"
        )


def score_arrays(track_id: np.ndarray, particle_id: np.ndarray, weight: np.ndarray) -> TrackTable:
    """Track table from aligned per-hit arrays (N,) — for callers that already hold them, no validation of ids."""
    track_id = np.asarray(track_id, dtype=np.int64)
    particle_id = np.asarray(particle_id, dtype=np.int64)
    weight = np.asarray(weight, dtype=np.float64)
    check_aligned(track_id=track_id, particle_id=particle_id, weight=weight)
    if not weight.sum() > 0:
        raise DomainparError(f"weight must have a positive sum (got {weight.sum()})")
    return _analyze_arrays(track_id, particle_id, weight)

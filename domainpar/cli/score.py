"""``domainpar score``: the TrackML score of a submission file against an event's truth."""

from __future__ import annotations

import re
from pathlib import Path

import click
import numpy as np
import pandas as pd

from domainpar.data.trackml import check_header, event_id_of, integers_from_text, load_event
from domainpar.errors import DomainparError, not_a_file, one_line
from domainpar.tracks.score import analyze_tracks


def read_submission(path: Path) -> pd.DataFrame:
    """Read a submission CSV (``hit_id, track_id`` and optionally ``event_id``) without judging its values."""
    if path.is_dir():
        raise DomainparError(f"{path}: expected a submission CSV file (found a directory)")
    if path.exists() and not path.is_file():
        raise DomainparError(f"{path}: expected a submission CSV file (found something that is not a regular file)")
    if not path.is_file():
        raise not_a_file(path, "submission file")
    try:
        # As text: ids are parsed exactly (never through float64) by the scorer, which names a bad field's row.
        submission = pd.read_csv(path, dtype=str, keep_default_na=False, na_filter=False)
    except pd.errors.EmptyDataError:
        raise DomainparError(f"{path}: expected a CSV table with columns hit_id, track_id (found an empty file)") from None
    except UnicodeDecodeError as exc:
        raise DomainparError(f"{path}: expected a UTF-8 CSV table with columns hit_id, track_id, found a byte that is not text (position {exc.start})") from None
    except (pd.errors.ParserError, ValueError, OSError, EOFError) as exc:
        raise DomainparError(f"{path}: expected a CSV table with columns hit_id, track_id, could not parse it ({one_line(exc)})") from None
    check_header(submission, path, ["event_id", "hit_id", "track_id"])
    return submission


def _event_prefix(path: Path) -> Path:
    """``--event`` as an event prefix; a path to one of the event's files (``event1-truth.csv.gz``) is accepted too."""
    match = re.fullmatch(r"(event[0-9]+)-(hits|cells|particles|truth)\.csv(\.gz)?", path.name)
    if match:
        return path.with_name(match.group(1))
    if path.is_dir():
        raise DomainparError(
            f"--event {path}: expected an event prefix such as {path / 'event000000001'} (found a directory)"
        )
    return path


@click.command("score", context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--event", "event_prefix", required=True, type=click.Path(path_type=Path),
    help="Event prefix with a truth file, e.g. data/event000000001 (reads event000000001-truth.csv[.gz]).",
)
@click.option(
    "--submission", "submission_path", required=True, type=click.Path(path_type=Path),
    help="CSV with columns hit_id, track_id (event_id optional): every hit of the event exactly once.",
)
@click.option(
    "--truth-hits-only", is_flag=True,
    help="Score only the submission's rows of hits the truth file holds: a whole-event submission judged on the "
         "truth of a part of the detector (the pixel truth of event 21000). Every hit of the truth must still be there.",
)
def score(event_prefix: Path, submission_path: Path, truth_hits_only: bool) -> None:
    """Score a TrackML submission against an event's truth.

    Prints a one-line summary whose last token is the TrackML score (0..1):
    the weight of hits in good tracks (more than half of the track from one
    particle, more than half of that particle in the track) over the event's
    total truth weight.
    """
    event_prefix = _event_prefix(event_prefix)
    (truth,) = load_event(event_prefix, parts=("truth",))
    submission = read_submission(submission_path)
    if "event_id" in submission.columns:
        event_id = event_id_of(event_prefix)
        # Exact integers: through float64, 1.0 would pass and ids above 2^53 could match another event.
        values = integers_from_text(submission["event_id"], "int64", f"{submission_path}: column event_id")
        wrong = np.flatnonzero(values != event_id)
        if wrong.size:
            raise DomainparError(
                f"{submission_path}: column event_id must be {event_id} for {event_prefix} "
                f"(got {submission['event_id'].astype(str).iloc[wrong[0]]!r} in row {wrong[0] + 1})"
            )
    table = analyze_tracks(truth, submission, source=str(submission_path), truth_source=str(event_prefix),
                           truth_hits_only=truth_hits_only)  # fmt: skip
    good = table.good
    click.echo(
        f"{event_prefix}: {len(truth)} hits, {table.track_id.size} tracks, {int(good.sum())} good; "
        f"TrackML score {table.score:.8f}"
    )

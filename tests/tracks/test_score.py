"""The TrackML score: hand-made cases with known answers, the challenge's loop semantics, and the CLI."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domainpar.errors import DomainparError
from domainpar.tracks.score import analyze_tracks, score_arrays

from fixtures import EVENT1 as EVENT


def score_event(truth: pd.DataFrame, submission: pd.DataFrame) -> float:
    return analyze_tracks(truth, submission).score


def _truth(particle_id, weight=None) -> pd.DataFrame:
    particle_id = np.asarray(particle_id, dtype=np.int64)
    weight = np.ones(particle_id.size) if weight is None else np.asarray(weight, dtype=np.float64)
    return pd.DataFrame({"hit_id": np.arange(1, particle_id.size + 1), "particle_id": particle_id, "weight": weight})


def _submission(track_id) -> pd.DataFrame:
    track_id = np.asarray(track_id, dtype=np.int64)
    return pd.DataFrame({"hit_id": np.arange(1, track_id.size + 1), "track_id": track_id})


def _loop_score(particle_id, weight, track_id) -> float:
    """The challenge library's algorithm, per hit: sort by (track, particle), keep running counts.

    The majority particle changes only when a later particle has strictly more
    hits, so ties stay with the lower particle id.
    """
    particle_nhits = pd.Series(particle_id).value_counts()
    total = float(np.sum(weight))
    order = np.lexsort((particle_id, track_id))
    score = 0.0
    i = 0
    n = len(order)
    while i < n:
        t = track_id[order[i]]
        j = i
        best_p, best_n, best_w = None, 0, 0.0
        while j < n and track_id[order[j]] == t:
            p = particle_id[order[j]]
            k, w = 0, 0.0
            while j < n and track_id[order[j]] == t and particle_id[order[j]] == p:
                k += 1
                w += weight[order[j]]
                j += 1
            if k > best_n:
                best_p, best_n, best_w = p, k, w
        nhits = j - i
        if best_n / nhits > 0.5 and best_n / particle_nhits[best_p] > 0.5:
            score += best_w / total
        i = j
    return score


def test_perfect_submission_scores_one():
    truth = _truth([1, 1, 1, 2, 2, 3, 0, 0], weight=[0.1, 0.2, 0.1, 0.3, 0.1, 0.2, 0.0, 0.0])
    assert score_event(truth, _submission([7, 7, 7, 8, 8, 9, 10, 10])) == pytest.approx(1.0, abs=1e-15)


def test_every_hit_alone_scores_only_single_hit_particles():
    # Particles 1 and 2 have >= 2 hits: a singleton holds at most half of them -> 0.
    truth = _truth([1, 1, 2, 2, 2])
    assert score_event(truth, _submission(np.arange(5))) == 0.0
    # A one-hit particle in its own track is a good track (1/1 > 0.5 both ways).
    truth = _truth([1, 1, 2, 2, 3], weight=[1, 1, 1, 1, 2])
    assert score_event(truth, _submission(np.arange(5))) == pytest.approx(2 / 6)


def test_track_split_in_half_scores_nothing_for_that_particle():
    # Particle 1 has 4 hits split 2 + 2: neither half holds MORE than 50% of the particle.
    truth = _truth([1, 1, 1, 1, 2, 2, 2])
    assert score_event(truth, _submission([0, 0, 1, 1, 2, 2, 2])) == pytest.approx(3 / 7)
    # Split 3 + 1: the 3-hit part is good, the 1-hit part is not.
    assert score_event(truth, _submission([0, 0, 0, 1, 2, 2, 2])) == pytest.approx(6 / 7)


def test_track_purity_must_exceed_half():
    # Track of 4 hits: 2 from particle 1 (all its hits), 2 from particle 2 -> 50% purity, not good.
    truth = _truth([1, 1, 2, 2, 2, 2])
    assert score_event(truth, _submission([0, 0, 0, 0, 1, 1])) == 0.0
    # 3 of 5 from particle 1 (all of them): good, only particle 1's hits count.
    truth = _truth([1, 1, 1, 2, 2, 3, 3, 3], weight=[1, 2, 3, 5, 5, 1, 1, 1])
    assert score_event(truth, _submission([0, 0, 0, 0, 0, 1, 1, 1])) == pytest.approx((6 + 3) / 19)


def test_ties_go_to_the_lower_particle_id():
    # Track 0 has 2 hits of particle 5 and 2 of particle 3: majority is 3 (lower id), purity 50% -> not good.
    truth = _truth([5, 5, 3, 3])
    table = analyze_tracks(truth, _submission([0, 0, 0, 0]))
    assert table.major_particle_id.tolist() == [3]
    assert table.major_nhits.tolist() == [2]
    assert table.score == 0.0
    # A three-way track with a 1-1-1 tie: majority is the lowest id whatever the row order.
    truth = _truth([9, 4, 6])
    table = analyze_tracks(truth, _submission([2, 2, 2]))
    assert table.major_particle_id.tolist() == [4]


def test_noise_can_be_the_majority_but_weighs_nothing():
    # Track 0: 3 noise hits + 2 hits of particle 1 (all of them) -> majority is noise, score 0.
    truth = _truth([0, 0, 0, 1, 1, 2, 2], weight=[0, 0, 0, 1, 1, 1, 1])
    table = analyze_tracks(truth, _submission([0, 0, 0, 0, 0, 1, 1]))
    assert table.major_particle_id.tolist() == [0, 2]
    assert table.good.tolist() == [True, True]
    assert table.score == pytest.approx(2 / 4)
    # A 2-2 tie between noise and particle 1 goes to noise, the lower id.
    truth = _truth([0, 0, 1, 1], weight=[0, 0, 1, 1])
    assert analyze_tracks(truth, _submission([0, 0, 0, 0])).major_particle_id.tolist() == [0]


def test_weights_are_renormalised_to_the_event_total():
    truth = _truth([1, 1, 2, 2], weight=[0.01, 0.01, 0.02, 0.01])
    assert score_event(truth, _submission([0, 0, 1, 2])) == pytest.approx(0.02 / 0.05)
    scaled = truth.assign(weight=truth["weight"] * 1000)
    assert score_event(scaled, _submission([0, 0, 1, 2])) == pytest.approx(0.02 / 0.05)


def test_track_ids_are_labels_only():
    truth = _truth([1, 1, 2, 2, 2])
    a = score_event(truth, _submission([0, 0, 1, 1, 1]))
    b = score_event(truth, _submission([123456789012, 123456789012, 5, 5, 5]))
    shuffled = _submission([0, 0, 1, 1, 1]).sample(frac=1.0, random_state=1)
    assert a == b == score_event(truth, shuffled) == pytest.approx(1.0)


@settings(max_examples=60, deadline=None)
@given(
    particles=st.lists(st.integers(0, 6), min_size=1, max_size=40),
    tracks_seed=st.integers(0, 2**31 - 1),
    num_tracks=st.integers(1, 12),
)
def test_agrees_with_the_challenge_loop(particles, tracks_seed, num_tracks):
    rng = np.random.default_rng(tracks_seed)
    particle_id = np.asarray(particles, dtype=np.int64)
    weight = np.where(particle_id == 0, 0.0, rng.uniform(0.1, 1.0, particle_id.size))
    if weight.sum() == 0:
        weight[0] = 1.0
    track_id = rng.integers(0, num_tracks, particle_id.size)
    expected = _loop_score(particle_id, weight, track_id)
    assert score_arrays(track_id, particle_id, weight).score == pytest.approx(expected, abs=1e-12)
    truth = pd.DataFrame({"hit_id": np.arange(particle_id.size) + 10, "particle_id": particle_id, "weight": weight})
    sub = pd.DataFrame({"hit_id": np.arange(particle_id.size) + 10, "track_id": track_id}).iloc[::-1]
    assert score_event(truth, sub) == pytest.approx(expected, abs=1e-12)


def test_real_event_truth_submission_scores_one_and_random_scores_zero():
    truth = pd.read_csv(f"{EVENT}-truth.csv.gz")
    assert truth["weight"].sum() == pytest.approx(0.0513, abs=1e-3)
    perfect = truth[["hit_id", "particle_id"]].rename(columns={"particle_id": "track_id"})
    assert score_event(truth, perfect) == pytest.approx(1.0, abs=1e-12)
    rng = np.random.default_rng(0)
    random = truth[["hit_id"]].assign(track_id=rng.integers(0, 500, len(truth)))
    assert score_event(truth, random) < 0.01
    # Every hit alone: only the particles with a single hit score.
    alone = truth[["hit_id"]].assign(track_id=np.arange(len(truth)))
    assert score_event(truth, alone) == pytest.approx(
        truth.loc[truth.groupby("particle_id")["hit_id"].transform("size") == 1, "weight"].sum()
        / truth["weight"].sum()
    )


@pytest.mark.parametrize(
    "rows, message",
    [
        ({"hit_id": [1, 2, 3]}, r"must have columns \['hit_id', 'track_id'\] \(missing \['track_id'\]"),
        ({"hit_id": [1, 2, 2, 3], "track_id": [0, 0, 0, 1]}, r"every hit_id must appear once .*hit_id 2 2 times"),
        ({"hit_id": [1, 2, 3, 99], "track_id": [0, 0, 0, 1]}, r"hit_ids must belong to the event .*e\.g\. 99"),
        ({"hit_id": [1, 2], "track_id": [0, 0]}, r"must assign every hit of the event a track \(missing 1 of 3 hits, e\.g\. hit_id 3"),
        ({"hit_id": [1, 2, 3], "track_id": [0, "x", 1]}, r"column track_id must be integers written as digits \(found 'x' in row 2\)"),
        ({"hit_id": [1, 2, 3], "track_id": [0, 1.5, 1]}, r"column track_id must be integer \(got non-integral value 1\.5 in row 2\)"),
        ({"hit_id": [1, 2, 3], "track_id": [0, None, 1]}, r"column track_id must be integer \(got nan in row 2\)"),
    ],
)
def test_malformed_submissions_are_refused(rows, message):
    with pytest.raises(DomainparError, match=message):
        score_event(_truth([1, 1, 2]), pd.DataFrame(rows))


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run ``domainpar score`` in-process through the real entry point; (exit code, stdout, stderr)."""
    from domainpar.cli.main import main

    code = 0
    try:
        main(["score", *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_prints_the_score_last_and_refuses_bad_files(tmp_path, capsys):
    truth = pd.read_csv(f"{EVENT}-truth.csv.gz")
    good = tmp_path / "good.csv"
    truth[["hit_id", "particle_id"]].rename(columns={"particle_id": "track_id"}).assign(event_id=1).to_csv(good, index=False)
    # Once through the installed entry point in a fresh interpreter, the rest in-process.
    ok = subprocess.run(
        [sys.executable, "-m", "domainpar", "score", "--event", str(EVENT), "--submission", str(good)],
        capture_output=True, text=True, timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert float(ok.stdout.split()[-1]) == pytest.approx(1.0)

    cases = {
        "dup.csv": (pd.concat([truth[["hit_id"]], truth[["hit_id"]].iloc[:1]]).assign(track_id=0), "every hit_id must appear once"),
        "missing.csv": (truth[["hit_id"]].iloc[1:].assign(track_id=0), "must assign every hit of the event a track"),
        "unknown.csv": (pd.concat([truth[["hit_id"]], pd.DataFrame({"hit_id": [10**8]})]).assign(track_id=0), "must belong to the event"),
        "nocol.csv": (truth[["hit_id"]], r"must have columns"),
        "text.csv": (truth[["hit_id"]].assign(track_id=["a"] * len(truth)), "must be integer"),
        "event.csv": (truth[["hit_id"]].assign(track_id=0, event_id=2), "column event_id must be 1"),
    }
    for name, (frame, message) in cases.items():
        path = tmp_path / name
        frame.to_csv(path, index=False)
        code, out, err = _cli(capsys, "--event", str(EVENT), "--submission", str(path))
        assert code == 2, (name, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0].replace("\\", ""), (name, lines)
    (tmp_path / "empty.csv").write_text("")
    code, _, err = _cli(capsys, "--event", str(EVENT), "--submission", str(tmp_path / "empty.csv"))
    assert code == 2 and "empty file" in err
    code, _, err = _cli(capsys, "--event", str(EVENT), "--submission", str(tmp_path / "absent.csv"))
    assert code == 2 and "submission file not found" in err
    code, _, err = _cli(capsys, "--event", str(tmp_path / "event000000007"), "--submission", str(good))
    assert code == 2 and "truth file not found" in err
    code, out, _ = _cli(capsys, "--event", str(EVENT), "--submission", str(good))
    assert code == 0 and float(out.split()[-1]) == pytest.approx(1.0)

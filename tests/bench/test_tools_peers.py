"""bench.tools.peers judges a peer's submission as evaluate judges ours; bench.tools.stage_limits counts bytes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from bench.tools.peers import judge, markdown, slice_graphs
from bench.tools.stage_limits import ByteCounter
from domainpar.data.trackml import load_event
from fixtures import EVENT1


def _submission(tmp_path, track_id: np.ndarray, hit_id: np.ndarray, extra_hits: int = 0):
    # A peer's submission covers the whole event: hits the truth does not hold are dropped by the judge.
    frame = pd.DataFrame({"event_id": 1000, "hit_id": np.concatenate([hit_id, 10**7 + np.arange(extra_hits)]),
                          "track_id": np.concatenate([track_id, np.full(extra_hits, 5)])})  # fmt: skip
    path = tmp_path / "submission.csv"
    frame.to_csv(path, index=False)
    return path


def test_a_submission_of_the_truths_particles_scores_one_and_a_shuffled_one_less(tmp_path):
    (truth,) = load_event(EVENT1, parts=("truth",))
    perfect = judge(_submission(tmp_path, truth["particle_id"].to_numpy(), truth["hit_id"].to_numpy(), 7), EVENT1)
    assert perfect["trackml_score"] > 0.9999 and perfect["tracking_efficiency"] == 1.0 and perfect["perfect_efficiency"] == 1.0
    shuffled = np.random.default_rng(0).permutation(truth["particle_id"].to_numpy())
    worse = judge(_submission(tmp_path, shuffled, truth["hit_id"].to_numpy()), EVENT1)
    assert worse["trackml_score"] < 0.1 and worse["fake_rate"] > 0.5
    text = markdown({"truth": perfect, "shuffled": worse})
    assert "| truth | 1.0000 |" in text and text.count("\n| shuffled |") == 2


def test_a_submission_missing_truth_hits_is_refused(tmp_path):
    (truth,) = load_event(EVENT1, parts=("truth",))
    path = _submission(tmp_path, truth["particle_id"].to_numpy()[1:], truth["hit_id"].to_numpy()[1:])
    try:
        judge(path, EVENT1)
    except Exception as exc:  # DomainparError: one line naming the file
        assert "1 missing" in str(exc) and str(path) in str(exc)
    else:
        raise AssertionError("a submission without every truth hit was judged")


def test_absent_slice_graphs_are_the_union_of_the_tile_graphs(tmp_path):
    (tmp_path / "graph").mkdir()
    (tmp_path / "graph" / "00.00").write_text("1 1 2\n")
    (tmp_path / "graph" / "00.01").write_text("2 1 3\n")
    assert slice_graphs(tmp_path).startswith("rebuilt")
    assert (tmp_path / "paths" / "paths1.csv").read_text() == "1 1 2\n2 1 3\n"
    assert slice_graphs(tmp_path) == "as published"


def test_bytes_are_counted_for_products_not_for_views():
    a, b = torch.ones(64, 32), torch.ones(32, 16)
    with ByteCounter() as counter:
        a.t()
        a.view(32, 64)
    assert counter.bytes == 0
    with ByteCounter() as counter:
        torch.mm(a, b)
    assert counter.bytes == (64 * 32 + 32 * 16 + 64 * 16) * 4 == counter.matmul_bytes


def test_in_place_and_out_ops_count_each_tensor_they_touch_once():
    # The filter writes its products into scratch (mm with out=) and runs SiLU in place: their bytes count, the
    # returned alias of the out= tensor not a second time.
    a, b, c = torch.ones(64, 32), torch.ones(32, 16), torch.empty(64, 16)
    with ByteCounter() as counter:
        torch.mm(a, b, out=c)
    assert counter.bytes == (64 * 32 + 32 * 16 + 64 * 16) * 4 == counter.matmul_bytes
    with ByteCounter() as counter:
        torch.nn.functional.silu(c, inplace=True)
    assert counter.bytes == 64 * 16 * 4

"""``domainpar evaluate`` end to end on the real small event: single process, 2 parts, graph inputs, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from domainpar.errors import DomainparError

from fixtures import TRACKML_DIR, copy_event1, trained_event1_checkpoint
EVENT = TRACKML_DIR / "event000000001"
HEADLINE = ("efficiency", "purity", "auc", "trackml_score", "tracking_efficiency", "fake_rate", "duplicate_rate")


@pytest.fixture(scope="module")
def event_dir(tmp_path_factory) -> Path:
    """The real labelled event alone in a directory (raw TrackML layout)."""
    return copy_event1(tmp_path_factory.mktemp("events"))


@pytest.fixture(scope="module")
def trained_checkpoint(tmp_path_factory) -> Path:
    """A small Interaction Network trained briefly on the real event, saved with the trainer's checkpoint writer."""
    return trained_event1_checkpoint(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def single_report(trained_checkpoint, event_dir):
    from domainpar.inference import EvaluateConfig, evaluate

    return evaluate(EvaluateConfig(checkpoint=trained_checkpoint, data=event_dir, progress=False))


def test_single_process_evaluation_of_the_real_event(single_report):
    summary = single_report.summary
    for key in HEADLINE + ("events",):
        assert key in summary
    (record,) = summary["events"]
    assert record["event_id"] == 1 and record["num_nodes"] == 5527
    # A briefly trained model: clearly better than chance, far from perfect.
    assert 0.9 < summary["auc"] < 1.0
    assert 0.5 < summary["efficiency"] <= 1.0 and 0.3 < summary["purity"] <= 1.0
    assert 0.0 < summary["trackml_score"] < 1.0
    # The headline score is the default builder's, each builder's score beside it.
    from domainpar.tracks.methods import DEFAULT_METHOD, METHODS

    assert summary["trackml_score"] == summary[f"trackml_score_{DEFAULT_METHOD}"]
    assert all(0.0 < summary[f"trackml_score_{method}"] < 1.0 for method in METHODS)
    assert summary["threshold"] == 0.5  # from the checkpoint's training config
    (evaluation,) = single_report.evaluations
    # Overall figures of one event are that event's figures.
    for key in HEADLINE:
        assert summary[key] == pytest.approx(record[key])
    # The submission covers every hit of the event and scores what the report says.
    from domainpar.data.trackml import load_event
    from domainpar.tracks.score import analyze_tracks

    (truth,) = load_event(EVENT, parts=("truth",))  # float32 weights, as the evaluation reads them
    assert len(evaluation.submission) == len(truth)
    assert analyze_tracks(truth, evaluation.submission).score == pytest.approx(record["trackml_score"], abs=1e-12)


def test_the_edge_figures_a_target_is_stated_in(single_report):
    """Edge efficiency of the true edges of particles above pt_min at the working point, and the best edge
    efficiency of any cut of purity >= 0.90, recomputed from the event's own scores and truth."""
    from domainpar.tracks.efficiency import efficiency_at_purity

    summary, (evaluation,) = single_report.summary, single_report.evaluations
    graph = evaluation.graph
    target = (graph.y > 0.5) & (graph.particle_pt[graph.edge_index[0]] > 1.0)
    assert 100 < target.sum() < (graph.y > 0.5).sum()  # the small event has edges of particles on both sides of 1 GeV
    assert summary["efficiency_pt1"] == pytest.approx((evaluation.scores[target] > summary["threshold"]).mean(), abs=1e-12)
    best, purity, cut = efficiency_at_purity(evaluation.scores, graph.y, 0.90)
    kept = evaluation.scores >= summary["cut_at_purity90"]
    assert (summary["efficiency_at_purity90"], summary["purity_at_purity90"], summary["cut_at_purity90"]) == (best, purity, cut)
    assert summary["purity_at_purity90"] == pytest.approx((graph.y[kept] > 0.5).mean(), abs=1e-12)
    assert summary["purity_at_purity90"] >= 0.90 and summary["efficiency_at_purity90"] > 0.5
    assert summary["efficiency_at_purity90"] == pytest.approx((graph.y[kept] > 0.5).sum() / (graph.y > 0.5).sum(), abs=1e-12)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.distributed
def test_two_parts_give_the_single_process_logits_and_figures(trained_checkpoint, event_dir, single_report):
    from domainpar.inference import EvaluateConfig, evaluate

    # Geometric (phi x eta) parts always cut tracks; METIS may find a zero cut on this sparse subsampled event.
    report = evaluate(
        EvaluateConfig(checkpoint=trained_checkpoint, data=event_dir, num_parts=2, method="geometric", progress=False)
    )
    partitioned, single = report.summary, single_report.summary
    assert partitioned["num_parts"] == 2 and partitioned["method"] == "geometric"
    assert partitioned["events"][0]["num_cut_edges"] > 0  # the event really was split, with halo
    assert partitioned["events"][0]["num_halo_nodes"] > 0
    logits_parts = report.evaluations[0].logits
    logits_single = single_report.evaluations[0].logits
    assert np.isfinite(logits_parts).all()
    # Same function of the same inputs; only the float summation order differs.
    assert np.max(np.abs(logits_parts - logits_single)) <= 1e-5 * max(1.0, np.max(np.abs(logits_single)))
    for key in HEADLINE:
        assert partitioned[key] == pytest.approx(single[key], rel=1e-9, abs=1e-12), key
    for key in ("num_predicted_edges", "num_true_positive_edges", "num_tracks", "num_candidates", "num_matched"):
        assert partitioned["events"][0][key] == single["events"][0][key], key
    assert np.array_equal(report.evaluations[0].track_id, single_report.evaluations[0].track_id)


@pytest.fixture(scope="module")
def graph_dir(single_report, tmp_path_factory) -> Path:
    """The real event's graph as written by `domainpar build` (no hit weights inside)."""
    from domainpar.data.event_graph import save_graph

    directory = tmp_path_factory.mktemp("graphs")
    save_graph(single_report.evaluations[0].graph, directory / "event000000001.npz")
    return directory


def test_cli_writes_json_plots_and_submissions(trained_checkpoint, event_dir, graph_dir, single_report, tmp_path, capsys):
    from domainpar.cli.main import main

    out_json = tmp_path / "eval.json"
    main([
        "evaluate", "--checkpoint", str(trained_checkpoint), "--data", str(graph_dir), "--events", str(event_dir),
        "--tracks", "components",
        "--json", str(out_json), "--plots", str(tmp_path / "plots"), "--submissions", str(tmp_path / "subs"), "--quiet",
    ])  # fmt: skip
    printed = capsys.readouterr().out
    written = json.loads(out_json.read_text())
    assert written["track_method"] == "components"
    assert written["trackml_score"] == pytest.approx(single_report.summary["trackml_score_components"], abs=1e-12)
    # Edge figures do not depend on the track building; track figures do.
    for key in ("efficiency", "purity", "auc"):
        assert written[key] == pytest.approx(single_report.summary[key], abs=1e-12), key
    assert set(HEADLINE) <= set(written) and written["events"][0]["event_id"] == 1
    assert [line.split()[0] for line in printed.splitlines()[1:4]] == ["event", "1", "all"]
    for name in ("roc.png", "efficiency_purity_vs_pt.png", "efficiency_purity_vs_eta.png", "event_display_1.png"):
        assert (tmp_path / "plots" / name).stat().st_size > 10_000
    # The written submission scores the same through `domainpar score`.
    submission = tmp_path / "subs" / "event000000001-submission.csv"
    main(["score", "--event", str(event_dir / "event000000001"), "--submission", str(submission)])
    assert float(capsys.readouterr().out.split()[-1]) == pytest.approx(written["trackml_score"], abs=1e-7)


def test_graph_input_with_raw_truth_gives_the_same_figures(trained_checkpoint, event_dir, graph_dir, single_report):
    from domainpar.inference import EvaluateConfig, evaluate

    with_truth = evaluate(
        EvaluateConfig(checkpoint=trained_checkpoint, data=graph_dir, events_dir=event_dir, progress=False)
    ).summary
    for key in HEADLINE:
        assert with_truth[key] == pytest.approx(single_report.summary[key], abs=1e-12), key
    # Without the raw event there are no hit weights: no TrackML score, but everything else.
    without = evaluate(EvaluateConfig(checkpoint=trained_checkpoint, data=graph_dir, progress=False)).summary
    assert without["trackml_score"] is None
    assert without["auc"] == pytest.approx(single_report.summary["auc"], abs=1e-12)
    assert without["tracking_efficiency"] is not None


def test_evaluate_errors(trained_checkpoint, event_dir, tmp_path, capsys):
    from domainpar.cli.main import main
    from domainpar.inference import EvaluateConfig, evaluate, load_model

    with pytest.raises(DomainparError, match=r"checkpoint file not found"):
        load_model(tmp_path / "absent.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(DomainparError, match=r"junk.pt: expected a domainpar checkpoint, could not load it"):
        load_model(tmp_path / "junk.pt")
    torch.save({"weights": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(DomainparError, match=r"expected a domainpar checkpoint dict with a format_version entry \(got keys \['weights'\]\)"):
        load_model(tmp_path / "other.pt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DomainparError, match=r"expected raw TrackML events .* or graph files \(\*\.npz, or PyG \*\.pyg / \*\.pt\), found neither"):
        evaluate(EvaluateConfig(checkpoint=trained_checkpoint, data=tmp_path / "empty", progress=False))
    with pytest.raises(DomainparError, match=r"--threshold: expected a probability in \(0, 1\), got 1.5"):
        EvaluateConfig(checkpoint=trained_checkpoint, data=event_dir, threshold=1.5)
    with pytest.raises(DomainparError, match=r"--method: expected one of metis, geometric, got 'sectors'"):
        EvaluateConfig(checkpoint=trained_checkpoint, data=event_dir, method="sectors")
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--checkpoint", str(trained_checkpoint), "--data", str(event_dir), "--ranks", "2", "--parts", "3"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --ranks must equal --parts: one process per part (got --ranks 2, --parts 3)"]

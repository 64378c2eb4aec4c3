"""One chain, one rule: every command treats an event as the checkpoint's records say.

* the track builder and the threshold a checkpoint records are those evaluate and reconstruct use (an option
  overrides them only when given);
* graph files pruned by the recorded edge filter run without ``--filter`` in both commands, and raw events that
  need the filter are refused by both, with the same line, before anything is written;
* a pipeline mistake gets the same one line from both commands (one place checks them);
* a recipe's defaults are the package's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from fixtures import copy_event1, pruned_recipe_run, trained_event1_checkpoint

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def events(tmp_path_factory) -> Path:
    return copy_event1(tmp_path_factory.mktemp("events"))


@pytest.fixture(scope="module")
def walk_checkpoint(tmp_path_factory) -> Path:
    """A checkpoint whose training recorded the walk-through builder and a threshold of 0.4."""
    return trained_event1_checkpoint(tmp_path_factory.mktemp("walk"), **{"run.track_method": "walk", "run.threshold": 0.4})


@pytest.fixture(scope="module")
def pruned_run(tmp_path_factory) -> dict[str, Path]:
    return pruned_recipe_run(tmp_path_factory.mktemp("pruned"))


def _cli(args: list) -> tuple[int, str]:
    import contextlib
    import io

    from domainpar.cli.main import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            return int(exc.code or 0), err.getvalue()
    return 0, err.getvalue()


def test_the_recorded_builder_and_threshold_decide_in_both_commands(walk_checkpoint, events, tmp_path):
    from domainpar.inference import EvaluateConfig, evaluate

    report = evaluate(EvaluateConfig(checkpoint=walk_checkpoint, data=events, progress=False))
    assert report.summary["track_method"] == "walk" and report.summary["threshold"] == 0.4
    assert report.summary["trackml_score"] == report.summary["trackml_score_walk"]
    overridden = evaluate(EvaluateConfig(checkpoint=walk_checkpoint, data=events, track_method="ckf", threshold=0.5,
                                         progress=False)).summary  # fmt: skip
    assert overridden["track_method"] == "ckf" and overridden["threshold"] == 0.5
    assert _cli(["reconstruct", "--data", events, "--out", tmp_path / "out", "--checkpoint", walk_checkpoint, "--prefetch", "0",
                 "--quiet"])[0] == 0  # fmt: skip
    manifest = json.loads((tmp_path / "out" / "reconstruct.json").read_text())["pipeline"]
    assert manifest["tracks"]["method"] == "walk" and manifest["threshold"] == 0.4
    # The very tracks evaluate built: the same submission.
    written = (tmp_path / "out" / "submissions" / "event000000001-submission.csv").read_text()
    (evaluation,) = report.evaluations
    assert written.splitlines()[1:] == [f"1,{h},{t}" for h, t in zip(evaluation.submission["hit_id"], evaluation.submission["track_id"])]
    # Exported, the pipeline's sidecar carries the record: the deployed model builds its tracks the same way.
    assert _cli(["build", "--input", events, "--out", tmp_path / "graphs", "--workers", "1", "--quiet"])[0] == 0
    exported = tmp_path / "export" / "model.pt"
    assert _cli(["export", "--checkpoint", walk_checkpoint, "--format", "torchscript", "--out", exported, "--graphs",
                 tmp_path / "graphs"])[0] == 0  # fmt: skip
    deployed = evaluate(EvaluateConfig(model=exported, data=events, progress=False)).summary
    assert deployed["track_method"] == "walk" and deployed["threshold"] == 0.4


def test_the_recorded_builder_settings_decide_in_both_commands_and_the_deployed_model(events, tmp_path):
    """The builder's other settings a checkpoint records (``run.track_settings``, a recipe's ``tracks.settings``) are
    the ones evaluate, reconstruct and the exported model build tracks with."""
    from domainpar.export.sidecar import sidecar_path
    from domainpar.inference import EvaluateConfig, evaluate

    settings = {"min_hits": 7, "first_pass_hits": 7}
    plain = evaluate(EvaluateConfig(checkpoint=trained_event1_checkpoint(tmp_path / "plain"), data=events, progress=False))
    checkpoint = trained_event1_checkpoint(tmp_path / "long", **{"run.track_settings": settings})
    report = evaluate(EvaluateConfig(checkpoint=checkpoint, data=events, progress=False))
    (evaluation,) = report.evaluations
    lengths = evaluation.submission.groupby("track_id").size()
    assert lengths[lengths > 1].min() >= 7 and report.summary["trackml_score"] != plain.summary["trackml_score"]
    code, err = _cli(["reconstruct", "--data", events, "--out", tmp_path / "out", "--checkpoint", checkpoint, "--quiet"])
    assert code == 0, err
    manifest = json.loads((tmp_path / "out" / "reconstruct.json").read_text())["pipeline"]
    assert (manifest["tracks"]["min_hits"], manifest["tracks"]["first_pass_hits"]) == (7, 7)
    written = (tmp_path / "out" / "submissions" / "event000000001-submission.csv").read_text()
    assert written.splitlines()[1:] == [f"1,{h},{t}" for h, t in zip(evaluation.submission["hit_id"], evaluation.submission["track_id"])]
    assert _cli(["build", "--input", events, "--out", tmp_path / "graphs", "--workers", "1", "--quiet"])[0] == 0
    exported = tmp_path / "export" / "model.pt"
    assert _cli(["export", "--checkpoint", checkpoint, "--format", "torchscript", "--out", exported, "--graphs",
                 tmp_path / "graphs"])[0] == 0  # fmt: skip
    assert json.loads(sidecar_path(exported).read_text())["tracks"]["settings"] == settings
    deployed = evaluate(EvaluateConfig(model=exported, data=events, progress=False)).summary
    assert deployed["trackml_score"] == report.summary["trackml_score"]


def test_pruned_graph_files_need_no_filter_and_raw_events_need_it_in_both_commands(pruned_run, tmp_path):
    """The checkpoint records the filter its training graphs were pruned with: graph files pruned by it are the
    model's input as they are, raw events must be pruned by it (so --filter must name it)."""
    from domainpar.inference import EvaluateConfig, evaluate

    checkpoint, filtered = pruned_run["checkpoint"], pruned_run["root"] / "filtered"
    report = evaluate(EvaluateConfig(checkpoint=checkpoint, data=filtered, events_dir=pruned_run["events"], progress=False))
    code, err = _cli(["reconstruct", "--data", filtered, "--out", tmp_path / "graphs", "--checkpoint", checkpoint,
                      "--prefetch", "0", "--quiet"])  # fmt: skip
    assert code == 0, err
    written = (tmp_path / "graphs" / "submissions" / "event000000001-submission.csv").read_text().splitlines()[1:]
    (evaluation,) = report.evaluations
    assert written == [f"1,{h},{t}" for h, t in zip(evaluation.submission["hit_id"], evaluation.submission["track_id"])]
    # Raw events without the filter: both commands refuse with the same line, and reconstruct leaves no --out.
    lines = {}
    for command, extra in (("evaluate", []), ("reconstruct", ["--out", tmp_path / "raw"])):
        code, err = _cli([command, "--data", pruned_run["events"], "--checkpoint", checkpoint, "--quiet", *extra])
        assert code == 2, err
        lines[command] = err.strip().splitlines()
    assert lines["evaluate"] == lines["reconstruct"] and len(lines["evaluate"]) == 1
    assert "was trained on graphs pruned by edge filter" in lines["evaluate"][0] and "--filter" in lines["evaluate"][0]
    assert not (tmp_path / "raw").exists()


@pytest.mark.parametrize(
    "options, named",
    [
        ([], "give exactly one of --checkpoint"),
        (["--checkpoint", "{ckpt}", "--model", "{ckpt}"], "give exactly one of --checkpoint"),
        (["--model", "{model}", "--parts", "2"], "--parts: expected 1 with --model"),
        (["--model", "{model}", "--filter", "{filter}"], "an exported model (--model) runs the edge filter"),
        (["--checkpoint", "{ckpt}", "--timeout", "1e9"], "--timeout"),
        (["--checkpoint", "{ckpt}", "--tracks", "best"], "--tracks"),
        (["--checkpoint", "{ckpt}", "--threshold", "1"], "--threshold"),
        (["--checkpoint", "{ckpt}", "--method", "sectors"], "--method"),
        (["--checkpoint", "{walk}", "--filter", "{filter}"], "--filter"),
    ],
)  # fmt: skip
def test_a_pipeline_mistake_is_the_same_line_in_both_commands(options, named, walk_checkpoint, pruned_run, events, tmp_path):
    paths = {"ckpt": pruned_run["checkpoint"], "walk": walk_checkpoint, "filter": pruned_run["filter"],
             "model": tmp_path / "model.onnx"}  # fmt: skip
    options = [o.format(**{k: str(v) for k, v in paths.items()}) for o in options]
    lines = {}
    for command, extra in (("evaluate", []), ("reconstruct", ["--out", tmp_path / "out"])):
        code, err = _cli([command, "--data", events, "--quiet", *options, *extra])
        assert code == 2, (command, err)
        # click names the command in its lines (and in its advice): the same words otherwise.
        lines[command] = err.strip().replace(f"domainpar {command}", "domainpar <command>").splitlines()
    assert lines["evaluate"] == lines["reconstruct"], lines
    assert len(lines["evaluate"]) == 1 and named in lines["evaluate"][0], lines
    assert not (tmp_path / "out").exists()


def test_a_recipes_defaults_are_the_packages():
    """A recipe that leaves a setting out runs with what every command uses when it is left out."""
    from domainpar.inference.spec import PipelineSpec
    from domainpar.pipeline.recipe import EvaluationSection, TracksSection, recipe_from_dict
    from domainpar.tracks.config import TrackConfig
    from domainpar.train.config import RunConfig

    tracks, evaluation, spec = TracksSection(), EvaluationSection(), PipelineSpec(checkpoint=Path("m.pt"))
    assert (tracks.method, tracks.threshold) == (TrackConfig().method, TrackConfig().threshold)
    assert (tracks.method, tracks.threshold) == (RunConfig().track_method, RunConfig().threshold)
    assert (evaluation.parts, evaluation.method) == (spec.num_parts, spec.method)
    # What a recipe's tracks section says is what its trained checkpoint records.
    recipe = recipe_from_dict({"name": "r", "tracks": {"method": "walk", "threshold": 0.3, "settings": {"window": 8}}}, source="r.yaml")
    assert (recipe.train.run.track_method, recipe.train.run.threshold, recipe.train.run.track_settings) == ("walk", 0.3, {"window": 8})
    assert recipe_from_dict(recipe.to_dict(), source="again") == recipe


@pytest.mark.timeout(900)
def test_reconstruct_then_score_is_evaluate_on_the_real_full_pixel_event(tmp_path):
    """The full-occupancy real pixel event 21000 (66,114 hits, truth recovered): reconstruct without its truth, then
    `domainpar score`, gives evaluate's TrackML score to the last digit, and the very same submission."""
    import shutil

    from domainpar.cli.score import read_submission
    from domainpar.data.trackml import load_event
    from domainpar.inference import EvaluateConfig, evaluate
    from domainpar.tracks.score import analyze_tracks
    from fixtures import SHARED_TRACKML

    prefix = SHARED_TRACKML / "pixel" / "event000021000"
    if not Path(f"{prefix}-truth.csv.gz").is_file():
        pytest.skip(f"the real labelled pixel event is not here ({prefix})")
    checkpoint = trained_event1_checkpoint(tmp_path / "model")
    report = evaluate(EvaluateConfig(checkpoint=checkpoint, data=prefix.parent, progress=False))
    truth_free = tmp_path / "events"
    truth_free.mkdir()
    for part in ("hits", "cells"):
        shutil.copy(f"{prefix}-{part}.csv.gz", truth_free)
    code, err = _cli(["reconstruct", "--data", truth_free, "--out", tmp_path / "out", "--checkpoint", checkpoint, "--quiet"])
    assert code == 0, err
    submission_file = tmp_path / "out" / "submissions" / "event000021000-submission.csv"
    (truth,) = load_event(prefix, parts=("truth",))
    assert analyze_tracks(truth, read_submission(submission_file)).score == report.summary["trackml_score"]
    (evaluation,) = report.evaluations
    written = pd.read_csv(submission_file)
    assert written["hit_id"].tolist() == evaluation.submission["hit_id"].tolist()
    assert written["track_id"].tolist() == evaluation.submission["track_id"].tolist()
    assert report.summary["events"][0]["num_nodes"] == 66114


def test_where_particles_are_lost_is_the_same_from_every_input(pruned_run):
    """``evaluate --losses`` finds each particle's first lost stage from the raw event (built, then pruned here) and
    from the pruned graph file (its graph rebuilt from the raw event) alike, and the figures evaluate gives without
    it are untouched."""
    import numpy as np

    from domainpar.errors import DomainparError
    from domainpar.inference import EvaluateConfig, evaluate
    from domainpar.tracks.losses import FILTER

    checkpoint, root, events = pruned_run["checkpoint"], pruned_run["root"], pruned_run["events"]
    routes = {
        "raw": {"data": events, "edge_filter": pruned_run["filter"]},
        "pruned file": {"data": root / "filtered", "events_dir": events},
    }
    reports = {name: evaluate(EvaluateConfig(checkpoint=checkpoint, losses=True, progress=False, **route))
               for name, route in routes.items()}  # fmt: skip
    plain = evaluate(EvaluateConfig(checkpoint=checkpoint, progress=False, **routes["pruned file"])).summary
    assert "losses_vs_pt" not in plain
    summary = reports["pruned file"].summary
    for key, value in plain.items():
        if key not in ("events", "data", "seconds_inference", "seconds_tracks_max", "seconds_tracks_compiling"):
            assert summary[key] == value, key
    first = reports["raw"].evaluations[0].losses
    for name, report in reports.items():
        losses = report.evaluations[0].losses
        assert np.array_equal(losses.particle_id, first.particle_id), name
        assert np.array_equal(losses.chain_lost, first.chain_lost) and np.array_equal(losses.stage, first.stage), name
    # The filter keeps ~60 % of the edges: it breaks chains the construction had built.
    assert (first.chain_lost == FILTER).any()
    table = summary["losses_vs_pt"]
    assert table["count"][-1] == summary["events"][0]["num_reconstructable"]
    assert table["tracking_efficiency"][-1] == summary["tracking_efficiency"]
    # A pruned file alone cannot tell the construction's losses from the filter's.
    with pytest.raises(DomainparError, match="give its raw event"):
        evaluate(EvaluateConfig(checkpoint=checkpoint, data=root / "filtered", losses=True, progress=False))


def test_a_threshold_the_track_builder_does_not_cut_on_is_refused_by_reconstruct(pruned_run, walk_checkpoint, tmp_path):
    """ckf (the default) seeds and extends on its own cuts: a --threshold gave the same tracks at any value while
    the run recorded it. reconstruct refuses it in one line, before --out exists; with an edge-only builder (the
    recorded one, or --tracks) the threshold is the cut, and it is taken."""
    from domainpar.inference.pipeline import load_pipeline
    from domainpar.inference.reconstruct import check_threshold_is_read
    from domainpar.inference.spec import ReconstructConfig

    checkpoint, filtered = pruned_run["checkpoint"], pruned_run["root"] / "filtered"
    code, err = _cli(["reconstruct", "--data", filtered, "--out", tmp_path / "ckf", "--checkpoint", checkpoint,
                      "--threshold", "0.9", "--quiet"])  # fmt: skip
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith("error: --threshold 0.9: the ckf track builder does not cut on it (it seeds and extends on "), line
    assert "--tracks components or walk" in line
    assert not (tmp_path / "ckf").exists()
    for options in ({"checkpoint": walk_checkpoint, "threshold": 0.9},
                    {"checkpoint": checkpoint, "threshold": 0.9, "track_method": "components"},
                    {"checkpoint": checkpoint}):  # fmt: skip
        config = ReconstructConfig(data=filtered, out=tmp_path / "ok", **options)
        check_threshold_is_read(config, load_pipeline(config))

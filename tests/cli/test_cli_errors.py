"""Every CLI command on bad input: one ``error:`` line, exit 2, no traceback, nothing left behind.

These are regression tests for mistakes a user makes on the command line
(an output path that is a file, an unwritable location, a corrupted
checkpoint, a malformed submission ...). They run the commands in-process
through :func:`domainpar.cli.main.main` on tiny hand-made inputs; one test runs
``python -m domainpar`` in a subprocess to check the real entry point.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fixtures import TRACKML_DIR, tiny_graph

from domainpar.cli.checks import max_local_ranks
from domainpar.cli.main import main
from domainpar.errors import DomainparError
from domainpar.output_paths import check_output_dir, check_output_file


def run_cli(capsys, *argv: str) -> str:
    """Run ``domainpar argv`` in-process; assert exit 2 with one ``error:`` line on stderr and return it."""
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in argv])
    captured = capsys.readouterr()
    # A progress bar may have started before the error (tqdm writes "\r"-separated updates to stderr).
    lines = [line for line in captured.err.replace("\r", "\n").splitlines() if line.strip() and "%|" not in line]
    assert info.value.code == 2, captured.err
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "Traceback" not in captured.err
    return lines[0]


@pytest.fixture
def graph_file(tmp_path: Path) -> Path:
    return tiny_graph(tmp_path / "graphs" / "event000000007.npz")


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "a_file"
    path.write_text("not a directory\n")
    return path


def leftovers(directory: Path) -> list[str]:
    """Temporary files an interrupted atomic write would leave (``.<name>.tmp-*``)."""
    return sorted(p.name for p in directory.rglob(".*.tmp-*"))


# ----------------------------------------------------------------------------- output paths


def test_output_paths_reject_wrong_kind_and_unwritable(tmp_path, a_file, monkeypatch):
    with pytest.raises(DomainparError, match=r"--out .*a_file: expected a directory \(found an existing file\)"):
        check_output_dir(a_file, "--out")
    with pytest.raises(DomainparError, match=r"--out .*a_file/sub: .*a_file must be a directory \(found a file\)"):
        check_output_dir(a_file / "sub", "--out")
    with pytest.raises(DomainparError, match=r"--json .*: expected a file path \(found an existing directory\)"):
        check_output_file(tmp_path, "--json")
    with pytest.raises(DomainparError, match=r"--plot .*x.jpg: must end in .png \(got .jpg\)"):
        check_output_file(tmp_path / "x.jpg", "--plot", suffix=".png")
    # The checks create nothing.
    check_output_dir(tmp_path / "new" / "deeper", "--out")
    check_output_file(tmp_path / "new2" / "report.json", "--json")
    assert not (tmp_path / "new").exists() and not (tmp_path / "new2").exists()

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    # Root ignores permission bits, so simulate a read-only location instead of chmod.
    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    with pytest.raises(DomainparError, match=r"--out .*: expected a writable location, cannot create files in .* \(Permission denied\)"):
        check_output_dir(tmp_path / "ro", "--out")


def test_simulate_bad_arguments(tmp_path, a_file, capsys):
    line = run_cli(capsys, "simulate", "--out", tmp_path / "ev", "--events", "0")
    assert line == ("error: domainpar simulate: Invalid value for '--events': 0 is not in the range 1<=x<=999999999 "
                    "(see 'domainpar simulate --help')")  # fmt: skip
    line = run_cli(capsys, "simulate", "--out", tmp_path / "ev", "--events", "1", "--first-event-id", "-5")
    assert "Invalid value for '--first-event-id': -5 is not in the range 0<=x<=999999999" in line
    line = run_cli(capsys, "simulate", "--out", tmp_path / "ev", "--events", "10", "--first-event-id", "999999995")
    assert "--first-event-id 999999995 with --events 10 must end at event 999999999 at most (got 1000000004" in line
    line = run_cli(capsys, "simulate", "--out", tmp_path / "ev", "--events", "2", "--workers", "0")
    assert f"Invalid value for '--workers': 0 is not in the range 1<=x<={max_local_ranks()}" in line
    line = run_cli(capsys, "simulate", "--out", a_file / "ev", "--events", "1", "--particles", "5")
    assert "--out" in line and "must be a directory" in line
    assert not (tmp_path / "ev").exists()


def test_build_checks_outputs_before_work(tmp_path, a_file, capsys):
    events = TRACKML_DIR
    line = run_cli(capsys, "build", "--input", events, "--out", tmp_path / "g", "--json", a_file / "b.json")
    assert line.startswith("error: --json") and "must be a directory" in line
    assert not (tmp_path / "g").exists()  # no graph was built before the report path was refused


def test_build_min_pt_without_truth_names_option_and_leaves_nothing(tmp_path, capsys):
    import shutil

    events = tmp_path / "events"
    events.mkdir()
    shutil.copy(TRACKML_DIR / "event000000001-hits.csv.gz", events)
    line = run_cli(capsys, "build", "--input", events, "--out", tmp_path / "g", "--min-pt", "1")
    assert line == (
        f"error: {events / 'event000000001'}: --min-pt 1 keeps hits by truth pT, so it needs the event's truth file (found none)"
    )
    assert not (tmp_path / "g").exists()  # the output directory used to be created before the first event failed


def test_partition_refuses_two_graphs_of_one_event(tmp_path, graph_file, capsys):
    (graph_file.parent / "copy.npz").write_bytes(graph_file.read_bytes())
    line = run_cli(capsys, "partition", "--graph", graph_file.parent, "--parts", "2", "--out", tmp_path / "p")
    assert "expected one graph file per event (found event 7 in both copy.npz and event000000007.npz)" in line
    assert not (tmp_path / "p").exists()


def test_partition_output_paths(tmp_path, graph_file, a_file, capsys):
    assert "--out" in run_cli(capsys, "partition", "--graph", graph_file, "--parts", "2", "--out", a_file)
    line = run_cli(capsys, "partition", "--graph", graph_file, "--parts", "2", "--out", tmp_path / "p", "--json", tmp_path)
    assert "--json" in line and "found an existing directory" in line
    line = run_cli(capsys, "partition", "--graph", graph_file, "--parts", "2", "--out", tmp_path / "p", "--plot", tmp_path / "x.jpg")
    assert "--plot" in line and "must end in .png" in line
    line = run_cli(capsys, "partition", "--graph", graph_file, "--parts", "100000", "--out", tmp_path / "p")
    assert str(graph_file) in line and "at most the number of nodes" in line
    assert not (tmp_path / "p").exists()
    assert leftovers(tmp_path) == []


def test_partition_directory_writes_json_and_plans(tmp_path, graph_file, capsys):
    main(["partition", "--graph", str(graph_file.parent), "--parts", "2", "--out", str(tmp_path / "plans"),
          "--json", str(tmp_path / "report.json")])  # fmt: skip
    import json

    records = json.loads((tmp_path / "report.json").read_text())
    assert [r["event_id"] for r in records] == [7]
    for key in ("num_parts", "method", "edge_cut_fraction", "halo_fraction", "imbalance_edges", "imbalance_nodes",
                "halo_nodes", "bytes_per_step", "seconds"):  # fmt: skip
        assert key in records[0]
    assert (tmp_path / "plans" / "event000000007" / "manifest.json").is_file()


# ----------------------------------------------------------------------------- train


def test_train_refuses_bad_graphs_before_writing_anything(tmp_path, graph_file, a_file, capsys):
    tiny = ["--mode", "single", "--hidden", "4", "--iterations", "1", "--epochs", "1", "--no-progress"]
    corrupted = tmp_path / "bad"
    corrupted.mkdir()
    (corrupted / "event000000001.npz").write_bytes(graph_file.read_bytes()[:300])
    line = run_cli(capsys, "train", "--data", corrupted, "--out", tmp_path / "run1", *tiny)
    assert "event000000001.npz: expected a domainpar graph file (.npz), could not read it (File is not a zip file)" in line
    assert not (tmp_path / "run1").exists()  # used to leave a config.yaml behind

    unlabelled = tiny_graph(tmp_path / "unlabelled" / "event000000001.npz", labels=False)
    line = run_cli(capsys, "train", "--data", graph_file.parent, "--val", unlabelled.parent, "--out", tmp_path / "run2", *tiny)
    assert "need graphs with truth labels" in line and "unlabelled" in line
    assert not (tmp_path / "run2").exists()

    line = run_cli(capsys, "train", "--data", graph_file.parent, "--out", a_file, *tiny)
    assert line == f"error: --out {a_file}: expected a directory (found an existing file)"


def with_cell_features(source: Path, target: Path) -> Path:
    """A copy of a graph file with two extra node-feature columns (as `build --cell-features` makes)."""
    with np.load(source, allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}
    arrays["x"] = np.concatenate([arrays["x"], np.ones((arrays["x"].shape[0], 2), np.float32)], axis=1)
    if "node_features" in arrays:
        arrays["node_features"] = np.concatenate([arrays["node_features"], np.array(["cell_count", "cell_charge"])])
    target.parent.mkdir(parents=True, exist_ok=True)
    np.savez(target, **arrays)
    return target


def test_train_refuses_mixed_feature_widths_before_writing(tmp_path, graph_file, capsys):
    cells = with_cell_features(graph_file, tmp_path / "cells" / "event000000008.npz")
    line = run_cli(capsys, "train", "--data", cells.parent, "--val", graph_file.parent, "--mode", "single",
                   "--hidden", "4", "--iterations", "1", "--epochs", "1", "--out", tmp_path / "run")  # fmt: skip
    assert line == (f"error: --val graph {graph_file}: x must have 5 columns like the training graph {cells} "
                    "(got 3; graphs built with other --node-features/--edge-features?)")
    assert not (tmp_path / "run").exists()  # used to train a step and leave config.yaml and steps.jsonl


def test_evaluate_names_the_graph_whose_features_do_not_fit(tmp_path, graph_file, capsys):
    checkpoint = tiny_checkpoint(tmp_path / "model.pt")
    cells = with_cell_features(graph_file, tmp_path / "cells" / "event000000007.npz")
    line = run_cli(capsys, "evaluate", "--checkpoint", checkpoint, "--data", cells.parent, "--quiet")
    assert line.startswith(f"error: {cells}: graph has 5 node features but the checkpoint's model expects 3")


def test_train_refuses_plans_of_another_part_count_before_writing(tmp_path, graph_file, capsys):
    main(["partition", "--graph", str(graph_file.parent), "--parts", "3", "--out", str(tmp_path / "plans")])
    capsys.readouterr()
    line = run_cli(
        capsys, "train", "--data", graph_file.parent, "--plans", tmp_path / "plans", "--mode", "domain", "--ranks", "2",
        "--hidden", "4", "--iterations", "1", "--epochs", "1", "--out", tmp_path / "run",
    )  # fmt: skip
    assert "has 3 parts, but a domain group has 2 ranks (--domain-size, world size 2); partition with --parts 2" in line
    assert not (tmp_path / "run").exists()  # used to fail inside the ranks after writing config.yaml


# ----------------------------------------------------------------------------- evaluate and checkpoints


@pytest.mark.parametrize("content", [b"junk\n", b"PK\x03\x04" + b"\0" * 100, bytes(range(256))])
def test_evaluate_unreadable_checkpoint_is_one_line(tmp_path, graph_file, capsys, content):
    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(content)
    line = run_cli(capsys, "evaluate", "--checkpoint", checkpoint, "--data", graph_file.parent)
    assert line.startswith(f"error: {checkpoint}: expected a domainpar checkpoint, could not load it (")


def test_resume_from_unreadable_checkpoint(tmp_path, graph_file, capsys):
    from domainpar.train.checkpoint import load_checkpoint

    path = tmp_path / "step-00000001.pt"
    path.write_text("junk\n")
    with pytest.raises(DomainparError, match=r"step-00000001.pt: expected a domainpar checkpoint, could not load it \(not a torch file\); delete it"):
        load_checkpoint(path)


def test_evaluate_bad_options_and_outputs(tmp_path, graph_file, a_file, capsys):
    checkpoint = tmp_path / "missing.pt"
    assert "Invalid value for '--timeout': 0.0 is not in the range (0, 2592000]: seconds, at most 30 days" in run_cli(
        capsys, "evaluate", "--checkpoint", checkpoint, "--data", graph_file.parent, "--timeout", "0"
    )
    assert "Invalid value for '--timeout': 'inf' is not a finite number" in run_cli(
        capsys, "evaluate", "--checkpoint", checkpoint, "--data", graph_file.parent, "--timeout", "inf"
    )
    line = run_cli(capsys, "evaluate", "--checkpoint", checkpoint, "--data", graph_file.parent, "--plots", a_file)
    assert line == f"error: --plots {a_file}: expected a directory (found an existing file)"


def tiny_checkpoint(path: Path) -> Path:
    """A ``model.pt``-style checkpoint of an untrained 4-wide network (no training needed)."""
    import torch

    from domainpar.model.config import ModelConfig
    from domainpar.model.registry import build_model
    from domainpar.train.checkpoint import CHECKPOINT_FORMAT_VERSION, write_checkpoint

    model_config = ModelConfig(hidden=4, num_iterations=1)
    torch.manual_seed(0)
    model = build_model(model_config)
    state = {"format_version": CHECKPOINT_FORMAT_VERSION, "model": model.state_dict(), "model_config": model_config.to_dict()}
    write_checkpoint(state, path)
    return path


def test_evaluate_refuses_repeated_events_and_missing_events_dir(tmp_path, graph_file, capsys):
    checkpoint = tiny_checkpoint(tmp_path / "model.pt")
    (graph_file.parent / "copy.npz").write_bytes(graph_file.read_bytes())
    line = run_cli(capsys, "evaluate", "--checkpoint", checkpoint, "--data", graph_file.parent, "--quiet",
                   "--submissions", tmp_path / "subs")  # fmt: skip
    assert "expected one graph file per event (found event 7 in both copy.npz and event000000007.npz)" in line
    assert not (tmp_path / "subs").exists()
    (graph_file.parent / "copy.npz").unlink()
    line = run_cli(capsys, "evaluate", "--checkpoint", checkpoint, "--data", graph_file.parent, "--quiet",
                   "--events", tmp_path / "nowhere")  # fmt: skip
    assert line == f"error: --events {tmp_path / 'nowhere'}: expected a directory of raw TrackML events (found none)"


# ----------------------------------------------------------------------------- score


@pytest.fixture
def tiny_event(tmp_path: Path) -> Path:
    """Truth of a 6-hit event: two particles of three hits each."""
    truth = pd.DataFrame(
        {
            "hit_id": np.arange(1, 7), "particle_id": [11, 11, 11, 22, 22, 22],
            "tx": 0.0, "ty": 0.0, "tz": 0.0, "tpx": 1.0, "tpy": 0.0, "tpz": 0.0, "weight": 1.0 / 6,
        }
    )  # fmt: skip
    truth.to_csv(tmp_path / "event000000005-truth.csv", index=False)
    return tmp_path / "event000000005"


def test_score_messages_are_one_line(tmp_path, tiny_event, capsys):
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("hit_id,track_id\n1,2\n3,4,5,6\n")
    line = run_cli(capsys, "score", "--event", tiny_event, "--submission", ragged)
    assert "could not parse it (Error tokenizing data." in line  # pandas' message has a newline in it

    wrong_event = tmp_path / "wrong_event.csv"
    pd.DataFrame({"event_id": 9, "hit_id": np.arange(1, 7), "track_id": [1, 1, 1, 2, 2, 2]}).to_csv(wrong_event, index=False)
    line = run_cli(capsys, "score", "--event", tiny_event, "--submission", wrong_event)
    assert line.endswith("column event_id must be 5 for " + str(tiny_event) + " (got '9' in row 1)")

    line = run_cli(capsys, "score", "--event", tmp_path, "--submission", wrong_event)
    assert line == f"error: --event {tmp_path}: expected an event prefix such as {tmp_path / 'event000000001'} (found a directory)"


def test_score_accepts_a_truth_file_as_event(tmp_path, tiny_event, capsys):
    perfect = tmp_path / "perfect.csv"
    pd.DataFrame({"hit_id": np.arange(1, 7), "track_id": [1, 1, 1, 2, 2, 2]}).to_csv(perfect, index=False)
    main(["score", "--event", str(tiny_event) + "-truth.csv", "--submission", str(perfect)])
    assert capsys.readouterr().out.split()[-1] == "1.00000000"


def test_score_truth_hits_only_judges_a_whole_event_submission_on_a_parts_truth(tmp_path, tiny_event, capsys):
    """A whole-event submission (hits 1-6 of the truth and 7-9 of the detector's other part, one track crossing both)
    against the part's truth: refused with a pointer to --truth-hits-only; with it, scored on the part's rows alone
    (as the part's own submission scores), still refusing a truth hit that is missing or a duplicated row."""
    whole = tmp_path / "whole.csv"
    pd.DataFrame({"hit_id": np.arange(1, 10), "track_id": [1, 1, 1, 2, 2, 5, 2, 2, 2]}).to_csv(whole, index=False)
    part = tmp_path / "part.csv"
    pd.DataFrame({"hit_id": np.arange(1, 7), "track_id": [1, 1, 1, 2, 2, 5]}).to_csv(part, index=False)
    line = run_cli(capsys, "score", "--event", tiny_event, "--submission", whole)
    assert line.endswith("hit_ids must belong to the event (got 3 unknown hit_ids, e.g. 7; a whole-event submission "
                         "judged on the truth of a part of the detector: domainpar score --truth-hits-only)"), line  # fmt: skip
    main(["score", "--event", str(tiny_event), "--submission", str(part)])
    expected = capsys.readouterr().out.split()[-1]
    main(["score", "--event", str(tiny_event), "--submission", str(whole), "--truth-hits-only"])
    assert capsys.readouterr().out.split()[-1] == expected == f"{5 / 6:.8f}"
    short = tmp_path / "short.csv"
    pd.DataFrame({"hit_id": [1, 2, 3, 4, 5, 7], "track_id": 1}).to_csv(short, index=False)
    assert "submission must assign every hit of the event a track" in run_cli(
        capsys, "score", "--event", tiny_event, "--submission", short, "--truth-hits-only")
    twice = tmp_path / "twice.csv"
    pd.DataFrame({"hit_id": [*range(1, 10), 8], "track_id": 1}).to_csv(twice, index=False)
    assert "every hit_id must appear once" in run_cli(capsys, "score", "--event", tiny_event, "--submission", twice, "--truth-hits-only")


# ----------------------------------------------------------------------------- demo and the real entry point


def test_demo_refuses_a_file_as_out(a_file, capsys):
    assert run_cli(capsys, "demo", "--out", a_file) == f"error: --out {a_file}: expected a directory (found an existing file)"


def test_entry_point_prints_one_line_without_traceback(tmp_path, graph_file, a_file):
    result = subprocess.run(
        [sys.executable, "-m", "domainpar", "partition", "--graph", str(graph_file), "--parts", "2", "--out", str(a_file)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == f"error: --out {a_file}: expected a directory (found an existing file)"


def test_evaluate_good_input_writes_the_documented_json(tmp_path, graph_file, capsys):
    import json

    checkpoint = tiny_checkpoint(tmp_path / "model.pt")
    main(["evaluate", "--checkpoint", str(checkpoint), "--data", str(graph_file.parent), "--quiet",
          "--json", str(tmp_path / "out" / "eval.json")])  # fmt: skip
    summary = json.loads((tmp_path / "out" / "eval.json").read_text())
    for key in ("efficiency", "purity", "auc", "trackml_score", "tracking_efficiency", "fake_rate", "duplicate_rate", "events"):
        assert key in summary
    assert [r["event_id"] for r in summary["events"]] == [7]
    assert leftovers(tmp_path) == []


def test_an_out_that_is_a_symbolic_link_is_written_through(tmp_path, graph_file, capsys):
    """A link to a directory gets the plans inside its target; a link to a file gets the file replaced; both stay links."""
    target = tmp_path / "scratch" / "plans"
    target.mkdir(parents=True)
    (tmp_path / "plans").symlink_to(target)
    report = tmp_path / "scratch" / "report.json"
    report.write_text("old")
    (tmp_path / "report.json").symlink_to(report)
    main(["partition", "--graph", str(graph_file), "--parts", "2", "--out", str(tmp_path / "plans"),
          "--json", str(tmp_path / "report.json")])  # fmt: skip
    capsys.readouterr()
    assert (tmp_path / "plans").is_symlink() and (target / "manifest.json").is_file()
    assert (tmp_path / "report.json").is_symlink() and report.read_text().startswith("{")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["graphs", "plans", "report.json", "scratch"]
    assert leftovers(tmp_path / "scratch") == []

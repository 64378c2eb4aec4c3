"""``evaluate --write-scores DIR``: every event's graph, in the format it was read, with its per-edge scores and a
record of what produced them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from domainpar.data.graph_files import load_graph
from domainpar.data.pyg_files import read_pyg_object
from domainpar.inference.scores import NPZ_RECORD, NPZ_SCORES, PYG_RECORD, PYG_SCORES
from fixtures import TRACKML_DIR, copy_event1


def read_scores(path) -> tuple[np.ndarray, dict]:
    """(E,) float32 scores and their record from a file written by ``evaluate --write-scores``."""
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as npz:
            return npz[NPZ_SCORES], json.loads(str(npz[NPZ_RECORD]))
    data = read_pyg_object(path)
    return data[PYG_SCORES].numpy(), json.loads(data[PYG_RECORD])


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from domainpar.model.config import ModelConfig
    from domainpar.model.registry import build_model, check_config
    from domainpar.train.checkpoint import CHECKPOINT_FORMAT_VERSION, write_checkpoint

    config = check_config(ModelConfig(hidden=8, num_iterations=2))
    torch.manual_seed(0)
    state = {"format_version": CHECKPOINT_FORMAT_VERSION, "step": 7, "model": build_model(config).state_dict(),
             "model_config": config.to_dict()}  # fmt: skip
    path = tmp_path_factory.mktemp("run") / "model.pt"
    write_checkpoint(state, path)
    return path


@pytest.mark.parametrize("fmt", ["raw", "npz", "pyg"])
def test_scores_are_written_back_in_the_format_read(checkpoint, fmt, tmp_path, capsys):
    from domainpar.cli.main import main

    (tmp_path / "events").mkdir()
    events = copy_event1(tmp_path / "events")
    data = events
    if fmt != "raw":
        main(["build", "--input", str(events), "--out", str(tmp_path / "graphs"), "--format", fmt, "--quiet"])
        data = tmp_path / "graphs"
    out = tmp_path / "scores"
    main(["evaluate", "--checkpoint", str(checkpoint), "--data", str(data), "--write-scores", str(out), "--quiet",
          "--json", str(tmp_path / "eval.json")])  # fmt: skip
    name = "event000000001.pyg" if fmt == "pyg" else "event000000001.npz"
    assert sorted(p.name for p in out.iterdir()) == [name]
    scores, record = read_scores(out / name)
    graph = load_graph(out / name)
    assert scores.shape == (graph.num_edges,) and scores.dtype == np.float32 and ((scores > 0) & (scores < 1)).all()
    assert record["checkpoint_step"] == 7 and record["producer"] == "domainpar evaluate" and record["threshold"] == 0.5
    assert record["checkpoint_sha256"] == torch.load(checkpoint, weights_only=True)["sha256"]
    assert record["input"].endswith("event000000001" if fmt == "raw" else name)
    # The scores are the evaluation's: its per-event edge count and the efficiency they give.
    summary = json.loads((tmp_path / "eval.json").read_text())
    assert summary["events"][0]["num_edges"] == graph.num_edges
    predicted = (scores > 0.5) & (graph.y > 0.5)
    assert abs(predicted.sum() / max((graph.y > 0.5).sum(), 1) - summary["efficiency"]) < 1e-9
    if fmt == "pyg":
        # The file's own Data, every attribute kept, plus the scores: what acorn's next stage reads.
        original, written = read_pyg_object(data / name), read_pyg_object(out / name)
        assert set(original.keys()) < set(written.keys())
        assert torch.equal(original["edge_index"], written["edge_index"])
        assert "edge_scores" in written.keys() and json.loads(written["edge_scores_record"])["threshold"] == 0.5


def test_write_scores_refuses_the_data_directory(checkpoint, tmp_path, capsys):
    from domainpar.cli.main import main

    main(["build", "--input", str(TRACKML_DIR), "--out", str(tmp_path / "graphs"), "--quiet"])
    with pytest.raises(SystemExit) as info:
        main(["evaluate", "--checkpoint", str(checkpoint), "--data", str(tmp_path / "graphs"), "--write-scores",
              str(tmp_path / "graphs"), "--quiet"])  # fmt: skip
    assert info.value.code == 2
    assert "--write-scores" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "graphs").iterdir()) == ["event000000001.npz"]

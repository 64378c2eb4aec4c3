"""bench.tools.score_losses splits 1 - score among the particles that carry it, by pT, origin and stage."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.tools.score_losses import main, particle_weights, tables
from domainpar.data.trackml import load_event
from fixtures import EVENT1


def test_the_lost_weights_add_up_to_one_minus_the_score_on_a_hand_made_event():
    # Particle 1 (prompt, 0.15 GeV) found whole; particle 2 (displaced 10 mm, 0.4 GeV) split 2 + 2: no track holds
    # more than half of it; particle 3 (prompt, 2 GeV) found with 3 of its 4 hits; one noise hit (weight 0).
    truth = pd.DataFrame({"hit_id": np.arange(1, 14), "particle_id": [1] * 4 + [2] * 4 + [3] * 4 + [0],
                          "weight": [0.1] * 4 + [0.05] * 4 + [0.1] * 4 + [0.0]})  # fmt: skip
    particles = pd.DataFrame({"particle_id": [1, 2, 3], "vx": [0.0, 10.0, 0.1], "vy": [0.0, 0.0, 0.0],
                              "px": [0.15, 0.4, 2.0], "py": [0.0, 0.0, 0.0]})  # fmt: skip
    submission = pd.DataFrame({"hit_id": truth["hit_id"], "track_id": [7] * 4 + [8, 8, 9, 9] + [10, 10, 10, 11, 12]})
    weights = particle_weights(truth, particles, submission, "submission")
    assert weights["origin"].to_dict() == {1: "prompt", 2: "displaced", 3: "prompt"}
    np.testing.assert_allclose(weights["lost"].to_numpy(), [0.0, 0.2, 0.1])
    result = tables(weights)
    np.testing.assert_allclose([result["score"], result["lost"]], [0.7, 0.3])
    assert result["by_pt"]["displaced"]["0.3-0.5"] == {"particles": 1, "weight": 0.2, "lost": 0.2}
    assert set(result["by_pt"]["prompt"]) == {"0.1-0.2", ">1"}


def test_the_command_prints_the_table_and_refuses_a_submission_short_of_hits(tmp_path, capsys):
    (truth,) = load_event(EVENT1, parts=("truth",))
    path = tmp_path / "submission.csv"
    pd.DataFrame({"hit_id": truth["hit_id"], "track_id": truth["particle_id"]}).to_csv(path, index=False)
    assert main(["--truth", str(EVENT1), "--submission", str(path), "--json", str(tmp_path / "out.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("TrackML score 1.0000, lost 0.0000") and "| prompt |" in out
    pd.DataFrame({"hit_id": truth["hit_id"][1:], "track_id": truth["particle_id"][1:]}).to_csv(path, index=False)
    assert main(["--truth", str(EVENT1), "--submission", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(path) in err and err.count("\n") == 1
    assert main(["--truth", str(EVENT1), "--submission", str(path), "--scores", str(path)]) == 2
    assert "give both" in capsys.readouterr().err


def test_graph_cuts_measures_a_wider_skip_margin_and_refuses_a_bad_variant(capsys):
    from bench.tools.graph_cuts import main as graph_cuts, measure
    from domainpar.data.graph import GraphConfig
    from domainpar.inference.events import read_raw_event
    from domainpar.inference.sources import list_sources

    events = [read_raw_event(source, False, True) for source in list_sources(EVENT1.parent, truth=True)
              if source.name == EVENT1.name]  # fmt: skip
    narrow, wide = measure(GraphConfig(), events), measure(GraphConfig(skip_dphi_margin=0.05), events)
    assert wide["edges_per_event"] > narrow["edges_per_event"]
    assert wide["true_segments_built"] >= narrow["true_segments_built"]
    assert all(w <= n for w, n in zip(wide["broken_by_pt"], narrow["broken_by_pt"]) if n is not None)
    assert graph_cuts(["--checkpoint", "absent.pt", "--data", str(EVENT1.parent), "--variant", "x={not json"]) == 2
    assert "--variant x={not json: expected NAME=JSON" in capsys.readouterr().err


def test_graph_cuts_starts_from_a_recipe_graph_and_measures_the_helix(tmp_path, capsys):
    import json
    import shutil

    from bench.tools.graph_cuts import main as graph_cuts, recipe_build
    from domainpar.data.graph import GraphConfig

    for path in EVENT1.parent.glob(EVENT1.name + "-*"):
        shutil.copy(path, tmp_path)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("graph:\n  phi_slope_max: 0.002\n  dphi_margin: 0.005\n")
    assert recipe_build(recipe) == GraphConfig(phi_slope_max=0.002, dphi_margin=0.005)
    out = tmp_path / "cuts.json"
    assert graph_cuts(["--recipe", str(recipe), "--data", str(tmp_path), "--variant", 'helix={"trajectory": "helix"}',
                       "--json", str(out)]) == 0  # fmt: skip
    results = json.loads(out.read_text())["results"]
    assert set(results) == {"recorded", "helix"}
    assert results["helix"]["edges_per_event"] != results["recorded"]["edges_per_event"]
    assert "helix: " in capsys.readouterr().out
    recipe.write_text("graph:\n  trajectory: curve\n")
    assert graph_cuts(["--recipe", str(recipe), "--data", str(tmp_path)]) == 2
    assert "GraphConfig.trajectory must be one of" in capsys.readouterr().err

"""A smoke run of the full_event bench sections: the full-event recipe end to end, shrunk to minutes.

The full section trains the recipe on 16 simulated full events (≈ 45 minutes on
2 cores); here the same code runs on 3 + 1 small simulated events, a tiny model
trained domain-parallel on 2 ranks, partitioned evaluation on 2 parts, the
pixel-only held-out events, the real event 1 (final check and, standing in for
the full event 21000, the truth-free comparison), and the sectors comparison
with 2 sectors. The test checks what the sections promise: ``model.pt``,
``filter.pt``, ``eval.json`` with every figure of every evaluated set, plots,
a table with every figure, the truth-free table, and the sectors comparison's
figures with their error bars.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from bench.sections import full_event, full_event_sectors
from domainpar.inference.model_io import load_model
from domainpar.pipeline.recipe import load_recipe

from fixtures import EVENT1

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


def _tiny(recipe):
    recipe = recipe.scaled(train_events=3, val_events=1, epochs=1, particles=300, filter_steps=20)
    return replace(
        recipe,
        filter=replace(recipe.filter, holdout_every=3, negative_fraction=0.5),
        # No curves.png (nothing here reads it): rank 0 of each training (halo and sectors) would import pyplot
        # and draw it, ~2.5 s a run.
        train=recipe.train.replace(**{"model.hidden": 8, "model.num_iterations": 1, "run.curves": False}),
    )


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "full_event"
    section = full_event.run(out, overrides=_tiny, unlabelled=[EVENT1])
    sectors = full_event_sectors.run(out, overrides=_tiny, counts=(2,))
    return out, section, sectors


def _is_fraction(value) -> bool:
    return isinstance(value, float) and 0.0 <= value <= 1.0 and not math.isnan(value)


@pytest.mark.timeout(900)
def test_outputs_are_where_the_section_says(smoke):
    out, section, _ = smoke
    assert load_model(out / "model.pt").model.config.hidden == 8
    assert (out / "filter.pt").is_file()
    result = json.loads((out / "eval.json").read_text())
    assert set(result["evaluate"]) == {"simulated", "simulated_pixel", "real"}
    for label, figures in result["evaluate"].items():
        assert figures["num_parts"] == 2  # partitioned evaluation (halo exchange)
        for key, *_ in full_event.FIGURES:
            assert key in figures, (label, key)
        assert figures["seconds_tracks_max"] >= 0
        for name in ("roc.png", "efficiency_purity_vs_pt.png", "efficiency_purity_vs_eta.png"):
            assert (out / "plots" / label / name).stat().st_size > 0
    assert result["recipe"]["parallel"]["mode"] == "domain" and result["train"]["steps"] == 3
    assert set(result["unlabelled"]) == {"real", "real_pixel"}
    for figures in result["unlabelled"].values():
        assert figures["events"][0]["event_id"] == 1 and _is_fraction(figures["filter_pass_fraction"])


@pytest.mark.timeout(900)
def test_table_holds_every_figure(smoke):
    _, section, _ = smoke
    assert section.name == "full_event" and section.skipped is None
    assert [row["key"] for row in section.rows] == [key for key, *_ in full_event.FIGURES]
    for row in section.rows:
        if row["key"] == "seconds_tracks_max":
            continue
        for column in ("simulated", "simulated_pixel", "real"):
            assert row[column] is None or _is_fraction(row[column]), row
    assert "| share of edges the filter keeps |" in section.markdown_extra
    assert any("CPU" in note for note in section.notes) and any("load average" in note.lower() for note in section.notes)


@pytest.mark.timeout(900)
def test_sectors_comparison_reports_the_gap_with_its_error(smoke):
    out, _, sectors = smoke
    assert sectors.skipped is None and [row["model"] for row in sectors.rows] == ["2 sectors", "2 sectors"]
    result = json.loads((out / "sectors.json").read_text())
    entry = result["sectors"]["2"]
    assert entry["train"]["steps"] == result["settings"]["steps"] == 3  # same steps as the halo model
    for mode in ("whole", "sector_inference"):
        for split in ("crossing", "not_crossing"):
            figures = entry[mode][split]
            assert figures["particles"] >= 0 and set(figures["gap"]) == {"gap", "error"}
    assert (out / "sectors" / "2" / "model.pt").is_file()


def test_sections_are_registered():
    from bench import sections

    assert sections.ORDER.index("full_event") < sections.ORDER.index("full_event_sectors")
    assert sections.devices("full_event") == ("cpu", "cuda")
    # The same run on the pixel detector: its own section, its own recipe file (on the full-event one).
    pixel = sections.load("pixel_event")
    assert "pixel_event" in sections.ORDER and sections.devices("pixel_event") == ("cpu", "cuda")
    assert pixel.RECIPE.name == "pixel_event.yaml" and load_recipe(pixel.RECIPE).graph.volumes == (7, 8, 9)


@pytest.mark.timeout(900)
def test_raw_events_evaluate_as_the_recipe_did(smoke, tmp_path):
    """`domainpar evaluate --checkpoint model.pt --filter filter.pt --data RAW --parts 2` rebuilds the recipe's graph
    (cuts, triplet features) from what the checkpoint records and prunes it with the filter: same figures as the run."""
    from domainpar.inference import EvaluateConfig, evaluate

    from fixtures import copy_event1

    out, _, _ = smoke
    raw = copy_event1(tmp_path)
    report = evaluate(
        EvaluateConfig(checkpoint=out / "model.pt", edge_filter=out / "filter.pt", data=raw, num_parts=2, method="geometric", progress=False)
    )
    recorded = json.loads((out / "eval.json").read_text())["evaluate"]["real"]
    for key in ("auc", "efficiency", "purity", "trackml_score", "tracking_efficiency", "fake_rate"):
        assert report.summary[key] == pytest.approx(recorded[key], abs=1e-9), key
    assert report.summary["events"][0]["num_edges"] == recorded["events"][0]["num_edges"]

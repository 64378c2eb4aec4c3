"""The physics recipe file: it loads, validates, and every mistake is one line naming the file and the key."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from domainpar.data.graph import GraphConfig
from domainpar.errors import DomainparError
from domainpar.pipeline.recipe import load_recipe, packaged_recipe_path, recipe_from_dict

from fixtures import REPO

RECIPE = REPO / "examples" / "physics.yaml"


def test_recipe_loads_and_names_everything_it_trains_from():
    recipe = load_recipe(RECIPE)
    assert recipe.name == "physics"
    sim = recipe.simulation
    assert sim.train_events >= 2 and sim.val_events >= 1 and sim.particles >= 10 and sim.seed != sim.val_seed
    assert isinstance(recipe.graph, GraphConfig) and recipe.graph.needs_cells
    assert recipe.filter is not None and 0 < recipe.filter.efficiency <= 1
    assert recipe.train.model.hidden >= 1 and recipe.train.run.epochs >= 1
    # One working point for training metrics, evaluation and track building.
    assert recipe.train.run.threshold == recipe.tracks.threshold
    # The YAML round trip is lossless.
    assert recipe_from_dict(recipe.to_dict(), source="round trip") == recipe


def test_packaged_recipe_is_the_example():
    """`domainpar demo` runs the packaged copy; it must be the file users read in examples/."""
    assert packaged_recipe_path("physics").read_text() == RECIPE.read_text()


def test_scaled_recipe_keeps_everything_but_the_sizes():
    recipe = load_recipe(RECIPE)
    small = recipe.scaled(train_events=3, val_events=1, epochs=2, particles=300)
    assert (small.simulation.train_events, small.simulation.val_events, small.simulation.particles) == (3, 1, 300)
    assert small.train.run.epochs == 2
    assert small.graph == recipe.graph and small.filter == recipe.filter and small.train.model == recipe.train.model
    fewer = recipe.scaled(train_events=3, val_events=1, filter_steps=7)
    assert fewer.filter.steps == 7 and replace(fewer.filter, steps=recipe.filter.steps) == recipe.filter


def test_a_scaled_recipe_keeps_a_warmup_shorter_than_its_run():
    """domainpar train refuses a warm-up of the whole run: a smoke-sized recipe keeps its share (rounded down)."""
    recipe = load_recipe(RECIPE)
    assert recipe.train.optim.warmup == 20 and recipe.train.run.epochs * recipe.simulation.train_events == 600
    assert recipe.scaled(train_events=6, val_events=1, epochs=12).train.optim.warmup == 20  # the demo's 72 steps
    assert recipe.scaled(train_events=3, val_events=1, epochs=1).train.optim.warmup == 0
    assert recipe.scaled(train_events=20, val_events=1, epochs=1).train.optim.warmup == 0  # 20 of 600 -> 0 of 20
    assert recipe.scaled(train_events=21, val_events=1, epochs=1).train.optim.warmup == 20  # shorter than 21 steps


def _write(tmp_path: Path, change) -> Path:
    nested = yaml.safe_load(RECIPE.read_text())
    change(nested)
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(nested))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(datasets={}), "unknown sections ['datasets']"),
        (lambda d: d["simulation"].update(events=3), "unknown simulation settings ['events']"),
        (lambda d: d["simulation"].update(train_events=1), "simulation.train_events must be an integer of at least 2"),
        (lambda d: d["simulation"].update(val_seed=d["simulation"]["seed"]), "simulation.val_seed must differ"),
        (lambda d: d["graph"].update(node_features=["r", "rho"]), "unknown node features ['rho']"),
        (lambda d: d["graph"].update(phi_slope_max=-1.0), "GraphConfig.phi_slope_max must be a positive finite number"),
        (lambda d: d["filter"].update(efficiency=1.5), "filter.efficiency is out of range"),
        (lambda d: d["filter"].update(node_features="r"), "filter.node_features must be a list of distinct feature names"),
        (lambda d: d["filter"].update(node_features=["r", "pixel_depth"]), "filter.node_features ['pixel_depth'] are not in graph"),
        (lambda d: d["filter"].update(edge_features=["dphi", "eta"]), "filter.edge_features ['eta'] are not in graph"),
        (lambda d: d["model"].update(hiden=3), "unknown config key 'model.hiden'"),
        (lambda d: d["optim"].update(lr="fast"), "optim.lr must be a number"),
        (lambda d: d["tracks"].update(method="hough"), "tracks.method must be one of"),
        (lambda d: d["tracks"].update(threshold=1.0), "tracks.threshold must be a number in (0, 1)"),
        (lambda d: d["tracks"].update(settings={"windw": 8}), "tracks.settings: unknown track builder settings ['windw']"),
        (lambda d: d["tracks"].update(settings={"window": 2}), "tracks.settings: tracks.window: expected an integer >= 3"),
        (lambda d: d["tracks"].update(settings=[8]), "tracks.settings: expected a mapping of track builder settings"),
        (lambda d: d["run"].update(track_settings={"ms": -1}), "run.track_settings must hold track builder settings"),
        (lambda d: d.update(data={"train": "x"}), "unknown sections ['data']"),
    ],
)
def test_mistakes_are_one_line_naming_the_file(tmp_path, change, message):
    path = _write(tmp_path, change)
    with pytest.raises(DomainparError) as caught:
        load_recipe(path)
    text = str(caught.value)
    assert message in text and str(path) in text and "\n" not in text


def test_missing_or_malformed_file(tmp_path):
    with pytest.raises(DomainparError, match="recipe file not found"):
        load_recipe(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("simulation: [unclosed\n")
    with pytest.raises(DomainparError, match="expected a YAML recipe"):
        load_recipe(bad)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("3\n")
    with pytest.raises(DomainparError, match="expected a YAML mapping of sections"):
        load_recipe(scalar)


FULL_EVENT = REPO / "examples" / "full_event.yaml"


def test_full_event_recipe_and_its_gpu_profile_load():
    cpu = load_recipe(FULL_EVENT)
    assert cpu.name == "full_event" and cpu.simulation.particles == 10_000
    assert cpu.train.parallel.mode == "domain" and cpu.train.parallel.ranks == 2 and cpu.evaluation.parts >= 2
    assert cpu.evaluation.subsets == {"pixel": (7, 8, 9)}
    assert set(cpu.profiles) == {"cuda"}
    gpu = load_recipe(FULL_EVENT, device="cuda")
    assert gpu == cpu.profiles["cuda"] and gpu.train.parallel.device == "cuda"
    # The GPU size scales the events, the model and P; the graph, the filter's inputs and the working point stay.
    assert gpu.graph == cpu.graph and gpu.filter.node_features == cpu.filter.node_features
    assert gpu.train.model.hidden > cpu.train.model.hidden and gpu.train.parallel.ranks > cpu.train.parallel.ranks
    assert gpu.simulation.train_events > cpu.simulation.train_events and gpu.tracks == cpu.tracks
    assert recipe_from_dict(cpu.to_dict(), source="round trip") == cpu


def _write_full(tmp_path: Path, change) -> Path:
    nested = yaml.safe_load(FULL_EVENT.read_text())
    change(nested)
    path = tmp_path / "full.yaml"
    path.write_text(yaml.safe_dump(nested))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["profiles"].update(tpu={}), "unknown profiles ['tpu']"),
        (lambda d: d["profiles"]["cuda"].update(graph={"z0_max": 100.0}), "profiles.cuda may override"),
        (lambda d: d["profiles"]["cuda"]["model"].update(hidden=-4), "profiles.cuda"),
        (lambda d: d["profiles"]["cuda"].update(model=3), "profiles.cuda.model must be a mapping"),
        (lambda d: d.update(profiles=[1]), "section 'profiles' must be a mapping"),
        (lambda d: d["evaluation"].update(parts=0), "evaluation.parts must be an integer in [1, 64]"),
        (lambda d: d["evaluation"].update(method="sectors"), "evaluation.method must be one of"),
        (lambda d: d["evaluation"]["subsets"].update(pixel=[7, 99]), "evaluation.subsets.pixel"),
        (lambda d: d["evaluation"]["subsets"].update({"two words": [8]}), "names must be words"),
        (lambda d: d["filter"].update(negative_fraction=0.0), "filter.negative_fraction is out of range"),
    ],
)
def test_profile_and_evaluation_mistakes_are_one_line(tmp_path, change, message):
    path = _write_full(tmp_path, change)
    with pytest.raises(DomainparError) as caught:
        load_recipe(path)  # on the CPU: a wrong GPU profile fails here too
    text = str(caught.value)
    assert message in text and str(path) in text and "\n" not in text


def test_a_device_without_profile_is_refused():
    with pytest.raises(DomainparError, match="no profile for device 'cuda'"):
        load_recipe(RECIPE, device="cuda")


PIXEL_EVENT = REPO / "examples" / "pixel_event.yaml"


def test_the_pixel_recipe_is_the_full_event_recipe_on_the_pixel_volumes():
    pixel, full = load_recipe(PIXEL_EVENT), load_recipe(FULL_EVENT)
    assert pixel.name == "pixel_event" and pixel.graph.volumes == (7, 8, 9) and pixel.evaluation.subsets == {}
    assert pixel.graph.skip_dphi_margin == 0.04 and full.graph.skip_dphi_margin is None
    # The wider phi window, with the bridge test at the base's margin.
    margins = (pixel.graph.dphi_margin, pixel.graph.bridge_dphi_margin, full.graph.dphi_margin, full.graph.bridge_dphi_margin)
    assert margins == (0.03, 0.005, 0.005, None)
    # Every other setting is its base's, the GPU profile too (the profile applied over the merged sections).
    # The straight cuts on the pixel detector, the helix on the whole one.
    trajectories = (pixel.graph.trajectory, pixel.graph.z0_max, full.graph.trajectory, full.graph.helix_reach, full.graph.z0_max)
    assert trajectories == ("line", 200.0, "helix", 1.2, 180.0)
    base_graph = replace(pixel.graph, volumes=(), skip_dphi_margin=None, dphi_margin=0.005, bridge_dphi_margin=None,
                         trajectory="helix", helix_reach=1.2, z0_max=180.0)  # fmt: skip
    assert base_graph == full.graph and pixel.simulation == full.simulation
    # ... but the GNN's width and the builder's settings (its free-hit pass too), tuned for the pixel detector and
    # recorded in the checkpoint.
    settings = {"window": 10, "ms": 0.03, "max_chi2_ndf": 8.0, "hole_ratio": 1.5, "free_pass": True}
    assert (pixel.train.model.hidden, full.train.model.hidden, pixel.train.run.track_settings) == (64, 32, settings)
    assert pixel.train == full.train.replace(**{"model.hidden": 64, "run.track_settings": settings})
    assert pixel.filter == full.filter and pixel.tracks == replace(full.tracks, settings=settings)
    gpu, full_gpu = load_recipe(PIXEL_EVENT, device="cuda"), load_recipe(FULL_EVENT, device="cuda")
    assert gpu.graph.volumes == (7, 8, 9) and gpu.evaluation.subsets == {}
    assert gpu.train == full_gpu.train.replace(**{"run.track_settings": settings})  # the GPU profile's width
    assert full.graph.volumes == () and recipe_from_dict(pixel.to_dict(), source="round trip") == pixel


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("base: 3\n", "base must name another recipe file"),
        ("base: none.yaml\n", "base recipe of"),
        ("base: recipe.yaml\n", "leads back to a recipe that names it"),
        ("base: full.yaml\nsimulation: 4\n", "section 'simulation' must be a mapping"),
        ("base: full.yaml\ngraph:\n  volumes: [7, 99]\n", "GraphConfig.volumes"),
        ("base: full.yaml\ngraph:\n  volumes: []\n", "GraphConfig.volumes"),
        ("base: full.yaml\nsimulation:\n  regions: [7]\n", "unknown simulation settings ['regions']"),
    ],
)
def test_a_recipe_on_a_base_names_its_mistakes_in_one_line(tmp_path, text, message):
    (tmp_path / "full.yaml").write_text(FULL_EVENT.read_text())
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    with pytest.raises(DomainparError) as caught:
        load_recipe(path)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_base_chain_that_loops_is_refused(tmp_path):
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(DomainparError, match="leads back to a recipe that names it"):
        load_recipe(tmp_path / "a.yaml")

"""Occupancy counts (bench.tools.occupancy) on a hand-made event, and a default simulated event against the real one.

The real event 21000's figures are in tests/sim/occupancy_event000021000.json
(``python -m bench.tools.sim_vs_real --reference``): the whole event counted
without truth, its pixel detector with truth.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.spatial import cKDTree

from domainpar.data.graph import GraphConfig, build_graph
from domainpar.errors import DomainparError
from domainpar.sim.config import SimulationConfig
from domainpar.sim.event import simulate_event
from bench.tools.occupancy import PIXEL_VOLUMES, add_counts, event_counts, occupancy_summary, region

REFERENCE = json.loads((Path(__file__).parent / "occupancy_event000021000.json").read_text())


def _hand_made() -> dict[str, pd.DataFrame]:
    """Three particles and two noise hits on the pixel barrel (volume 8, layers 2/4/6/8 at r = 32/72/116/172 mm).

    Particle 1: a straight central track, one hit per layer plus a second (overlap) hit 2 mm away on layer 4.
    Particle 2: a displaced (r = 50 mm) central track through layers 4 and 6 that comes back to layer 4
    200 mm away (a looper). Particle 3: a soft primary that stops on layer 2.
    """
    rows = [
        (1, 32.0, 0.0, 1.0, 2), (1, 72.0, 0.0, 2.0, 4), (1, 72.0, 2.0, 2.0, 4), (1, 116.0, 0.0, 3.0, 6),
        (1, 172.0, 0.0, 4.0, 8),
        (2, 0.0, 72.0, 1.0, 4), (2, 0.0, 116.0, 2.0, 6), (2, -200.0 / np.sqrt(2), 72.0 - 200.0 / np.sqrt(2), 3.0, 4),
        (3, 0.0, -32.0, 0.0, 2),
        (0, -32.0, 0.0, 0.0, 2), (0, 0.0, -116.0, 5.0, 6),
    ]  # fmt: skip
    hits = pd.DataFrame(
        {
            "hit_id": np.arange(1, len(rows) + 1, dtype=np.int32),
            "x": [r[1] for r in rows], "y": [r[2] for r in rows], "z": [r[3] for r in rows],
            "volume_id": 8, "layer_id": [r[4] for r in rows], "module_id": 1,
        }
    )  # fmt: skip
    truth = pd.DataFrame({"hit_id": hits["hit_id"], "particle_id": [r[0] for r in rows]})
    particles = pd.DataFrame(
        {
            "particle_id": [1, 2, 3, 4],
            "particle_type": [211, -211, 211, 2212],
            "vx": [0.0, 0.0, 0.0, 0.0], "vy": [0.0, 50.0, 0.0, 0.0], "vz": [0.0, 0.0, 0.0, 0.0],
            "px": [1.0, 0.0, 0.0, 0.5], "py": [0.0, 0.5, -0.2, 0.0], "pz": [0.1, 0.0, 0.0, 3.0],
            "q": [1, -1, 1, 1],
            "nhits": [5, 3, 1, 0],
        }
    )  # fmt: skip
    cells = pd.DataFrame({"hit_id": np.repeat(hits["hit_id"], 2), "ch0": np.tile([10, 11], len(hits)), "ch1": 5, "value": 0.25})
    return {"hits": hits, "truth": truth, "particles": particles, "cells": cells}


def test_counts_of_a_hand_made_event():
    event = _hand_made()
    counts = event_counts(event["hits"], event["particles"], event["truth"], event["cells"])
    assert counts["hits"] == 11 and counts["hits_per_volume"] == {"8": 11}
    assert counts["hits_per_layer"] == {"8:2": 3, "8:4": 4, "8:6": 3, "8:8": 1}
    assert counts["noise"] == 2 and counts["noise_per_volume"] == {"8": 2}
    assert counts["particles_per_layer"] == {"8:2": 2, "8:4": 2, "8:6": 2, "8:8": 1}
    assert counts["particles_with_hits"] == 3 and counts["displaced_with_hits"] == 1 and counts["particle_hits"] == 9
    assert counts["more_hits_than_layers"] == 2 and counts["double_layers"] == 2 and counts["loopers"] == 1
    # Particle 1 is the only central primary of 0.3-3 GeV; on the pixel volumes alone, 4 hits or more is not stopped.
    assert counts["central_primaries"] == 1 and counts["central_primaries_stopped"] == 0
    assert counts["clusters"]["8"] == {"hits": 11, "cells": 22.0, "charge": 5.5, "channels_u": 22.0, "channels_v": 11.0}
    assert counts["noise_clusters"]["8"] == {"hits": 2, "cells": 4.0, "charge": 1.0, "channels_u": 4.0, "channels_v": 2.0}
    summary = occupancy_summary(counts)
    assert summary["noise_fraction"] == pytest.approx(2 / 11) and summary["hits_per_particle"] == 3.0
    assert summary["looper_share"] == pytest.approx(1 / 3) and summary["double_layer_share"] == pytest.approx(2 / 7)
    assert summary["clusters"]["8"]["cells"] == 2.0 and summary["secondaries_with_hits_share"] is None
    # Without truth: hits per particle from nhits, the event's noise from hits minus nhits, nothing per hit.
    untruthful = event_counts(event["hits"], event["particles"])
    assert untruthful["noise"] == 2 and "loopers" not in untruthful and "noise_per_volume" not in untruthful
    assert occupancy_summary(untruthful)["particles_with_hits"] == 3


def test_counts_add_over_events_and_edges_are_the_graph_builders():
    event = _hand_made()
    graph = GraphConfig()
    one = event_counts(event["hits"], event["particles"], event["truth"], None, graph)
    built, _ = build_graph(event["hits"], config=graph)
    assert one["edges"] == built.edge_index.shape[1] > 0
    two = add_counts(one, one)
    assert two["events"] == 2 and two["hits"] == 22 and two["hits_per_layer"]["8:4"] == 8
    assert two["pt_histogram"] == [2 * n for n in one["pt_histogram"]]
    summary = occupancy_summary(two)
    assert summary["hits"] == 11 and summary["edges_per_hit"] == one["edges"] / 11
    with pytest.raises(DomainparError, match="with and without truth"):
        add_counts(one, event_counts(event["hits"], event["particles"]))


def test_region_keeps_the_hits_of_its_volumes():
    event = _hand_made()
    strips = event["hits"].iloc[:2].assign(volume_id=13, layer_id=2, hit_id=[101, 102])
    whole = {**event, "hits": pd.concat([event["hits"], strips], ignore_index=True),
             "truth": pd.concat([event["truth"], pd.DataFrame({"hit_id": [101, 102], "particle_id": [1, 4]})], ignore_index=True)}  # fmt: skip
    pixel = region(whole, PIXEL_VOLUMES)
    assert len(pixel["hits"]) == 11 and set(pixel["truth"]["hit_id"]) == set(event["hits"]["hit_id"])
    assert pixel["particles"].set_index("particle_id")["nhits"].to_dict() == {1: 5, 2: 3, 3: 1}
    with pytest.raises(DomainparError, match="needs its truth"):
        region({"hits": event["hits"], "particles": event["particles"]}, PIXEL_VOLUMES)


def _pixel_summary(config: SimulationConfig) -> tuple[dict, dict]:
    frames = simulate_event(config, event_id=21000, seed=0)
    pixel = region(frames, PIXEL_VOLUMES)
    whole = occupancy_summary(event_counts(frames["hits"], frames["particles"]))
    return whole, occupancy_summary(event_counts(pixel["hits"], pixel["particles"], pixel["truth"], pixel["cells"]))


def _busy_as_real(whole: dict, pixel: dict) -> list[str]:
    """The occupancy figures of a simulated event that differ from the real event 21000 beyond their tolerance."""
    real_whole, real_pixel = REFERENCE["whole"]["summary"], REFERENCE["pixel"]["summary"]
    problems = []
    for name, simulated, real, tolerance in (
        ("hits", whole["hits"], real_whole["hits"], 0.05),
        ("particles listed", whole["particles_listed"], real_whole["particles_listed"], 0.05),
        ("particles with hits", whole["particles_with_hits"], real_whole["particles_with_hits"], 0.05),
        ("pixel hits", pixel["hits"], real_pixel["hits"], 0.05),
        ("particles with pixel hits", pixel["particles_with_hits"], real_pixel["particles_with_hits"], 0.05),
        ("pixel hits per particle", pixel["hits_per_particle"], real_pixel["hits_per_particle"], 0.05),
        ("pixel noise fraction", pixel["noise_fraction"], real_pixel["noise_fraction"], 0.10),
    ):
        if abs(simulated / real - 1.0) > tolerance:
            problems.append(f"{name}: {simulated:.4g} vs real {real:.4g}")
    for volume, real in real_whole["hits_per_volume"].items():
        if abs(whole["hits_per_volume"].get(volume, 0.0) / real - 1.0) > 0.12:
            problems.append(f"hits in volume {volume}: {whole['hits_per_volume'].get(volume, 0.0):.0f} vs real {real:.0f}")
    if abs(pixel["double_layer_share"] - real_pixel["double_layer_share"]) > 0.02:
        problems.append(f"double hits: {pixel['double_layer_share']:.3f} vs real {real_pixel['double_layer_share']:.3f}")
    # Noise hits leave clusters like a particle's (event 21000's pixel barrel: 8.4 cells, long along z), not
    # single pixels: a tracker that learnt "small cluster, noise" on simulation would keep the real noise.
    simulated, real = pixel["noise_clusters"]["8"]["cells"], real_pixel["noise_clusters"]["8"]["cells"]
    if abs(simulated / real - 1.0) > 0.15:
        problems.append(f"noise cells per hit in volume 8: {simulated:.2f} vs real {real:.2f}")
    return problems


def test_noise_clusters_along_the_sensor_normal_fail_the_check(monkeypatch):
    """Noise clusters as they were made before (a crossing along the module's normal: 2.7 cells) fail the check."""
    import domainpar.sim.event as event_module
    from domainpar.sim.geometry import detector_geometry

    modules = detector_geometry().modules
    centres = cKDTree(modules[["cx", "cy", "cz"]].to_numpy())

    def along_normal(position):
        # (A noise hit lies on its module, nearer its centre than any other's.)
        return modules[["rot_xw", "rot_yw", "rot_zw"]].to_numpy()[centres.query(position)[1]]

    monkeypatch.setattr(event_module, "noise_directions", along_normal)
    whole, pixel = _pixel_summary(SimulationConfig())
    assert any(p.startswith("noise cells per hit in volume 8") for p in _busy_as_real(whole, pixel))


def test_a_default_event_is_as_busy_as_the_real_one():
    whole, pixel = _pixel_summary(SimulationConfig())
    assert _busy_as_real(whole, pixel) == []


def test_the_occupancy_check_fails_without_interactions_and_decays():
    """Without them the hits add up (every particle crosses every layer) but the particles do not: too few, each
    with too many hits, strip volumes off."""
    whole, pixel = _pixel_summary(replace(SimulationConfig(), interaction_scale=0.0, k0s_fraction=0.0, lambda_fraction=0.0))
    problems = _busy_as_real(whole, pixel)
    for expected in ("particles listed", "particles with hits", "pixel hits per particle", "hits in volume 13"):
        assert any(p.startswith(expected) for p in problems), (expected, problems)

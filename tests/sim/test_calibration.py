"""The simulator against the real labelled event, layer by layer and layer pair by layer pair.

Per layer: hit efficiency, resolution along u and v (measured − true), compared
by :func:`bench.tools.calibration.compare_layers`; per layer pair: the
true segments' Δr, |Δz| and |Δφ| distributions, compared by
:func:`~bench.tools.calibration.compare_segments`. The undisturbed simulation
passes; an inefficient layer or volume, one layer with twice the resolution,
or flat ideal layers (hits on the cylinders and discs instead of the module
planes) each fail, so the comparison would catch such a drift.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from domainpar.data.trackml import load_event
from domainpar.errors import DomainparError
from bench.tools.calibration import Margins, compare_layers, compare_segments, layer_response, residual_quantiles, segment_table
from domainpar.sim.calibration import event_truth
from domainpar.sim.config import SimulationConfig
from domainpar.sim.event import simulate_event
from domainpar.sim.measurement import measurement_model

from fixtures import EVENT1

REAL = EVENT1
#: Enough simulated particles that the simulation's own statistical error is small next to the real event's.
SIM = SimulationConfig(num_particles=2500)
NUM_SIM_EVENTS = 3
#: Margins of the comparison (the documented calibration tolerance).
MARGINS = Margins()


def _simulated(config: SimulationConfig) -> list:
    events = []
    for event_id in range(1, NUM_SIM_EVENTS + 1):
        frames = simulate_event(config, event_id, seed=21)
        events.append(event_truth(frames["hits"], frames["truth"], frames["particles"], frames["cells"]))
    return events


@pytest.fixture(scope="module")
def real():
    hits, cells, particles, truth = load_event(REAL, parts=("hits", "cells", "particles", "truth"))
    event = event_truth(hits, truth, particles, cells)
    return layer_response([event]), segment_table([event]), event


@pytest.fixture(scope="module")
def simulated():
    events = _simulated(SIM)
    return layer_response(events), segment_table(events)


def test_layers_match_the_real_event(real, simulated):
    assert compare_layers(simulated[0], real[0], MARGINS) == []
    # The comparison really tests the detector: efficiency of the 7 barrel layers with enough crossings
    # and of every volume pooled, resolution of most layers.
    tested = real[0][(real[0]["hits"] + real[0]["misses"]) >= MARGINS.min_crossings]
    assert len(tested) >= 7
    signal_hits = real[0]["num_hits"] * (1 - real[0]["noise_fraction"].fillna(0))
    assert (signal_hits >= MARGINS.min_hits).sum() >= 19


def test_segments_match_the_real_event(real, simulated):
    assert compare_segments(simulated[1], real[1], MARGINS) == []
    counts = real[1].groupby(["inner", "outer"]).size()
    assert (counts >= MARGINS.min_segments).sum() >= 20


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        (((8, 4, 0.80, 1.0),), "layer 8:4 efficiency"),
        (tuple((7, layer, 0.60, 1.0) for layer in range(2, 15, 2)), "volume 7 efficiency"),
        (((13, 2, 0.983, 2.0),), "layer 13:2 resolution"),
    ],
)
def test_comparison_catches_one_layer_off(real, conditions, expected):
    """A layer 20 points less efficient, a volume losing 40 % of its crossings, or a layer measured twice as
    coarsely fails the comparison. (The real event's ~100 crossings per layer decide how small an
    efficiency drift can be seen; the undisturbed simulation passes the same comparison.)"""
    problems = compare_layers(layer_response(_simulated(replace(SIM, layer_conditions=conditions))), real[0], MARGINS)
    assert any(p.startswith(expected) for p in problems), problems


def test_segment_comparison_catches_flat_layers(real):
    """Hits on ideal cylinders and discs (not the module planes) give true segments of the wrong Δr."""
    problems = compare_segments(segment_table(_simulated(replace(SIM, module_planes=False))), real[1], MARGINS)
    assert any(" dr:" in p for p in problems), problems


def test_measurement_model_is_the_real_events(real):
    """The packaged measurement model is what residual_quantiles measures on the real event (no hand edits)."""
    measured = residual_quantiles([real[2]])
    packaged = measurement_model()
    assert packaged["probabilities"] == measured["probabilities"]
    assert packaged["volumes"] == measured["volumes"]


def test_layer_conditions_are_validated():
    with pytest.raises(DomainparError, match="layer_conditions"):
        SimulationConfig(layer_conditions=((8, 4, 1.5, 1.0),))
    with pytest.raises(DomainparError, match="no layer 8:3"):
        simulate_event(replace(SIM, num_particles=10, layer_conditions=((8, 3, 0.5, 1.0),)), 1, 1)


def test_dead_layer_has_no_signal_hits():
    frames = simulate_event(replace(SIM, num_particles=500, layer_conditions=((8, 2, 0.0, 1.0),)), 1, 1)
    merged = frames["hits"].merge(frames["truth"], on="hit_id")
    on_layer = (merged["volume_id"] == 8) & (merged["layer_id"] == 2)
    assert on_layer.any()  # noise still lands there
    assert (merged.loc[on_layer, "particle_id"] == 0).all()
    assert np.isfinite(merged[["x", "y", "z"]].to_numpy()).all()


def test_comparison_catches_missing_module_overlaps(real):
    """Without the second hit of crossings through overlapping modules, the double-hit fractions fail."""
    problems = compare_layers(layer_response(_simulated(replace(SIM, module_overlaps=False))), real[0], MARGINS)
    assert any("double hits" in p for p in problems), problems

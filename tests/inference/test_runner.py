"""The one event chain (:mod:`domainpar.inference.runner`), in this process:

* a user model is proven local before any event is scored on several parts, whatever happened to the events before
  (an event too small to prove anything fails alone, and the next one is checked);
* the tracks stage's time is the warm one, numba's compiling reported apart.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from fixtures import synthetic_graph

MODELS = Path(__file__).resolve().parents[1] / "verification" / "user_models.py"


def _runner(name: str, num_parts: int = 2):
    """An EventRunner of the test model ``name`` (tests/verification/user_models.py) as a user's model, on a
    scorer of ``num_parts`` parts that never scores (the check comes first)."""
    from domainpar.inference.runner import EventRunner
    from domainpar.model.config import ModelConfig
    from domainpar.model.registry import build_model

    config = ModelConfig(name=f"{MODELS}:{name}", node_features=3, edge_features=4, hidden=8, num_iterations=1)
    loaded = SimpleNamespace(model_config=config, model=build_model(config))
    pipeline = SimpleNamespace(loaded=loaded, spec=SimpleNamespace(skip_locality_check=False))
    return EventRunner(pipeline, SimpleNamespace(num_parts=num_parts, close=lambda: None))


def test_an_event_too_small_to_prove_locality_does_not_count_as_the_check():
    from domainpar.errors import DomainparError
    from domainpar.inference.runner import LocalityUnproven
    from domainpar.verification.locality import graph_slice

    runner = _runner("GlobalMeanGNN")
    graph = synthetic_graph(2, 0)
    # A malformed first event: one hit, no edge. Nothing can be exchanged on it, so nothing is proven.
    tiny = graph_slice(synthetic_graph(1, 0), 1)
    with pytest.raises(LocalityUnproven, match=r"^event 1: too small to check that model .*GlobalMeanGNN.* is local"):
        runner.check_locality(tiny)
    assert not runner.locality_checked
    # The next event is checked, and the model that is not local refused, before it scores anything.
    with pytest.raises(DomainparError, match=r"GlobalMeanGNN' is not local: on a 2-part slice of event 2"):
        runner.check_locality(graph)
    # A local model is proven on the first event that can prove it, once.
    local = _runner("LocalGNN")
    with pytest.raises(LocalityUnproven):
        local.check_locality(tiny)
    local.check_locality(graph)
    assert local.locality_checked


def test_the_tracks_stage_time_leaves_numbas_compiling_out_and_reports_it(monkeypatch):
    # A first run on a machine compiles the track builders' kernels inside the stage (30 s against 0.8 s warm for a
    # full event): the summary's stage time is the warm one, the compiling is an entry of its own.
    import time
    from dataclasses import replace

    import numpy as np

    from domainpar.inference import runner as module
    from domainpar.tracks.config import TrackConfig

    graph = synthetic_graph(2, 0)
    built = module.build_candidates

    def compiling_builder(*args):
        time.sleep(0.6)  # half a second of it compiling, as build_candidates would have measured
        return replace(built(*args), seconds_compiling=0.5)

    runner = module.EventRunner(SimpleNamespace(tracks=TrackConfig(method="components")), SimpleNamespace(num_parts=1, close=lambda: None))
    event = SimpleNamespace(graph=graph, event_hit_id=np.sort(graph.hit_id), seconds={"build": 1.0})
    logits = np.zeros(graph.num_edges, dtype=np.float32)
    warm = runner.tracks(event, logits, {})
    assert "tracks_compiling" not in warm.seconds and warm.seconds["build"] == 1.0
    monkeypatch.setattr(module, "build_candidates", compiling_builder)
    started = time.perf_counter()
    cold = runner.tracks(event, logits, {})
    elapsed = time.perf_counter() - started
    assert cold.seconds["tracks_compiling"] == 0.5
    assert 0.1 - 1e-3 <= cold.seconds["tracks"] <= elapsed - 0.5 + 1e-9

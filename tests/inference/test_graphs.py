"""The graph stage of a model trained on a detector region: raw events are cut to it, graph files must hold it."""

from __future__ import annotations

import pytest

from domainpar.data.graph import GraphConfig, build_graph
from domainpar.data.trackml import load_event
from domainpar.errors import DomainparError
from domainpar.inference.graphs import GraphStage

from fixtures import TRACKML_DIR

PIXEL = (7, 8, 9)


def _stage(config: GraphConfig) -> GraphStage:
    return GraphStage(config, None, None, None, None, len(config.node_feature_names), None, "the model")


def test_a_region_model_takes_the_whole_raw_event_cut_to_its_volumes_and_refuses_whole_graph_files():
    hits, truth, particles = load_event(TRACKML_DIR / "event000000001", parts=("hits", "truth", "particles"))
    pixel, whole = _stage(GraphConfig(volumes=PIXEL)), _stage(GraphConfig())
    built = pixel.from_raw(None, hits, None, 1, "event 1")
    assert 0 < built.graph.num_nodes < hits.shape[0]
    region, _ = build_graph(hits[hits["volume_id"].isin(PIXEL)], config=GraphConfig(volumes=PIXEL), event_id=1)
    assert pixel.from_file(None, region, "pixel.npz") is region
    whole_graph = whole.from_raw(None, hits, None, 1, "event 1").graph
    with pytest.raises(DomainparError, match=r"whole.npz: the model was trained on graphs of detector volumes \[7, 8, 9\]"):
        pixel.from_file(None, whole_graph, "whole.npz")
    assert whole.from_file(None, region, "pixel.npz") is region  # a whole-detector model may be given a region

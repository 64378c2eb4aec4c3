"""The one partitioned inference: an event over P parts with halo exchange gives one process's logits.

Every command that scores an event on several parts (evaluate, reconstruct, the recipe's figures, the speed
measurement) runs :mod:`domainpar.inference.partitioned`'s host/rank protocol. In float64 its logits equal the
single-process ones to 1e-10 at 1-4 parts, on partitions that really cut the event (halo rows exchanged), so a
broken or skipped exchange fails here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from domainpar.data.event_graph import EventGraph
from domainpar.data.graph import build_event_graph
from domainpar.errors import DomainparError, MachineFault
from domainpar.inference import partitioned
from domainpar.inference.model_io import load_model
from domainpar.inference.partitioned import LocalGroup
from domainpar.inference.runner import whole_graph_logits
from domainpar.model.config import ModelConfig
from domainpar.model.registry import build_model
from domainpar.train.checkpoint import CHECKPOINT_FORMAT_VERSION, write_checkpoint

import dying_children
from fixtures import EVENT1

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


@pytest.fixture(scope="module")
def event1():
    return build_event_graph(EVENT1)[0]


@pytest.fixture(scope="module")
def float64_checkpoint(event1, tmp_path_factory) -> Path:
    """An Interaction Network in float64 (random weights: exactness holds for any), 4 message-passing steps."""
    config = ModelConfig(node_features=int(event1.x.shape[1]), edge_features=int(event1.edge_attr.shape[1]), hidden=16,
                         num_iterations=4)  # fmt: skip
    torch.manual_seed(0)
    model = build_model(config).double()
    path = tmp_path_factory.mktemp("model") / "model.pt"
    write_checkpoint({"format_version": CHECKPOINT_FORMAT_VERSION, "step": 0, "model": model.state_dict(),
                      "model_config": config.to_dict(), "config": {}}, path)  # fmt: skip
    return path


@pytest.mark.timeout(300)
@pytest.mark.parametrize("num_parts, method", [(1, "metis"), (2, "geometric"), (3, "metis"), (4, "geometric")])
def test_parts_give_the_logits_of_one_process(event1, float64_checkpoint, num_parts, method):
    loaded = load_model(float64_checkpoint)
    assert loaded.dtype == torch.float64
    single = whole_graph_logits(loaded, event1)
    group = LocalGroup(float64_checkpoint, num_parts, method, threads=1)
    try:
        # Two events through one group: it lives across events, as a run's does.
        for _ in range(2):
            logits, record = group.logits(event1)
            assert np.isfinite(logits).all()
            assert np.max(np.abs(logits - single)) <= 1e-10 * max(1.0, np.max(np.abs(single)))
    finally:
        group.close()
    if num_parts > 1:
        # The event really was cut: halo rows crossed between the ranks at every step.
        assert record["num_cut_edges"] > 0 and record["num_halo_nodes"] > 0
    else:
        assert record["num_cut_edges"] == 0


@pytest.mark.timeout(300)
def test_an_event_that_cannot_be_cut_is_one_line_and_the_group_goes_on(event1, float64_checkpoint):
    """More parts than an event has hits: that event is refused by name, and the group scores the next one."""
    first = event1.edge_index[:, 0]
    tiny = EventGraph(event_id=7, x=event1.x[first], pos=event1.pos[first], hit_id=event1.hit_id[first],
                      layer=event1.layer[first], edge_index=np.array([[0], [1]]), edge_attr=event1.edge_attr[:1])  # fmt: skip
    group = LocalGroup(float64_checkpoint, 3, "metis", threads=1)
    try:
        with pytest.raises(DomainparError, match=r"^event 7: --parts must be at most the number of nodes \(2\)"):
            group.logits(tiny)
        logits, _ = group.logits(event1)
        assert np.isfinite(logits).all()
    finally:
        group.close()


@pytest.mark.timeout(120)
def test_a_host_rank_killed_mid_message_is_named_not_waited_for(event1, monkeypatch, tmp_path):
    """The caller and spawn hold the write ends of the queues they read: a half message must not hold them for ever."""
    monkeypatch.setattr(partitioned, "_local_rank", dying_children.host_rank_killed_mid_message)
    group = LocalGroup(tmp_path / "unused.pt", 1, "metis", threads=1)
    try:
        with pytest.raises((DomainparError, MachineFault)) as raised:
            group.logits(event1)
    finally:
        group.close()
    line = raised.value.line() if isinstance(raised.value, MachineFault) else str(raised.value)
    assert "\n" not in line and "rank 0" in line and "SIGKILL" in line, line

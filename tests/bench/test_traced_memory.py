"""The bench's traced memory figure (fake tensors under torch's MemTracker) with every checkpointing path."""

from __future__ import annotations

import numpy as np
from bench.common.memory import traced_peak
from domainpar.model.config import ModelConfig
from domainpar.partition import build_plan
from domainpar.partition.local_graph import local_graph
from fixtures import random_graph


def test_traced_peak_of_chunked_checkpointing():
    """MemTracker hooks every module's input gradients; the chunks' nested autograd.grad must not hand it
    a leaf (torch refuses that), and checkpointing must trace below the plain step."""
    graph = random_graph(60, 600, seed=1)
    part = local_graph(graph, build_plan(graph.edge_index, np.zeros(graph.num_nodes, np.int64), 1, y=graph.y).parts[0])
    size = dict(node_features=int(part.x.shape[1]), edge_features=int(part.edge_attr.shape[1]), hidden=8, num_iterations=2)
    plain = traced_peak(part, ModelConfig(**size))
    chunked = traced_peak(part, ModelConfig(checkpointing=True, chunk_rows=200, **size))
    offloaded = traced_peak(part, ModelConfig(checkpointing=True, chunk_rows=200, **size), offload=True)
    assert offloaded["activations"] < chunked["activations"] < plain["activations"] / 3

"""Streamed CPU inference (domainpar.model.chunked.streamed_edges / streamed_rows) against the whole-tensor forward.

Inference streams every MLP through the cache in chunks of rows, shared over threads. The logits must be the bits of
the plain forward's (the same ops on the same rows) on any thread count, on a whole graph and on a part with halo
rows, for the fused row kernels (ReLU) and PyTorch's (GELU, tanh) alike. Float32 MLPs with LayerNorm and SiLU (the
recipes') stream through :func:`~domainpar.model.chunked.kernel_tail`: the plain forward's logits to float32 rounding,
and the same bits on any thread count and chunk size.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import domainpar.model.interaction_network as network_module
from domainpar.kernels import chunks
from domainpar.model import chunked
from domainpar.model.config import ModelConfig
from domainpar.model.exchange import CompletedExchange, IdentityExchange
from domainpar.model.interaction_network import InteractionNetwork
from domainpar.partition import build_plan
from domainpar.partition.local_graph import local_graph
from fixtures import random_graph

CASES = [
    dict(activation="silu", mlp_layers=2),  # the recipe's: PyTorch's kernels, chunks on threads
    dict(activation="relu", mlp_layers=3),  # fused numba row kernels: chunks on the calling thread
    dict(activation="gelu", mlp_layers=1, layer_norm=False),
    dict(activation="tanh", mlp_layers=2, recurrent=True),
    dict(activation="silu", mlp_layers=2, use_edge_features=False),
]


class _Halo:
    """Fixed halo rows appended to the owned rows: a part's exchange without other ranks."""

    def __init__(self, num_halo: int, hidden: int) -> None:
        self.num_halo = num_halo
        self.halo = torch.randn(num_halo, hidden, generator=torch.Generator().manual_seed(3))

    def start(self, x_owned):
        return CompletedExchange(torch.cat([x_owned, self.halo]))


def _graphs():
    graph = random_graph(1500, 9000, seed=4)
    owner = (np.arange(graph.num_nodes) % 2).astype(np.int64)
    part = local_graph(graph, build_plan(graph.edge_index, owner, 2, y=graph.y).parts[0]).to("cpu", torch.float32)
    whole = local_graph(graph, build_plan(graph.edge_index, np.zeros(graph.num_nodes, np.int64), 1).parts[0])
    return [("whole", whole.to("cpu", torch.float32), None), ("part", part, part.num_halo)]


def _model(case: dict) -> InteractionNetwork:
    torch.manual_seed(0)
    model = InteractionNetwork(ModelConfig(node_features=3, edge_features=4, hidden=16, num_iterations=3, **case)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))  # LayerNorm weights away from 1 and biases away from 0
    return model


@pytest.fixture(autouse=True)
def chain_arithmetic():
    """torch on one intra-op thread, as the event chain runs (domainpar.inference.arithmetic); the count given back."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 64 rows and thread pieces of a chunk: many chunks on many threads, a ragged last chunk."""
    monkeypatch.setattr(chunked, "STREAM_ROWS", 64)
    monkeypatch.setattr(chunks, "MIN_CHUNK", 64)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_streamed_logits_are_the_plain_forwards_bits(case, small_chunks, monkeypatch):
    model = _model(case)
    calls = []
    real = network_module.streamed_edges
    monkeypatch.setattr(network_module, "streamed_edges", lambda *a, **k: calls.append(1) or real(*a, **k))
    for name, graph, num_halo in _graphs():
        exchange = IdentityExchange() if num_halo is None else _Halo(num_halo, model.config.hidden)
        with torch.no_grad():
            model._streamed = lambda graph: False  # the whole-tensor forward
            plain = model(graph, exchange)
            del model._streamed
            assert not calls
            results = {}
            for threads in (1, 3):
                with chunks.using_threads(threads):
                    streamed = results[threads] = model(graph, exchange)
                assert calls, "inference did not stream"
                calls.clear()
                if _kernel_tail(case):
                    torch.testing.assert_close(streamed, plain, rtol=1e-5, atol=1e-5)
                else:
                    assert torch.equal(streamed, plain), f"{name}, {threads} threads: max diff {(streamed - plain).abs().max()}"
            assert torch.equal(results[1], results[3]), f"{name}: the thread count changed the bits"
        with torch.enable_grad():
            trained = model(graph, exchange)
        assert not calls, "a forward that records autograd must not stream"
        assert torch.allclose(trained.detach(), plain, rtol=0, atol=1e-5)


def _kernel_tail(case: dict) -> bool:
    """Whether the case's MLPs stream through kernel_tail (float32 graphs here)."""
    return case["activation"] == "silu" and case.get("layer_norm", True)


@pytest.mark.parametrize("case", [CASES[0], CASES[3]], ids=["silu", "tanh"])
def test_default_chunks_cover_a_ragged_tail(case, monkeypatch):
    """The default chunk size (4096) on 9000 edges: two whole chunks and a short one. The bits of whole tensors (of
    64-row chunks where kernel_tail runs: its rows do not depend on the chunk)."""
    model = _model(case)
    _, graph, _ = _graphs()[0]
    assert graph.num_edges > 2 * chunked.STREAM_ROWS and graph.num_edges % chunked.STREAM_ROWS
    with torch.no_grad():
        streamed = model(graph)
        if _kernel_tail(case):
            monkeypatch.setattr(chunked, "STREAM_ROWS", 64)
        else:
            model._streamed = lambda graph: False
        assert torch.equal(streamed, model(graph))


def test_kernel_tail_is_the_tail_to_float32_rounding_where_it_applies():
    # An MLP of the model (two layers, LayerNorm, SiLU), norms' weights and biases away from 1 and 0: the tail to
    # float32 rounding. Where it does not apply (float64, another activation, no norm) it declines, and the plain
    # tail runs.
    torch.manual_seed(1)
    mlp = _model(CASES[0]).node_networks[0]
    z1 = 3.0 * torch.randn(700, 16) + 0.5
    with torch.no_grad():
        want = mlp.tail(z1.clone())
        got = chunked.kernel_tail(mlp, z1.clone())
        assert got is not None and not torch.equal(got, z1)
        torch.testing.assert_close(got, want, rtol=2e-6, atol=2e-6)
        assert chunked.kernel_tail(mlp, z1.double()) is None
        for case in CASES[1:4]:
            assert chunked.kernel_tail(_model(case).node_networks[0], z1.clone()) is None


def test_inference_leaves_the_parameters_alone():
    """A model without edge features starts every edge from one learned vector, and streamed updates write e in
    place: e must be a copy of it even for a graph of one edge (a (1, H) expansion counts as contiguous)."""
    model = _model(CASES[-1])
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    graph = random_graph(2, 1, seed=1)
    part = local_graph(graph, build_plan(graph.edge_index, np.zeros(2, np.int64), 1).parts[0]).to("cpu", torch.float32)
    with torch.no_grad():
        first = model(part)
        assert torch.equal(model(part), first)
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name


def test_streaming_refuses_autograd_and_bad_chunks():
    model = _model(CASES[0])
    u = torch.randn(10, 4)
    plan = chunked.EdgePlan(kind="encoder", mlp=model.edge_encoder, chunks=[], tail=model._chunk_tail, gather=model._gather)
    with pytest.raises(RuntimeError, match="grad mode off"):
        chunked.streamed_edges(plan, u)
    with torch.no_grad(), pytest.raises(ValueError, match="multiple of 64 \\(got 100\\)"):
        chunked.streamed_edges(plan, u, rows=100)
    with torch.no_grad():  # SiLU and LayerNorm in float32: kernel_tail, the encoder's values to float32 rounding
        torch.testing.assert_close(chunked.streamed_edges(plan, u), model.edge_encoder(u), rtol=2e-6, atol=2e-6)

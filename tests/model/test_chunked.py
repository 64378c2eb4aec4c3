"""Checkpointing by chunked edge MLPs (domainpar.model.chunked) against the unchunked model, halo rows included."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from domainpar.model.interaction_network import InteractionNetwork
from domainpar.model.config import ModelConfig
from domainpar.partition import build_plan
from domainpar.partition.local_graph import local_graph
from fixtures import random_graph


class _Halo:
    """Fixed halo rows (a leaf that requires grad) appended to the owned rows: a part's exchange without other ranks."""

    def __init__(self, num_halo: int, hidden: int, dtype: torch.dtype) -> None:
        self.num_halo = num_halo
        self.halo = torch.randn(num_halo, hidden, generator=torch.Generator().manual_seed(3), dtype=dtype).requires_grad_()

    def start(self, x_owned):
        from domainpar.model.exchange import CompletedExchange

        return CompletedExchange(torch.cat([x_owned, self.halo]))


def _part(seed: int = 4, dtype=torch.float64):
    graph = random_graph(90, 400, seed=seed)
    owner = (np.arange(graph.num_nodes) % 2).astype(np.int64)
    plan = build_plan(graph.edge_index, owner, 2, y=graph.y)
    part = local_graph(graph, plan.parts[0]).to("cpu", dtype)
    assert part.num_halo > 0  # the halo's gradient path is exercised
    return part


def _grads(config: ModelConfig, part, dtype=torch.float64):
    torch.manual_seed(0)
    model = InteractionNetwork(config).to(dtype)
    exchange = _Halo(part.num_halo, config.hidden, dtype)
    weights = torch.linspace(-1, 1, part.num_edges, dtype=dtype)
    logits = model(part, exchange)
    params = [p for p in model.parameters()]
    got = torch.autograd.grad((logits * weights).sum(), params + [exchange.halo])
    return logits.detach(), dict(zip([n for n, _ in model.named_parameters()] + ["halo"], got))


CASES = [
    dict(activation="relu", mlp_layers=3),  # CPU: fused numba row kernels inside the chunks
    dict(activation="silu", mlp_layers=2),  # PyTorch's kernels inside the chunks
    dict(activation="gelu", mlp_layers=1, layer_norm=False),
    dict(activation="tanh", mlp_layers=2, recurrent=False),
    dict(activation="leaky_relu", mlp_layers=2, use_edge_features=False),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("chunk_rows", [37, 0])  # 37: eleven chunks, the last one short; 0: automatic (one here)
def test_chunked_checkpointing_equals_unchunked(case, chunk_rows):
    part = _part()
    base = ModelConfig(hidden=8, num_iterations=3, **case)
    want_logits, want = _grads(base, part)
    got_logits, got = _grads(ModelConfig(hidden=8, num_iterations=3, checkpointing=True, chunk_rows=chunk_rows, **case), part)
    assert torch.allclose(got_logits, want_logits, rtol=0, atol=1e-12)
    for name, grad in want.items():
        assert torch.allclose(got[name], grad, rtol=1e-10, atol=1e-12), name


def test_chunked_checkpointing_equals_unchunked_on_a_whole_graph():
    """One part, no halo rows: the sums' groupings are complete (their gradients are gathered unpadded)."""
    graph = random_graph(90, 400, seed=5)
    plan = build_plan(graph.edge_index, np.zeros(graph.num_nodes, np.int64), 1, y=graph.y)
    part = local_graph(graph, plan.parts[0]).to("cpu", torch.float64)
    assert part.num_halo == 0
    case = dict(hidden=8, num_iterations=3, activation="relu", mlp_layers=3)
    weights = torch.linspace(-1, 1, part.num_edges, dtype=torch.float64)
    results = []
    for config in (ModelConfig(**case), ModelConfig(checkpointing=True, chunk_rows=37, **case)):
        torch.manual_seed(0)
        model = InteractionNetwork(config).double()
        logits = model(part)
        results.append((logits.detach(), torch.autograd.grad((logits * weights).sum(), list(model.parameters()))))
    (want_logits, want), (got_logits, got) = results
    assert torch.allclose(got_logits, want_logits, rtol=0, atol=1e-12)
    for g, w in zip(got, want):
        assert torch.allclose(g, w, rtol=1e-10, atol=1e-12)


def test_fused_chunks_recompute_only_what_backward_needs(monkeypatch):
    """CPU, ReLU: the chunks run the row kernels directly; backward's recomputation stops at z_L (no a_L)
    except in the head, whose output layer needs a_L. The gradients are the plain model's (above)."""
    from domainpar.model import chunked

    calls: list[tuple[bool, bool]] = []
    real = chunked.fused_tail_forward

    def spy(mlp, z1, keep, last=True, out=None):
        zs, kept, a = real(mlp, z1, keep, last=last, out=out)
        calls.append((torch.is_grad_enabled() or keep, a is not None))
        return zs, kept, a

    monkeypatch.setattr(chunked, "fused_tail_forward", spy)
    part = _part()
    config = ModelConfig(hidden=8, num_iterations=2, activation="relu", mlp_layers=3, checkpointing=True, chunk_rows=100)
    _grads(config, part)
    chunks = -(-part.num_edges // 100)
    recomputed = [computed for backward, computed in calls if backward]
    # Backward: the encoder, 2 updates and the head, each chunk by chunk; only the head's chunks compute a_L.
    assert len(recomputed) == 4 * chunks
    assert sum(recomputed) == chunks
    forward = [computed for backward, computed in calls if not backward]
    assert len(forward) == 3 * chunks and all(forward)  # the head's forward is on the generic path


def test_backward_keeps_one_chunk_of_edge_rows():
    """Every tensor autograd saves while backward recomputes has at most one chunk of edge rows."""
    part = _part()
    config = ModelConfig(hidden=8, num_iterations=2, checkpointing=True, chunk_rows=50)
    torch.manual_seed(0)
    model = InteractionNetwork(config).double()
    logits = model(part, _Halo(part.num_halo, 8, torch.float64))
    rows: list[int] = []

    def pack(tensor):
        rows.append(tensor.shape[0] if tensor.ndim else 0)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits.sum().backward()
    assert 50 in rows and max(rows) <= max(50, part.num_local_nodes) < part.num_edges  # node rows: the node MLPs
    unchunked = []
    model.zero_grad()
    logits = InteractionNetwork(ModelConfig(hidden=8, num_iterations=2, checkpointing=True, chunk_rows=10**6)).double()(
        part, _Halo(part.num_halo, 8, torch.float64))
    with torch.autograd.graph.saved_tensors_hooks(lambda t: unchunked.append(t.shape[0] if t.ndim else 0) or t, lambda t: t):
        logits.sum().backward()
    assert max(unchunked) == part.num_edges  # the measure sees a whole E-row tensor when there is one


def test_forward_keeps_only_the_inputs():
    """The iterations keep e (E rows) and node rows only: no tensor of the MLPs' activations."""
    part = _part()
    config = ModelConfig(hidden=8, num_iterations=3, checkpointing=True, chunk_rows=64)
    torch.manual_seed(0)
    model = InteractionNetwork(config).double()
    saved: dict[int, tuple] = {}

    def pack(tensor):
        saved[tensor.untyped_storage()._cdata] = tuple(tensor.shape)
        return tensor

    params = {p.untyped_storage()._cdata for p in model.parameters()}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(part, _Halo(part.num_halo, 8, torch.float64))
    edge_tensors = [shape for key, shape in saved.items() if key not in params and shape[0] == part.num_edges]
    # edge_attr, then e_0 … e_3 (each iteration's input, the last one the head's): nothing else with E rows.
    assert sorted(edge_tensors) == sorted([(part.num_edges, 4)] + [(part.num_edges, 8)] * 4)


def test_chunked_training_step_is_bitwise_repeatable():
    part = _part(dtype=torch.float32)
    runs = []
    for _ in range(2):
        _, grads = _grads(ModelConfig(hidden=8, num_iterations=2, activation="relu", checkpointing=True, chunk_rows=33),
                          part, dtype=torch.float32)
        runs.append(grads)
    assert all(torch.equal(runs[0][name], runs[1][name]) for name in runs[0])


def test_config_checks_chunk_rows_and_compile():
    from domainpar.errors import FieldError

    with pytest.raises(FieldError, match="chunk_rows"):
        ModelConfig(chunk_rows=-1)
    with pytest.raises(FieldError, match="compile"):
        ModelConfig(compile="yes")


@pytest.mark.slow
def test_compiled_row_pieces_equal_eager():
    """compile='on' (Inductor's C++ backend here, Triton on CUDA): the compiled tails and gathers give the eager gradients.

    Float64, so compiled (reassociated) and eager sums agree far below the tolerance; both the autograd
    path (no checkpointing) and the chunked one (its inference and training graphs) run compiled.
    """
    from domainpar.kernels import compile as compiler

    if not compiler.available("cpu"):
        pytest.skip("no C++ compiler for Inductor's CPU backend")
    part = _part()
    case = dict(hidden=8, num_iterations=2, activation="silu", mlp_layers=2)
    want_logits, want = _grads(ModelConfig(compile="off", **case), part)
    for checkpointing in (False, True):
        config = ModelConfig(compile="on", checkpointing=checkpointing, chunk_rows=150, **case)
        got_logits, got = _grads(config, part)
        assert torch.allclose(got_logits, want_logits, rtol=0, atol=1e-12)
        for name, grad in want.items():
            assert torch.allclose(got[name], grad, rtol=1e-10, atol=1e-12), (checkpointing, name)
    assert len(compiler._CACHE) >= 2  # the tail and the gather really went through torch.compile


def test_chunk_rows_automatic_and_capped():
    from domainpar.model.chunked import MAX_CHUNKS, MIN_AUTO_ROWS, chunk_rows

    assert chunk_rows(0, 100) == MIN_AUTO_ROWS  # small graphs: one chunk
    assert chunk_rows(0, 16 * 10**6) == 10**6  # a sixteenth on CPU
    assert chunk_rows(0, 16 * 10**6, "cpu") == 10**6
    assert chunk_rows(0, 16 * 10**6, "cuda") == 2 * 10**6  # an eighth on a GPU (per-chunk call overhead)
    assert chunk_rows(37, 400, "cuda") == 37
    assert chunk_rows(37, 400) == 37
    assert chunk_rows(1, 10**6) == -(-10**6 // MAX_CHUNKS)  # a per-row chunk would keep a grouping per chunk


def test_compile_setting_selects_by_device():
    """auto compiles CUDA tensors only (where Triton is); off never; on everywhere; meta tensors never."""
    from domainpar.kernels import compile as compiler

    cpu = torch.zeros(2, 2)
    assert not compiler.use_compile("auto", cpu)
    assert not compiler.use_compile("off", cpu)
    assert compiler.use_compile("on", cpu)
    assert not compiler.use_compile("on", torch.zeros(2, 2, device="meta"))
    if torch.cuda.is_available():
        assert compiler.use_compile("auto", cpu.cuda()) == compiler.available("cuda")


DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _device_grads(config: ModelConfig, part, dtype):
    torch.manual_seed(0)
    model = InteractionNetwork(config).to(DEVICE, dtype)
    halo = _Halo(part.num_halo, config.hidden, dtype)
    halo.halo = halo.halo.detach().to(DEVICE).requires_grad_()
    weights = torch.linspace(-1, 1, part.num_edges, dtype=dtype, device=DEVICE)
    logits = model(part.to(DEVICE, dtype), halo)
    got = torch.autograd.grad((logits * weights).sum(), list(model.parameters()) + [halo.halo])
    return logits.detach().cpu(), [g.cpu() for g in got]


def test_default_device_chunked_and_compiled_equal_plain():
    """On the default device (CUDA when present: compile auto runs Inductor's Triton kernels there) the
    chunked, compiled step gives the plain step's logits and gradients (float64), and a float32 step
    is bitwise repeatable (no atomics in the sums, compiled reductions ordered)."""
    part = _part()
    case = dict(hidden=8, num_iterations=2, activation="relu", mlp_layers=3)
    want_logits, want = _device_grads(ModelConfig(compile="off", **case), part, torch.float64)
    got_logits, got = _device_grads(ModelConfig(compile="auto", checkpointing=True, chunk_rows=150, **case), part, torch.float64)
    assert torch.allclose(got_logits, want_logits, rtol=0, atol=1e-12)
    for a, b in zip(got, want):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)
    config = ModelConfig(compile="auto", checkpointing=True, chunk_rows=150, **case)
    first, second = (_device_grads(config, part, torch.float32)[1] for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(first, second))


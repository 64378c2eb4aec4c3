"""The distributed checks of the engine, run in ONE spawned job of four gloo processes.

``tests/verification/test_exactness.py`` and ``tests/comm/test_halo_exchange.py`` read their results from
:func:`results_for` / :func:`comm_results`; whichever runs first pays for the
single spawn (process start-up and torch import dominate on a 2-core machine).

Inside the job: the halo-exchange and reduction unit checks on the world
group, then the exactness matrix as domain groups of 1, 2, 3 and 4 ranks
(P=4: all; P=3 on ranks 0-2 while rank 3 runs P=1; P=2 on ranks 0-1 and 2-3 at
once, which also exercises subgroup addressing).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
import torch.distributed as dist

from domainpar.comm.halo import HaloExchange
from domainpar.comm.reduce import all_reduce_gradients, all_reduce_sum
from domainpar.data.event_graph import EventGraph
from domainpar.errors import DomainparError
from domainpar.model.config import ModelConfig
from domainpar.model.loss import LossConfig
from domainpar.partition import build_plan, partition_graph
from domainpar.launch.ranks import spawn
from domainpar.verification.cases import VerifyCase, VerifyJob
from domainpar.verification.worker import verify_jobs_worker
from fixtures import REPO, TRACKML_DIR, random_graph

CONFIG = ModelConfig(hidden=16, num_iterations=2, mlp_layers=2)
#: The example user model (examples/custom_layer.py), built by import path like any user's.
USER_MODEL = f"{REPO / 'examples' / 'custom_layer.py'}:AttentionEdgeClassifier"
#: A target-particle selection with every kind of weight (acorn's weighting).
TARGET_LOSS = LossConfig(weighting="targets", target_min_pt=0.5, target_min_hits=5, target_primary=True, target_weight=3.0,
                         non_target_weight=0.2, fake_weight=1.0)  # fmt: skip
#: Every built-in model other than the Interaction Network, and the example user model, small (float64 cases
#: on the real event and a dense random graph): name → (model name, shared settings, options).
MODELS = {
    "ign": ("interaction_gnn", {}, {}),
    "ign-acorn": ("interaction_gnn", {"checkpointing": True, "recurrent": False},
                  {"aggregation": ["sum", "max", "mean", "min"], "undirected": True}),
    "ign-exatrkx": ("interaction_gnn", {"use_edge_features": False}, {"messages": "in", "residual": True}),
    "pyg-gatv2": ("pyg_gnn", {}, {"layer": "gatv2", "heads": 2}),
    "pyg-edgeconv": ("pyg_gnn", {"use_edge_features": False}, {"layer": "edgeconv", "aggregation": "max"}),
    "pyg-gcn": ("pyg_gnn", {}, {"layer": "gcn", "undirected": False}),
    "user-attention": (USER_MODEL, {}, {"heads": 2}),
}
VARIANTS = [(False, False), (True, False), (False, True), (True, True)]  # (checkpointing, overlap)
WORLD_SIZES = [1, 2, 3, 4]


@lru_cache(maxsize=None)
def simulated_graph() -> EventGraph:
    from domainpar.data.graph import build_graph
    from domainpar.sim.config import SimulationConfig
    from domainpar.sim.event import simulate_event

    # 800 collision particles (~10k hits with their secondaries and noise): dense enough that METIS must cut at 2-4
    # parts (at 300 it found cut-free splits). Not larger: float32's own rounding grows with the graph (one process in
    # float32 against float64, worst relative gradient error: 3.0e-6 at 10.3k hits, 8.4e-6 at 12.7k), and the float32
    # cases are to measure the partition at 1e-5, not float32; float64 at 1e-10 is the proof at any size.
    event = simulate_event(SimulationConfig(num_particles=800), 1, 7)
    graph, _ = build_graph(event["hits"], event["truth"], event["particles"], event_id=1)
    return graph


@lru_cache(maxsize=None)
def real_graph() -> EventGraph:
    from domainpar.data.graph import build_event_graph

    graph, _ = build_event_graph(TRACKML_DIR / "event000000001")
    return graph


@lru_cache(maxsize=None)
def recipe_case(name: str = "physics", device: str = "cpu") -> tuple[EventGraph, ModelConfig]:
    """A simulated event built with a recipe's graph (cuts, cell and cluster features, the full-event recipe's
    triplet features) and the recipe's model (width, iterations, activation, normalisation, checkpointing) as run on
    ``device`` (its profile), so the exactness matrix covers what the shipped recipes train. (A recipe's edge
    filter only removes edges: a pruned graph is a graph like this one.)"""
    from pathlib import Path

    from domainpar.data.graph import build_graph
    from domainpar.pipeline.recipe import load_recipe
    from domainpar.sim.config import SimulationConfig
    from domainpar.sim.event import simulate_event

    recipe = load_recipe(Path(__file__).resolve().parents[1] / "examples" / f"{name}.yaml", device=device)
    event = simulate_event(SimulationConfig(num_particles=400), 3, 7)
    graph, _ = build_graph(event["hits"], event["truth"], event["particles"], event["cells"], config=recipe.graph, event_id=3)
    model = recipe.train.model
    config = ModelConfig(**{**model.to_dict(), "node_features": graph.x.shape[1], "edge_features": graph.edge_attr.shape[1]})
    return graph, config


@lru_cache(maxsize=None)
def dense_graph() -> EventGraph:
    """Random edges: most edges are cut, every part talks to every other."""
    return random_graph(240, 900, seed=3)


@lru_cache(maxsize=None)
def two_components_graph() -> EventGraph:
    """Two disconnected random subgraphs: nodes 0..59 and 60..119."""
    rng = np.random.default_rng(5)
    left = rng.integers(0, 60, size=(2, 200))
    right = rng.integers(60, 120, size=(2, 200))
    base = random_graph(120, 400, seed=5)
    return EventGraph(
        event_id=5, x=base.x, pos=base.pos, hit_id=base.hit_id, layer=base.layer,
        edge_index=np.concatenate([left, right], axis=1).astype(np.int64),
        edge_attr=base.edge_attr, y=base.y,
    )


def two_components_owner(world_size: int) -> np.ndarray:
    """Second component on the last part alone; the first split over the other parts."""
    owner = np.full(120, world_size - 1, dtype=np.int64)
    owner[:60] = np.arange(60) % max(world_size - 1, 1)
    return owner


@lru_cache(maxsize=None)
def star_graph() -> EventGraph:
    """Node 0 (part 0) receives edges from nodes of parts 1, 2 and 3, plus random edges."""
    base = random_graph(80, 160, seed=9)
    into_hub = np.stack([np.array([20, 40, 60, 21, 41, 61]), np.zeros(6, np.int64)])
    edge_index = np.concatenate([base.edge_index, into_hub], axis=1).astype(np.int64)
    rng = np.random.default_rng(9)
    return EventGraph(
        event_id=9, x=base.x, pos=base.pos, hit_id=base.hit_id, layer=base.layer, edge_index=edge_index,
        edge_attr=rng.normal(size=(edge_index.shape[1], 4)).astype(np.float32),
        y=(rng.random(edge_index.shape[1]) < 0.4).astype(np.float32),
    )


STAR_OWNER = (np.arange(80) // 20).astype(np.int64)  # parts 0..3 own nodes 0-19, 20-39, 40-59, 60-79


def cases_for(world_size: int) -> list[VerifyCase]:
    cases = []
    for graph_name, graph in (("simulated", simulated_graph()), ("real", real_graph())):
        for method in ("metis", "geometric"):
            owner = partition_graph(graph, world_size, method, seed=0).owner
            for checkpointing, overlap in VARIANTS:
                config = ModelConfig(**{**CONFIG.to_dict(), "checkpointing": checkpointing, "overlap": overlap})
                name = f"{graph_name}/{method}/ckpt={int(checkpointing)}/overlap={int(overlap)}"
                cases.append(VerifyCase(name + "/float64", graph, owner, config, dtype="float64"))
                if checkpointing == overlap:  # float32 at the tolerance: plain and both features on
                    cases.append(VerifyCase(name + "/float32", graph, owner, config, dtype="float32"))
    recipe_graph, recipe_config = recipe_case()
    owner = partition_graph(recipe_graph, world_size, "metis", seed=0).owner
    cases.append(VerifyCase("recipe/metis/float64", recipe_graph, owner, recipe_config, dtype="float64"))
    cases.append(VerifyCase("recipe/metis/float32", recipe_graph, owner, recipe_config, dtype="float32"))
    # The full-event recipe: trained on METIS parts, evaluated on geometric ones; its GPU profile's model too.
    for device in ("cpu", "cuda"):
        full_graph, full_config = recipe_case("full_event", device)
        label = "full_event" if device == "cpu" else "full_event-cuda"
        for method in ("metis", "geometric") if device == "cpu" else ("metis",):
            owner = partition_graph(full_graph, world_size, method, seed=0).owner
            cases.append(VerifyCase(f"{label}/{method}/float64", full_graph, owner, full_config, dtype="float64"))
        cases.append(VerifyCase(f"{label}/metis/float32", full_graph, owner, full_config, dtype="float32"))
    dense = dense_graph()
    dense_owner = np.random.default_rng(world_size).integers(0, world_size, dense.num_nodes)
    dense_owner[:world_size] = np.arange(world_size)
    dense_config = ModelConfig(hidden=16, num_iterations=3, recurrent=False, activation="tanh", overlap=True)
    cases.append(VerifyCase("dense/random-owner/float64", dense, dense_owner, dense_config, pos_weight=3.0))
    cases.append(VerifyCase("dense/random-owner/float32", dense, dense_owner, dense_config, dtype="float32", pos_weight=3.0))
    if world_size >= 2:
        owner = two_components_owner(world_size)
        cases.append(VerifyCase("no-neighbours/float64", two_components_graph(), owner, CONFIG))
    if world_size == 4:
        cases.append(VerifyCase("three-part-halo/float64", star_graph(), STAR_OWNER, replace_config(overlap=True)))
        cases.append(VerifyCase("three-part-halo/ckpt/float64", star_graph(), STAR_OWNER, replace_config(checkpointing=True)))
    if world_size == 2:
        for fault in ("zero_halo", "drop_halo_grad"):
            cases.append(VerifyCase(f"fault={fault}/float64", dense, dense_owner, CONFIG, fault=fault))
    real = real_graph()
    owners = {method: partition_graph(real, world_size, method, seed=0).owner for method in ("metis", "geometric")}
    # The target-weighted loss (acorn's weighting), normalised by the event's weight sum reduced over the group.
    for label, config in (("in", CONFIG), ("ign", model_config(real, *MODELS["ign"]))):
        for method in ("metis", "geometric"):
            cases.append(VerifyCase(f"loss-targets/{label}/real/{method}/float64", real, owners[method], config, loss=TARGET_LOSS))
    for label, (name, settings, options) in MODELS.items():
        for graph_name, graph, owner in (
            ("real/metis", real, owners["metis"]), ("real/geometric", real, owners["geometric"]), ("dense", dense, dense_owner),
        ):
            config = model_config(graph, name, settings, options)
            cases.append(VerifyCase(f"{label}/{graph_name}/float64", graph, owner, config, pos_weight=2.0))
    return cases


def model_config(graph: EventGraph, name: str, settings: dict, options: dict) -> ModelConfig:
    """A small model of ``name`` for ``graph``'s widths."""
    return ModelConfig(
        name=name, node_features=int(graph.x.shape[1]), edge_features=int(graph.edge_attr.shape[1]), hidden=8,
        num_iterations=2, options=options, **settings,
    )  # fmt: skip


def replace_config(**changes) -> ModelConfig:
    return ModelConfig(**{**CONFIG.to_dict(), **changes})


# ---- halo exchange and reduction unit checks ------------------------------------------------

WORLD = 4
NUM_NODES = 90


def _plan(seed: int):
    graph = random_graph(NUM_NODES, 300, seed=seed)
    owner = np.random.default_rng(seed).integers(0, WORLD, NUM_NODES)
    owner[:WORLD] = np.arange(WORLD)
    return build_plan(graph.edge_index, owner, WORLD)


def _exchange_checks(rank: int) -> dict:
    """Forward delivers the owners' rows; backward adds every copy's gradient into the owner's row."""
    plan = _plan(1)
    part = plan.parts[rank]
    features = torch.randn(NUM_NODES, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    upstream = torch.randn(NUM_NODES, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    exchange = HaloExchange(part)
    local_ids = torch.as_tensor(np.concatenate([part.owned_ids, part.halo_ids]))
    owned_ids = torch.tensor(part.owned_ids)
    # Copies of every node over all parts (owned once + once per part holding it as halo).
    copies = np.ones(NUM_NODES)
    for other in plan.parts:
        np.add.at(copies, other.halo_ids, 1)
    expected_grad = upstream[owned_ids] * torch.as_tensor(copies[part.owned_ids]).unsqueeze(1)
    checks = {}
    for mode in ("sync", "async", "sync-again"):  # the third call reuses the buffers
        x = features[owned_ids].clone().requires_grad_(True)
        out = exchange(x) if mode != "async" else exchange.start(x).wait()
        checks[f"{mode}-forward"] = bool(torch.equal(out.detach(), features[local_ids]))
        (out * upstream[local_ids]).sum().backward()
        checks[f"{mode}-backward"] = bool(torch.allclose(x.grad, expected_grad, rtol=1e-14, atol=0))
    checks["float32"] = bool(torch.equal(exchange(features[owned_ids].float()), features[local_ids].float()))
    checks["bytes"] = exchange.bytes_per_exchange(5, torch.float64) == part.send_ids.size * 5 * 8
    checks["buffers"] = len(exchange._buffers)  # send + grad for float64, send for float32
    # What was really sent: three float64 exchanges and one float32 exchange of 5 columns, then one of 2 columns.
    exchange(features[owned_ids][:, :2].float())
    checks["bytes_sent"] = exchange.bytes_sent == part.send_ids.size * (3 * 5 * 8 + 5 * 4 + 2 * 4)
    return checks


def _reduce_checks(rank: int) -> dict:
    """Domain groups {0,1}, {2,3}; replica groups {0,2}, {1,3}: SUM over domain, MEAN over replicas."""
    domain = [dist.new_group([0, 1]), dist.new_group([2, 3])][rank // 2]
    replica = [dist.new_group([0, 2]), dist.new_group([1, 3])][rank % 2]
    module = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    module[1].bias.requires_grad_(True)
    for index, param in enumerate(module.parameters()):
        param.grad = torch.full_like(param, float((rank + 1) * (index + 1)))
    module[1].bias.grad = None  # unused on every rank: becomes zeros, collectives stay matched
    all_reduce_gradients(module, domain, replica, bucket_elements=7)  # several buckets
    # domain sums: ranks 0+1 -> 3, ranks 2+3 -> 7; mean over replicas -> 5, times (index + 1)
    grads = [p.grad for p in module.parameters()]
    ok = all(torch.equal(g, torch.full_like(g, 5.0 * (i + 1))) for i, g in enumerate(grads[:3]))
    total = all_reduce_sum(torch.tensor([float(rank)], requires_grad=True))
    return {
        "reduce": ok,
        "unused-zero": bool(torch.equal(grads[3], torch.zeros_like(grads[3]))),
        "sum": float(total) == 6.0 and not total.requires_grad,
    }


def _error_checks(rank: int) -> dict:
    errors = {}
    plan = _plan(1)
    try:
        HaloExchange(plan.parts[(rank + 1) % WORLD])
    except DomainparError as exc:
        errors["wrong-part"] = str(exc)
    other = _plan(2)
    mixed = other.parts[0] if rank == 0 else plan.parts[rank]  # rank 0 uses a different plan
    try:
        HaloExchange(mixed)
    except DomainparError as exc:
        errors["mismatch"] = str(exc)
    try:
        HaloExchange(plan.parts[rank])(torch.zeros(3, 2))
    except DomainparError as exc:
        errors["shape"] = str(exc)
    return errors





def _gcn_local_degrees(rank: int) -> dict:
    """GCN's own normalisation on a part (degrees counted on the local edges) is NOT exact: the error of the owned
    outputs against the whole graph's, and with the exchanged global degrees (``gcn_norm_local``) as the control."""
    from torch_geometric.nn import GCNConv
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    from domainpar.model.pyg import DomainParallelConv, gcn_norm_local
    from domainpar.parallel.part import rank_part

    graph = dense_graph()
    owner = np.random.default_rng(WORLD).integers(0, WORLD, graph.num_nodes)
    owner[:WORLD] = np.arange(WORLD)
    torch.manual_seed(0)
    conv = DomainParallelConv(GCNConv(graph.x.shape[1], 8, normalize=False)).double()
    whole = rank_part(graph, dtype=torch.float64)
    edges, weight = gcn_norm_local(whole.graph, whole.exchange)
    reference = conv(whole.graph.x, whole.graph, whole.exchange, edges, edge_weight=weight).detach()
    rp = rank_part(graph, rank, None, "cpu", torch.float64, plan=build_plan(graph.edge_index, owner, WORLD))
    owned = torch.as_tensor(rp.data.plan.owned_ids)
    errors = {}
    naive = gcn_norm(rp.graph.edge_index, None, rp.graph.num_local_nodes, dtype=rp.graph.x.dtype)
    for label, (edges, weight) in (("local", naive), ("global", gcn_norm_local(rp.graph, rp.exchange))):
        out = conv(rp.graph.x, rp.graph, rp.exchange, edges, edge_weight=weight).detach()
        errors[label] = float((out - reference[owned]).abs().max())
    return errors


def engine_worker(rank: int, world_size: int, jobs: list[VerifyJob]) -> dict:
    """One rank of the job: unit checks first, then the exactness jobs (counting the single-process reference runs
    this rank makes)."""
    from domainpar.verification import worker

    identity = (rank, world_size, dist.get_rank(), dist.get_world_size(), dist.get_backend())
    comm = {"exchange": _exchange_checks(rank), "reduce": _reduce_checks(rank), "errors": _error_checks(rank),
            "gcn_degrees": _gcn_local_degrees(rank)}
    made = []
    reference = worker._reference

    def counted(case, device):
        made.append(case.name)
        return reference(case, device)

    worker._reference = counted
    try:
        verify = verify_jobs_worker(rank, world_size, jobs)
    finally:
        worker._reference = reference
    return {"identity": identity, "comm": comm, "verify": verify, "references": made}


_RESULTS: dict[int, dict[str, object]] = {}
_COMM: list[dict] = []
#: The jobs run, and per rank the names of the cases whose single-process reference it ran.
_JOBS: list[VerifyJob] = []
_REFERENCES: list[list[str]] = []


def reference_runs() -> tuple[list[VerifyJob], list[list[str]]]:
    """The jobs of the engine job and, per rank, the cases whose reference run it made (rank order)."""
    _run_engine_job()
    return _JOBS, _REFERENCES


def comm_results() -> list[dict]:
    """Per-rank results of the exchange/reduction checks (rank order)."""
    _run_engine_job()
    return _COMM


def results_for(world_size: int) -> dict[str, object]:
    """Verification results by case name for one world size."""
    _run_engine_job()
    return _RESULTS[world_size]


def _run_engine_job() -> None:
    if not _RESULTS:
        by_size = {p: cases_for(p) for p in WORLD_SIZES}
        two_cases = by_size[2]
        jobs = [
            VerifyJob((0, 1, 2, 3), tuple(by_size[4])),
            VerifyJob((0, 1, 2), tuple(by_size[3])),
            VerifyJob((3,), tuple(by_size[1])),
            VerifyJob((0, 1), tuple(two_cases[0::2])),
            VerifyJob((2, 3), tuple(two_cases[1::2])),
        ]
        per_rank = spawn(engine_worker, 4, args=(jobs,), timeout_s=600, num_threads=1)
        _COMM.extend({**r["comm"], "identity": r["identity"]} for r in per_rank)
        _JOBS.extend(jobs)
        _REFERENCES.extend(r["references"] for r in per_rank)
        led = {index: results for rank_results in per_rank for index, results in rank_results["verify"].items()}
        assert sorted(led) == list(range(len(jobs)))
        for index, job in enumerate(jobs):
            size = len(job.ranks)
            for result in led[index]:
                assert result.num_parts == size
                _RESULTS.setdefault(size, {})[result.name] = result



"""The engine's contract: partitioned logits, loss and every gradient equal one process.

ONE spawned gloo job of four processes (``tests/engine_jobs.py``) runs every
configuration inside the children, to pay process start-up once: world sizes
1, 2, 3 and 4 are domain groups of the four ranks. Cases: a reduced simulated event
(800 collision particles and their secondaries, ~10k hits) and the real small event (5.5k hits), METIS and geometric plans,
simulated events built with the physics and the full-event recipes' graph features run by each recipe's model
(and the full-event recipe's GPU profile's model),
with and without activation checkpointing and with and without overlap, in
float64 (tolerance 1e-10) and float32 (1e-5), plus synthetic graphs with
many cut edges, a part without neighbours, a node whose halo comes from three
parts, every other built-in model (the field's InteractionGNN in three set-ups,
PyG layer stacks: GATv2, EdgeConv, GCN with exchanged degrees) and the example
user model of examples/custom_layer.py, and deliberately broken exchanges (and
GCN's local degree count) that must fail.

Error measures (see :mod:`domainpar.verification`): max |logit_part −
logit_full| over every local copy of every edge; relative loss error; per
parameter tensor max|g_part − g_full| / max|g_full| with g_part the sum over
ranks, maximised over tensors.
"""

from __future__ import annotations

import pytest

from domainpar.partition import build_plan
from domainpar.verification.cases import TOLERANCES
from engine_jobs import (
    MODELS,
    STAR_OWNER,
    USER_MODEL,
    WORLD_SIZES,
    comm_results,
    reference_runs,
    results_for,
    star_graph,
    two_components_graph,
    two_components_owner,
)

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def _describe(result) -> str:
    return (
        f"{result.name} P={result.num_parts}: logits {result.max_abs_err_logits:.2e}, loss {result.rel_err_loss:.2e}, "
        f"grad {result.max_rel_err_grad:.2e} ({result.worst_parameter}), tol {result.tolerance:g}, halo {result.num_halo}"
    )


@pytest.mark.timeout(660)
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_partitioned_equals_single_process(world_size):
    results = results_for(world_size)
    exact = [r for r in results.values() if "fault=" not in r.name]
    failures = [_describe(r) for r in exact if not r.passed]
    assert not failures, "\n".join(failures)
    expected = {f"{g}/{m}/ckpt={c}/overlap={o}/float64" for g in ("simulated", "real") for m in ("metis", "geometric")
                for c in (0, 1) for o in (0, 1)}
    expected |= {f"{g}/{m}/ckpt={c}/overlap={c}/float32" for g in ("simulated", "real") for m in ("metis", "geometric")
                 for c in (0, 1)}
    expected |= {"recipe/metis/float64", "recipe/metis/float32"}  # the physics recipe's graph features and model
    # The full-event recipe's graph (triplet features) and model (checkpointing), as trained and as evaluated, and
    # its GPU profile's model.
    expected |= {"full_event/metis/float64", "full_event/geometric/float64", "full_event/metis/float32"}
    expected |= {"full_event-cuda/metis/float64", "full_event-cuda/metis/float32"}
    assert expected <= set(results)
    for result in exact:
        assert result.tolerance == TOLERANCES[result.dtype]
        assert result.max_rel_err_grad <= TOLERANCES[result.dtype]
    if world_size > 1:
        # The partitions really have halos: the test is not vacuous.
        assert sum(results["real/geometric/ckpt=0/overlap=0/float64"].num_halo) > 0
        assert sum(results["simulated/metis/ckpt=0/overlap=0/float64"].num_halo) > 0
        assert sum(results["simulated/geometric/ckpt=0/overlap=0/float64"].num_halo) > 0
        assert sum(results["dense/random-owner/float64"].num_halo) > 0
        assert sum(results["recipe/metis/float64"].num_halo) > 0
        assert sum(results["full_event/geometric/float64"].num_halo) > 0


@pytest.mark.timeout(660)
@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_part_without_neighbours(world_size):
    owner = two_components_owner(world_size)
    plan = build_plan(two_components_graph().edge_index, owner, world_size)
    assert plan.parts[world_size - 1].recv_parts.size == 0 and plan.parts[world_size - 1].send_parts.size == 0
    result = results_for(world_size)["no-neighbours/float64"]
    assert result.passed, _describe(result)


@pytest.mark.timeout(660)
def test_halo_from_three_parts():
    plan = build_plan(star_graph().edge_index, STAR_OWNER, 4)
    assert plan.parts[0].recv_parts.tolist() == [1, 2, 3]
    for part in plan.parts[1:]:
        assert 0 in part.halo_ids  # the hub's row is sent to three parts; its gradient comes back from three
    results = results_for(4)
    for name in ("three-part-halo/float64", "three-part-halo/ckpt/float64"):
        assert results[name].passed, _describe(results[name])


@pytest.mark.timeout(660)
@pytest.mark.parametrize("fault", ["zero_halo", "drop_halo_grad"])
def test_broken_exchange_is_caught(fault):
    result = results_for(2)[f"fault={fault}/float64"]
    assert not result.passed
    assert result.max_rel_err_grad > 1e-3, _describe(result)
    if fault == "zero_halo":
        assert result.max_abs_err_logits > 1e-3, _describe(result)


@pytest.mark.timeout(660)
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_every_model_is_exact(world_size):
    """Every built-in model and the example user model: the real event (METIS and geometric parts) and a dense
    random graph, float64, 1-4 ranks."""
    results = results_for(world_size)
    expected = {f"{label}/{graph}/float64" for label in MODELS for graph in ("real/metis", "real/geometric", "dense")}
    assert expected <= set(results)
    failures = [_describe(results[name]) for name in sorted(expected) if not results[name].passed]
    assert not failures, "\n".join(failures)
    if world_size > 1:
        for label in MODELS:
            assert sum(results[f"{label}/dense/float64"].num_halo) > 0
            assert sum(results[f"{label}/real/geometric/float64"].num_halo) > 0
    assert {name for name, *_ in MODELS.values()} >= {"interaction_gnn", "pyg_gnn", USER_MODEL}


@pytest.mark.timeout(660)
def test_gcn_needs_global_degrees():
    """GCN's normalisation with degrees counted on the local graph only is NOT exact; exchanged degrees are."""
    for rank_result in comm_results():
        assert rank_result["gcn_degrees"]["global"] <= 1e-10, rank_result["gcn_degrees"]
    assert max(r["gcn_degrees"]["local"] for r in comm_results()) > 1e-6


@pytest.mark.timeout(660)
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_target_weighted_loss_is_exact(world_size):
    """acorn's weighting (target particles by pT, hits and vertex; three weights), normalised by the event's weight
    sum reduced over the domain group: the partitioned loss and gradients equal one process's."""
    results = results_for(world_size)
    names = [f"loss-targets/{m}/real/{p}/float64" for m in ("in", "ign") for p in ("metis", "geometric")]
    failures = [_describe(results[name]) for name in names if not results[name].passed]
    assert not failures, "\n".join(failures)
    # The weighting changes the loss: it is not the pos_weight loss of the same case.
    assert results["loss-targets/in/real/metis/float64"].loss_full != results["real/metis/ckpt=0/overlap=0/float64"].loss_full


@pytest.mark.timeout(660)
def test_a_rank_leading_several_jobs_runs_each_reference_once():
    """Rank 0 leads the 4-, 3- and one 2-part job over the same cases: one single-process run per distinct case
    (the reference does not depend on the parts), not one per job; rank 3 leads the 1-part job alone."""
    import torch

    from domainpar.verification.worker import _reference_key

    jobs, made = reference_runs()
    cpu = torch.device("cpu")
    for rank, names in enumerate(made):
        led = [case for job in jobs if job.ranks[0] == rank for case in job.cases]
        distinct = {_reference_key(case, cpu) for case in led}
        assert len(names) == len(distinct), (rank, len(names), len(distinct), len(led))
    assert len(made[0]) < sum(len(job.cases) for job in jobs if job.ranks[0] == 0)

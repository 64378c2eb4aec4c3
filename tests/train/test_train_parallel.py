"""Domain-parallel training equals single-process training; sectors mode runs; a failing rank is named.

Two spawned gloo jobs (2 and 4 ranks) run every configuration, in float64 so
that the comparison with the single process can be tight (the partitioned
sums only reorder additions: differences are ~1e-16).
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch

from domainpar.data.graph_files import load_graph
from domainpar.errors import DomainparError
from domainpar.launch.ranks import spawn
from domainpar.npzfile import archive_digest
from domainpar.partition import partition_graph
from domainpar.partition.io import save_plan
from domainpar.train.config import load_config
from domainpar.train.run import prepare_payload, train
from domainpar.train.trainer import run_rank
from fixtures import write_graphs

#: Every test but one reads the module's `runs` (nine trainings, ~1 min on 2 cores): all of it is the slow tier.
pytestmark = pytest.mark.slow

TIGHT = 1e-10  # float64: partitioning reorders sums, nothing more

#: Keys every metrics.jsonl record has (more may follow).
METRIC_KEYS = ("epoch", "train_loss", "val_loss", "efficiency", "purity", "auc", "seconds", "peak_memory_bytes", "halo_bytes",
               "data_wait_fraction")

BASE = {
    "model.hidden": 16,
    "model.num_iterations": 2,
    "run.epochs": 2,
    "optim.batch_events": 2,
    "optim.lr": 0.01,
    "optim.warmup": 1,
    "optim.clip": 0.5,  # small enough to be active: clipping must use the global norm
    "optim.pos_weight": 2.0,
    "run.precision": "fp64",
    "run.progress": False,
    "run.curves": False,
    "parallel.threads": 1,  # on a loaded 2-core machine, 2 OpenMP threads per rank thrash
}


def run_rank_sequence(rank: int, world_size: int, payloads: list[dict]) -> list[dict]:
    """Several trainings one after the other in the same ranks (amortising process start-up)."""
    return [run_rank(rank, world_size, payload) for payload in payloads]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("train_parallel")
    for path in write_graphs(root / "graphs", 4):
        # `domainpar partition` output layout: one plan directory per event.
        graph = load_graph(path)
        save_plan(partition_graph(graph, 2, method="geometric"), root / "plans" / f"event{graph.event_id:09d}", graph,
                  graph_digest=archive_digest(path))

    def config(name, **overrides):
        return load_config(None, {**BASE, "data.train": str(root / "graphs"), "run.out": str(root / name), **overrides})

    single = train(config("single", **{"parallel.mode": "single", "run.curves": True}))
    single_noclip = train(config("single_noclip", **{"parallel.mode": "single", "optim.clip": 0.0}))
    two = [
        # Plans made by the run, parts read synchronously (no prefetch, no cache) ...
        config("domain2", **{"parallel.mode": "domain", "parallel.ranks": 2, "data.prefetch": 0, "data.cache_gb": 0}),
        config("sectors2", **{"parallel.mode": "sectors", "parallel.ranks": 2}),
        config("domain2_overlap_ckpt", **{"parallel.mode": "domain", "parallel.ranks": 2, "model.overlap": True,
                                          "model.checkpointing": True, "data.method": "geometric"}),
        # ... and part files written by `domainpar partition`, read ahead by the prefetcher (3 events deep, no
        # cache: epoch 2 reads every part again): both the same training as one process.
        config("domain2_plans", **{"parallel.mode": "domain", "parallel.ranks": 2, "data.plans": str(root / "plans"),
                                   "data.prefetch": 3, "data.cache_gb": 0}),
        config("domain2_noclip", **{"parallel.mode": "domain", "parallel.ranks": 2, "optim.clip": 0.0}),
    ]
    four = [
        config("domain2x2", **{"parallel.mode": "domain", "parallel.ranks": 4, "parallel.domain_size": 2}),
        config("domain2x2_noclip", **{"parallel.mode": "domain", "parallel.ranks": 4, "parallel.domain_size": 2,
                                      "optim.clip": 0.0}),
    ]
    results = {"single": single, "single_noclip": single_noclip}
    per_rank = spawn(run_rank_sequence, 2, args=([prepare_payload(c, 2) for c in two],), timeout_s=200, num_threads=1)
    results.update(zip(["domain2", "sectors2", "domain2_overlap_ckpt", "domain2_plans", "domain2_noclip"], per_rank[0]))
    per_rank = spawn(run_rank_sequence, 4, args=([prepare_payload(c, 4) for c in four],), timeout_s=200, num_threads=1)
    results.update(zip(["domain2x2", "domain2x2_noclip"], per_rank[0]))
    return results


def _weights(summary) -> dict[str, torch.Tensor]:
    return torch.load(summary["model"], weights_only=True)["model"]


def _assert_same_training(run, reference):
    assert run["steps"] == reference["steps"] == 4
    np.testing.assert_allclose(run["step_losses"], reference["step_losses"], rtol=TIGHT, atol=0)
    ours, theirs = _weights(run), _weights(reference)
    assert ours.keys() == theirs.keys()
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], rtol=TIGHT, atol=TIGHT, msg=name)
    for key in ("val_loss", "efficiency", "purity", "auc"):
        assert run["final"][key] == pytest.approx(reference["final"][key], rel=1e-9, nan_ok=True), key


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["domain2", "domain2_overlap_ckpt", "domain2_plans", "domain2x2"])
def test_domain_training_equals_single(runs, name):
    _assert_same_training(runs[name], runs["single"])
    assert runs[name]["final"]["halo_bytes"] > 0
    # Training actually moved the weights (otherwise equality would be vacuous).
    assert runs["single"]["step_losses"][0] != runs["single"]["step_losses"][-1]


def _step_records(summary) -> list[dict]:
    return [json.loads(line) for line in open(f"{summary['out']}/steps.jsonl")]


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["domain2_noclip", "domain2x2_noclip"])
def test_unclipped_gradient_norm_of_every_step_equals_single(runs, name):
    """The reduced gradient itself, step by step, without clipping in the way.

    Under AdamW the final weights barely see a wrongly scaled gradient (Adam divides the scale out: a
    gradient doubled by a wrong reduction moved the weights of the clipped tests by 2.7e-10), and
    clipping hides it further; the global gradient norm that rank 0 logs for every step does not.
    """
    ours, theirs = _step_records(runs[name]), _step_records(runs["single_noclip"])
    assert [r["step"] for r in ours] == [r["step"] for r in theirs] == [1, 2, 3, 4]
    norms = [r["grad_norm"] for r in theirs]
    assert all(n > 0 for n in norms) and len(set(norms)) == len(norms)  # real, changing gradients
    np.testing.assert_allclose([r["grad_norm"] for r in ours], norms, rtol=TIGHT, atol=0)
    np.testing.assert_allclose([r["loss"] for r in ours], [r["loss"] for r in theirs], rtol=TIGHT, atol=0)
    _assert_same_training(runs[name], runs["single_noclip"])


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_hybrid_layout_reported(runs):
    run = runs["domain2x2"]
    assert (run["world_size"], run["domain_size"], run["num_replicas"]) == (4, 2, 2)


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_sectors_mode_runs_and_reports_metrics(runs):
    run = runs["sectors2"]
    assert run["steps"] == 4 and run["final"]["halo_bytes"] == 0
    records = [json.loads(line) for line in open(f"{run['out']}/metrics.jsonl")]
    assert [r["epoch"] for r in records] == [1, 2]
    for record in records:
        assert set(METRIC_KEYS) <= set(record)
        assert 0 <= record["efficiency"] <= 1 and 0 <= record["purity"] <= 1 and 0 <= record["auc"] <= 1
        # Every edge of every event is counted once, the dropped cut edges as rejected.
        assert record["val_edges"] == runs["single"]["final"]["val_edges"]
    # Sectors training sees other (cut-free) graphs: it must differ from the exact engine.
    assert not np.allclose(run["step_losses"], runs["single"]["step_losses"])


@pytest.mark.timeout(300)
def test_metrics_jsonl_and_curves(runs):
    out = runs["single"]["out"]
    records = [json.loads(line) for line in open(f"{out}/metrics.jsonl")]
    assert len(records) == 2
    for record in records:
        assert set(METRIC_KEYS) <= set(record)
        assert record["peak_memory_bytes"] > 0 and record["seconds"] > 0
    png = open(f"{out}/curves.png", "rb").read(8)
    assert png == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_every_step_reports_its_data_wait(runs):
    for name in ("single", "domain2", "domain2_plans"):
        out = runs[name]["out"]
        steps = [json.loads(line) for line in open(f"{out}/steps.jsonl")]
        assert len(steps) == 4
        for step in steps:
            assert 0 <= step["data_wait_seconds"] <= step["seconds"]
        for record in (json.loads(line) for line in open(f"{out}/metrics.jsonl")):
            assert 0 <= record["data_wait_fraction"] <= 1
            waits = sum(s["data_wait_seconds"] for s in steps if s["epoch"] == record["epoch"])
            assert record["data_wait_seconds"] == pytest.approx(waits)
    # Read synchronously, every step waits for its whole read; it cannot be zero.
    sync = [json.loads(line) for line in open(f"{runs['domain2']['out']}/steps.jsonl")]
    assert all(s["data_wait_seconds"] > 0 for s in sync)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_raising_rank_is_named(tmp_path):
    write_graphs(tmp_path / "graphs", 4)
    # Two validation graphs, the smaller with a NaN feature: load_graph refuses it on the rank that loads it.
    # Validation events are dealt largest first, so it is rank 1's (G = 1) first validation event, loaded
    # before step 1; rank 0 only ever loads clean events. (Damage of dtype or shape is refused before any rank starts.)
    val = write_graphs(tmp_path / "val", 2, first_id=100, seed=9)
    sizes = [np.load(p)["edge_index"].shape[1] for p in val]
    assert sizes[0] != sizes[1]
    damaged = val[int(np.argmin(sizes))]
    with np.load(damaged) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["x"][0, 0] = np.nan
    with open(damaged, "wb") as fh:
        np.savez_compressed(fh, **arrays)
    config = load_config(
        None,
        {**BASE, "data.train": str(tmp_path / "graphs"), "data.val": str(tmp_path / "val"), "run.out": str(tmp_path / "out"),
         "parallel.ranks": 2, "parallel.domain_size": 1, "parallel.timeout_s": 30},
    )
    start = time.monotonic()
    with pytest.raises(DomainparError, match=rf"^rank 1: .*{damaged.name}: x must be finite numbers \(got nan at \[0, 0\]\)"):
        train(config)
    assert time.monotonic() - start < 90


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_plans_read_from_partition_output(runs):
    # The stored plans are geometric: same halo traffic as geometric plans made on the fly.
    assert runs["domain2_plans"]["final"]["halo_bytes"] == runs["domain2_overlap_ckpt"]["final"]["halo_bytes"]

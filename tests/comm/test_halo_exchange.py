"""Halo exchange and gradient reductions on four spawned gloo ranks.

The checks run inside the shared engine job (tests/engine_jobs.py), one spawn for all distributed tests.
"""

from __future__ import annotations

import pytest

from engine_jobs import WORLD, comm_results

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def _results() -> list[dict]:
    return comm_results()


@pytest.mark.timeout(660)
def test_spawn_returns_values_in_rank_order():
    assert [r["identity"] for r in _results()] == [(k, WORLD, k, WORLD, "gloo") for k in range(WORLD)]


@pytest.mark.timeout(660)
def test_halo_exchange_forward_backward_and_buffers():
    for result in _results():
        checks = result["exchange"]
        assert all(checks[f"{m}-{d}"] for m in ("sync", "async", "sync-again") for d in ("forward", "backward")), checks
        assert checks["float32"] and checks["bytes"] and checks["bytes_sent"]
        assert checks["buffers"] == 3  # reused across steps, one per (kind, width, dtype)


@pytest.mark.timeout(660)
def test_gradient_reduction_sum_over_domain_mean_over_replicas():
    for result in _results():
        assert result["reduce"] == {"reduce": True, "unused-zero": True, "sum": True}


@pytest.mark.timeout(660)
def test_exchange_errors_are_one_line_and_name_the_problem():
    for rank, result in enumerate(_results()):
        errors = result["errors"]
        assert errors["wrong-part"] == f"rank {rank} of the domain group must be given part {rank} (got part {(rank + 1) % WORLD})"
        assert errors["mismatch"].startswith("halo plan mismatch: part ")
        assert "x_owned must have shape" in errors["shape"]
        assert all("\n" not in message for message in errors.values())

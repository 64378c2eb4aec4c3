"""The scaling section measures real multi-rank steps beside the scaling model: spawned (2 gloo ranks) and under torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.sections import Context
from bench.sections import scaling
from domainpar.data.event_graph import save_graph
from fixtures import REPO, random_graph

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def cutting_graph(tmp_path_factory) -> Path:
    """A graph every METIS cut cuts (random edges), small enough for seconds of steps."""
    path = tmp_path_factory.mktemp("scaling") / "random.npz"
    save_graph(random_graph(1500, 6000, seed=3), path)
    return path


def _check_rows(rows: list[dict]) -> None:
    assert [r["num_parts"] for r in rows] == [1, 2]
    one, two = rows
    # P = 1: no halo; the calibrated model agrees with the measured step by construction.
    assert one["halo_mb"] == 0 and one["exchanges_per_step"] == 0
    assert one["step_ms_model"] == pytest.approx(one["step_ms"], rel=1e-6)
    # P = 2: the halo really travelled, as many bytes and exchanges as the model counts from the plan.
    assert two["halo_mb"] > 0 and two["halo_mb"] == pytest.approx(two["halo_mb_model"], rel=1e-9)
    assert two["exchanges_per_step"] == two["exchanges_per_step_model"] == 2 * (2 + 1)
    assert two["exchange_ms"] > 0 and two["transfer_ms"] > 0 and two["exchange_ms_model"] > 0
    assert one["overlap_benefit"] == 1.0  # nothing to overlap on one rank: one setting, timed twice as often
    for row in rows:
        assert row["step_ms"] > 0 and row["step_overlap_ms"] > 0 and row["speedup"] > 0 and row["speedup_model"] > 0
        assert row["peak_mib_model"] > 0
    assert two["max_local_edges"] < one["max_local_edges"]


@pytest.mark.timeout(300)
def test_two_spawned_gloo_ranks_measure_beside_the_model(cutting_graph, tmp_path):
    ctx = Context(quick=True, device="cpu", cache=tmp_path, out=tmp_path, stem="t", graph=cutting_graph, hidden=8,
                  iterations=2)
    section = scaling.run(ctx, world=2)
    assert section.skipped is None
    _check_rows(section.rows)
    assert section.extra["link"]["latency_s"] > 0 and section.extra["link"]["bandwidth_bytes_s"] > 0
    assert any("NCCL between GPUs is not measured here" in note for note in section.notes)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_under_torchrun_rank_0_writes_the_report(cutting_graph, tmp_path):
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "SLURM_"))}
    done = subprocess.run(
        [str(torchrun), "--standalone", "--nproc-per-node", "2", "-m", "bench", "--only", "scaling", "--graph",
         str(cutting_graph), "--hidden", "8", "--iterations", "2", "--quick", "--out", str(tmp_path / "out")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=280,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (report,) = (tmp_path / "out").glob("*.json")
    payload = json.loads(report.read_text())
    _check_rows(payload["sections"]["scaling"]["rows"])
    assert "torchrun, 2 ranks" in payload["sections"]["scaling"]["extra"]["launch"]
    assert done.stdout.count("[bench] wrote") == 1  # rank 0 alone reports


@pytest.mark.timeout(120)
def test_single_process_sections_are_refused_under_torchrun(tmp_path):
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}
    done = subprocess.run([sys.executable, "-m", "bench", "--only", "memory", "--out", str(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=100)
    assert done.returncode == 2
    assert "only --only scaling runs" in done.stderr

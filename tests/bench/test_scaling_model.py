"""bench/scaling_model.py: the paper model's arithmetic on hand-checkable inputs.

bench/ is a top-level package of the repository (not installed); tests/conftest.py
puts the repository root on ``sys.path``.
"""

from __future__ import annotations

import json
import math

import pytest

from bench.common.report import Section, write_report
from bench.scaling_model import Assumptions, Hardware, load_inputs, markdown_table, predict
from domainpar.errors import DomainparError

HW = Hardware("test-gpu", fp32_tflops=10.0, hbm_tb_s=1.0, memory_gb=16.0, nvlink_gb_s=100.0, ib_gb_s=10.0, gpus_per_node=2)
EXACT = Assumptions(eta_flops=1.0, eta_hbm=1.0, latency_us=0.0, itemsize=4)
EXTRA = {"hidden": 8, "iterations": 3, "gpus_per_node": 2, "graph": "g", "num_nodes": 10, "num_edges": 1000}


def _row(num_parts, edges, flops, activation, halo):
    """A scaling-input row; ``halo`` = (recv_on, recv_off, send_on, send_off) per rank."""
    recv_on, recv_off, send_on, send_off = (list(x) for x in zip(*halo)) if halo else ([], [], [], [])
    return {
        "num_parts": num_parts, "max_local_edges": edges, "max_local_nodes": 10, "largest_interior_fraction": 0.5,
        "peak_bytes": activation + 100, "peak_bytes_ckpt": activation // 4, "activation_bytes": activation,
        "flops": flops, "flops_ckpt": flops * 4 // 3, "parameter_bytes": 40,
        "recv_on_node": recv_on, "recv_off_node": recv_off, "send_on_node": send_on, "send_off_node": send_off,
    }


def test_compute_is_the_slower_of_flops_and_activation_traffic():
    rows = [_row(1, 1000, flops=2 * 10**10, activation=10**9, halo=[])]
    (single,) = predict(rows, EXTRA, HW, EXACT)
    # 2e10 / 1e13 = 2 ms of matmuls; 3 × 1e9 / 1e12 = 3 ms of traffic: traffic wins.
    assert single["compute_ms"] == pytest.approx(3.0)
    assert single["exchange_ms"] == 0 and single["allreduce_ms"] == 0 and single["speedup"] == 1.0


def test_halo_time_takes_the_slowest_rank_and_both_link_classes():
    halo = [(100, 0, 100, 0), (100, 50, 100, 0), (0, 0, 0, 50), (0, 0, 0, 0)]  # 4 parts on 2 nodes
    rows = [_row(1, 1000, 10**9, 10**6, []), _row(4, 300, 3 * 10**8, 3 * 10**5, halo)]
    four = predict(rows, EXTRA, HW, EXACT)[1]
    row_bytes = 8 * 4
    slowest = 100 * row_bytes / 100e9 + 50 * row_bytes / 10e9  # rank 1: 100 rows on NVLink, 50 over InfiniBand
    exchanges = 2 * (3 + 1)
    assert four["exchange_ms"] == pytest.approx(exchanges * slowest * 1e3)
    ring = 2 * 3 / 4 * 40 / 10e9  # 4 parts span 2 nodes: the all-reduce runs at the InfiniBand rate
    assert four["allreduce_ms"] == pytest.approx(ring * 1e3)
    assert four["nodes"] == 2


def test_overlap_hides_at_most_the_forward_exchanges():
    halo = [(10**6, 0, 10**6, 0), (10**6, 0, 10**6, 0)]
    rows = [_row(1, 1000, 10**9, 10**6, []), _row(2, 500, 5 * 10**8, 5 * 10**5, halo)]
    two = predict(rows, EXTRA, HW, EXACT)[1]
    forward_exchanges = two["exchange_ms"] / 2
    hideable = 0.5 * two["compute_ms"] / 3
    assert two["step_ms"] - two["step_overlap_ms"] == pytest.approx(min(forward_exchanges, hideable))
    assert two["step_overlap_ms"] >= two["compute_ms"]


def test_untraced_part_counts_scale_the_nearest_traced_bytes_per_edge():
    rows = [_row(1, 1000, 10**9, 10**6, []), _row(2, 500, 0, 0, [(0, 0, 0, 0), (0, 0, 0, 0)])]
    for key in ("peak_bytes", "peak_bytes_ckpt", "activation_bytes", "flops", "flops_ckpt"):
        rows[1][key] = None
    two = predict(rows, EXTRA, HW, EXACT)[1]
    one = predict(rows, EXTRA, HW, EXACT)[0]
    assert two["compute_ms"] == pytest.approx(one["compute_ms"] / 2)
    assert not two["traced"] and one["traced"]


def test_memory_fits_flag_and_table():
    rows = [_row(1, 1000, 10**9, 20 * 10**9, [])]
    (single,) = predict(rows, EXTRA, HW, EXACT)
    assert not single["fits"] and single["fits_ckpt"]
    assert "✗" in markdown_table([single])
    assert math.isclose(single["memory_gib"] * 2**30, 20 * 10**9 + 100 + 1000 * 45 + 10 * 12 + 3 * 40)


def test_load_inputs_round_trip_and_errors(tmp_path):
    section = Section(name="scaling_inputs", title="inputs", rows=[_row(1, 1000, 10**9, 10**6, [])], extra=EXTRA)
    machine = {"hostname": "h", "date": "d", "cpu": "c", "cores": 1, "memory_gib": 1, "gpu": None, "python": "3",
               "torch": "t", "commit": None}
    json_path, md_path = write_report([section], machine, tmp_path, "quick")
    rows, extra = load_inputs(json_path)
    assert rows[0]["max_local_edges"] == 1000 and extra["iterations"] == 3
    assert "| 1 |" not in md_path.read_text() or "inputs" in md_path.read_text()
    with pytest.raises(DomainparError, match="benchmark report not found"):
        load_inputs(tmp_path / "missing.json")
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"sections": {}}))
    with pytest.raises(DomainparError, match="scaling_inputs section"):
        load_inputs(empty)
    with pytest.raises(DomainparError, match="GPUs per node"):
        predict(rows, {**extra, "gpus_per_node": 4}, HW, EXACT)

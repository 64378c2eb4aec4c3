"""`domainpar verify`: torchrun and local spawn, JSON output, exit codes.

The passing path runs under torchrun (init_from_env); the local-spawn path is the
one with a deliberately broken exchange, which must exit 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from domainpar.cli.main import main
from domainpar.data.event_graph import EventGraph, save_graph

pytestmark = pytest.mark.distributed

FAST = ["--hidden", "8", "--iterations", "2"]


@lru_cache(maxsize=None)
def _simulated() -> EventGraph:
    from domainpar.data.graph import build_graph
    from domainpar.sim.config import SimulationConfig
    from domainpar.sim.event import simulate_event

    event = simulate_event(SimulationConfig(num_particles=150), 2, 3)
    return build_graph(event["hits"], event["truth"], event["particles"], event_id=2)[0]


@pytest.fixture
def graph_file(tmp_path) -> Path:
    return save_graph(_simulated(), tmp_path / "event.npz")


def _run(args: list[str]) -> int:
    with pytest.raises(SystemExit) as exit_info:
        main(["verify", *args])
    return exit_info.value.code


def _run_ok(args: list[str]) -> int:
    try:
        main(["verify", *args])
    except SystemExit as exc:
        return exc.code
    return 0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_verify_exits_nonzero_on_mismatch(graph_file, tmp_path, capsys):
    out = tmp_path / "verify.json"
    code = _run(["--graph", str(graph_file), "--parts", "2", "--method", "geometric", "--fault", "zero_halo",
                 "--json", str(out), *FAST])
    assert code == 1
    assert json.loads(out.read_text())["passed"] is False
    assert "MISMATCH" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_verify_under_torchrun(graph_file, tmp_path):
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.exists():
        pytest.skip("torchrun not installed next to the interpreter")
    out = tmp_path / "verify.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(
        [str(torchrun), "--standalone", "--nproc_per_node", "2", "-m", "domainpar", "verify", "--graph", str(graph_file),
         "--parts", "2", "--method", "geometric", "--overlap", "--checkpointing", "--dtype", "float32",
         "--json", str(out), *FAST],
        capture_output=True, text=True, timeout=280, env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads(out.read_text())
    assert record["backend"] == "gloo" and record["passed"] is True and record["num_parts"] == 2
    assert record["max_rel_err_grad"] <= 1e-5 and record["max_abs_err_logits"] <= 1e-5 and sum(record["num_halo"]) > 0
    assert "| gradients: max relative error" in proc.stdout and "PASSED" in proc.stdout
    assert proc.stdout.count("PASSED") == 1  # only rank 0 prints


def test_verify_rejects_graph_without_labels(tmp_path, capsys):
    graph = _simulated()
    unlabelled = EventGraph(event_id=1, x=graph.x, pos=graph.pos, hit_id=graph.hit_id, layer=graph.layer,
                            edge_index=graph.edge_index, edge_attr=graph.edge_attr)
    path = save_graph(unlabelled, tmp_path / "nolabels.npz")
    assert _run(["--graph", str(path), "--parts", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "truth labels" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["--parts", "0"], "--parts must be at least 1"),
        (["--parts", "2", "--hidden", "0"], "--hidden must be at least 1 (got 0)"),
    ],
)
def test_verify_argument_errors(graph_file, capsys, args, message):
    assert _run(["--graph", str(graph_file), *args]) == 2
    assert message in capsys.readouterr().err


def test_verify_missing_graph(tmp_path, capsys):
    assert _run(["--graph", str(tmp_path / "nope.npz"), "--parts", "2"]) == 2
    assert "graph file not found" in capsys.readouterr().err


def test_verify_help():
    assert _run_ok(["--help"]) == 0

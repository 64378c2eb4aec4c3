"""Preparing a run's events once, before training (``domainpar.train.prepare``), and its failures under a launcher.

* plans are made once per event into ``<out>/plans`` and reused while their graph is unchanged;
* under torchrun, and under an srun-like launch without any agent, every rank prepares its shard and a
  preparation error on rank 1 ends the job within 10 s, rank 0 reporting rank 1's message (no rank waits
  in a barrier bounded by the process-group timeout);
* a silent peer (no heartbeat) is named after the liveness time.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch.distributed as dist
from fixtures import write_graphs

from domainpar.comm.failure import FailureChannel, PeerFailed
from domainpar.comm.wait import mark_done, wait_for_peers
from domainpar.data.event_graph import save_graph
from domainpar.data.graph_files import load_graph
from domainpar.partition.io import load_part, part_file_name
from domainpar.train.config import load_config
from domainpar.train.prepare import list_items, prepare, prepare_item

BASE = {"model.hidden": 8, "model.num_iterations": 1, "run.epochs": 1, "run.progress": False, "run.curves": False}


def _config(graphs: Path, out: Path, **overrides):
    return load_config(None, {**BASE, "data.train": str(graphs), "run.out": str(out), **overrides})


def test_plans_are_made_once_per_event_and_remade_when_the_graph_changes(tmp_path):
    paths = write_graphs(tmp_path / "graphs", 3)
    config = _config(tmp_path / "graphs", tmp_path / "out", **{"parallel.mode": "domain", "parallel.ranks": 2})
    inputs = prepare(config, 2, workers=1, progress=False)
    root = Path(inputs.train_plans)
    assert root == tmp_path / "out" / "plans" / "train" / "metis-2parts-seed0" and inputs.val_plans == inputs.train_plans
    for path in paths:
        graph = load_graph(path)
        for p in range(2):
            part = load_part(root / f"event{graph.event_id:09d}" / part_file_name(p), part=p, num_parts=2)
            assert part.graph_hash == graph.content_hash()
    items, _ = list_items(config, 2)
    params = {"graph_config": None, "widths": None, "num_parts": 2, "method": "metis", "seed": 0}
    assert [prepare_item(item, params)["partitioned"] for item in items] == [False, False, False]
    # The same graph written again (new mtime, same content) keeps its plan: plans follow content, not time stamps.
    time.sleep(0.01)
    save_graph(load_graph(paths[1]), paths[1])
    assert [prepare_item(item, params)["partitioned"] for item in items] == [False, False, False]
    # A rebuilt graph with other features (same structure, same size) gets a new plan; the others are kept.
    graph = load_graph(paths[1])
    save_graph(dataclasses.replace(graph, x=graph.x + np.float32(1.0)), paths[1])
    assert [prepare_item(item, params)["partitioned"] for item in items] == [False, True, False]
    part = load_part(root / f"event{graph.event_id:09d}" / part_file_name(0), part=0, num_parts=2)
    assert np.array_equal(part.x, load_graph(paths[1]).x[part.plan.owned_ids])


def test_single_mode_and_groups_of_one_need_no_plans(tmp_path):
    write_graphs(tmp_path / "graphs", 2)
    for overrides in ({"parallel.mode": "single"}, {"parallel.mode": "domain", "parallel.ranks": 2, "parallel.domain_size": 1}):
        inputs = prepare(_config(tmp_path / "graphs", tmp_path / "out", **overrides), overrides.get("parallel.ranks", 1),
                         workers=1, progress=False)
        assert inputs.train_plans is None and len(inputs.train_files) == 2
    assert not (tmp_path / "out" / "plans").exists()


def test_a_silent_peer_is_named_after_the_liveness_time():
    store = dist.HashStore()
    channel = FailureChannel(store, 0)
    mark_done(channel, "prepare-x")
    start = time.monotonic()
    with pytest.raises(PeerFailed, match=r"^rank 1 stopped responding \(no heartbeat for 1 s\) before finishing prepare-x"):
        wait_for_peers(channel, "prepare-x", 2, liveness_s=1.0, poll_s=0.05)
    assert time.monotonic() - start < 8
    # A peer that beats is waited for, and the wait ends when it is done.
    channel2 = FailureChannel(dist.HashStore(), 0)
    mark_done(channel2, "k")
    peer = FailureChannel(channel2.store, 1)  # same underlying store, already prefixed

    def live_peer():
        for _ in range(30):
            channel2.store.add("wait/heartbeat/1", 1)
            time.sleep(0.05)
        channel2.store.set("wait/k/done/1", "1")

    thread = threading.Thread(target=live_peer)
    thread.start()
    wait_for_peers(channel2, "k", 2, liveness_s=1.0, poll_s=0.05)
    thread.join()
    del peer


# ------------------------------------------------------------------------------ under a launcher


def _failing_dataset(tmp_path: Path) -> Path:
    """Two graphs; the second (rank 1's shard) has no labels, which only its preparing rank finds out."""
    graphs = tmp_path / "graphs"
    paths = write_graphs(graphs, 2)
    graph = load_graph(paths[1])
    save_graph(dataclasses.replace(graph, y=None, particle_id=None, particle_pt=None), paths[1])
    return graphs


RANK1_MESSAGE = "event000000001.npz: training and validation need graphs with truth labels"


def _train_args(graphs: Path, out: Path) -> list[str]:
    return ["-m", "domainpar", "train", "--data", str(graphs), "--out", str(out), "--mode", "domain", "--epochs", "1",
            "--hidden", "8", "--iterations", "1", "--no-curves", "--progress", "--timeout", "300"]


def _stream(process: subprocess.Popen, lines: list[tuple[float, str]]) -> None:
    """Every piece of output, timestamped when it arrives; progress bars end their pieces with a carriage return."""
    pending = ""
    while True:
        chunk = os.read(process.stdout.fileno(), 4096)
        if not chunk:
            break
        pending += chunk.decode(errors="replace")
        *pieces, pending = re.split(r"[\r\n]", pending)
        now = time.monotonic()
        lines.extend((now, piece) for piece in pieces)
    if pending:
        lines.append((time.monotonic(), pending))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "SLURM_", "TORCHELASTIC"))}
    env["OMP_NUM_THREADS"] = "1"
    return env


def _assert_ends_fast_with_rank1_message(lines, rank0_lines, end_time, *, report_within_s=None):
    """Rank 0 reports rank 1's line, with no traceback, and the job is over within 10 s of rank 0 starting.

    With ``report_within_s``: also, rank 0 printed rank 1's line within that many seconds of starting
    (what a peer's failure costs to reach it, without the processes' exits).
    """
    # Rank 0's first output is its progress bar, made when it starts preparing its shard.
    started = [t for t, _ in rank0_lines]
    assert started, "\n".join(line for _, line in lines)
    # torchrun --tee passes whole lines: the bar and the error after its carriage return may share one.
    reported = [(t, m.group(0)) for t, line in rank0_lines for m in [re.search(r"error: rank 1: .*", line)] if m]
    assert reported and RANK1_MESSAGE in reported[0][1], "\n".join(line for _, line in lines)
    assert "Traceback" not in "\n".join(line for _, line in rank0_lines)
    if report_within_s is not None:
        assert reported[0][0] - min(started) < report_within_s, reported[0][0] - min(started)
    # From the moment rank 0 started preparing, the whole job is over within 10 s: rank 1's failure, its way to
    # rank 0, and both processes' exits (interpreter teardown with torch loaded: ~1-2 s each on an idle machine).
    assert end_time - min(started) < 10.0, end_time - min(started)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_a_preparation_error_on_rank_1_ends_a_torchrun_job_within_10_s_with_its_message(tmp_path):
    graphs = _failing_dataset(tmp_path)
    torchrun = Path(sys.executable).with_name("torchrun")
    command = [str(torchrun), "--standalone", "--nproc-per-node", "2", "--tee", "3", *_train_args(graphs, tmp_path / "out")]
    lines: list[tuple[float, str]] = []
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_env(), cwd=tmp_path)
    reader = threading.Thread(target=_stream, args=(process, lines))
    reader.start()
    process.wait(timeout=150)
    end = time.monotonic()
    reader.join()
    assert process.returncode != 0
    # torchrun --tee prefixes every line of local rank r with [default<r>]:. Rank 1's own line may be cut
    # short: torchrun ends the other rank as soon as one exits.
    rank0 = [(t, line.split("]:", 1)[1]) for t, line in lines if line.startswith("[default0]:")]
    _assert_ends_fast_with_rank1_message(lines, rank0, end)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_a_preparation_error_on_rank_1_ends_an_srun_like_job_without_any_agent(tmp_path):
    """Two plain processes (as srun starts them, no torchrun agent to kill the peers): rank 0 must stop by itself."""
    graphs = _failing_dataset(tmp_path)
    env = {**_env(), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0"}
    processes, streams = [], []
    for rank in range(2):
        lines: list[tuple[float, str]] = []
        process = subprocess.Popen([sys.executable, *_train_args(graphs, tmp_path / "out")], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, env={**env, "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank)},
                                   cwd=tmp_path)
        reader = threading.Thread(target=_stream, args=(process, lines))
        reader.start()
        processes.append((process, reader))
        streams.append(lines)
    try:
        ends = []
        for process, reader in processes:
            process.wait(timeout=150)
            ends.append(time.monotonic())
            reader.join()
    finally:
        for process, _ in processes:
            if process.poll() is None:
                process.kill()
    # Rank 1's own user mistake exits 2; rank 0, stopped by a peer's failure, exits 1 (launch.fail_rank's contract,
    # as for the srun tasks of test_dead_rank); srun reports the highest, 2.
    assert [p.returncode for p, _ in processes] == [1, 2]
    last = [line for _, line in streams[1] if line.strip()][-1]
    assert last.startswith("error: ") and RANK1_MESSAGE in last
    _assert_ends_fast_with_rank1_message(streams[0], streams[0], max(ends), report_within_s=5.0)


SLOW_RANK0 = """
import os, time
import domainpar.train.prepare as prepare

_original = prepare.prepare_item


def _slow(item, params):
    if os.environ.get("SLURM_PROCID") == "0":
        time.sleep(float(os.environ["SLOW_PREPARE_S"]))
    return _original(item, params)


prepare.prepare_item = _slow
"""


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_preparation_longer_than_the_process_group_timeout_does_not_kill_a_healthy_run(tmp_path):
    """Rank 0 prepares for 3x the --timeout while rank 1 waits: the wait is no collective, so the run trains."""
    write_graphs(tmp_path / "graphs", 2)
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(SLOW_RANK0)
    env = {**_env(), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0",
           "PYTHONPATH": os.pathsep.join([str(inject), os.environ.get("PYTHONPATH", "")]), "SLOW_PREPARE_S": "24"}
    args = [sys.executable, *_train_args(tmp_path / "graphs", tmp_path / "out"), "--workers", "1", "--timeout", "8", "--no-progress"]
    processes = [
        subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                         env={**env, "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank)})
        for rank in range(2)
    ]
    try:
        outputs = [p.communicate(timeout=200)[0] for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    assert [p.returncode for p in processes] == [0, 0], "\n".join(outputs)
    assert (tmp_path / "out" / "metrics.jsonl").is_file()

"""What used to fail only once ranks existed now stops before any rank starts, in one line naming the flag;
launches inside a Slurm allocation do what an HPC user means; world-dependent defaults make hybrid runs work.

In-process tests replace ``spawn`` and ``init_from_env`` by functions that fail the test: a check that runs
only after a rank started (or joined) would trip them. Subprocess tests run the real command line in a faked
Slurm environment (an sbatch batch script, the tasks of an srun step).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from domainpar.data.event_graph import save_graph
from domainpar.data.graph_files import load_graph
from domainpar.errors import DomainparError
from domainpar.launch import ranks as launch
from domainpar.cli.main import main
from domainpar.train.config import SettingError, load_config
from domainpar.launch.env import detect
from domainpar.train.preflight import check_run, resolve_defaults
from domainpar.train.run import train
from fixtures import REPO, slurm_job_with_free_port, write_graphs

#: Launcher variables removed from every subprocess so the test decides what the process sees.
_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS and not k.startswith("SLURM_")}
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture()
def graphs(tmp_path) -> Path:
    write_graphs(tmp_path / "graphs", 4)
    return tmp_path / "graphs"


@pytest.fixture()
def no_ranks_may_start(monkeypatch):
    """Fail the test if a rank is spawned or a job is joined: what is checked must be checked before."""

    def started(*args, **kwargs):
        raise AssertionError("a rank was started (or a job joined) before the mistake was found")

    monkeypatch.setattr(launch, "spawn", started)
    monkeypatch.setattr(launch, "init_from_env", started)
    for name in _LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in os.environ if n.startswith("SLURM_")]:
        monkeypatch.delenv(name)


def _config(data: Path, out: Path, **extra):
    base = {"data.train": str(data), "run.out": str(out), "model.hidden": 4, "model.num_iterations": 1,
            "model.mlp_layers": 1, "parallel.device": "cpu", "run.progress": False, "run.curves": False}
    return load_config(None, {**base, **extra})


def _without_positions(graphs: Path, target: Path) -> Path:
    """The graphs with every position zeroed, as an Exa.TrkX-layout file reads."""
    target.mkdir()
    for path in sorted(graphs.glob("*.npz")):
        graph = load_graph(path)
        save_graph(dataclasses.replace(graph, pos=np.zeros_like(graph.pos)), target / path.name)
    return target


# ----------------------------------------------------------------------------- defaults that depend on the world


def test_batch_events_defaults_to_one_event_per_replica(graphs, tmp_path):
    config = _config(graphs, tmp_path / "run", **{"parallel.domain_size": 2})
    assert config.optim.batch_events is None
    assert resolve_defaults(config, 4).optim.batch_events == 2
    assert resolve_defaults(config, 2).optim.batch_events == 1
    assert resolve_defaults(config.replace(**{"optim.batch_events": 4}), 4).optim.batch_events == 4


def test_a_resumed_run_keeps_its_batch_and_refuses_a_world_it_does_not_divide(graphs, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.yaml").write_text("optim:\n  batch_events: 2\n")
    config = _config(graphs, out, **{"run.resume": True, "parallel.domain_size": 1})
    assert resolve_defaults(config, 1).optim.batch_events == 2  # not 1: the event order depends on it
    assert resolve_defaults(config, 2).optim.batch_events == 2
    with pytest.raises(DomainparError, match=r"--batch-events: the run being resumed used 2 events per step, not a multiple of this run's 3 replicas"):
        resolve_defaults(config, 3)


def test_shipped_slurm_configs_pass_the_checks_at_every_layout_their_comments_suggest(graphs, tmp_path):
    """config_single_node_4gpu.yaml suggests domain_size 2 (two replicas); multi-node runs on 2, 4, 8 nodes."""
    cases = [("config_single_node_4gpu.yaml", 4, 4), ("config_single_node_4gpu.yaml", 4, 2),
             ("config_multi_node_4gpu.yaml", 8, 4), ("config_multi_node_4gpu.yaml", 32, 4),
             ("config_cpu_only.yaml", 8, 4)]  # fmt: skip
    write_graphs(tmp_path / "many", 8)
    for name, world, group in cases:
        # The configs' warm-ups (50 and 200 steps) are sized for real datasets of thousands of events: 8 events
        # make runs of 20 to 160 steps, which the warm-up check rightly refuses; the layouts are what is checked here.
        config = load_config(REPO / "slurm" / name, {"data.train": str(tmp_path / "many"), "data.val": None,
                                                     "parallel.domain_size": group, "parallel.device": "cpu",
                                                     "run.precision": "fp32", "run.out": str(tmp_path / "out"),
                                                     "optim.warmup": 0})
        env = {"RANK": "0", "WORLD_SIZE": str(world), "LOCAL_RANK": "0"}
        resolved = check_run(config, world, detect(env))
        assert resolved.optim.batch_events % (world // group) == 0, (name, world, group)


# ------------------------------------------------------------------------------ mistakes found before any rank


@pytest.mark.parametrize(
    "extra, world, message",
    [
        ({"optim.batch_events": 3, "parallel.domain_size": 2}, 4,
         r"^--batch-events 3 must be a multiple of the number of replicas 2 \(world size 4 / domain size 2\)$"),
        ({"parallel.domain_size": 1}, 8, r"^--batch-events 8 must be at most the number of training events \(4 in .*"
                                          r"it defaults to one event per replica"),
        ({"parallel.domain_size": 3}, 4, r"^world size 4 must be divisible by --domain-size 3"),
    ],
)
def test_world_size_mistakes_stop_before_any_rank_starts(graphs, tmp_path, no_ranks_may_start, extra, world, message):
    with pytest.raises(DomainparError, match=message):
        train(_config(graphs, tmp_path / "run", **{"parallel.ranks": world, **extra}))
    assert not (tmp_path / "run").exists()


def _refused_by_the_command(capsys, *argv) -> list[str]:
    """``domainpar train argv`` in-process: it must exit 2; its stderr lines."""
    with pytest.raises(SystemExit) as info:
        main(["train", *map(str, argv)])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "Traceback" not in err, err
    return err.strip().splitlines()


#: 4 training events, one per step (one replica), 3 epochs: 12 optimiser steps.
_TWELVE_STEPS = "3 epoch(s) x 4 step(s) of 1 event(s); the warm-up would take the whole run"


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_warmup_flag_as_long_as_the_run_stops_before_any_rank(graphs, tmp_path, no_ranks_may_start, capsys, dry_run):
    out = tmp_path / "run"
    lines = _refused_by_the_command(capsys, "--data", graphs, "--ranks", 2, "--epochs", 3, "--warmup", 20, "--hidden", 4,
                                    "--device", "cpu", "--out", out, *(["--dry-run"] if dry_run else []))
    assert lines == [f"error: --warmup must be fewer than the run's 12 optimiser steps (got 20): {_TWELVE_STEPS}"]
    assert not out.exists()


def test_a_warmup_set_in_the_config_file_is_named_as_its_key(graphs, tmp_path, no_ranks_may_start, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(f"data:\n  train: {graphs}\noptim:\n  warmup: 12\nparallel:\n  device: cpu\nrun:\n  epochs: 3\n")
    out = tmp_path / "run"
    lines = _refused_by_the_command(capsys, "--config", config, "--out", out, "--mode", "single", "--hidden", 4)
    assert lines == [f"error: {config}: optim.warmup must be fewer than the run's 12 optimiser steps (got 12): {_TWELVE_STEPS}"]
    assert not out.exists()
    # Given on the command line too, the flag is what the user set last: it is named.
    lines = _refused_by_the_command(capsys, "--config", config, "--out", out, "--mode", "single", "--warmup", 13)
    assert lines == [f"error: --warmup must be fewer than the run's 12 optimiser steps (got 13): {_TWELVE_STEPS}"]


def test_a_warmup_counts_the_steps_the_trainer_runs(graphs, tmp_path):
    """Steps per epoch follow the global batch (a resumed run's, when resuming); a --max-steps cap is a deliberate
    short run, not counted."""
    assert check_run(_config(graphs, tmp_path / "a", **{"run.epochs": 3, "optim.warmup": 11}), 1).optim.warmup == 11
    with pytest.raises(SettingError, match=r"^--warmup must be fewer than the run's 6 optimiser steps \(got 6\): 3 epoch\(s\) x 2 step\(s\) of 2 event\(s\);"):
        check_run(_config(graphs, tmp_path / "b", **{"run.epochs": 3, "optim.warmup": 6, "optim.batch_events": 2}), 1)
    capped = _config(graphs, tmp_path / "c", **{"run.epochs": 3, "optim.warmup": 5, "run.max_steps": 1})
    assert check_run(capped, 1).run.max_steps == 1
    with pytest.raises(SettingError, match=r"^--warmup must be fewer than the run's 12 optimiser steps \(got 12\)"):
        check_run(capped.replace(**{"optim.warmup": 12}), 1)
    # A resume trains with the batch of the run it continues (2 events a step: 6 steps), and is accepted below it.
    out = tmp_path / "resumed"
    out.mkdir()
    (out / "config.yaml").write_text("optim:\n  batch_events: 2\n")
    resumed = _config(graphs, out, **{"run.resume": True, "run.epochs": 3, "parallel.domain_size": 1})
    assert check_run(resumed.replace(**{"optim.warmup": 5}), 1).optim.batch_events == 2
    with pytest.raises(SettingError, match=r"^--warmup must be fewer than the run's 6 optimiser steps \(got 6\)"):
        check_run(resumed.replace(**{"optim.warmup": 6}), 1)


def test_geometric_plans_of_graphs_without_positions_stop_before_any_rank(graphs, tmp_path, no_ranks_may_start):
    flat = _without_positions(graphs, tmp_path / "flat")
    with pytest.raises(DomainparError, match=r"^--method geometric: .*event000000000.npz has no hit positions .* use --method metis"):
        train(_config(flat, tmp_path / "run", **{"parallel.ranks": 2, "data.method": "geometric"}))
    with pytest.raises(DomainparError, match=r"^--mode sectors: .*has no hit positions"):
        train(_config(flat, tmp_path / "run", **{"parallel.ranks": 2, "parallel.mode": "sectors"}))
    # Positions are needed only to cut: METIS, and geometric with positions, pass the check (stopped at spawn here).
    for ok in (_config(flat, tmp_path / "run", **{"parallel.ranks": 2}),
               _config(graphs, tmp_path / "run", **{"parallel.ranks": 2, "data.method": "geometric"})):
        with pytest.raises(AssertionError, match="a rank was started"):
            train(ok)


def test_partitioning_without_positions_is_refused_by_the_partitioner_itself(graphs, tmp_path):
    """Every path to geometric sectors (partition, verify, evaluate --parts, plans made before training)."""
    from domainpar.partition.partitioners import partition_graph

    graph = load_graph(_without_positions(graphs, tmp_path / "flat") / "event000000000.npz")
    for method in ("geometric", "sectors"):
        with pytest.raises(DomainparError, match=rf"--method {method}: the graph has no hit positions"):
            partition_graph(graph, 2, method)
    assert partition_graph(graph, 2, "metis").num_parts == 2
    assert partition_graph(graph, 1, "geometric").num_parts == 1  # one part needs no positions


def test_plans_of_another_part_count_stop_before_any_rank(graphs, tmp_path, no_ranks_may_start):
    from domainpar.partition.dataset import partition_file

    plans = tmp_path / "plans"
    for path in sorted(graphs.glob("*.npz")):
        partition_file(str(path), str(plans / path.stem), 2, "metis", 0)
    with pytest.raises(DomainparError, match=r"^--plans .*: the plan of event000000000.npz has 2 parts, but a domain group "
                                             r"has 4 ranks \(--domain-size, world size 4\); partition with --parts 4"):
        train(_config(graphs, tmp_path / "run", **{"parallel.ranks": 4, "data.plans": str(plans)}))


def test_more_local_cuda_ranks_than_gpus_stop_before_any_rank(graphs, tmp_path, no_ranks_may_start, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    config = _config(graphs, tmp_path / "run", **{"parallel.ranks": 4, "parallel.device": "cuda"})
    with pytest.raises(DomainparError, match=r"^--ranks 4 on CUDA needs one GPU per rank .* shows 2; use --ranks 2"):
        train(config)


def test_a_launched_rank_checks_before_it_joins(graphs, tmp_path, no_ranks_may_start, monkeypatch):
    """Under torchrun (or srun) each rank runs the checks at the launcher's world size before the rendezvous."""
    for name, value in {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "x"}.items():
        monkeypatch.setenv(name, value)
    config = _config(graphs, tmp_path / "run", **{"parallel.domain_size": 2, "optim.batch_events": 1})
    with pytest.raises(DomainparError, match=r"^--batch-events 1 must be a multiple of the number of replicas 2"):
        train(config)
    # The README's torchrun example (4 ranks, --domain-size 2, batch left to its default) passes and joins.
    with pytest.raises(AssertionError, match="joined"):
        train(_config(graphs, tmp_path / "run", **{"parallel.domain_size": 2}))


# ----------------------------------------------------------------------------------------- real launches


def _metrics(out: Path) -> dict:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()][-1]


_TINY = ["--hidden", "4", "--iterations", "1", "--mlp-layers", "1", "--max-steps", "1", "--epochs", "1",
         "--threads", "1", "--device", "cpu", "--no-progress", "--no-curves"]  # fmt: skip


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_ranks_inside_an_sbatch_batch_script_spawn_local_ranks(graphs, tmp_path):
    """The batch step sets SLURM_PROCID/SLURM_NTASKS but is no srun step: --ranks 2 trains on 2 local ranks."""
    env = {**_clean_env(), "SLURM_JOB_ID": "4242", "SLURM_NTASKS": "4", "SLURM_NPROCS": "4", "SLURM_PROCID": "0",
           "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "node001"}
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "domainpar", "train", "--data", str(graphs), "--ranks", "2",
                           "--out", str(out), *_TINY], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=220)
    assert done.returncode == 0, done.stderr[-3000:]
    record = _metrics(out)
    assert record["world_size"] == 2 and record["domain_size"] == 2


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_four_rank_hybrid_with_the_shipped_single_node_config(graphs, tmp_path):
    """config_single_node_4gpu.yaml with its suggested domain_size 2 (two replicas of two), on CPU/gloo, scaled down."""
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "domainpar", "train", "--config", str(REPO / "slurm" / "config_single_node_4gpu.yaml"),
            "--data", str(graphs), "--val", str(graphs), "--ranks", "4", "--domain-size", "2", "--precision", "fp32",
            "--out", str(out), *_TINY,
            "--warmup", "0"]  # fmt: skip  # scaled down: the config's 200 warm-up steps are sized for real datasets
    done = subprocess.run(argv, env=_clean_env(), cwd=tmp_path, capture_output=True, text=True, timeout=380)
    assert done.returncode == 0, done.stderr[-3000:]
    record = _metrics(out)
    assert (record["world_size"], record["domain_size"]) == (4, 2)
    assert load_config(out / "config.yaml").optim.batch_events == 2  # one event per replica


def _srun_tasks(argv: list[str], tasks: int, cwd: Path, job: int = 4242) -> list[subprocess.CompletedProcess]:
    """Run ``argv`` as the tasks of srun step ``job``.0 on one node: Slurm's per-task variables, no MASTER_ADDR."""
    processes = []
    for rank in range(tasks):
        env = {**_clean_env(), "SLURM_JOB_ID": str(job), "SLURM_STEP_ID": "0", "SLURM_STEPID": "0",
               "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank), "SLURM_NTASKS": str(tasks),
               "SLURM_STEP_NUM_TASKS": str(tasks), "SLURM_STEP_NODELIST": "localhost", "SLURM_JOB_NODELIST": "localhost"}
        processes.append(subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    try:
        for process in processes:
            stdout, stderr = process.communicate(timeout=200)
            results.append(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    return results


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_srun_tasks_meet_on_the_first_host_without_exports(graphs, tmp_path):
    """`srun -n 2 domainpar train ...` with no MASTER_ADDR/MASTER_PORT: the step's first host, a derived port."""
    job, _ = slurm_job_with_free_port()
    out = tmp_path / "run"
    results = _srun_tasks([sys.executable, "-m", "domainpar", "train", "--data", str(graphs), "--out", str(out), *_TINY],
                          2, tmp_path, job)
    assert [r.returncode for r in results] == [0, 0], results[0].stderr[-2000:] + results[1].stderr[-2000:]
    assert _metrics(out)["world_size"] == 2


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_a_mistake_in_an_srun_step_is_one_line_from_one_task(graphs, tmp_path):
    flat = _without_positions(graphs, tmp_path / "flat")
    argv = [sys.executable, "-m", "domainpar", "train", "--data", str(flat), "--method", "geometric",
            "--out", str(tmp_path / "run"), *_TINY]  # fmt: skip
    results = _srun_tasks(argv, 2, tmp_path)
    assert [r.returncode for r in results] == [2, 2]
    lines = [line for r in results for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --method geometric: ") and "no hit positions" in lines[0], lines
    # The tasks never met: no rendezvous address was needed, nothing was written.
    assert not (tmp_path / "run").exists()


@pytest.mark.timeout(120)
def test_a_ranks_flag_that_contradicts_the_srun_step_is_refused(graphs, tmp_path):
    argv = [sys.executable, "-m", "domainpar", "train", "--data", str(graphs), "--ranks", "4", "--out", str(tmp_path / "run")]
    env = {**_clean_env(), "SLURM_JOB_ID": "9", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_LOCALID": "0",
           "SLURM_NTASKS": "2", "SLURM_STEP_NODELIST": "localhost"}
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=100)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --ranks 4: this process is task 1 of srun step 9.0 (2 tasks), and the launcher sets the world size; "
        "drop --ranks, or run domainpar outside torchrun/srun (e.g. in the batch script itself) to spawn 4 local ranks"
    ]


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_verify_inside_an_sbatch_batch_script_spawns_its_parts(graphs, tmp_path):
    """`domainpar verify --parts 2` in a batch script: local ranks, not a join that waits for MASTER_ADDR."""
    env = {**_clean_env(), "SLURM_JOB_ID": "4242", "SLURM_NTASKS": "4", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
           "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "node001"}
    done = subprocess.run([sys.executable, "-m", "domainpar", "verify", "--graph", str(graphs / "event000000003.npz"),
                           "--parts", "2", "--hidden", "8", "--iterations", "2"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=220)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "PASSED" in done.stdout and "halo rows per rank: [0, 0]" not in done.stdout

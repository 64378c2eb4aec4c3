"""The cluster recipes in slurm/: lint, render with stub Slurm commands, and a local two-"node" rehearsal.

* every script parses (``bash -n``) and carries the #SBATCH lines it needs;
* every config YAML loads and validates through the trainer's own loader at
  the world size its script asks for;
* each script, run with stub ``srun``/``scontrol``/``torchrun`` on PATH and a
  fake Slurm environment, launches the command we expect (one launcher per
  node, c10d rendezvous on the first hostname, ``domainpar train --config``);
* two real ``torchrun`` launchers on this machine (``--nnodes 2``, c10d
  rendezvous on 127.0.0.1, gloo, Slurm variables set as srun would) train a
  tiny model for two steps: both exit 0 and metrics.jsonl records a 2-rank
  domain run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from domainpar.errors import DomainparError
from domainpar.train.config import load_config, validate_config

from fixtures import REPO, write_graphs

SLURM = REPO / "slurm"
SCRIPTS = {
    "single_node_4gpu.sbatch": {"nodes": 1, "gpus": 4, "launcher": "torchrun"},
    "multi_node_4gpu.sbatch": {"nodes": 2, "gpus": 4, "launcher": "torchrun"},
    "cpu_only.sbatch": {"nodes": 1, "gpus": 0, "launcher": "srun"},
}
REQUIRED_SBATCH = ("--job-name", "--nodes", "--ntasks-per-node", "--time", "--output")


def sbatch_options(script: Path) -> dict[str, str]:
    """``#SBATCH --key=value`` lines of a script (before the first command), as a dict."""
    options = {}
    for line in script.read_text().splitlines():
        match = re.match(r"#SBATCH\s+(--[\w-]+)(?:[= ](\S+))?", line)
        if match:
            options[match.group(1)] = match.group(2) or ""
    return options


def default_config(script: Path) -> Path:
    """The config a script uses unless CONFIG is set: ``CONFIG=${CONFIG:-$SLURM_DIR/<name>}`` (beside the script)."""
    match = re.search(r"^CONFIG=\$\{CONFIG:-\$SLURM_DIR/([^}]+)\}", script.read_text(), re.MULTILINE)
    assert match, f"{script.name} must set CONFIG=${{CONFIG:-$SLURM_DIR/<config>.yaml}}"
    return SLURM / match.group(1)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_script_parses_and_has_required_lines(name):
    script = SLURM / name
    subprocess.run(["bash", "-n", str(script)], check=True)
    options = sbatch_options(script)
    missing = [key for key in REQUIRED_SBATCH if key not in options]
    assert not missing, f"{name} lacks #SBATCH {missing}"
    assert int(options["--nodes"]) == SCRIPTS[name]["nodes"]
    if SCRIPTS[name]["gpus"]:
        assert options.get("--gpus-per-node") == str(SCRIPTS[name]["gpus"])
        assert options["--ntasks-per-node"] == "1", "GPU scripts start one torchrun launcher per node"
    else:
        assert "--gpus-per-node" not in options and "--gres" not in options
    text = script.read_text()
    assert "domainpar train --config" in text
    # `| head -n 1` under pipefail kills the job with SIGPIPE when the allocation lists many hosts.
    assert "| head" not in text
    # Found from the script's own location, not from the submission directory.
    assert 'source "$SLURM_DIR/common.sh"' in text and "SLURM_SUBMIT_DIR:-.}/slurm" not in text
    # No count of its own: GPUs, CPUs and the port come from the allocation.
    assert "GPUS_PER_NODE=${GPUS_PER_NODE:-4}" not in text and "29500" not in text
    assert re.search(r"srun .*--cpus-per-task=\"\$CPUS_PER_TASK\"", text), f"{name}: srun must pass --cpus-per-task"
    subprocess.run(["bash", "-n", str(SLURM / "common.sh")], check=True)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_config_loads_and_validates_at_the_script_world_size(name, tmp_path):
    script = SLURM / name
    config_path = default_config(script)
    assert config_path.is_file(), f"{name} refers to {config_path}, which does not exist"
    options = sbatch_options(script)
    nodes = int(options["--nodes"])
    per_node = int(options.get("--gpus-per-node") or options["--ntasks-per-node"])
    config = load_config(config_path)
    # The cluster's data paths do not exist here; everything else is validated as on the cluster.
    (tmp_path / "train").mkdir()
    config = config.replace(**{"data.train": str(tmp_path / "train"), "data.val": str(tmp_path / "train")})
    validate_config(config, world_size=nodes * per_node, cuda_available=bool(SCRIPTS[name]["gpus"]))
    assert config.parallel.device == ("cuda" if SCRIPTS[name]["gpus"] else "cpu")


def test_config_validation_catches_a_bad_domain_size(tmp_path):
    config = load_config(SLURM / "config_multi_node_4gpu.yaml")
    (tmp_path / "train").mkdir()
    config = config.replace(**{"data.train": str(tmp_path / "train"), "data.val": None, "parallel.domain_size": 3})
    with pytest.raises(DomainparError, match="divisible by --domain-size 3"):
        validate_config(config, world_size=8, cuda_available=True)


STUB = """#!/bin/bash
# Records how it was called, then does what the test needs of it.
echo "{name} $*" >> "$STUB_LOG"
{body}
"""

#: The job id of the rendered jobs and the rendezvous port derived from it: 20000 + (4242 * 97) % 10000.
JOB_ID, DERIVED_PORT = "4242", 21474


class RenderError(Exception):
    """The script exited non-zero; carries its stderr."""

    def __init__(self, returncode: int, stderr: str) -> None:
        super().__init__(f"script exited {returncode}:\n{stderr}")
        self.stderr = stderr


def _stub_bin(tmp_path: Path, scripts_dir: Path, srun_body: str) -> Path:
    """Stub ``scontrol`` (host names; the submitted script's path as Slurm records it), ``srun`` and ``torchrun``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stubs = {
        "scontrol": (
            'if [[ "$1 $2" == "show hostnames" ]]; then printf "gpu-a001\\ngpu-a002\\n"; fi\n'
            'if [[ "$1 $2" == "show job" ]]; then printf "JobId=$3 JobName=x\\n   Command=%s\\n   WorkDir=/x\\n" '
            '"$SUBMITTED_SCRIPT"; fi'
        ),
        "srun": srun_body,
        "torchrun": 'echo "torchrun-env OMP_NUM_THREADS=$OMP_NUM_THREADS" >> "$STUB_LOG"',
    }
    for name, body in stubs.items():
        path = bin_dir / name
        path.write_text(STUB.format(name=name, body=body))
        path.chmod(0o755)
    return bin_dir


def _render(script: str, tmp_path: Path, env_extra: dict[str, str], args: tuple[str, ...] = ()) -> list[str]:
    """Run ``script`` as sbatch would, from a directory that is not the repository, with stub Slurm/torch
    launchers; return the logged launcher calls.

    The scripts live in a copy of the repository's slurm/ elsewhere; sbatch runs a spooled copy of the script
    (so its own path says nothing), and ``scontrol show job`` names the submitted path.
    """
    repo_copy = tmp_path / "checkout"
    shutil.copytree(SLURM, repo_copy / "slurm")
    spool = tmp_path / "spool"
    spool.mkdir()
    shutil.copy(repo_copy / "slurm" / script, spool / "slurm_script")
    # srun runs its command once (as one task would) after dropping its own options.
    bin_dir = _stub_bin(tmp_path, repo_copy / "slurm", 'while [[ "$1" == --* ]]; do shift; done; exec "$@"')
    log = tmp_path / "calls.log"
    run_dir = tmp_path / "submit"
    run_dir.mkdir(exist_ok=True)
    # The interpreter runs the config check (`python -`); `python -m domainpar ...` is recorded, not run.
    python_stub = bin_dir / "python-stub"
    python_stub.write_text(STUB.format(name="python", body=f'if [[ "$1" == "-" ]]; then exec {sys.executable} "$@"; fi'))
    python_stub.chmod(0o755)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SLURM_")},
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "STUB_LOG": str(log),
        "SUBMITTED_SCRIPT": str(repo_copy / "slurm" / script),
        "SLURM_SUBMIT_DIR": str(run_dir),
        "SLURM_JOB_ID": JOB_ID,
        "SLURM_JOB_NODELIST": "gpu-a[001-002]",
        "SLURM_CPUS_PER_TASK": "8",
        "SLURM_GPUS_PER_NODE": "a100:4",
        "VENV_DIR": str(tmp_path / "no-venv"),
        "PYTHON": str(python_stub),
        "PYTHONPATH": str(REPO),
        **env_extra,
    }
    for name in ("OMP_NUM_THREADS", "GPUS_PER_NODE", "CUDA_VISIBLE_DEVICES", "RESUME", "MASTER_ADDR", "MASTER_PORT"):
        if name not in env_extra:
            env.pop(name, None)
    done = subprocess.run(["bash", str(spool / "slurm_script"), *args], cwd=run_dir, env=env, timeout=60,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RenderError(done.returncode, done.stderr)
    # The config check in common.sh runs `python - CONFIG`; only the launches matter here.
    return [line for line in log.read_text().splitlines() if not line.startswith("python - ")]


def test_multi_node_script_renders_one_torchrun_per_node_with_c10d_rendezvous(tmp_path):
    calls = _render("multi_node_4gpu.sbatch", tmp_path, {"SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2"})
    srun = next(c for c in calls if c.startswith("srun "))
    torchrun = next(c for c in calls if c.startswith("torchrun "))
    assert "--nodes=2" in srun and "--ntasks-per-node=1" in srun and "--cpus-per-task=8" in srun
    assert "--nnodes 2 --nproc-per-node 4" in torchrun  # 4 from the allocation's --gpus-per-node=a100:4
    assert f"--rdzv-backend c10d --rdzv-endpoint gpu-a001:{DERIVED_PORT}" in torchrun
    assert "--rdzv-id 4242" in torchrun
    config = tmp_path / "checkout" / "slurm" / "config_multi_node_4gpu.yaml"
    assert torchrun.endswith(f"-m domainpar train --config {config}")
    assert "torchrun-env OMP_NUM_THREADS=2" in calls  # 8 CPUs of the task over 4 ranks
    # The pre-start checks ran for the job's world before srun: 2 nodes x 4 GPUs.
    dry = [c for c in calls if c.startswith("python -m domainpar train")]
    assert dry == [f"python -m domainpar train --config {config} --ranks 8 --dry-run"]
    assert calls.index(dry[0]) < calls.index(srun)


@pytest.mark.parametrize("gpus_env, count", [({"SLURM_GPUS_ON_NODE": "2"}, 2), ({"SLURM_GPUS_PER_NODE": "8"}, 8),
                                            ({"SLURM_GPUS_PER_NODE": "", "CUDA_VISIBLE_DEVICES": "0,1,2"}, 3)])
def test_single_node_script_takes_its_gpus_from_the_allocation(tmp_path, gpus_env, count):
    calls = _render("single_node_4gpu.sbatch", tmp_path, gpus_env)
    srun = next(c for c in calls if c.startswith("srun "))
    torchrun = next(c for c in calls if c.startswith("torchrun "))
    assert "--ntasks=1" in srun and "--cpus-per-task=8" in srun
    assert f"--standalone --nnodes 1 --nproc-per-node {count}" in torchrun
    assert torchrun.endswith(f"-m domainpar train --config {tmp_path / 'checkout' / 'slurm' / 'config_single_node_4gpu.yaml'}")
    assert f"torchrun-env OMP_NUM_THREADS={max(1, 8 // count)}" in calls


def test_a_gpu_script_without_gpus_in_the_allocation_stops_with_one_line(tmp_path):
    with pytest.raises(RenderError) as info:
        _render("single_node_4gpu.sbatch", tmp_path, {"SLURM_GPUS_PER_NODE": ""})
    lines = info.value.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot tell how many GPUs this node has")
    assert "--gpus-per-node" in lines[0]


def test_cpu_script_renders_srun_ranks_with_the_task_cpus(tmp_path):
    calls = _render("cpu_only.sbatch", tmp_path, {"SLURM_NTASKS": "4"})
    srun = next(c for c in calls if c.startswith("srun "))
    assert "--cpus-per-task=8" in srun
    config = tmp_path / "checkout" / "slurm" / "config_cpu_only.yaml"
    python = [c for c in calls if c.startswith("python ")]
    assert python == [f"python -m domainpar train --config {config} --ranks 4 --dry-run",
                      f"python -m domainpar train --config {config}"]


def _old_run(tmp_path: Path) -> None:
    out = tmp_path / "submit" / "runs" / "slurm_Nx4" / "checkpoints"
    out.mkdir(parents=True)
    (out / "step-00000010.pt").write_bytes(b"")


def test_an_old_run_directory_is_not_resumed_unless_asked(tmp_path):
    _old_run(tmp_path)
    with pytest.raises(RenderError) as info:
        _render("multi_node_4gpu.sbatch", tmp_path, {"SLURM_JOB_NUM_NODES": "2"})
    lines = info.value.stderr.strip().splitlines()
    assert len(lines) == 1 and "already holds checkpoints of an earlier run" in lines[0] and "RESUME=1" in lines[0]
    assert not (tmp_path / "calls.log").exists() or "srun" not in (tmp_path / "calls.log").read_text()


@pytest.mark.parametrize("how", [{"env": {"RESUME": "1"}}, {"args": ("--resume",)}, {"env": {"SLURM_RESTART_COUNT": "1"}}],
                         ids=["RESUME=1", "--resume", "requeued"])
def test_a_job_resumes_when_asked_or_requeued(tmp_path, how):
    _old_run(tmp_path)
    calls = _render("multi_node_4gpu.sbatch", tmp_path, {"SLURM_JOB_NUM_NODES": "2", **how.get("env", {})},
                    how.get("args", ()))
    torchrun = next(c for c in calls if c.startswith("torchrun "))
    assert torchrun.endswith("config_multi_node_4gpu.yaml --resume")
    assert any(c.endswith("--ranks 8 --resume --dry-run") for c in calls)


def test_bad_config_fails_before_launch_with_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  hiden: 64\n")
    with pytest.raises(RenderError) as info:
        _render("single_node_4gpu.sbatch", tmp_path, {"CONFIG": str(bad)})
    stderr = info.value.stderr
    assert "error:" in stderr and "hiden" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "calls.log").exists() or "torchrun" not in (tmp_path / "calls.log").read_text()


FAKE_SRUN = """while [[ "$1" == --* ]]; do shift; done
# As srun starts a step: SLURM_NTASKS tasks of step 0, each with its own SLURM_PROCID/SLURM_LOCALID, on "localhost".
pids=()
for ((task = 0; task < SLURM_NTASKS; task++)); do
    SLURM_STEP_ID=0 SLURM_STEPID=0 SLURM_PROCID=$task SLURM_LOCALID=$task SLURM_STEP_NUM_TASKS=$SLURM_NTASKS \
        SLURM_STEP_NODELIST=localhost "$@" > "$STUB_LOG.task$task" 2>&1 &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit $status
"""


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_cpu_script_trains_two_srun_ranks_end_to_end(tmp_path):
    """The real cpu_only.sbatch, submitted from another directory, with a fake srun that starts 2 real tasks as a
    step: the pre-start check runs, the ranks meet by themselves (first host, port from the job id), train."""
    from fixtures import slurm_job_with_free_port

    repo_copy = tmp_path / "checkout"
    shutil.copytree(SLURM, repo_copy / "slurm")
    write_graphs(tmp_path / "submit" / "data" / "graphs", 4)
    config = tmp_path / "submit" / "tiny.yaml"
    config.write_text(
        "data: {train: data/graphs, val: data/graphs}\n"
        "model: {hidden: 8, num_iterations: 1, mlp_layers: 1}\n"
        "parallel: {mode: domain, device: cpu, timeout_s: 60}\n"
        "run: {out: runs/cpu, epochs: 1, max_steps: 2, progress: false, curves: false}\n"
    )
    bin_dir = _stub_bin(tmp_path, repo_copy / "slurm", FAKE_SRUN)
    job, _ = slurm_job_with_free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RANK", "WORLD_SIZE", "MASTER_", "LOCAL_"))},
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}", "STUB_LOG": str(tmp_path / "calls.log"),
        "SUBMITTED_SCRIPT": str(repo_copy / "slurm" / "cpu_only.sbatch"), "SLURM_SUBMIT_DIR": str(tmp_path / "submit"),
        "SLURM_JOB_ID": str(job), "SLURM_JOB_NODELIST": "localhost", "SLURM_NTASKS": "2", "SLURM_PROCID": "0",
        "SLURM_CPUS_PER_TASK": "1", "SLURM_JOB_NUM_NODES": "1", "CONFIG": "tiny.yaml", "VENV_DIR": str(tmp_path / "no-venv"),
        "PYTHON": sys.executable, "PYTHONPATH": str(REPO),
    }  # fmt: skip
    done = subprocess.run(["bash", str(repo_copy / "slurm" / "cpu_only.sbatch")], cwd=tmp_path / "submit", env=env,
                          timeout=280, capture_output=True, text=True)
    tasks = "".join((tmp_path / f"calls.log.task{t}").read_text() for t in range(2) if (tmp_path / f"calls.log.task{t}").exists())
    assert done.returncode == 0, done.stdout + done.stderr + tasks
    assert "ok: domain mode, 2 rank(s) = 1 replica(s) x domain size 2" in done.stdout
    records = [json.loads(line) for line in (tmp_path / "submit" / "runs" / "cpu" / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["world_size"] == 2 and records[-1]["step"] == 2 and records[-1]["halo_bytes"] > 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_two_node_rehearsal_with_torchrun_c10d(tmp_path):
    # Two events (two optimiser steps) whose METIS halves share edges: the rehearsal really exchanges halo rows
    # (the subsampled real event gets a 0 % cut and would exchange nothing).
    graphs = tmp_path / "graphs"
    write_graphs(graphs, 2)
    out = tmp_path / "run"
    config = tmp_path / "tiny.yaml"
    config.write_text(
        f"data: {{train: {graphs}, val: {graphs}}}\n"
        "model: {hidden: 8, num_iterations: 2, mlp_layers: 1}\n"
        "parallel: {mode: domain, device: cpu, timeout_s: 60}\n"
        f"run: {{out: {out}, epochs: 1, max_steps: 2, progress: false, curves: false}}\n"
    )
    torchrun = Path(sys.executable).with_name("torchrun")
    port = _free_port()
    launchers = []
    for node_rank in range(2):
        # As srun would start them: one task per "node", with Slurm's variables; torchrun's own must win.
        env = {**os.environ, "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(node_rank), "SLURM_NTASKS": "2",
               "SLURM_LOCALID": "0", "OMP_NUM_THREADS": "1"}
        argv = [
            str(torchrun), "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "rehearsal", "--node-rank", str(node_rank),
            "-m", "domainpar", "train", "--config", str(config),
        ]
        launchers.append(subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = []
    try:
        for launcher in launchers:
            outputs.append(launcher.communicate(timeout=110)[0])
    finally:
        for launcher in launchers:
            if launcher.poll() is None:
                launcher.kill()
    for node_rank, (launcher, output) in enumerate(zip(launchers, outputs)):
        assert launcher.returncode == 0, f"node {node_rank} launcher exited {launcher.returncode}:\n{output[-3000:]}"
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert len(records) == 1
    record = records[0]
    assert record["world_size"] == 2 and record["domain_size"] == 2 and record["mode"] == "domain"
    assert record["step"] == 2 and record["halo_bytes"] > 0
    assert 0.0 < record["train_loss"] < 10.0 and 0.0 <= record["auc"] <= 1.0

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

from fixtures import REPO
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
    """The config a script uses unless CONFIG is set: ``CONFIG=${CONFIG:-path}``."""
    match = re.search(r"^CONFIG=\$\{CONFIG:-([^}]+)\}", script.read_text(), re.MULTILINE)
    assert match, f"{script.name} must set CONFIG=${{CONFIG:-slurm/<config>.yaml}}"
    return REPO / match.group(1)


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
    assert 'source "${SLURM_SUBMIT_DIR:-.}/slurm/common.sh"' in text
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
# Records how it was called, then runs the rest of the line like srun would (or not at all).
echo "{name} $*" >> "$STUB_LOG"
{body}
"""


class RenderError(Exception):
    """The script exited non-zero; carries its stderr."""

    def __init__(self, returncode: int, stderr: str) -> None:
        super().__init__(f"script exited {returncode}:\n{stderr}")
        self.stderr = stderr


def _render(script: str, tmp_path: Path, env_extra: dict[str, str]) -> list[str]:
    """Run ``script`` with stub Slurm/torch launchers; return the logged launcher calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stubs = {
        "scontrol": 'if [[ "$1 $2" == "show hostnames" ]]; then printf "gpu-a001\\ngpu-a002\\n"; fi',
        # srun runs its command once (as one task would) after dropping its own options.
        "srun": 'while [[ "$1" == --* ]]; do shift; done; exec "$@"',
        "torchrun": "exit 0",
    }
    for name, body in stubs.items():
        path = bin_dir / name
        path.write_text(STUB.format(name=name, body=body))
        path.chmod(0o755)
    log = tmp_path / "calls.log"
    run_dir = tmp_path / "submit"
    shutil.copytree(SLURM, run_dir / "slurm")
    # `python -m domainpar train` under the srun stub must not train: a stub interpreter records it instead.
    python_stub = bin_dir / "python-stub"
    python_stub.write_text(STUB.format(name="python", body=f'if [[ "$1" == "-" ]]; then exec {sys.executable} "$@"; fi'))
    python_stub.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "STUB_LOG": str(log),
        "SLURM_SUBMIT_DIR": str(run_dir),
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "gpu-a[001-002]",
        "SLURM_CPUS_PER_TASK": "8",
        "VENV_DIR": str(tmp_path / "no-venv"),
        "PYTHON": str(python_stub),
        "PYTHONPATH": str(REPO),
        **env_extra,
    }
    env.pop("OMP_NUM_THREADS", None)
    done = subprocess.run(["bash", str(run_dir / "slurm" / script)], cwd=run_dir, env=env, timeout=60, capture_output=True, text=True)
    if done.returncode != 0:
        raise RenderError(done.returncode, done.stderr)
    # The config check in common.sh runs `python - CONFIG`; only the launches matter here.
    return [line for line in log.read_text().splitlines() if not line.startswith("python - ")]


@pytest.mark.slow  # runs the batch script, whose config check starts Python with torch
def test_multi_node_script_renders_one_torchrun_per_node_with_c10d_rendezvous(tmp_path):
    calls = _render("multi_node_4gpu.sbatch", tmp_path, {"SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2"})
    srun = next(c for c in calls if c.startswith("srun "))
    torchrun = next(c for c in calls if c.startswith("torchrun "))
    assert "--nodes=2" in srun and "--ntasks-per-node=1" in srun
    assert "--nnodes 2 --nproc-per-node 4" in torchrun
    assert "--rdzv-backend c10d --rdzv-endpoint gpu-a001:29500" in torchrun
    assert "--rdzv-id 4242" in torchrun
    assert torchrun.endswith("-m domainpar train --config slurm/config_multi_node_4gpu.yaml")


@pytest.mark.slow  # runs the batch script, whose config check starts Python with torch
def test_single_node_script_renders_standalone_torchrun(tmp_path):
    calls = _render("single_node_4gpu.sbatch", tmp_path, {})
    torchrun = next(c for c in calls if c.startswith("torchrun "))
    assert "--standalone --nnodes 1 --nproc-per-node 4" in torchrun
    assert torchrun.endswith("-m domainpar train --config slurm/config_single_node_4gpu.yaml")


@pytest.mark.slow  # runs the batch script, whose config check starts Python with torch
def test_cpu_script_renders_srun_ranks_with_rendezvous_on_first_node(tmp_path):
    calls = _render("cpu_only.sbatch", tmp_path, {"SLURM_NTASKS": "4"})
    python = [c for c in calls if c.startswith("python ")]
    assert python == ["python -m domainpar train --config slurm/config_cpu_only.yaml"]


@pytest.mark.slow  # runs the batch script, whose config check starts Python with torch
def test_resubmitted_job_resumes_from_existing_checkpoints(tmp_path):
    out = tmp_path / "submit" / "runs" / "slurm_Nx4" / "checkpoints"
    out.mkdir(parents=True)
    (out / "step-00000010.pt").write_bytes(b"")
    calls = _render("multi_node_4gpu.sbatch", tmp_path, {"SLURM_JOB_NUM_NODES": "2"})
    torchrun = next(c for c in calls if c.startswith("torchrun "))
    assert torchrun.endswith("--config slurm/config_multi_node_4gpu.yaml --resume")


@pytest.mark.slow  # runs the batch script, whose config check starts Python with torch
def test_bad_config_fails_before_launch_with_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  hiden: 64\n")
    with pytest.raises(RenderError) as info:
        _render("single_node_4gpu.sbatch", tmp_path, {"CONFIG": str(bad)})
    stderr = info.value.stderr
    assert "error:" in stderr and "hiden" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "calls.log").exists() or "torchrun" not in (tmp_path / "calls.log").read_text()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_two_node_rehearsal_with_torchrun_c10d(tmp_path):
    from fixtures import TRACKML_DIR, hits_graph

    from domainpar.data.event_graph import save_graph

    graphs = tmp_path / "graphs"
    for event_id in (1, 2):  # two events: two optimiser steps
        save_graph(hits_graph(TRACKML_DIR / "event000000001-hits.csv.gz", event_id=event_id), graphs / f"event{event_id:09d}.npz")
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
        env = {**os.environ, "SLURM_PROCID": str(node_rank), "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "OMP_NUM_THREADS": "1"}
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
    assert record["step"] == 2
    assert 0.0 < record["train_loss"] < 10.0 and 0.0 <= record["auc"] <= 1.0

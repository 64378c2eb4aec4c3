"""Ranks agree before they compute (issue 28): every rank of a torchrun/srun job compares its resolved
configuration with rank 0's before its first collective, and a job that disagrees ends on every rank with one
line naming the setting and the ranks, exit status 2.

On main, ranks given different flags train (--lr), die of SIGABRT in gloo (--hidden), end one with exit 0
and the other dead (--epochs), or are refused with another flag's message (--data, --seed). Here each is the
named line on every rank. The same holds for ``verify`` under torchrun; ``evaluate`` joins no job and refuses
on every rank (tests/verification/test_locality.py).
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from domainpar.comm.agreement import RanksRefused, _leave_together, agree
from bench.common.jobs import TORCHRUN, free_port
from domainpar.launch.ranks import spawn
from domainpar.train.agreement import ADVICE, PER_RANK, inputs_setting, run_settings
from domainpar.train.config import load_config
from fixtures import write_graphs

ADVICE_RE = re.escape(ADVICE)
SMALL = ["--mode", "domain", "--iterations", "1", "--threads", "1", "--device", "cpu", "--no-progress", "--no-curves"]
_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                  "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_ID", "SLURM_JOB_ID")  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    """Two datasets of two graphs each, and a copy of the first under another path."""
    root = tmp_path_factory.mktemp("agreement")
    write_graphs(root / "graphs", 2)
    write_graphs(root / "other", 2, seed=5)
    shutil.copytree(root / "graphs", root / "copy")
    return {"graphs": root / "graphs", "other": root / "other", "copy": root / "copy"}


def _config(data: Path, **overrides):
    return load_config(None, {"data.train": str(data), "run.out": "runs/x", **overrides})


# ------------------------------------------------------------------------------------- what is compared


def test_data_are_compared_by_content_not_path(data):
    same, other, copy = (inputs_setting(str(data[k])) for k in ("graphs", "other", "copy"))
    assert same.value == copy.value and same.value != other.value
    assert re.fullmatch(rf"{re.escape(str(data['graphs']))} \(2 graph file\(s\), content [0-9a-f]{{12}}\)", same.shown)


def _values(config, world_size: int = 2) -> dict[str, str]:
    return {key: setting.value for key, setting in run_settings(config, world_size).items()}


def test_every_field_is_compared_but_the_per_rank_ones(data):
    base = _values(_config(data["graphs"]))
    changed = {"parallel.threads": 1, "data.workers": 3, "data.prefetch": 0, "data.cache_gb": 0.5, "run.progress": False,
               "parallel.timeout_s": 60.0, "parallel.heartbeat_s": 10.0, "parallel.ranks": 4}  # fmt: skip
    assert set(changed) == set(PER_RANK)
    assert _values(_config(data["copy"], **changed)) == base  # same data under another path, per-rank fields
    for dotted, value in {"optim.lr": 0.002, "model.hidden": 16, "run.epochs": 2, "run.seed": 1, "loss.weighting": "targets",
                          "run.out": "runs/y", "run.curves": False, "parallel.skip_locality_check": True,
                          "optim.batch_events": 2}.items():  # fmt: skip
        other = _values(_config(data["graphs"], **{dotted: value}))
        assert [k for k in base if base[k] != other[k]] == [dotted], dotted
    assert _values(_config(data["other"]))["data.train"] != base["data.train"]
    # The layout as resolved: the whole world is one domain group unless --domain-size says otherwise.
    assert base["parallel.domain_size"] == "2"
    assert _values(_config(data["graphs"], **{"parallel.domain_size": 1}))["parallel.domain_size"] == "1"


def test_a_user_model_is_compared_by_its_source_too(data):
    source = Path(__file__).resolve().parents[1] / "verification" / "user_models.py"
    settings = run_settings(_config(data["graphs"], **{"model.name": f"{source}:LocalGNN"}), 2)
    assert settings["model.source"].shown.startswith("user_models.py (sha256 ")
    assert "model.source" not in run_settings(_config(data["graphs"]), 2)  # built-ins: the version says it all


# ---------------------------------------------------------------------- the comparison on two ranks


def _compare(rank: int, world_size: int, cases: list[tuple[str, dict, dict]]) -> dict[str, str | None]:
    """Body of a spawned rank: for each case, agree on this rank's config; the line every rank refuses with, or None."""
    lines = {}
    for name, rank0, others in cases:
        config = load_config(None, rank0 if rank == 0 else others)
        try:
            agree(run_settings(config, world_size), what=f"case-{name}", advice=ADVICE, timeout_s=60)
            lines[name] = None
        except RanksRefused as exc:
            lines[name] = str(exc)
    atexit.unregister(_leave_together)  # these ranks go on after refusing; the job's end is spawn's
    return lines


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_ranks_compare_with_rank_0_through_the_store(data):
    graphs, other, copy = (str(data[k]) for k in ("graphs", "other", "copy"))
    base = {"data.train": graphs, "run.out": "runs/x", "model.hidden": 8}
    cases = [
        ("same", base, {**base, "data.train": copy, "parallel.threads": 1, "run.progress": False}),
        ("lr", {**base, "optim.lr": 0.004}, {**base, "optim.lr": 0.002}),
        ("hidden", base, {**base, "model.hidden": 16}),
        ("epochs", base, {**base, "run.epochs": 2}),
        ("data", base, {**base, "data.train": other}),
        ("seed", {**base, "run.seed": 1}, {**base, "run.seed": 2}),
        ("several", base, {**base, "run.seed": 2, "optim.lr": 0.01}),
    ]
    per_rank = spawn(_compare, 2, args=(cases,), timeout_s=200, backend="gloo", num_threads=1, watchdog=None)
    assert per_rank[0] == per_rank[1]  # every rank refuses with the same line
    lines = per_rank[0]
    assert lines["same"] is None
    expected = {
        "lr": "optim.lr: rank 0 has 0.004, rank 1 has 0.002",
        "hidden": "model.hidden: rank 0 has 8, rank 1 has 16",
        "epochs": "run.epochs: rank 0 has 1, rank 1 has 2",
        "seed": "run.seed: rank 0 has 1, rank 1 has 2",
        "several": "optim.lr: rank 0 has 0.001, rank 1 has 0.01; run.seed: rank 0 has 0, rank 1 has 2",
    }
    for name, what in expected.items():
        assert lines[name] == f"ranks disagree on {what}; {ADVICE}", lines[name]
    assert re.fullmatch(
        rf"ranks disagree on data\.train: rank 0 has {re.escape(graphs)} \(2 graph file\(s\), content [0-9a-f]{{12}}\), "
        rf"rank 1 has {re.escape(other)} \(2 graph file\(s\), content [0-9a-f]{{12}}\); {ADVICE_RE}", lines["data"]
    ), lines["data"]


# ----------------------------------------------------------------- torchrun-style jobs of the CLI


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return env


def _env_job(command: str, per_rank: list[list[str]], cwd: Path, timeout_s: float = 240.0) -> list[tuple[int, str, str]]:
    """``domainpar <command>`` as two ranks of an env:// job (RANK/WORLD_SIZE/MASTER_* as torchrun sets them), each
    with its own arguments; (exit status, stdout, stderr) of each."""
    env = {**_env(), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(len(per_rank))}
    processes = [
        subprocess.Popen([sys.executable, "-m", "domainpar", command, *args], cwd=cwd, text=True, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)})
        for rank, args in enumerate(per_rank)
    ]  # fmt: skip
    try:
        outputs = [p.communicate(timeout=timeout_s) for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    return [(p.returncode, out, err) for p, (out, err) in zip(processes, outputs)]


def _cases(data: dict[str, Path]) -> dict[str, tuple[list[str], list[str], str]]:
    graphs, other = re.escape(str(data["graphs"])), re.escape(str(data["other"]))
    content = r"\(2 graph file\(s\), content [0-9a-f]{12}\)"
    return {
        "lr": (["--lr", "0.004"], ["--lr", "0.002"], r"optim\.lr: rank 0 has 0\.004, rank 1 has 0\.002"),
        "hidden": (["--hidden", "8"], ["--hidden", "16"], r"model\.hidden: rank 0 has 8, rank 1 has 16"),
        "epochs": (["--epochs", "1"], ["--epochs", "2"], r"run\.epochs: rank 0 has 1, rank 1 has 2"),
        "data": ([], ["--data", str(data["other"])], rf"data\.train: rank 0 has {graphs} {content}, rank 1 has {other} {content}"),
        "seed": (["--seed", "1"], ["--seed", "2"], r"run\.seed: rank 0 has 1, rank 1 has 2"),
    }


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", ["lr", "hidden", "epochs", "data", "seed"])
def test_ranks_given_other_flags_refuse_on_every_rank(data, tmp_path, case):
    first, second, what = _cases(data)[case]
    common = ["--data", str(data["graphs"]), "--out", str(tmp_path / "out"), *SMALL]
    common += ([] if case == "hidden" else ["--hidden", "8"]) + ([] if case == "epochs" else ["--epochs", "1"])
    results = _env_job("train", [[*common, *first], [*common, *second]], tmp_path)
    for rank, (code, out, err) in enumerate(results):
        assert code == 2, f"rank {rank}: exit {code}\n{out}\n{err}"
        assert re.fullmatch(rf"error: ranks disagree on {what}; {ADVICE_RE}", err.strip()), f"rank {rank}: {err}"
        assert out == ""
    assert not (tmp_path / "out").exists()  # nothing prepared, locked or written


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_verify_ranks_given_another_model_refuse_on_every_rank(data, tmp_path):
    graph = str(data["graphs"] / "event000000001.npz")
    common = ["--graph", graph, "--parts", "2", "--iterations", "1"]
    results = _env_job("verify", [[*common, "--hidden", "8"], [*common, "--hidden", "16", "--timeout", "100"]], tmp_path)
    for rank, (code, out, err) in enumerate(results):
        assert code == 2, f"rank {rank}: exit {code}\n{out}\n{err}"
        assert err.strip() == (
            "error: ranks disagree on model.hidden: rank 0 has 8, rank 1 has 16; give every rank the same options (only "
            "--timeout and --json, which rank 0 alone writes, may differ)"
        ), f"rank {rank}: {err}"


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_under_torchrun_every_worker_names_the_setting_and_exits_2(data, tmp_path):
    """A real torchrun, each worker given its own --epochs by a wrapper (what a per-rank config amounts to): on main
    rank 0 finished with exit 0 while rank 1 died; here both workers refuse with the line and exit 2."""
    if not TORCHRUN.exists():
        pytest.skip("torchrun is not installed next to the interpreter")
    wrapper = tmp_path / "rank.sh"
    wrapper.write_text(
        f'exec "{sys.executable}" -m domainpar train --data "{data["graphs"]}" --out "{tmp_path / "out"}" --hidden 8 '
        f'{" ".join(SMALL)} --epochs "$((RANK + 1))"\n'
    )
    argv = [str(TORCHRUN), "--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
            f"127.0.0.1:{free_port()}", "--tee", "3", "--no-python", "sh", str(wrapper)]  # fmt: skip
    proc = subprocess.run(argv, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=280)
    output = proc.stdout + proc.stderr
    line = rf"error: ranks disagree on run\.epochs: rank 0 has 1, rank 1 has 2; {ADVICE_RE}"
    # What the workers said (torchrun prefixes it): the line, once each, nothing else (torchrun's own report of
    # failed workers follows, with its traceback of the agent).
    said = sorted(line for line in output.splitlines() if line.startswith("[default"))
    assert len(said) == 2 and all(re.fullmatch(rf"\[default{r}\]:{line}", said[r]) for r in (0, 1)), output
    assert proc.returncode != 0 and "SIGABRT" not in output, output
    assert len(re.findall(r"exitcode\s*:\s*2 ", output)) == 2, output  # torchrun's summary: both workers exit 2
    assert not (tmp_path / "out").exists()

"""Start `domainpar train` jobs the way users do (spawn, torchrun, srun-like) and find, kill and watch their ranks.

The harness of the fault tests and the ``faults`` bench section. Ranks name themselves ``domainpar r<k>`` (Linux
``comm``), so rank k is found among the descendants of the process started here; no fixed ports, no global
process names.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

TORCHRUN = Path(sys.executable).with_name("torchrun")
LAUNCHERS = ("spawn", "torchrun", "srun")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _children(pid: int) -> list[int]:
    found = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        pass
    return found


def descendants(pid: int) -> list[int]:
    """All living descendants of ``pid`` (Linux /proc)."""
    out, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


def running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def rank_of(pid: int) -> int | None:
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    return int(comm[len("domainpar r"):]) if comm.startswith("domainpar r") else None


@dataclass
class Job:
    """A `domainpar train` job: its top-level processes (one launcher, or one per rank for srun)."""

    launcher: str
    processes: list[subprocess.Popen]
    out: Path
    port: int | None = None
    """The rendezvous port of an srun-like job (rank 0 serves the store there)."""
    seen: set[int] = field(default_factory=set)
    """Every rank pid ever found (killed at the end even if it was orphaned, so pipes close)."""

    def ranks(self) -> dict[int, int]:
        """rank -> pid of every living rank of this job."""
        found = {}
        for process in self.processes:
            for pid in [process.pid] + descendants(process.pid):
                rank = rank_of(pid)
                if rank is not None and running(pid):
                    found[rank] = pid
        self.seen.update(found.values())
        return found

    def wait_for_ranks(self, world_size: int, timeout: float = 60.0) -> dict[int, int]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ranks = self.ranks()
            if len(ranks) == world_size:
                return ranks
            self._check_alive()
            time.sleep(0.02)
        raise AssertionError(f"{self.launcher}: {world_size} ranks did not appear within {timeout} s: {self.finish(5)}")

    def steps_logged(self) -> int:
        path = self.out / "steps.jsonl"
        try:
            return sum(1 for line in path.read_text().splitlines() if line.endswith("}"))
        except OSError:
            return 0

    def wait_for_steps(self, steps: int, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.steps_logged() >= steps:
                return
            self._check_alive()
            time.sleep(0.02)
        raise AssertionError(f"{self.launcher}: {steps} steps were not logged within {timeout} s: {self.finish(5)}")

    def _check_alive(self) -> None:
        if any(p.poll() is not None for p in self.processes):
            raise AssertionError(f"{self.launcher}: the job ended early:\n{self.finish(5)}")

    def finish(self, timeout: float) -> list[str]:
        """Wait up to ``timeout`` s for every top-level process; kill what is left; return their outputs."""
        deadline = time.monotonic() + timeout
        outputs = []
        for process in self.processes:
            try:
                output, _ = process.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill_all()
                output, _ = process.communicate()
                output = f"[still running after {timeout} s: killed by the test]\n{output}"
            outputs.append(output)
        return outputs

    def kill_all(self) -> None:
        pids = {pid for process in self.processes for pid in [process.pid] + descendants(process.pid)}
        for pid in pids | {pid for pid in self.seen if running(pid)}:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def train_args(data: Path, out: Path, *extra: str) -> list[str]:
    """A tiny domain-parallel run that trains far longer than any test waits (killed or stopped by the test)."""
    return [
        "--data", str(data), "--mode", "domain", "--epochs", "100000", "--out", str(out),
        "--hidden", "8", "--iterations", "1", "--mlp-layers", "1", "--threads", "1", "--device", "cpu",
        "--no-progress", "--no-curves", *extra,
    ]  # fmt: skip


def start(launcher: str, world_size: int, data: Path, out: Path, *extra: str) -> Job:
    """Start ``domainpar train`` on ``world_size`` ranks with ``launcher`` (spawn, torchrun or srun-like)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS",
                 "SLURM_STEP_ID", "SLURM_JOB_ID"):
        env.pop(name, None)
    args = train_args(data, out, *extra)
    popen = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=out.parent)
    port = None
    if launcher == "spawn":
        processes = [subprocess.Popen([sys.executable, "-m", "domainpar", "train", "--ranks", str(world_size), *args],
                                      env=env, **popen)]
    elif launcher == "torchrun":
        argv = [str(TORCHRUN), "--nnodes", "1", "--nproc-per-node", str(world_size), "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "-m", "domainpar", "train", *args]
        processes = [subprocess.Popen(argv, env=env, **popen)]
    elif launcher == "srun":
        # What srun gives every task: Slurm's variables, and the rendezvous address from the batch script.
        port = free_port()
        processes = []
        for rank in range(world_size):
            task_env = {**env, "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(rank),
                        "SLURM_NTASKS": str(world_size), "SLURM_LOCALID": str(rank),
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
            processes.append(subprocess.Popen([sys.executable, "-m", "domainpar", "train", *args], env=task_env, **popen))
    else:
        raise ValueError(launcher)
    return Job(launcher, processes, out, port)


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]

"""Which launcher started this process, read from its environment, and where its ranks meet.

* ``torchrun`` gives every worker RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/MASTER_PORT and
  TORCHELASTIC_RUN_ID; a hand-made ``env://`` job sets RANK and WORLD_SIZE (and the address) itself.
* ``srun`` starts the tasks of a job *step*: each task gets SLURM_STEP_ID, SLURM_PROCID, SLURM_LOCALID,
  SLURM_STEP_NUM_TASKS and SLURM_STEP_NODELIST, inside ``sbatch`` and ``salloc`` alike.
* The batch script of ``sbatch`` is not an srun step: it gets SLURM_JOB_ID, the allocation's SLURM_NTASKS and
  SLURM_PROCID=0, but no SLURM_STEP_ID (nor does the interactive step of ``salloc``).

So a process *joins* a job when RANK and WORLD_SIZE are set, or when it is a task of an srun step of two or more
tasks; the batch script's variables alone never make it a rank. An srun step without MASTER_ADDR/MASTER_PORT
meets at the first host of the step's node list, on a port derived from the job and step ids
(:func:`slurm_rendezvous`), so ``srun domainpar train ...`` needs no exports.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from typing import Mapping

from domainpar.errors import DomainparError, MachineFault

#: Largest id of a normal job step; ids above it are Slurm's special steps (batch 0xfffffffb, interactive 0xfffffffa, ...).
SLURM_MAX_NORMAL_STEP_ID = 0xFFFFFFF0
#: Names of Slurm's special steps, by id, for messages.
SLURM_SPECIAL_STEPS = {0xFFFFFFFA: "interactive", 0xFFFFFFFB: "batch", 0xFFFFFFFC: "extern", 0xFFFFFFFD: "pending"}
#: First port of the range a Slurm rendezvous port is derived in (below Linux's ephemeral range, 32768 and up).
RENDEZVOUS_PORT_BASE = 20000
#: Size of that range.
RENDEZVOUS_PORT_SPAN = 10000


@dataclass(frozen=True)
class LauncherEnv:
    """Where this process sits: a rank of a torchrun/env:// job or an srun step, or a process of its own."""

    kind: str
    """"torchrun", "env" (RANK/WORLD_SIZE set by hand), "srun" (a task of an srun step), "planned" (a job a
    launcher will start: ``train --dry-run``) or "none"."""
    rank: int
    """Global rank (0 when kind is "none")."""
    world_size: int
    """Processes of the job (1 when kind is "none")."""
    local_rank: int
    """Rank on this node (selects the GPU)."""
    slurm_job: str | None = None
    """SLURM_JOB_ID when this process runs inside a Slurm allocation."""
    slurm_step: str | None = None
    """The step's id ("0", "1", ...), or "batch"/"interactive" for Slurm's special steps, None outside a step."""
    slurm_nodes: int | None = None
    """Nodes of the allocation (SLURM_JOB_NUM_NODES), when known."""

    @property
    def joins(self) -> bool:
        """True when this process is one rank of a job started by a launcher (it must not spawn ranks)."""
        return self.kind != "none"

    def describe(self) -> str:
        """This process in words, for messages: "rank 3 of 8 under torchrun", "task 3 of srun step 4242.0 (8 tasks)"."""
        if self.kind == "torchrun":
            return f"rank {self.rank} of {self.world_size} under torchrun"
        if self.kind == "env":
            return f"rank {self.rank} of {self.world_size} (RANK/WORLD_SIZE set in the environment)"
        if self.kind == "srun":
            return f"task {self.rank} of srun step {self.slurm_job}.{self.slurm_step} ({self.world_size} tasks)"
        if self.kind == "planned":
            return f"a planned job of {self.world_size} ranks"
        if self.slurm_job is None:
            return "one process (no torchrun or srun)"
        if self.slurm_step in ("batch", "interactive"):
            return f"one process in the {self.slurm_step} step of Slurm job {self.slurm_job}"
        if self.slurm_step is None:
            return f"one process of Slurm job {self.slurm_job}, outside any srun step (its batch script or an salloc shell)"
        return f"the only task of srun step {self.slurm_job}.{self.slurm_step}"


def _int(environ: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    """The first of ``names`` that is set, as an integer; a set but non-integer value is one line naming it."""
    for name in names:
        value = environ.get(name)
        if value is not None and value.strip() != "":
            try:
                return int(value)
            except ValueError:
                raise DomainparError(f"environment variable {name} must be an integer (got {value[:40]!r})") from None
    return None


def _step(environ: Mapping[str, str]) -> tuple[str | None, bool]:
    """(the step's name, whether it is a normal srun step) from SLURM_STEP_ID / SLURM_STEPID."""
    for name in ("SLURM_STEP_ID", "SLURM_STEPID"):
        value = environ.get(name, "").strip()
        if not value:
            continue
        try:
            number = int(value)
        except ValueError:
            raise DomainparError(f"environment variable {name} must be an integer (got {value[:40]!r})") from None
        if 0 <= number <= SLURM_MAX_NORMAL_STEP_ID:
            return str(number), True
        # Older Slurm printed the special ids as negative ints (%d of 0xfffffffb is -5).
        special = SLURM_SPECIAL_STEPS.get(number % 2**32)
        return special or str(number), False
    return None, False


def detect(environ: Mapping[str, str] | None = None) -> LauncherEnv:
    """Read this process's launcher from ``environ`` (default ``os.environ``); see the module docstring.

    Raises:
        DomainparError: a launcher variable that is set but not an integer (named).
    """
    env = os.environ if environ is None else environ
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or None
    nodes = _int(env, ("SLURM_JOB_NUM_NODES", "SLURM_NNODES")) if job else None
    step, normal_step = _step(env)
    rank, world = _int(env, ("RANK",)), _int(env, ("WORLD_SIZE",))
    if rank is not None and world is not None:
        local = _int(env, ("LOCAL_RANK",))
        _check_ranks(("RANK", rank), ("WORLD_SIZE", world), ("LOCAL_RANK", local))
        kind = "torchrun" if env.get("TORCHELASTIC_RUN_ID") else "env"
        return LauncherEnv(kind, rank, world, 0 if local is None else local, job, step, nodes)
    if normal_step:
        rank = _int(env, ("SLURM_PROCID",))
        tasks = _first_set(env, ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"))
        world = _int(env, (tasks,)) if tasks else None
        if rank is not None and world is not None and world > 1:
            local = _int(env, ("SLURM_LOCALID",))
            _check_ranks(("SLURM_PROCID", rank), (tasks, world), ("SLURM_LOCALID", local))
            return LauncherEnv("srun", rank, world, 0 if local is None else local, job, step, nodes)
    return LauncherEnv("none", 0, 1, 0, job, step, nodes)


def _first_set(environ: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    """The first of ``names`` set to something other than blanks."""
    return next((name for name in names if environ.get(name, "").strip()), None)


def _check_ranks(rank: tuple[str, int], world: tuple[str, int], local: tuple[str, int | None]) -> None:
    """A launcher's rank, world size and local rank (each as (variable, value)) describe a process of the job.

    A stale or hand-edited export (RANK=5 with WORLD_SIZE=2) would otherwise reach the rendezvous, where rank 0's
    store waits for a peer that cannot exist until the timeout, then fails with a traceback.

    Raises:
        DomainparError: a world size below 1, a rank outside 0 .. world size - 1, or a negative local rank (named).
    """
    (world_name, size), (rank_name, number), (local_name, local_number) = world, rank, local
    if size < 1:
        raise DomainparError(f"environment variable {world_name} must be at least 1 (got {size})")
    if not 0 <= number < size:
        raise DomainparError(f"environment variable {rank_name} must be between 0 and {world_name}-1 = {size - 1} (got {number})")
    # The local rank is not bounded by the world size: a hand-made one-process job may pin a GPU with it.
    if local_number is not None and local_number < 0:
        raise DomainparError(f"environment variable {local_name} must be at least 0 (got {local_number})")


def planned_job(world_size: int, environ: Mapping[str, str] | None = None) -> LauncherEnv:
    """The job a launcher will start with ``world_size`` ranks, seen from here (``train --dry-run`` in a batch script)."""
    here = detect(environ)
    return LauncherEnv("planned", 0, world_size, 0, here.slurm_job, here.slurm_step, here.slurm_nodes)


def first_host(nodelist: str) -> str:
    """The first host of a Slurm host list: ``gpu-a[001-004,007],cpu9`` → ``gpu-a001``.

    Each bracket of the first entry is replaced by its first element, keeping its zero padding.

    Raises:
        DomainparError: an empty or malformed list.
    """
    text = nodelist.strip()
    depth, end = 0, len(text)
    for index, char in enumerate(text):
        depth += char == "["
        depth -= char == "]"
        if char == "," and depth == 0:
            end = index
            break
    entry = text[:end]

    def first(match: re.Match) -> str:
        return re.split(r"[,-]", match.group(1), maxsplit=1)[0]

    host = re.sub(r"\[([^\]]*)\]", first, entry)
    if not host or any(c in host for c in "[],"):
        raise DomainparError(f"Slurm node list {nodelist[:80]!r}: expected host names like node[01-04],node7")
    return host


def rendezvous_port(job_id: int, step_id: int) -> int:
    """A port every task of one srun step derives alike: job and step ids hashed into 20000-29999."""
    return RENDEZVOUS_PORT_BASE + (job_id * 97 + step_id) % RENDEZVOUS_PORT_SPAN


def slurm_rendezvous(launcher: LauncherEnv, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """MASTER_ADDR and MASTER_PORT of an srun step: the environment's, else the step's first host and a derived port.

    Raises:
        DomainparError: neither the address nor a node list to take it from (names Slurm and what to set).
    """
    env = os.environ if environ is None else environ
    address, port = env.get("MASTER_ADDR", ""), env.get("MASTER_PORT", "")
    if not address:
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        if not nodelist:
            raise DomainparError(
                f"{launcher.describe()}: MASTER_ADDR is not set and Slurm gave no node list (SLURM_STEP_NODELIST) to "
                "take it from; export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | sed -n 1p) before srun"
            )
        address = first_host(nodelist)
    if not port:
        job = _int(env, ("SLURM_JOB_ID", "SLURM_JOBID")) or 0
        port = str(rendezvous_port(job, int(launcher.slurm_step or 0)))
    return address, port


def check_rendezvous(address: str, port: str, launcher: LauncherEnv) -> None:
    """MASTER_ADDR and MASTER_PORT name a host that resolves and a TCP port, before the rendezvous waits on them.

    torch's ``env://`` rendezvous reads them itself: a port that is no number or out of range is its traceback, and
    a host name that does not resolve is a connect retried until the process group timeout (minutes), then a
    traceback that blames the network.

    Raises:
        DomainparError: a port that is not an integer in 1..65535, or a host name the resolver does not know.
        MachineFault: the resolver failed for another reason (no name server reachable: the machine's, not the
            name's).
    """
    where = f"the rendezvous of {launcher.describe()}"
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 1 <= number <= 65535:
        raise DomainparError(f"environment variable MASTER_PORT must be a TCP port number 1..65535 for {where} (got {port[:40]!r})")
    try:
        socket.getaddrinfo(address, number, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        if exc.errno in _UNKNOWN_NAME_ERRORS:
            raise DomainparError(
                f"environment variable MASTER_ADDR must name a host this machine can resolve for {where} "
                f"(got {address[:80]!r}: {exc.strerror})"
            ) from None
        raise MachineFault(f"{where}: the host name {address[:80]!r} (MASTER_ADDR) could not be looked up: {exc.strerror}") from None


#: getaddrinfo's answers that the name itself is unknown (not that the resolver could not be asked).
_UNKNOWN_NAME_ERRORS = {getattr(socket, name) for name in ("EAI_NONAME", "EAI_NODATA", "EAI_ADDRFAMILY") if hasattr(socket, name)}


__all__ = ["LauncherEnv", "check_rendezvous", "detect", "first_host", "planned_job", "rendezvous_port", "slurm_rendezvous"]

"""Rank functions and a driver for the tests of ranks started as copies of their parent (``spawn(fork=True)``).

Run as a script (``python fork_jobs.py CASE OUT``) it is the parent: a fresh process, which is what a command
is when it starts its ranks, and writes what it saw to OUT as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

#: Set by the parent before it starts its ranks: a copy of the parent sees its value, a spawned rank the default.
MARK = "module default"


def mark(rank: int, world_size: int) -> tuple:
    """What a rank sees: the parent's mark (or the module's own), its pid and its torch thread count."""
    import torch

    return MARK, os.getpid(), torch.get_num_threads()


def killed_on_rank_one(rank: int, world_size: int, pid_dir: str) -> int:
    """Rank 1 is killed (SIGKILL: no report); rank 0 waits to be stopped."""
    with open(os.path.join(pid_dir, f"rank{rank}"), "w") as fh:
        fh.write(str(os.getpid()))
    if rank == 1:
        time.sleep(0.5)
        os.kill(os.getpid(), 9)
    time.sleep(120)
    return rank


def sleeper(rank: int, world_size: int, pid_dir: str) -> int:
    """Writes its pid, then outlives any test: only its launcher's death ends it."""
    with open(os.path.join(pid_dir, f"rank{rank}"), "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(300)
    return rank


#: Calls of init_process_group in this process (a copy starts with its parent's count: none).
JOINS: list[str] = []


def flaky_joins(failing: str) -> None:
    """Make ``init_process_group`` fail as gloo's mesh connect does now and then: ``failing`` is "first" (every
    rank's first attempt fails before it joins), "rank0" (rank 0 joins, then fails: its peer joined) or "always"."""
    import torch.distributed as dist

    real = dist.init_process_group

    def init_process_group(*args, **kwargs):
        JOINS.append(kwargs["init_method"])
        fails = failing == "always" or len(JOINS) == 1 and (failing == "first" or kwargs["rank"] == 0)
        if fails and failing == "rank0":
            real(*args, **kwargs)
            dist.destroy_process_group()
        if fails:
            raise RuntimeError("[pair.cc:553] Gloo connectFullMesh failed with [pair.cc:553] Connection closed by peer [127.0.0.1]:4240")
        return real(*args, **kwargs)

    dist.init_process_group = init_process_group


def joined(rank: int, world_size: int) -> tuple:
    """The rendezvous this rank tried, and a sum over the group it joined (every rank there)."""
    import torch
    import torch.distributed as dist

    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)
    return [os.path.basename(method) for method in JOINS], float(total)


def _main(case: str, out: str) -> None:
    from domainpar.launch.ranks import SpawnError, can_fork, spawn

    global MARK
    MARK = "set by the parent"
    seen: dict = {"can_fork_1": can_fork(1), "can_fork_2": can_fork(2)}
    hows: list[str] = []
    if case == "threads":  # one thread each, with another thread of the parent running: spawned
        stop = threading.Event()
        other = threading.Thread(target=stop.wait, daemon=True)
        other.start()
        seen["can_fork_1_with_a_thread"] = can_fork(1)
        seen["values"] = spawn(mark, 2, fork=True, num_threads=1, started=hows.append, timeout_s=120)
        stop.set()
    elif case in ("one", "two"):
        seen["values"] = spawn(mark, 2, fork=True, num_threads=1 if case == "one" else 2, started=hows.append, timeout_s=120)
    elif case == "killed":
        started = time.monotonic()
        try:
            spawn(killed_on_rank_one, 2, args=(os.path.dirname(out),), fork=True, num_threads=1, started=hows.append, timeout_s=120)
        except SpawnError as exc:
            seen["error"], seen["ranks"] = exc.line, exc.ranks
        seen["seconds"] = time.monotonic() - started
    elif case.startswith("flaky-"):
        failing, _, ranks = case[len("flaky-"):].partition(":")
        flaky_joins(failing)
        try:
            seen["values"] = spawn(joined, int(ranks or 2), fork=True, num_threads=1, started=hows.append, timeout_s=120)
        except SpawnError as exc:
            seen["error"], seen["ranks"] = exc.line, exc.ranks
    elif case == "sleep":
        spawn(sleeper, 2, args=(os.path.dirname(out),), fork=True, num_threads=1, started=hows.append, timeout_s=300)
    seen["hows"], seen["parent"] = hows, os.getpid()
    with open(out, "w") as fh:
        json.dump(seen, fh)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the ranks import this module by name
    _main(sys.argv[1], sys.argv[2])

"""Starting the processes of a domain-parallel job, and ending all of them when one fails.

* :func:`spawn` runs ``fn(rank, world_size, *args)`` in ``nprocs`` spawned local processes, or copies of this one
  where that is sound (:func:`can_fork`), with a FileStore rendezvous in a private temp dir (no port is ever fixed).
  When a rank fails, it stops the others and raises :class:`SpawnError` naming the job's *first* failure in one
  line; a job that outlives ``timeout_s`` is killed.
* :func:`init_from_env` joins a job started by ``torchrun`` or ``srun``; :func:`fail_rank` ends such a rank
  after an exception, naming the job's first failure once on stderr (and in torchrun's error file).

Every rank of a job of two or more runs a watchdog (:mod:`domainpar.comm.watchdog`), so that no rank waits in a
collective for a peer that is gone, and dies with its launcher (:mod:`domainpar.launch.lifeline`).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import pickle
import queue
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from domainpar.comm.failure import Failure, raised
from domainpar.comm.watchdog import Watchdog, WatchdogConfig, base_store, current, finish_current, set_current
from domainpar.errors import DomainparError, MachineFault, is_fault, message_line, note_stop
from domainpar.launch.bootstrap import RankProcess, StartFailed, start_reason
from domainpar.launch.env import LauncherEnv, check_rendezvous, detect, slurm_rendezvous
from domainpar.launch.inbox import Inbox
from domainpar.launch.lifeline import Terminated, die_with_parent, name_process, terminate_on_signals
from domainpar.signals import STOP_SIGNALS, children_start_quietly, hold_stops, signal_name, start_resource_tracker

#: Default seconds before a process group operation, or a whole spawned job, gives up.
DEFAULT_TIMEOUT_S = 300.0

class SpawnError(RuntimeError):
    """A spawned rank failed, died or hung; the message names the rank(s) and carries the traceback."""

    def __init__(self, message: str, ranks: list[int], traceback_text: str = "", failure: Failure | None = None) -> None:
        super().__init__(message)
        self.ranks = ranks
        """Ranks that failed (or had not finished at the timeout); the first is the culprit."""
        self.traceback_text = traceback_text
        """The failing rank's traceback, as text (empty when it died without one)."""
        self.failure = failure
        """The job's first failure, when a rank failed (None at a timeout)."""

    @property
    def line(self) -> str:
        """The one-line summary (the message without the traceback)."""
        return str(self).split("\n", 1)[0]


def spawn_failure(exc: SpawnError, what: str) -> BaseException:
    """What a command raises for a failed spawned job: a rank's user mistake (one line, exit 2), a rank's machine
    fault, death or silence (:class:`~domainpar.errors.MachineFault`, exit 1), or the SpawnError itself for a bug
    (its traceback is the report).

    Args:
        exc: the job's failure.
        what: the work the ranks did, put first in the line (e.g. ``"partitioned inference"``).
    """
    failure = exc.failure
    if failure is not None and failure.user_error:
        return DomainparError(exc.line)
    if failure is None or failure.kind in ("died", "hung") or not exc.traceback_text:
        # A rank killed (by the out-of-memory killer, usually), silent, past the time limit, or out of memory itself.
        return MachineFault(f"{what}: {exc.line}", kind=None if " out of memory" in exc.line else "memory")
    return exc


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in a distributed job."""

    rank: int
    world_size: int
    local_rank: int
    """Rank on this node (selects the GPU)."""
    device: torch.device
    backend: str
    """Process group backend (:func:`backend_for`)."""


def device_for_local_rank(local_rank: int, kind: str = "auto") -> torch.device:
    """The device a local rank computes on, made current (NCCL point-to-point requires it).

    CUDA rank ``local_rank`` uses GPU ``local_rank % device_count``: one GPU per rank where every rank sees all
    GPUs, ``cuda:0`` where the launcher gives each task only its own.

    Args:
        local_rank: rank on this node.
        kind: "auto" (CUDA when available), "cuda" or "cpu".
    """
    if kind == "cpu" or (kind == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise DomainparError(f"--device cuda: this process sees no CUDA device (local rank {local_rank}); use --device cpu")
    index = local_rank % count
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def backend_for(device: torch.device | str) -> str:
    """The process group backend for ``device``: NCCL for CUDA tensors (plus gloo for the few CPU ones), gloo on CPU."""
    return "cpu:gloo,cuda:nccl" if torch.device(device).type == "cuda" else "gloo"


# ------------------------------------------------------------------ the watchdog of a rank


def _start_watchdog(
    rank: int, world_size: int, config: WatchdogConfig, reporter: Callable[[Failure, str], None]
) -> Watchdog:
    """Start this rank's watchdog on the default group's store and make it the process's current one."""
    store = dist.distributed_c10d._get_default_store()
    base = base_store(store)
    # Under torchrun the agent serves the store; under a plain env:// rendezvous (srun) rank 0 does.
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    hosts_store = isinstance(base, dist.TCPStore) and rank == 0 and not agent_store
    watchdog = Watchdog(store, rank, world_size, config, reporter, hosts_store=hosts_store).start()
    set_current(watchdog)
    return watchdog


def _write_torchelastic_error_file(line: str, later: int = 0) -> None:
    """torchrun's summary shows a failed worker's error file: make it our one line rather than "<N/A>".

    The agent names as root cause the failure of earliest timestamp (whole seconds; the lowest rank on a tie),
    a worker's being its error file's. ``later`` dates the record that many seconds after now.
    """
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path or os.path.exists(path):
        return
    stamp = str(int(time.time()) + later)
    record = {"message": {"message": line, "extraInfo": {"py_callstack": line, "timestamp": stamp}}}
    try:
        with open(path, "w") as fh:
            json.dump(record, fh)
    except OSError:
        pass


def report_to_stderr(rank: int, failure: Failure, traceback_text: str = "") -> None:
    """How torchrun/srun rank ``rank`` reports: its traceback (a bug of its own), then ``error: <one line>``.

    A rank stopped by another's failure names that failure first and itself last.
    """
    line = failure.message if failure.rank == rank else f"{failure.message}; rank {rank} stopped"
    if traceback_text:
        sys.stderr.write(traceback_text if traceback_text.endswith("\n") else traceback_text + "\n")
    sys.stderr.write(f"error: {line}\n")
    sys.stderr.flush()
    watchdog = current()
    if failure.rank == rank or watchdog is None:
        _write_torchelastic_error_file(line)
    else:
        # Dated at exit and a second later (the agent's resolution is whole seconds), so that the agent's summary
        # names the peer as the root cause, not a survivor that noticed the death before the agent did.
        watchdog.before_exit.append(lambda: _write_torchelastic_error_file(line, later=1))


def refused_before_join(exc: DomainparError, launcher: LauncherEnv) -> None:
    """A rank refused before it joined its job (a pre-start check failed): one line per node, not one per rank.

    Every rank of a node reaches the same verdict, so local rank 0 says it (the caller prints the line and exits 2)
    and the others exit 2 here without a word; all leave the line in torchrun's error file. Returns at once for a
    process that is no rank of a job, or one that already joined (its watchdog reports instead).
    """
    if not launcher.joins or current() is not None or dist.is_initialized():
        return
    _write_torchelastic_error_file(str(exc))
    if launcher.local_rank != 0:
        sys.exit(2)


def _hold_stop_signals() -> None:
    """SIGTERM and SIGHUP no longer raise in this (main) thread: they are noted and the rank goes on ending itself."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if signum is not None:
            signal.signal(signum, lambda signum, _frame: note_stop(signum))  # noted: Watchdog.await_launcher


def fail_rank(exc: BaseException) -> None:
    """End this rank of a torchrun/srun job after ``exc``; returns only when there is no watchdog (one process).

    Names the job's first failure once (this rank's own, or the peer's that caused ``exc``), aborts the process
    groups and exits: status 2 for this rank's own user mistake, 1 otherwise.
    """
    watchdog = current()
    if watchdog is None:
        return
    # A launcher's stop signal (torchrun signals every rank once one died) must not interrupt naming the cause.
    _hold_stop_signals()
    if isinstance(exc, Terminated):
        # The launcher or the scheduler stops this rank: usually because a peer failed, which is what to name;
        # with no failure to name (scancel, a user's kill) the stop is said, not published.
        failure = watchdog.stopped(exc)
        watchdog.finish_failed(failure, exc.exit_code, linger=failure.rank != watchdog.rank)
    failure = watchdog.explain(exc)
    own = failure.rank == watchdog.rank
    text = "" if (not own or failure.user_error or is_fault(exc)) else "".join(traceback.format_exception(exc))
    watchdog.report(failure, text)
    watchdog.finish_failed(failure, 2 if own and failure.user_error else 1)


def init_from_env(
    timeout_s: float = DEFAULT_TIMEOUT_S,
    device: str = "auto",
    watchdog: WatchdogConfig | None = WatchdogConfig(),
) -> DistEnv:
    """Join a torchrun or srun job: initialise the default process group from its variables.

    Reads torchrun's or an srun step's variables (:func:`~domainpar.launch.env.detect`) and rendezvous at
    MASTER_ADDR:MASTER_PORT (under srun, when unset: :func:`~domainpar.launch.env.slurm_rendezvous`). An existing
    default group is reused. In a job of two or more a watchdog reports on stderr; a normal exit marks the rank
    finished.

    Args:
        timeout_s: process group timeout in seconds.
        device: "auto" (CUDA when available), "cuda" or "cpu"; the backend follows it.
        watchdog: heartbeat and liveness settings (None: no watchdog).

    Returns:
        This process's :class:`DistEnv`.
    """
    launcher = detect()
    if not launcher.joins:
        hint = ""
        if launcher.slurm_job is not None:
            hint = (f"; this is {launcher.describe()}, whose SLURM_PROCID/SLURM_NTASKS describe the allocation, not "
                    "a step: start the ranks with srun (or torchrun), or let domainpar spawn local ones (--ranks/--parts)")
        raise DomainparError(
            "RANK and WORLD_SIZE (torchrun) or an srun step of two or more tasks (SLURM_STEP_ID, SLURM_PROCID, "
            f"SLURM_NTASKS) are needed to join a distributed job (got neither){hint}"
        )
    rank, world_size, local_rank = launcher.rank, launcher.world_size, launcher.local_rank
    if threading.current_thread() is threading.main_thread():
        die_with_parent()
        name_process(rank)
    chosen = device_for_local_rank(local_rank, device)
    backend = backend_for(chosen)
    if not dist.is_initialized():
        if launcher.kind == "srun":
            # An srun step meets at its first host unless the script exported an address (launch.env).
            address, port = slurm_rendezvous(launcher)
            os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = address, port
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if not os.environ.get(name):
                raise DomainparError(
                    f"environment variable {name} must be set for the rendezvous of {launcher.describe()} (got nothing)"
                )
        address, port = os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
        check_rendezvous(address, port, launcher)
        try:
            dist.init_process_group(
                backend=backend,
                init_method="env://",
                rank=rank,
                world_size=world_size,
                timeout=timedelta(seconds=timeout_s),
            )
        except dist.DistError as exc:
            # Rank 0's store not reachable within the timeout, or its port taken: the job's machines, not its input.
            reason = message_line(str(exc).split("\n", 1)[0], 160)
            if rank == 0:
                advice = (f"check that port {port} is free on this host and that the other {world_size - 1} rank(s) "
                          f"were started with MASTER_ADDR={address} MASTER_PORT={port} and can reach it")
            else:
                advice = f"check that rank 0 runs on {address} and that port {port} is free there and reachable from here"
            raise MachineFault(f"{launcher.describe()}: no rendezvous at {address}:{port} ({reason}); {advice}") from None
    if world_size > 1 and watchdog is not None and current() is None:
        _start_watchdog(rank, world_size, watchdog, functools.partial(report_to_stderr, rank))
        atexit.register(finish_current)
    return DistEnv(rank=rank, world_size=world_size, local_rank=local_rank, device=chosen, backend=backend)


# ------------------------------------------------------------------ spawn


def _child(
    rank: int,
    world_size: int,
    fn: Callable[..., Any],
    args: tuple,
    init_method: str,
    backend: str | None,
    timeout_s: float,
    num_threads: int | None,
    results: Any,
    parent_pid: int,
    watchdog_config: WatchdogConfig | None,
) -> None:
    """Body of one spawned rank: init the group, run ``fn``, report ("ok", value) or ("error", failure)."""
    die_with_parent(parent_pid)
    name_process(rank)
    # Started with the stop signals blocked (see spawn): Ctrl-C is the parent's (it stops the ranks), SIGTERM and
    # SIGHUP unwind this rank (its writers remove their temporaries) and are reported to a parent that is stopping.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    terminate_on_signals()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    report_lock = threading.Lock()

    def report(failure: Failure, traceback_text: str = "") -> None:
        # Called by this thread or the watchdog's; flushed before returning, as the process may end right after.
        with report_lock:
            results.put((rank, "error", {"failure": failure.to_json(), "traceback": traceback_text}))
            results.close()
            results.join_thread()

    watchdog = None
    try:
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        device = device_for_local_rank(rank) if backend != "gloo" else torch.device("cpu")
        chosen = backend or backend_for(device)
        os.environ.setdefault("LOCAL_RANK", str(rank))
        _join_group(rank, world_size, chosen, init_method, timedelta(seconds=timeout_s))
        if world_size > 1 and watchdog_config is not None:
            # The spawning parent stops its ranks only once it has their reports, and names the failure itself: a
            # rank it stops says so at once instead of looking for a cause (and being killed while it looks).
            watchdog = _start_watchdog(rank, world_size, replace(watchdog_config, stop_cause_s=0.0), report)
        value = fn(rank, world_size, *args)
        # Pickle here, not in the queue's feeder thread, so an unpicklable result is reported as this rank's error.
        payload = pickle.dumps(value)
        _nothing_left_to_unwind()
    except BaseException as exc:  # report everything, including KeyboardInterrupt, to the parent
        # A bug keeps its traceback; a machine fault (out of memory, disk full) is its one line.
        text = "" if is_fault(exc) else traceback.format_exc()
        if watchdog is None:
            report(raised(rank, exc), text)
            _nothing_left_to_unwind()
            if dist.is_initialized():
                dist.destroy_process_group()
            return
        failure = watchdog.explain(exc)
        watchdog.report(failure, text if failure.rank == rank else "")
        _nothing_left_to_unwind()
        watchdog.finish_failed(failure, 1)
        return
    finish_current()
    dist.destroy_process_group()
    results.put((rank, "ok", payload))


#: Rendezvous attempts of a spawned job: gloo's full-mesh connect between local ranks fails now and then with
#: "Connection closed by peer" while every rank is alive (pytorch#53270); a fresh store is a fresh mesh.
RENDEZVOUS_ATTEMPTS = 3


def _transient_join_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised by ``init_process_group``, is gloo's failed mesh connect (worth a second rendezvous)."""
    return isinstance(exc, RuntimeError) and "connectFullMesh" in str(exc)


def _join_group(rank: int, world_size: int, backend: str, init_method: str, timeout: timedelta) -> None:
    """Initialise the default process group at the FileStore ``init_method``, again on a fresh store (up to
    :data:`RENDEZVOUS_ATTEMPTS` in all) while the mesh connect fails transiently.

    The ranks retry together: after each attempt every rank writes whether it joined to a store of that attempt and
    reads the others'. A rank that joined while a peer failed would otherwise wait in its first collective for a
    peer that is rendezvousing again. Any other error is raised at once; a peer that dies is the parent's to name
    (this rank waits for its vote, and is stopped).
    """
    for attempt in range(RENDEZVOUS_ATTEMPTS):
        method = init_method if attempt == 0 else f"{init_method}.{attempt}"
        joined = True
        try:
            dist.init_process_group(backend=backend, init_method=method, rank=rank, world_size=world_size, timeout=timeout)
        except RuntimeError as exc:
            if attempt + 1 == RENDEZVOUS_ATTEMPTS or not _transient_join_failure(exc):
                raise
            joined = False
        if world_size == 1:
            if joined:
                return
            continue  # no peer to agree with
        votes = dist.FileStore(f"{method[len('file://'):]}.joined", world_size)
        votes.set_timeout(timeout)
        votes.set(str(rank), b"1" if joined else b"0")
        others = [str(r) for r in range(world_size)]
        votes.wait(others)
        if all(votes.get(key) == b"1" for key in others):
            return
        if dist.is_initialized():
            dist.destroy_process_group()


def _nothing_left_to_unwind() -> None:
    """A rank whose work is done, or whose failure is reported, ends at once on SIGTERM or SIGHUP: raised, the stop
    would land in its way out (multiprocessing's exit-time finalizers print their traceback)."""
    for signum in STOP_SIGNALS - {signal.SIGINT}:  # SIGINT stays ignored: Ctrl-C is the launcher's
        signal.signal(signum, signal.SIG_DFL)


def _in_bootstrap(pid: int) -> bool:
    """Whether a spawned child has not reached :func:`_child` yet: it still imports, has written nothing, and
    holds the stop signals blocked (Linux: its name is not ``domainpar r<rank>`` yet; elsewhere: unknown, False)."""
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return not fh.read().startswith("domainpar r")
    except OSError:
        return False


def _stop(processes: list) -> None:
    # A process whose start failed (fork refused: EAGAIN) has nothing to stop.
    processes = [p for p in processes if p._popen is not None]
    for process in processes:
        if process.is_alive():
            # A child still importing would take SIGTERM only once it reaches _child: it is killed at once instead.
            process.kill() if _in_bootstrap(process.pid) else process.terminate()
    deadline = time.monotonic() + 5.0
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()


#: How a rank that died before it ran any of our code is named (after how it died).
_STARTING = "while reading its start-up arguments"


def _died(rank: int, nprocs: int, exitcode: int, reason: str | None = None, starting: bool = False) -> str:
    """The line of a rank that died without reporting: how it died, and when it died starting, why (``reason``,
    what its start-up guard wrote) or that it did (``starting``)."""
    if exitcode < 0:
        how = f"rank {rank} of {nprocs} died (killed by {signal_name(exitcode)})"
    elif reason is None and not starting:
        return f"rank {rank} of {nprocs} died (exit code {exitcode}) without reporting an error"
    else:
        how = f"rank {rank} of {nprocs} died (exit code {exitcode})"
    if reason is not None:
        return f"{how} {_STARTING}: {reason}"
    return f"{how} {_STARTING}" if starting else how


def _in_world(message: str, rank: int, nprocs: int) -> str:
    """"rank 1: ..." → "rank 1 of 2: ..." (the parent knows the world size)."""
    prefix = f"rank {rank}"
    if message.startswith(prefix) and not message.startswith(f"{prefix} of "):
        return f"{prefix} of {nprocs}{message[len(prefix):]}"
    return message


def _verdict(
    reports: dict[int, tuple[Failure, str]],
    order: list[int],
    dead: dict[int, float],
    exitcodes: list,
    nprocs: int,
    reasons: dict[int, str] | None = None,
) -> SpawnError:
    """The error of a failed job: the first failure its ranks agreed on, else the first rank seen dead (with what
    it wrote when it died starting: ``reasons``)."""
    if not order:
        rank = min(dead, key=dead.__getitem__)
        line = _died(rank, nprocs, exitcodes[rank], (reasons or {}).get(rank))
        return SpawnError(line, [rank], failure=Failure(rank, line, "died", -1))
    failure = reports[order[0]][0]
    root = failure.rank
    traceback_text = reports[root][1] if root in reports else ""
    code = exitcodes[root] if 0 <= root < nprocs else None
    if root not in reports and code is not None and code < 0:
        # The rank never spoke: the signal that killed it says more than its peers' view ("process is gone").
        line = _died(root, nprocs, code)
        failure = Failure(root, line, "died", failure.reporter)
    else:
        line = _in_world(failure.message, root, nprocs)
    message = f"{line}\n{traceback_text}" if traceback_text else line
    # The culprit alone: the others only stopped because of it.
    ranks = [root] if root >= 0 else sorted(order)
    return SpawnError(message, ranks, traceback_text, failure)


def can_fork(num_threads: int | None) -> bool:
    """Whether ranks may start as copies of this process (``fork``): no interpreter start, no imports (~2 s of a
    core a rank for torch's), no arguments pickled.

    Only where the copy is sound: on Linux; from the main thread with no other Python thread (a copy holds every lock
    another thread held); before any CUDA context, process group or numba thread pool of this process (none of
    them survives a fork); and with ranks that run torch on one thread, so that none enters an OpenMP parallel
    region (GNU OpenMP's pool does not survive a fork either: a copy of a process that used it would wait in its
    first parallel region for threads that are not there).
    """
    if not sys.platform.startswith("linux") or num_threads != 1:
        return False
    if threading.current_thread() is not threading.main_thread() or threading.active_count() != 1:
        return False
    if torch.cuda.is_initialized() or dist.is_initialized():
        return False
    numba_pool = sys.modules.get("numba.np.ufunc.parallel")
    return not getattr(numba_pool, "_is_initialized", False)


def spawn(
    fn: Callable[..., Any],
    nprocs: int,
    args: tuple = (),
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    backend: str | None = None,
    num_threads: int | None = None,
    watchdog: WatchdogConfig | None = WatchdogConfig(),
    settle_s: float = 5.0,
    fork: bool = False,
    started: Callable[[str], None] | None = None,
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` in ``nprocs`` spawned processes, which die with this one.

    When a rank fails, the others are told through the failure channel and stop; this process waits up to
    ``settle_s`` for their reports, stops what is left and raises.

    Args:
        fn: a module-level (picklable) function; its return value must be picklable.
        nprocs: number of processes (world size).
        args: extra positional arguments, pickled to every child.
        timeout_s: wall-clock limit for the whole job and the process group timeout.
        backend: "gloo", "nccl" or "cpu:gloo,cuda:nccl"; default: :func:`backend_for` the child's device.
        num_threads: torch intra-op threads per child (None leaves torch's default).
        watchdog: heartbeat and liveness settings of the ranks (None: no watchdog).
        settle_s: after the first failure, how long to wait for every rank's report.
        fork: start the ranks as copies of this process where that is sound (:func:`can_fork`); spawned otherwise.
        started: called once every rank is started, with how (``"fork"`` or ``"spawn"``): where the caller starts
            its own threads, after the copies are made.

    Returns:
        ``fn``'s return values in rank order.

    Raises:
        SpawnError: a rank raised, died or stopped answering (the first one is
            named, with its traceback if it raised), or the job timed out.
    """
    if nprocs < 1:
        raise DomainparError(f"nprocs must be at least 1 (got {nprocs})")
    how = "fork" if fork and can_fork(num_threads) else "spawn"
    ctx = mp.get_context("spawn")
    start_resource_tracker()  # before the queue registers its semaphores with it
    results = ctx.Queue()
    # Private: the rendezvous store (a FileStore) and what a rank that dies starting writes (bootstrap).
    store_dir = tempfile.mkdtemp(prefix="domainpar-rdzv-")
    init_method = "file://" + os.path.join(store_dir, "store")
    processes = []
    for rank in range(nprocs):
        process = (mp.get_context("fork").Process if how == "fork" else RankProcess)(
            target=_child,
            args=(rank, nprocs, fn, args, init_method, backend, timeout_s, num_threads, results, os.getpid(), watchdog),
            daemon=False,
        )
        process.reason_path = os.path.join(store_dir, f"start-failure-{rank}.txt")
        processes.append(process)

    def reasons() -> dict[int, str]:
        """What the ranks that died starting wrote (their one line, instead of spawn_main's traceback)."""
        found = {rank: start_reason(p.reason_path) for rank, p in enumerate(processes)}
        return {rank: text for rank, text in found.items() if text is not None}

    values: dict[int, Any] = {}
    inbox: Inbox | None = None
    reports: dict[int, tuple[Failure, str]] = {}
    order: list[int] = []
    try:
        # A stop signal is acted on between two waits for the ranks: raised wherever the main thread is, it could land
        # in a finalizer (a weakref callback while a rank's result is unpickled), where the stop is lost.
        with hold_stops() as stops:
            # The children start with the stop signals blocked until _child has set its own handlers (no traceback
            # from a child interrupted while it imports), and this process acts on a stop only once every child has
            # all its arguments (a child left with half of them prints an unpickling error).
            failed_start: tuple[int, int] | None = None
            with children_start_quietly() as starting:
                for rank, process in enumerate(processes):
                    if starting.arrived:
                        break  # the stop is acted on below: no more children to start and then stop
                    try:
                        process.start()
                    except StartFailed as exc:
                        # Died before it had all its arguments (bootstrap): the started ranks are stopped below.
                        failed_start = (rank, exc.exitcode)
                        break
            if failed_start is not None:
                rank, code = failed_start
                line = _died(rank, nprocs, code, reasons().get(rank), starting=True)
                raise SpawnError(line, [rank], failure=Failure(rank, line, "died", -1))
            if started is not None:
                started(how)
            deadline = time.monotonic() + timeout_s
            # Read by a thread: a rank killed mid-message must not hold this process in a read for ever.
            inbox = Inbox(results, "domainpar-spawn-results")
            exited_at: dict[int, float] = {}
            trouble_since: float | None = None
            while len(values) < nprocs:
                stops.answer()
                try:
                    rank, status, payload = inbox.get(timeout=0.1)
                except queue.Empty:
                    pass
                else:
                    if status == "ok":
                        values[rank] = pickle.loads(payload)
                    else:
                        reports[rank] = (Failure.from_json(payload["failure"]), payload["traceback"])
                        order.append(rank)
                        trouble_since = trouble_since or time.monotonic()
                    continue
                now = time.monotonic()
                for rank_, process in enumerate(processes):
                    if process.exitcode is not None:
                        exited_at.setdefault(rank_, now)
                # A finished child's message may still be in the pipe: a second passes before it counts as dead.
                dead = {r: t for r, t in exited_at.items() if r not in values and r not in reports and now - t > 1.0}
                if dead and trouble_since is None:
                    trouble_since = now
                if trouble_since is not None:
                    settled = all(r in values or r in reports or r in dead for r in range(nprocs))
                    if settled or now - trouble_since > settle_s:
                        error = _verdict(reports, order, dead, [p.exitcode for p in processes], nprocs, reasons())
                        _stop(processes)
                        raise error
                if now > deadline:
                    pending = [r for r in range(nprocs) if r not in values]
                    _stop(processes)
                    raise SpawnError(
                        f"ranks {pending} of {nprocs} did not finish within {timeout_s:g} s; all ranks were killed",
                        pending,
                    )
        for process in processes:
            process.join(10.0)
    finally:
        _stop(processes)
        if inbox is not None:
            inbox.close()
        results.close()
        shutil.rmtree(store_dir, ignore_errors=True)
    return [values[rank] for rank in range(nprocs)]

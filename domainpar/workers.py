"""Dataset-wide work over events: disjoint shards and a process pool that reports each bad event by name.

* :func:`parse_shard` / :func:`shard_items` give the ``--shard I/N`` slice (every N-th event starting at I), so a
  Slurm array or every rank of a job shares the work without talking;
* :func:`run_items` runs a function over the events in a process pool (``--workers``) with a progress bar, and
  turns an event that fails into an :class:`ItemResult` naming it, so the other events still finish;
  :func:`failure_summary` is the one line the command ends with.

A machine fault (out of memory or space, a worker killed) is not an event's problem: it stops the whole run with
:class:`~domainpar.errors.MachineFault` naming the item (exit status 1). An interrupt of the parent stops the
workers within seconds: each unwinds its item (its atomic writers remove their temporaries); one that does not
answer is killed and its temporaries in the caller's output directories are removed. Workers ignore SIGINT (a
Ctrl-C reaches the whole process group; the parent decides).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import itertools
import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Iterable, NamedTuple, Sequence, TypeVar

from domainpar.atomic import remove_temporaries_of
from domainpar.errors import DomainparError, Terminated, fault_at, fault_parts, message_line, one_line
from domainpar.heap import keep_freed_memory
from domainpar.progress import progress as progress_display
from domainpar.signals import (STOP_SIGNALS, children_start_quietly, hold_stops, raise_outside_finalizers,
                               signal_name, start_resource_tracker)

T = TypeVar("T")


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, e.g. a Slurm task's cores), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


#: Estimated seconds of work (one core) below which a default-sized pool is one process: a pool's worker first
#: imports numpy, numba and pandas (seconds), so two workers save time only on work that takes about twice that.
POOL_MIN_SECONDS = 5.0


def pool_size(wanted: int, seconds: Iterable[float], enough: float = POOL_MIN_SECONDS) -> int:
    """``wanted`` processes when several items' estimated work reaches ``enough`` seconds, else 1 (this process).

    Args:
        wanted: the processes the caller would start (the cores, or its share of them).
        seconds: each item's estimated seconds on one core, read lazily up to where the answer is known.
        enough: the work below which one process is faster.
    """
    if wanted <= 1:
        return 1
    total, items = 0.0, 0
    for item_seconds in seconds:
        total += item_seconds
        items += 1
        if items > 1 and total >= enough:
            return wanted
    return 1


def file_megabytes(*paths: str | os.PathLike) -> float:
    """Size of the files in MB (10**6 bytes); a file that cannot be read counts 0 (its item fails later, by name)."""
    total = 0
    for path in paths:
        try:
            total += os.stat(path).st_size
        except OSError:
            continue
    return total / 1e6


def memory_bytes() -> tuple[int, str] | None:
    """The memory the processes of a command may use together, and what limits it ("this machine's", "this
    container's"); None where nothing can be read. The smaller of the physical memory and the memory cgroup's limit
    (v2, or v1 where no v2 limit is set)."""
    found: list[tuple[int, str]] = []
    with contextlib.suppress(ValueError, OSError, AttributeError):
        found.append((os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine's"))
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(ValueError, OSError):
            with open(path, encoding="ascii") as fh:
                text = fh.read().strip()
            if text.isdigit() and int(text) < 2**60:  # "max", or v1's page-rounded 2**63: no limit
                found.append((int(text), "this container's"))
    return min(found) if found else None


def process_memory_limit() -> int | None:
    """The address-space limit of a process (``ulimit -v``), None when there is none."""
    with contextlib.suppress(ValueError, OSError, ImportError):
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        return None if soft == resource.RLIM_INFINITY else soft
    return None


def parse_shard(text: str | None, option: str = "--shard") -> tuple[int, int]:
    """``"I/N"`` → ``(I, N)`` with 0 <= I < N; None → ``(0, 1)`` (everything).

    Raises:
        DomainparError: anything else, naming ``option``.
    """
    if text is None:
        return (0, 1)
    parts = str(text).strip().split("/")
    try:
        index, count = (int(v) for v in parts)
    except ValueError:
        raise DomainparError(f"{option} must be I/N with integers 0 <= I < N, e.g. 3/8 (got {text!r:.40})") from None
    if count < 1 or not 0 <= index < count:
        raise DomainparError(f"{option} must be I/N with 0 <= I < N (got {index}/{count})")
    return (index, count)


def shard_items(items: Sequence[T], shard: tuple[int, int]) -> list[T]:
    """Shard ``I/N`` of ``items``: items I, I+N, I+2N, ... (the N shards are disjoint and cover ``items``)."""
    index, count = shard
    return list(items[index::count])


@dataclass(frozen=True)
class ItemResult:
    """The outcome of one event."""

    name: str
    """The event (file or prefix) as named in messages."""
    value: Any = None
    """The function's return value (None when it failed)."""
    error: str | None = None
    """One-line reason it failed, or None."""
    seconds: float = 0.0
    """Wall time the function took."""
    fault: bool = False
    """The failure was the machine's (out of memory or disk space, a killed worker), not the item's."""
    fault_kind: str | None = None
    """``disk``, ``memory``, ``io``, ``install`` or ``cache`` for a fault whose ``error`` does not say yet what to try."""

    @property
    def ok(self) -> bool:
        return self.error is None


#: Set in pool workers: a stop signal there ends the process (quietly) instead of raising to a caller.
_IN_WORKER = False
#: Set while a pool worker runs an item: a stop signal then unwinds the item first (its temporaries are removed).
_IN_ITEM = False
#: Seconds a worker gets to unwind after SIGTERM before it is killed.
STOP_GRACE_S = 3.0
#: In a pool worker: where it says which item it starts (the parent names the item of a worker that is killed).
_STARTED: Any = None


class FailureLine(NamedTuple):
    """How an item's exception is reported (:func:`failure_line`): as :class:`ItemResult`'s error, fault, fault_kind."""

    line: str
    fault: bool
    kind: str | None


def failure_line(exc: BaseException) -> FailureLine:
    """The one line that reports an item's exception, and whether the machine failed rather than the item.

    A :class:`~domainpar.errors.DomainparError` is our own message, read whole (the CLI's line limit applies). A
    machine fault says what failed without advice (the command adds its own, by ``kind``). Anything else is a bug:
    its type and the place it was raised come first.
    """
    if isinstance(exc, DomainparError):
        return FailureLine(message_line(str(exc)), False, None)
    fault = fault_parts(exc)
    if fault is not None:
        return FailureLine(fault[1], True, fault[0])
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    return FailureLine(f"{type(exc).__name__}{where}: {one_line(exc)}", False, None)


def _call(fn: Callable[..., Any], item: Any, name: str, args: tuple) -> ItemResult:
    """Run one item; a failure becomes an ItemResult (:func:`failure_line`)."""
    global _IN_ITEM
    start = time.perf_counter()
    _IN_ITEM = _IN_WORKER
    if _STARTED is not None:
        _STARTED.put((os.getpid(), name))
    try:
        value = fn(item, *args)
    except Terminated as exc:
        if not _IN_WORKER:
            raise
        # The parent stopped this worker: the item's writers have removed their temporaries on the way here.
        os._exit(exc.exit_code)
    except Exception as exc:  # noqa: BLE001 - one bad event must not stop the others; the line says whose fault it was
        line, fault, kind = failure_line(exc)
        return ItemResult(name, error=line, seconds=time.perf_counter() - start, fault=fault, fault_kind=kind)
    finally:
        _IN_ITEM = False
    return ItemResult(name, value=value, seconds=time.perf_counter() - start)


def _worker_stop(signum: int, frame: Any) -> None:
    if not _IN_ITEM:
        os._exit(128 + signum)

    def stop() -> None:
        if not _IN_ITEM:  # the item ended while a stop that landed in a finalizer waited
            os._exit(128 + signum)
        raise Terminated(signum)

    raise_outside_finalizers(frame, stop)


def _init_worker(started: Any = None) -> None:
    global _IN_WORKER, _STARTED
    _IN_WORKER = True
    _STARTED = started
    # The parent owns Ctrl-C (it reaches the whole process group) and stops the workers itself with SIGTERM; a
    # hang-up of the group ends a worker like SIGTERM (its item unwinds, its temporaries are removed).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _worker_stop)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, _worker_stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    # A worker runs item after item (events, graphs): each item's arrays reuse the last one's freed memory.
    keep_freed_memory()
    # One process per core: nested thread pools would oversubscribe the cores.
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[name] = "1"
    # Too late for a torch the parent's main module imported (spawn imports it again before this runs): its thread
    # pool is sized already, and OpenMP's spinning threads of several workers would fight over the cores.
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def run_items(
    fn: Callable[..., Any],
    items: Sequence[Any],
    *,
    args: tuple = (),
    names: Sequence[str] | Callable[[int], str] | None = None,
    workers: int = 1,
    desc: str = "events",
    progress: bool = True,
    should_stop: Callable[[], BaseException | None] | None = None,
    on_result: Callable[[ItemResult], None] | None = None,
    report_each: bool = False,
    temporaries_in: Sequence[str | os.PathLike] = (),
    keep: bool = True,
) -> list[ItemResult]:
    """``fn(item, *args)`` for every item, in ``workers`` processes; results in item order.

    Args:
        fn: picklable module-level function.
        items: the events (paths, prefixes, small tuples).
        args: extra picklable arguments passed to every call.
        names: how each item is named in messages: a sequence, or a function of the item's index (default
            ``str(item)``). Names are made as items start, so ``items`` may be a large ``range``.
        workers: processes; 1 runs in this process (no pool).
        desc: progress bar label.
        progress: show a progress bar (events/s, failures so far) on stderr.
        should_stop: polled between results; an exception it returns is raised after the
            pool is shut down (e.g. a peer rank failed), pending events are abandoned.
        on_result: called in this process for every finished item (e.g. to count progress).
        report_each: with the progress bar on, print ``failed: <name>: <reason>`` as each item fails
            (the caller's final line sums them up).
        temporaries_in: directories the items write into; what a worker that had to be killed left
            there (its temporary files) is removed.
        keep: return the results; False returns none (``on_result`` sees each as it finishes), so that memory
            does not grow with the number of items either.

    Returns:
        One :class:`ItemResult` per item, in item order (none when not ``keep``).

    Raises:
        MachineFault: an item ran out of memory or disk space, or its worker process was killed.
    """
    if names is None:
        name_of: Callable[[int], str] = lambda index: str(items[index])  # noqa: E731
    else:
        name_of = names if callable(names) else names.__getitem__
    results: list[ItemResult | None] = [None] * len(items) if keep else []
    failed = 0
    bar = progress_display(total=len(items), desc=desc, unit="event", enabled=progress)

    def finish(index: int, result: ItemResult) -> None:
        nonlocal failed
        if result.fault:  # a machine fault ends the run: the other items would meet the same full disk or memory
            raise fault_at(result.name, result.error, result.fault_kind)
        if keep:
            results[index] = result
        if not result.ok:
            failed += 1
            bar.set_postfix(failed=failed)
            if report_each and progress and len(items) > 1:  # a lone event's error is the command's own last line
                bar.write(f"failed: {result.name}: {result.error}", file=sys.stderr)
        bar.update(1)
        if on_result is not None:
            on_result(result)

    try:
        if workers <= 1 or len(items) <= 1:
            for index, item in enumerate(items):
                stop = should_stop() if should_stop is not None else None
                if stop is not None:
                    raise stop
                finish(index, _call(fn, item, name_of(index), args))
        else:
            _run_pool(fn, items, name_of, args, min(workers, len(items)), finish, should_stop, list(temporaries_in))
    finally:
        bar.close()
    return [r for r in results if r is not None]


def _worker_death(name: str, processes: list, running: dict[int, str]) -> ItemResult:
    """The result of a worker process that vanished (a BrokenProcessPool): a machine fault naming the item it ran.

    Args:
        name: the item whose result was lost (named when the dead worker's own item is unknown).
        processes: the pool's worker processes.
        running: worker pid → the item it last started.
    """
    deadline = time.monotonic() + 2.0
    for process in processes:  # the pool stops the other workers (SIGTERM) once one died: wait for the codes
        process.join(max(0.0, deadline - time.monotonic()))
    _await_exit_codes(processes, max(deadline, time.monotonic() + 1.0))
    dead = [p for p in processes if p.exitcode is not None and p.exitcode != 0]
    # The pool's own SIGTERM to the survivors says nothing: the culprit comes first.
    dead.sort(key=lambda p: p.exitcode in (-signal.SIGTERM, 128 + signal.SIGTERM))
    how, code = "was killed", None
    if dead:
        code = dead[0].exitcode
        name = running.get(dead[0].pid, name)
        how = f"was killed by {signal_name(code)}" if code < 0 else f"exited with status {code}"
    if code is None or code == -signal.SIGKILL:
        line = f"a worker process {how} (by the system's out-of-memory killer?); try fewer --workers"
    else:  # a crash (SIGSEGV, SIGABRT) or an exit of its own: fewer workers would not help
        line = f"a worker process {how} before it returned a result"
    return ItemResult(name, error=line, fault=True)


def _await_exit_codes(processes: list, deadline: float) -> None:
    """Wait (until ``deadline``, a monotonic time) until every worker that has ended shows its exit code.

    The pool's manager thread reaps the workers too: when its waitpid wins the race, the exit code reads None until
    that thread has stored it, and the line would blame a survivor the pool stopped. A worker has ended when its
    sentinel is ready.
    """
    while True:
        landing = False
        for process in processes:
            try:
                if process.exitcode is None and multiprocessing.connection.wait([process.sentinel], 0):
                    landing = True
                    break
            except (OSError, ValueError):  # a closed process object: nothing to wait for
                continue
        if not landing or time.monotonic() >= deadline:
            return
        time.sleep(0.005)  # lets the reaping thread take the interpreter lock and store the code


def _stop_workers(processes: list, directories: list) -> None:
    """SIGTERM every worker (it unwinds its item and exits), SIGKILL those still there after the grace period,
    then remove what the workers left in ``directories``."""
    for process in processes:
        if process.exitcode is None:
            try:
                process.terminate()
            except (OSError, ValueError, AttributeError):
                pass
    deadline = time.monotonic() + STOP_GRACE_S
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.exitcode is None:
            try:
                process.kill()
                process.join(2.0)
            except (OSError, ValueError, AttributeError):
                pass
    if directories:
        remove_temporaries_of(directories, [p.pid for p in processes if p.pid is not None])


def _tolerate_a_closed_wakeup(pool: cf.ProcessPoolExecutor) -> None:
    """Make the pool's wake-up of its manager thread a no-op once the manager has closed the pipe.

    Python 3.11's exit hook wakes every pool's manager thread without the pool's lock, so a manager winding down
    may close the pipe between the hook's check and its write (an ignored ``OSError: Bad file descriptor``
    traceback under the command's one line).
    """
    wakeup = getattr(pool, "_executor_manager_thread_wakeup", None)
    send = getattr(wakeup, "wakeup", None)
    if send is None:
        return

    def wake() -> None:
        try:
            send()
        except (OSError, ValueError):  # closed under us: the manager thread has already stopped
            pass

    wakeup.wakeup = wake


#: Seconds a dead worker may go unnoticed by the pool before the run names it itself (the pool's own notice
#: takes well under a second).
WEDGED_S = 3.0


def _any_ended(processes: list) -> bool:
    """Whether a pool worker has ended (its sentinel is ready); the workers of a running pool never end by themselves."""
    sentinels = []
    for process in processes:
        try:
            sentinels.append(process.sentinel)
        except (ValueError, AttributeError):  # closed, or not started
            continue
    return bool(sentinels) and bool(multiprocessing.connection.wait(sentinels, 0))


def _unwedge(pool: cf.ProcessPoolExecutor) -> None:
    """Let a pool manager thread stuck on a dead worker's half result go: with every worker stopped, closing this
    process's write end of the result pipe ends the read (the pool then breaks and its thread ends; left stuck, the
    interpreter's exit would wait for it for ever)."""
    writer = getattr(getattr(pool, "_result_queue", None), "_writer", None)
    if writer is not None:
        try:
            writer.close()
        except OSError:
            pass


def _run_pool(fn, items, name_of, args, workers, finish, should_stop, directories) -> None:
    # spawn: the parent may hold torch/OpenMP threads, which fork would copy in a broken state.
    context = mp.get_context("spawn")
    start_resource_tracker()
    # A SimpleQueue writes synchronously: a worker killed right after saying what it starts has said it.
    started = context.SimpleQueue()
    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_init_worker, initargs=(started,))
    _tolerate_a_closed_wakeup(pool)
    processes: list = []
    running: dict[int, str] = {}
    wedged: list = []

    def note_started() -> None:
        while not started.empty():
            pid, name = started.get()
            running[pid] = name

    # Items are submitted as workers free up, two per worker in flight: memory does not grow with the item count.
    todo = iter(enumerate(items))
    futures: dict = {}
    pending: set = set()

    def submit_more() -> None:
        # Workers start with the stop signals blocked (the mask is inherited) until their initializer has set
        # their own handlers: a Ctrl-C or a hang-up while they start must not print a traceback from each.
        with children_start_quietly():
            for index, item in itertools.islice(todo, 2 * workers - len(pending)):
                future = pool.submit(_call, fn, item, name_of(index), args)
                futures[future] = index
                pending.add(future)

    # Stop signals are acted on between waits, never inside one: raised while concurrent.futures.wait holds the
    # locks of many futures, the interrupt would leave them held and the pool's manager thread blocked for ever.
    with hold_stops() as stops:
        try:
            submit_more()
            # The pool's own table is dropped by shutdown(): keep the processes to stop them ourselves.
            processes = list((getattr(pool, "_processes", None) or {}).values())
            died_at: float | None = None
            while pending:
                stops.answer()
                done, pending = cf.wait(pending, timeout=0.5, return_when=cf.FIRST_COMPLETED)
                processes += [p for p in (getattr(pool, "_processes", None) or {}).values() if p not in processes]
                if not done and _any_ended(processes):
                    # A worker is gone and the pool has not said so: its manager thread is stuck on the half result
                    # the killed worker was writing (_unwedge). Named like any worker death once it had time to land.
                    died_at = died_at or time.monotonic()
                    if time.monotonic() - died_at > WEDGED_S:
                        note_started()
                        index = min(futures[f] for f in pending)
                        wedged.append(pool)
                        finish(index, _worker_death(name_of(index), processes, running))
                for future in done:
                    index = futures.pop(future)
                    try:
                        result = future.result()
                    except cf.process.BrokenProcessPool:
                        note_started()
                        result = _worker_death(name_of(index), processes, running)
                    except Exception as exc:  # noqa: BLE001 - a result that could not come back (unpicklable value)
                        result = ItemResult(name_of(index), error=f"worker could not return its result ({type(exc).__name__}: {one_line(exc)})")
                    finish(index, result)
                stops.answer()
                stop = should_stop() if should_stop is not None else None
                if stop is not None:
                    raise stop
                submit_more()
        except BaseException:
            processes += [p for p in (getattr(pool, "_processes", None) or {}).values() if p not in processes]
            _stop_workers(processes, directories)
            if wedged:
                _unwedge(pool)
            # Taken before shutdown(), which drops the pool's reference to its manager thread.
            manager = getattr(pool, "_executor_manager_thread", None)
            pool.shutdown(wait=False, cancel_futures=True)
            # Left running, the manager thread races the interpreter's exit hook (_tolerate_a_closed_wakeup); its
            # workers are gone, so it ends at once.
            if manager is not None:
                manager.join(STOP_GRACE_S)
            started.close()
            raise
        pool.shutdown(wait=True)
        started.close()


class FailureTally:
    """The failures among results seen one at a time (e.g. as :func:`run_items`'s ``on_result``), in memory that
    does not grow with their number; :meth:`summary` is the line of :func:`failure_summary`."""

    def __init__(self, names_chars: int = 300) -> None:
        self.names_chars = names_chars
        self.total = 0
        self.failed = 0
        self.shown: list[str] = []
        self.first: ItemResult | None = None
        self._full = False

    def add(self, result: ItemResult) -> None:
        """Count ``result``."""
        self.total += 1
        if result.ok:
            return
        self.failed += 1
        if self.first is None:
            self.first = result
        if not self._full and self.shown and sum(len(n) + 2 for n in self.shown) + len(result.name) > self.names_chars:
            self._full = True
        if not self._full:
            self.shown.append(result.name)

    def summary(self, what: str = "events") -> str | None:
        """One line naming the failed items and the first one's reason (None when none failed)."""
        if self.first is None:
            return None
        more = f" and {self.failed - len(self.shown)} more" if self.failed > len(self.shown) else ""
        error = self.first.error or ""
        reason = error if len(error) <= 240 else error[:237] + "..."
        return f"{self.failed} of {self.total} {what} failed: {', '.join(self.shown)}{more} ({self.first.name}: {reason})"


def failure_summary(results: Iterable[ItemResult], what: str = "events", names_chars: int = 300) -> str | None:
    """One line naming the failed events (None when all succeeded) and the first one's reason, e.g.
    ``2 of 100 events failed: event000000005, event000000017 (event000000005: hits ... must be ...)``.

    Names are listed up to about ``names_chars`` characters, then "and N more", so the line stays short.
    """
    tally = FailureTally(names_chars)
    for result in results:
        tally.add(result)
    return tally.summary(what)


__all__ = ["FailureLine", "FailureTally", "ItemResult", "available_cores", "failure_line", "memory_bytes", "process_memory_limit", "failure_summary", "file_megabytes", "parse_shard", "pool_size", "POOL_MIN_SECONDS", "run_items", "shard_items"]

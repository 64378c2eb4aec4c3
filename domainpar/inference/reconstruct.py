"""``domainpar reconstruct``: a trained tracker run over a dataset of events without truth, as a production job.

Every event goes through the chain evaluate runs (:mod:`domainpar.inference.runner`), and its submission, tracks
file and record are written (:mod:`domainpar.inference.products`). The user's side: docs/reconstruct.md.

How the work is shared. The job has W processes: ``workers × num_parts`` spawned here (``--workers``,
``--ranks``, else :func:`replicas_for`), or the ranks of a torchrun/srun job (:func:`domainpar.launch.env.detect`).
They form W / P *replicas* of P consecutive ranks (:func:`domainpar.comm.groups.make_layout`); replica k takes
events k, k+R, k+2R, ... of the events still to do. A replica's part 0 hosts its events; the other parts only
compute their share of each event's inference. A host hands reading, graph building and the edge filter to a
*preparing* process (:mod:`domainpar.inference.preparer`) that works ``prefetch`` events ahead.

A malformed event is one line ``failed: <event>: <reason>`` and the others go on (exit status 2 when the
failed events failed on their own input, 1 when any failed otherwise); a rerun with the same ``--out`` skips the
events already done (:mod:`domainpar.inference.manifest`), and ``<out>/reconstruct.lock`` refuses a second run on
it. The bytes written do not depend on how the job ran
(:mod:`domainpar.inference.arithmetic`). A refusal (a user's model that is not local under ``--parts``, checked
before ``--out`` is touched) leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from domainpar.errors import DomainparError, MachineFault, Terminated, fault_at, message_line
from domainpar.inference import products
from domainpar.inference.events import PreparedEvent
from domainpar.inference.manifest import (LOCK, MANIFEST, SUMMARY, Outcome, Plan, plan_run, remove_temporaries,
                                          run_summary)
from domainpar.inference.pipeline import Pipeline, load_pipeline
from domainpar.inference.preparer import Preparer, PreparingFailed
from domainpar.inference.runner import DomainHost, EventRunner, LocalityUnproven, SingleProcess
from domainpar.inference.sources import EventSource, list_sources
from domainpar.launch.inbox import Inbox
from domainpar.inference.spec import ReconstructConfig
from domainpar.progress import progress as progress_display
from domainpar.workers import available_cores, failure_line

#: Wall-clock limit of a spawned job: a dataset may take days; a hung collective is caught by the groups' own
#: timeout (``timeout_s``), which make_layout gives every group the job's collectives run on.
JOB_LIMIT_S = 30 * 86400.0


def _reconstruct_event(runner: EventRunner, digest: str, prepared: PreparedEvent, config: ReconstructConfig) -> Outcome:
    """Score, track and write one prepared event; its Outcome (timings and counts)."""
    result = runner.run(prepared)
    started = time.perf_counter()
    threshold = runner.pipeline.threshold
    products.write_event(config.out, products.event_outputs(result, digest, threshold, config.tracks_format), config.tracks_format)
    counts = products.event_counts(result, threshold)
    if result.partition:
        counts.update(num_cut_edges=result.partition["num_cut_edges"], num_halo_nodes=result.partition["num_halo_nodes"])
    return Outcome(prepared.source.name, True, seconds={**result.seconds, "write": time.perf_counter() - started}, counts=counts)


def run_host(
    pipeline: Pipeline,
    digest: str,
    sources: list[EventSource],
    config: ReconstructConfig,
    layout: Any,
    threads: int,
    report: Callable[[Outcome], None],
) -> list[Outcome]:
    """A replica's host: every event of its share through the chain, the next ones prepared ahead.

    Args:
        pipeline: the loaded pipeline.
        digest: its digest (what every record names).
        sources: this replica's events, in order.
        config: the run's settings.
        layout: the replica's domain group (None when num_parts == 1).
        threads: torch threads of the preparing process.
        report: called with every event's outcome as it is known (progress, failure lines).
    """
    outcomes: list[Outcome] = []
    runner = EventRunner(pipeline, DomainHost(pipeline, layout) if layout is not None else SingleProcess(pipeline))
    # A lone event has nothing to overlap with: preparing it in another process would only add that process.
    preparer = Preparer(pipeline.graphs, config.prefetch if len(sources) > 1 else 0, threads)
    finished = False
    try:
        for index, source in enumerate(sources):
            preparer.ahead(sources, index)
            waited = time.perf_counter()
            try:
                prepared = preparer.get(source)
            except (KeyboardInterrupt, Terminated, MachineFault):
                raise
            except Exception as exc:  # noqa: BLE001 - one bad event must not stop the others
                if isinstance(exc, PreparingFailed):
                    line, fault, kind, bad_input = exc.line, exc.fault, exc.kind, exc.bad_input
                else:
                    (line, fault, kind), bad_input = failure_line(exc), isinstance(exc, DomainparError)
                if fault:
                    raise fault_at(str(source.path), line, kind) from None
                products.remove_event(config.out, source.name)  # nothing stale is left beside a failed event
                outcome = Outcome(source.name, False, line, bad_input=bad_input)
            else:
                wait = time.perf_counter() - waited
                try:
                    # A model that is not local has no right event to give: that refusal ends the run (it is not
                    # among the event's failures); an event too small to check the model on is one of them.
                    runner.check_locality(prepared.graph)
                    outcome = _reconstruct_event(runner, digest, prepared, config)
                except DomainparError as exc:
                    if not runner.locality_checked and not isinstance(exc, LocalityUnproven):
                        raise  # the refusal of a model that is not local
                    products.remove_event(config.out, source.name)
                    outcome = Outcome(source.name, False, message_line(str(exc)), bad_input=True)
                else:
                    outcome.seconds["wait"] = wait
            outcomes.append(outcome)
            report(outcome)
        finished = True
    finally:
        preparer.close(finished)
    runner.close()  # the members of a domain group are told there is no more event
    return outcomes


# ------------------------------------------------------------------ the run


@dataclass
class RunResult:
    """What a run did: every event attempted (done or failed), the events an earlier run did, summary.json."""

    outcomes: list[Outcome]
    skipped: list[str]
    summary: dict

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]


def find_sources(config: ReconstructConfig, pipeline: Pipeline) -> list[EventSource]:
    """The events of ``--data``, checked to be events this pipeline can run (a user mistake there is named before
    anything is written)."""
    sources = list_sources(config.data)
    if sources[0].kind == "raw":
        pipeline.graphs.check_raw(str(sources[0].path), truth=False)
    return sources


def check_threshold_is_read(config: ReconstructConfig, pipeline: Pipeline) -> None:
    """Refuse a ``--threshold`` the track builder does not cut on, before anything is written.

    ``ckf`` and ``ambiguity`` seed and extend on their own cuts (``seed_threshold``, ``extend_threshold``, recorded
    with the model); the threshold is the edge-only builders' cut. Given to them, the tracks came out the same at
    any value while the run recorded it as its threshold: a setting that silently did nothing. (``evaluate`` reads
    it in any case: its edge metrics are taken at the threshold.)

    Raises:
        DomainparError: ``--threshold`` given with a builder that does not read it.
    """
    tracks = pipeline.tracks
    if config.threshold is not None and not tracks.reads_threshold:
        raise DomainparError(
            f"--threshold {config.threshold:g}: the {tracks.method} track builder does not cut on it (it seeds and "
            f"extends on seed_threshold {tracks.seed_threshold:g} and extend_threshold {tracks.extend_threshold:g}, "
            "recorded with the model); leave it out, or give --tracks components or walk to build tracks from the "
            "edges above it"
        )


def check_model_first(config: ReconstructConfig, pipeline: Pipeline, sources: list[EventSource]) -> None:
    """Refuse a user's model that is not local under ``--parts`` > 1 before ``--out`` is touched or a rank started.

    The model proves it on the first event of ``--data`` that can prove it (a slice with halo rows; a malformed
    event is passed over: the run names it). The hosts check again before they score (:meth:`EventRunner.check_locality`),
    so no event is scored unchecked even where no event here could prove anything.

    Raises:
        DomainparError: the model is not local (one line naming it and the output that differs).
    """
    from domainpar.inference.events import prepare_event
    from domainpar.inference.partitioned import require_partitionable
    from domainpar.model.registry import is_builtin

    if config.num_parts == 1 or pipeline.spec.skip_locality_check or pipeline.loaded is None:
        return
    if is_builtin(pipeline.loaded.model_config.name):
        return
    prune = pipeline.graphs.prune()
    for source in sources:
        try:
            prepared = prepare_event(source, pipeline.graphs, prune)
        except (KeyboardInterrupt, Terminated, MachineFault):
            raise
        except Exception:  # noqa: BLE001 - a bad event is the run's to name; the check needs one that is not
            continue
        result = require_partitionable(pipeline.loaded, prepared.graph, config.num_parts)
        if result is None or result.proven:
            return


def _undo_refused(out: Path, had_manifest: bool) -> None:
    """What a refused run wrote before its refusal, when it wrote no event: its manifest (unless one was there
    before) and its empty output directories; the lock's release removes an ``--out`` it created and left empty."""
    if products.outputs_of(out):
        return
    if not had_manifest:
        (out / MANIFEST).unlink(missing_ok=True)
    for sub in (products.SUBMISSIONS, products.TRACKS, products.RECORDS):
        try:
            (out / sub).rmdir()
        except OSError:  # absent, or not empty
            pass


#: Memory a replica of the event chain may take (a full event peaks at ~1.5 GB RSS, docs/performance.md).
REPLICA_BYTES = 2 * 1024**3
#: A raw event's seconds of one core in the whole chain, per second of its graph build's estimate
#: (:func:`~domainpar.data.dataset.build_seconds`).
CHAIN_PER_BUILD_SECONDS = 1.7
#: Work below which one replica (and its preparing process) is faster than several: each replica first imports
#: torch and numba and loads the pipeline.
REPLICAS_MIN_SECONDS = 10.0


def replicas_for(config: ReconstructConfig, sources: list[EventSource]) -> int:
    """Replicas on this machine for ``sources``: ``--workers``, else one per ``num_parts`` cores where the events are
    worth it (docs/performance.md), no more than the memory holds at :data:`REPLICA_BYTES` each; one for graph files
    (no estimate of their work)."""
    if config.workers is not None:
        return config.workers
    if any(source.kind != "raw" for source in sources):
        return 1
    from domainpar.data.dataset import build_seconds
    from domainpar.workers import memory_bytes, pool_size

    memory = memory_bytes()
    fits = memory[0] // (REPLICA_BYTES * config.num_parts) if memory is not None else 1
    wanted = max(1, min(available_cores() // config.num_parts, fits, len(sources)))
    seconds = (CHAIN_PER_BUILD_SECONDS * build_seconds(source.path) for source in sources)
    return pool_size(wanted, seconds, REPLICAS_MIN_SECONDS)


def _resolved(config: ReconstructConfig, todo: list[EventSource], local_replicas: int | None = None) -> ReconstructConfig:
    """``config`` with its replicas and prefetch decided for the events ``todo`` (``local_replicas``: under a launcher,
    the replicas its ranks make on this machine)."""
    workers = replicas_for(config, todo) if local_replicas is None else local_replicas
    prefetch = config.prefetch if config.prefetch is not None else (1 if workers == 1 else 0)
    if len(todo) <= workers:
        prefetch = 0  # one event per replica at most: nothing to overlap, every core to the one process per replica
    return replace(config, workers=workers, prefetch=prefetch)


def _threads(config: ReconstructConfig, local_processes: int) -> tuple[int, int]:
    """(torch threads of a scoring process, of a preparing process) on this machine's cores."""
    if config.threads is not None:
        return config.threads, 1
    cores = available_cores()
    preparers = config.workers if config.prefetch > 0 else 0
    scoring = max(1, (cores - preparers) // max(local_processes, 1)) if cores > preparers else 1
    return scoring, 1


def _reporter(config: ReconstructConfig, total: int, label: str = "") -> tuple[Callable[[Outcome], None], Any]:
    bar = progress_display(total=total, desc=f"reconstruct{label}", unit="event", enabled=config.progress)
    failed = 0

    def report(outcome: Outcome) -> None:
        nonlocal failed
        if not outcome.ok:
            failed += 1
            bar.set_postfix(failed=failed)
            # Every failure is named as it happens (also with --quiet): it is the job's record, not progress.
            print(f"failed: {outcome.name}: {outcome.error}", file=sys.stderr, flush=True)
        bar.update(1)

    return report, bar


def reconstruct(config: ReconstructConfig) -> RunResult:
    """Run the job (see the module docstring) from the process that owns it: this one alone, the parent of
    spawned ranks, or every rank of a torchrun/srun job."""
    from domainpar.launch.env import detect

    launcher = detect()
    if launcher.joins:
        return _reconstruct_as_rank(config)
    if config.workers is not None and config.workers * config.num_parts > 4 * (os.cpu_count() or 1):
        raise DomainparError(
            f"--workers {config.workers} x --parts {config.num_parts} starts that many local processes: at most "
            f"{4 * (os.cpu_count() or 1)} on this machine; use torchrun or srun to run on several nodes"
        )
    from domainpar.launch.runlock import run_lock

    started = time.perf_counter()
    pipeline = load_pipeline(config)
    check_threshold_is_read(config, pipeline)
    sources = find_sources(config, pipeline)
    check_model_first(config, pipeline, sources)
    had_manifest = (Path(config.out) / MANIFEST).exists()
    with run_lock(config.out, "--out", LOCK, "reconstruction"):
        try:
            return _run_locked(config, pipeline, sources, started)
        except DomainparError:
            # A refusal (a rank's, after the plan was written) leaves --out as it found it.
            _undo_refused(Path(config.out), had_manifest)
            raise
        except BaseException:
            # Stopped or failed: every writer is gone now (spawned ranks are joined before spawn returns), and a
            # writer stopped between creating its temporary and taking charge of it, or killed when it did not stop
            # in time, left the temporary behind. The lock is still ours.
            with contextlib.suppress(OSError):
                remove_temporaries(Path(config.out))
            raise


def _run_locked(config: ReconstructConfig, pipeline: Pipeline, sources: list[EventSource], started: float) -> RunResult:
    """The run of :func:`reconstruct` once it holds ``--out``'s lock: plan, run the events, write the summary."""
    plan = plan_run(config, pipeline, sources)
    config = _resolved(config, plan.todo)
    world = config.workers * config.num_parts
    scoring_threads, prepare_threads = _threads(config, world)
    start = None
    if world == 1:
        import torch

        torch.set_num_threads(scoring_threads)
        report, bar = _reporter(config, len(plan.todo))
        try:
            outcomes = run_host(pipeline, plan.digest, plan.todo, config, None, prepare_threads, report)
        finally:
            bar.close()
    else:
        outcomes, start = _spawn_ranks(config, plan, pipeline, world, scoring_threads, prepare_threads)
    summary = run_summary(config, plan, outcomes, time.perf_counter() - started, world, scoring_threads, start)
    products.write_json(Path(config.out) / SUMMARY, summary)
    return RunResult(outcomes, plan.skipped, summary)


def _spawn_ranks(config: ReconstructConfig, plan: Plan, pipeline: Pipeline, world: int, threads: int,
                 prepare_threads: int) -> tuple[list[Outcome], str]:  # fmt: skip
    """Run the job on ``world`` local ranks; progress and failure lines come back through a queue. Returns the
    outcomes and how the ranks were started (copies of this process where that is sound: ``launch.ranks.can_fork``)."""
    from domainpar.launch.ranks import SpawnError, spawn, spawn_failure

    context = mp.get_context("spawn")
    messages = context.Queue()
    stop = threading.Event()
    # Made once the ranks are started: a thread of this process running when it is copied would leave its locks
    # held in every copy.
    relay: dict[str, Any] = {}

    def started(how: str) -> None:
        # Read by a thread of its own: a rank killed mid-message leaves that thread stuck, never the relay (spawn
        # names the death).
        inbox = Inbox(messages, "domainpar-reconstruct-messages")
        report, bar = _reporter(config, len(plan.todo))

        def forward() -> None:
            # Until the end, and then until nothing is left in the pipe or the inbox (a half message of a killed
            # rank never leaves the pipe: the join below gives up on it).
            while not stop.is_set() or not inbox.empty() or not messages.empty():
                try:
                    outcome = inbox.get(timeout=0.2)
                except queue.Empty:
                    continue
                report(outcome)

        thread = threading.Thread(target=forward, name="domainpar-reconstruct-progress", daemon=True)
        thread.start()
        relay.update(how=how, inbox=inbox, bar=bar, thread=thread)

    try:
        # A checkpoint's built-in model travels to the ranks as loaded (its files are not read again). An exported
        # pipeline holds runtime sessions, and a user's model may live in a module imported from a file path that a
        # spawned process cannot unpickle: every rank loads those itself.
        from domainpar.model.registry import is_builtin

        shared = pipeline if pipeline.exported is None and is_builtin(pipeline.loaded.model_config.name) else None
        per_rank = spawn(_rank_main, world, (config, plan, shared, threads, prepare_threads, messages),
                         timeout_s=JOB_LIMIT_S, backend="gloo", num_threads=threads, fork=True, started=started)  # fmt: skip
    except SpawnError as exc:
        remove_temporaries(Path(config.out))  # a rank killed mid-write could not: every rank is gone, the lock is ours
        failure = spawn_failure(exc, "reconstruction")
        if failure is exc:
            raise DomainparError(f"reconstruction failed on rank(s) {exc.ranks}: {exc.traceback_text.strip().splitlines()[-1]}") from exc
        raise failure from None
    finally:
        stop.set()
        if relay:
            relay["thread"].join(5.0)
            relay["inbox"].close()
            relay["bar"].close()
        messages.close()
    return [outcome for outcomes in per_rank for outcome in outcomes], relay["how"]


def _rank_work(config: ReconstructConfig, plan: Plan, pipeline: Pipeline | None, layout: Any, threads: int,
               report: Callable[[Outcome], None]) -> list[Outcome]:  # fmt: skip
    """One rank's part of the job: a host runs its replica's share, a member serves the host's inference."""
    if pipeline is None:
        pipeline = load_pipeline(config)
    if layout.part != 0:
        from domainpar.inference.partitioned import serve

        serve(pipeline.loaded, layout)
        return []
    share = plan.todo[layout.replica :: layout.num_replicas]
    return run_host(pipeline, plan.digest, share, config, layout if config.num_parts > 1 else None, threads, report)


def _rank_main(rank: int, world_size: int, config: ReconstructConfig, plan: Plan, pipeline: Pipeline | None, threads: int,
               prepare_threads: int, messages: Any) -> list[Outcome]:  # fmt: skip
    """A spawned rank (the default process group is up)."""
    from domainpar.comm.groups import make_layout
    from domainpar.launch.lifeline import terminate_on_signals

    terminate_on_signals()  # SIGTERM from the parent unwinds: temporaries are removed on the way out
    layout = make_layout(rank, world_size, config.num_parts, config.timeout_s)
    return _rank_work(config, plan, pipeline, layout, prepare_threads, messages.put)


def _reconstruct_as_rank(config: ReconstructConfig) -> RunResult:
    """Every rank of a torchrun/srun job runs this: rank 0 plans (and holds the lock), all share the events, rank 0
    writes the summary; every rank returns the same result."""
    import torch
    import torch.distributed as dist

    from domainpar.comm.groups import make_layout
    from domainpar.launch.ranks import init_from_env
    from domainpar.launch.runlock import acquire, release

    started = time.perf_counter()
    env = init_from_env(timeout_s=config.timeout_s, device="cpu")
    if env.world_size % config.num_parts:
        raise DomainparError(f"--parts {config.num_parts}: expected a divisor of the job's {env.world_size} ranks")
    lock = pipeline = None
    decided: list[Any] = [None]
    if env.rank == 0:
        try:
            pipeline = load_pipeline(config)
            check_threshold_is_read(config, pipeline)
            sources = find_sources(config, pipeline)
            check_model_first(config, pipeline, sources)
            lock = acquire(config.out, "--out", LOCK, "reconstruction")
            decided[0] = plan_run(config, pipeline, sources)
        except DomainparError as exc:
            decided[0] = str(exc)
    dist.broadcast_object_list(decided, src=0)
    if isinstance(decided[0], str):
        if lock is not None:
            release(lock)
        raise DomainparError(decided[0])
    plan: Plan = decided[0]
    try:
        layout = make_layout(env.rank, env.world_size, config.num_parts, config.timeout_s)
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "0")) or env.world_size
        config = _resolved(config, plan.todo, max(1, local // config.num_parts))
        scoring, prepare_threads = _threads(config, local)
        torch.set_num_threads(scoring)
        report, bar = _reporter(config, len(plan.todo[layout.replica :: layout.num_replicas]) if layout.part == 0 else 0,
                                f" (replica {layout.replica + 1} of {layout.num_replicas})")  # fmt: skip
        try:
            mine = _rank_work(config, plan, pipeline if env.rank == 0 else None, layout, prepare_threads, report)
        finally:
            bar.close()
        everyone: list[Any] = [None] * env.world_size
        dist.all_gather_object(everyone, mine)
        outcomes = [outcome for rank_outcomes in everyone for outcome in rank_outcomes]
        summary = run_summary(config, plan, outcomes, time.perf_counter() - started, env.world_size, scoring)
        if env.rank == 0:
            products.write_json(Path(config.out) / SUMMARY, summary)
        dist.barrier()
    finally:
        if lock is not None:
            release(lock)
    return RunResult(outcomes, plan.skipped, summary)


__all__ = ["JOB_LIMIT_S", "RunResult", "check_model_first", "find_sources", "reconstruct", "run_host"]

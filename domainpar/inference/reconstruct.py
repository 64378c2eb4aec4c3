"""``domainpar reconstruct``: a trained tracker run over a dataset of events without truth, as a production job.

Every event goes through the pipeline evaluate runs (:mod:`domainpar.inference.pipeline`): read its hits (and
cells) once → build the graph with the recorded cuts and features → prune with the recorded edge filter → the
GNN's edge scores (in this process, or on a domain group of ``num_parts`` processes with halo exchange,
:mod:`domainpar.inference.domain`) → track candidates → the submission, the tracks file and the event's record
(:mod:`domainpar.inference.products`).

How the work is shared. The job has W processes: ``workers × num_parts`` spawned here (``--workers``,
``--ranks``), or the ranks of a torchrun/srun job (:func:`domainpar.launch.env.detect`). They form W / P
*replicas* of P consecutive ranks (:func:`domainpar.comm.groups.make_layout`); replica k takes events k, k+R,
k+2R, ... of the events still to do. A replica's part 0 hosts its events; the other parts only compute their
share of each event's inference.

How stages overlap. A host hands reading, graph building and the edge filter to a *preparing* process that
works ``prefetch`` events ahead, so event i+1 is read and built while event i is scored, tracked and written;
both processes start together, so the preparer's imports and the model's loading overlap too. Every numba
kernel comes from the on-disk cache after the first run on a machine (``tests/kernels/test_numba_cache.py``).

A job that survives its data. A malformed event is one line ``failed: <event>: <reason>`` and the others go
on; the run ends with a line counting the failures (exit status 1 when any failed). Every file is written to a
temporary name and renamed, an event's record last, so an interrupt (exit 130/143) leaves no half-written
output, and a rerun with the same ``--out`` skips the events whose record names this pipeline and the input
files as they are now. ``<out>/reconstruct.json`` records the pipeline (the model's digest, its build, filter,
threshold and track builder): a rerun with another pipeline is refused (``--redo`` replaces the outputs
instead), and ``<out>/reconstruct.lock`` refuses a second run on the same ``--out``. ``<out>/summary.json``
holds the run's figures: events done, skipped and failed, and every stage's time per event.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from domainpar import __version__
from domainpar.atomic import remove_stale_temporaries
from domainpar.errors import DomainparError, MachineFault, Terminated, fault_parts, message_line, one_line
from domainpar.inference import products
from domainpar.inference.pipeline import (
    Pipeline,
    RawStage,
    build_event_graph,
    check_model_inputs,
    event_logits,
    event_tracks,
    load_pipeline,
    pipeline_digest,
    producer,
    pruned_like_training,
    sigmoid,
)
from domainpar.inference.sources import EventSource, graph_digest, input_files, input_stamp, list_sources, read_raw_event
from domainpar.progress import progress as progress_display
from domainpar.tracks.methods import DEFAULT_METHOD, METHODS
from domainpar.workers import available_cores

#: Name of the run's manifest, lock and summary in ``--out``.
MANIFEST, LOCK, SUMMARY = "reconstruct.json", "reconstruct.lock", "summary.json"
#: Partitioners usable with ``num_parts > 1``.
PARTITION_METHODS = ("metis", "geometric")
#: Wall-clock limit of a spawned job: a dataset may take days; a hung collective is caught by the groups' own
#: timeout (``timeout_s``), which make_layout gives every group the job's collectives run on.
JOB_LIMIT_S = 30 * 86400.0
#: The stages timed per event, in order.
STAGES = ("read", "build", "filter", "inference", "tracks", "write")


@dataclass(frozen=True)
class ReconstructConfig:
    """What ``domainpar reconstruct`` does."""

    data: Path
    """Raw TrackML events (hits, and cells when the features need them; truth is never read), or graph files."""
    out: Path
    """Output directory: submissions/, tracks/, events/, reconstruct.json, summary.json."""
    checkpoint: Path | None = None
    """A ``domainpar train`` checkpoint or ``model.pt``; None with ``model``."""
    model: Path | None = None
    """An exported model (``domainpar export``: .onnx or TorchScript .pt, with its sidecar) instead of a checkpoint."""
    edge_filter: Path | None = None
    """With a checkpoint: the edge filter its training graphs were pruned with (``filter.pt``)."""
    threshold: float | None = None
    """Edge score cut; None: the checkpoint's training threshold (else 0.5), or the sidecar's."""
    track_method: str = DEFAULT_METHOD
    """Track builder (:data:`domainpar.tracks.methods.METHODS`)."""
    num_parts: int = 1
    """Parts per event: > 1 scores every event on that many processes with halo exchange (exact)."""
    method: str = "metis"
    """Partitioner for num_parts > 1."""
    seed: int = 0
    """METIS seed."""
    workers: int = 1
    """Replicas on this machine, each taking its share of the events (each of num_parts processes)."""
    prefetch: int = 1
    """Events a preparing process reads and builds ahead of the one being scored (0: all stages in one process)."""
    tracks_format: str = "csv"
    """The tracks file's format: csv, or parquet (needs pyarrow)."""
    redo: bool = False
    """Replace the outputs of another pipeline found in ``out`` (otherwise the run is refused) and redo every event."""
    threads: int | None = None
    """torch threads per scoring process; None: the cores left after the other processes of this machine."""
    timeout_s: float = 1800.0
    """Seconds a process group waits in one collective before the job is declared hung."""
    skip_locality_check: bool = False
    """With num_parts > 1 and a model that is not a built-in: do not prove its locality on the first event (docs/models.md)."""
    progress: bool = True
    """Show progress."""

    def __post_init__(self) -> None:
        if (self.checkpoint is None) == (self.model is None):
            raise DomainparError("give exactly one of --checkpoint (a training checkpoint) and --model (an exported .onnx/.pt model)")
        if self.model is not None and self.num_parts != 1:
            raise DomainparError(
                f"--parts must be 1 with --model (got {self.num_parts}): an exported model scores whole graphs in one "
                "process; partitioned inference needs the training checkpoint"
            )
        if self.model is not None and self.edge_filter is not None:
            raise DomainparError(
                f"--filter {self.edge_filter}: an exported model (--model) runs the edge filter its sidecar records; "
                "give --filter with --checkpoint only"
            )
        for name in ("num_parts", "workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DomainparError(f"--{name.replace('num_', '')}: expected a positive integer, got {value!r}")
        if isinstance(self.prefetch, bool) or not isinstance(self.prefetch, int) or self.prefetch < 0:
            raise DomainparError(f"--prefetch: expected a non-negative integer, got {self.prefetch!r}")
        if self.method not in PARTITION_METHODS:
            raise DomainparError(f"--method: expected one of {', '.join(PARTITION_METHODS)}, got {self.method!r}")
        if self.track_method not in METHODS:
            raise DomainparError(f"--tracks: expected one of {', '.join(METHODS)}, got {self.track_method!r}")
        if self.threshold is not None and not (0.0 < self.threshold < 1.0):
            raise DomainparError(f"--threshold: expected a probability in (0, 1), got {self.threshold}")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1):
            raise DomainparError(f"--threads: expected a positive integer, got {self.threads!r}")
        if not (self.timeout_s > 0):
            raise DomainparError(f"--timeout: expected positive seconds, got {self.timeout_s}")
        products.check_track_format(self.tracks_format)


# ------------------------------------------------------------------ one event's stages


@dataclass
class Prepared:
    """An event read, built and pruned (by the preparing process), ready to be scored."""

    source: EventSource
    """The event."""
    event_id: int
    """TrackML event number."""
    graph: Any
    """The pruned :class:`~domainpar.data.event_graph.EventGraph`."""
    event_hit_id: np.ndarray
    """(M,) every hit id of the event (the submission's rows)."""
    inputs: list[dict]
    """Each input file: name, size, modification time and digest of what was read."""
    num_edges_built: int
    """Edges before the filter."""
    seconds: dict
    """read, build, filter."""


def _preparer_main(stage: RawStage, threads: int, jobs: Any, results: Any) -> None:
    """A preparing process: prepare every event the host sends, in order, until it sends None.

    Each result goes back as ``(name, "ok", Prepared)`` or ``(name, "error", (line, is a machine fault))``.
    """
    import signal

    import torch

    from domainpar.launch.lifeline import die_with_parent

    die_with_parent()
    # Ctrl-C reaches the whole process group: the host decides. A preparer writes no file, so the host's SIGTERM
    # (it stops while events are still being prepared) ends it at once.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(128 + signum))
    torch.set_num_threads(threads)
    prune = stage.prune()
    while (source := jobs.get()) is not None:
        try:
            results.put((source.name, "ok", prepare(source, stage, prune)))
        except Exception as exc:  # noqa: BLE001 - reported to the host, which names the event and goes on
            results.put((source.name, "error", _failure_line(exc)))


def prepare(source: EventSource, stage: RawStage, prune: Any) -> Prepared:
    """Read, build and prune one event (in a preparing process, or in the host).

    Raises:
        DomainparError: a missing or malformed input, named.
    """
    from domainpar.data.graph_files import load_graph

    if source.kind == "raw":
        raw = read_raw_event(source, stage.graph_config.needs_cells)
        built = build_event_graph(stage, prune, raw.hits, raw.cells, raw.event_id, str(source.path))
        return Prepared(source, raw.event_id, built.graph, raw.hits["hit_id"].to_numpy(np.int64), raw.inputs,
                        built.num_edges_built, {"read": raw.seconds, "build": built.seconds_build,
                                                "filter": built.seconds_filter})  # fmt: skip
    started = time.perf_counter()
    info = os.stat(source.path)
    read = load_graph(source.path)
    loaded = time.perf_counter()
    check_model_inputs(read, str(source.path), stage.node_features, stage.graph_meta, stage.whose)
    graph = pruned_like_training(source.path, read, stage.filter_hash, prune, stage.whose)
    inputs = [{"file": source.path.name, "bytes": int(info.st_size), "mtime_ns": int(info.st_mtime_ns),
               "sha256": graph_digest(read)}]  # fmt: skip
    return Prepared(source, int(read.event_id), graph, graph.hit_id.astype(np.int64), inputs, read.num_edges,
                    {"read": loaded - started, "build": 0.0, "filter": time.perf_counter() - loaded})  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    """What happened to one event."""

    name: str
    """The event."""
    ok: bool
    """Its outputs were written."""
    error: str | None = None
    """One line: why it failed."""
    seconds: dict = field(default_factory=dict)
    """Per stage (read, build, filter, inference, tracks, write) and ``wait`` (the host waiting for the preparer)."""
    counts: dict = field(default_factory=dict)
    """Hits, edges, candidates."""


def _failure_line(exc: BaseException) -> tuple[str, bool]:
    """(one line, is a machine fault) for an exception raised by one event's stages."""
    if isinstance(exc, DomainparError):
        return message_line(str(exc)), False
    fault = fault_parts(exc)
    if fault is not None:
        return fault[1], True
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ is not None else None
    where = f" at {os.path.basename(frame.filename)}:{frame.lineno}" if frame is not None else ""
    return f"{type(exc).__name__}{where}: {one_line(exc)}", False


# ------------------------------------------------------------------ a replica's host


class PreparingFailed(Exception):
    """Preparing an event failed in the preparing process (its one line, and whether the machine failed)."""

    def __init__(self, line: str, fault: bool) -> None:
        super().__init__(line)
        self.line, self.fault = line, fault


class Preparer:
    """Reads and builds events ahead of the host: a process of its own (``prefetch`` > 0) or the host itself.

    A plain process with two queues rather than a pool: the host stops it at once when interrupted, and nothing of
    it waits at the interpreter's exit.
    """

    def __init__(self, stage: RawStage, prefetch: int, threads: int) -> None:
        self.stage, self.prefetch = stage, prefetch
        self.process = None
        self.prune = None
        self.sent: list[str] = []
        if prefetch > 0:
            context = mp.get_context("spawn")
            self.jobs, self.results = context.Queue(), context.Queue()
            self.process = context.Process(target=_preparer_main, args=(stage, threads, self.jobs, self.results),
                                           name="domainpar-preparer", daemon=True)  # fmt: skip
            self.process.start()
        else:
            self.prune = stage.prune()

    def ahead(self, sources: list[EventSource], index: int) -> None:
        """Make sure events index .. index+prefetch are being prepared."""
        if self.process is None:
            return
        for source in sources[index : index + self.prefetch + 1]:
            if source.name not in self.sent:
                self.sent.append(source.name)
                self.jobs.put(source)

    def get(self, source: EventSource) -> Prepared:
        """The prepared event (raises what preparing it raised; the events come back in the order sent)."""
        if self.process is None:
            return prepare(source, self.stage, self.prune)
        while True:
            try:
                name, status, value = self.results.get(timeout=1.0)
                break
            except queue.Empty:
                if not self.process.is_alive():
                    raise MachineFault(f"{source.path}: the process preparing events died (exit code "
                                       f"{self.process.exitcode}; killed by the system's out-of-memory killer?)",
                                       kind="memory") from None  # fmt: skip
        self.sent.remove(name)
        if name != source.name:  # pragma: no cover - the queue keeps the order
            raise RuntimeError(f"preparer returned {name} for {source.name}")
        if status == "error":
            raise PreparingFailed(*value)
        return value

    def close(self, finished: bool) -> None:
        """End the preparing process: let it exit when the work is done, stop it when the run is interrupted."""
        if self.process is None:
            return
        process, self.process = self.process, None
        if finished:
            self.jobs.put(None)
            process.join(10.0)
        if process.exitcode is None:
            process.terminate()
            process.join(3.0)
            if process.exitcode is None:
                process.kill()
                process.join()
        for channel in (self.jobs, self.results):
            channel.cancel_join_thread()  # whatever is left in a pipe is dropped, not waited for at exit
            channel.close()


#: The signals that stop a run.
_STOP_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)


@contextlib.contextmanager
def _signals_deferred():
    """Hold SIGINT/SIGTERM/SIGHUP until the block ends, then act on the first one as the process would have.

    The track builders' numba code calls back into Python (numba unpickles some constants while it runs); an
    exception raised there by a stop signal's handler leaves a SystemError and a traceback instead of the one-line
    stop. The block is short (seconds at most), so the stop waits for it.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    previous = {}
    for signum in _STOP_SIGNALS:
        with contextlib.suppress(ValueError, OSError):
            previous[signum] = signal.signal(signum, lambda number, frame: arrived.append(number))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(signum, handler)
        if arrived:
            handler = previous.get(arrived[0])
            if callable(handler):
                handler(arrived[0], None)
            elif handler != signal.SIG_IGN:
                signal.raise_signal(arrived[0])


def _score(pipeline: Pipeline, prepared: Prepared, layout: Any, config: ReconstructConfig) -> tuple[np.ndarray, dict]:
    if config.num_parts == 1:
        return event_logits(pipeline, prepared.graph, str(prepared.source.path)), {}
    from domainpar.inference.domain import host_logits

    return host_logits(pipeline.loaded, layout, prepared.graph, config.method, config.seed)


def _reconstruct_event(pipeline: Pipeline, digest: str, prepared: Prepared, layout: Any, config: ReconstructConfig) -> Outcome:
    """Score, track and write one prepared event; its Outcome (timings and counts)."""
    seconds = dict(prepared.seconds)
    started = time.perf_counter()
    logits, partition = _score(pipeline, prepared, layout, config)
    scored = time.perf_counter()
    scores = sigmoid(logits)
    with _signals_deferred():
        candidates, track_id = event_tracks(pipeline.tracks, prepared.graph, scores, prepared.event_hit_id)
    tracked = time.perf_counter()
    graph = prepared.graph
    sizes = candidates.sizes()
    counts = {"num_hits": int(prepared.event_hit_id.size), "num_graph_nodes": int(graph.num_nodes),
              "num_edges_built": int(prepared.num_edges_built), "num_edges": int(graph.num_edges),
              "num_selected_edges": int(np.count_nonzero(scores > pipeline.threshold)),
              "num_candidates": int(sizes.size), "num_candidates_3plus": int(np.count_nonzero(sizes >= 3)),
              "num_tracks": int(track_id.max()) + 1 if track_id.size else 0}  # fmt: skip
    record = {"event": prepared.source.name, "event_id": prepared.event_id, "pipeline": digest,
              "inputs": prepared.inputs, "data_sha256": products.data_digest(prepared.inputs), **counts}  # fmt: skip
    outputs = products.EventOutputs(
        name=prepared.source.name,
        submission=products.submission_bytes(prepared.event_id, prepared.event_hit_id, track_id),
        tracks=products.tracks_bytes(products.tracks_table(candidates, graph.hit_id), config.tracks_format),
        record=record,
    )
    products.write_event(config.out, outputs, config.tracks_format)
    written = time.perf_counter()
    seconds.update(inference=scored - started, tracks=tracked - scored, write=written - tracked)
    if partition:
        counts.update(num_cut_edges=partition["num_cut_edges"], num_halo_nodes=partition["num_halo_nodes"])
    return Outcome(prepared.source.name, True, seconds=seconds, counts=counts)


def run_host(
    pipeline: Pipeline,
    digest: str,
    sources: list[EventSource],
    config: ReconstructConfig,
    layout: Any,
    threads: int,
    report: Callable[[Outcome], None],
) -> list[Outcome]:
    """A replica's host: every event of its share through the stages, the next ones prepared ahead.

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
    # A lone event has nothing to overlap with: preparing it in another process would only add that process.
    preparer = Preparer(pipeline.raw_stage(), config.prefetch if len(sources) > 1 else 0, threads)
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
                line, fault = (exc.line, exc.fault) if isinstance(exc, PreparingFailed) else _failure_line(exc)
                if fault:
                    raise MachineFault(f"{source.path}: {line}") from None
                products.remove_event(config.out, source.name)  # nothing stale is left beside a failed event
                outcome = Outcome(source.name, False, line)
            else:
                wait = time.perf_counter() - waited
                if not outcomes and layout is not None and config.num_parts > 1 and not config.skip_locality_check:
                    # Before the first partitioned event, once: a model that is not local would score every event
                    # otherwise than one process. A refusal ends the job (no event of this pipeline is right).
                    from domainpar.inference.infer import require_partitionable

                    require_partitionable(pipeline.loaded, prepared.graph, config.num_parts)
                try:
                    outcome = _reconstruct_event(pipeline, digest, prepared, layout, config)
                except DomainparError as exc:
                    products.remove_event(config.out, source.name)
                    outcome = Outcome(source.name, False, message_line(str(exc)))
                else:
                    outcome.seconds["wait"] = wait
            outcomes.append(outcome)
            report(outcome)
        finished = True
    finally:
        preparer.close(finished)
    if layout is not None and config.num_parts > 1:
        from domainpar.inference.domain import host_stop

        host_stop(layout)
    return outcomes


# ------------------------------------------------------------------ the run


@dataclass
class Plan:
    """The run as decided by its owner before any event is read."""

    todo: list[EventSource]
    """The events still to reconstruct, in order."""
    skipped: list[str]
    """Events whose outputs are already there (this pipeline, the same input files)."""
    digest: str
    """The pipeline's digest."""
    record: dict
    """The pipeline's record (``reconstruct.json``)."""


def _check_manifest(config: ReconstructConfig, record: dict, digest: str) -> None:
    """Refuse (or, with redo, clear) an ``--out`` holding another pipeline's outputs; write this run's manifest."""
    out = Path(config.out)
    path = out / MANIFEST
    if path.exists():
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            found = {}
        if not isinstance(found, dict) or found.get("pipeline_digest") != digest:
            if not config.redo:
                differs = _difference(found.get("pipeline", {}) if isinstance(found, dict) else {}, record)
                raise DomainparError(
                    f"--out {out}: expected the outputs of this pipeline (digest {digest}), got those of another "
                    f"(digest {found.get('pipeline_digest') if isinstance(found, dict) else None}; {differs}); "
                    "choose another --out, or pass --redo to replace them"
                )
    if config.redo:
        for name in products.outputs_of(out):
            products.remove_event(out, name)
    products.write_json(path, {"producer": "domainpar reconstruct", "domainpar": __version__, "pipeline_digest": digest,
                               "pipeline": record})  # fmt: skip


def _difference(old: dict, new: dict) -> str:
    keys = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k) and k not in ("checkpoint", "model", "producer", "domainpar")]
    if not keys:
        return "an unreadable manifest"
    key = keys[0]
    return f"{key} {json.dumps(old.get(key), default=str)[:80]} there, {json.dumps(new.get(key), default=str)[:80]} here"


def find_sources(config: ReconstructConfig) -> list[EventSource]:
    """The events of ``--data`` (a user mistake there is named before anything is written)."""
    sources = list_sources(config.data)
    if not sources:
        raise DomainparError(f"--data {config.data}: found no events to reconstruct")
    return sources


def plan_run(config: ReconstructConfig, pipeline: Pipeline, sources: list[EventSource]) -> Plan:
    """Decide what to do (holding the run's lock): the manifest check, stale temporaries removed, the events already
    done skipped."""
    record = producer(pipeline, "domainpar reconstruct")
    digest = pipeline_digest(record)
    out = Path(config.out)
    _check_manifest(config, record, digest)
    for sub in (products.SUBMISSIONS, products.TRACKS, products.RECORDS):
        remove_stale_temporaries(out / sub)
    needs_cells = pipeline.raw_stage().graph_config.needs_cells if sources[0].kind == "raw" else False
    todo, skipped = [], []
    for source in sources:
        files = input_files(source, needs_cells)
        stamp = input_stamp(files) if files else []
        if not config.redo and files and products.is_done(out, source.name, digest, stamp, config.tracks_format):
            skipped.append(source.name)
        else:
            todo.append(source)
    return Plan(todo, skipped, digest, record)


def _threads(config: ReconstructConfig, local_processes: int) -> tuple[int, int]:
    """(torch threads of a scoring process, of a preparing process) on this machine's cores."""
    cores = available_cores()
    preparers = config.workers if config.prefetch > 0 else 0
    if config.threads is not None:
        return config.threads, 1
    scoring = max(1, (cores - preparers) // max(local_processes, 1)) if cores > preparers else 1
    return scoring, 1


@dataclass
class RunResult:
    """What a run did."""

    outcomes: list[Outcome]
    """Every event attempted, done or failed."""
    skipped: list[str]
    """Events already done by an earlier run."""
    summary: dict
    """``summary.json``'s content."""

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]


def _summary(config: ReconstructConfig, plan: Plan, outcomes: list[Outcome], wall: float, world: int, threads: int) -> dict:
    done = [o for o in outcomes if o.ok]
    stages = {s: [o.seconds.get(s, 0.0) for o in done] for s in (*STAGES, "wait")}
    per_event = [{"event": o.name, **{k: round(v, 4) for k, v in o.seconds.items()}, **o.counts} for o in done]
    return {
        "producer": "domainpar reconstruct",
        "domainpar": __version__,
        "pipeline_digest": plan.digest,
        "pipeline": plan.record,
        "data": str(config.data),
        "out": str(config.out),
        "settings": {"num_parts": config.num_parts, "method": config.method if config.num_parts > 1 else None,
                     "workers": config.workers, "processes": world, "prefetch": config.prefetch, "threads": threads,
                     "tracks_format": config.tracks_format, "cores": available_cores()},  # fmt: skip
        "events": {"total": len(plan.todo) + len(plan.skipped), "done": len(done), "skipped": len(plan.skipped),
                   "failed": len(outcomes) - len(done)},  # fmt: skip
        "failed": [{"event": o.name, "error": o.error} for o in outcomes if not o.ok],
        "seconds_wall": wall,
        "events_per_hour": 3600.0 * len(done) / wall if wall > 0 and done else None,
        "stage_seconds_total": {k: float(np.sum(v)) for k, v in stages.items()},
        "stage_seconds_mean": {k: (float(np.mean(v)) if v else None) for k, v in stages.items()},
        "per_event": per_event,
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def _reporter(config: ReconstructConfig, total: int, replicas: int, label: str = "") -> tuple[Callable[[Outcome], None], Any]:
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
    if config.workers * config.num_parts > 4 * (os.cpu_count() or 1):
        raise DomainparError(
            f"--workers {config.workers} x --parts {config.num_parts} starts that many local processes: at most "
            f"{4 * (os.cpu_count() or 1)} on this machine; use torchrun or srun to run on several nodes"
        )
    from domainpar.launch.runlock import run_lock

    started = time.perf_counter()
    sources = find_sources(config)
    pipeline = load_pipeline(config.checkpoint, config.model, config.edge_filter, config.threshold, config.track_method)
    with run_lock(config.out, "--out", LOCK, "reconstruction"):
        plan = plan_run(config, pipeline, sources)
        if len(plan.todo) <= config.workers:
            # One event per replica at most: nothing to overlap, every core to the one process per replica.
            config = replace(config, prefetch=0)
        world = config.workers * config.num_parts
        scoring_threads, prepare_threads = _threads(config, world)
        if world == 1:
            import torch

            torch.set_num_threads(scoring_threads)
            report, bar = _reporter(config, len(plan.todo), 1)
            try:
                outcomes = run_host(pipeline, plan.digest, plan.todo, config, None, prepare_threads, report)
            finally:
                bar.close()
        else:
            outcomes = _spawn_ranks(config, plan, pipeline, world, scoring_threads, prepare_threads)
        summary = _summary(config, plan, outcomes, time.perf_counter() - started, world, scoring_threads)
        products.write_json(Path(config.out) / SUMMARY, summary)
    return RunResult(outcomes, plan.skipped, summary)


def _spawn_ranks(config: ReconstructConfig, plan: Plan, pipeline: Pipeline, world: int, threads: int, prepare_threads: int) -> list[Outcome]:
    """Run the job on ``world`` spawned local ranks; progress and failure lines come back through a queue."""
    from domainpar.launch.ranks import SpawnError, spawn, spawn_failure

    context = mp.get_context("spawn")
    messages = context.Queue()
    report, bar = _reporter(config, len(plan.todo), world // config.num_parts)
    stop = threading.Event()

    def relay() -> None:
        while not stop.is_set() or not messages.empty():
            try:
                outcome = messages.get(timeout=0.2)
            except queue.Empty:
                continue
            report(outcome)

    relay_thread = threading.Thread(target=relay, name="domainpar-reconstruct-progress", daemon=True)
    relay_thread.start()
    try:
        # A checkpoint's built-in model travels to the ranks as loaded (its files are not read again). An exported
        # pipeline holds runtime sessions, and a user's model may live in a module imported from a file path that a
        # spawned process cannot unpickle: every rank loads those itself.
        from domainpar.verification.locality import known_local

        shared = pipeline if pipeline.exported is None and known_local(pipeline.loaded.model_config.name) else None
        per_rank = spawn(_rank_main, world, (config, plan, shared, threads, prepare_threads, messages),
                         timeout_s=JOB_LIMIT_S, backend="gloo", num_threads=threads)  # fmt: skip
    except SpawnError as exc:
        failure = spawn_failure(exc, "reconstruction")
        if failure is exc:
            raise DomainparError(f"reconstruction failed on rank(s) {exc.ranks}: {exc.traceback_text.strip().splitlines()[-1]}") from exc
        raise failure from None
    finally:
        stop.set()
        relay_thread.join(5.0)
        bar.close()
        messages.close()
    return [outcome for outcomes in per_rank for outcome in outcomes]


def _rank_work(config: ReconstructConfig, plan: Plan, pipeline: Pipeline | None, layout: Any, threads: int,
               report: Callable[[Outcome], None]) -> list[Outcome]:  # fmt: skip
    """One rank's part of the job: a host runs its replica's share, a member serves the host's inference."""
    if pipeline is None:
        pipeline = load_pipeline(config.checkpoint, config.model, config.edge_filter, config.threshold, config.track_method)
    if layout.part != 0:
        from domainpar.inference.domain import serve

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
            sources = find_sources(config)
            pipeline = load_pipeline(config.checkpoint, config.model, config.edge_filter, config.threshold, config.track_method)
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
        scoring, prepare_threads = _threads(ReconstructConfig(**{**asdict(config), "workers": max(1, local // config.num_parts)}), local)
        torch.set_num_threads(scoring)
        report, bar = _reporter(config, len(plan.todo[layout.replica :: layout.num_replicas]) if layout.part == 0 else 0,
                                layout.num_replicas, f" (replica {layout.replica + 1} of {layout.num_replicas})")  # fmt: skip
        try:
            mine = _rank_work(config, plan, pipeline if env.rank == 0 else None, layout, prepare_threads, report)
        finally:
            bar.close()
        everyone: list[Any] = [None] * env.world_size
        dist.all_gather_object(everyone, mine)
        outcomes = [outcome for rank_outcomes in everyone for outcome in rank_outcomes]
        summary = _summary(config, plan, outcomes, time.perf_counter() - started, env.world_size, scoring)
        if env.rank == 0:
            products.write_json(Path(config.out) / SUMMARY, summary)
        dist.barrier()
    finally:
        if lock is not None:
            release(lock)
    return RunResult(outcomes, plan.skipped, summary)


__all__ = ["MANIFEST", "STAGES", "ReconstructConfig", "RunResult", "plan_run", "prepare", "reconstruct", "run_host"]

"""Preparing a training run's events once, before the first step: graphs from raw events, plans of every event.

Work that depends only on an event — building its hit graph from raw TrackML
files, partitioning it into the parts of a domain group — is done once per
event for the whole run (every epoch, every replica, every resume), ahead of
training, in parallel over events; never once per rank and never per step.
Then a rank reads only its own part file (:class:`~domainpar.train.events.EventParts`).

What is prepared (:func:`run_items`):

* raw events of ``data.train`` / ``data.val`` → ``<out>/graphs/<kind>/event<id>.npz``
  (kept on resume);
* with more than one rank per domain group and no ``data.plans`` (domain or
  sectors mode): every event's plan, self-sufficient part files, in
  ``<out>/plans/<kind>/<method>-<G>parts-seed<seed>/event<id>/``. A plan is
  remade only when its graph file changed (size or mtime recorded beside it).
  Why plans on disk rather than one rank partitioning and broadcasting the
  owners at every step: the work is done once instead of once per epoch, it
  is spread over every rank of the job instead of one rank per group, each
  rank then reads O(E/P) bytes instead of the whole graph, and nothing runs
  as a collective from the prefetch thread;
* with ``data.plans``: a check that every event has a plan of G parts.

Who does it: :func:`prepare` on one machine (the ``--ranks`` launcher, or a
single process) runs every event in a process pool; under torchrun/srun
:func:`prepare_distributed` gives each rank the shard ``rank/world`` of the
events (each in a pool of ``data.workers`` processes) and the ranks then wait
for each other **through the rendezvous store, not a barrier**: no process
group timeout bounds the preparation, a failure on any rank reaches every rank
within a poll with that rank's message, and a rank that died silently is named
after a heartbeat timeout (:mod:`domainpar.comm.failures`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from domainpar.errors import DomainparError
from domainpar.train.config import TrainConfig, domain_size_of
from domainpar.workers import ItemResult, available_cores, failure_summary, run_items, shard_items


@dataclass(frozen=True)
class RunInputs:
    """A prepared run's events: what every rank lists after preparation (the same on every rank)."""

    train_files: list[str]
    """Graph files of the training events."""
    val_files: list[str]
    """Graph files of the validation events."""
    train_plans: str | None
    """Directory of the training events' plan directories (None: one part per event)."""
    val_plans: str | None
    """Directory of the validation events' plan directories (None: one part per event)."""


@dataclass(frozen=True)
class PrepItem:
    """One event of the run and what preparing it means."""

    kind: str
    """"train" or "val"."""
    source: str
    """Raw event prefix or graph file."""
    raw: bool
    """True when ``source`` is a raw TrackML event (its graph is built into ``graph``)."""
    graph: str
    """The event's graph file."""
    plan_dir: str | None
    """Plan directory to make (``<out>/plans/...``) or to check (``data.plans``); None for one part per event."""
    make_plan: bool
    """True when the plan is made here; False when it is the user's ``data.plans`` (only checked)."""


def _is_raw(path: Path) -> bool:
    from domainpar.data.event_graph import has_graph_files

    return path.is_dir() and not has_graph_files(path) and any(path.glob("event*-hits.csv*"))


def plan_root(config: TrainConfig, kind: str, group_size: int) -> tuple[Path | None, bool]:
    """Where the plans of ``kind`` events live and whether the run makes them: ``(root, make)``."""
    mode = config.parallel.mode
    if mode == "single" or group_size == 1:
        return None, False
    if mode == "domain" and config.data.plans is not None:
        return Path(config.data.plans), False
    method = "sectors" if mode == "sectors" else config.data.method
    return Path(config.run.out) / "plans" / kind / f"{method}-{group_size}parts-seed{config.run.seed}", True


def _sources(config: TrainConfig) -> list[tuple[str, Path]]:
    sources = [("train", Path(config.data.train))]
    if config.data.val:
        sources.append(("val", Path(config.data.val)))
    return sources


def list_items(config: TrainConfig, world_size: int) -> tuple[list[PrepItem], RunInputs]:
    """Every event of the run (training then validation) and the run's inputs once prepared.

    Reads directory listings and, for graph files, their event ids; builds nothing.

    Raises:
        DomainparError: a path with neither graphs nor raw events, or two graph files of one event.
    """
    from domainpar.data.dataset import event_inputs, graph_target
    from domainpar.data.event_graph import graph_files, has_graph_files, is_pyg_dataset
    from domainpar.partition.io import plan_dir_name
    from domainpar.train.events import graph_header

    group = domain_size_of(config, world_size)
    items: list[PrepItem] = []
    files: dict[str, list[str]] = {}
    roots: dict[str, str | None] = {}
    for kind, path in _sources(config):
        root, make = plan_root(config, kind, group)
        roots[kind] = None if root is None else str(root)
        if _is_raw(path):
            prefixes = event_inputs(path)
            graphs = [graph_target(p, Path(config.run.out) / "graphs" / kind) for p in prefixes]
            sources = [str(p) for p in prefixes]
            ids = [int(Path(g).stem[len("event"):]) for g in graphs]
        elif has_graph_files(path):
            graphs = graph_files(path)
            if is_pyg_dataset(path):
                from domainpar.data.pyg_files import convert_pyg_files

                # The field's PyG files become graph files once (reused later; every rank converts the same
                # files to the same bytes, so concurrent ranks agree).
                graphs = convert_pyg_files(graphs, Path(config.run.out) / "graphs" / kind, progress=False)
            sources = [str(g) for g in graphs]
            # Event ids name the plan directories; without plans the graphs are read by their item only.
            ids = [graph_header(g)[0] if root is not None else i for i, g in enumerate(graphs)]
            seen: dict[int, Path] = {}
            for graph, event_id in zip(graphs, ids):
                if root is not None and event_id in seen:
                    raise DomainparError(
                        f"{path}: expected one graph file per event (found event {event_id} in both {seen[event_id].name} "
                        f"and {graph.name}); each event has one plan"
                    )
                seen[event_id] = graph
        else:
            option = "--data" if kind == "train" else "--val"
            raise DomainparError(
                f"{option} {path}: expected graph files (*.npz, or PyG *.pyg / *.pt) or raw TrackML events "
                "(event*-hits.csv[.gz]), found neither"
            )
        raw = _is_raw(path)
        for source, graph, event_id in zip(sources, graphs, ids):
            plan_dir = None if root is None else str(root / plan_dir_name(event_id))
            items.append(PrepItem(kind, source, raw, str(graph), plan_dir, make))
        files[kind] = [str(g) for g in graphs]
    if "val" not in files:
        files["val"], roots["val"] = files["train"], roots["train"]
    if config.optim.batch_events > len(files["train"]):
        raise DomainparError(
            f"--batch-events {config.optim.batch_events} must be at most the number of training events "
            f"({len(files['train'])} in {config.data.train})"
        )
    return items, RunInputs(files["train"], files["val"], roots["train"], roots["val"])


#: Bumped when part files gain members a run needs (2: the owned nodes' particle truth), so older plans are remade.
_PART_CONTENT = 2


def _fingerprint(graph: Path) -> str:
    stat = graph.stat()
    return json.dumps({"graph": str(graph.resolve()), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns, "parts": _PART_CONTENT})


def check_loss_inputs(graph: Path, needs: list[tuple[str, str]]) -> None:
    """The graph file records the per-node truth the loss's target selection reads (from the archive's index only).

    Raises:
        DomainparError: naming the setting (``loss.target_min_hits`` ...) and the file.
    """
    if not needs:
        return
    with zipfile.ZipFile(graph) as archive:
        names = set(archive.namelist())
    for setting, array in needs:
        if f"{array}.npy" not in names:
            raise DomainparError(
                f"{graph}: loss.{setting} needs the graphs' {array}, which this file does not record (built before "
                "domainpar recorded it, or converted from a PyG file without it); rebuild it with `domainpar build`"
            )


def _source_note(plan_dir: Path) -> Path:
    return plan_dir.with_name(plan_dir.name + ".source.json")


def prepare_item(item: PrepItem, params: dict[str, Any]) -> dict[str, Any]:
    """Prepare one event (in a worker process): build its graph, check it, make or check its plan.

    Args:
        item: the event.
        params: ``graph_config`` (GraphConfig for raw events), ``widths`` (expected node and edge
            feature widths, or None to skip), ``num_parts``, ``method``, ``seed``.

    Returns:
        ``{"built": bool, "partitioned": bool, "seconds": float}``.

    Raises:
        DomainparError: the event's one-line problem (bad raw file, graph without labels or with other
            feature widths, missing or mis-sized plan, a part count the graph cannot take).
    """
    from domainpar.data.event_graph import inspect_graph
    from domainpar.train.events import require_labels

    start = time.perf_counter()
    graph = Path(item.graph)
    built = partitioned = False
    if item.raw and not graph.is_file():
        from domainpar.data.dataset import build_graph_file

        build_graph_file(item.source, graph.parent, params["graph_config"])
        built = True
    header = inspect_graph(graph)  # the file's structure from its headers: a damaged file is named precisely
    if not header.has_labels:
        require_labels(graph)
    check_loss_inputs(graph, params.get("loss_needs", []))
    widths = params.get("widths")
    if widths is not None:
        for name, width, found in zip(("x", "edge_attr"), widths, (header.node_features, header.edge_features)):
            if found != width:
                raise DomainparError(
                    f"{graph}: {name} must have {width} columns like {params['widths_of']} "
                    f"(got {found}; graphs built with different --cell-features?)"
                )
    if item.plan_dir is not None:
        plan_dir = Path(item.plan_dir)
        if item.make_plan:
            note = _source_note(plan_dir)
            current = _fingerprint(graph)
            fresh = (plan_dir / "manifest.json").is_file() and note.is_file() and note.read_text() == current
            if not fresh:
                from domainpar.atomic import atomic_path
                from domainpar.partition.dataset import partition_file

                partition_file(str(graph), str(plan_dir), params["num_parts"], params["method"], params["seed"])
                with atomic_path(note) as tmp:
                    tmp.write_text(current)
                partitioned = True
        else:
            from domainpar.partition.io import read_manifest
            from domainpar.train.events import graph_header

            event_id = graph_header(graph)[0]
            try:
                from domainpar.train.events import plan_directory

                manifest = read_manifest(plan_directory(plan_dir.parent, event_id, graph))
            except DomainparError as exc:
                raise DomainparError(f"--plans: {exc}") from None
            if manifest["num_parts"] != params["num_parts"]:
                raise DomainparError(
                    f"--plans {plan_dir.parent}: the plan of {graph} must have {params['num_parts']} parts, "
                    f"one per rank of a domain group (got a plan of {manifest['num_parts']} parts)"
                )
    return {"built": built, "partitioned": partitioned, "seconds": time.perf_counter() - start}


def _params(config: TrainConfig, world_size: int, items: list[PrepItem]) -> dict[str, Any]:
    from domainpar.data.event_graph import EDGE_FEATURES, NODE_FEATURES, inspect_graph
    from domainpar.data.graph import CELL_FEATURES, GraphConfig

    graph_config = GraphConfig()
    widths, widths_of = None, None
    if items:
        first = items[0]
        if first.raw:
            # Every raw event is built with the same GraphConfig, so the widths are known without building.
            widths = (len(NODE_FEATURES) + (len(CELL_FEATURES) if graph_config.cell_features else 0), len(EDGE_FEATURES))
            widths_of = "the run's other graphs"
        else:
            try:
                header = inspect_graph(first.graph)
                widths, widths_of = (header.node_features, header.edge_features), first.graph
            except DomainparError:
                widths = None  # its own item names the damage precisely
        if any(item.raw != first.raw for item in items):
            widths = None  # mixed sources: compared after preparation (check_feature_widths)
    return {
        "graph_config": graph_config,
        "widths": widths,
        "widths_of": widths_of,
        "num_parts": domain_size_of(config, world_size),
        "method": "sectors" if config.parallel.mode == "sectors" else config.data.method,
        "seed": config.run.seed,
        "loss_needs": config.loss.needs,
    }


def _names(items: list[PrepItem]) -> list[str]:
    return [Path(item.source).name for item in items]


def _check_widths(inputs: RunInputs) -> None:
    from domainpar.train.events import check_feature_widths

    check_feature_widths([Path(f) for f in dict.fromkeys(inputs.train_files + inputs.val_files)])


#: Input bytes (graph files to partition, hit files to build) below which a process pool costs more than it saves:
#: starting a worker imports numpy, numba and pandas (1-2 s), a full event takes 3-5 s.
_POOL_MIN_BYTES = 50_000_000


def _pool_size(items: list[PrepItem], wanted: int) -> int:
    """``wanted`` processes when the events to build or partition are worth a pool, else 1 (this process)."""
    work = [item for item in items if item.raw or item.make_plan]
    if wanted <= 1 or len(work) <= 1:
        return 1
    total = 0
    for item in work:
        source = Path(item.source)
        try:
            total += sum(p.stat().st_size for p in source.parent.glob(source.name + "-hits.csv*")) if item.raw else source.stat().st_size
        except OSError:
            continue
        if total >= _POOL_MIN_BYTES:
            return wanted
    return 1


def prepare(config: TrainConfig, world_size: int, *, workers: int | None = None, progress: bool = True) -> RunInputs:
    """Prepare every event of the run on this machine (``workers`` processes) and list the run's inputs.

    Raises:
        DomainparError: bad inputs; or, after every other event was prepared, one line naming the events that failed.
    """
    items, inputs = list_items(config, world_size)
    params = _params(config, world_size, items)
    workers = _pool_size(items, workers or config.data.workers or available_cores())
    results = run_items(prepare_item, items, args=(params,), names=_names(items), workers=workers, desc="preparing events",
                        progress=progress, report_each=False)
    _raise_failures(results)
    if params["widths"] is None:
        _check_widths(inputs)
    return inputs


def _raise_failures(results: list[ItemResult]) -> None:
    """One failed event: its own line (it names the file); several: one line naming them all."""
    failed = [r for r in results if not r.ok]
    if len(failed) == 1:
        raise DomainparError(failed[0].error)
    if failed:
        raise DomainparError(failure_summary(results))


def _local_world_size() -> int:
    for name in ("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE"):
        value = os.environ.get(name, "")
        if value.split("(")[0].isdigit():
            return max(1, int(value.split("(")[0]))
    return 1


def prepare_distributed(
    config: TrainConfig,
    rank: int,
    world_size: int,
    *,
    before: Callable[[], None] | None = None,
    progress: bool = True,
    liveness_s: float | None = None,
) -> RunInputs:
    """Every rank of a torchrun/srun job prepares its shard ``rank/world_size`` of the events, then waits for the others.

    The wait polls the rendezvous store (:func:`domainpar.comm.wait.wait_for_peers`), so it has
    no time limit for live peers; a failure on any rank (also in ``before``, e.g. rank 0's output
    checks) is published on the failure channel and ends every rank within a poll with that
    rank's line, and a rank that died silently is named after ``liveness_s``.

    Args:
        config: the run's configuration (validated).
        rank: this rank.
        world_size: ranks of the job (the default process group exists).
        before: run first, inside the failure channel (rank 0: check --out).
        progress: rank 0 shows the preparation's progress over all ranks.
        liveness_s: seconds without a heartbeat that make a silent peer dead
            (default :data:`domainpar.comm.wait.LIVENESS_S`).

    Returns:
        The run's inputs, identical on every rank.

    Raises:
        DomainparError: this rank's own problem, or ``rank <r>: <line>`` of a peer's user mistake.
        PeerFailed: a peer crashed or died (the message names it).
    """
    from domainpar.comm import wait
    from domainpar.comm.failure import PeerFailed, default_channel, publish_failure

    channel = default_channel()
    beat_channel = wait.own_channel(rank)
    if channel is None or beat_channel is None:
        raise DomainparError("preparing a distributed run needs the rendezvous store of the default process group (found none)")
    liveness_s = wait.LIVENESS_S if liveness_s is None else liveness_s
    try:
        with wait.Heartbeat(beat_channel) as heartbeat:
            if before is not None:
                before()
            items, inputs = list_items(config, world_size)
            params = _params(config, world_size, items)
            mine = shard_items(items, (rank, world_size))
            attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
            tag = hashlib.sha256(json.dumps([config.run.out, world_size, len(items), attempt]).encode()).hexdigest()[:12]
            key = f"prepare-{tag}"
            counter = f"wait/{key}/events"
            bar = _GlobalProgress(channel.store, counter, len(items), enabled=progress and rank == 0)

            def should_stop() -> BaseException | None:
                bar.poll()
                return heartbeat.peer_failed()

            workers = _pool_size(mine, config.data.workers or max(1, available_cores() // _local_world_size()))
            results = run_items(
                prepare_item, mine, args=(params,), names=_names(mine), workers=workers, progress=False,
                should_stop=should_stop, on_result=lambda result: channel.store.add(counter, 1),
            )
            _raise_failures(results)
            wait.mark_done(channel, key)
            wait.wait_for_peers(channel, key, world_size, liveness_s=liveness_s, on_poll=bar.poll)
            bar.close()
            if params["widths"] is None:
                _check_widths(inputs)
            return inputs
    except PeerFailed as exc:
        channel.acknowledge()
        if exc.failure.user_error:
            raise DomainparError(exc.failure.message) from None
        raise
    except BaseException as exc:
        first = publish_failure(exc)
        wait.linger(channel, world_size)
        if first is not None and first.rank != rank:
            channel.acknowledge()
            if first.user_error:
                raise DomainparError(first.message) from None
            raise PeerFailed(first, rank) from exc
        raise


class _GlobalProgress:
    """Rank 0's progress bar over every rank's events (a counter in the store)."""

    def __init__(self, store: Any, key: str, total: int, enabled: bool) -> None:
        from tqdm import tqdm

        self.store, self.key = store, key
        self.bar = tqdm(total=total, desc="preparing events (all ranks)", unit="event", disable=not enabled,
                        file=sys.stderr, dynamic_ncols=True)
        self.enabled = enabled

    def poll(self) -> None:
        if self.enabled:
            try:
                done = int(self.store.add(self.key, 0))
            except Exception:  # noqa: BLE001 - progress is cosmetic; the wait reports a lost store
                return
            self.bar.update(max(0, done - self.bar.n))

    def close(self) -> None:
        self.poll()
        self.bar.close()


__all__ = ["PrepItem", "RunInputs", "list_items", "plan_root", "prepare", "prepare_distributed", "prepare_item"]

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
  remade only when its graph file changed (the digest of the graph file its
  manifest records, :func:`~domainpar.npzfile.archive_digest`, differs).
  Why plans on disk rather than one rank partitioning and broadcasting the
  owners at every step: the work is done once instead of once per epoch, it
  is spread over every rank of the job instead of one rank per group, each
  rank then reads O(E/P) bytes instead of the whole graph, and nothing runs
  as a collective from the prefetch thread;
* with ``data.plans``: a check that every event has a plan of G parts made
  from this very graph file (the manifest's graph digest and feature names),
  so plans of an earlier build of the graphs are refused, never trained on.

Who does it: :func:`prepare` on one machine (the ``--ranks`` launcher, or a
single process); under torchrun/srun :func:`prepare_distributed`, each rank its
shard of the events, the ranks waiting for each other through the rendezvous
store, not a barrier.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from domainpar.comm import wait
from domainpar.comm.failure import PeerFailed, default_channel, publish_failure
from domainpar.data.dataset import build_graph_file, build_seconds, event_inputs, graph_target
from domainpar.data.event_graph import EDGE_FEATURES, NODE_FEATURES, require_edges
from domainpar.data.graph import CELL_FEATURES, GraphConfig
from domainpar.data.graph_files import GRAPHS_OR_EVENTS, graph_files, has_graph_files, read_graph_metadata, refuse_mixed_inputs, is_pyg_dataset, inspect_graph
from domainpar.data.pyg_files import convert_pyg_files
from domainpar.errors import DomainparError
from domainpar.npzfile import archive_digest
from domainpar.partition.dataset import partition_file, partition_seconds
from domainpar.partition.io import plan_dir_name, read_manifest
from domainpar.progress import progress
from domainpar.train.checkpoint import load_checkpoint
from domainpar.train.config import TrainConfig, domain_size_of
from domainpar.train.events import require_labels, plan_directory, check_features
from domainpar.train.state import check_resume_early, resume_candidate
from domainpar.workers import ItemResult, available_cores, failure_summary, pool_size, run_items, shard_items


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
    origin: str | None = None
    """The user's graph file when ``graph`` is a conversion of it (PyG files); a plan of either is accepted."""


def _is_raw(path: Path) -> bool:
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


def list_items(config: TrainConfig, world_size: int) -> tuple[list[PrepItem], RunInputs]:
    """Every event of the run (training then validation) and the run's inputs once prepared.

    Reads directory listings and, for graph files, their event ids; builds nothing.

    Raises:
        DomainparError: a path with neither graphs nor raw events, or two graph files of one event.
    """
    group = domain_size_of(config, world_size)
    items: list[PrepItem] = []
    files: dict[str, list[str]] = {}
    roots: dict[str, str | None] = {}
    given = [("train", config.data.train)] + ([("val", config.data.val)] if config.data.val else [])
    for kind, text in given:
        path = Path(text)
        root, make = plan_root(config, kind, group)
        roots[kind] = None if root is None else str(root)
        option = "--data" if kind == "train" else "--val"
        refuse_mixed_inputs(path, option)
        raw = _is_raw(path)
        if raw:
            prefixes = event_inputs(path)
            graphs = [graph_target(p, Path(config.run.out) / "graphs" / kind) for p in prefixes]
            sources = [str(p) for p in prefixes]
            ids = [int(Path(g).stem[len("event"):]) for g in graphs]
            origins = [None] * len(graphs)
        elif has_graph_files(path):
            graphs = graph_files(path)
            origins: list[str | None] = [None] * len(graphs)
            if is_pyg_dataset(path):
                # The field's PyG files become graph files once (reused later; every rank converts the same
                # files to the same bytes, so concurrent ranks agree).
                origins = [str(g) for g in graphs]
                graphs = convert_pyg_files(graphs, Path(config.run.out) / "graphs" / kind, progress=False)
            sources = [str(g) for g in graphs]
            # Event ids name the plan directories; without plans the graphs are read by their item only.
            ids = [inspect_graph(g).event_id if root is not None else i for i, g in enumerate(graphs)]
            seen: dict[int, Path] = {}
            for graph, event_id in zip(graphs, ids):
                if root is not None and event_id in seen:
                    raise DomainparError(
                        f"{path}: expected one graph file per event (found event {event_id} in both {seen[event_id].name} "
                        f"and {graph.name}); each event has one plan"
                    )
                seen[event_id] = graph
        else:
            raise DomainparError(f"{option} {path}: {GRAPHS_OR_EVENTS}, found neither")
        for source, graph, event_id, origin in zip(sources, graphs, ids, origins):
            plan_dir = None if root is None else str(root / plan_dir_name(event_id))
            items.append(PrepItem(kind, source, raw, str(graph), plan_dir, make, origin))
        files[kind] = [str(g) for g in graphs]
    if "val" not in files:
        files["val"], roots["val"] = files["train"], roots["train"]
    return items, RunInputs(files["train"], files["val"], roots["train"], roots["val"])


def count_training_events(config: TrainConfig) -> int | None:
    """How many training events ``data.train`` holds, from its listing alone (nothing is built or converted);
    None when that cannot be told without reading them."""
    path = Path(config.data.train)
    refuse_mixed_inputs(path, "--data")
    if _is_raw(path):
        return len(event_inputs(path))
    if has_graph_files(path):
        return len(graph_files(path))
    return None


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


def precheck_resume(config: TrainConfig) -> None:
    """Before anything is prepared or written: a resume must continue the run of its checkpoint (settings, schedule).

    Loads the checkpoint rank 0 will choose (checksum and fields verified) and compares what needs no graph;
    the ranks compare everything again (feature widths, the training events' digests) before the first step.

    Raises:
        DomainparError: a damaged checkpoint, or a setting that differs from the checkpoint's (named, both values).
    """
    path = resume_candidate(config)
    if path is None:
        return
    check_resume_early(path, load_checkpoint(path), config, count_training_events(config))


def plan_is_current(plan_dir: Path, graph: Path, num_parts: int) -> bool:
    """Whether ``plan_dir`` holds a readable plan of ``num_parts`` parts made from this content of ``graph``."""
    try:
        manifest = read_manifest(plan_dir)
    except DomainparError:
        return False
    return manifest["num_parts"] == num_parts and manifest["graph_digest"] == archive_digest(graph)


def check_plan_source(manifest: dict[str, Any], plan_dir: Path, graph: Path, origin: str | None = None) -> None:
    """A user's plan (``--plans``) must have been made from the graph file the run is given (``--data``/``--val``).

    Compares the feature names the manifest records with the graph's (the likely difference, named), then
    the digest of the graph file the plan was made from with this file's (or with ``origin``'s, the
    user's file that ``graph`` was converted from).

    Raises:
        DomainparError: a plan of another build of the graphs, or one that records no graph digest.
    """
    names = read_graph_metadata(graph)
    for key, kind in (("node_feature_names", "node_features"), ("edge_feature_names", "edge_features")):
        recorded, found = manifest.get(key), names.get(kind)
        if recorded is not None and found is not None and list(recorded) != list(found):
            raise DomainparError(
                f"--plans {plan_dir}: the plan was made from a graph with {kind.replace('_', ' ')} {list(recorded)}, "
                f"but {graph} has {list(found)}; re-run `domainpar partition` on the graphs given to this run"
            )
    recorded = manifest.get("graph_digest")
    if recorded is None:
        raise DomainparError(
            f"--plans {plan_dir}: the plan records no digest of the graph file it was made from, so it cannot be "
            f"matched with {graph}; re-run `domainpar partition` on the graphs given to this run"
        )
    found = archive_digest(graph)
    if recorded != found and (origin is None or recorded != archive_digest(origin)):
        # Name the part files: they are what the ranks would read, and what the user copied or kept.
        parts = [e.get("name") for e in manifest.get("part_files", []) if isinstance(e, dict) and isinstance(e.get("name"), str)]
        shown = f"{plan_dir / parts[0]}" + (f" (and {len(parts) - 1} other part file(s))" if len(parts) > 1 else "") if parts else str(plan_dir)
        raise DomainparError(
            f"--plans {shown}: expected a part file made from {Path(origin or graph).name} as given to this run (graph "
            f"digest {found.partition(':')[2][:12]}…), got one made from a graph of digest {recorded.partition(':')[2][:12]}… "
            "(another build of the graphs, or other events with the same ids); re-run `domainpar partition` on the graphs "
            "given to this run"
        )


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
    start = time.perf_counter()
    graph = Path(item.graph)
    built = partitioned = False
    if item.raw and not graph.is_file():
        build_graph_file(item.source, graph.parent, params["graph_config"])
        built = True
    header = inspect_graph(graph)  # the file's structure from its headers: a damaged file is named precisely
    if not header.has_labels:
        require_labels(graph)
    require_edges(header.num_edges, item.origin or item.source, "validate on" if item.kind == "val" else "train on")
    check_loss_inputs(graph, params.get("loss_needs", []))
    widths = params.get("widths")
    if widths is not None:
        for name, width, found in zip(("x", "edge_attr"), widths, (header.node_features, header.edge_features)):
            if found != width:
                role = "--val graph " if item.kind == "val" else ""
                raise DomainparError(
                    f"{role}{graph}: {name} must have {width} columns like the training graph {params['widths_of']} "
                    f"(got {found}; graphs built with other --node-features/--edge-features?)"
                )
    if item.plan_dir is not None:
        plan_dir = Path(item.plan_dir)
        if item.make_plan:
            if not plan_is_current(plan_dir, graph, params["num_parts"]):
                partition_file(str(graph), str(plan_dir), params["num_parts"], params["method"], params["seed"])
                partitioned = True
        else:
            user_plan = plan_directory(plan_dir.parent, header.event_id, graph)
            try:
                manifest = read_manifest(user_plan)
            except DomainparError as exc:
                raise DomainparError(f"--plans: {exc}") from None
            if manifest["num_parts"] != params["num_parts"]:
                raise DomainparError(
                    f"--plans {plan_dir.parent}: the plan of {graph} must have {params['num_parts']} parts, "
                    f"one per rank of a domain group (got a plan of {manifest['num_parts']} parts)"
                )
            check_plan_source(manifest, user_plan, graph, item.origin)
    return {"built": built, "partitioned": partitioned, "seconds": time.perf_counter() - start}


def _params(config: TrainConfig, world_size: int, items: list[PrepItem]) -> dict[str, Any]:
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
            widths = None  # mixed sources: compared after preparation (check_features)
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


def _check_features(inputs: RunInputs) -> None:
    """Every graph of the run has the first training graph's features, by width and by name (headers only)."""
    check_features([Path(f) for f in inputs.train_files], [Path(f) for f in inputs.val_files if f not in set(inputs.train_files)])


def _temporaries_in(items: list[PrepItem]) -> list[Path]:
    """Where preparing ``items`` writes (built graphs, plans): a worker killed mid-write leaves its temporaries there."""
    places = {Path(item.graph).parent for item in items if item.raw}
    places |= {Path(item.plan_dir).parent for item in items if item.plan_dir is not None and item.make_plan}
    return sorted(places)


def _pool_size(items: list[PrepItem], wanted: int) -> int:
    """``wanted`` processes when the events to build or partition are worth a pool, else 1 (this process)."""
    work = (build_seconds(item.source) if item.raw else partition_seconds(item.source)
            for item in items if item.raw or item.make_plan)  # fmt: skip
    return pool_size(wanted, work)


def prepare(config: TrainConfig, world_size: int, *, workers: int | None = None, progress: bool = True) -> RunInputs:
    """Prepare every event of the run on this machine (``workers`` processes) and list the run's inputs.

    Raises:
        DomainparError: bad inputs; or, after every other event was prepared, one line naming the events that failed.
    """
    items, inputs = list_items(config, world_size)
    params = _params(config, world_size, items)
    workers = _pool_size(items, workers or config.data.workers or available_cores())
    results = run_items(prepare_item, items, args=(params,), names=_names(items), workers=workers, desc="preparing events",
                        progress=progress, report_each=False, temporaries_in=_temporaries_in(items))
    _raise_failures(results)
    _check_features(inputs)
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
) -> RunInputs:
    """Every rank of a torchrun/srun job prepares its shard ``rank/world_size`` of the events, then waits for the others.

    The wait polls the rendezvous store (:func:`domainpar.comm.wait.wait_for_peers`), so it has
    no time limit for live peers; a failure on any rank (also in ``before``, e.g. rank 0's output
    checks) is published on the failure channel and ends every rank within a poll with that
    rank's line, and a rank that died silently is named after :data:`domainpar.comm.wait.LIVENESS_S`.

    Args:
        config: the run's configuration (validated).
        rank: this rank.
        world_size: ranks of the job (the default process group exists).
        before: run first, inside the failure channel (rank 0: check --out).
        progress: rank 0 shows the preparation's progress over all ranks.

    Returns:
        The run's inputs, identical on every rank.

    Raises:
        DomainparError: this rank's own problem, or ``rank <r>: <line>`` of a peer's user mistake.
        PeerFailed: a peer crashed or died (the message names it).
    """
    channel = default_channel()
    beat_channel = wait.own_channel(rank)
    if channel is None or beat_channel is None:
        raise DomainparError("preparing a distributed run needs the rendezvous store of the default process group (found none)")
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
                temporaries_in=_temporaries_in(mine),
            )
            _raise_failures(results)
            wait.mark_done(channel, key)
            wait.wait_for_peers(channel, key, world_size, liveness_s=wait.LIVENESS_S, on_poll=bar.poll)
            bar.close()
            _check_features(inputs)
            return inputs
    except PeerFailed as exc:
        channel.acknowledge()
        if exc.failure.user_error:
            raise DomainparError(exc.failure.message) from None
        raise
    except BaseException as exc:
        first = publish_failure(exc)
        if first is not None and first.rank == rank:
            wait.linger(channel, world_size)  # this rank's own failure: let the peers read it before the launcher ends them
        if first is not None and first.rank != rank:
            channel.acknowledge()
            if first.user_error:
                raise DomainparError(first.message) from None
            raise PeerFailed(first, rank) from exc
        raise


class _GlobalProgress:
    """Rank 0's progress bar over every rank's events (a counter in the store)."""

    def __init__(self, store: Any, key: str, total: int, enabled: bool) -> None:
        self.store, self.key = store, key
        self.bar = progress(total=total, desc="preparing events (all ranks)", unit="event", enabled=enabled)
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


__all__ = ["PrepItem", "RunInputs", "count_training_events", "list_items", "plan_root", "precheck_resume", "prepare",
           "prepare_distributed", "prepare_item"]

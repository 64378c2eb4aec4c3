"""Training and validation events: files, size estimates, graphs and their plans.

Events come as graph files (``*.npz`` written by ``domainpar build``) or as raw
TrackML events, which :func:`prepare_event_files` turns into graph files once
(in ``<out>/graphs/<kind>``, reused on resume). An :class:`EventSource` hands
out each event's graph with the partition plan of the current mode, made on
the fly or read from ``domainpar partition`` output, and keeps recently used
ones in memory so later epochs do not repeat the work.
"""

from __future__ import annotations

import os
import time
import zipfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from domainpar.data.event_graph import EventGraph, graph_files, has_graph_files, inspect_graph, is_pyg_dataset, load_graph
from domainpar.errors import DomainparError, one_line
from domainpar.partition.plan import PartitionPlan, build_plan


def _has_raw_events(path: Path) -> bool:
    return path.is_dir() and any(path.glob("event*-hits.csv*"))


def prepare_event_files(path: str | os.PathLike, out_dir: str | os.PathLike, kind: str, progress: bool = True) -> list[Path]:
    """Graph files of ``path``: its ``*.npz`` files, or graphs built from its raw TrackML events or PyG files.

    Raw events are built with the default :class:`~domainpar.data.graph.GraphConfig`
    into ``<out_dir>/graphs/<kind>/event<id>.npz``, PyG graph files of the field's
    tools converted into ``<out_dir>/graphs/<kind>/<name>.npz``; graphs already there are reused.

    Args:
        path: a graph file, a directory of graphs, or a directory of raw TrackML events.
        out_dir: the run's output directory.
        kind: "train" or "val" (sub-directory name).
        progress: show a progress bar while building.

    Raises:
        DomainparError: no graphs and no raw events at ``path``.
    """
    path = Path(path)
    if has_graph_files(path) and is_pyg_dataset(path):
        from domainpar.data.pyg_files import convert_pyg_files

        return convert_pyg_files(graph_files(path), Path(out_dir) / "graphs" / kind, progress)
    if path.is_file() or (path.is_dir() and any(path.glob("*.npz"))):
        files = graph_files(path)
        # Check every file's structure now (headers only, cheap) so a stray or damaged file fails before the
        # run writes anything; content (finite features, indices, labels) is checked when an event is loaded.
        for file in files:
            if not inspect_graph(file).has_labels:
                _require_labels(file)
        return files
    if not _has_raw_events(path):
        raise DomainparError(
            f"{path}: expected graph files (*.npz, or PyG *.pyg / *.pt) or raw TrackML events (event*-hits.csv[.gz]), found neither"
        )
    from tqdm import tqdm

    from domainpar.data.event_graph import save_graph
    from domainpar.data.features import build_description
    from domainpar.data.graph import GraphConfig, build_event_graph
    from domainpar.data.trackml import event_prefixes

    from domainpar.atomic import staged_outputs

    target_dir = Path(out_dir) / "graphs" / kind
    files = []
    prefixes = event_prefixes(path)
    # Graphs appear in the run directory only when every event built: a bad event leaves nothing behind.
    with staged_outputs() as outputs:
        staging = None
        for prefix in tqdm(prefixes, desc=f"building {kind} graphs", unit="event", disable=not progress):
            target = target_dir / f"{Path(prefix).name}.npz"
            if not target.is_file():
                built = build_event_graph(prefix, GraphConfig())
                graph = built[0] if isinstance(built, tuple) else built
                staging = staging or outputs.directory(target_dir)
                save_graph(graph, staging / target.name, build_description(GraphConfig()))
            files.append(target)
    return files


def plan_directory(plans_dir: Path, event_id: int, graph_path: Path) -> Path:
    """The plan directory of an event in ``domainpar partition`` output: ``<plans>/event<id>/``, or ``plans_dir``
    itself when it is one plan (``partition --graph FILE``)."""
    plan_dir = plans_dir / f"event{event_id:09d}"
    if not plan_dir.is_dir() and (plans_dir / "manifest.json").is_file():
        plan_dir = plans_dir
    if not plan_dir.is_dir():
        raise DomainparError(f"--plans {plans_dir}: no plan directory event{event_id:09d} for {graph_path}")
    return plan_dir


def check_plans(plans_dir: str | os.PathLike, files: list[Path], num_parts: int) -> None:
    """Before a run writes anything: every graph has a plan directory whose manifest has ``num_parts`` parts.

    Only the graphs' ``event_id`` and the manifests are read (cheap); the full
    validation against each graph (content hash, part files) happens when the
    ranks load the plans.

    Raises:
        DomainparError: a missing plan directory or manifest, or a plan with another number of parts.
    """
    import json

    plans_dir = Path(plans_dir)
    for path in files:
        event_id = inspect_graph(path).event_id
        plan_dir = plan_directory(plans_dir, event_id, path)
        manifest = plan_dir / "manifest.json"
        try:
            stored = json.loads(manifest.read_text()).get("num_parts")
        except (OSError, ValueError, AttributeError):
            continue  # load_plan gives the detailed error
        if stored != num_parts:
            raise DomainparError(
                f"--plans {plans_dir}: the plan of {path} ({plan_dir}) must have {num_parts} parts, "
                f"one per rank of a domain group (got a plan of {stored} parts)"
            )


def check_feature_widths(files: list[Path]) -> None:
    """All graphs of a run must have the node and edge feature widths of the first (one model serves them all).

    Raises:
        DomainparError: a graph whose ``x`` or ``edge_attr`` width differs (e.g. built with another --cell-features).
    """
    if not files:
        return
    reference = {name: array_shape(files[0], name)[1:] for name in ("x", "edge_attr")}
    for path in files[1:]:
        for name, width in reference.items():
            found = array_shape(path, name)[1:]
            if found != width:
                raise DomainparError(
                    f"{path}: {name} must have {width[0] if width else 0} columns like {files[0]} "
                    f"(got {found[0] if found else 0}; graphs built with different --cell-features?)"
                )


def _require_labels(path: Path) -> None:
    """Training and validation graphs must carry edge labels (``y``), read from the archive's index only."""
    with zipfile.ZipFile(path) as archive:
        if "y.npy" not in archive.namelist():
            raise DomainparError(
                f"{path}: training and validation need graphs with truth labels "
                "(found a graph without y: built from events without a truth file?)"
            )


def graph_size(path: Path) -> int:
    """Number of edges of a graph file, read from the array header only (no decompression of the data)."""
    return int(array_shape(path, "edge_index")[1])


def array_shape(path: Path, name: str) -> tuple[int, ...]:
    """Shape of array ``name`` in a graph file, from its header only."""
    try:
        with zipfile.ZipFile(path) as archive, archive.open(f"{name}.npy") as member:
            version = np.lib.format.read_magic(member)
            if version == (1, 0):
                shape, _, _ = np.lib.format.read_array_header_1_0(member)
            else:
                shape, _, _ = np.lib.format.read_array_header_2_0(member)
        return tuple(int(v) for v in shape)
    except KeyError:
        raise DomainparError(f"{path}: expected a domainpar graph file with an {name} array (found no such entry)") from None
    except (OSError, ValueError, zipfile.BadZipFile, IndexError, EOFError) as exc:
        raise DomainparError(
            f"{path}: expected a domainpar graph file (.npz), could not read its {name} array ({one_line(exc)})"
        ) from None


#: How a message names the parts per event of training: the ranks of a domain group.
_PARTS_OPTION = "the domain size (--domain-size, default --ranks)"


@dataclass(frozen=True)
class PreparedEvent:
    """An event ready for a rank: its graph and the plan of the current mode."""

    graph: EventGraph
    """The whole event graph."""
    plan: PartitionPlan
    """Its plan, one part per rank of the domain group."""
    dropped_labels: np.ndarray | None
    """(num_dropped,) labels of the cut edges a sectors plan drops (None otherwise)."""
    seconds_plan: float
    """Wall time spent loading or making the plan."""


class EventSource:
    """Graphs and plans of a list of events, with an LRU cache.

    Args:
        files: graph files.
        mode: "domain", "sectors" or "single".
        num_parts: parts per event (the domain size G).
        method: partitioner for on-the-fly domain plans ("metis" or "geometric").
        seed: partitioner seed (identical on every rank so the plans agree).
        plans_dir: `domainpar partition` output to read plans from (domain mode), or None.
        cache_events: events kept in memory.
    """

    def __init__(
        self,
        files: list[Path],
        mode: str,
        num_parts: int,
        method: str = "metis",
        seed: int = 0,
        plans_dir: str | os.PathLike | None = None,
        cache_events: int = 256,
    ) -> None:
        self.files = [Path(f) for f in files]
        self.mode = mode
        self.num_parts = num_parts
        self.method = method
        self.seed = seed
        self.plans_dir = None if plans_dir is None else Path(plans_dir)
        self.cache_events = cache_events
        self._cache: OrderedDict[int, PreparedEvent] = OrderedDict()
        self._sizes: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.files)

    @property
    def sizes(self) -> np.ndarray:
        """(num_events,) edges per event (the work estimate used for bucketing)."""
        if self._sizes is None:
            self._sizes = np.array([graph_size(f) for f in self.files], dtype=np.int64)
        return self._sizes

    def get(self, index: int) -> tuple[PreparedEvent, bool]:
        """The event ``index`` and whether it was freshly prepared (False: from the cache)."""
        if index in self._cache:
            self._cache.move_to_end(index)
            return self._cache[index], False
        event = self._prepare(self.files[index])
        if self.cache_events > 0:
            self._cache[index] = event
            while len(self._cache) > self.cache_events:
                self._cache.popitem(last=False)
        return event, True

    def _prepare(self, path: Path) -> PreparedEvent:
        graph = load_graph(path)
        if graph.y is None:
            raise DomainparError(f"{path}: training and validation need graphs with truth labels (got y = None)")
        t0 = time.perf_counter()
        dropped = None
        if self.mode == "single" or self.num_parts == 1:
            owner = np.zeros(graph.num_nodes, dtype=np.int64)
            plan = build_plan(graph.edge_index, owner, 1, y=graph.y, graph_hash=graph.content_hash())
        elif self.mode == "sectors":
            from domainpar.partition import partition_graph

            plan = partition_graph(graph, self.num_parts, method="sectors", seed=self.seed, option=_PARTS_OPTION)
            kept = np.zeros(graph.num_edges, dtype=bool)
            for part in plan.parts:
                kept[part.edge_ids] = True
            dropped = graph.y[~kept]
        elif self.plans_dir is not None:
            from domainpar.partition.io import load_plan

            plan_dir = plan_directory(self.plans_dir, graph.event_id, path)
            plan = load_plan(plan_dir, graph, num_parts=self.num_parts)
        else:
            from domainpar.partition import partition_graph

            plan = partition_graph(graph, self.num_parts, method=self.method, seed=self.seed, option=_PARTS_OPTION)
        return PreparedEvent(graph=graph, plan=plan, dropped_labels=dropped, seconds_plan=time.perf_counter() - t0)

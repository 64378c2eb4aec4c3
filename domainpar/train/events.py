"""Training and validation events as one rank sees them: sizes for the sampler, and each event's part.

Before training, :mod:`domainpar.train.prepare` turns the run's inputs into
graph files and (for more than one part per event) plan directories of
self-sufficient part files. An :class:`EventParts` then gives the sampler the
size of every event (from graph headers, no data read) and gives a rank the
:class:`~domainpar.partition.part_data.PartData` of its own part of an event:
its part file only (O(E/P) bytes), or the whole graph as the one-part plan
when a group has one rank. The header helpers here read ``.npz`` headers
without decompressing data.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

from domainpar.data.event_graph import GraphHeader
from domainpar.data.graph_files import inspect_graph, load_graph, read_graph_metadata
from domainpar.errors import DomainparError, one_line
from domainpar.partition.io import load_part, part_file_name
from domainpar.partition.part_data import PartData, whole_graph_part


def plan_directory(plans_dir: Path, event_id: int, graph_path: Path) -> Path:
    """The plan directory of an event in ``domainpar partition`` output: ``<plans>/event<id>/``, or ``plans_dir``
    itself when it is one plan (``partition --graph FILE``)."""
    plan_dir = plans_dir / f"event{event_id:09d}"
    if not plan_dir.is_dir() and (plans_dir / "manifest.json").is_file():
        plan_dir = plans_dir
    if not plan_dir.is_dir():
        raise DomainparError(f"--plans {plans_dir}: no plan directory event{event_id:09d} for {graph_path}")
    return plan_dir


def check_features(train_files: list[Path], val_files: list[Path] = ()) -> None:
    """Every graph of a run must have the node and edge features of the first training graph, by width and by
    name (one model serves them all; validation scores that model).

    Read from the files' headers and name entries only. Names are compared where both files record them
    (graph format 2; format-1 files record widths only).

    Raises:
        DomainparError: the first graph whose ``x`` / ``edge_attr`` width or feature names differ, naming it
            and the training graph it was compared with (``--val`` for a validation graph).
    """
    files = list(train_files) + list(val_files)
    if not files:
        return
    first = files[0]
    reference = {name: array_shape(first, name)[1:] for name in ("x", "edge_attr")}
    names = read_graph_metadata(first)
    validation = set(map(str, val_files))
    for path in files[1:]:
        role = "--val graph " if str(path) in validation else ""
        for name, width in reference.items():
            found = array_shape(path, name)[1:]
            if found != width:
                raise DomainparError(
                    f"{role}{path}: {name} must have {width[0] if width else 0} columns like the training graph {first} "
                    f"(got {found[0] if found else 0}; graphs built with other --node-features/--edge-features?)"
                )
        found_names = read_graph_metadata(path)
        for kind in ("node_features", "edge_features"):
            expected, got = names.get(kind), found_names.get(kind)
            if expected is not None and got is not None and list(expected) != list(got):
                raise DomainparError(
                    f"{role}{path}: {kind.replace('_', ' ')} must be {list(expected)} like the training graph {first} "
                    f"(got {list(got)}); build every graph of a run with the same features"
                )


def require_labels(path: Path) -> None:
    """Training and validation graphs must carry edge labels (``y``), read from the archive's index only."""
    with zipfile.ZipFile(path) as archive:
        if "y.npy" not in archive.namelist():
            raise DomainparError(
                f"{path}: training and validation need graphs with truth labels "
                "(found a graph without y: built from events without a truth file?)"
            )


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


class EventParts:
    """The events of one kind (training or validation) as one rank of a domain group reads them.

    Args:
        files: graph files (``domainpar build`` output), in the run's event order.
        num_parts: parts per event (the domain group size G).
        part: this rank's part (its index in the group).
        plans: directory of plan directories (``<plans>/event<id>/part_<p>.npz``, ``domainpar partition``
            output, or one plan directory when it holds a manifest); None for one part per event.
    """

    def __init__(self, files: list[Path], num_parts: int, part: int, plans: str | os.PathLike | None) -> None:
        self.files = [Path(f) for f in files]
        self.num_parts = num_parts
        self.part = part
        self.plans = None if plans is None else Path(plans)
        if num_parts > 1 and self.plans is None:
            raise DomainparError(f"events split into {num_parts} parts need plan directories (got none); prepare the run first")
        self._sizes: np.ndarray | None = None
        self._headers: dict[int, GraphHeader] = {}

    @property
    def sizes(self) -> np.ndarray:
        """(num_events,) edges per event (the work estimate used for bucketing), from the array headers only."""
        if self._sizes is None:
            self._sizes = np.array([array_shape(f, "edge_index")[1] for f in self.files], dtype=np.int64)
        return self._sizes

    def _header(self, index: int) -> GraphHeader:
        header = self._headers.get(index)
        if header is None:
            header = self._headers[index] = inspect_graph(self.files[index])
        return header

    def load(self, index: int) -> PartData:
        """This rank's part of event ``index`` (host memory, validated); safe to call from a prefetch thread.

        With one part per event: the whole graph as the one-part plan. Otherwise
        only this rank's part file is read, and it must be part ``part`` of a
        ``num_parts``-part plan of this event's graph (event id, node and edge
        counts from the graph file's header).

        Raises:
            DomainparError: one line naming the file: unreadable, damaged, mismatched, or without labels.
        """
        path = self.files[index]
        if self.plans is None:
            graph = load_graph(path)
            if graph.y is None:
                raise DomainparError(f"{path}: training and validation need graphs with truth labels (got y = None)")
            return whole_graph_part(graph)

        header = self._header(index)
        part_path = plan_directory(self.plans, header.event_id, path) / part_file_name(self.part)
        data = load_part(part_path, part=self.part, num_parts=self.num_parts, event_id=header.event_id,
                         num_nodes=header.num_nodes, num_edges=header.num_edges)  # fmt: skip
        if data.y is None:
            raise DomainparError(f"{part_path}: training and validation need parts with truth labels (got a part without y)")
        return data

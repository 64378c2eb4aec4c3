"""An event's graph as the model's training graphs were: :class:`GraphStage`.

A raw event is built with the graph build the checkpoint (or the exported model's sidecar) records and pruned by
the recorded edge filter (by its content hash); a graph file is taken as it is when that filter pruned it, pruned
here when it was not pruned at all, and refused otherwise. Either way its features are checked against the model's
inputs. The stage is picklable, so a preparing process gets it whole (the loaded filter with it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from domainpar.data.detector import layer_table
from domainpar.data.event_graph import EventGraph
from domainpar.data.graph import GraphConfig, build_graph
from domainpar.errors import DomainparError
from domainpar.parsing import parse_json

#: A function pruning a graph as the model's training graphs were pruned (an edge filter's ``apply``).
Prune = Callable[[EventGraph], EventGraph]


def filter_hash_of(build_config: str | None) -> str | None:
    """The content hash of the edge filter a graph's (or a model's training graphs') build record names (None: not
    pruned, or no record)."""
    if not build_config:
        return None
    try:
        record = parse_json(build_config, "build_config", "a JSON object")
    except ValueError:
        return None
    pruned = record.get("edge_filter") if isinstance(record, dict) else None
    return str(pruned.get("hash")) if isinstance(pruned, dict) else None


@dataclass(frozen=True)
class BuiltGraph:
    """One event's graph as the model reads it, with what building it took."""

    graph: EventGraph
    """The graph, pruned by the recorded edge filter."""
    num_edges_built: int
    """Edges before the filter."""
    seconds_build: float
    """Graph construction (segments, features)."""
    seconds_filter: float
    """The edge filter."""
    edges_built: np.ndarray | None = None
    """(2, E_built) int64 the edges before the filter (what ``evaluate --losses`` tells the filter's losses by)."""


@dataclass(frozen=True)
class GraphStage:
    """How events become the model's graphs: the recorded build and edge filter, and the model's inputs (picklable)."""

    graph_config: GraphConfig | None
    """The cuts and features of the training graphs (None: no build is recorded to rebuild them from raw events)."""
    no_build: str | None
    """Why raw events cannot be built (the training graphs came from another builder); None when they can."""
    filter_hash: str | None
    """The content hash of the edge filter the training graphs were pruned with (None: not pruned)."""
    edge_filter: Any
    """The loaded edge filter of ``--filter`` (:class:`~domainpar.filter.edge_filter.EdgeFilter`, checked to be the
    recorded one), None when none was given or an exported model's own filter file prunes."""
    exported_model: Path | None
    """An exported model whose sidecar's edge filter file prunes (None: a checkpoint's pipeline)."""
    node_features: int
    """The model's input width."""
    graph_meta: dict | None
    """The training graphs' feature names, to check graphs against."""
    whose: str
    """The model in messages."""

    @property
    def needs_cells(self) -> bool:
        """Whether building a raw event reads its cells."""
        return self.graph_config is not None and self.graph_config.needs_cells

    def prune(self) -> Prune | None:
        """The pruning function, loaded in the calling process (None: no filter to prune with)."""
        if self.exported_model is not None:
            from domainpar.export.runtime import load_exported

            exported = load_exported(self.exported_model)
            return exported.prune if exported.filter_stage is not None else None
        return None if self.edge_filter is None else self.edge_filter.apply

    def _missing_filter(self, source: str, graph_file: bool) -> str:
        if graph_file:
            return (
                f"{source}: {self.whose} was trained on graphs pruned by edge filter {self.filter_hash} and this graph is "
                "not pruned; pass that filter with --filter, or give graphs pruned by it"
            )
        return (
            f"{source}: {self.whose} was trained on graphs pruned by edge filter {self.filter_hash}; pass that filter with "
            "--filter (filter.pt of the recipe run) to prune the graphs built from raw events, or give graph files pruned by it"
        )

    def check_raw(self, source: str, truth: bool) -> None:
        """Refuse, before any event is read, raw events this pipeline cannot turn into its graphs.

        Raises:
            DomainparError: no build recorded, the recorded filter not given, or a truth cut without truth.
        """
        if self.no_build is not None:
            raise DomainparError(self.no_build)
        if self.filter_hash is not None and self.edge_filter is None and self.exported_model is None:
            raise DomainparError(self._missing_filter(source, graph_file=False))
        if not truth and self.graph_config.min_pt > 0:
            raise DomainparError(
                f"{source}: the model's training graphs kept only hits of particles above {self.graph_config.min_pt:g} GeV "
                "by their truth (graph min_pt), a cut no event without truth can be given; run a model trained on all hits"
            )

    def from_raw(
        self,
        prune: Prune | None,
        hits: pd.DataFrame,
        cells: pd.DataFrame | None,
        event_id: int,
        source: str,
        truth: pd.DataFrame | None = None,
        particles: pd.DataFrame | None = None,
    ) -> BuiltGraph:
        """Raw hits (and cells) → the model's graph: built with the recorded cuts and features, pruned, checked.

        Args:
            prune: this stage's :meth:`prune`, loaded once per process.
            hits, cells: the event's hits and cells (cells None when the features need none).
            event_id: stored in the graph.
            source: the event in messages.
            truth, particles: with truth, the graph carries labels; its edges and features are the same.

        Raises:
            DomainparError: see :meth:`check_raw`, or features that are not the model's.
        """
        self.check_raw(source, truth is not None)
        started = time.perf_counter()
        config = self.graph_config
        graph, _ = build_graph(hits, truth, particles, cells if config.needs_cells else None, config=config, event_id=event_id)
        built = time.perf_counter()
        num_edges_built, edges_built = graph.num_edges, graph.edge_index
        if self.filter_hash is not None:
            graph = prune(graph)
        filtered = time.perf_counter()
        self.check_inputs(graph, source)
        return BuiltGraph(graph, num_edges_built, built - started, filtered - built, edges_built)

    def unpruned_edges(self, hits: pd.DataFrame, truth: pd.DataFrame, particles: pd.DataFrame, event_id: int,
                       source: str) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """The edges the recorded build gives a raw event before the filter, to compare a pruned graph file with.

        Only the edges are wanted: the graph is built with the default features (the cuts alone decide the edges),
        so no cells are read.

        Returns:
            ``(hit_id (N,), edge_index (2, E))``: the built graph's nodes and edges.

        Raises:
            DomainparError: no build is recorded to rebuild the graph with.
        """
        if self.no_build is not None:
            raise DomainparError(self.no_build)
        if self.graph_config is None:
            raise DomainparError(f"{source}: {self.whose} records no graph build to rebuild the unfiltered graph with")
        default = GraphConfig()
        config = replace(self.graph_config, cell_features=False, node_features=default.node_features,
                         edge_features=default.edge_features)  # fmt: skip
        # Truth changes the nodes only through a truth-pT cut; without one the labels would be work for nothing.
        labelled = config.min_pt > 0
        graph, _ = build_graph(hits, truth if labelled else None, particles if labelled else None, config=config,
                               event_id=event_id)  # fmt: skip
        return graph.hit_id, graph.edge_index

    def from_file(self, prune: Prune | None, graph: EventGraph, source: str) -> EventGraph:
        """A graph file as the model's training graphs were: used as is when pruned by the recorded filter, pruned
        here when not pruned at all; its features checked.

        Raises:
            DomainparError: features that are not the model's, a graph pruned otherwise than the training graphs,
                or one to prune with no filter given.
        """
        self.check_inputs(graph, source)
        region = () if self.graph_config is None else self.graph_config.volumes
        if region:
            held = np.unique(layer_table()["volume_id"].to_numpy()[graph.layer])
            if not set(held.tolist()) <= set(region):
                raise DomainparError(
                    f"{source}: {self.whose} was trained on graphs of detector volumes {list(region)} and this graph holds "
                    f"hits of volumes {held.tolist()}; give the raw event (it is cut to the model's volumes) or a graph of them"
                )
        found = filter_hash_of(graph.build_config)
        if found == self.filter_hash:
            return graph
        if self.filter_hash is None:
            raise DomainparError(
                f"{source}: the graph was pruned by edge filter {found}, but {self.whose} was trained on graphs that were "
                "not pruned; give graphs built like the training graphs"
            )
        if found is not None:
            raise DomainparError(
                f"{source}: graph was pruned by edge filter {found}, but {self.whose} was trained on graphs pruned by "
                f"{self.filter_hash}"
            )
        if prune is None:
            raise DomainparError(self._missing_filter(source, graph_file=True))
        return prune(graph)

    def check_inputs(self, graph: EventGraph, source: str) -> None:
        """A graph's features must be the model's inputs: as many node columns, and the same names where both are known.

        Raises:
            DomainparError: naming ``source``, what the model expects and what the graph has.
        """
        if graph.x.shape[1] != self.node_features:
            raise DomainparError(
                f"{source}: graph has {graph.x.shape[1]} node features but {self.whose} expects {self.node_features} "
                "(build the graphs with the same features as the training graphs)"
            )
        for kind in ("node_features", "edge_features"):
            expected = None if not self.graph_meta else self.graph_meta.get(kind)
            found = getattr(graph, kind)
            if expected is None or found is None:
                continue
            if len(found) != len(expected):
                raise DomainparError(
                    f"{source}: graph has {len(found)} {kind.replace('_', ' ')} but {self.whose} expects {len(expected)} "
                    f"({', '.join(expected)})"
                )
            if list(found) != list(expected):
                raise DomainparError(
                    f"{source}: graph {kind.replace('_', ' ')} must be {list(expected)} like the model's training graphs "
                    f"(got {list(found)}; build the graphs with the same features)"
                )


__all__ = ["BuiltGraph", "GraphStage", "Prune", "filter_hash_of"]

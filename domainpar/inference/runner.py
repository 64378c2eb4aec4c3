"""The one event chain: a prepared event → edge logits → scores → tracks, whatever command asks for it.

Every command that turns events into tracks runs :class:`EventRunner` (evaluate, reconstruct, the recipe's
figures, the speed measurement, the bench) on events from :func:`~domainpar.inference.events.prepare_event`. The
logits come from a *scorer*: :class:`SingleProcess` (the checkpoint's model, or the exported file), a
:class:`~domainpar.inference.partitioned.LocalGroup` of P processes, or :class:`DomainHost` (this process is part 0
of a domain group); the tracks from :func:`~domainpar.tracks.candidates.build_candidates`. Before the first event
scored on several parts, a model that is not a built-in proves it is local.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from domainpar.data.event_graph import EventGraph
from domainpar.errors import DomainparError
from domainpar.inference.arithmetic import chain_threads
from domainpar.kernels.chunks import build_threads, using_threads
from domainpar.inference.events import PreparedEvent
from domainpar.inference.pipeline import Pipeline
from domainpar.signals import hold_stops
from domainpar.tracks.candidates import build_candidates
from domainpar.tracks.free_pass import cluster_lengths
from domainpar.tracks.layout import TrackCandidates
from domainpar.tracks.submission import complete_tracks


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Edge scores (probabilities) of logits, without overflow."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(logits, dtype=np.float64)))


class LocalityUnproven(DomainparError):
    """An event too small to check a user's model for locality on: that event fails, the next one is checked."""


class Scorer(Protocol):
    """Where an event's edge logits are computed."""

    num_parts: int
    """Parts every event is split into (1: the whole graph in one process)."""

    def logits(self, graph: EventGraph) -> tuple[np.ndarray, dict]:
        """(E,) float64 logits of every edge, and the partition's figures (empty for one process)."""

    def close(self) -> None:
        """Release what the scorer started."""


class SingleProcess:
    """Scores whole graphs in this process: the checkpoint's model (one-part plan, identity exchange) or the
    exported model file, run as the deployment side runs it."""

    num_parts = 1

    def __init__(self, pipeline: Pipeline) -> None:
        self.loaded, self.exported = pipeline.loaded, pipeline.exported

    def logits(self, graph: EventGraph) -> tuple[np.ndarray, dict]:
        if self.exported is not None:
            self.exported.check_widths(f"event {graph.event_id}", graph.x.shape[1], graph.edge_attr.shape[1])
            return self.exported.logits(graph.x, graph.edge_index, graph.edge_attr), {}
        return whole_graph_logits(self.loaded, graph), {}

    def close(self) -> None:
        pass


def whole_graph_logits(loaded: Any, graph: EventGraph) -> np.ndarray:
    """(E,) float64 logits of every edge of ``graph`` by a restored checkpoint's model, in this process."""
    import torch

    from domainpar.parallel.part import rank_part

    rp = rank_part(graph, dtype=loaded.dtype)
    with torch.no_grad():
        logits = loaded.model(rp.graph, rp.exchange)
    return rp.scatter_edges(logits.double()).numpy()


class DomainHost:
    """This process is part 0 of a domain group whose members are in :func:`~domainpar.inference.partitioned.serve`
    (a reconstruction's rank): it hosts every event it scores."""

    def __init__(self, pipeline: Pipeline, layout: Any) -> None:
        self.loaded, self.layout, self.spec = pipeline.loaded, layout, pipeline.spec
        self.num_parts = layout.domain_size

    def logits(self, graph: EventGraph) -> tuple[np.ndarray, dict]:
        from domainpar.inference.partitioned import host_logits

        return host_logits(self.loaded, self.layout, graph, self.spec.method, self.spec.seed)

    def close(self) -> None:
        from domainpar.inference.partitioned import host_stop

        host_stop(self.layout)


def open_scorer(pipeline: Pipeline) -> Scorer:
    """The scorer the pipeline's spec asks for: this process, or ``num_parts`` local processes with halo exchange."""
    spec = pipeline.spec
    if spec.num_parts == 1:
        return SingleProcess(pipeline)
    from domainpar.inference.partitioned import LocalGroup

    return LocalGroup(spec.checkpoint, spec.num_parts, spec.method, spec.seed, spec.timeout_s)


@dataclass
class EventResult:
    """One event through the chain."""

    event: PreparedEvent
    logits: np.ndarray
    """(E,) float64 edge logits."""
    scores: np.ndarray
    """(E,) float64 edge scores (sigmoid of the logits)."""
    candidates: TrackCandidates
    """The track candidates of the graph's hits (hits in order, helix fits)."""
    track_id: np.ndarray
    """(M,) int64 track id of every hit of the event, aligned with ``event.event_hit_id`` (hits the graph left out
    are singletons numbered after the graph's candidates)."""
    partition: dict = field(default_factory=dict)
    """The partition's figures when the event was scored on several parts."""
    seconds: dict = field(default_factory=dict)
    """read, build, filter (from preparing it), inference, tracks."""


class EventRunner:
    """Runs prepared events through the pipeline's scorer and track builder."""

    def __init__(self, pipeline: Pipeline, scorer: Scorer, close_scorer: bool = True) -> None:
        """``close_scorer``: close the scorer with the runner (False: a scorer its caller shares between runs)."""
        self.pipeline, self.scorer, self.close_scorer = pipeline, scorer, close_scorer
        self.locality_checked = scorer.num_parts == 1 or pipeline.spec.skip_locality_check

    def check_locality(self, graph: EventGraph) -> None:
        """Before the first event scored on several parts: a model that is not a built-in must prove it is local,
        or it would score every event otherwise than one process.

        The check counts only once it proved something (halo rows were exchanged on a slice of ``graph``): an event
        too small for that (a malformed one, no edges) proves nothing, so it is not scored and the next event is
        checked again. Whatever happened to earlier events, no event is scored on several parts before the proof.

        Raises:
            LocalityUnproven: ``graph`` is too small to check the model on (the event fails; the run goes on).
            DomainparError: the model is not local (the run has no right event to give).
        """
        if self.locality_checked:
            return
        from domainpar.inference.partitioned import require_partitionable

        parts = self.scorer.num_parts
        result = require_partitionable(self.pipeline.loaded, graph, parts)
        if result is not None and not result.proven:
            raise LocalityUnproven(
                f"event {graph.event_id}: too small to check that model {result.model!r} is local (a {parts}-part slice "
                f"of it has {result.num_nodes} nodes, {result.num_edges} edges and no halo rows), so it is not scored "
                f"with --parts {parts}; the check runs again on the next event"
            )
        self.locality_checked = True

    def run(self, event: PreparedEvent) -> EventResult:
        """The event's logits, scores and tracks.

        Raises:
            DomainparError: a model that is not local (see :meth:`check_locality`), or an event that cannot be cut into
                the parts.
        """
        self.check_locality(event.graph)
        started = time.perf_counter()
        # Threads fixed: the bytes written do not depend on the process's thread count (domainpar.inference.arithmetic).
        # The GNN's streamed chunks (domainpar.model.chunked) go to the process's threads: they split no reduction.
        with using_threads(build_threads()), chain_threads():
            logits, partition = self.scorer.logits(event.graph)
            scored = time.perf_counter()
            result = self.tracks(event, logits, partition)
        result.seconds["inference"] = scored - started
        return result

    def tracks(self, event: PreparedEvent, logits: np.ndarray, partition: dict) -> EventResult:
        """The scores and tracks of an event whose logits are known (the chain after the scorer)."""
        graph = event.graph
        started = time.perf_counter()
        scores = sigmoid(logits)
        # The builders' numba code calls back into Python: a stop raised in there would be a SystemError and a
        # traceback, so it waits for the builder (seconds at most) and is answered as the block ends.
        with hold_stops(), chain_threads():
            candidates = build_candidates(graph.pos, graph.layer, graph.edge_index, scores, self.pipeline.tracks, cluster_lengths(graph))
        track_id = complete_tracks(event.event_hit_id, graph.hit_id, candidates.track_id)
        # The warm figure: numba compiling the builders' kernels (a first run on a machine) is reported apart.
        seconds = {**event.seconds, "tracks": max(0.0, time.perf_counter() - started - candidates.seconds_compiling)}
        if candidates.seconds_compiling > 0.0:
            seconds["tracks_compiling"] = candidates.seconds_compiling
        return EventResult(event, logits, scores, candidates, track_id, partition, seconds)

    def close(self) -> None:
        if self.close_scorer:
            self.scorer.close()

    def __enter__(self) -> "EventRunner":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


__all__ = ["DomainHost", "EventResult", "EventRunner", "LocalityUnproven", "Scorer", "SingleProcess", "open_scorer", "sigmoid", "whole_graph_logits"]

"""Partitioned inference: one event's edge logits computed over P parts with halo exchange, by one protocol.

A domain group of P processes scores events one at a time. Its *host* (part 0) partitions each event, sends every
member its own part in memory (``scatter_object_list``: no files, so members may sit on other nodes), computes
part 0 itself and gathers the logits of the edges each part owns (:func:`host_logits`); the members loop on the same
two collectives until the host sends ``None`` (:func:`serve`, :func:`host_stop`). Every part runs the training's
halo exchange and every global edge is owned by exactly one part, so the logits are one process's up to float
summation order.

A reconstruction's ranks *are* such groups; :class:`LocalGroup` starts P local processes that form one, driven from
the calling process through a queue (``evaluate``, the recipe's figures, the speed measurement, the bench).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from domainpar.comm.groups import Layout, domain_ranks, make_layout
from domainpar.data.event_graph import EventGraph
from domainpar.errors import DomainparError
from domainpar.inference.arithmetic import chain_threads
from domainpar.kernels.chunks import build_threads, using_threads
from domainpar.launch.inbox import Inbox
from domainpar.launch.ranks import SpawnError, spawn, spawn_failure
from domainpar.parallel.part import rank_part
from domainpar.partition import partition_graph
from domainpar.partition.part_data import cut_part

#: Wall-clock limit of a local group: it lives as long as its caller's run; a hung collective is caught by the
#: groups' own timeout.
GROUP_LIMIT_S = 30 * 86400.0


def _host_rank(layout: Layout) -> int:
    return domain_ranks(layout.replica, layout.domain_size)[0]


def _run_part(loaded: Any, data: Any, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """(owned global edge ids, their float64 logits) of this rank's part, with halo exchange over the domain group."""
    rp = rank_part(data, layout.part, layout.domain_group, "cpu", loaded.dtype)
    # Every part on the chain's fixed threads: the logits do not depend on a rank's thread count (arithmetic.py).
    # The streamed chunks of the GNN (domainpar.model.chunked) on the rank's own threads: they split no reduction.
    with torch.no_grad(), using_threads(build_threads()), chain_threads():
        logits = loaded.model(rp.graph, rp.exchange)
    edge_ids, values = rp.owned_edges(logits)
    return edge_ids.numpy().copy(), values.double().numpy().copy()


def host_logits(loaded: Any, layout: Layout, graph: EventGraph, method: str, seed: int) -> tuple[np.ndarray, dict]:
    """(E,) float64 logits of ``graph`` computed by the whole domain group, and the partition's figures.

    Called by the host (part 0) only, while every member is in :func:`serve`.

    Raises:
        DomainparError: the event cannot be cut into the group's parts (the members keep waiting for the next one).
    """
    started = time.perf_counter()
    try:
        plan = partition_graph(graph, layout.domain_size, method=method, seed=seed, option="--parts")
    except DomainparError as exc:
        raise DomainparError(f"event {graph.event_id}: {exc}") from None
    parts = [cut_part(graph, plan, p) for p in range(layout.domain_size)]
    partitioned = time.perf_counter()
    received: list[Any] = [None]
    dist.scatter_object_list(received, parts, src=_host_rank(layout), group=layout.domain_group)
    own = _run_part(loaded, received[0], layout)
    gathered: list[Any] = [None] * layout.domain_size
    dist.gather_object(own, gathered, dst=_host_rank(layout), group=layout.domain_group)
    logits = np.full(graph.num_edges, np.nan)
    seen = np.zeros(graph.num_edges, dtype=np.int64)
    for edge_ids, values in gathered:
        logits[edge_ids] = values
        seen[edge_ids] += 1
    if not (seen == 1).all():
        raise RuntimeError(
            f"event {graph.event_id}: partitioned inference must own every edge once "
            f"(got {int((seen == 0).sum())} unowned, {int((seen > 1).sum())} owned twice)"
        )
    record = {
        "num_cut_edges": plan.num_cut_edges,
        "num_halo_nodes": int(sum(p.num_halo for p in plan.parts)),
        "max_local_edges": int(max(p.num_local_edges for p in plan.parts)),
        "seconds_partition": partitioned - started,
    }
    return logits, record


def host_stop(layout: Layout) -> None:
    """Tell the members there is no more event (they return from :func:`serve`)."""
    received: list[Any] = [None]
    dist.scatter_object_list(received, [None] * layout.domain_size, src=_host_rank(layout), group=layout.domain_group)


def serve(loaded: Any, layout: Layout) -> None:
    """A member's loop (part > 0): compute its part of every event the host sends, until the host sends ``None``."""
    while True:
        received: list[Any] = [None]
        dist.scatter_object_list(received, None, src=_host_rank(layout), group=layout.domain_group)
        if received[0] is None:
            return
        own = _run_part(loaded, received[0], layout)
        dist.gather_object(own, None, dst=_host_rank(layout), group=layout.domain_group)


def _local_rank(rank: int, world: int, checkpoint: str, method: str, seed: int, timeout_s: float, jobs: Any, results: Any) -> None:
    """A rank of a :class:`LocalGroup`: the host takes events from ``jobs`` until None, the others serve it."""
    from domainpar.inference.model_io import load_model

    loaded = load_model(checkpoint)
    layout = make_layout(rank, world, world, timeout_s)
    if world == 1:
        # make_layout gives no group for one rank: the default one (of this one process) carries the protocol.
        layout = Layout(rank=0, world_size=1, domain_size=1, replica=0, part=0, domain_group=dist.group.WORLD)
    if rank:
        serve(loaded, layout)
        return
    while (graph := jobs.get()) is not None:
        try:
            results.put(("ok", host_logits(loaded, layout, graph, method, seed)))
        except DomainparError as exc:
            results.put(("error", str(exc)))
    host_stop(layout)


class LocalGroup:
    """P local processes forming one domain group, started on the first event and fed from this process.

    ``logits(graph)`` hands the event to the group's host rank and waits for its logits; a rank that fails, dies or
    hangs ends the wait with the group's one-line failure (:func:`~domainpar.launch.ranks.spawn_failure`).
    """

    def __init__(self, checkpoint: Path, num_parts: int, method: str, seed: int = 0, timeout_s: float = 1800.0,
                 threads: int | None = None) -> None:  # fmt: skip
        self.args = (str(checkpoint), method, seed, timeout_s)
        self.num_parts = num_parts
        self.threads = threads if threads is not None else max(1, (os.cpu_count() or 1) // num_parts)
        self.thread: threading.Thread | None = None
        self.failure: BaseException | None = None

    def _start(self) -> None:
        context = mp.get_context("spawn")
        self.jobs, self.results = context.Queue(), context.Queue()
        # Read by a thread: a host rank killed mid-message must not hold this process in a read for ever.
        self.inbox = Inbox(self.results, "domainpar-partitioned-results")

        def run() -> None:
            try:
                spawn(_local_rank, self.num_parts, (*self.args, self.jobs, self.results), timeout_s=GROUP_LIMIT_S,
                      backend="gloo", num_threads=self.threads)  # fmt: skip
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, who is waiting for logits
                self.failure = exc

        self.thread = threading.Thread(target=run, name="domainpar-partitioned-inference", daemon=True)
        self.thread.start()

    def logits(self, graph: EventGraph) -> tuple[np.ndarray, dict]:
        """(E,) float64 logits of ``graph`` over the group's parts, and the partition's figures."""
        if self.thread is None:
            self._start()
        self.jobs.put(graph)
        while True:
            try:
                status, value = self.inbox.get(timeout=0.2)
            except queue.Empty:
                if self.thread.is_alive():
                    continue
                raise self._ended() from None
            if status == "error":
                raise DomainparError(value)
            return value

    def _ended(self) -> BaseException:
        """What to raise for a group that ended while an event was in it."""
        exc = self.failure
        if not isinstance(exc, SpawnError):
            return exc if exc is not None else RuntimeError("partitioned inference: the group ended before its event was done")
        failure = spawn_failure(exc, "partitioned inference")
        if failure is exc:  # a bug on a rank: its last line (the rank printed nothing else)
            return DomainparError(f"partitioned inference failed on rank(s) {exc.ranks}: {exc.traceback_text.strip().splitlines()[-1]}")
        return failure

    def close(self) -> None:
        """Let the group finish (its ranks exit once the host has told the members)."""
        if self.thread is None:
            return
        thread, self.thread = self.thread, None
        if thread.is_alive():
            self.jobs.put(None)
            thread.join(60.0)
        self.inbox.close()
        for channel in (self.jobs, self.results):
            channel.cancel_join_thread()
            channel.close()


def require_partitionable(loaded: Any, graph: EventGraph, num_parts: int) -> Any:
    """Refuse, in one line, a loaded model that is not a built-in and not local: its outputs on a slice of
    ``graph`` split into parts must be one process's (:mod:`domainpar.verification.locality`), or partitioned
    inference would score edges otherwise than one process.

    Returns:
        The check's :class:`~domainpar.verification.locality.LocalityResult` (None for a built-in). A graph too
        small for a slice with halo rows passes without proving anything (``result.proven`` is False).

    Raises:
        DomainparError: naming the model and the output that differs.
    """
    from domainpar.model.registry import is_builtin
    from domainpar.verification.locality import check_parts, require_local

    if is_builtin(loaded.model_config.name):
        return None
    return require_local(loaded.model_config, graph, check_parts(num_parts), where=f"event {graph.event_id}", gradients=False,
                  consequence=f"--parts {num_parts} would score edges otherwise than one process",
                  skip="--skip-locality-check", state=loaded.model.state_dict())  # fmt: skip


__all__ = ["LocalGroup", "host_logits", "host_stop", "require_partitionable", "serve"]

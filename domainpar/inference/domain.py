"""Partitioned inference of a stream of events over one domain group that lives as long as the run.

``domainpar evaluate --parts P`` starts P processes for a list of events it
holds in memory (:func:`domainpar.inference.infer.infer_partitioned`). A
reconstruction streams events through a group started once: its *host*
(part 0) reads and builds each event, partitions it
(:func:`~domainpar.partition.partition_graph`), sends every member its own
part in memory (``scatter_object_list``, no files, so the members may sit on
other nodes), computes part 0 itself, and gathers the logits of the edges
each part owns (``gather_object``); the members (:func:`serve`) loop on the
same two collectives until the host sends ``None``. Every part runs the
same halo exchange as training, so the logits are exactly the one-process
ones up to float summation order.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from domainpar.comm.groups import Layout, domain_ranks
from domainpar.data.event_graph import EventGraph
from domainpar.errors import DomainparError
from domainpar.parallel.part import rank_part
from domainpar.partition import partition_graph
from domainpar.partition.part_data import cut_part


def _host_rank(layout: Layout) -> int:
    return domain_ranks(layout.replica, layout.domain_size)[0]


def _run_part(loaded: Any, data: Any, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """(owned global edge ids, their float64 logits) of this rank's part, with halo exchange over the domain group."""
    rp = rank_part(data, layout.part, layout.domain_group, "cpu", loaded.dtype)
    with torch.no_grad():
        logits = loaded.model(rp.graph, rp.exchange)
    edge_ids, values = rp.owned_edges(logits)
    return edge_ids.numpy().copy(), values.double().numpy().copy()


def host_logits(loaded: Any, layout: Layout, graph: EventGraph, method: str, seed: int) -> tuple[np.ndarray, dict]:
    """(E,) float64 logits of ``graph`` computed by the whole domain group, and the partition's figures.

    Called by the host (part 0) only, while every member is in :func:`serve`.
    """
    started = time.perf_counter()
    plan = partition_graph(graph, layout.domain_size, method=method, seed=seed, option="--parts")
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
        "seconds_partition": partitioned - started,
    }
    return logits, record


def host_stop(layout: Layout) -> None:
    """Tell the members there is no more event (they return from :func:`serve`)."""
    received: list[Any] = [None]
    dist.scatter_object_list(received, [None] * layout.domain_size, src=_host_rank(layout), group=layout.domain_group)


def serve(loaded: Any, layout: Layout) -> int:
    """A member's loop: compute its part of every event the host sends, until the host sends ``None``.

    Returns:
        How many events this member computed.
    """
    if layout.part == 0:
        raise DomainparError("serve() is for the members of a domain group; part 0 hosts")
    count = 0
    while True:
        received: list[Any] = [None]
        dist.scatter_object_list(received, None, src=_host_rank(layout), group=layout.domain_group)
        if received[0] is None:
            return count
        own = _run_part(loaded, received[0], layout)
        dist.gather_object(own, None, dst=_host_rank(layout), group=layout.domain_group)
        count += 1


__all__ = ["host_logits", "host_stop", "serve"]

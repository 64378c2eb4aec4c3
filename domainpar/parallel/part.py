"""The part a rank runs: from (whole graph or part file, part, group, device, dtype) to model inputs.

Every caller that runs the model on an event — training, inference, the
exactness check, benchmarks — goes through this module, so "graph + plan →
local graph → exchange" exists once. The whole event on one process is the
one-part plan through the same functions (:class:`IdentityExchange`, no
halo); a rank of a domain group gets its part and a :class:`HaloExchange`.

Three stages, so the slow ones can run ahead of the step that needs them (the
trainer's prefetcher runs the first two in a background thread):
:func:`load_host_part` (host memory, no collectives, thread-safe), :func:`stage`
(tensors on the device, the copy overlapping the running step on CUDA) and
:func:`attach` (the group check and the exchange: a collective for P > 1);
:func:`rank_part` chains the three.

Shapes: n_o owned nodes, n_h halo nodes, E_l local edges, E edges of the whole
event, F / F_e node / edge features, H hidden width. Layering: ``train``,
inference and verification import this package; it imports ``partition``,
``comm`` and the model's exchange protocol, never the reverse.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.distributed as dist

from domainpar.comm.halo import HaloExchange
from domainpar.data.event_graph import EventGraph
from domainpar.errors import DomainparError
from domainpar.model.exchange import IdentityExchange
from domainpar.partition.io import load_part
from domainpar.partition.local_graph import LocalGraph, local_graph_of
from domainpar.partition.part_data import PartData, cut_part, whole_graph_part
from domainpar.partition.plan import PartitionPlan

#: What :func:`load_host_part` accepts.
PartSource = EventGraph | PartData | str | os.PathLike


def load_host_part(
    source: PartSource,
    part: int = 0,
    *,
    plan: PartitionPlan | None = None,
    expect: dict[str, Any] | None = None,
) -> PartData:
    """A rank's part in host memory (numpy, read-only, validated); no collectives, safe in a background thread.

    Args:
        source: a whole :class:`EventGraph` (cut with ``plan``, or the whole event as one part when
            ``plan`` is None), a part file written by ``domainpar partition`` (only that file is read),
            or a :class:`PartData` (returned as is).
        part: the part to take, 0 .. P-1 (the rank's index in its domain group).
        plan: the plan to cut ``source`` with when it is a graph.
        expect: for a part file, what it must be (keywords of :func:`domainpar.partition.io.load_part`:
            ``num_parts``, ``event_id``, ``plan_hash``, ``num_nodes``, ``num_edges``); a mismatch is one
            line naming the file.

    Returns:
        The :class:`PartData` (x (n_o, F), edge_attr (E_l, F_e), y (E_l,), hit_id (n_o,), its plan).

    Raises:
        DomainparError: unreadable, damaged or mismatched part file; a plan of another graph; ``part`` out of range.
    """
    if isinstance(source, PartData):
        if source.plan.part != part:
            raise DomainparError(f"{source.source}: expected part {part} (got part {source.plan.part})")
        return source
    if isinstance(source, EventGraph):
        if plan is None:
            if part != 0:
                raise DomainparError(f"event {source.event_id}: the whole graph is part 0 of a one-part plan (got part {part})")
            return whole_graph_part(source)
        return cut_part(source, plan, part)

    return load_part(source, part=part, **(expect or {}))


@dataclass(eq=False)
class StagedPart:
    """A part's tensors on their device; on CUDA the copies may still be in flight (see :meth:`wait`)."""

    data: PartData
    """The host part the tensors were made from (kept alive until the copies are done)."""
    graph: LocalGraph
    """The local graph on the device, features in the compute dtype."""
    ready: Any = None
    """A ``torch.cuda.Event`` recorded after the copies on the staging stream, or None (nothing in flight)."""

    def wait(self) -> LocalGraph:
        """Make the current stream wait for the copies (no host block) and return the graph."""
        if self.ready is not None:
            stream = torch.cuda.current_stream(self.graph.x.device)
            stream.wait_event(self.ready)
            # The tensors were allocated on the staging stream; tell the allocator the compute stream uses them.
            for tensor in _tensors(self.graph):
                tensor.record_stream(stream)
            self.ready = None
        return self.graph


def _tensors(graph: LocalGraph) -> list[torch.Tensor]:
    return [t for t in (graph.x, graph.edge_index, graph.edge_attr, graph.edge_owned, graph.edge_ids, graph.y) if t is not None]


def stage(
    data: PartData,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
    *,
    stream: Any = None,
) -> StagedPart:
    """Put a host part on ``device`` in ``dtype`` (floating features only; labels stay float32).

    On CPU the tensors share the part's memory unless ``dtype`` converts them. On
    CUDA every array is copied into pinned host memory and sent with
    ``non_blocking=True`` on ``stream`` (a side stream when called from a
    prefetch thread), features converted on the device; :meth:`StagedPart.wait`
    orders the compute stream after the copies.

    Args:
        data: the host part.
        device: target device.
        dtype: compute dtype of x and edge_attr (None keeps float32).
        stream: CUDA stream to copy on (None: the current stream).

    Returns:
        The :class:`StagedPart`.
    """
    device = torch.device(device)
    host = local_graph_of(data)
    if device.type != "cuda":
        return StagedPart(data=data, graph=host.to(device, dtype))
    stream = stream if stream is not None else torch.cuda.current_stream(device)
    with torch.cuda.stream(stream):
        moved = {}
        for name in ("x", "edge_index", "edge_attr", "edge_owned", "edge_ids", "y"):
            tensor = getattr(host, name)
            if tensor is not None:
                tensor = tensor.pin_memory().to(device, non_blocking=True)
                if dtype is not None and name in ("x", "edge_attr"):
                    tensor = tensor.to(dtype)
            moved[name] = tensor
        graph = replace(host, **moved)
        ready = torch.cuda.Event()
        ready.record(stream)
    return StagedPart(data=data, graph=graph, ready=ready)


@dataclass(eq=False)
class RankPart:
    """The part a rank runs: its local graph on the device, its exchange, and where it came from."""

    data: PartData
    """Host part: plan (owned/halo ids, send lists, ownership), features, event and plan identity."""
    graph: LocalGraph
    """Model input on the device: x (n_o, F), edge_index (2, E_l), edge_attr (E_l, F_e), y (E_l,), edge_owned (E_l,)."""
    exchange: Any
    """:class:`~domainpar.model.exchange.IdentityExchange` for one part or a sectors plan,
    :class:`~domainpar.comm.halo.HaloExchange` otherwise: (n_o, H) → (n_o + n_h, H)."""

    def owned_edges(self, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The edges this part owns (each global edge is owned by exactly one part of the plan).

        Args:
            values: (E_l, ...) per-local-edge outputs (logits, scores).

        Returns:
            ``(edge_ids, values)``: (k,) int64 global edge ids and (k, ...) their values.
        """
        owned = self.graph.edge_owned.to(values.device)
        return self.graph.edge_ids.to(values.device)[owned], values[owned]

    def scatter_edges(self, values: torch.Tensor) -> torch.Tensor:
        """Put this part's per-edge outputs at their global edge ids (0 at the edges it does not own).

        Only owned edges are written, so summing the results of every part of a
        plan (e.g. an all-reduce) gives every edge of the event exactly once;
        with one part it is the whole event in global edge order. A sectors
        plan's dropped cut edges stay 0.

        Args:
            values: (E_l, ...) per-local-edge outputs.

        Returns:
            (E, ...) with E = the event's edge count.
        """
        ids, owned_values = self.owned_edges(values)
        out = torch.zeros((self.data.num_edges_graph, *values.shape[1:]), dtype=values.dtype, device=values.device)
        out[ids] = owned_values
        return out


def _group_device(group: Any) -> torch.device:
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _hash_words(plan_hash: str) -> tuple[int, int]:
    value = int(plan_hash, 16)
    return value >> 32, value & 0xFFFFFFFF


def check_group(data: PartData, group: Any = None) -> None:
    """Check, with one all-reduce of a (P, 5 + 2P) int64 table, that the ranks of ``group`` hold one plan.

    Rank p of the group must hold part p of a P-part plan (P = group size) of
    the same event with the same plan hash, and what each part sends to each
    neighbour must be what that neighbour expects. Collective: every rank of the
    group calls it for the same event, in the same order.

    Raises:
        DomainparError: one line naming this rank's part file, what it holds and what the group holds.
    """
    size = dist.get_world_size(group)
    me = dist.get_rank(group)
    plan = data.plan
    where = data.source or f"event {data.event_id} part {plan.part}"
    if plan.num_parts != size or plan.part != me:
        raise DomainparError(
            f"{where}: rank {me} of a domain group of {size} must hold part {me} of a {size}-part plan "
            f"(got part {plan.part} of a {plan.num_parts}-part plan)"
        )
    table = torch.zeros(size, 5 + 2 * size, dtype=torch.int64)
    high, low = _hash_words(data.plan_hash)
    table[me, :5] = torch.tensor([1, high, low, data.event_id, plan.num_parts])
    for i, q in enumerate(plan.send_parts):
        sl = plan.send_slice(i)
        table[me, 5 + int(q)] = sl.stop - sl.start
    for i, q in enumerate(plan.recv_parts):
        sl = plan.recv_slice(i)
        table[me, 5 + size + int(q)] = sl.stop - sl.start
    table = table.to(_group_device(group))
    dist.all_reduce(table, group=group)
    table = table.cpu()
    for q in range(size):
        row = table[q]
        if int(row[0]) != 1:
            raise DomainparError(f"{where}: part {q} of event {data.event_id} must be held by exactly one rank of the group (got {int(row[0])})")
        other_hash = f"{(int(row[1]) << 32) | int(row[2]):016x}"
        if (other_hash, int(row[3]), int(row[4])) != (data.plan_hash, data.event_id, plan.num_parts):
            raise DomainparError(
                f"{where}: holds part {me} of event {data.event_id}, plan {data.plan_hash} ({plan.num_parts} parts), but rank {q} "
                f"of its domain group holds event {int(row[3])}, plan {other_hash} ({int(row[4])} parts); "
                "all ranks of a group must read the parts of one plan (one `domainpar partition` run)"
            )
    sends, recvs = table[:, 5 : 5 + size], table[:, 5 + size :]
    mismatch = (sends != recvs.T).nonzero()
    if mismatch.numel():
        src, dst = (int(v) for v in mismatch[0])
        raise DomainparError(
            f"{where}: part {src} sends {int(sends[src, dst])} rows to part {dst}, which expects {int(recvs[dst, src])} "
            f"(plan {data.plan_hash}); a part file was modified"
        )


def attach(staged: StagedPart, group: Any = None, *, check: bool = True) -> RankPart:
    """The :class:`RankPart` of a staged part: wait for its copies and build its exchange.

    Call on the rank's main thread, in the same order on every rank of the group:
    with more than one part it is a collective (:func:`check_group`, then the
    exchange).

    Args:
        staged: from :func:`stage`.
        group: the domain group (None: the default group when P > 1); ignored for one part.
        check: run :func:`check_group` (one small all-reduce) before the first exchange.

    Returns:
        The :class:`RankPart`.
    """
    graph = staged.wait()
    data = staged.data
    if data.plan.num_parts == 1:
        return RankPart(data=data, graph=graph, exchange=IdentityExchange())
    if check:
        check_group(data, group)
    if data.drops_cut_edges:
        return RankPart(data=data, graph=graph, exchange=IdentityExchange())

    # Sizes were checked with the plan (check_group); no second handshake.
    exchange = HaloExchange(data.plan, group, graph.x.device, validate=not check)
    return RankPart(data=data, graph=graph, exchange=exchange)


def rank_part(
    source: PartSource,
    part: int = 0,
    group: Any = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
    *,
    plan: PartitionPlan | None = None,
    expect: dict[str, Any] | None = None,
    check: bool = True,
) -> RankPart:
    """The part a rank runs, in one call: :func:`load_host_part` → :func:`stage` → :func:`attach`.

    ``rank_part(graph)`` is the whole event on one process (one-part plan,
    identity exchange); ``rank_part(graph, p, group, plan=plan)`` cuts part p in
    memory; ``rank_part("plans/event000001000/part_00001.npz", 1, group)`` reads
    only that rank's file.

    Args:
        source: an :class:`EventGraph`, a part file path, or a :class:`PartData`.
        part: this rank's part (its index in ``group``).
        group: the domain group (None: the default group when P > 1).
        device: compute device.
        dtype: compute dtype of the features (None: float32).
        plan: the plan to cut a graph with (None: the whole graph as one part).
        expect: what a part file must be (see :func:`load_host_part`).
        check: check the group holds one plan (collective when P > 1).

    Returns:
        The :class:`RankPart`: ``model(rp.graph, rp.exchange)`` gives (E_l,) logits.
    """
    data = load_host_part(source, part, plan=plan, expect=expect)
    return attach(stage(data, device, dtype), group, check=check)


__all__ = ["PartSource", "RankPart", "StagedPart", "attach", "check_group", "load_host_part", "rank_part", "stage"]

"""One entry point from an event graph to a partition plan, whatever the method."""

from __future__ import annotations

import inspect
import time

from domainpar.data.event_graph import EventGraph
from domainpar.errors import DomainparError
from domainpar.partition.geometric import geometric_owners, require_positions
from domainpar.partition.metis import metis_owners
from domainpar.partition.owners import check_num_parts
from domainpar.partition.plan import PartitionPlan, build_plan

#: Methods :func:`partition_graph` accepts.
METHODS = ("metis", "geometric", "sectors")


def partition_graph(
    graph: EventGraph, num_parts: int, method: str = "metis", *, seed: int = 0, option: str = "num_parts",
    **method_options: object,
) -> PartitionPlan:
    """Partition ``graph`` into ``num_parts`` parts and build the halo plan.

    Methods:
        metis: METIS k-way on the undirected graph, nodes weighted 1 + degree
            (option: ``balance``; see :func:`domainpar.partition.metis.metis_owners`). Deterministic for a seed.
        geometric: φ × η sectors with halo exchange (options: ``num_phi``,
            ``num_eta``, ``coordinate``, ``boundaries``; see
            :func:`domainpar.partition.geometric.geometric_owners`).
        sectors: the geometric owners, but cut edges are dropped and there is no
            halo: independent subgraphs (the plan counts the true edges lost).

    With ``num_parts == 1`` every method gives the whole graph, no halo.

    Args:
        graph: the event graph.
        num_parts: P, 1 <= P <= number of nodes.
        method: one of :data:`METHODS`.
        seed: METIS seed (ignored by the geometric methods, which are deterministic).
        option: how messages name ``num_parts`` (the caller's command-line option, e.g. ``"--parts"``).
        **method_options: passed to the partitioner.

    Returns:
        The plan, with ``seconds_partition`` and ``seconds_plan`` filled in.
    """
    if method not in METHODS:
        raise DomainparError(f"method must be one of {', '.join(METHODS)} (got {method!r})")
    num_parts = check_num_parts(num_parts, graph.num_nodes, source=option)
    partitioner = metis_owners if method == "metis" else geometric_owners
    allowed = [
        name
        for name, parameter in inspect.signature(partitioner).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and name != "seed"
    ]
    unknown = sorted(set(method_options) - set(allowed))
    if unknown:
        raise DomainparError(
            f"options for method {method!r} must be among {', '.join(allowed)} (got {', '.join(unknown)})"
        )
    start = time.perf_counter()
    if method == "metis":
        owner = metis_owners(graph.edge_index, graph.num_nodes, num_parts, seed=seed, **method_options)
    else:
        if num_parts > 1:
            require_positions(graph.pos, method)
        owner = geometric_owners(graph.pos, graph.edge_index, num_parts, **method_options)
    seconds_partition = time.perf_counter() - start
    return build_plan(
        graph.edge_index,
        owner,
        num_parts,
        y=graph.y,
        method=method,
        graph_hash=graph.content_hash(),
        drop_cut_edges=(method == "sectors"),
        seconds_partition=seconds_partition,
    )

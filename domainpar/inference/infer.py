"""Edge logits of whole events: in one process, or split into parts on local processes with halo exchange.

Partitioned inference is exact: every global edge is *owned* by one part,
which computes it with complete halo inputs, so its logit equals the
single-process one up to float summation order.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import torch

from domainpar.data.event_graph import EventGraph
from domainpar.errors import DomainparError
from domainpar.inference.model_io import LoadedModel, load_model
from domainpar.launch.ranks import SpawnError, spawn, spawn_failure
from domainpar.parallel.part import rank_part
from domainpar.partition import partition_graph
from domainpar.partition.io import part_file_name, save_plan
from domainpar.verification.locality import check_parts, known_local, require_local


def infer_single(loaded: LoadedModel, graph: EventGraph) -> np.ndarray:
    """(E,) float64 logits of every edge of ``graph`` in one process (the one-part plan, identity exchange)."""
    rp = rank_part(graph, dtype=loaded.dtype)
    with torch.no_grad():
        logits = loaded.model(rp.graph, rp.exchange)
    return rp.scatter_edges(logits.double()).numpy()


def infer_exported(exported, graph: EventGraph) -> np.ndarray:
    """(E,) float64 logits of every edge of ``graph`` from an exported model file
    (:class:`~domainpar.export.runtime.ExportedModel`), run as the deployment side runs it."""
    return exported.logits(graph.x, graph.edge_index, graph.edge_attr)


def _partitioned_worker(rank: int, world_size: int, checkpoint: str, part_paths: list[list[str]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """One rank of partitioned inference: (owned global edge ids, their logits) per event, from its own part files."""
    loaded = load_model(checkpoint)
    results = []
    for paths in part_paths:
        # Only this rank's part file is read; the ranks check they hold the parts of one plan before exchanging.
        rp = rank_part(paths[rank], rank, None, "cpu", loaded.dtype, expect={"num_parts": world_size})
        with torch.no_grad():
            logits = loaded.model(rp.graph, rp.exchange)
        edge_ids, values = rp.owned_edges(logits)
        results.append((edge_ids.numpy().copy(), values.double().numpy().copy()))
    return results


def check_partitionable(checkpoint: Path, graph: EventGraph, num_parts: int) -> None:
    """:func:`require_partitionable` of a checkpoint's model."""
    require_partitionable(load_model(checkpoint), graph, num_parts)


def require_partitionable(loaded: LoadedModel, graph: EventGraph, num_parts: int) -> None:
    """Refuse, in one line, a loaded model that is not a built-in and not local: its outputs on a slice of
    ``graph`` split into parts must be one process's (:mod:`domainpar.verification.locality`), or partitioned
    inference would score edges otherwise than one process.

    Raises:
        DomainparError: naming the model and the output that differs.
    """
    if known_local(loaded.model_config.name):
        return
    require_local(loaded.model_config, graph, check_parts(num_parts), where=f"event {graph.event_id}", gradients=False,
                  consequence=f"--parts {num_parts} would score edges otherwise than one process",
                  skip="--skip-locality-check", state=loaded.model.state_dict())  # fmt: skip


def infer_partitioned(
    checkpoint: Path,
    graphs: list[EventGraph],
    num_parts: int,
    method: str,
    seed: int = 0,
    timeout_s: float = 1800.0,
    check_locality: bool = True,
) -> tuple[list[np.ndarray], list[dict]]:
    """Logits of every event, each event split into ``num_parts`` parts on as many spawned processes.

    The parent partitions every event once and writes its plan as part files
    (:func:`domainpar.partition.io.save_plan`) to a private temporary
    directory; rank p reads only its part file, computes part p with halo
    exchange and returns the logits of the edges it owns, which are scattered
    back to global edge ids here.

    With ``check_locality``, a model that is not a built-in first proves its locality on a slice of the first
    event (:func:`check_partitionable`).

    Returns:
        ``(logits, partition_records)``: (E,) float64 logits per event, and per
        event the partition's cut and halo sizes.
    """
    if check_locality and graphs:
        check_partitionable(checkpoint, graphs[0], num_parts)
    records = []
    with tempfile.TemporaryDirectory(prefix="domainpar-evaluate-") as tmp:
        part_paths = []
        for index, graph in enumerate(graphs):
            try:
                plan = partition_graph(graph, num_parts, method=method, seed=seed, option="--parts")
            except DomainparError as exc:
                raise DomainparError(f"event {graph.event_id}: {exc}") from None
            plan_dir = save_plan(plan, Path(tmp) / f"event{index}", graph)
            part_paths.append([str(plan_dir / part_file_name(p)) for p in range(num_parts)])
            records.append(
                {
                    "num_cut_edges": plan.num_cut_edges,
                    "num_halo_nodes": int(sum(p.num_halo for p in plan.parts)),
                    "max_local_edges": int(max(p.num_local_edges for p in plan.parts)),
                }
            )
        threads = max(1, (os.cpu_count() or 1) // num_parts)
        try:
            per_rank = spawn(
                _partitioned_worker,
                num_parts,
                (str(checkpoint), part_paths),
                timeout_s=timeout_s,
                backend="gloo",
                num_threads=threads,
            )
        except SpawnError as exc:
            failure = spawn_failure(exc, "partitioned inference")
            if failure is exc:  # a bug on a rank: its last line, as before (the rank printed nothing else)
                raise DomainparError(
                    f"partitioned inference failed on rank(s) {exc.ranks}: {exc.traceback_text.strip().splitlines()[-1]}"
                ) from exc
            raise failure from None
    all_logits = []
    for index, graph in enumerate(graphs):
        logits = np.full(graph.num_edges, np.nan)
        seen = np.zeros(graph.num_edges, dtype=np.int64)
        for rank_results in per_rank:
            edge_ids, values = rank_results[index]
            logits[edge_ids] = values
            seen[edge_ids] += 1
        if not (seen == 1).all():
            raise RuntimeError(
                f"event {graph.event_id}: partitioned inference must own every edge once "
                f"(got {int((seen == 0).sum())} unowned, {int((seen > 1).sum())} owned twice)"
            )
        all_logits.append(logits)
    return all_logits, records


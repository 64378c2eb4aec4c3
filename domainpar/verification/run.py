"""The ``domainpar verify`` entry points: one graph, local spawned ranks or a torchrun/srun job."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import torch
import torch.distributed as dist

from domainpar import __version__
from domainpar.comm.agreement import Setting, agree
from domainpar.data.event_graph import EventGraph
from domainpar.data.graph_files import load_graph
from domainpar.errors import DomainparError, FieldError
from domainpar.launch.env import LauncherEnv, detect
from domainpar.launch.ranks import SpawnError, init_from_env, spawn, spawn_failure
from domainpar.model.config import ModelConfig
from domainpar.model.registry import build_model, check_config, model_source
from domainpar.npzfile import archive_digest
from domainpar.partition.geometric import require_positions
from domainpar.partition.owners import check_num_parts
from domainpar.partition.partitioners import partition_graph
from domainpar.verification.cases import DTYPES as _DTYPES
from domainpar.verification.cases import VerifyCase, VerifyResult
from domainpar.verification.worker import verify_worker


def _owner_for(graph: EventGraph, num_parts: int, method: str, seed: int) -> np.ndarray:
    return partition_graph(graph, num_parts, method, seed=seed, option="--parts").owner


def check_before_start(graph_path: str, num_parts: int, method: str, dtype: str) -> EventGraph:
    """Everything a verification would otherwise find only once its ranks exist; returns the loaded graph.

    Raises:
        DomainparError: a graph without labels, more parts than nodes, geometric sectors of a graph without
            hit positions, or a method without a halo.
    """
    if method not in ("metis", "geometric"):
        raise DomainparError(f"--method must be metis or geometric (got {method!r}); a sectors plan has no halo to verify")
    if num_parts < 1:
        raise DomainparError(f"--parts must be at least 1 (got {num_parts})")
    if dtype not in _DTYPES:
        raise DomainparError(f"--dtype must be one of {', '.join(_DTYPES)} (got {dtype!r})")
    graph = load_graph(graph_path)
    if graph.y is None:
        raise DomainparError(f"{graph_path}: verify needs a graph with truth labels for the loss (got a graph without y)")
    check_num_parts(num_parts, graph.num_nodes, source="--parts")
    if method == "geometric" and num_parts > 1:
        require_positions(graph.pos, method, graph_path)
    return graph


def empty_halo_warning(result: VerifyResult) -> str | None:
    """One line when a partitioned check exchanged nothing (it then proves nothing about the exchange)."""
    if result.num_parts < 2 or any(result.num_halo):
        return None
    return (
        f"warning: the {result.num_parts} parts share no edge (0 halo rows: the partition cut nothing, as METIS does on "
        "small or disconnected graphs), so no halo was exchanged and this check did not test the exchange; "
        "use a larger graph (a full event) or --method geometric"
    )


def case_model(config: ModelConfig, graph: EventGraph) -> ModelConfig:
    """``config`` with the graph's feature widths and its model's options written out, refused before any rank starts
    when the model cannot be built for this graph.

    Raises:
        DomainparError: one line naming ``model.<key>``.
    """
    config = dataclasses.replace(config, node_features=int(graph.x.shape[1]), edge_features=int(graph.edge_attr.shape[1]))
    try:
        config = check_config(config)
    except FieldError as exc:
        raise DomainparError(f"model.{exc.field} {exc.message}") from None
    with torch.device("meta"):
        build_model(config)
    return config


def verify_graph_local(
    graph_path: str,
    num_parts: int,
    method: str,
    config: ModelConfig,
    *,
    dtype: str = "float64",
    seed: int = 0,
    timeout_s: float = 600.0,
    fault: str | None = None,
) -> tuple[VerifyResult, ModelConfig]:
    """Partition the graph at ``graph_path`` and verify on ``num_parts`` spawned local gloo processes.

    Returns:
        (the verdict, the model configuration checked: the graph's widths, every option written out).
    """
    graph = check_before_start(graph_path, num_parts, method, dtype)
    config = case_model(config, graph)
    owner = _owner_for(graph, num_parts, method, seed)
    case = VerifyCase(f"{method}/{num_parts}", graph, owner, config, dtype=dtype, seed=seed, fault=fault)
    num_threads = max(1, (os.cpu_count() or 1) // num_parts)
    try:
        per_rank = spawn(verify_worker, num_parts, args=([case],), timeout_s=timeout_s, backend="gloo", num_threads=num_threads)
    except SpawnError as exc:
        failure = spawn_failure(exc, "verify")
        if failure is exc:
            raise
        raise failure from None
    return per_rank[0][0], config


def verify_graph_distributed(
    graph_path: str,
    num_parts: int,
    method: str,
    config: ModelConfig,
    *,
    dtype: str = "float64",
    seed: int = 0,
    timeout_s: float = 600.0,
    fault: str | None = None,
    launcher: LauncherEnv | None = None,
) -> tuple[VerifyResult, int, str, ModelConfig]:
    """Verify inside a torchrun/srun job (one rank per part; NCCL on GPUs, gloo on CPU).

    Every rank checks the arguments and reads the graph before it joins the job, so a mistake ends the job at once;
    then the ranks compare their options with rank 0's (:func:`verify_settings`); then rank 0 partitions and
    broadcasts the owners, so every rank uses one plan.

    Returns:
        (result, this rank, backend, the model configuration checked).
    """
    launcher = detect() if launcher is None else launcher
    if launcher.world_size != num_parts:
        raise DomainparError(
            f"--parts {num_parts} must equal the number of launched ranks: this process is {launcher.describe()}"
        )
    graph = check_before_start(graph_path, num_parts, method, dtype)
    config = case_model(config, graph)
    env = init_from_env(timeout_s)
    # Before the first collective: every rank checks what rank 0 checks (a model of another width would abort
    # gloo in the owners' broadcast or the gradient sum), or every rank refuses in one line.
    agree(verify_settings(graph_path, num_parts, method, config, dtype, seed, fault), what="verify", advice=VERIFY_ADVICE,
          timeout_s=timeout_s)
    # Rank 0's owners go to everyone as a plain tensor, so every rank builds its part from one plan.
    owner = torch.zeros(graph.num_nodes, dtype=torch.int64, device=env.device)
    if env.rank == 0:
        owner.copy_(torch.from_numpy(_owner_for(graph, num_parts, method, seed)))
    dist.broadcast(owner, src=0)
    case = VerifyCase(f"{method}/{num_parts}", graph, owner.cpu().numpy(), config, dtype=dtype, seed=seed, fault=fault)
    result = verify_worker(env.rank, env.world_size, [case], env.device)[0]
    dist.barrier()
    dist.destroy_process_group()
    return result, env.rank, env.backend, config


#: What the line of ranks that disagree tells the user to do.
VERIFY_ADVICE = "give every rank the same options (only --timeout and --json, which rank 0 alone writes, may differ)"


def verify_settings(graph_path: str, num_parts: int, method: str, config: ModelConfig, dtype: str, seed: int,
                    fault: str | None) -> dict[str, Setting]:  # fmt: skip
    """What the ranks of a torchrun/srun ``verify`` must agree on: the graph by content, the partitioning, the
    precision, the seed and the whole model (with its source file, for a user's model)."""
    digest = archive_digest(graph_path)
    settings = {
        "--graph": Setting(digest, f"{graph_path} ({digest.partition(':')[2][:12]})"),
        "--parts": Setting(str(num_parts), str(num_parts)),
        "--method": Setting(method, method),
        "--dtype": Setting(dtype, dtype),
        "--seed": Setting(str(seed), str(seed)),
        "--fault": Setting(str(fault), str(fault)),
        "domainpar.version": Setting(__version__, __version__),
        "torch.version": Setting(torch.__version__, torch.__version__),
    }
    for key, value in config.to_dict().items():
        text = json.dumps(value, sort_keys=True)
        settings[f"model.{key}"] = Setting(text, text if not isinstance(value, str) else value)
    source = model_source(config.name)
    if source is not None:
        settings["model.source"] = Setting(source.digest, source.shown)
    return settings


def format_result_table(result: VerifyResult) -> str:
    """A Markdown table of the three error measures against the tolerance."""
    rows = [
        ("logits: max abs error (every copy of every edge)", result.max_abs_err_logits),
        ("loss: relative error of the sum over ranks", result.rel_err_loss),
        ("gradients: max relative error (worst: " + result.worst_parameter + ")", result.max_rel_err_grad),
    ]
    lines = [
        f"parts: {result.num_parts}   dtype: {result.dtype}   halo rows per rank: {list(result.num_halo)}",
        f"loss full graph: {result.loss_full:.10g}   sum over ranks: {result.loss_parts:.10g}",
        "",
        "| quantity | error | tolerance | status |",
        "|---|---|---|---|",
    ]
    for label, value in rows:
        status = "ok" if value <= result.tolerance else "MISMATCH"
        lines.append(f"| {label} | {value:.3e} | {result.tolerance:.0e} | {status} |")
    lines.append("")
    lines.append("PASSED: partitioned run equals one process" if result.passed else "FAILED: partitioned run differs from one process")
    return "\n".join(lines)

"""``domainpar verify``: check that a partitioned run gives one process's logits, loss and gradients."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from domainpar.atomic import atomic_path
from domainpar.cli.checks import METIS_SEED, max_local_ranks, timeout_seconds
from domainpar.cli.options import FieldOption
from domainpar.errors import DomainparError
from domainpar.launch.env import detect as detect_launcher
from domainpar.cli.inputs import inputs_of
from domainpar.output_paths import check_apart, check_output_file


@click.command("verify", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--graph", "graph_path", required=True, type=click.Path(path_type=Path),
              help="A labelled graph file (.npz from `domainpar build`).")
@click.option("--parts", "num_parts", required=True, type=int,
              help="Number of parts = processes (must equal the launched ranks under torchrun/srun).")
@click.option("--method", type=click.Choice(["metis", "geometric"]), default="metis", show_default=True,
              help="Partitioner of the halo plan.")
@click.option("--checkpointing", is_flag=True, help="Activation checkpointing in the partitioned run.")
@click.option("--overlap", is_flag=True, help="Overlap interior edges with the halo exchange in the partitioned run.")
@click.option("--dtype", type=click.Choice(["float64", "float32"]), default="float64", show_default=True,
              help="Precision of the comparison (tolerance 1e-10 for float64, 1e-5 for float32).")
@click.option("--model", "model_name", default="interaction_network", show_default=True,
              help="Model to check: interaction_network, interaction_gnn, pyg_gnn, or your class as package.module:Class "
                   "(or path/to/file.py:Class); see docs/models.md.")
@click.option("--model-option", "model_options", multiple=True, metavar="KEY=VALUE", show_default="none", cls=FieldOption,
              help="An option of the model (repeatable), e.g. --model-option aggregation=[sum,max].")
@click.option("--hidden", type=int, default=64, show_default=True, help="Model hidden size.")
@click.option("--iterations", type=int, default=8, show_default=True, help="Message-passing iterations.")
@click.option("--seed", type=METIS_SEED, default=0, show_default=True, help="Seed of the weights and of METIS.")
@click.option("--timeout", "timeout_s", type=timeout_seconds(), default=600.0, show_default=True,
              help="Seconds before a hung rank aborts the check.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None,
              help="Write num_parts, max_abs_err_logits, max_rel_err_grad, passed (and details) as JSON.")
@click.option("--fault", type=click.Choice(["zero_halo", "drop_halo_grad"]), default=None, hidden=True,
              help="Break the exchange on purpose, to see the check fail.")
def verify(
    graph_path: Path,
    num_parts: int,
    method: str,
    checkpointing: bool,
    overlap: bool,
    dtype: str,
    model_name: str,
    model_options: tuple[str, ...],
    hidden: int,
    iterations: int,
    seed: int,
    timeout_s: float,
    json_path: Path | None,
    fault: str | None,
) -> None:
    """Compare a partitioned run with one process on the same graph and weights.

    Started plainly (also in an sbatch script), it launches --parts local
    processes (gloo on CPU). Started by torchrun or as the tasks of an srun
    step, every rank joins the job's process group (NCCL on GPUs): run it on a
    new cluster to check the NCCL setup. It prints a table of the logit, loss
    and gradient errors and exits 1 if any exceeds the tolerance; a partition
    that cut no edge (nothing exchanged, so nothing tested) is said in a
    warning line.
    """
    # Imported when the command runs: --help stays fast (torch).
    from domainpar.launch.ranks import refused_before_join
    from domainpar.train.config import MAX_HIDDEN, MAX_ITERATIONS, check_model_size, load_config
    from domainpar.verification.run import empty_halo_warning, format_result_table, verify_graph_distributed, verify_graph_local

    launcher = detect_launcher()
    try:
        running_under_launcher = launcher.joins

        # Checked before the run: a report that cannot be written should not cost a full verification first.
        if json_path is not None:
            check_output_file(json_path, "--json")
            check_apart("--json", json_path, "file", inputs_of("--graph", graph_path))
        limits = (("--parts", num_parts, None), ("--hidden", hidden, MAX_HIDDEN),
                  ("--iterations", iterations, MAX_ITERATIONS))  # fmt: skip
        for option, value, most in limits:
            if value < 1:
                raise DomainparError(f"{option} must be at least 1 (got {value})")
            if most is not None and value > most:
                raise DomainparError(f"{option} must be at most {most} (got {value})")
        if not running_under_launcher and num_parts > max_local_ranks():
            raise DomainparError(
                f"--parts {num_parts} starts that many local processes: at most {max_local_ranks()} on this machine "
                "(4 per CPU core); run under torchrun or srun for more"
            )
        # The model's settings go through the training config's validation: the same one-line errors as `train`.
        overrides = {"model.name": model_name, "model.hidden": hidden, "model.num_iterations": iterations}
        if checkpointing:
            overrides["model.checkpointing"] = True
        if overlap:
            overrides["model.overlap"] = True
        if model_options:
            overrides["model.options"] = list(model_options)
        config = load_config(None, overrides).model
        # Each rank holds the weights, gradients and the reference's copies (float64): refuse a model that cannot fit.
        check_model_size(config, "fp64" if dtype == "float64" else "fp32", options="--hidden/--iterations")
        if running_under_launcher:
            result, rank, backend, result_model = verify_graph_distributed(
                str(graph_path), num_parts, method, config, dtype=dtype, seed=seed, timeout_s=timeout_s, fault=fault,
                launcher=launcher,
            )
        else:
            result, result_model = verify_graph_local(
                str(graph_path), num_parts, method, config, dtype=dtype, seed=seed, timeout_s=timeout_s, fault=fault
            )
            rank, backend = 0, "gloo"
        if rank == 0:
            click.echo(f"graph: {graph_path}   model: {config.name}   method: {method}   backend: {backend}   "
                       f"checkpointing: {checkpointing}   overlap: {overlap}")
            click.echo(format_result_table(result))
            warning = empty_halo_warning(result)
            if warning is not None:
                click.echo(warning, err=True)
            if json_path is not None:
                record = {**result.to_dict(), "graph": str(graph_path), "method": method, "backend": backend,
                          "model": result_model.to_dict()}
                with atomic_path(json_path) as tmp:
                    Path(tmp).write_text(json.dumps(record, indent=2) + "\n")
        if not result.passed:
            sys.exit(1)
    except DomainparError as exc:
        refused_before_join(exc, launcher)  # refused before the rendezvous: one line per node
        raise

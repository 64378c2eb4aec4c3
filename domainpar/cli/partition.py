"""``domainpar partition``: event graphs → halo partition plans, with a quality report."""

from __future__ import annotations

import json
from pathlib import Path

import click

from domainpar.atomic import staged_outputs
from domainpar.cli.checks import METIS_SEED
from domainpar.output_paths import check_output_dir, check_output_file
from domainpar.errors import DomainparError


def _require_distinct_events(files: list[Path], graph_dir: Path) -> None:
    """One plan directory per event: two graph files of the same event would overwrite each other's plan."""
    import numpy as np

    first_file: dict[int, Path] = {}
    for file in files:
        try:
            with np.load(file, allow_pickle=False) as npz:
                event_id = int(npz["event_id"])
        except Exception:  # noqa: BLE001 - load_graph reports an unreadable file precisely, in order
            continue
        if event_id in first_file:
            raise DomainparError(
                f"--graph {graph_dir}: expected one graph file per event (found event {event_id} in both "
                f"{first_file[event_id].name} and {file.name})"
            )
        first_file[event_id] = file


@click.command("partition", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--graph", "graph_path", required=True, type=click.Path(path_type=Path),
              help="A graph file (.npz from `domainpar build`) or a directory of them.")
@click.option("--parts", "num_parts", required=True, type=int, help="Number of parts (ranks of a domain group).")
@click.option("--method", type=click.Choice(["metis", "geometric", "sectors"]), default="metis", show_default=True,
              help="metis: graph partitioner with halo; geometric: phi x eta sectors with halo; "
                   "sectors: geometric sectors with cut edges dropped, no halo.")
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path),
              help="Plan directory (one graph) or parent directory of one plan directory per event.")
@click.option("--seed", type=METIS_SEED, default=0, show_default=True, help="METIS seed.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None,
              help="Write the quality report as JSON (a list of records with event_id for a directory).")
@click.option("--plot", "plot_path", type=click.Path(path_type=Path), default=None,
              help="Write a PNG of the partition (x-y, r-z, eta-phi); for a directory, one per event (<stem>_<event>.png).")
@click.option("--hidden", type=int, default=64, show_default=True, help="Hidden size for bytes_per_step.")
@click.option("--dtype", type=click.Choice(["float32", "float16", "bfloat16", "float64"]), default="float32",
              show_default=True, help="Dtype of exchanged rows for bytes_per_step.")
def partition(
    graph_path: Path,
    num_parts: int,
    method: str,
    out_dir: Path,
    seed: int,
    json_path: Path | None,
    plot_path: Path | None,
    hidden: int,
    dtype: str,
) -> None:
    """Partition event graphs into halo plans and report their quality.

    One graph file gives one plan directory at OUT; a directory of graphs gives
    OUT/event<id>/ per event. The table lists edge-cut and halo fractions,
    max/mean imbalance of local edges and nodes, forward halo megabytes per
    message-passing step (backward moves as much again), partition and plan
    seconds, and for sectors the true edges lost (or all edges lost, marked *,
    for graphs without labels).
    """
    from tqdm import tqdm

    from domainpar.data.event_graph import graph_files, inspect_graph, load_graph
    from domainpar.partition.io import MANIFEST_NAME, save_plan
    from domainpar.partition.partitioners import partition_graph
    from domainpar.partition.report import format_report_table, partition_report

    if num_parts < 1:
        raise DomainparError(f"--parts must be at least 1 (got {num_parts})")
    if hidden < 1:
        raise DomainparError(f"--hidden must be at least 1 (got {hidden})")
    check_output_dir(out_dir, "--out")
    if json_path is not None:
        check_output_file(json_path, "--json")
    if plot_path is not None:
        check_output_file(plot_path, "--plot", suffix=".png")
    files = graph_files(graph_path)
    single = graph_path.is_file()
    # Every file's structure first (headers only), so a damaged file late in the list fails before any work.
    for file in files:
        inspect_graph(file)
    if not single:
        _require_distinct_events(files, graph_path)
    if single and out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / MANIFEST_NAME).is_file():
        raise DomainparError(f"--out {out_dir}: expected a plan directory or a new path, found a non-empty directory without {MANIFEST_NAME}")
    records, rows = [], []
    # Plans, pictures and the report appear together when every event is done: a failed run leaves none.
    with staged_outputs() as outputs:
        staging = None if single else outputs.directory(out_dir)
        for file in tqdm(files, desc="partition", unit="event", disable=single):
            graph = load_graph(file)
            try:
                plan = partition_graph(graph, num_parts, method, seed=seed, option="--parts")
            except DomainparError as exc:
                raise DomainparError(f"{file}: {exc}") from None
            plan_dir = out_dir if single else out_dir / f"event{graph.event_id:09d}"
            save_plan(plan, outputs.replacement(out_dir) if single else staging / plan_dir.name, graph)
            report = partition_report(plan, hidden=hidden, dtype=dtype)
            record = report.to_dict()
            if not single:
                record = {"event_id": graph.event_id, **record}
            record["plan"] = str(plan_dir)
            records.append(record)
            rows.append((str(graph.event_id), report))
            if plot_path is not None:
                from domainpar.partition.plot import plot_partition

                target = plot_path if single else plot_path.with_name(f"{plot_path.stem}_{graph.event_id:09d}.png")
                plot_partition(graph, plan, outputs.file(target))
        if json_path is not None:
            outputs.file(json_path).write_text(json.dumps(records[0] if single else records, indent=1) + "\n")
    click.echo(format_report_table(rows))
    if json_path is not None:
        click.echo(f"report written to {json_path}")
    click.echo(f"plans written to {out_dir}")

"""``domainpar partition``: event graphs → halo partition plans, with a quality report."""

from __future__ import annotations

import json
from pathlib import Path

import click

from domainpar.atomic import atomic_path
from domainpar.cli.checks import METIS_SEED, local_ranks
from domainpar.errors import DomainparError, shorten
from domainpar.cli.inputs import inputs_of
from domainpar.output_paths import check_apart, check_name_length, check_output_dir, check_output_file, no_empty_directories_left


#: Widest hidden size the report's bytes per step is computed for (train's MAX_HIDDEN; torch is not imported here).
MAX_REPORT_HIDDEN = 65536


def _event_ids(files: list[Path], graph_dir: Path, check_distinct: bool) -> list[int]:
    """Event id of every graph file, checking each file's structure from its headers first (cheap), so a
    damaged file anywhere in the list fails before any work. One plan directory per event: two graph files
    of the same event would overwrite each other's plan."""
    from domainpar.data.graph_files import inspect_graph

    ids: list[int] = []
    first_file: dict[int, Path] = {}
    for file in files:
        event_id = inspect_graph(file).event_id
        if check_distinct and event_id in first_file:
            raise DomainparError(
                f"--graph {graph_dir}: expected one graph file per event (found event {event_id} in both "
                f"{first_file[event_id].name} and {file.name})"
            )
        first_file[event_id] = file
        ids.append(event_id)
    return ids


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
@click.option("--workers", type=local_ranks(), default=None,
              help="Events partitioned in parallel processes (default: the cores available to this process, or one process for graphs "
                   "that partition in seconds; at most 4 per core: "
                   "each holds an event).")
@click.option("--shard", default=None, metavar="I/N",
              help="Partition only every N-th graph starting at I (0-based): N jobs with I = 0..N-1 share a dataset.")
@click.option("--compress", is_flag=True,
              help="Deflate the part files: about half the disk, about twice the time to read a part.")
@click.option("--quiet", is_flag=True, help="No progress (bar on a terminal, periodic lines in a log).")
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
    workers: int | None,
    shard: str | None,
    compress: bool,
    quiet: bool,
) -> None:
    """Partition event graphs into halo plans and report their quality.

    One graph file gives one plan directory at OUT; a directory of graphs gives
    OUT/event<id>/ per event. The table lists edge-cut and halo fractions,
    max/mean imbalance of local edges and nodes, forward halo megabytes per
    message-passing step (backward moves as much again), partition and plan
    seconds, and for sectors the true edges lost (or all edges lost, marked *,
    for graphs without labels).

    Every part file is self-sufficient: a rank of a domain group reads only
    its own (O(E/P) bytes). Graphs are partitioned --workers at a time; a graph
    that fails is reported by name, the others are still partitioned, and the
    command ends with one line naming the failures (exit status 2). The output
    does not depend on --workers (same bytes).
    """
    # Imported when the command runs: --help stays fast (numpy).
    from domainpar.data.graph_files import graph_files
    from domainpar.partition.dataset import partition_files, partition_workers
    from domainpar.partition.io import MANIFEST_NAME, plan_dir_name
    from domainpar.partition.report import format_report_table
    from domainpar.workers import available_cores, failure_summary, parse_shard, shard_items

    if num_parts < 1:
        raise DomainparError(f"--parts must be at least 1 (got {num_parts})")
    if hidden < 1:
        raise DomainparError(f"--hidden must be at least 1 (got {hidden})")
    if hidden > MAX_REPORT_HIDDEN:
        raise DomainparError(f"--hidden must be at most {MAX_REPORT_HIDDEN} (the widest model train accepts) (got {shorten(hidden)})")
    shard_range = parse_shard(shard)
    check_output_dir(out_dir, "--out")
    if json_path is not None:
        check_output_file(json_path, "--json")
    if plot_path is not None:
        check_output_file(plot_path, "--plot", suffix=".png")
    all_files = graph_files(graph_path)
    single = graph_path.is_file()
    event_ids = _event_ids(all_files, graph_path, check_distinct=not single)
    if single and out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / MANIFEST_NAME).is_file():
        raise DomainparError(f"--out {out_dir}: expected a plan directory or a new path, found a non-empty directory without {MANIFEST_NAME}")
    chosen = shard_items(list(zip(all_files, event_ids)), shard_range)
    files = [f for f, _ in chosen]
    plan_dirs = [out_dir if single else out_dir / plan_dir_name(e) for _, e in chosen]
    plots = None
    if plot_path is not None:
        plots = [plot_path if single else plot_path.with_name(f"{plot_path.stem}_{e:09d}.png") for _, e in chosen]
    for plot in plots or []:
        if plot != plot_path:
            check_name_length(plot, "--plot", plot_path, "the picture of each event")
    inputs = inputs_of("--graph", graph_path)
    check_apart("--out", out_dir, "dir", inputs)
    for option, path in [("--json", json_path)] + [("--plot", plot) for plot in plots or []]:
        if path is not None:
            check_apart(option, path, "file", inputs)
    # Directories this run creates are removed again if nothing could be written in them (a full disk, an interrupt).
    created_for = [out_dir] + [None if path is None else path.parent for path in (json_path, plot_path)]
    with no_empty_directories_left(*created_for):
        results = partition_files(
            files, plan_dirs, num_parts, method, seed=seed, compress=compress, hidden=hidden, dtype=dtype,
            plot_paths=plots, workers=workers or partition_workers(files, available_cores()), progress=not (single or quiet),
        )
        summary = failure_summary(results, "graphs")
        if summary is not None and len(results) == 1:
            raise DomainparError(results[0].error)
    records, rows = [], []
    for result in results:
        if not result.ok:
            continue
        value = result.value
        record = value["report"].to_dict()
        if not single:
            record = {"event_id": value["event_id"], **record}
        record["plan"] = value["plan"]
        records.append(record)
        rows.append((str(value["event_id"]), value["report"]))
    if rows:
        click.echo(format_report_table(rows))
    uncut = [event for event, report in rows if num_parts > 1 and method != "sectors" and report.halo_fraction == 0]
    if uncut and summary is None:  # a failed command's last line is its error
        click.echo(
            f"warning: {len(uncut)} of {len(rows)} plan(s) cut no edge (event {uncut[0]}{', ...' if len(uncut) > 1 else ''}): "
            "their parts share no halo, so training or verifying on them exchanges nothing; small or disconnected graphs "
            "get a 0 % METIS cut (geometric sectors cut them)",
            err=True,
        )
    if json_path is not None:
        with atomic_path(json_path) as tmp:
            tmp.write_text(json.dumps(records[0] if single else records, indent=1) + "\n")
        click.echo(f"report written to {json_path}")
    where = "" if shard is None else f" (shard {shard_range[0]}/{shard_range[1]})"
    click.echo(f"plans written to {out_dir}{where}")
    if summary is not None:
        raise DomainparError(summary)

"""``domainpar reconstruct``: a trained tracker over a dataset of events without truth — submissions, tracks, a summary."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from domainpar.cli.checks import local_ranks
from domainpar.cli.pipeline_options import pipeline_fields, pipeline_options
from domainpar.errors import DomainparError
from domainpar.output_paths import check_output_dir


@click.command("reconstruct", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--data", required=True, type=click.Path(path_type=Path),
              help="Raw TrackML events (hits, and cells when the features need them; truth is never read), "
                   "or graph files (.npz, PyG) / a directory of them.")
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="Output directory: submissions/, tracks/, events/ (one record per event), reconstruct.json, summary.json.")
@pipeline_options
@click.option("--workers", type=local_ranks(), default=None,
              help="Replicas on this machine, each taking its share of the events (each of --parts processes). "
                   "Default: one per --parts cores for raw events worth it, within the memory (2 GB a replica); "
                   "1 for graph files.")
@click.option("--ranks", type=local_ranks(), default=None,
              help="Local processes in all: --workers x --parts (give one of --workers and --ranks).")
@click.option("--prefetch", type=click.IntRange(0, 8), default=None,
              help="Events a preparing process reads and builds ahead of the one being scored (0: one process does "
                   "all). Default: 1 with one replica, 0 with several.")
@click.option("--tracks-format", type=click.Choice(["csv", "parquet"]), default="csv", show_default=True,
              help="Format of the tracks files (parquet needs pyarrow).")
@click.option("--redo", is_flag=True,
              help="Redo every event, replacing the outputs in --out (also those of another pipeline, which are otherwise refused).")
@click.option("--threads", type=click.IntRange(1), default=None,
              help="torch threads per scoring process outside the event chain, whose arithmetic runs on one thread "
                   "so that the outputs are the same bytes on any machine (default: the cores left by the other "
                   "processes; --workers uses the cores).")
@click.option("--quiet", is_flag=True, help="No progress display (failures are still named).")
def reconstruct(
    data: Path, out: Path, workers: int | None, ranks: int | None, prefetch: int | None, tracks_format: str, redo: bool,
    threads: int | None, quiet: bool, **pipeline,
) -> None:  # fmt: skip
    """Reconstruct the tracks of every event in --data with a trained pipeline, without truth.

    The pipeline runs as trained and as `domainpar evaluate` runs it: the graph
    build, edge filter, threshold and track builder its checkpoint (or the
    exported model's sidecar) records. Per event it writes the TrackML
    submission (every hit once, ready for `domainpar score`), a tracks file
    (each candidate's hits in order, edge scores, helix fit) and a record of
    the model, pipeline and input files it was made from; summary.json holds
    the run's per-stage times.

    A malformed event is named and skipped; the exit status is 2 when events
    failed on their own input only (mend them and run again: the others are
    kept), 1 when any failed otherwise. A rerun on the same --out skips the events already done with this
    pipeline and these input files; --out holding another pipeline's outputs
    is refused unless --redo. Under torchrun or srun every rank takes its share.
    """
    # Imported when the command runs: --help stays fast (torch, numba).
    from domainpar.inference.reconstruct import reconstruct as run
    from domainpar.inference.spec import ReconstructConfig

    num_parts = pipeline["num_parts"] or 1
    if workers is not None and ranks is not None and ranks != workers * num_parts:
        raise DomainparError(f"--ranks {ranks}: expected --workers x --parts = {workers * num_parts} (give one of --workers and --ranks)")
    if ranks is not None and ranks % num_parts:
        raise DomainparError(f"--ranks {ranks}: expected a multiple of --parts {num_parts} (each replica has --parts processes)")
    replicas = workers if workers is not None else (ranks // num_parts if ranks is not None else None)
    config = ReconstructConfig(data=data, out=out, workers=replicas, prefetch=prefetch, tracks_format=tracks_format, redo=redo,
                               threads=threads, progress=not quiet, **pipeline_fields(pipeline, num_parts))  # fmt: skip
    check_output_dir(out, "--out")
    if Path(data).exists() and Path(out).resolve() == Path(data).resolve():
        raise DomainparError(f"--out {out}: expected a directory of its own, got the --data directory")
    result = run(config)
    summary = result.summary
    events = summary["events"]
    means = summary["stage_seconds_mean"]
    click.echo(
        f"{events['done']} event(s) reconstructed, {events['skipped']} already done, {events['failed']} failed, "
        f"in {summary['seconds_wall']:.1f} s; per event: "
        + ", ".join(f"{stage} {means[stage]:.2f} s" for stage in ("read", "build", "filter", "inference", "tracks", "write")
                    if means.get(stage) is not None)
    )  # fmt: skip
    if events["done"]:
        click.echo(f"wrote {Path(out)}/submissions, tracks, events, summary.json")
    else:  # every event failed or was done before: no submission was written by this run
        click.echo(f"wrote {Path(out)}/summary.json")
    failed = result.failed
    if failed:
        names = ", ".join(o.name for o in failed[:10]) + (f" and {len(failed) - 10} more" if len(failed) > 10 else "")
        click.echo(f"error: {len(failed)} of {events['total']} events failed: {names} ({failed[0].name}: {failed[0].error})", err=True)
        # 2: the input is the user's to mend (as for any refused input); 1: something else failed (a bug).
        sys.exit(2 if all(outcome.bad_input for outcome in failed) else 1)

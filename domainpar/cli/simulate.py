"""``domainpar simulate``: write simulated TrackML events on the real detector."""

from __future__ import annotations

from pathlib import Path

import click

from domainpar.atomic import staged_outputs
from domainpar.cli.checks import SEED, local_ranks
from domainpar.errors import DomainparError
from domainpar.output_paths import check_output_dir

#: Largest event number: the challenge's file names hold nine digits (event000021000).
MAX_EVENT_ID = 10**9 - 1
#: Most particles per event: 100 full pile-up events' worth (~30 GiB of memory while the event is simulated; less
#: is refused on a machine that cannot hold it, :func:`~domainpar.sim.dataset.simulation_workers`).
MAX_PARTICLES = 10**6


@click.command("simulate")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output directory for event*-{hits,cells,particles,truth}.csv.gz.")
@click.option("--events", "num_events", required=True, type=click.IntRange(1, MAX_EVENT_ID), help="Number of events to simulate.")
@click.option("--particles", "num_particles", type=click.IntRange(1, MAX_PARTICLES), default=None, help="Charged particles from the collisions per event (default 10000, full pile-up scale; the secondaries of their interactions in the material come on top).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Base random seed; event i uses the stream (seed, event id).")
@click.option("--first-event-id", type=click.IntRange(0, MAX_EVENT_ID), default=1, show_default=True, help="Event number of the first event.")
@click.option("--plain-csv", is_flag=True, help="Write .csv instead of .csv.gz.")
@click.option("--workers", type=local_ranks(), default=None, help="Events simulated in parallel processes (default: the cores available to this process, or one process for events that take seconds in all; the files do not depend on it).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def simulate(
    out_dir: str, num_events: int, num_particles: int | None, seed: int, first_event_id: int, plain_csv: bool,
    workers: int | None, quiet: bool,
) -> None:
    """Simulate TrackML-format events (helices in 2 T on the real TrackML detector).

    Each event gets hits, cells, particles and truth files in the challenge's
    layout, deterministic for (seed, event id). The events appear in --out
    together when all are written; a failed run leaves none. Memory does not
    grow with --events (each worker holds one event); --particles and
    --workers that this machine's memory cannot hold are refused.
    """
    # Imported when the command runs: --help stays fast (pandas, scipy).
    from domainpar.sim.config import SimulationConfig
    from domainpar.sim.dataset import simulate_events, simulation_seconds, simulation_workers

    last = first_event_id + num_events - 1
    if last > MAX_EVENT_ID:
        raise DomainparError(
            f"--first-event-id {first_event_id} with --events {num_events} must end at event {MAX_EVENT_ID} at most "
            f"(got {last}; TrackML file names hold nine digits)"
        )
    config = SimulationConfig() if num_particles is None else SimulationConfig(num_particles=num_particles)
    particles = f"--particles {num_particles}" if num_particles is not None else "the default --particles"
    workers = simulation_workers(config.event_peak_bytes(), particles, workers, num_events, seconds_each=simulation_seconds(config))
    check_output_dir(out_dir, "--out")
    with staged_outputs() as outputs:
        written = simulate_events(
            outputs.directory(out_dir), num_events, config, seed=seed, first_event_id=first_event_id,
            progress=not quiet, compress=not plain_csv, workers=workers,
        )  # fmt: skip
    for event_id in range(first_event_id, first_event_id + num_events):  # a range: nothing per event up front
        # An event written before in the other compression would now be ambiguous to readers.
        for part in ("hits", "cells", "particles", "truth"):
            stale = Path(out_dir) / (f"event{event_id:09d}-{part}.csv" if not plain_csv else f"event{event_id:09d}-{part}.csv.gz")
            stale.unlink(missing_ok=True)
    click.echo(f"wrote {written.count} events to {out_dir} ({written.first.name} .. {written.last.name})")

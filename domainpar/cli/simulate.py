"""``domainpar simulate``: write simulated TrackML events on the real detector."""

from __future__ import annotations

from pathlib import Path

import click

from domainpar.atomic import staged_outputs
from domainpar.cli.checks import SEED, count
from domainpar.errors import DomainparError
from domainpar.output_paths import check_output_dir
from domainpar.workers import available_cores

#: Largest event number: the challenge's file names hold nine digits (event000021000).
MAX_EVENT_ID = 10**9 - 1
#: Most particles per event: 100 full pile-up events' worth (~1 GB of hits in memory).
MAX_PARTICLES = 10**6


@click.command("simulate")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output directory for event*-{hits,cells,particles,truth}.csv.gz.")
@click.option("--events", "num_events", required=True, type=count(1, MAX_EVENT_ID), help="Number of events to simulate.")
@click.option("--particles", "num_particles", type=count(1, MAX_PARTICLES), default=None, help="Charged particles from the collisions per event (default 10000, full pile-up scale; the secondaries of their interactions in the material come on top).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Base random seed; event i uses the stream (seed, event id).")
@click.option("--first-event-id", type=count(0, MAX_EVENT_ID), default=1, show_default=True, help="Event number of the first event.")
@click.option("--plain-csv", is_flag=True, help="Write .csv instead of .csv.gz.")
@click.option("--workers", type=count(1, 4096), default=None, help="Events simulated in parallel processes (default: the cores available to this process; the files do not depend on it).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def simulate(
    out_dir: str, num_events: int, num_particles: int | None, seed: int, first_event_id: int, plain_csv: bool,
    workers: int | None, quiet: bool,
) -> None:
    """Simulate TrackML-format events (helices in 2 T on the real TrackML detector).

    Each event gets hits, cells, particles and truth files in the challenge's
    layout, deterministic for (seed, event id). The events appear in --out
    together when all are written; a failed run leaves none.
    """
    # Imported when the command runs: 'domainpar simulate --help' takes 0.2 s instead of 2 s (pandas, scipy).
    from domainpar.sim.config import SimulationConfig
    from domainpar.sim.dataset import simulate_dataset

    last = first_event_id + num_events - 1
    if last > MAX_EVENT_ID:
        raise DomainparError(
            f"--first-event-id {first_event_id} with --events {num_events} must end at event {MAX_EVENT_ID} at most "
            f"(got {last}; TrackML file names hold nine digits)"
        )
    check_output_dir(out_dir, "--out")
    config = SimulationConfig() if num_particles is None else SimulationConfig(num_particles=num_particles)
    with staged_outputs() as outputs:
        prefixes = simulate_dataset(
            outputs.directory(out_dir), num_events, config, seed=seed, first_event_id=first_event_id,
            progress=not quiet, compress=not plain_csv, workers=workers or available_cores(),
        )  # fmt: skip
    for prefix in prefixes:
        # An event written before in the other compression would now be ambiguous to readers.
        for part in ("hits", "cells", "particles", "truth"):
            stale = Path(out_dir) / (f"{prefix.name}-{part}.csv" if not plain_csv else f"{prefix.name}-{part}.csv.gz")
            stale.unlink(missing_ok=True)
    click.echo(f"wrote {len(prefixes)} events to {out_dir} ({prefixes[0].name} .. {prefixes[-1].name})")

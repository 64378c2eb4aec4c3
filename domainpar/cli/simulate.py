"""``domainpar simulate``: write simulated TrackML events on the real detector."""

from __future__ import annotations

import click

from domainpar.output_paths import check_output_dir
from domainpar.errors import DomainparError


@click.command("simulate")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output directory for event*-{hits,cells,particles,truth}.csv.gz.")
@click.option("--events", "num_events", required=True, type=int, help="Number of events to simulate.")
@click.option("--particles", "num_particles", type=int, default=None, help="Charged particles per event (default 10000, full pile-up scale).")
@click.option("--seed", type=int, default=0, show_default=True, help="Base random seed; event i uses the stream (seed, event id).")
@click.option("--first-event-id", type=int, default=1, show_default=True, help="Event number of the first event.")
@click.option("--plain-csv", is_flag=True, help="Write .csv instead of .csv.gz.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def simulate(out_dir: str, num_events: int, num_particles: int | None, seed: int, first_event_id: int, plain_csv: bool, quiet: bool) -> None:
    """Simulate TrackML-format events (helices in 2 T on the real TrackML detector).

    Each event gets hits, cells, particles and truth files in the challenge's
    layout, deterministic for (seed, event id).
    """
    from domainpar.data.simulate import SimulationConfig, simulate_dataset

    if num_events < 1:
        raise DomainparError(f"--events must be at least 1 (got {num_events})")
    if num_particles is not None and num_particles < 1:
        raise DomainparError(f"--particles must be at least 1 (got {num_particles})")
    if seed < 0:
        raise DomainparError(f"--seed must be non-negative (got {seed})")
    if first_event_id < 0:
        raise DomainparError(f"--first-event-id must be non-negative (got {first_event_id})")
    check_output_dir(out_dir, "--out")
    config = SimulationConfig() if num_particles is None else SimulationConfig(num_particles=num_particles)
    prefixes = simulate_dataset(
        out_dir, num_events, config, seed=seed, first_event_id=first_event_id, progress=not quiet, compress=not plain_csv
    )
    click.echo(f"wrote {len(prefixes)} events to {out_dir} ({prefixes[0].name} .. {prefixes[-1].name})")

"""``domainpar demo``: the physics recipe scaled down (:mod:`domainpar.pipeline.demo`), options from its config."""

from __future__ import annotations

import click

from domainpar.cli.inputs import all_inputs
from domainpar.cli.options import dataclass_options
from domainpar.output_paths import check_apart
from domainpar.pipeline.demo import DemoConfig, run_demo


@click.command("demo", context_settings={"help_option_names": ["-h", "--help"]})
@dataclass_options(DemoConfig, use_defaults=True)
def demo(**options) -> None:
    """Run the physics recipe (or --recipe) scaled down, through the recipe's own
    runner: simulate, build, edge filter, train domain-parallel on --ranks local
    processes, evaluate (edges, tracks, TrackML score) on held-out simulated
    events and on the real labelled event."""
    config = DemoConfig(**options)
    # The run's directory must not be (or directly hold) the real events or the recipe it reads.
    check_apart("--out", config.out, "dir", all_inputs(("--real", config.real), ("--recipe", config.recipe)))
    run_demo(config, echo=click.echo)

"""``domainpar train``: YAML config plus a flag for every field of :class:`~domainpar.train.config.TrainConfig`.

The flags are generated from the config dataclasses (:mod:`domainpar.cli.options`): a field's docstring is
its help, :func:`~domainpar.train.config.flag_name` its flag.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import click

from domainpar.cli.options import dataclass_options, given_fields
from domainpar.train.config import DERIVED_FIELDS, SECTION_TYPES, flag_name


def _fmt(value) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def _section_options(function):
    for section, cls in reversed(list(SECTION_TYPES.items())):
        exclude = [dotted.partition(".")[2] for dotted in DERIVED_FIELDS if dotted.startswith(section + ".")]
        function = dataclass_options(cls, section=section, flag_name=flag_name, exclude=exclude)(function)
    return function


@click.command("train", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="YAML config (see examples/train_default.yaml); flags override it.")
@_section_options
def train(config_path: Path | None, **options) -> None:
    """Train the edge classifier in domain, sectors or single mode.

    \b
    Examples:
      domainpar train --data graphs/ --mode domain --ranks 2 --epochs 5 --out runs/d2
      domainpar train --config examples/train_default.yaml --lr 3e-4
      torchrun --nproc-per-node 4 -m domainpar train --config run.yaml --domain-size 2
      srun -n 8 domainpar train --config run.yaml --domain-size 4
    """
    from domainpar.train import launch
    from domainpar.train.config import load_config
    from domainpar.train.lifeline import Terminated, terminate_on_signals
    from domainpar.train.run import train as run_training

    launched_rank = launch.running_under_launcher()
    # SIGTERM/SIGHUP unwind this process: a launcher stops the ranks it spawned and releases the --out lock;
    # a rank of a torchrun/srun job names the failure that made its launcher stop it.
    terminate_on_signals()
    try:
        config = load_config(config_path, given_fields(options))
        summary = run_training(config)
    except launch.SpawnError as exc:
        # A rank's own bug keeps its traceback; a death or a peer's failure is one line.
        if exc.traceback_text:
            click.echo(exc.traceback_text.rstrip("\n"), err=True)
        click.echo(f"error: {exc.line}", err=True)
        sys.exit(1)
    except Terminated as exc:
        if launched_rank:
            launch.fail_rank(exc)
        click.echo(f"error: domainpar train {exc}; its ranks were stopped", err=True)
        sys.exit(exc.exit_code)
    except BaseException as exc:
        if launched_rank:
            launch.fail_rank(exc)  # names the job's first failure once and exits (in a job of two or more)
        raise
    if summary.get("rank", 0) != 0:
        return
    if summary.get("paused"):
        click.echo(
            f"paused after step {summary['steps']} of {summary['total_steps']} (--stop-after-steps): checkpoint "
            f"{summary['checkpoint']}; continue with --resume (the learning-rate schedule is the whole run's)"
        )
        return
    final = summary.get("final") or {}
    click.echo(
        f"trained {summary['steps']} steps ({summary['epochs']} epochs) in {summary['mode']} mode on "
        f"{summary['world_size']} rank(s), domain size {summary['domain_size']}, {summary['num_replicas']} replica(s)"
    )
    keys = ("epoch", "train_loss", "val_loss", "efficiency", "purity", "auc", "seconds", "peak_memory_bytes", "halo_bytes")
    if final:
        width = max(len(k) for k in keys)
        for key in keys:
            click.echo(f"  {key:<{width}}  {_fmt(final.get(key))}")
    click.echo(f"model: {summary['model']}")
    click.echo(f"checkpoint: {summary['checkpoint']}")
    click.echo(f"metrics: {Path(summary['out']) / 'metrics.jsonl'}")

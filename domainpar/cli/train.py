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
from domainpar.errors import DomainparError, interrupt_of
from domainpar.launch import ranks
from domainpar.launch.env import detect as detect_launcher
from domainpar.launch.env import planned_job
from domainpar.launch.lifeline import Terminated, terminate_on_signals
from domainpar.cli.inputs import all_inputs
from domainpar.output_paths import check_apart, check_output_dir
from domainpar.train.config import DERIVED_FIELDS, SECTION_TYPES, SettingError, domain_size_of, flag_name, load_config
from domainpar.train.sections import FIELD_CHOICES, section_domains
from domainpar.train.preflight import check_run


def _fmt(value) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def _section_options(function):
    for section, cls in reversed(list(SECTION_TYPES.items())):
        exclude = [dotted.partition(".")[2] for dotted in DERIVED_FIELDS if dotted.startswith(section + ".")]
        choices = {dotted.partition(".")[2]: values for dotted, values in FIELD_CHOICES.items() if dotted.startswith(section + ".")}
        function = dataclass_options(cls, section=section, flag_name=flag_name, exclude=exclude, choices=choices,
                                     domains=section_domains(section))(function)
    return function


def _steps_text(summary: dict) -> str:
    """What this run trained: ``12 steps (3 epochs)``, or after a resume ``8 steps (steps 5-12, resumed at step 4; 3 epochs)``."""
    done, position = summary.get("steps_this_run", summary["steps"]), summary["steps"]
    plural = "" if done == 1 else "s"
    if done == position:
        return f"{done} step{plural} ({summary['epochs']} epochs)"
    start = position - done
    where = f"steps {start + 1}-{position}" if done else f"nothing left after step {position}"
    return f"{done} step{plural} ({where}, resumed at step {start}; {summary['epochs']} epochs in all)"


def _dry_run(config) -> None:
    """Run every pre-start check for a job of ``--ranks`` ranks started by a launcher, print the layout, exit."""
    world = 1 if config.parallel.mode == "single" else config.parallel.ranks
    planned = planned_job(world)
    resolved = check_run(config, world, planned)
    check_output_dir(resolved.run.out, "--out")
    group = domain_size_of(resolved, world)
    resumes = "resumes from its checkpoints" if (resolved.run.resume or resolved.run.resume_from) else "starts fresh"
    click.echo(
        f"ok: {resolved.parallel.mode} mode, {world} rank(s) = {world // group} replica(s) x domain size {group}, "
        f"{resolved.optim.batch_events} event(s) per step, device {resolved.parallel.device}, out {resolved.run.out} "
        f"({resumes})"
    )


def _check_out_apart(config) -> None:
    """``--out`` must not be, or directly hold, the run's data (the resumed checkpoint and a config file inside it
    are the run's own: deliberate, see docs/cli.md)."""
    inputs = all_inputs(("--data", config.data.train), ("--val", config.data.val), ("--plans", config.data.plans))
    check_apart("--out", config.run.out, "dir", inputs)


def _as_the_user_set_it(exc: BaseException, config_path: Path | None, given: dict) -> BaseException:
    """A refused setting named as the user set it: its flag when given on the command line (or left at its
    default), else the config file's key (``run.yaml: optim.warmup must be …``)."""
    if not isinstance(exc, SettingError) or config_path is None or exc.dotted in given:
        return exc
    return DomainparError(f"{config_path}: {exc.dotted} {exc.message}")


def _end_of_failed_run(exc: BaseException, launcher) -> None:
    """How a run that did not finish ends: an interrupt as the stop (whatever it made of the run on its way out: a
    rank's error, a refused collective), a rank's failure as its line, anything else raised for the command's line."""
    launched_rank = launcher.joins
    stop = interrupt_of(exc)
    if isinstance(stop, Terminated):
        if launched_rank:
            ranks.fail_rank(stop)
        click.echo(f"error: domainpar train {stop}; its ranks were stopped", err=True)
        sys.exit(stop.exit_code)
    if stop is None and isinstance(exc, ranks.SpawnError):
        # A rank's own bug keeps its traceback; a death or a peer's failure is one line.
        if exc.traceback_text:
            click.echo(exc.traceback_text.rstrip("\n"), err=True)
        click.echo(f"error: {exc.line}", err=True)
        sys.exit(1)
    if stop is None and isinstance(exc, DomainparError):
        ranks.refused_before_join(exc, launcher)  # refused before the rendezvous: one line per node
    if launched_rank:
        ranks.fail_rank(stop or exc)  # names the job's first failure once and exits (in a job of two or more)
    if stop is not None:
        raise stop from None  # Ctrl-C: the command's one line (domainpar.cli.main)
    raise exc


@click.command("train", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="YAML config (see examples/train_default.yaml); flags override it.")
@click.option("--quiet", is_flag=True, help="No progress (the same as --no-progress).")
@click.option("--dry-run", is_flag=True,
              help="Check the run as a job of --ranks ranks would start it (config, data, plans, world-size settings, --out) "
                   "and print its layout; start nothing (the Slurm scripts run this before srun).")
@_section_options
def train(config_path: Path | None, quiet: bool, dry_run: bool, **options) -> None:
    """Train the edge classifier in domain, sectors or single mode.

    \b
    Examples:
      domainpar train --data graphs/ --mode domain --ranks 2 --epochs 5 --out runs/d2
      domainpar train --config examples/train_default.yaml --lr 3e-4
      torchrun --nproc-per-node 4 -m domainpar train --config run.yaml --domain-size 2
      srun -n 8 domainpar train --config run.yaml --domain-size 4
      domainpar train --config run.yaml --ranks 16 --domain-size 4 --dry-run
    """
    # Imported when the command runs: the training stack (pandas, the kernels) is not needed for --help.
    from domainpar.train.run import train as run_training

    given = given_fields(options)
    if dry_run:
        config = load_config(config_path, given)
        _check_out_apart(config)
        try:
            _dry_run(config)
        except SettingError as exc:
            raise _as_the_user_set_it(exc, config_path, given) from None
        return
    launcher = detect_launcher()
    launched_rank = launcher.joins
    if quiet:
        given["run.progress"] = False
    # SIGTERM/SIGHUP unwind this process: a launcher stops the ranks it spawned and releases the --out lock;
    # a rank of a torchrun/srun job names the failure that made its launcher stop it.
    terminate_on_signals()
    try:
        asked = given.get("parallel.ranks")
        if launched_rank and asked is not None and int(asked) != launcher.world_size:
            raise DomainparError(
                f"--ranks {asked}: this process is {launcher.describe()}, and the launcher sets the world size; drop "
                f"--ranks, or run domainpar outside torchrun/srun (e.g. in the batch script itself) to spawn {asked} local ranks"
            )
        config = load_config(config_path, given)
        _check_out_apart(config)
        summary = run_training(config, launcher)
    except BaseException as exc:  # noqa: BLE001 - every way out is named once (below)
        _end_of_failed_run(_as_the_user_set_it(exc, config_path, given), launcher)
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
        f"trained {_steps_text(summary)} in {summary['mode']} mode on "
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

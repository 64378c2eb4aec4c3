"""The ``domainpar`` command: a thin click layer over the library.

Each subcommand lives in its own module (``domainpar/cli/<name>.py``) and is
imported only when it runs, so ``domainpar --help`` stays fast and a command's
heavy imports (torch, numba) do not slow the others.
"""

from __future__ import annotations

import importlib
import sys

import click

from domainpar import __version__
from domainpar.errors import DomainparError

#: command name -> (module, attribute, one-line help shown by ``domainpar --help``)
COMMANDS = {
    "simulate": ("domainpar.cli.simulate", "simulate", "Simulate TrackML-format events on the real detector."),
    "build": ("domainpar.cli.build", "build", "Build hit graphs from TrackML events."),
    "partition": ("domainpar.cli.partition", "partition", "Partition event graphs into halo plans."),
    "verify": ("domainpar.cli.verify", "verify", "Check partitioned gradients against one process."),
    "train": ("domainpar.cli.train", "train", "Train an edge classifier (single, domain or sectors mode)."),
    "evaluate": ("domainpar.cli.evaluate", "evaluate", "Evaluate a checkpoint: edges, tracks, TrackML score."),
    "score": ("domainpar.cli.score", "score", "Score a TrackML submission against an event's truth."),
    "demo": ("domainpar.cli.demo", "demo", "Run the embedded default pipeline end to end."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if self._available(name)]

    @staticmethod
    def _available(name: str) -> bool:
        return importlib.util.find_spec(COMMANDS[name][0]) is not None

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS or not self._available(name):
            return None
        module, attr, _ = COMMANDS[name]
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="domainpar")
def cli() -> None:
    """domainpar: domain-parallel GNN training for particle tracking."""


def main(argv: list[str] | None = None) -> None:
    """Entry point: user mistakes become one line on stderr and exit code 2."""
    try:
        cli.main(args=argv, prog_name="domainpar", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except DomainparError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except OSError as exc:
        # The environment, not the code: disk full, permissions changed mid-run, a vanished mount.
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()

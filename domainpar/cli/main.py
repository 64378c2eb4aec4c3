"""The ``domainpar`` command: a thin click layer over the library.

Each subcommand lives in its own module (``domainpar/cli/<name>.py``) and is
imported only when it runs, so ``domainpar --help`` stays fast and a command's
heavy imports (torch, numba) do not slow the others.
"""

from __future__ import annotations

import errno
import importlib
import os
import sys

import click

from domainpar import __version__
from domainpar.errors import DomainparError, message_line

#: command name -> (module, attribute, one-line help shown by ``domainpar --help``)
COMMANDS = {
    "simulate": ("domainpar.cli.simulate", "simulate", "Simulate TrackML-format events on the real detector."),
    "build": ("domainpar.cli.build", "build", "Build hit graphs from TrackML events."),
    "partition": ("domainpar.cli.partition", "partition", "Partition event graphs into halo plans."),
    "verify": ("domainpar.cli.verify", "verify", "Check partitioned gradients against one process."),
    "train": ("domainpar.cli.train", "train", "Train an edge classifier (single, domain or sectors mode)."),
    "evaluate": ("domainpar.cli.evaluate", "evaluate", "Evaluate a checkpoint: edges, tracks, TrackML score."),
    "export": ("domainpar.cli.export", "export", "Export a trained edge classifier as TorchScript or ONNX for ACTS."),
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


def _command_path(exc: click.ClickException, argv: list[str]) -> str:
    """``domainpar <command>`` of a click error (the context is missing for some parse errors)."""
    ctx = getattr(exc, "ctx", None)
    if ctx is not None and ctx.command_path:
        return ctx.command_path
    command = next((a for a in argv if not a.startswith("-")), None)
    return f"domainpar {command}" if command in COMMANDS else "domainpar"


def _usage_line(exc: click.ClickException, argv: list[str]) -> str:
    """A click usage error as one line naming the command and the option (click prints four)."""
    path = _command_path(exc, argv)
    message = exc.format_message().rstrip(".")
    return f"{path}: {message} (see '{path} --help')"


#: errno values that mean "the path you gave cannot be used" (a user mistake), not "the machine failed".
_USER_ERRNOS = {errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EROFS, errno.ENAMETOOLONG,
                errno.ELOOP, errno.EEXIST, errno.ENOTEMPTY, errno.EXDEV}  # fmt: skip


def _os_error_line(exc: OSError) -> str:
    reason = exc.strerror or type(exc).__name__
    name = exc.filename if exc.filename is not None else None
    if name is None:
        return reason
    return f"{os.fsdecode(name)}: {reason[:1].lower() + reason[1:]}"


_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _fail(line: str, code: int) -> None:
    click.echo(f"error: {message_line(line)}", err=True)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """Entry point: user mistakes become one line on stderr and exit status 2.

    Exit status: 0 success, 1 a failure of the machine (disk full, out of
    memory, I/O error) or a failed check (``verify``), 2 a user mistake (bad
    option, bad input file, unusable output path), 130 interrupted.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        cli.main(args=argv, prog_name="domainpar", standalone_mode=False)
    except click.exceptions.Abort:
        _fail("aborted", 130)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except _NO_ARGS_IS_HELP as exc:
        # `domainpar` alone asks for help (click >= 8.2 raises this where 8.1 printed the help and exited 0).
        click.echo(exc.ctx.get_help() if exc.ctx is not None else "Try 'domainpar --help'.")
        sys.exit(0)
    except click.ClickException as exc:
        # Usage errors and bad option values: always the user's (click gives them exit code 2).
        _fail(_usage_line(exc, argv), 2)
    except DomainparError as exc:
        _fail(str(exc), 2)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except MemoryError:
        _fail("out of memory; use smaller inputs or options (fewer particles, smaller --hidden, more --parts)", 1)
    except OSError as exc:
        # A path the user gave that cannot be used is their mistake; disk full or an I/O error is the machine's.
        _fail(_os_error_line(exc), 2 if exc.errno in _USER_ERRNOS else 1)


if __name__ == "__main__":
    main()

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
from domainpar.caches import hold_notice, settle
from domainpar.errors import MEMORY_ADVICE, DomainparError, MachineFault, Terminated, clear_stop, fault_line, interrupt_of, message_line
from domainpar.heap import keep_freed_memory
from domainpar.signals import stops_unwind

#: command name -> (module, attribute, one-line help shown by ``domainpar --help``)
COMMANDS = {
    "simulate": ("domainpar.cli.simulate", "simulate", "Simulate TrackML-format events on the real detector."),
    "build": ("domainpar.cli.build", "build", "Build hit graphs from TrackML events."),
    "partition": ("domainpar.cli.partition", "partition", "Partition event graphs into halo plans."),
    "verify": ("domainpar.cli.verify", "verify", "Check partitioned gradients against one process."),
    "train": ("domainpar.cli.train", "train", "Train an edge classifier (single, domain or sectors mode)."),
    "evaluate": ("domainpar.cli.evaluate", "evaluate", "Evaluate a checkpoint: edges, tracks, TrackML score."),
    "reconstruct": ("domainpar.cli.reconstruct", "reconstruct", "Reconstruct tracks of events without truth: submissions, tracks."),
    "export": ("domainpar.cli.export", "export", "Export a trained edge classifier as TorchScript or ONNX for ACTS."),
    "score": ("domainpar.cli.score", "score", "Score a TrackML submission against an event's truth."),
    "demo": ("domainpar.cli.demo", "demo", "Run the embedded default pipeline end to end."),
}

#: Commands that run an event's chain, event after event: their processes, and the workers they start, keep freed
#: blocks for the next event (:mod:`domainpar.heap`). Training keeps glibc's defaults: its steps' peak-memory
#: figures are resident-set high-water marks, which memory kept for reuse would raise.
KEEPS_FREED_MEMORY = frozenset({"simulate", "build", "evaluate", "reconstruct", "score"})


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        return _settling(getattr(importlib.import_module(module), attr))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, help_text) for name, (_, _, help_text) in COMMANDS.items()])


def _settling(command: click.Command) -> click.Command:
    """``command``, made to settle the cache directories (:mod:`domainpar.caches`) once its options are parsed.

    Before the command starts any worker or rank: they inherit directories they can write (a read-only installation
    falls back to temporary ones, said once here rather than once per process), and ``--help`` or a usage error
    stays silent about it.
    """
    if getattr(command, "_settles_caches", False):
        return command
    run = command.invoke

    def invoke(ctx: click.Context) -> object:
        hold_notice(False)
        settle()
        return run(ctx)

    command.invoke = invoke
    command._settles_caches = True
    return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="domainpar")
def cli() -> None:
    """domainpar: domain-parallel GNN training for particle tracking."""


def _command_path(exc: click.ClickException, argv: list[str]) -> str:
    """``domainpar <command>`` of a click error (the context is missing for some parse errors)."""
    ctx = getattr(exc, "ctx", None)
    if ctx is not None and ctx.command_path:
        return ctx.command_path
    command = _command(argv)
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
    if exc.filename is None:
        return reason
    return f"{os.fsdecode(exc.filename)}: {reason[:1].lower() + reason[1:]}"


_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())

def _command(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def _fault_advice(argv: list[str]) -> dict[str, str]:
    memory = MEMORY_ADVICE.get(_command(argv) or "")
    return {"memory": memory} if memory else {}


def _fail(line: str, code: int) -> None:
    click.echo(f"error: {message_line(line)}", err=True)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """Entry point: user mistakes become one line on stderr and exit status 2.

    Exit status: 0 success, 1 a failure of the machine (disk full, file too
    large, out of memory, I/O error, a killed worker) or a failed check
    (``verify``), 2 a user mistake (bad option, bad input file, unusable output
    path), 130 interrupted (SIGINT), 143 stopped (SIGTERM), 129 hung up (SIGHUP).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if _command(argv) in KEEPS_FREED_MEMORY:
        keep_freed_memory()
    clear_stop()
    hold_notice()  # until the command runs (_settling)
    try:
        try:
            with stops_unwind():
                cli.main(args=argv, prog_name="domainpar", standalone_mode=False)
        except SystemExit:
            raise  # a command that reported its own end (train's ranks) already printed its line
        except click.exceptions.Exit as exc:
            _stopped_instead(argv)
            sys.exit(exc.exit_code)
        except BaseException as exc:  # noqa: BLE001 - every way out is one line; a bug keeps its traceback (below)
            _stopped_instead(argv, exc)
            _report(exc, argv)
        _stopped_instead(argv)
    finally:
        clear_stop()  # the stop belonged to this command (a program that calls main() again starts afresh)
        hold_notice(False)


def _stopped_instead(argv: list[str], exc: BaseException | None = None) -> None:
    """End with the interrupt's line when a stop signal arrived, whatever the command made of it (a library that
    caught it and raised its own error, or carried on): an interrupted command never reports another cause."""
    interrupt = interrupt_of(exc if exc is not None else Exception())
    if interrupt is None:
        return
    if isinstance(interrupt, Terminated):
        _fail(f"domainpar {_command(argv) or ''} {interrupt}".replace("  ", " "), interrupt.exit_code)
    _fail("interrupted", 130)


def _report(exc: BaseException, argv: list[str]) -> None:
    """One line and the exit status of ``exc`` (exit 2 user mistake, 1 machine fault); re-raise a bug."""
    if isinstance(exc, click.exceptions.Abort):
        _fail("interrupted", 130)
    if isinstance(exc, _NO_ARGS_IS_HELP):
        # `domainpar` alone asks for help (click >= 8.2 raises this where 8.1 printed the help and exited 0).
        click.echo(exc.ctx.get_help() if exc.ctx is not None else "Try 'domainpar --help'.")
        sys.exit(0)
    if isinstance(exc, click.ClickException):
        # Usage errors and bad option values: always the user's (click gives them exit code 2).
        _fail(_usage_line(exc, argv), 2)
    if isinstance(exc, DomainparError):
        _fail(str(exc), 2)
    if isinstance(exc, MachineFault):
        _fail(exc.line(_fault_advice(argv)), 1)
    if isinstance(exc, OSError):
        # A path the user gave that cannot be used is their mistake; disk full or an I/O error is the machine's.
        line = fault_line(exc, advice=_fault_advice(argv))
        if line is not None:
            _fail(line, 1)
        _fail(_os_error_line(exc), 2 if exc.errno in _USER_ERRNOS else 1)
    if isinstance(exc, Exception):
        # Out of memory (Python's MemoryError, torch's allocator), a full disk wrapped by a library: one line, exit 1.
        line = fault_line(exc, advice=_fault_advice(argv))
        if line is not None:
            _fail(line, 1)
    raise exc  # a bug: its traceback


if __name__ == "__main__":
    main()

"""The locality check of a domain-parallel training run: a user's model proven local before the first step.

A run in domain mode with more than one rank per event trains exactly what one process would only when its
model is local (:mod:`domainpar.verification.locality`). Before the first step, with a model that is not a
built-in (the built-ins are proven exact by the test suite), the run's first training graph is sliced and the
model's outputs and gradients on the partitioned slice are compared with one process's; a model that is not
local is refused in one line naming the model and the tensor that differs, before any rank trains.
``parallel.skip_locality_check`` (``--skip-locality-check``) skips it, for a model checked with
``domainpar verify``.

Where it runs: in a thread of the process that spawns the ranks, while they start (:class:`LocalityGate`);
in a torchrun/srun job on rank 0, the other ranks following its verdict (:func:`check_launched_run_locality`).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path
from typing import Callable

from domainpar.comm.agreement import decide_on_rank0
from domainpar.data.graph_files import graph_files, has_graph_files
from domainpar.errors import DomainparError, one_line
from domainpar.model.registry import is_builtin
from domainpar.train.config import TrainConfig, domain_size_of
from domainpar.train.gate import write_verdict
from domainpar.train.trainer import graph_widths, model_config_for
from domainpar.verification.locality import check_parts, file_slice, require_local

#: How the user skips the check, for messages.
SKIP = "--skip-locality-check (parallel.skip_locality_check)"


def needs_check(config: TrainConfig, world_size: int) -> bool:
    """A domain-mode run of several ranks per event, with a model that is not a built-in, not skipped."""
    return (
        config.parallel.mode == "domain"
        and domain_size_of(config, world_size) > 1
        and not config.parallel.skip_locality_check
        and not is_builtin(config.model.name)
    )


def graph_given(config: TrainConfig) -> list[str] | None:
    """The training graph files when ``data.train`` holds ``.npz`` graph files (the check can run before the events
    are prepared, and a refused run writes nothing); None when its graphs are built or converted by the preparation."""
    path = Path(config.data.train)
    if not has_graph_files(path):
        return None
    files = graph_files(path)
    return [str(files[0])] if files[0].suffix == ".npz" else None


def check_run_locality(config: TrainConfig, train_files: list[str], world_size: int,
                       echo: Callable[[str], None] | None = None) -> None:  # fmt: skip
    """Prove the run's model local on a slice of its first training graph (nothing to do when :func:`needs_check`
    says so); ``echo`` gets one line saying what was proven.

    Raises:
        DomainparError: the model is not local (its name and the tensor that differs), or fails on a part.
    """
    if not needs_check(config, world_size):
        return
    first = Path(train_files[0])
    model_config = model_config_for(config, *graph_widths(first))
    parts = check_parts(domain_size_of(config, world_size))
    piece = file_slice(first)
    consequence = "domain-parallel training would compute other gradients than one process"
    result = require_local(model_config, piece, parts, where=first.name, consequence=consequence, skip=SKIP,
                           seed=config.run.seed, gradients=True)  # fmt: skip
    if echo is None:
        return
    if result.proven:
        echo(f"domainpar: model {config.model.name} is local: on a {parts}-part slice of {first.name} ({result.num_nodes} "
             f"nodes, {result.num_edges} edges, {result.num_halo} halo rows) its outputs and gradients are one "
             f"process's (checked in {result.seconds:.2f} s)")  # fmt: skip
    else:
        echo(f"warning: the locality of model {config.model.name} was not checked: the slice of {first.name} has no "
             "edge to cut; run `domainpar verify` on a larger graph")


def check_launched_run_locality(config: TrainConfig, train_files: list[str], world_size: int,
                                echo: Callable[[str], None] | None = None) -> None:  # fmt: skip
    """:func:`check_run_locality` in a torchrun/srun job: rank 0 checks, every rank follows (call on every rank).

    Raises:
        RanksRefused: on every rank, the line of a model that is not local.
    """
    if not needs_check(config, world_size):
        return

    def decide() -> str | None:
        check_run_locality(config, train_files, world_size, echo)
        return None

    decide_on_rank0(decide, what="locality")


class LocalityGate:
    """The locality check of a run whose ranks this process spawns, run in a thread while they start.

    :meth:`start` runs :func:`check_run_locality` in a thread; :attr:`directory` (given to the ranks) receives
    its verdict (:func:`~domainpar.train.gate.write_verdict`), which the ranks wait for before their first step.
    Use as a context manager: the directory is removed on exit, and a thread still running is waited for.
    """

    def __init__(self, config: TrainConfig, world_size: int, echo: Callable[[str], None] | None = None) -> None:
        self.config, self.world_size, self.echo = config, world_size, echo
        self.directory: str | None = None
        self._thread: threading.Thread | None = None
        self._refused: str | None = None
        self._error: BaseException | None = None

    def start(self, train_files: list[str]) -> None:
        """Start the check on the first of ``train_files`` (nothing when the run needs none)."""
        if not needs_check(self.config, self.world_size) or self._thread is not None:
            return
        self.directory = tempfile.mkdtemp(prefix="domainpar-locality-")
        self._thread = threading.Thread(target=self._run, args=(train_files,), name="domainpar-locality", daemon=True)
        self._thread.start()

    def _run(self, train_files: list[str]) -> None:
        try:
            check_run_locality(self.config, train_files, self.world_size, self.echo)
        except DomainparError as exc:
            self._refused = str(exc)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread by verdict()
            self._error = exc
            self._refused = f"the locality check failed: {type(exc).__name__}: {one_line(exc, limit=200)}"
        try:
            write_verdict(self.directory, self._refused)
        except OSError:
            pass  # the run is ending without waiting for this thread (interrupted): no rank reads it any more

    @property
    def done(self) -> bool:
        """The verdict is in (or no check runs)."""
        return self._thread is None or not self._thread.is_alive()

    def raise_if_refused(self) -> None:
        """Wait for the verdict; raise the refusal (its one line), or the check's own failure (a bug, with its
        traceback)."""
        if self._thread is None:
            return
        self._thread.join()
        if self._error is not None:
            raise self._error
        if self._refused is not None:
            raise DomainparError(self._refused)

    def __enter__(self) -> "LocalityGate":
        return self

    def __exit__(self, exc_type: type | None, *exc: object) -> None:
        # An interrupted run does not wait for the check (a daemon thread); a finished one has its verdict already.
        if self._thread is not None and exc_type is None:
            self._thread.join()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)


__all__ = ["SKIP", "LocalityGate", "check_launched_run_locality", "check_run_locality", "graph_given", "needs_check"]

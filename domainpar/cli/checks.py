"""Click types for numeric options: finite, in range, refused by click before a command does anything.

``--timeout inf``, ``--lr nan``, ``--events -3`` or ``--seed 2**80`` are refused
while the command line is parsed, so nothing has been read or written yet;
click names the option and the range, and ``domainpar.cli.main`` prints that as
one line with exit status 2.
"""

from __future__ import annotations

import math
import os

import click

#: Seeds are stored and passed on as signed 64-bit integers (torch, numpy).
SEED = click.IntRange(0, 2**63 - 1)
#: METIS takes its seed as a C int.
METIS_SEED = click.IntRange(0, 2**31 - 1)


def count(minimum: int = 1, maximum: int | None = None) -> click.IntRange:
    """An integer option of at least ``minimum`` (and at most ``maximum``)."""
    return click.IntRange(minimum, maximum)


class FiniteFloat(click.FloatRange):
    """A float option that must be finite (no ``nan``, ``inf``) and inside the range of :class:`click.FloatRange`."""

    name = "finite float"

    def convert(self, value, param, ctx):  # noqa: D102 - click's protocol
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)


def finite(minimum: float | None = None, maximum: float | None = None, *, min_open: bool = False,
           max_open: bool = False) -> FiniteFloat:  # fmt: skip
    """A finite float option, optionally bounded (open bounds exclude the value itself)."""
    return FiniteFloat(minimum, maximum, min_open=min_open, max_open=max_open)


def max_local_ranks() -> int:
    """Most processes a command spawns on this machine: 4 per CPU core (more belongs to torchrun/srun on many nodes)."""
    return 4 * (os.cpu_count() or 1)


def local_ranks() -> click.IntRange:
    """The type of a ``--ranks``/``--parts`` option that spawns that many local processes."""
    return click.IntRange(1, max_local_ranks())

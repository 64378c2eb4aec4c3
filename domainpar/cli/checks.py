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

from domainpar.domains import MAX_TIMEOUT_S, Domain

#: Seeds are stored and passed on as signed 64-bit integers (torch, numpy).
SEED = click.IntRange(0, 2**63 - 1)
#: METIS takes its seed as a C int.
METIS_SEED = click.IntRange(0, 2**31 - 1)


class FiniteFloat(click.FloatRange):
    """A float option that must be finite (no ``nan``, ``inf``) and inside the range of :class:`click.FloatRange`."""

    name = "finite float"

    def convert(self, value, param, ctx):  # noqa: D102 - click's protocol
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)


class _InDomain:
    """Mixin of the click types of a :class:`~domainpar.domains.Domain`: the range as a reader writes it
    (``(0, 10]``) in ``--help`` and in the refusal, followed by what goes wrong outside it."""

    domain: Domain

    def _describe_range(self) -> str:
        return self.domain.text()

    def convert(self, value, param, ctx):  # noqa: D102 - click's protocol
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as exc:
            if self.domain.why and "not in the range" in exc.message:
                self.fail(f"{exc.message.rstrip('.')}: {self.domain.why}", param, ctx)
            raise


class DomainFloat(_InDomain, FiniteFloat):
    """A finite float option in a :class:`~domainpar.domains.Domain` (``--help`` shows ``FLOAT`` and the interval)."""

    name = "float"

    def __init__(self, domain: Domain) -> None:
        super().__init__(domain.low, domain.high, min_open=domain.low_open, max_open=domain.high_open)
        self.domain = domain


class DomainInt(_InDomain, click.IntRange):
    """An integer option in a :class:`~domainpar.domains.Domain` (``--help`` shows ``INTEGER`` and the interval)."""

    name = "integer"

    def __init__(self, domain: Domain) -> None:
        low = None if domain.low is None else int(domain.low)
        high = None if domain.high is None else int(domain.high)
        super().__init__(low, high, min_open=domain.low_open, max_open=domain.high_open)
        self.domain = domain


def timeout_seconds() -> DomainFloat:
    """A timeout option: positive seconds, at most :data:`~domainpar.domains.MAX_TIMEOUT_S` (a timedelta of 1e300 s
    overflows torch's process group)."""
    return DomainFloat(Domain(0, MAX_TIMEOUT_S, low_open=True, why="seconds, at most 30 days"))


def max_local_ranks() -> int:
    """Most processes a command spawns on this machine: 4 per CPU core (more belongs to torchrun/srun on many nodes)."""
    return 4 * (os.cpu_count() or 1)


def local_ranks() -> click.IntRange:
    """The type of a ``--ranks``/``--parts`` option that spawns that many local processes."""
    return click.IntRange(1, max_local_ranks())

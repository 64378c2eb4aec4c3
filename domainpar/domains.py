"""The domain of a numeric setting, written once and checked wherever the setting is parsed.

A setting's domain is where the computation it enters stays meaningful and finite (``--lr 1e300`` overflows
AdamW's update, ``--timeout 1e300`` the process group's ``timedelta``). A :class:`Domain` states the range once;
the command line and the config files refuse a value outside it before anything is read or written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from domainpar.errors import FieldError, shorten

#: Largest finite float32: a setting that enters float32 tensors (weights, losses, scores) must stay below it.
FLOAT32_MAX = 3.4028234663852886e38
#: Largest loss weight: an event's weighted loss must stay far inside float32.
MAX_LOSS_WEIGHT = 1e6
#: What a loss weight beyond :data:`MAX_LOSS_WEIGHT` does.
LOSS_WEIGHT_WHY = "a loss weight; larger ones overflow the float32 loss"
#: Longest wall-clock limit a timeout may state, in seconds (30 days; a timedelta of 1e300 s overflows).
MAX_TIMEOUT_S = 30 * 24 * 3600.0


@dataclass(frozen=True)
class Domain:
    """The allowed values of a numeric setting: an interval, each end open or closed (None: unbounded)."""

    low: float | None = None
    """Smallest value (None: no lower bound)."""
    high: float | None = None
    """Largest value (None: no upper bound)."""
    low_open: bool = False
    """Whether ``low`` itself is excluded."""
    high_open: bool = False
    """Whether ``high`` itself is excluded."""
    why: str = ""
    """What goes wrong outside the domain, said with the refusal (e.g. ``"AdamW moves every weight by about lr per step"``)."""

    def contains(self, value: float) -> bool:
        """Whether ``value`` (a finite number) lies in the domain."""
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            return False
        return True

    def text(self) -> str:
        """The interval as a reader writes it: ``(0, 10]``, ``>= 0``, ``< 1``."""
        low, high = _number(self.low), _number(self.high)
        if self.low is not None and self.high is not None:
            return f"{'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {low}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {high}"
        return "finite"

    def check(self, name: str, value: Any) -> None:
        """Raise :class:`~domainpar.errors.FieldError` when ``value`` (a number; None is skipped) is outside the domain.

        Args:
            name: the field, for the message (the config layer turns it into the flag or key).
            value: the value given.
        """
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return  # types are the config layer's check
        if isinstance(value, float) and not math.isfinite(value):
            raise FieldError(name, f"must be a finite number (got {shorten(value)})")
        if not self.contains(value):
            reason = f": {self.why}" if self.why else ""
            word = "an integer" if isinstance(value, int) else "a number"
            where = f"in {self.text()}" if self.low is not None and self.high is not None else self.text()
            raise FieldError(name, f"must be {word} {where} (got {shorten(value)}){reason}")


def _number(value: float | None) -> str:
    """A bound as a reader writes it: ``10``, ``1e+06``, ``2^63``, ``3.403e+38``."""
    if value is None:
        return ""
    if isinstance(value, int) and value >= 2**32 and value & (value - 1) == 0:
        return f"2^{value.bit_length() - 1}"
    if float(value).is_integer() and abs(value) < 10**15:
        return str(int(value))
    return f"{value:.4g}"


def check_domains(instance: Any, domains: dict[str, Domain]) -> None:
    """Check every field of ``instance`` that ``domains`` names (call it from a dataclass's ``__post_init__``)."""
    for name, domain in domains.items():
        domain.check(name, getattr(instance, name))


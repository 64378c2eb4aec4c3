"""Progress on stderr that suits where stderr goes: a bar on a terminal, plain lines in a log, nothing when quiet.

A tqdm bar written to a Slurm output file or a pipe leaves hundreds of ``\\r``-joined fragments per minute. So
:func:`progress` returns a tqdm bar only when stderr is a terminal; otherwise a :class:`LineProgress` that prints
one complete line at most every :data:`LOG_EVERY_S` seconds and a last one when the work ends (work shorter than
that prints nothing). Both have the subset of tqdm's interface the package uses: iteration, ``update``,
``set_postfix``, ``write``, ``close``, ``n``.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Iterable, Iterator, TextIO

from tqdm import tqdm

#: Seconds between two plain progress lines (a log gets ~120 lines an hour, not a line per step).
LOG_EVERY_S = 30.0


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class LineProgress:
    """Progress as plain lines on a stream that is no terminal (see the module docstring)."""

    def __init__(
        self,
        iterable: Iterable | None = None,
        *,
        total: int | None = None,
        desc: str = "",
        unit: str = "it",
        initial: int = 0,
        enabled: bool = True,
        file: TextIO | None = None,
        every_s: float = LOG_EVERY_S,
    ) -> None:
        self.iterable = iterable
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.total, self.desc, self.unit = total, desc, unit
        self.n = initial
        self.enabled = enabled
        self.file = file
        self.every_s = every_s
        self.postfix = ""
        self._start_n = initial
        self._start = self._last = time.monotonic()
        self._closed = False
        self._printed_at_n: int | None = None

    def __iter__(self) -> Iterator:
        for item in self.iterable or ():
            yield item
            self.update(1)
        self.close()

    def __enter__(self) -> "LineProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _stream(self) -> TextIO:
        return self.file or sys.stderr

    def line(self) -> str:
        """The progress as one line: label, count, percentage, rate, time left, postfix."""
        elapsed = max(time.monotonic() - self._start, 1e-9)
        done = self.n - self._start_n
        rate = done / elapsed
        parts = [f"{self.n}/{self.total} {self.unit}" if self.total else f"{self.n} {self.unit}"]
        if self.total:
            parts[0] += f" ({100.0 * self.n / self.total:.0f}%)"
        parts.append(f"{rate:.3g} {self.unit}/s" if rate >= 1 or done == 0 else f"{1 / rate:.3g} s/{self.unit}")
        if self.total and rate > 0 and self.n < self.total:
            parts.append(f"eta {_duration((self.total - self.n) / rate)}")
        parts.append(f"elapsed {_duration(elapsed)}")
        text = ", ".join(parts)
        if self.postfix:
            text += f", {self.postfix}"
        return f"{self.desc}: {text}" if self.desc else text

    def _emit(self) -> None:
        stream = self._stream()
        stream.write(self.line() + "\n")
        stream.flush()
        self._printed_at_n = self.n
        self._last = time.monotonic()

    def update(self, n: int = 1) -> None:
        """``n`` more units done; prints a line when :attr:`every_s` has passed since the last."""
        self.n += n
        if self.enabled and time.monotonic() - self._last >= self.every_s:
            self._emit()

    def set_postfix(self, **values: Any) -> None:
        """Values shown after the rate (``loss=0.41``), as tqdm's."""
        self.postfix = ", ".join(f"{key}={value}" for key, value in values.items())

    def write(self, text: str, file: TextIO | None = None) -> None:
        """A message line (always printed when enabled: it is no progress)."""
        if self.enabled:
            stream = file or self._stream()
            stream.write(text + "\n")
            stream.flush()

    def close(self) -> None:
        """The last line, when the work lasted long enough to have shown progress (shorter work says nothing)."""
        if self._closed:
            return
        self._closed = True
        lasted = time.monotonic() - self._start >= self.every_s
        if self.enabled and self.n > self._start_n and self._printed_at_n != self.n and (lasted or self._printed_at_n is not None):
            self._emit()


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is an interactive terminal (a bar can redraw its line there)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def progress(
    iterable: Iterable | None = None,
    *,
    total: int | None = None,
    desc: str = "",
    unit: str = "it",
    initial: int = 0,
    enabled: bool = True,
    file: TextIO | None = None,
) -> Any:
    """A progress display for ``total`` units (or the items of ``iterable``) on ``file`` (default stderr).

    A tqdm bar when ``file`` is a terminal, plain lines every :data:`LOG_EVERY_S` seconds otherwise, nothing
    when ``enabled`` is False.
    """
    stream = file or sys.stderr
    if enabled and is_terminal(stream):
        return tqdm(iterable, total=total, desc=desc, unit=unit, initial=initial, file=stream, dynamic_ncols=True)
    return LineProgress(iterable, total=total, desc=desc, unit=unit, initial=initial, enabled=enabled, file=file)


__all__ = ["LOG_EVERY_S", "LineProgress", "is_terminal", "progress"]

"""The one exception type for user mistakes, and the helpers that keep its message one short line.

Anything a user can get wrong (a path, an argument, a malformed file) raises :class:`DomainparError` with a
one-line message that names the file or argument, what was expected and what was found. The CLI prints that line
and exits 2; everything else is a bug and keeps its traceback.

A failure of the machine rather than of the input (a full disk, a failed allocation, a killed worker) is
:class:`MachineFault`, exit status 1. :func:`fault_line` recognises one in any exception, also one that a library
wrapped, so every command reports it in one line, and broad ``except Exception`` blocks that blame the input let
it pass (:func:`reraise_fault`).

:func:`shorten` is the one way a found value (which can be anything: a 100 MB field, a binary blob) enters a
message; :func:`one_line` the one way a third-party exception's text does; :func:`message_line` is the last guard
the CLI applies to the whole line.
"""

from __future__ import annotations

import errno
import os
import reprlib
import signal
import stat
from pathlib import Path
from typing import Any

#: Longest echo of a found value inside a message, in characters.
VALUE_LIMIT = 60
#: Longest message line the CLI prints (paths included), in characters.
LINE_LIMIT = 600


_SAFE_REPR = reprlib.Repr()
_SAFE_REPR.maxlevel, _SAFE_REPR.maxlist, _SAFE_REPR.maxtuple, _SAFE_REPR.maxdict = 3, 6, 6, 6
_SAFE_REPR.maxstring = _SAFE_REPR.maxother = _SAFE_REPR.maxlong = 2 * VALUE_LIMIT


class DomainparError(ValueError):
    """A user-facing error with a one-line message."""


def what_is(path: str | os.PathLike) -> str:
    """What a path that exists but is no regular file is, for a message ("a directory", "a named pipe (FIFO)")."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        if path.is_symlink():
            return "a symbolic link to nothing" if exc.errno == errno.ENOENT else f"a symbolic link that cannot be followed ({exc.strerror})"
        return f"a path that cannot be read ({exc.strerror})"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file"


def not_a_file(path: str | os.PathLike, what: str, prefix: str = "") -> DomainparError:
    """The error for ``path`` where a regular file (``what``, e.g. "checkpoint file") was expected.

    "not found" only when nothing is there: a FIFO, a symbolic-link loop or a dangling link is named as what it is.
    """
    if not os.path.lexists(path):
        return DomainparError(f"{prefix}{path}: {what} not found")
    article = "an" if what[:1].lower() in "aeiou" else "a"
    return DomainparError(f"{prefix}{path}: expected {article} {what}, found {what_is(path)}")


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived (a scheduler or user stopping the job); ``signum`` says which.

    A BaseException, like KeyboardInterrupt: ``except Exception`` blocks let it pass, ``finally`` blocks and
    the atomic writers' clean-up run on its way out.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        """128 + the signal number, as a shell reports a process killed by it."""
        return 128 + self.signum


#: The first stop signal (SIGINT, SIGTERM, SIGHUP) this process received while a command ran, if any.
_STOP_SIGNAL: list[int] = []


def note_stop(signum: int) -> None:
    """Record that a stop signal arrived (its handler calls this before raising).

    A library that catches everything (an importer turning the interrupt of a module's initialisation into
    an ``ImportError``, an exporter turning it into its own failure) would otherwise make an interrupt look like
    a missing package or a bad model; the command's last word checks :func:`stop_received` first.
    """
    if not _STOP_SIGNAL:
        _STOP_SIGNAL.append(int(signum))


def stop_received() -> int | None:
    """The stop signal this process received since :func:`clear_stop`, None if none."""
    return _STOP_SIGNAL[0] if _STOP_SIGNAL else None


def clear_stop() -> None:
    """Forget a recorded stop signal (a command starting in a process that ran one before)."""
    _STOP_SIGNAL.clear()


def interrupt_of(exc: BaseException) -> BaseException | None:
    """The interrupt (KeyboardInterrupt or :class:`Terminated`) behind ``exc``, or a recorded stop signal's; else None."""
    for item in _chain(exc):
        if isinstance(item, (KeyboardInterrupt, Terminated)):
            return item
    signum = stop_received()
    if signum is None:
        return None
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


class FieldError(DomainparError):
    """A configuration field with a bad value; the config layer prefixes the option's user-facing name.

    Args:
        field: the dataclass field's name (e.g. ``"hidden"``).
        message: what was expected and found, without the field name (e.g. ``"must be positive (got 0)"``).
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field} {message}")
        self.field = field
        self.message = message


def _clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with its length stated (head kept: it says what the value is)."""
    if len(text) <= limit:
        return text
    tail = f"... ({len(text):,} characters)"
    return text[: max(limit - len(tail), 8)] + tail


def shorten(value: Any, limit: int = VALUE_LIMIT) -> str:
    """A found value as it may appear in a message: ``repr`` for text, one line, at most ~``limit`` characters.

    Strings are quoted (so an empty value is visible), and a long value keeps its head and states its length:
    ``'77777777...' (2,000,000 characters)``.

    Args:
        value: anything (str, bytes, number, array element, container).
        limit: longest result before the length note.
    """
    if isinstance(value, str):
        if len(value) > limit:
            return repr(value[:limit]) + f"... ({len(value):,} characters)"
        return repr(value)
    if isinstance(value, (bytes, bytearray)):
        if len(value) > limit:
            return repr(bytes(value[:limit])) + f"... ({len(value):,} bytes)"
        return repr(bytes(value))
    # Numbers print as users write them (1e+40, nan, 7), numpy scalars too, not as np.float32(1e+40).
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    number = number or (getattr(value, "ndim", None) == 0 and getattr(getattr(value, "dtype", None), "kind", "") in "iuf")
    try:
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
            text = f"an integer of about {int(value.bit_length() * 0.30103) + 1:,} digits"
        elif number:
            text = str(value)
        else:
            # reprlib bounds depth and length: a YAML alias bomb or a huge nested list never expands in full.
            text = _SAFE_REPR.repr(value)
    except Exception:  # noqa: BLE001 - a hostile object's repr must not break the error path
        text = f"<{type(value).__name__}>"
    return _clip(" ".join(text.split()), limit)


def one_line(exc: BaseException, limit: int = 300) -> str:
    """The text of a third-party exception as one line for a :class:`DomainparError` message.

    Whitespace is collapsed, and only the first sentence is kept when the text is long.

    Args:
        exc: the exception being translated.
        limit: longest text returned, in characters.
    """
    text = " ".join(str(exc).split()) or type(exc).__name__
    if len(text) > limit:
        sentence_end = text.find(". ")
        text = text[: sentence_end + 1] if 0 < sentence_end < limit else text[: limit - 3].rstrip() + "..."
    return text


def message_line(message: str, limit: int = LINE_LIMIT) -> str:
    """A whole error message as the one line the CLI prints: whitespace collapsed, at most ``limit`` characters."""
    return _clip(" ".join(str(message).split()), limit)


# ----------------------------------------------------------------------------------------------- machine faults


class MachineFault(Exception):
    """The machine failed (disk full, file too large, out of memory, a killed worker): one line, exit status 1.

    Args:
        message: the line (what failed, where, and what to try).
        kind: ``"disk"``, ``"memory"`` or ``"io"`` when ``message`` says what failed but not yet what to try:
            the command that reports it adds its own advice (:meth:`line`).
    """

    def __init__(self, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind

    def line(self, advice: dict[str, str] | None = None) -> str:
        """The message, with what to try (``advice`` by kind, else :data:`DEFAULT_ADVICE`) when it has none yet."""
        if self.kind is None:
            return str(self)
        return f"{self}; {(advice or {}).get(self.kind) or DEFAULT_ADVICE[self.kind]}"


#: errno values of a full or size-limited file system: what to free, not what to fix in the input.
DISK_ERRNOS = {errno.ENOSPC: "no space left on the device", errno.EFBIG: "file too large (the file-size limit was reached)",
               errno.EDQUOT: "disk quota exceeded"}  # fmt: skip
#: errno values of other machine faults.
OTHER_ERRNOS = {errno.EIO: "input/output error of the device", errno.ENOMEM: "out of memory",
                errno.ENFILE: "too many open files on the system", errno.EMFILE: "too many open files in this process"}  # fmt: skip

#: Text of allocation failures that libraries raise as RuntimeError (torch's CPU and CUDA allocators, C++ bad_alloc).
_MEMORY_MARKERS = ("can't allocate memory", "cannot allocate memory", "out of memory", "std::bad_alloc",
                   "failed to allocate", "allocation failed")  # fmt: skip
#: Text of a thread that could not be started (no memory for its stack, or the process limit reached).
_THREAD_MARKERS = ("can't start new thread", "cannot start new thread", "Resource temporarily unavailable")
#: Text of write failures that torch's C++ writer raises as RuntimeError (its errno is lost).
_WRITE_MARKERS = ("PytorchStreamWriter failed writing", "file write failed")
#: Text of numba failing to find a directory for its kernel cache (raised when a cached kernel is defined).
_NUMBA_CACHE_MARKERS = ("cannot cache function", "no locator available")

#: What to try when a command runs out of memory (the disk advice is the same for every command).
MEMORY_ADVICE = {
    "train": "try --checkpointing (or --offload), more ranks per event (--ranks/--domain-size: each holds one part), "
    "a smaller --hidden or fewer --batch-events",
    "evaluate": "try more --parts (each process holds one part of an event)",
    "reconstruct": "try more --parts (each process holds one part of an event), fewer --workers or --prefetch 0",
    "verify": "try more --parts or --checkpointing",
    "build": "try fewer --workers (each worker holds one event)",
    "partition": "try fewer --workers (each worker holds one event)",
    "simulate": "try fewer --particles",
    "demo": "try fewer --particles or --ranks",
    "export": "close other programs or export on a machine with more memory",
    "score": "close other programs or score on a machine with more memory",
}

#: What to try, by kind of fault, when the command does not say better.
DEFAULT_ADVICE = {
    "disk": "free space on that file system (or raise its size limit) or write somewhere else",
    "memory": "use smaller inputs or options",
    "io": "check the device and try again",
    "install": "a fault of this installation, not of the inputs or options: repair or reinstall domainpar and its dependencies",
    "cache": "a fault of this machine's set-up, not of the inputs or options: set NUMBA_CACHE_DIR to a writable directory",
}

#: Kinds of fault that belong to the environment the command runs in: no event or option is named with them.
ENVIRONMENT_KINDS = ("install", "cache")


def _chain(exc: BaseException):
    """``exc`` and the exceptions it was raised from or while handling (cycle-safe, bounded)."""
    seen = set()
    while exc is not None and id(exc) not in seen and len(seen) < 16:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)


def fault_kind(exc: BaseException) -> tuple[str, BaseException] | None:
    """``("disk" | "memory" | "io" | "install" | "cache", the exception that says so)`` when ``exc`` is a machine
    fault, else None.

    Looks through the chain of causes, since libraries wrap an ``OSError`` of a full disk or an allocator's failure
    in exceptions of their own. ``install`` (a module does not import) and ``cache`` (numba finds no directory for
    its kernel cache) are faults of the environment, not of the event or option being handled.
    """
    for item in _chain(exc):
        if isinstance(item, MachineFault):
            return "fault", item
        if isinstance(item, ImportError):
            return "install", item
        if isinstance(item, MemoryError) or type(item).__name__ == "OutOfMemoryError":
            return "memory", item
        if isinstance(item, OSError) and item.errno is not None:
            if item.errno in DISK_ERRNOS:
                return "disk", item
            if item.errno in OTHER_ERRNOS:
                return ("memory" if item.errno == errno.ENOMEM else "io"), item
        if isinstance(item, RuntimeError):
            text = str(item)
            lowered = text.lower()
            if any(marker in lowered for marker in _MEMORY_MARKERS) or any(marker in text for marker in _THREAD_MARKERS):
                return "memory", item
            if any(marker in text for marker in _WRITE_MARKERS):
                return "disk", item
            if all(marker in text for marker in _NUMBA_CACHE_MARKERS):
                return "cache", item
    return None


def _writer(item: BaseException) -> str:
    """Where an OSError without a file name was raised (``numba/core/caching.py``): the innermost frame's file."""
    frame = item.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    if frame is None:
        return ""
    parts = frame.tb_frame.f_code.co_filename.replace(os.sep, "/").split("/")
    return f" (writing in {'/'.join(parts[-3:])})"


def _what(kind: str, item: BaseException) -> str:
    if isinstance(item, OSError) and item.errno is not None:
        reason = DISK_ERRNOS.get(item.errno) or OTHER_ERRNOS.get(item.errno) or (item.strerror or "").lower()
        name = item.filename if item.filename is not None else None
        return f"{os.fsdecode(name)}: {reason}" if name is not None else reason + _writer(item)
    if kind == "memory" and any(marker in str(item) for marker in _THREAD_MARKERS):
        return f"out of memory or processes: could not start a thread ({one_line(item, limit=80)})"
    if kind == "memory":
        text = str(item) if not isinstance(item, MemoryError) or str(item) else ""
        # torch's allocator says "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate
        # memory: you tried to allocate N bytes ...": keep what it says after the location.
        text = text.split("DefaultCPUAllocator: ", 1)[-1]
        detail = one_line(ValueError(text), limit=160) if text else ""
        return "out of memory" + (f" ({detail})" if detail else "")
    if kind == "disk":
        return "could not write a file (the file system is full or a file-size limit was reached)"
    if kind == "install" and isinstance(item, ImportError):
        return f"cannot import {item.name or 'a module'} ({one_line(item, limit=160)})"
    if kind == "cache":
        return f"numba found no writable directory for its kernel cache ({one_line(item, limit=160)})"
    return one_line(item, limit=200)


def fault_parts(exc: BaseException) -> tuple[str | None, str] | None:
    """``(kind, what failed)`` of a machine fault without the advice (kind None: the text is complete), or None."""
    found = fault_kind(exc)
    if found is None:
        return None
    kind, item = found
    if kind == "fault":
        return item.kind, str(item)
    return kind, _what(kind, item)


def fault_line(exc: BaseException, where: str | None = None, advice: dict[str, str] | None = None) -> str | None:
    """The one line that reports ``exc`` as a machine fault, or None when it is none.

    Args:
        exc: any exception.
        where: the step it happened in (e.g. ``"training step 12"``), put first (not for a fault of the
            environment, :data:`ENVIRONMENT_KINDS`: it would read as that step's or event's).
        advice: what to try, by kind (``disk``, ``memory``, ``io``); defaults to :data:`DEFAULT_ADVICE`.
    """
    found = fault_kind(exc)
    if found is None:
        return None
    kind, item = found
    if kind == "fault":
        text = item.line(advice)
        return f"{where}: {text}" if where and not text.startswith(where) else text
    what = _what(kind, item)
    tip = (advice or {}).get(kind) or DEFAULT_ADVICE[kind]
    head = f"{where}: " if where and kind not in ENVIRONMENT_KINDS else ""
    return f"{head}{what}; {tip}"


def fault_at(where: str, what: str, kind: str | None) -> MachineFault:
    """The :class:`MachineFault` that ends a run when one item (an event, a file) met a fault ``what`` of ``kind``.

    It names the item, except for a fault of the environment (:data:`ENVIRONMENT_KINDS`), which every item meets.
    """
    return MachineFault(what if kind in ENVIRONMENT_KINDS else f"{where}: {what}", kind=kind)


def reraise_fault(exc: BaseException) -> None:
    """Raise ``exc`` again when it is a machine fault (call first in an ``except Exception`` that blames the input)."""
    if fault_kind(exc) is not None:
        raise exc


def is_fault(exc: BaseException) -> bool:
    """Whether ``exc`` is a machine fault (see :func:`fault_kind`)."""
    return fault_kind(exc) is not None

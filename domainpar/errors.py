"""The one exception type for user mistakes, and the helpers that keep its message one short line.

Anything a user can get wrong (a path, an argument, a malformed file) raises
:class:`DomainparError` with a one-line message that names the file or argument,
what was expected and what was found. The CLI prints that line and exits 2;
everything else is a bug and keeps its traceback.

A message echoes what was found, and what was found can be anything: a 100 MB
CSV field, a binary blob, a multi-line string. :func:`shorten` is the one way a
found value enters a message; :func:`one_line` the one way a third-party
exception's text does; :func:`message_line` is the last guard the CLI applies
to the whole line.
"""

from __future__ import annotations

import reprlib
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

    Strings are quoted (so an empty or blank value is visible), control
    characters and newlines are escaped by ``repr``, and a long value keeps
    its head and states its length: ``'77777777...' (2,000,000 characters)``.

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

    Parsers (pandas, numpy, torch) put newlines and long advice in their
    messages, and sometimes the offending input itself; a user-facing error
    must stay on one line, so whitespace is collapsed, and only the first
    sentence is kept when the text is long.

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

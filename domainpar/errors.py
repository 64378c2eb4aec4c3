"""The one exception type for user mistakes.

Anything a user can get wrong (a path, an argument, a malformed file) raises
:class:`DomainparError` with a one-line message that names the file or argument,
what was expected and what was found. The CLI prints that line and exits 2;
everything else is a bug and keeps its traceback.
"""


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


def one_line(exc: BaseException, limit: int = 300) -> str:
    """The text of a third-party exception as one line for a :class:`DomainparError` message.

    Parsers (pandas, numpy, torch) put newlines and long advice in their
    messages; a user-facing error must stay on one line, so whitespace is
    collapsed, and only the first sentence is kept when the text is long.

    Args:
        exc: the exception being translated.
        limit: longest text returned, in characters.
    """
    text = " ".join(str(exc).split()) or type(exc).__name__
    if len(text) > limit:
        sentence_end = text.find(". ")
        text = text[: sentence_end + 1] if 0 < sentence_end < limit else text[: limit - 3].rstrip() + "..."
    return text

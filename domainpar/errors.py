"""The one exception type for user mistakes.

Anything a user can get wrong (a path, an argument, a malformed file) raises
:class:`DomainparError` with a one-line message that names the file or argument,
what was expected and what was found. The CLI prints that line and exits 2;
everything else is a bug and keeps its traceback.
"""


class DomainparError(ValueError):
    """A user-facing error with a one-line message."""

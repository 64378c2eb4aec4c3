"""Up-front checks of a command's output paths.

A command that runs for minutes and then fails to write its report, or that
dies with an ``OSError`` traceback because ``--out`` names a file, wastes the
user's time. Every command checks its output paths *before* doing any work:
the path must not be of the wrong kind (a file where a directory is expected
or the other way round) and its nearest existing ancestor must be a directory
we can create files in. The check creates nothing that outlives it, so a
command that then fails on its inputs leaves no trace behind. A symbolic link
is followed (outputs are written through it, see :mod:`domainpar.atomic`); a
link whose target does not exist, on the path or at its end, is refused with
the path the user gave.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from domainpar.errors import DomainparError


def _exists(path: Path, option: str, target: Path) -> bool:
    """Whether ``path`` exists; a parent that cannot be searched (permission) is the user's path problem."""
    try:
        os.stat(path)
        return True
    except (FileNotFoundError, NotADirectoryError):
        return False
    except PermissionError:
        raise DomainparError(f"{option} {target}: expected a location we can use, cannot access {path} (Permission denied)") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise DomainparError(f"{option} {target}: expected a location we can use, cannot access {path} ({reason})") from None


def _dangling(link: Path, option: str, target: Path) -> DomainparError:
    try:
        points_to = os.readlink(link)
    except OSError:
        points_to = "?"
    itself = link == target.absolute()
    shown, where = (target, "") if itself else (link, f" (on the way to {target})")
    return DomainparError(
        f"{option} {target}: {shown} is a symbolic link to {points_to}, which does not exist{where}; "
        "create its target or pass another path"
    )


def _nearest_existing(path: Path, option: str) -> Path:
    current = path.absolute()
    while not _exists(current, option, path):
        if os.path.islink(current):
            raise _dangling(current, option, path)
        if current.parent == current:
            break
        current = current.parent
    return current


def _probe_writable(directory: Path, option: str, target: Path) -> None:
    """Create and delete a temporary file in ``directory`` (os.access lies for root and read-only mounts), and list it."""
    if not directory.is_dir():
        raise DomainparError(f"{option} {target}: {directory} must be a directory (found a file)")
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
        # Commands read back what they write (resume, reruns); a directory we cannot list is no output.
        os.listdir(directory)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise DomainparError(f"{option} {target}: expected a writable location, cannot create files in {directory} ({reason})") from None


def check_output_dir(path: str | os.PathLike, option: str) -> Path:
    """Check that ``path`` is (or can be created as) a writable directory; create nothing.

    Args:
        path: the output directory.
        option: the command-line option naming it, for the message (e.g. ``"--out"``).

    Raises:
        DomainparError: ``path`` is an existing file, or no file can be created where it would go.
    """
    path = Path(path)
    if _exists(path, option, path) and not path.is_dir():
        raise DomainparError(f"{option} {path}: expected a directory (found an existing file)")
    _probe_writable(_nearest_existing(path, option), option, path)
    return path


def check_output_file(path: str | os.PathLike, option: str, suffix: str | None = None) -> Path:
    """Check that ``path`` can be written as a file (replacing an existing file is fine); create nothing.

    Args:
        path: the output file.
        option: the command-line option naming it (e.g. ``"--json"``).
        suffix: required file suffix (e.g. ``".png"``), case-insensitive; None accepts any.

    Raises:
        DomainparError: ``path`` is a directory, has the wrong suffix, or cannot be created.
    """
    path = Path(path)
    if os.path.islink(path) and not _exists(path, option, path):
        raise _dangling(path.absolute(), option, path)
    if _exists(path, option, path) and path.is_dir():
        raise DomainparError(f"{option} {path}: expected a file path (found an existing directory)")
    if suffix is not None and path.suffix.lower() != suffix:
        raise DomainparError(f"{option} {path}: must end in {suffix} (got {path.suffix or 'no suffix'})")
    _probe_writable(_nearest_existing(path.parent, option), option, path)
    return path

"""Up-front checks of a command's output paths.

Every command checks its output paths *before* doing any work, so that it does not run for minutes and then fail
to write: the path must not be of the wrong kind and its nearest existing ancestor must be a directory we can
create files in. The check creates nothing that outlives it. A symbolic link is followed (outputs are written
through it); one whose target does not exist is refused with the path the user gave. A name longer than the file
system allows is refused (:func:`check_name_length`), and so is an output that is, or (a directory) holds, one
of the command's inputs (:func:`check_apart`).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

from domainpar.atomic import NAME_MAX, nearest_existing, remove_empty
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
    """The nearest existing directory of ``path``: a dangling link on the way is refused, not walked past."""
    nearest, _ = nearest_existing(path, lambda p: os.path.islink(p) or _exists(p, option, path))
    if os.path.islink(nearest) and not _exists(nearest, option, path):
        raise _dangling(nearest, option, path)
    return nearest


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
    check_name_length(path, option)
    if _exists(path, option, path) and not path.is_dir():
        raise DomainparError(f"{option} {path}: expected a directory (found an existing file)")
    _probe_writable(_nearest_existing(path, option), option, path)
    return path


def check_name_length(path: str | os.PathLike, option: str, given: str | os.PathLike | None = None, what: str = "") -> Path:
    """Refuse an output whose file name is longer than the file system allows (:data:`~domainpar.atomic.NAME_MAX`).

    Args:
        path: the output, or a file the command writes beside ``given`` (a sidecar).
        option: the option naming it.
        given: the path the user gave, when ``path`` is derived from it.
        what: what ``path`` is, when derived (e.g. ``"its sidecar"``).
    """
    path = Path(path)
    size = len(os.fsencode(path.name))
    if size > NAME_MAX:
        if given is None:
            raise DomainparError(
                f"{option} {path}: expected a file name of at most {NAME_MAX} bytes (the file system's limit), got {size} bytes"
            )
        raise DomainparError(
            f"{option} {given}: expected a name that leaves room for {what} ({path.name[-16:]!r}) within {NAME_MAX} bytes "
            f"(the file system's limit), got {size} bytes for it; choose a shorter {option}"
        )
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
    check_name_length(path, option)
    if os.path.islink(path) and not _exists(path, option, path):
        raise _dangling(path.absolute(), option, path)
    if _exists(path, option, path) and path.is_dir():
        raise DomainparError(f"{option} {path}: expected a file path (found an existing directory)")
    if suffix is not None and path.suffix.lower() != suffix:
        raise DomainparError(f"{option} {path}: must end in {suffix} (got {path.suffix or 'no suffix'})")
    _probe_writable(_nearest_existing(path.parent, option), option, path)
    return path


def _real(path: str | os.PathLike) -> Path:
    """``path`` with every symbolic link and ``..`` resolved, relative to the working directory."""
    return Path(os.path.realpath(os.path.abspath(path)))


def check_apart(option: str, path: str | os.PathLike, kind: str, inputs: Iterable[tuple[str, str | os.PathLike]]) -> None:
    """Refuse an output that is one of the command's inputs, or a directory that holds one.

    Paths are compared after resolving symbolic links, ``..`` and relative paths, so no spelling of the same place
    gets through.

    Args:
        option: the output's option, for the message (e.g. ``"--write-scores"``).
        path: the output as given.
        kind: ``"file"`` (replaced by the output) or ``"dir"`` (outputs are written into it).
        inputs: ``(option, path)`` of every file the command reads and every directory it reads files from.

    Raises:
        DomainparError: naming the output, the input and what would happen to it.
    """
    out = _real(path)
    for input_option, given in inputs:
        real = _real(given)
        if real == out and not real.is_dir():
            raise DomainparError(
                f"{option} {path}: expected an output apart from the inputs, got {input_option} {given} itself, which "
                f"would be replaced; choose another {option}"
            )
        if real == out:
            raise DomainparError(
                f"{option} {path}: expected a directory apart from the inputs, got the {input_option} directory {given} "
                f"itself (outputs would be written among, or over, its files); choose another {option}"
            )
        if kind == "dir" and real.parent == out and not real.is_dir():
            raise DomainparError(
                f"{option} {path}: expected a directory apart from the inputs, got the directory holding {input_option} "
                f"{given} (outputs would be written beside, or over, it); choose another {option}"
            )


@contextlib.contextmanager
def no_empty_directories_left(*paths: str | os.PathLike | None) -> Iterator[None]:
    """Remove again, when the block ends, the directories of ``paths`` it created and left empty.

    A command that fails before its first output is whole must not leave the output directory it created behind:
    the user would take an empty ``--out`` for a result.
    """
    created = [directory for path in paths if path is not None for directory in nearest_existing(path)[1]]
    try:
        yield
    finally:
        remove_empty(created)  # only the empty ones: anything in them is kept

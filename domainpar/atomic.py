"""Atomic file writes: never leave a half-written output behind.

Every output is written to a temporary name beside its destination
(``.<name>.tmp-<random><suffixes>``) and renamed onto it, so a reader sees the
old file or the new one, never part of one. A process killed between the two
leaves only the temporary file; :func:`remove_stale_temporaries` deletes those
at the start of the next run. Outputs whose loss would cost a run (checkpoints)
are written ``durable``: the data is fsynced before the rename and the directory
after it, so a crash of the machine right after the rename cannot leave an empty
or missing "complete" file.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path
from typing import Iterator

#: Marker between a destination's name and the random part of its temporary name.
TMP_MARKER = ".tmp-"


def fsync_directory(directory: str | os.PathLike) -> None:
    """Flush a directory's entries (a rename inside it) to disk; a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # e.g. Windows, or file systems that refuse O_RDONLY on directories
    try:
        os.fsync(fd)
    except OSError:
        pass  # some network file systems do not implement fsync on directories
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None, durable: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` on success.

    The temporary file lives in the same directory so that the final
    ``os.replace`` is atomic on POSIX file systems. On error it is removed and
    ``path`` is untouched.

    Args:
        path: the final destination.
        suffix: suffix for the temporary name (defaults to the destination's,
            so writers that pick a format by extension still work).
        durable: fsync the file before the rename and its directory after it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Keep the real suffixes last: np.savez and pandas pick formats by extension.
    real_suffix = "".join(path.suffixes) if suffix is None else suffix
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}{TMP_MARKER}", suffix=real_suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    # mkstemp creates 0600; give the final file the permissions a plain open() would (umask).
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        yield tmp
        if durable:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    if durable:
        fsync_directory(path.parent)


def is_temporary_name(name: str) -> bool:
    """Whether ``name`` is the temporary name :func:`atomic_path` gives (``.<name>.tmp-<random>...``)."""
    return name.startswith(".") and TMP_MARKER in name[1:]


def remove_stale_temporaries(directory: str | os.PathLike, pattern: str | None = None) -> list[Path]:
    """Delete the temporary files that killed writers left in ``directory`` (not recursive).

    Only files with :func:`atomic_path`'s temporary naming are touched, and
    only when no other process can be writing them: call it at the start of a
    run that owns ``directory`` (one writer per output directory).

    Args:
        directory: a directory that may not exist.
        pattern: regular expression the destination name (between the leading dot
            and the marker) must match in full, e.g. ``r"step-\\d+\\.pt"``; None: any.

    Returns:
        The files deleted.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    wanted = None if pattern is None else re.compile(pattern)
    removed = []
    for entry in directory.iterdir():
        name = entry.name
        if not is_temporary_name(name) or not entry.is_file() or entry.is_symlink():
            continue
        target = name[1 : name.index(TMP_MARKER, 1)]
        if wanted is not None and not wanted.fullmatch(target):
            continue
        with contextlib.suppress(FileNotFoundError):
            entry.unlink()
            removed.append(entry)
    return removed

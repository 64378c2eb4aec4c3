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
import shutil
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


def _default_mode(path: Path, directory: bool) -> None:
    """Give a staged file or directory the permissions a plain open()/mkdir() would (mkstemp/mkdtemp use 0600/0700)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if directory else 0o666) & ~umask)


class StagedOutputs:
    """Everything one command writes, staged beside its destinations and published together: all or nothing.

    A command that writes many outputs (one graph per event, one plan per
    event, plots, submissions, a JSON report) and fails half way must not
    leave the first half behind: the user would take a directory of some
    events for a complete result. Every output is written to a temporary name
    beside its destination (same file system, so publishing is a rename);
    :meth:`publish` renames them all into place, :meth:`discard` removes them
    and every directory this object created. Use :func:`staged_outputs`.
    """

    def __init__(self) -> None:
        self._files: list[tuple[Path, Path]] = []
        self._directories: list[tuple[Path, Path]] = []
        self._replacements: list[tuple[Path, Path]] = []
        self._created: list[Path] = []

    def _ensure_directory(self, directory: Path) -> None:
        missing = []
        current = directory
        while not current.exists():
            missing.append(current)
            if current.parent == current:
                break
            current = current.parent
        for path in reversed(missing):
            path.mkdir()
            self._created.append(path)

    def file(self, final: str | os.PathLike) -> Path:
        """A temporary path for the file ``final`` (its suffixes kept, for writers that choose a format by them)."""
        final = Path(final)
        self._ensure_directory(final.parent)
        fd, name = tempfile.mkstemp(prefix=f".{final.name}{TMP_MARKER}", suffix="".join(final.suffixes), dir=final.parent)
        os.close(fd)
        tmp = Path(name)
        _default_mode(tmp, directory=False)
        self._files.append((tmp, final))
        return tmp

    def directory(self, final: str | os.PathLike) -> Path:
        """An empty staging directory whose entries are merged into ``final`` (created if missing) on publish."""
        final = Path(final)
        self._ensure_directory(final.parent)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}{TMP_MARKER}", dir=final.parent))
        _default_mode(tmp, directory=True)
        self._directories.append((tmp, final))
        return tmp

    def replacement(self, final: str | os.PathLike) -> Path:
        """A new path (nothing there yet) for a directory that replaces ``final`` as a whole on publish."""
        final = Path(final)
        self._ensure_directory(final.parent)
        reserved = Path(tempfile.mkdtemp(prefix=f".{final.name}{TMP_MARKER}", dir=final.parent))
        reserved.rmdir()
        self._replacements.append((reserved, final))
        return reserved

    def publish(self) -> None:
        """Rename every staged output into place (an existing file is replaced, an existing directory merged)."""
        for tmp, final in self._directories:
            if not final.exists():
                os.replace(tmp, final)
                continue
            for entry in sorted(tmp.iterdir()):
                destination = final / entry.name
                if entry.is_dir() and destination.is_dir():
                    # Two renames: the old directory moves aside, the new one into place, then the old is removed.
                    retired = Path(tempfile.mkdtemp(prefix=f".{entry.name}.old-", dir=final))
                    os.replace(destination, retired / "old")
                    os.replace(entry, destination)
                    shutil.rmtree(retired, ignore_errors=True)
                else:
                    os.replace(entry, destination)
            tmp.rmdir()
        for tmp, final in self._replacements:
            if not tmp.exists():
                continue
            if final.exists():
                retired = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=final.parent))
                os.replace(final, retired / "old")
                os.replace(tmp, final)
                shutil.rmtree(retired, ignore_errors=True)
            else:
                os.replace(tmp, final)
        for tmp, final in self._files:
            os.replace(tmp, final)
        self._files, self._directories, self._replacements, self._created = [], [], [], []

    def discard(self) -> None:
        """Remove every staged output and every directory created for them; destinations stay untouched."""
        for tmp, _ in self._files:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        for tmp, _ in self._directories + self._replacements:
            shutil.rmtree(tmp, ignore_errors=True)
        for directory in reversed(self._created):
            with contextlib.suppress(OSError):
                directory.rmdir()  # only if empty: something else may have been put there meanwhile
        self._files, self._directories, self._replacements, self._created = [], [], [], []


@contextlib.contextmanager
def staged_outputs() -> Iterator[StagedOutputs]:
    """A :class:`StagedOutputs` published when the block ends normally and discarded when it raises."""
    outputs = StagedOutputs()
    try:
        yield outputs
    except BaseException:
        outputs.discard()
        raise
    outputs.publish()

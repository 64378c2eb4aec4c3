"""Atomic file writes: never leave a half-written output behind.

Every output is written to a temporary name beside its destination
(``.<name>.tmp-<random><suffixes>``) and renamed onto it, so a reader sees the
old file or the new one, never part of one. A process killed between the two
leaves only the temporary file; :func:`remove_stale_temporaries` deletes those
at the start of the next run. Outputs whose loss would cost a run (checkpoints)
are written ``durable``: the data is fsynced before the rename and the directory
after it, so a crash of the machine right after the rename cannot leave an empty
or missing "complete" file.

A destination that is a symbolic link is written through: the temporary goes
beside the link's target and replaces the target, so the link stays a link.
Temporary names carry the writer's process id (``.<name>.tmp-<pid>-<random>``),
so a parent that had to kill a worker can remove exactly what that worker left
(:func:`remove_temporaries_of`). An ``OSError`` raised while a temporary was
written names the destination the user asked for, never the temporary.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

#: Marker between a destination's name and the random part of its temporary name.
TMP_MARKER = ".tmp-"
#: errno values of a full or size-limited file system (an OSError without a file name is then a write's).
_WRITE_FAULTS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO}


def temporary_prefix(name: str) -> str:
    """The start of a temporary name for the destination ``name``: ``.<name>.tmp-<pid>-``."""
    return f".{name}{TMP_MARKER}{os.getpid()}-"


def write_target(path: str | os.PathLike) -> Path:
    """Where writing ``path`` really goes: the target of a symbolic link, else ``path`` itself."""
    path = Path(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def name_destination(exc: BaseException, temporaries: dict[Path, Path]) -> None:
    """Make the ``OSError`` s in ``exc``'s chain name the destinations, not the temporaries they were written to.

    An error of a file or directory inside a staged temporary directory is renamed likewise; a
    full-disk error that names no file (a ``write`` on an open file) gets the one destination, when
    there is exactly one.

    Args:
        exc: the exception on its way out.
        temporaries: temporary path → destination path (as the user gave it).
    """
    seen = set()
    item: BaseException | None = exc
    while item is not None and id(item) not in seen:
        seen.add(id(item))
        if isinstance(item, OSError):
            for attribute in ("filename", "filename2"):
                name = getattr(item, attribute, None)
                if name is None or isinstance(name, int):
                    continue
                text = os.fsdecode(name)
                for tmp, final in temporaries.items():
                    tmp_text = str(tmp)
                    if text == tmp_text or text.startswith(tmp_text + os.sep):
                        with contextlib.suppress(AttributeError, TypeError):
                            setattr(item, attribute, str(final) + text[len(tmp_text):])
                        break
            if item.filename is None and item.errno in _WRITE_FAULTS and len(temporaries) == 1:
                with contextlib.suppress(AttributeError, TypeError):
                    item.filename = str(next(iter(temporaries.values())))
        item = item.__cause__ or item.__context__


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
    asked = Path(path)
    path = write_target(asked)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Keep the real suffixes last: np.savez and pandas pick formats by extension.
    real_suffix = "".join(path.suffixes) if suffix is None else suffix
    tmp: Path | None = None
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=temporary_prefix(path.name), suffix=real_suffix, dir=path.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        # mkstemp creates 0600; give the final file the permissions a plain open() would (umask).
        _default_mode(tmp, directory=False)
        yield tmp
        if durable:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            name_destination(exc, {tmp: asked})
        else:
            name_destination(exc, {path.parent / temporary_prefix(path.name): asked})
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


def remove_temporaries_of(directories: list[str | os.PathLike], pids: list[int]) -> list[Path]:
    """Delete the temporary files and directories that the processes ``pids`` left in ``directories`` (a worker that
    had to be killed mid-write cannot remove its own). Only names :func:`temporary_prefix` gives those pids are touched.

    Returns:
        The paths removed.
    """
    markers = tuple(f"{TMP_MARKER}{pid}-" for pid in pids)
    removed = []
    for directory in dict.fromkeys(Path(d) for d in directories):
        try:
            entries = list(directory.iterdir())
        except OSError:
            continue
        for entry in entries:
            name = entry.name
            if not (is_temporary_name(name) and any(marker in name for marker in markers)):
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
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
        self._asked: dict[Path, Path] = {}

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
        asked = Path(final)
        final = write_target(asked)
        self._ensure_directory(final.parent)
        fd, name = tempfile.mkstemp(prefix=temporary_prefix(final.name), suffix="".join(final.suffixes), dir=final.parent)
        os.close(fd)
        tmp = Path(name)
        _default_mode(tmp, directory=False)
        self._files.append((tmp, final))
        self._asked[tmp] = asked
        return tmp

    def directory(self, final: str | os.PathLike) -> Path:
        """An empty staging directory whose entries are merged into ``final`` (created if missing) on publish."""
        asked = Path(final)
        final = write_target(asked)
        self._ensure_directory(final.parent)
        tmp = Path(tempfile.mkdtemp(prefix=temporary_prefix(final.name), dir=final.parent))
        _default_mode(tmp, directory=True)
        self._directories.append((tmp, final))
        self._asked[tmp] = asked
        return tmp

    def replacement(self, final: str | os.PathLike) -> Path:
        """A new path (nothing there yet) for a directory that replaces ``final`` as a whole on publish."""
        asked = Path(final)
        final = write_target(asked)
        self._ensure_directory(final.parent)
        reserved = Path(tempfile.mkdtemp(prefix=temporary_prefix(final.name), dir=final.parent))
        reserved.rmdir()
        self._replacements.append((reserved, final))
        self._asked[reserved] = asked
        return reserved

    def name_destinations(self, exc: BaseException) -> None:
        """Make ``exc``'s OSErrors name the outputs the user asked for instead of their temporaries."""
        name_destination(exc, dict(self._asked))

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
        self._asked = {}

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
        self._asked = {}


@contextlib.contextmanager
def staged_outputs() -> Iterator[StagedOutputs]:
    """A :class:`StagedOutputs` published when the block ends normally and discarded when it raises."""
    outputs = StagedOutputs()
    try:
        yield outputs
    except BaseException as exc:
        outputs.name_destinations(exc)
        outputs.discard()
        raise
    try:
        outputs.publish()
    except BaseException as exc:
        outputs.name_destinations(exc)
        outputs.discard()
        raise

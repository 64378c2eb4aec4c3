"""Atomic file writes: never leave a half-written output behind.

Every output is written to a temporary name beside its destination (``.<name>.tmp-<pid>-<random><suffixes>``)
and renamed onto it, so a reader sees the old file or the new one, never part of one. A process killed between
the two leaves only the temporary, which :func:`remove_stale_temporaries` deletes at the start of the next run, or
its parent removes (:func:`remove_temporaries_of`). ``durable`` outputs (checkpoints) are fsynced before the
rename and their directory after it. A destination that is a symbolic link is written through (the link stays a
link). An ``OSError`` raised while a temporary was written names the destination the user asked for, and a
temporary name always fits in :data:`NAME_MAX` bytes when the destination's does.

:class:`StagedOutputs` publishes a command's outputs all or nothing: a failure on the way undoes what was done,
so the user's files stay byte for byte what they were. Nothing is published once a stop signal arrived
(:func:`domainpar.errors.stop_received`), even where a library swallowed it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Iterator

from domainpar.errors import DomainparError, MachineFault, interrupt_of, stop_received

#: Marker between a destination's name and the random part of its temporary name.
TMP_MARKER = ".tmp-"
#: Marker of a destination moved aside while a staged output replaces it (restored if publishing fails).
OLD_MARKER = ".old-"
#: errno values of a full or size-limited file system (an OSError without a file name is then a write's).
_WRITE_FAULTS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO}
#: Longest file name, in bytes, of the file systems written to (POSIX NAME_MAX; ext4, xfs, btrfs, NFS, Lustre).
NAME_MAX = 255
#: Characters :mod:`tempfile` adds to a prefix.
_RANDOM_CHARS = 8
#: Longest run of suffixes a temporary name keeps (``.csv.gz``, ``.pt.json``): writers choose formats by them.
_SUFFIX_BYTES = 24


def _fit(name: str, budget: int) -> str:
    """``name`` cut to at most ``budget`` bytes in the file system's encoding (the bytes a name is limited by)."""
    encoded = os.fsencode(name)
    if len(encoded) <= budget:
        return name
    # fsdecode maps any byte string back (surrogate escapes), so a cut inside a character still names the same bytes.
    return os.fsdecode(encoded[: max(budget, 0)])


def temporary_suffix(name: str) -> str:
    """The suffixes a temporary of ``name`` keeps: all of them (``.csv.gz``) while short, else the last (np.savez
    appends ``.npz`` to a name without it), none when even that is long (no writer chooses a format by it)."""
    suffixes = Path(name).suffixes
    kept = ""
    for suffix in reversed(suffixes):
        if len(os.fsencode(suffix + kept)) > _SUFFIX_BYTES:
            break
        kept = suffix + kept
    return kept


def temporary_prefix(name: str, suffix: str = "", marker: str = TMP_MARKER) -> str:
    """The start of a temporary name for the destination ``name``: ``.<name>.tmp-<pid>-``.

    The whole temporary name (this prefix, tempfile's random characters and ``suffix``) fits in
    :data:`NAME_MAX` bytes: a destination whose name is legal (up to 255 bytes) always gets a temporary, its
    name shortened inside the temporary where needed.
    """
    tail = f"{marker}{os.getpid()}-"
    budget = NAME_MAX - 1 - len(tail) - _RANDOM_CHARS - len(os.fsencode(suffix))
    return f".{_fit(name, budget)}{tail}"


def aside_prefix(name: str) -> str:
    """Prefix of the name a replaced destination gets while the new one is put in its place."""
    return temporary_prefix(name, marker=OLD_MARKER)


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
                    if tmp_text.endswith("-") and text.startswith(tmp_text) and os.sep not in text[len(tmp_text):]:
                        # A temporary that could not be created: the key is its prefix (``.<name>.tmp-<pid>-``).
                        with contextlib.suppress(AttributeError, TypeError):
                            setattr(item, attribute, str(final))
                        break
            if item.filename is None and item.errno in _WRITE_FAULTS and len(temporaries) == 1:
                with contextlib.suppress(AttributeError, TypeError):
                    item.filename = str(next(iter(temporaries.values())))
        elif isinstance(item, (DomainparError, MachineFault)) and len(item.args) == 1 and isinstance(item.args[0], str):
            # A worker process's failure comes back as its line: the temporaries it names are renamed in the text.
            text = item.args[0]
            for tmp, final in temporaries.items():
                text = re.sub(re.escape(str(tmp)) + r"(?=$|[\s/:;,'\")])", lambda _match, final=str(final): final, text)
            item.args = (text,)
        item = item.__cause__ or item.__context__


def nearest_existing(path: str | os.PathLike, exists: Callable[[Path], bool] = os.path.lexists) -> tuple[Path, list[Path]]:
    """The nearest of ``path`` (made absolute) and its parents that ``exists`` (default: anything is there, a
    dangling link too), and those below it that do not, deepest first: what creating ``path`` creates."""
    missing = []
    current = Path(path).absolute()
    while not exists(current) and current.parent != current:
        missing.append(current)
        current = current.parent
    return current, missing


def make_parents(path: Path) -> list[Path]:
    """Create the missing parent directories of ``path``; returns them, deepest first (for :func:`remove_empty`)."""
    missing = nearest_existing(path.parent)[1]
    path.parent.mkdir(parents=True, exist_ok=True)
    return missing


def remove_empty(directories: Iterable[str | os.PathLike]) -> None:
    """Remove those of ``directories`` that are empty, deepest first: what a failed write or run created and left.

    A directory with anything in it stays (something else may have been put there meanwhile), and so do its parents.
    """
    for directory in sorted({Path(d) for d in directories}, key=lambda d: len(d.parts), reverse=True):
        with contextlib.suppress(OSError):
            directory.rmdir()


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
def atomic_path(path: str | os.PathLike, durable: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` on success (on error it is removed).

    Args:
        path: the final destination (its suffixes end the temporary name, for writers that pick a format by them).
        durable: fsync the file before the rename and its directory after it.
    """
    asked = Path(path)
    path = write_target(asked)
    created = make_parents(path)
    # Keep the real suffixes last: np.savez and pandas pick formats by extension.
    real_suffix = temporary_suffix(path.name)
    tmp: Path | None = None
    try:
        try:
            fd, tmp_name = tempfile.mkstemp(prefix=temporary_prefix(path.name, real_suffix), suffix=real_suffix, dir=path.parent)
        except FileNotFoundError:
            # Another writer's failure removed the directory it had created for both of us: create it again.
            created += make_parents(path)
            fd, tmp_name = tempfile.mkstemp(prefix=temporary_prefix(path.name, real_suffix), suffix=real_suffix, dir=path.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        # mkstemp creates 0600; give the final file the permissions a plain open() would (umask).
        _default_mode(tmp, directory=False)
        yield tmp
        if durable:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        _refuse_after_stop()
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            name_destination(exc, {tmp: asked})
        else:
            name_destination(exc, {path.parent / temporary_prefix(path.name, real_suffix): asked})
        remove_empty(created)
        raise
    if durable:
        fsync_directory(path.parent)


def is_temporary_name(name: str) -> bool:
    """Whether ``name`` is the temporary name :func:`atomic_path` gives (``.<name>.tmp-<random>...``)."""
    return name.startswith(".") and TMP_MARKER in name[1:]


def remove_stale_temporaries(directory: str | os.PathLike, pattern: str | None = None) -> list[Path]:
    """Delete the temporary files that killed writers left in ``directory`` (not recursive).

    Call it only where no other process can be writing them: at the start of a run that owns ``directory``.

    Args:
        directory: a directory that may not exist.
        pattern: regular expression the destination name must match in full, e.g. ``r"step-\\d+\\.pt"``; None: any.

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


def _staged_file(destination: Path) -> Path:
    """A new empty file beside ``destination`` under its temporary name, with the permissions open() would give."""
    suffix = temporary_suffix(destination.name)
    fd, name = tempfile.mkstemp(prefix=temporary_prefix(destination.name, suffix), suffix=suffix, dir=destination.parent)
    os.close(fd)
    tmp = Path(name)
    _default_mode(tmp, directory=False)
    return tmp


def _staged_directory(destination: Path) -> Path:
    """A new empty directory beside ``destination`` under its temporary name, with the permissions mkdir() would give."""
    tmp = Path(tempfile.mkdtemp(prefix=temporary_prefix(destination.name), dir=destination.parent))
    _default_mode(tmp, directory=True)
    return tmp


def _default_mode(path: Path, directory: bool) -> None:
    """Give a staged file or directory the permissions a plain open()/mkdir() would (mkstemp/mkdtemp use 0600/0700)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if directory else 0o666) & ~umask)


class StagedOutputs:
    """Everything one command writes, staged beside its destinations and published together: all or nothing.

    A command that fails half way must not leave the first half of its outputs behind. :meth:`publish` renames
    them all into place, :meth:`discard` removes them and every directory this object created. Use
    :func:`staged_outputs`.
    """

    def __init__(self) -> None:
        self._files: list[tuple[Path, Path]] = []
        self._directories: list[tuple[Path, Path]] = []
        self._created: list[Path] = []
        self._asked: dict[Path, Path] = {}

    def _ensure_directory(self, directory: Path) -> None:
        for path in reversed(nearest_existing(directory)[1]):
            path.mkdir()
            self._created.append(path)

    def _stage(self, final: str | os.PathLike, staged: list[tuple[Path, Path]], make: Callable[[Path], Path]) -> Path:
        """A temporary made by ``make(destination)`` beside ``final`` (or its link's target), noted in ``staged``."""
        asked = Path(final)
        destination = write_target(asked)
        self._ensure_directory(destination.parent)
        tmp = make(destination)
        staged.append((tmp, destination))
        self._asked[tmp] = asked
        return tmp

    def file(self, final: str | os.PathLike) -> Path:
        """A temporary path for the file ``final`` (its suffixes kept, for writers that choose a format by them)."""
        return self._stage(final, self._files, _staged_file)

    def directory(self, final: str | os.PathLike) -> Path:
        """An empty staging directory whose entries are merged into ``final`` (created if missing) on publish."""
        return self._stage(final, self._directories, _staged_directory)

    def _moves(self) -> list[tuple[Path, Path]]:
        """(staged, destination) of every rename that publishes the outputs, each destination once."""
        moves = []
        for tmp, final in self._directories:
            if not final.exists():
                moves.append((tmp, final))
                continue
            if not final.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(final))
            moves += [(entry, final / entry.name) for entry in sorted(tmp.iterdir())]
        moves += list(self._files)
        return moves

    def publish(self) -> None:
        """Put every staged output in place, all or nothing (nothing once a stop signal arrived: see below).

        Every destination that exists is first moved aside (beside it), then every staged output is renamed onto
        its name, and only then are the old ones removed. A rename that fails undoes the renames before it.
        """
        _refuse_after_stop()
        moves = self._moves()
        for staged, destination in moves:
            # A file never replaces a directory (or the other way round): that is not "a newer version of it".
            if os.path.lexists(destination) and staged.is_dir() != (destination.is_dir() and not destination.is_symlink()):
                code = errno.EISDIR if destination.is_dir() else errno.ENOTDIR
                raise OSError(code, os.strerror(code), str(destination))
        aside: list[tuple[Path, Path]] = []
        placed: list[tuple[Path, Path]] = []
        try:
            for _, destination in moves:
                if os.path.lexists(destination):
                    aside.append((_move_aside(destination), destination))
            for staged, destination in moves:
                os.rename(staged, destination)
                placed.append((staged, destination))
        except BaseException:
            # Undo in reverse order; what cannot be undone stays where it is (named by the error on its way out).
            for staged, destination in reversed(placed):
                with contextlib.suppress(OSError):
                    os.rename(destination, staged)
            for moved, destination in reversed(aside):
                with contextlib.suppress(OSError):
                    os.rename(moved, destination)
            raise
        for moved, _ in aside:
            if moved.is_dir() and not moved.is_symlink():
                shutil.rmtree(moved, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    moved.unlink()
        for tmp, final in self._directories:
            if tmp.is_dir():
                with contextlib.suppress(OSError):
                    tmp.rmdir()
        self._files, self._directories, self._created = [], [], []
        self._asked = {}

    def discard(self) -> None:
        """Remove every staged output and every directory created for them; destinations stay untouched."""
        for tmp, _ in self._files:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        for tmp, _ in self._directories:
            shutil.rmtree(tmp, ignore_errors=True)
        remove_empty(self._created)
        self._files, self._directories, self._created = [], [], []
        self._asked = {}


def _refuse_after_stop() -> None:
    """An output is not published once the command was told to stop, even where a library swallowed the signal
    and the command carried on: the interrupt is raised instead (the temporaries are removed on its way out)."""
    interrupt = interrupt_of(Exception()) if stop_received() is not None else None
    if interrupt is not None:
        raise interrupt


def _move_aside(path: Path) -> Path:
    """Rename ``path`` (a file, link or directory) to a new name beside it; returns that name."""
    if path.is_dir() and not path.is_symlink():
        reserved = Path(tempfile.mkdtemp(prefix=aside_prefix(path.name), dir=path.parent))
    else:
        fd, name = tempfile.mkstemp(prefix=aside_prefix(path.name), dir=path.parent)
        os.close(fd)
        reserved = Path(name)
    try:
        os.rename(path, reserved)  # onto the empty placeholder: a file onto a file, a directory onto an empty one
    except BaseException:
        with contextlib.suppress(OSError):
            reserved.rmdir() if reserved.is_dir() else reserved.unlink()
        raise
    return reserved


@contextlib.contextmanager
def staged_outputs() -> Iterator[StagedOutputs]:
    """A :class:`StagedOutputs` published when the block ends normally and discarded when it raises."""
    outputs = StagedOutputs()
    try:
        yield outputs
        outputs.publish()
    except BaseException as exc:
        name_destination(exc, dict(outputs._asked))  # the outputs the user asked for, not their temporaries
        outputs.discard()
        raise

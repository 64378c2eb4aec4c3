"""Where the libraries keep what they cache on disk: the configured directory, else a private temporary one.

numba writes every ``@njit(cache=True)`` kernel to disk when it is first compiled and looks for a directory it
can write when the kernel is *defined*, at import: ``NUMBA_CACHE_DIR``, else the ``__pycache__`` beside the
source, else ``~/.cache/numba``. Where none can be written (a read-only installation with a read-only ``HOME``)
the import itself fails ("cannot cache function ...: no locator available"). matplotlib, given a ``HOME`` it
cannot write, prints two warnings in every process that plots.

:func:`settle` runs before the first cached kernel is defined (the ``__init__`` of each package in
:data:`CACHED_PACKAGES`) and before a command starts any process. When numba's configured directory cannot be
written, numba is pointed at a temporary directory of this user's, one line on stderr says so, and the choice is
exported in ``NUMBA_CACHE_DIR``, so workers and ranks inherit it and stay silent. matplotlib's directory gets the
same treatment through ``MPLCONFIGDIR``, silently. The temporary directories have a fixed name per user (a
requeued job finds its kernels compiled); one that another user owns or others may write is never used (numba
unpickles what it finds there).
"""

from __future__ import annotations

import multiprocessing
import os
import stat
import sys
import tempfile
from pathlib import Path

from domainpar.errors import MachineFault

#: Sub-packages of ``domainpar`` whose modules define ``@njit(cache=True)`` kernels (their ``__init__`` calls
#: :func:`settle`; a test keeps this list complete).
CACHED_PACKAGES = ("data", "kernels", "tracks")

#: Start of the line that says numba's configured directory was not used.
NOTICE = "domainpar: numba's kernel cache"

#: The numba cache directory chosen by the first :func:`settle` of this process ("" when the configured one is
#: used); empty before.
_chosen: list[str] = []
#: The notice line not printed yet (held while the command line parses a command's options).
_pending: list[str] = []
_held = [False]


def _why_unwritable(directory: str | os.PathLike) -> str | None:
    """Why nothing can be cached in ``directory`` (None when it can): numba's own test, made first."""
    try:
        os.makedirs(directory, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()
    except OSError as exc:
        return (exc.strerror or type(exc).__name__).lower()
    return None


def _creatable(path: str | os.PathLike) -> bool:
    """Whether ``path`` is, or could be made as, a directory this process may write (matplotlib's test; nothing is
    made: a command that never plots leaves no directory in ``HOME``)."""
    path = Path(path)
    while not os.path.lexists(path) and path.parent != path:
        path = path.parent
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def _own_private(path: str) -> bool:
    """Whether ``path`` is a real directory of this user's that nobody else may write."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    mine = not hasattr(os, "getuid") or info.st_uid == os.getuid()
    return stat.S_ISDIR(info.st_mode) and mine and not info.st_mode & 0o022


def _temporary(name: str) -> str:
    """This user's private directory ``<tmp>/domainpar-<name>-<uid>`` (made if needed, a fresh one if it is not
    usable).

    Raises:
        OSError: no temporary directory can be written.
    """
    user = os.getuid() if hasattr(os, "getuid") else os.getpid()
    path = os.path.join(tempfile.gettempdir(), f"domainpar-{name}-{user}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        path = ""
    if path and _own_private(path) and _why_unwritable(path) is None:
        return path
    return tempfile.mkdtemp(prefix=f"domainpar-{name}-")


def _quiet() -> bool:
    """A worker or rank whose parent, or the first rank of its node (torchrun, srun), speaks for it."""
    if multiprocessing.parent_process() is not None:
        return True
    return any(os.environ.get(name, "0") not in ("", "0") for name in ("LOCAL_RANK", "SLURM_LOCALID"))


def _numba_configured() -> list[tuple[str, str]]:
    """The directories numba is configured to write, as ``(how a message names it, path)``."""
    given = os.environ.get("NUMBA_CACHE_DIR")
    if given:
        return [(f"NUMBA_CACHE_DIR {given}", given)]
    package = os.path.dirname(os.path.abspath(__file__))
    return [(path, path) for path in (os.path.join(package, name, "__pycache__") for name in CACHED_PACKAGES)]


def _settle_numba() -> str:
    if os.environ.get("NUMBA_DISABLE_JIT") == "1":  # nothing is compiled, nothing cached
        return ""
    blocked = next(((name, why) for name, path in _numba_configured() if (why := _why_unwritable(path)) is not None), None)
    if blocked is None:
        return ""
    name, why = blocked
    try:
        fallback = _temporary("numba-cache")
    except OSError as exc:
        raise MachineFault(
            f"{NOTICE}: {name} cannot be written ({why}), nor can a temporary directory "
            f"({(exc.strerror or type(exc).__name__).lower()}); set NUMBA_CACHE_DIR to a writable directory"
        ) from None
    os.environ["NUMBA_CACHE_DIR"] = fallback  # inherited: workers and ranks find it writable, silently
    config = sys.modules.get("numba.core.config")
    if config is not None:  # numba was imported first (by the caller, or another library): it read the old value
        config.CACHE_DIR = fallback
    if not _quiet():
        _pending.append(f"{NOTICE}: {name} cannot be written ({why}); compiled kernels go to {fallback} "
                        "(set NUMBA_CACHE_DIR to a writable directory to keep them elsewhere)")  # fmt: skip
    return fallback


def _settle_matplotlib() -> None:
    """``MPLCONFIGDIR`` → a private temporary directory when matplotlib's own cannot be written (it would warn)."""
    if "matplotlib" in sys.modules:
        return  # it chose already
    given = os.environ.get("MPLCONFIGDIR")
    if given:
        wanted = [given]
    elif sys.platform.startswith(("linux", "freebsd")):
        try:
            home = Path.home()
        except RuntimeError:  # no home directory at all
            wanted = [os.path.join(os.sep, "nonexistent", "home")]
        else:
            config = os.environ.get("XDG_CONFIG_HOME") or home / ".config"
            cache = os.environ.get("XDG_CACHE_HOME") or home / ".cache"
            wanted = [os.path.join(config, "matplotlib"), os.path.join(cache, "matplotlib")]
    else:
        return  # matplotlib's choices elsewhere are its own
    if all(_creatable(path) for path in wanted):
        return
    try:
        os.environ["MPLCONFIGDIR"] = _temporary("matplotlib")
    except OSError:
        pass  # matplotlib then says so itself


def settle() -> str:
    """Make sure numba and matplotlib can write their caches (see the module docstring).

    Idempotent: only the first call of a process looks.

    Returns:
        numba's cache directory when the configured one could not be written, else "".

    Raises:
        MachineFault: neither numba's configured directory nor a temporary one can be written.
    """
    if not _chosen:
        _settle_matplotlib()
        _chosen.append(_settle_numba())
    if _pending and not _held[0]:
        print(_pending.pop(), file=sys.stderr)
    return _chosen[0]


def hold_notice(held: bool = True) -> None:
    """Hold the notice back while the command line parses (``--help`` or a usage error never prints it, although
    a command's module may import the kernels); the command's own :func:`settle` prints it."""
    _held[0] = held


__all__ = ["CACHED_PACKAGES", "NOTICE", "hold_notice", "settle"]

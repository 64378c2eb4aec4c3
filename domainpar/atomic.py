"""Atomic file writes: never leave a half-written output behind."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` on success.

    The temporary file lives in the same directory so that the final
    ``os.replace`` is atomic on POSIX file systems. On error it is removed and
    ``path`` is untouched.

    Args:
        path: the final destination.
        suffix: suffix for the temporary name (defaults to the destination's,
            so writers that pick a format by extension still work).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Keep the real suffixes last: np.savez and pandas pick formats by extension.
    real_suffix = "".join(path.suffixes) if suffix is None else suffix
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.tmp-", suffix=real_suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    # mkstemp creates 0600; give the final file the permissions a plain open() would (umask).
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise

"""A read-only installation runs: numba's kernel cache (and matplotlib's) fall back to a private temporary directory.

Issue 41 item 6: with the package on an immutable path (CVMFS), ``HOME`` and ``NUMBA_CACHE_DIR`` read-only, importing
a kernel module raised ``RuntimeError: cannot cache function 'karimaki': no locator available`` (the fallback looked
at one ``__pycache__`` only and only when ``NUMBA_CACHE_DIR`` was unset), and the commands blamed it on the events
or on ``--model``.

"Read-only" is made so that it holds for root too (CI containers): each directory is chmod'ed read-only *and* has
a plain file where its ``__pycache__`` would go, and ``NUMBA_CACHE_DIR`` and ``HOME`` lie below a plain file.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import domainpar
from domainpar import caches
from domainpar.errors import MachineFault

_PACKAGE = Path(domainpar.__file__).resolve().parent

#: Imports the kernel module of the issue's traceback and a cached kernel of the other package, compiles and runs one
#: kernel, and starts a spawned child that imports the kernels too (it must stay silent).
_CHILD = textwrap.dedent(
    """
    import importlib, multiprocessing, os

    if __name__ == "__main__":
        import domainpar.kernels.track_fit, domainpar.tracks.ambiguity  # noqa: F401,E401
        from domainpar.kernels.segments import _wrap_angle
        assert abs(_wrap_angle(4.0) - (4.0 - 2 * 3.141592653589793)) < 1e-12
        process = multiprocessing.get_context("spawn").Process(target=importlib.import_module,
                                                               args=("domainpar.kernels.segments",))
        process.start()
        process.join()
        assert process.exitcode == 0, process.exitcode
        print(os.environ["NUMBA_CACHE_DIR"])
    """
)


def _read_only_copy(root: Path) -> Path:
    """A copy of the package that nobody can write into, root included; the directory to put on ``sys.path``."""
    site = root / "site"
    shutil.copytree(_PACKAGE, site / "domainpar", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for directory in [site, *(p for p in site.rglob("*") if p.is_dir())]:
        (directory / "__pycache__").write_text("")
    for path in [site, *site.rglob("*")]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return site


def _writable_again(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


@pytest.mark.timeout(120)
def test_a_read_only_installation_compiles_into_a_temporary_cache_and_says_so_once(tmp_path):
    site = _read_only_copy(tmp_path)
    (tmp_path / "blocker").write_text("")
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "HOME": str(tmp_path / "blocker" / "home"),
           "NUMBA_CACHE_DIR": str(tmp_path / "blocker" / "numba"), "TMPDIR": str(tmp_path / "tmp"),
           "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    env.pop("MPLCONFIGDIR", None)
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=100)  # fmt: skip
    finally:
        _writable_again(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    fallback = Path(done.stdout.strip().splitlines()[-1])
    assert fallback.parent == tmp_path / "tmp" and fallback.name.startswith("domainpar-numba-cache-")
    notices = [line for line in done.stderr.splitlines() if line.strip()]
    assert notices == [
        f"{caches.NOTICE}: NUMBA_CACHE_DIR {tmp_path}/blocker/numba cannot be written (not a directory); compiled "
        f"kernels go to {fallback} (set NUMBA_CACHE_DIR to a writable directory to keep them elsewhere)"
    ], done.stderr[-3000:]
    assert list(fallback.glob("kernels_*/segments._wrap_angle-*.nbi"))  # the kernel went to the fallback's cache
    assert oct(fallback.stat().st_mode & 0o777) == "0o700"


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """:func:`caches.settle` as in a new process, with the temporary directory under ``tmp_path``."""
    monkeypatch.setattr(caches, "_chosen", [])
    monkeypatch.setattr(caches, "_pending", [])
    monkeypatch.setattr(caches, "_held", [False])
    monkeypatch.setattr(caches, "_settle_matplotlib", lambda: None)
    monkeypatch.setattr(caches.tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    (tmp_path / "blocker").write_text("")
    numba_config = sys.modules.get("numba.core.config")
    if numba_config is not None:  # settle() re-points an imported numba: put it back after the test
        monkeypatch.setattr(numba_config, "CACHE_DIR", numba_config.CACHE_DIR)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "blocker" / "numba"))
    monkeypatch.delenv("NUMBA_DISABLE_JIT", raising=False)
    for name in ("LOCAL_RANK", "SLURM_LOCALID"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_a_writable_configured_directory_is_used_silently(fresh, monkeypatch, capsys):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(fresh / "cache"))
    assert caches.settle() == "" and os.environ["NUMBA_CACHE_DIR"] == str(fresh / "cache")
    assert capsys.readouterr().err == ""


def test_the_fallback_is_private_exported_and_announced_once(fresh, capsys):
    fallback = caches.settle()
    assert fallback == str(fresh / "tmp" / f"domainpar-numba-cache-{os.getuid()}")
    assert os.environ["NUMBA_CACHE_DIR"] == fallback  # what workers and ranks inherit
    numba_config = sys.modules.get("numba.core.config")
    assert numba_config is None or numba_config.CACHE_DIR == fallback
    assert caches.settle() == fallback
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"{caches.NOTICE}: NUMBA_CACHE_DIR {fresh}/blocker/numba cannot be written")


def test_a_fallback_others_may_write_is_not_used(fresh):
    # Someone else's (or a world-writable) directory of that name may hold planted cache files numba would unpickle.
    planted = fresh / "tmp" / f"domainpar-numba-cache-{os.getuid()}"
    planted.mkdir(mode=0o777)
    planted.chmod(0o777)
    fallback = Path(caches.settle())
    assert fallback != planted and fallback.parent == fresh / "tmp" and fallback.stat().st_mode & 0o077 == 0


def test_the_notice_is_held_while_the_command_line_parses_and_left_to_a_workers_parent(fresh, monkeypatch, capsys):
    caches.hold_notice()
    caches.settle()  # a command's module imported the kernels while its options were parsed
    assert capsys.readouterr().err == ""
    caches.hold_notice(False)
    caches.settle()  # the command runs
    assert capsys.readouterr().err.startswith(caches.NOTICE)
    monkeypatch.setattr(caches, "_chosen", [])
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(fresh / "blocker" / "numba"))
    monkeypatch.setenv("LOCAL_RANK", "3")  # a torchrun rank: the node's rank 0 says it
    caches.settle()
    assert capsys.readouterr().err == ""


def test_no_writable_directory_at_all_is_one_line_of_the_machine(fresh, monkeypatch):
    monkeypatch.setattr(caches.tempfile, "tempdir", str(fresh / "blocker" / "tmp"))
    with pytest.raises(MachineFault, match=rf"^{re.escape(caches.NOTICE)}: NUMBA_CACHE_DIR .* cannot be written "
                                           r"\(not a directory\), nor can a temporary directory \(.*\); set NUMBA_CACHE_DIR"):  # fmt: skip
        caches.settle()


def test_an_unwritable_matplotlib_directory_goes_to_a_private_temporary_one(monkeypatch, tmp_path):
    monkeypatch.setattr(caches.tempfile, "tempdir", str(tmp_path))
    monkeypatch.delitem(sys.modules, "matplotlib", raising=False)
    monkeypatch.delenv("MPLCONFIGDIR", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    caches._settle_matplotlib()
    assert "MPLCONFIGDIR" not in os.environ  # a writable HOME: matplotlib's own choice
    (tmp_path / "home" / ".cache").write_text("")  # ~/.cache cannot become a directory
    caches._settle_matplotlib()
    assert os.environ["MPLCONFIGDIR"] == str(tmp_path / f"domainpar-matplotlib-{os.getuid()}")


def test_every_package_with_cached_kernels_settles_before_defining_them():
    """A module with ``cache=True`` kernels in a package that does not settle first fails to import on a read-only
    installation (the class of the issue's ``karimaki``)."""
    decorator = re.compile(r"^\s*@(numba\.)?n?jit\([^)]*\bcache\s*=\s*True", re.MULTILINE)
    cached = {path.parent for path in _PACKAGE.rglob("*.py") if decorator.search(path.read_text())}
    assert {path.relative_to(_PACKAGE).as_posix() for path in cached} <= set(caches.CACHED_PACKAGES)
    for name in caches.CACHED_PACKAGES:
        assert "_settle_caches()" in (_PACKAGE / name / "__init__.py").read_text(), name

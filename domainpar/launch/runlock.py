"""One writer per output directory: ``<out>/train.lock`` names the run that holds it.

Two trainings writing one ``--out`` interleave checkpoints, logs and ``model.pt``. The lock is a file created with
``O_CREAT | O_EXCL`` (atomic on local and NFS file systems) holding the holder's host, pid, start time and command
line. A second run on the same ``--out`` is refused with one line naming the holder. A lock whose holder is known
dead (taken on this host before its last reboot, or on this very machine by a pid no longer running, or running
but started later) is stale: it is named on stderr and taken over. A lock held from another host or pid namespace
cannot be checked from here: the run is refused and the line says how to clear it if that run is dead.

The lock is removed when the run ends (also on errors); a SIGKILLed holder leaves it behind, which the next run
detects as stale.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from domainpar.atomic import nearest_existing, remove_empty
from domainpar.comm.watchdog import process_gone, process_identity, same_machine
from domainpar.errors import DomainparError

#: Name of the lock file inside ``--out``.
LOCK_NAME = "train.lock"


def _describe(holder: dict) -> str:
    since = holder.get("since")
    when = time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(since)) if isinstance(since, (int, float)) else ""
    command = holder.get("command")
    started = f", started as {command!r}" if command else ""
    return f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}{when}{started}"


def _read_holder(path: Path) -> dict | None:
    """The lock's content, {} when it is unreadable or torn, None when it is gone."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return {}
    try:
        holder = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return {}  # unreadable like a torn file: the lock is then judged by its holder's liveness alone
    return holder if isinstance(holder, dict) else {}


def _why_gone(holder: dict, me: dict) -> str | None:
    """Why the holder of a readable lock is known dead ("" for an unreadable lock's), None when it may be alive.

    Its host rebooted since it was taken (same host, another boot id: no process of that boot runs), or it ran on
    this very machine (same boot and pid namespace) and its pid is gone or now another process's.
    """
    if not holder:
        return ""
    if not all(key in holder for key in ("host", "pid")) or holder["host"] != me["host"]:
        return None
    boot = holder.get("boot")
    if isinstance(boot, str) and boot and me["boot"] and boot != me["boot"]:
        return f"host {me['host']} has rebooted since"
    if not all(key in holder for key in ("boot", "pidns")) or not same_machine(holder, me):
        return None  # another pid namespace (a container) of this host: its pid cannot be looked up from here
    try:
        return "that process is gone" if process_gone(holder) else None
    except (TypeError, ValueError):
        return None


def _create(path: Path, me: dict) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(me, fh)
        fh.flush()
        os.fsync(fh.fileno())
    return True


@dataclass(frozen=True)
class RunLock:
    """A held lock."""

    path: Path
    created: tuple[Path, ...]
    """Directories created to hold it, deepest first (removed on release if the run left them empty)."""


def acquire(out: str | os.PathLike, option: str = "--out", name: str = LOCK_NAME, what: str = "training run") -> RunLock:
    """Take the lock of ``out`` (created if needed) or raise.

    ``name`` is the lock file's name in ``out`` and ``what`` the kind of run in messages (``domainpar reconstruct``
    holds ``reconstruct.lock``, a "reconstruction").

    Raises:
        DomainparError: another live run holds it, or it is held from another host.
    """
    directory = Path(out)
    created = nearest_existing(directory)[1]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    me = {**process_identity(), "since": time.time(), "command": " ".join(sys.argv)[:300]}
    try:
        _take(path, me, directory, option, what)
    except BaseException:
        remove_empty(created)
        raise
    return RunLock(path, tuple(created))


def _take(path: Path, me: dict, directory: Path, option: str, what: str) -> None:
    for _ in range(5):
        if _create(path, me):
            return
        holder = _read_holder(path)
        if holder is None:
            continue  # released between our attempt and the read
        why = _why_gone(holder, me)
        if why is None:
            if holder.get("host") != me["host"]:
                where = f"host {me['host']}"
            elif holder.get("pidns") not in (None, me["pidns"]):
                where = "this process's pid namespace (a container of the same host?)"
            else:
                where = None
            if where is not None:
                raise DomainparError(
                    f"{option} {directory}: another {what} holds {path} ({_describe(holder)}); "
                    f"it cannot be checked from {where}: if that run is dead, delete the lock file"
                )
            raise DomainparError(
                f"{option} {directory}: another {what} is writing there ({_describe(holder)}); "
                f"wait for it, stop it, or choose another {option}"
            )
        if not holder:
            # Unreadable or torn (its writer died mid-write): only stale if it stays so for a moment.
            time.sleep(0.2)
            if _read_holder(path) != {}:
                continue
        # Stale: move it aside under a name of our own (only one contender's rename succeeds), then create.
        aside = path.with_name(f".{path.name}.stale-{os.getpid()}")
        try:
            os.replace(path, aside)
        except FileNotFoundError:
            continue
        taken = _read_holder(aside)
        if taken != holder:
            # We moved a lock newer than the one we judged stale: put it back (unless yet another run took the
            # name meanwhile) and judge again.
            with contextlib.suppress(OSError):
                os.link(aside, path)
            aside.unlink(missing_ok=True)
            continue
        aside.unlink(missing_ok=True)
        described = _describe(holder) if holder else "an unreadable lock"
        print(f"domainpar: {path}: taking over the stale lock of {described} ({why or 'its writer died mid-write'})",
              file=sys.stderr)  # fmt: skip
    raise DomainparError(f"{option} {directory}: could not take {path}: other runs keep taking it; try again")


def release(lock: RunLock) -> None:
    """Remove the lock if it is still this process's, and the directories it created if the run left them empty.

    A run refused on its inputs so leaves no ``--out`` behind.
    """
    holder = _read_holder(lock.path)
    if holder and holder.get("pid") == os.getpid() and holder.get("host") == process_identity()["host"]:
        lock.path.unlink(missing_ok=True)
    remove_empty(lock.created)


@contextlib.contextmanager
def run_lock(out: str | os.PathLike, option: str = "--out", name: str = LOCK_NAME, what: str = "training run") -> Iterator[RunLock]:
    """Hold the lock of ``out`` for the duration of the block."""
    lock = acquire(out, option, name, what)
    try:
        yield lock
    finally:
        release(lock)


__all__ = ["LOCK_NAME", "RunLock", "acquire", "release", "run_lock"]

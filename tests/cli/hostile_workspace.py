"""Shared inputs and a strict runner for the hostile-input tests of every command.

A :class:`Base` holds one small valid set of inputs (a TrackML event as plain
CSV, its graph, a plan, a trained checkpoint, a perfect submission), made once
per test module with the real commands. A :class:`Workspace` gives one case its
own directory and helpers that copy a base input with one hostile change.
:func:`run_clean` runs ``domainpar`` in-process and reports every way the
answer falls short of the standard: exit status 2, exactly one ``error:``
line on stderr, no traceback, no warning, no file created, changed or left
half-written anywhere in the case's directory (or in the base inputs).

Everything here goes through the command line and plain file formats only, so
the corpus runs unchanged against any version of the package (that is how the
before/after figure of issue 12 was measured).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import shutil
import struct
import sys
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

REAL_EVENT = Path(__file__).resolve().parents[1] / "data" / "trackml" / "event000000001"
EVENT_NAME = "event000000001"
PARTS = ("hits", "cells", "particles", "truth")
#: Longest acceptable error line (paths of pytest's tmp directories included).
MAX_LINE = 700
#: Flags that make any training tiny.
TINY_TRAIN = ("--mode", "single", "--hidden", "4", "--iterations", "1", "--epochs", "1", "--no-progress", "--no-curves")


# ----------------------------------------------------------------------------- running


@dataclass
class Outcome:
    """What one in-process run of ``domainpar`` did."""

    code: int
    stdout: str
    stderr: str
    warnings: list[str]
    traceback: str | None


def _stderr_lines(text: str) -> list[str]:
    """Non-empty stderr lines, progress-bar redraws (tqdm, ``\\r``-separated, ``%|``) left out."""
    lines = [line for line in text.replace("\r", "\n").splitlines() if line.strip()]
    return [line for line in lines if "%|" not in line and not line.rstrip().endswith("it/s]")]


def run_main(argv: list[str]) -> Outcome:
    """Run ``domainpar argv`` in this process: exit status, streams, warnings a user would see."""
    from domainpar.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    code, trace = 0, None
    with warnings.catch_warnings(record=True) as caught:
        # What a user sees: Python's default filters (deprecations are hidden outside __main__).
        warnings.resetwarnings()
        warnings.simplefilter("always")
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning, FutureWarning):
            warnings.simplefilter("ignore", category)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main([str(a) for a in argv])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:  # noqa: BLE001 - a traceback is exactly what the corpus looks for
                trace = traceback.format_exc()
                code = 1
    return Outcome(code, out.getvalue(), err.getvalue(), [f"{w.category.__name__}: {w.message}" for w in caught], trace)


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` with its kind, size, mtime and content hash."""
    state = {}
    if not root.exists():
        return state
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            state[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            state[rel] = ("dir",)
        else:
            stat = path.stat()
            state[rel] = ("file", stat.st_size, stat.st_mtime_ns, hashlib.sha1(path.read_bytes()).hexdigest())
    return state


def problems(outcome: Outcome, before: dict, after: dict) -> list[str]:
    """Every way ``outcome`` falls short of "exit 2, one line, no traceback, nothing written"."""
    found = []
    if outcome.traceback is not None:
        found.append(f"traceback: {outcome.traceback.strip().splitlines()[-1][:300]}")
    if "Traceback (most recent call last)" in outcome.stderr:
        found.append("traceback on stderr")
    if outcome.code != 2:
        found.append(f"exit status {outcome.code}")
    lines = _stderr_lines(outcome.stderr)
    if len(lines) != 1:
        found.append(f"{len(lines)} stderr lines: {[line[:160] for line in lines[:6]]}")
    elif not lines[0].startswith("error: "):
        found.append(f"stderr line does not start with 'error: ': {lines[0][:200]!r}")
    elif len(lines[0]) > MAX_LINE:
        found.append(f"error line of {len(lines[0])} characters")
    if outcome.warnings:
        found.append(f"warnings: {outcome.warnings[:3]}")
    created = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    if created:
        found.append(f"created {created[:5]}")
    if removed:
        found.append(f"removed {removed[:5]}")
    if changed:
        found.append(f"changed {changed[:5]}")
    return found


def wrong_reason(outcome: Outcome, expect: str, places: dict[str, str]) -> list[str]:
    """The error line must say ``expect`` (the file or option blamed and why), with ``places`` (path → placeholder)
    written as their placeholders: a case refused for another reason than its own is a failure too."""
    lines = _stderr_lines(outcome.stderr)
    if not lines:
        return []
    line = lines[-1]
    for path, placeholder in sorted(places.items(), key=lambda item: -len(item[0])):
        line = line.replace(path, placeholder)
    if expect not in line:
        return [f"refused for another reason: expected {expect!r} in {line[:400]!r}"]
    return []


# ----------------------------------------------------------------------------- base inputs


@dataclass
class Base:
    """Valid inputs every case starts from (read-only for the cases)."""

    root: Path
    events: Path
    graphs: Path
    unlabelled: Path
    plans: Path
    run: Path
    submission: Path

    @property
    def prefix(self) -> Path:
        return self.events / EVENT_NAME

    @property
    def graph(self) -> Path:
        return self.graphs / f"{EVENT_NAME}.npz"

    @property
    def model(self) -> Path:
        return self.run / "model.pt"

    @property
    def checkpoints(self) -> list[Path]:
        return sorted((self.run / "checkpoints").glob("step-*.pt"))

    @property
    def exported(self) -> Path:
        """The base model exported as TorchScript (its sidecar beside it)."""
        return self.root / "exported" / "model.pt"


def small_event(num_particles: int = 40, num_noise: int = 40) -> dict[str, pd.DataFrame]:
    """A subsample of the real labelled event: the hits of its most-hit particles plus some noise."""
    frames = {part: pd.read_csv(f"{REAL_EVENT}-{part}.csv.gz") for part in PARTS}
    truth = frames["truth"]
    counts = truth.loc[truth.particle_id != 0, "particle_id"].value_counts()
    chosen = set(counts.index[:num_particles])
    keep = truth.particle_id.isin(chosen)
    keep |= (truth.particle_id == 0) & (truth.index.isin(truth.index[truth.particle_id == 0][:num_noise]))
    hit_ids = set(truth.loc[keep, "hit_id"])
    return {
        "hits": frames["hits"][frames["hits"].hit_id.isin(hit_ids)].reset_index(drop=True),
        "cells": frames["cells"][frames["cells"].hit_id.isin(hit_ids)].reset_index(drop=True),
        "particles": frames["particles"][frames["particles"].particle_id.isin(chosen)].reset_index(drop=True),
        "truth": truth[keep].reset_index(drop=True),
    }


def _must(argv: list[str]) -> None:
    outcome = run_main(argv)
    if outcome.code != 0:
        raise RuntimeError(f"building base inputs failed: domainpar {' '.join(map(str, argv))}\n{outcome.stderr}{outcome.traceback}")


def make_base(root: Path) -> Base:
    """Write the valid inputs with the real commands (a few seconds)."""
    events = root / "events"
    events.mkdir(parents=True)
    frames = small_event()
    for part, frame in frames.items():
        frame.to_csv(events / f"{EVENT_NAME}-{part}.csv", index=False)
    hits_only = root / "events_unlabelled"
    hits_only.mkdir()
    frames["hits"].to_csv(hits_only / "event000000002-hits.csv", index=False)
    _must(["build", "--input", events, "--out", root / "graphs", "--quiet"])
    _must(["build", "--input", hits_only, "--out", root / "unlabelled", "--quiet"])
    _must(["partition", "--graph", root / "graphs", "--parts", "2", "--out", root / "plans"])
    _must(["train", "--data", root / "graphs", "--out", root / "run", *TINY_TRAIN, "--epochs", "2", "--keep", "2", "--threads", "1"])
    _must(["export", "--checkpoint", root / "run" / "model.pt", "--format", "torchscript", "--out", root / "exported" / "model.pt"])
    truth = frames["truth"]
    submission = root / "submission.csv"
    # Perfect tracks: one track per particle, noise hits each in a track of their own.
    track = truth["particle_id"].to_numpy().copy()
    noise = track == 0
    track[noise] = -np.arange(1, noise.sum() + 1)
    pd.DataFrame({"hit_id": truth["hit_id"], "track_id": track}).to_csv(submission, index=False)
    return Base(root, events, root / "graphs", root / "unlabelled", root / "plans", root / "run", submission)


# ----------------------------------------------------------------------------- one case's workspace


@dataclass
class Workspace:
    """A case's own directory and helpers that make hostile copies of the base inputs."""

    base: Base
    tmp: Path
    notes: dict[str, Any] = field(default_factory=dict)

    def path(self, *parts: str) -> Path:
        return self.tmp.joinpath(*parts)

    def write(self, name: str, content: bytes | str) -> Path:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            content = content.encode()
        path.write_bytes(content)
        return path

    # ---- TrackML events

    def event(
        self,
        part: str | None = None,
        edit: Callable[[list[list[str]]], list[list[str]] | None] | None = None,
        *,
        raw: bytes | None = None,
        parts: tuple[str, ...] = PARTS,
        name: str = "ev",
    ) -> Path:
        """A copy of the base event in ``<tmp>/<name>/``; ``part`` edited as rows of CSV fields, or replaced by ``raw``."""
        target = self.tmp / name
        target.mkdir(parents=True, exist_ok=True)
        for p in parts:
            source = self.base.events / f"{EVENT_NAME}-{p}.csv"
            destination = target / source.name
            if p != part:
                shutil.copy(source, destination)
                continue
            if raw is not None:
                destination.write_bytes(raw)
                continue
            rows = [line.split(",") for line in source.read_text().splitlines()]
            edited = edit(rows)
            rows = rows if edited is None else edited
            destination.write_text("".join(",".join(row) + "\n" for row in rows))
        return target

    def event_cell(self, part: str, column: str, value: str, row: int = 1, **kwargs) -> Path:
        """The base event with one field replaced by ``value`` (``row`` 1 = the first data row)."""

        def edit(rows):
            rows[row][rows[0].index(column)] = value

        return self.event(part, edit, **kwargs)

    def event_column(self, part: str, column: str, values: Callable[[int, str], str], **kwargs) -> Path:
        """The base event with every value of a column rewritten by ``values(row, old)``."""

        def edit(rows):
            index = rows[0].index(column)
            for i, row in enumerate(rows[1:], start=1):
                row[index] = values(i, row[index])

        return self.event(part, edit, **kwargs)

    # ---- graph files

    def graph_arrays(self) -> dict[str, Any]:
        with np.load(self.base.graph, allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}

    def graph(self, edit: Callable[[dict[str, Any]], None] | None = None, *, raw: bytes | None = None, name: str = "g") -> Path:
        """A copy of the base graph in ``<tmp>/<name>/event000000001.npz`` with ``edit`` applied to its arrays."""
        path = self.tmp / name / f"{EVENT_NAME}.npz"
        path.parent.mkdir(parents=True, exist_ok=True)
        if raw is not None:
            path.write_bytes(raw)
            return path
        arrays = self.graph_arrays()
        if edit is not None:
            edit(arrays)
        with open(path, "wb") as fh:
            np.savez(fh, **arrays)
        return path

    # ---- checkpoints

    def checkpoint(self, edit: Callable[[dict], None] | None = None, *, source: Path | None = None, name: str = "ckpt.pt",
                   reseal: bool = True) -> Path:
        """A copy of a base checkpoint with ``edit`` applied to its dict (re-sealed with a valid checksum when
        the package seals checkpoints and ``reseal``: the case then tests what lies *under* the checksum)."""
        import torch

        source = self.base.model if source is None else source
        state = torch.load(source, map_location="cpu", weights_only=True)
        if edit is not None:
            edit(state)
        if reseal:
            state = seal(state)
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(state, path)
        return path

    def flipped(self, source: Path, count: int = 64, name: str = "flipped.pt", seed: int = 0, region: str = "data") -> Path:
        """A copy of ``source`` with ``count`` bytes inverted (in the tensor data region by default)."""
        data = bytearray(source.read_bytes())
        rng = np.random.default_rng(seed)
        if region == "data":
            # Tensor storages are the large zip entries named .../data/<n>; flip inside the biggest one.
            import zipfile

            with zipfile.ZipFile(source) as archive:
                info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
            # Data follows the *local* header, whose extra field (torch's alignment padding) differs from the central one.
            name_length, extra_length = struct.unpack("<HH", bytes(data[info.header_offset + 26 : info.header_offset + 30]))
            start = info.header_offset + 30 + name_length + extra_length
            positions = start + rng.choice(info.file_size, size=min(count, info.file_size), replace=False)
        else:
            positions = rng.choice(len(data), size=count, replace=False)
        for p in positions:
            data[int(p)] ^= 0xFF
        return self.write(name, bytes(data))

    def run_copy(self, name: str = "run") -> Path:
        """A copy of the base training run (to resume from)."""
        target = self.tmp / name
        shutil.copytree(self.base.run, target)
        return target


def seal(state: dict) -> dict:
    """``state`` with the package's checksum, when this version of the package writes one."""
    try:
        from domainpar.train.checkpoint import seal_state
    except ImportError:
        return state
    return seal_state(state)


# ----------------------------------------------------------------------------- file-system denial


@contextlib.contextmanager
def denied(directory: Path):
    """Make ``directory`` unreadable and unwritable (mode 000) for the duration.

    Root ignores permission bits, so as root the same refusal is produced at
    the system-call boundary instead: every ``os`` call on a path strictly
    inside ``directory`` (and listing or creating in it) fails with EACCES,
    as it does for an ordinary user.
    """
    directory = Path(directory)
    if os.geteuid() != 0:
        mode = directory.stat().st_mode
        os.chmod(directory, 0)
        try:
            yield
        finally:
            os.chmod(directory, mode)
        return
    inside = str(directory.resolve()) + os.sep
    own = str(directory.resolve())

    def blocked(path: Any, self_too: bool) -> bool:
        if isinstance(path, int):
            return False
        try:
            text = os.path.abspath(os.fsdecode(path))
        except TypeError:
            return False
        return text.startswith(inside) or (self_too and text == own)

    def guard(function, self_too: bool):
        def wrapper(path, *args, **kwargs):
            if blocked(path, self_too):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(path))
            return function(path, *args, **kwargs)

        return wrapper

    originals = {name: getattr(os, name) for name in ("stat", "lstat", "open", "mkdir", "scandir", "listdir", "access", "chmod", "unlink", "rmdir")}
    patched = {
        "stat": guard(originals["stat"], False),
        "lstat": guard(originals["lstat"], False),
        "open": guard(originals["open"], False),
        "mkdir": guard(originals["mkdir"], False),
        "scandir": guard(originals["scandir"], True),
        "listdir": guard(originals["listdir"], True),
        "access": guard(originals["access"], False),
        "chmod": guard(originals["chmod"], False),
        "unlink": guard(originals["unlink"], False),
        "rmdir": guard(originals["rmdir"], False),
    }
    for name, function in patched.items():
        setattr(os, name, function)
    try:
        yield
    finally:
        for name, function in originals.items():
            setattr(os, name, function)


def python_has(module: str) -> bool:
    return module in sys.modules or __import__("importlib").util.find_spec(module) is not None


def write_and_wait(rank: int, world_size: int, directory: str) -> int:
    """A spawned rank that is half way through writing a file (inside its atomic writer) when it is stopped."""
    import time

    from domainpar.atomic import atomic_path

    with atomic_path(Path(directory) / f"rank{rank}.bin") as tmp:
        tmp.write_bytes(b"x" * 1000)
        Path(directory, f"writing{rank}").touch()
        time.sleep(120)
    return rank

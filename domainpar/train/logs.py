"""Where a run reports: ``steps.jsonl``, ``metrics.jsonl``, ``curves.png`` and TensorBoard (rank 0 only).

A record is appended as soon as it exists, so a killed run keeps every line it
finished. Every checkpoint also holds the records written before it
(:meth:`RunLogs.history`), so on resume the logs up to the checkpoint are
exactly what the run wrote: lines written after it are dropped (they will be
written again), and a log that lost or garbled a record the checkpoint holds (a
torn line, an edited or truncated file) is rebuilt from the checkpoint and said
on stderr, never read around. A checkpoint of an older domainpar, which records
no logs, resumes only from logs whose records up to it are whole; otherwise the
resume is refused naming the file and the line. The logs of a resumed run so
read as those of an uninterrupted one, and a finished run resumed reports the
figures of its last epoch, not of the last line that happened to parse.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Callable

import torch

from domainpar.atomic import atomic_path
from domainpar.errors import DomainparError
from domainpar.parsing import parse_json
from domainpar.train.checkpoint import STEP_LOG_COLUMNS
from domainpar.train.curves import plot_curves

#: Epoch figures mirrored to TensorBoard (under ``epoch/``).
_TENSORBOARD_EPOCH_KEYS = ("train_loss", "val_loss", "efficiency", "purity", "auc")


def _lines(path: Path) -> list[tuple[int, Any]]:
    """``(line number, record or None when the line is not a whole JSON object)`` of every line of ``path``."""
    if not path.is_file():
        return []
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        text = path.read_bytes().decode("utf-8", "replace")
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            record = parse_json(line, str(path), "JSON lines of run records")
        except (json.JSONDecodeError, DomainparError):
            record = None
        found.append((number, record if isinstance(record, dict) else None))
    return found


def write_jsonl(path: Path, records: list[dict]) -> None:
    """Replace ``path`` with ``records``, one JSON object per line (atomically)."""
    with atomic_path(path) as tmp:
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records))


def _step_record(step: int, row: list[float]) -> dict[str, Any]:
    """The ``steps.jsonl`` record of step ``step`` from its row of a checkpoint's ``logs.steps``."""
    record: dict[str, Any] = {"step": step}
    for name, value in zip(STEP_LOG_COLUMNS, row):
        record[name] = int(value) if name == "epoch" else float(value)
    return record


def _damage(path: Path, expected: list[dict]) -> str | None:
    """What is wrong with ``path``'s first ``len(expected)`` lines (None: they are exactly ``expected``)."""
    found = _lines(path)
    if not path.is_file():
        return "the file is missing" if expected else None
    for index, want in enumerate(expected):
        if index >= len(found):
            return f"it ends after {len(found)} of the {len(expected)} records" if found else "it is empty"
        number, record = found[index]
        if record is None:
            return f"line {number} is not a whole JSON record (torn or edited)"
        if json.dumps(record) != json.dumps(want):
            return f"line {number} differs from what the run wrote"
    return None


def _needed_lines(path: Path, keep: Callable[[dict], bool], key: str, wanted: list[int], source: Path | None) -> list[dict]:
    """The records of ``path`` a resume keeps, when its checkpoint records no logs (an older domainpar's).

    Raises:
        DomainparError: a line before the last kept record is damaged, or a record the resume needs is missing.
    """
    found = _lines(path)
    kept = [(number, record) for number, record in found if record is not None and keep(record)]
    last = kept[-1][0] if kept else 0
    torn = [number for number, record in found if record is None and number <= last]
    missing = sorted(set(wanted) - {record.get(key) for _, record in kept})
    if torn or missing:
        what = f"line {torn[0]} is not a whole JSON record (torn or edited)" if torn else f"it has no record of {key} {missing[0]}"
        raise DomainparError(
            f"{path}: expected the records of the run up to its checkpoint {source}, but {what}, and the checkpoint "
            "records no logs to rebuild them from (written by an older domainpar); restore the file, or train into a new --out"
        )
    return [record for _, record in kept]


def check_resumable_logs(out: Path, resumed_at: tuple[int, int], source: Path | None) -> tuple[list[dict], list[dict]]:
    """Before a resume from a checkpoint that records no logs (an older domainpar's) trains a step: its logs must
    hold every record up to it, whole. Reads, writes nothing; returns the ``metrics.jsonl`` and ``steps.jsonl``
    records the resume keeps.

    Raises:
        DomainparError: naming the log file and its first damaged line or missing record.
    """
    step, epoch = resumed_at
    metrics = _needed_lines(out / "metrics.jsonl", lambda r: r.get("epoch", 0) <= epoch, "epoch",
                            list(range(1, epoch + 1)), source)  # fmt: skip
    steps = _needed_lines(out / "steps.jsonl", lambda r: r.get("step", 0) <= step, "step",
                          list(range(1, step + 1)), source)  # fmt: skip
    return metrics, steps


class RunLogs:
    """The log sinks of one run directory.

    Args:
        out: the run directory (exists).
        curves: redraw ``curves.png`` after every epoch.
        tensorboard: also write TensorBoard scalars under ``out/tensorboard``.
    """

    def __init__(self, out: Path, *, curves: bool, tensorboard: bool) -> None:
        self.out = out
        self.steps_path = out / "steps.jsonl"
        """One record per optimiser step."""
        self.metrics_path = out / "metrics.jsonl"
        """One record per epoch (or per validation of a partial epoch)."""
        self.curves = curves
        self.tensorboard = tensorboard
        self._writer = None
        self.metrics: list[dict] = []
        """The ``metrics.jsonl`` records of the run so far."""
        self.steps: list[dict] = []
        """The ``steps.jsonl`` records of the run so far."""

    def start(self, resumed_at: tuple[int, int] | None, global_step: int, history: dict | None = None,
              source: Path | None = None) -> None:  # fmt: skip
        """Open the sinks: fresh logs, or on a resume the logs up to ``resumed_at = (step, epoch)``.

        Args:
            resumed_at: the checkpoint's (step, epoch), or None for a new run.
            global_step: the step the run continues from (TensorBoard purges later events).
            history: the checkpoint's ``logs`` (:meth:`history` when it was written); the logs are rebuilt from it
                where they differ. None: a checkpoint that records none (its logs are kept if whole up to it).
            source: the checkpoint, for messages.

        Raises:
            DomainparError: without ``history``, a log that lost a record the resume needs.
        """
        self.metrics, self.steps = [], []
        if resumed_at is None:
            for path in (self.metrics_path, self.steps_path):
                path.unlink(missing_ok=True)
        elif history is not None:
            self.metrics = [dict(r) for r in history["metrics"]]
            self.steps = [_step_record(i + 1, row) for i, row in enumerate(history["steps"].tolist())]
            for path, records in ((self.metrics_path, self.metrics), (self.steps_path, self.steps)):
                damage = _damage(path, records)
                if damage is not None:
                    print(
                        f"domainpar: {path}: {damage}; rebuilt its {len(records)} record(s) up to step {resumed_at[0]} "
                        f"from the checkpoint {source}",
                        file=sys.stderr,
                    )
                write_jsonl(path, records)
        else:
            self.metrics, self.steps = check_resumable_logs(self.out, resumed_at, source)
            write_jsonl(self.metrics_path, self.metrics)
            write_jsonl(self.steps_path, self.steps)
        if self.tensorboard:
            # Optional dependency (pip install 'domainpar[tensorboard]'): only --tensorboard needs it.
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.out / "tensorboard"), purge_step=global_step or None)

    def history(self) -> dict[str, Any]:
        """What a checkpoint records of the logs written so far (rebuilt from it on resume)."""
        rows = [[float(r[name]) for name in STEP_LOG_COLUMNS] for r in self.steps]
        return {
            "metrics": [dict(r) for r in self.metrics],
            "steps": torch.tensor(rows, dtype=torch.float64).reshape(-1, len(STEP_LOG_COLUMNS)),
        }

    def step(self, record: dict) -> None:
        """Append one ``steps.jsonl`` record (``step`` and the :data:`~domainpar.train.checkpoint.STEP_LOG_COLUMNS`)."""
        # Written as a checkpoint records it, so a rebuilt log is the same bytes as the one written.
        record = _step_record(int(record["step"]), [record[name] for name in STEP_LOG_COLUMNS])
        self.steps.append(record)
        with open(self.steps_path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
        if self._writer is not None:
            self._writer.add_scalar("train/step_loss", record["loss"], record["step"])
            self._writer.add_scalar("train/lr", record["lr"], record["step"])

    def epoch(self, record: dict) -> None:
        """Append one ``metrics.jsonl`` record and redraw the curves from both logs."""
        self.metrics.append(json.loads(json.dumps(record)))  # as the file holds it (plain values)
        with open(self.metrics_path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
        if self.curves:
            plot_curves(self.metrics, self.steps, self.out / "curves.png")
        if self._writer is not None:
            for key in _TENSORBOARD_EPOCH_KEYS:
                value = record[key]
                if value is not None and math.isfinite(value):
                    self._writer.add_scalar(f"epoch/{key}", value, record["epoch"])
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


__all__ = ["RunLogs", "check_resumable_logs", "write_jsonl"]

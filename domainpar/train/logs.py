"""Where a run reports: ``steps.jsonl``, ``metrics.jsonl``, ``curves.png`` and TensorBoard (rank 0 only).

A record is appended as soon as it exists, so a killed run keeps every line it
finished; a reader skips a torn last line. On resume the lines written after
the checkpoint the run restarts from are dropped (they will be written again),
so the logs of a resumed run read as those of an uninterrupted one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from domainpar.atomic import atomic_path
from domainpar.parsing import parse_json
from domainpar.train.curves import plot_curves

#: Epoch figures mirrored to TensorBoard (under ``epoch/``).
_TENSORBOARD_EPOCH_KEYS = ("train_loss", "val_loss", "efficiency", "purity", "auc")


def read_jsonl(path: Path) -> list[dict]:
    """Complete JSON lines of ``path`` (a torn last line from a killed writer is skipped; no file: none)."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(parse_json(line, str(path), "JSON lines of run records"))
        except json.JSONDecodeError:
            continue
    return records


def write_jsonl(path: Path, records: list[dict]) -> None:
    """Replace ``path`` with ``records``, one JSON object per line (atomically)."""
    with atomic_path(path) as tmp:
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records))


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

    def start(self, resumed_at: tuple[int, int] | None, global_step: int) -> None:
        """Open the sinks: fresh logs, or on a resume the logs up to ``resumed_at = (step, epoch)``.

        Args:
            resumed_at: the checkpoint's (step, epoch), or None for a new run.
            global_step: the step the run continues from (TensorBoard purges later events).
        """
        if resumed_at is None:
            for path in (self.metrics_path, self.steps_path):
                path.unlink(missing_ok=True)
        else:
            step, epoch = resumed_at
            write_jsonl(self.metrics_path, [r for r in read_jsonl(self.metrics_path) if r.get("epoch", 0) <= epoch])
            write_jsonl(self.steps_path, [r for r in read_jsonl(self.steps_path) if r.get("step", 0) <= step])
        if self.tensorboard:
            # Optional dependency (pip install 'domainpar[tensorboard]'): only --tensorboard needs it.
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.out / "tensorboard"), purge_step=global_step or None)

    def step(self, record: dict) -> None:
        """Append one ``steps.jsonl`` record (it has ``step``, ``loss`` and ``lr``)."""
        with open(self.steps_path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
        if self._writer is not None:
            self._writer.add_scalar("train/step_loss", record["loss"], record["step"])
            self._writer.add_scalar("train/lr", record["lr"], record["step"])

    def epoch(self, record: dict) -> None:
        """Append one ``metrics.jsonl`` record and redraw the curves from both logs."""
        with open(self.metrics_path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
        if self.curves:
            plot_curves(read_jsonl(self.metrics_path), read_jsonl(self.steps_path), self.out / "curves.png")
        if self._writer is not None:
            for key in _TENSORBOARD_EPOCH_KEYS:
                value = record[key]
                if value is not None and math.isfinite(value):
                    self._writer.add_scalar(f"epoch/{key}", value, record["epoch"])
            self._writer.flush()

    def last_epoch_record(self) -> dict | None:
        """The last complete ``metrics.jsonl`` record (a resumed run that had nothing left to train reports it)."""
        records = read_jsonl(self.metrics_path)
        return records[-1] if records else None

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


__all__ = ["RunLogs", "read_jsonl", "write_jsonl"]

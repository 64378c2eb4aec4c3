"""The report: what a section returns, what the machine is, the files written.

A section returns a :class:`Section` (rows of plain numbers plus the columns
to print); :func:`write_report` turns the sections into
``<out>/<hostname>-<date>[-<mode>].json`` and a Markdown twin with one table
per section.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import re
import socket
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from domainpar.atomic import atomic_path

#: The repository root (bench/ is a top-level directory of it).
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Column:
    """One column of a section's Markdown table."""

    key: str
    """Key of the value in each row dict."""
    header: str
    """Column header shown in the table."""
    fmt: str = "{}"
    """Format applied to numbers (``"{:.3g}"`` etc.); None and strings print as they are."""


@dataclass
class Section:
    """The result of one benchmark: a table plus what it means."""

    name: str
    """Key of the section in the JSON report (``"memory"``, ``"speed"``, ...)."""
    title: str
    """Heading of the section in the Markdown report."""
    columns: list[Column] = field(default_factory=list)
    """Columns of the table, in order."""
    rows: list[dict[str, Any]] = field(default_factory=list)
    """One dict per table row; extra keys go to the JSON only."""
    notes: list[str] = field(default_factory=list)
    """Sentences printed under the table: what was measured, on which graph, how."""
    skipped: str | None = None
    """Why the section did not run (missing data, a component not built yet); None when it ran."""
    seconds: float = 0.0
    """Wall time the benchmark took."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Section-wide figures that are not table rows (fits, per-machine constants); JSON only."""
    markdown_extra: str = ""
    """Markdown printed after the notes (a further table, a figure the section wrote beside the report)."""

    def to_json(self) -> dict[str, Any]:
        payload = asdict(self)
        payload["columns"] = [c.key for c in self.columns]
        return payload


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is missing or the denominator is zero."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return float(numerator) / float(denominator)


# ----------------------------------------------------------------------------- machine and files

def machine_info() -> dict[str, Any]:
    """What the numbers were measured on: host, CPU, cores, memory, versions, commit."""
    import numpy
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem_kib = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        memory_gib = mem_kib / 2**20
    except (OSError, AttributeError):
        memory_gib = None
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {
        "hostname": socket.gethostname(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": None if memory_gib is None else round(memory_gib, 1),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "commit": commit,
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def recipe_extra(result: dict[str, Any], out: Path, load_before: Any, load_after: Any, **more: Any) -> dict[str, Any]:
    """The JSON ``extra`` of a section that ran a recipe (:func:`domainpar.pipeline.physics.run_recipe`): its
    timings, training record, final validation, load averages and outputs, plus ``more``."""
    train = result["train"]
    return {
        "timings": result["timings"],
        "train": {k: v for k, v in train.items() if k != "final"},
        "final_validation": train.get("final"),
        **more,
        "load_average": {"before": load_before, "after": load_after},
        "model": str(out / "model.pt"),
        "eval_json": str(out / "eval.json"),
    }


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and math.isnan(value):
        return "–"
    if isinstance(value, (int, float)):
        return fmt.format(value)
    return str(value)


def section_markdown(section: Section) -> str:
    """One section as a Markdown heading, table and notes."""
    lines = [f"## {section.title}", ""]
    if section.skipped:
        lines += [f"*Skipped: {section.skipped}*", ""]
        return "\n".join(lines)
    if section.rows and section.columns:
        lines.append("| " + " | ".join(c.header for c in section.columns) + " |")
        lines.append("|" + "|".join("---" for _ in section.columns) + "|")
        for row in section.rows:
            lines.append("| " + " | ".join(_cell(row.get(c.key), c.fmt) for c in section.columns) + " |")
        lines.append("")
    for note in section.notes:
        lines.append(f"- {note}")
    if section.notes:
        lines.append("")
    if section.markdown_extra:
        lines += [section.markdown_extra.rstrip(), ""]
    lines.append(f"<sub>section wall time {section.seconds:.0f} s</sub>")
    lines.append("")
    return "\n".join(lines)


def report_markdown(sections: list[Section], machine: dict[str, Any], mode: str) -> str:
    """The whole report as Markdown."""
    head = [
        f"# domainpar benchmarks — {machine['hostname']}, {machine['date']}",
        "",
        f"Mode: `{mode}`. Machine: {machine['cpu']}, {machine['cores']} cores, "
        f"{machine['memory_gib']} GiB, GPU: {machine['gpu'] or 'none'}; "
        f"Python {machine['python']}, torch {machine['torch']}, commit {machine['commit'] or 'unknown'}.",
        "Every figure is a median of several runs; every ratio compares figures from this same run.",
    ]
    if machine.get("load_average_start"):
        end = machine.get("load_average_end")
        head.append(f"Load average (1/5/15 min) at start {machine['load_average_start']}"
                    + (f", at end {end}." if end else "."))
    head.append("")
    return "\n".join(head + [section_markdown(s) for s in sections])


def report_stem(hostname: str, mode: str) -> str:
    """File stem of a report: ``<hostname>-<date>`` plus ``-<mode>`` unless the mode is ``full``."""
    stem = f"{hostname}-{_dt.date.today().isoformat()}"
    return stem if mode == "full" else f"{stem}-{mode}"


def write_report(sections: list[Section], machine: dict[str, Any], out_dir: str | os.PathLike, mode: str) -> tuple[Path, Path]:
    """Write ``<out_dir>/<hostname>-<date>.json`` and ``.md`` atomically.

    Returns:
        (json path, markdown path).
    """
    out_dir = Path(out_dir)
    stem = report_stem(machine["hostname"], mode)
    json_path = out_dir / f"{stem}.json"
    md_path = out_dir / f"{stem}.md"
    payload = {"mode": mode, "machine": machine, "sections": {s.name: s.to_json() for s in sections}}
    with atomic_path(json_path) as tmp:
        tmp.write_text(json.dumps(payload, indent=2, default=_json_default) + "\n")
    with atomic_path(md_path) as tmp:
        tmp.write_text(report_markdown(sections, machine, mode))
    return json_path, md_path


def _json_default(value: Any) -> Any:
    # numpy scalars and paths end up in rows; everything else is a bug worth a TypeError.
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot serialise {type(value).__name__} in a benchmark report")

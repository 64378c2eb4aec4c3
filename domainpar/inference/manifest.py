"""What a reconstruction's ``--out`` says about its run: the manifest, the plan of what is left, the summary.

``<out>/reconstruct.json`` (the manifest) records the pipeline and its digest: a rerun with another pipeline is
refused (``--redo`` replaces the outputs instead). The plan, made while holding the run's lock, lists the events
still to do: an event whose record names this pipeline and its input files as they are now is skipped.
``<out>/summary.json`` holds the run's figures: events done, skipped and failed, and every stage's time per event.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from domainpar import __version__
from domainpar.atomic import remove_stale_temporaries
from domainpar.errors import DomainparError
from domainpar.inference import products
from domainpar.inference.pipeline import Pipeline, pipeline_digest
from domainpar.inference.sources import EventSource, input_files, input_stamp
from domainpar.inference.spec import ReconstructConfig
from domainpar.workers import available_cores

#: Name of the run's manifest, lock and summary in ``--out``.
MANIFEST, LOCK, SUMMARY = "reconstruct.json", "reconstruct.lock", "summary.json"
#: The stages timed per event, in order.
STAGES = ("read", "build", "filter", "inference", "tracks", "write")


@dataclass(frozen=True)
class Outcome:
    """What happened to one event."""

    name: str
    ok: bool
    """The event's outputs were written."""
    error: str | None = None
    """One line: why it failed."""
    bad_input: bool = False
    """It failed on its own input (a file or value refused with a reason: the user's to mend, not a bug)."""
    seconds: dict = field(default_factory=dict)
    """Per stage (read, build, filter, inference, tracks, write) and ``wait`` (the host waiting for the preparer)."""
    counts: dict = field(default_factory=dict)
    """Hits, edges, candidates."""


@dataclass
class Plan:
    """The run as decided by its owner before any event is read."""

    todo: list[EventSource]
    """The events still to reconstruct, in order."""
    skipped: list[str]
    """Events whose outputs are already there (this pipeline, the same input files)."""
    digest: str
    record: dict
    """The pipeline's record (``reconstruct.json``)."""


def _check_manifest(config: ReconstructConfig, record: dict, digest: str) -> None:
    """Refuse (or, with redo, clear) an ``--out`` holding another pipeline's outputs; write this run's manifest."""
    out = Path(config.out)
    path = out / MANIFEST
    if path.exists():
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            found = {}
        if not isinstance(found, dict) or found.get("pipeline_digest") != digest:
            if not config.redo:
                differs = _difference(found.get("pipeline", {}) if isinstance(found, dict) else {}, record)
                raise DomainparError(
                    f"--out {out}: expected the outputs of this pipeline (digest {digest}), got those of another "
                    f"(digest {found.get('pipeline_digest') if isinstance(found, dict) else None}; {differs}); "
                    "choose another --out, or pass --redo to replace them"
                )
    if config.redo:
        for name in products.outputs_of(out):
            products.remove_event(out, name)
    products.write_json(path, {"producer": "domainpar reconstruct", "domainpar": __version__, "pipeline_digest": digest,
                               "pipeline": record})  # fmt: skip


def _difference(old: dict, new: dict) -> str:
    keys = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k) and k not in ("checkpoint", "model", "producer", "domainpar")]
    if not keys:
        return "an unreadable manifest"
    key = keys[0]
    return f"{key} {json.dumps(old.get(key), default=str)[:80]} there, {json.dumps(new.get(key), default=str)[:80]} here"


def remove_temporaries(out: Path) -> None:
    """Delete the temporaries that killed writers left in ``out``'s event directories; call it only while holding
    the run's lock, with none of its writers alive."""
    for sub in (products.SUBMISSIONS, products.TRACKS, products.RECORDS):
        remove_stale_temporaries(out / sub)


def plan_run(config: ReconstructConfig, pipeline: Pipeline, sources: list[EventSource]) -> Plan:
    """Decide what to do (holding the run's lock): the manifest check, stale temporaries removed, the events already
    done skipped."""
    record = pipeline.producer("domainpar reconstruct")
    digest = pipeline_digest(record)
    out = Path(config.out)
    _check_manifest(config, record, digest)
    remove_temporaries(out)
    todo, skipped = [], []
    for source in sources:
        files = input_files(source, pipeline.graphs.needs_cells)
        stamp = input_stamp(files) if files else []
        if not config.redo and files and products.is_done(out, source.name, digest, stamp, config.tracks_format):
            skipped.append(source.name)
        else:
            todo.append(source)
    return Plan(todo, skipped, digest, record)


def run_summary(config: ReconstructConfig, plan: Plan, outcomes: list[Outcome], wall: float, world: int, threads: int,
                start: str | None = None) -> dict:  # fmt: skip
    """``summary.json``'s content: the settings, events done, skipped and failed, and every stage's time (``start``:
    how the local ranks were started, ``"fork"`` or ``"spawn"``; None without local ranks)."""
    done = [o for o in outcomes if o.ok]
    stages = {s: [o.seconds.get(s, 0.0) for o in done] for s in (*STAGES, "wait")}
    per_event = [{"event": o.name, **{k: round(v, 4) for k, v in o.seconds.items()}, **o.counts} for o in done]
    return {
        "producer": "domainpar reconstruct",
        "domainpar": __version__,
        "pipeline_digest": plan.digest,
        "pipeline": plan.record,
        "data": str(config.data),
        "out": str(config.out),
        "settings": {"num_parts": config.num_parts, "method": config.method if config.num_parts > 1 else None,
                     "workers": config.workers, "processes": world, "prefetch": config.prefetch, "threads": threads,
                     "tracks_format": config.tracks_format, "cores": available_cores(), "start": start},  # fmt: skip
        "events": {"total": len(plan.todo) + len(plan.skipped), "done": len(done), "skipped": len(plan.skipped),
                   "failed": len(outcomes) - len(done)},  # fmt: skip
        "failed": [{"event": o.name, "error": o.error} for o in outcomes if not o.ok],
        "seconds_wall": wall,
        "events_per_hour": 3600.0 * len(done) / wall if wall > 0 and done else None,
        "stage_seconds_total": {k: float(np.sum(v)) for k, v in stages.items()},
        "stage_seconds_mean": {k: (float(np.mean(v)) if v else None) for k, v in stages.items()},
        "per_event": per_event,
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


__all__ = ["LOCK", "MANIFEST", "Outcome", "Plan", "STAGES", "SUMMARY", "plan_run", "remove_temporaries", "run_summary"]

"""What the ranks of a torchrun/srun training job must agree on, compared before they compute.

Every rank of such a job reads its own command line and config file, so nothing makes them equal but the
user. :func:`agree_on_run` runs on every rank right after it joins the job, before its first collective and
before any event is prepared: its resolved configuration (:func:`run_settings`) is compared with rank 0's
through the rendezvous store (:func:`domainpar.comm.agreement.agree`), and a job whose ranks differ ends on
every rank with one line and exit status 2, e.g.
``error: ranks disagree on optim.lr: rank 0 has 0.004, rank 1 has 0.002; ...``.

What is compared: every field of the configuration (model with its options, optimiser, loss, schedule and
length, seed, precision, outputs, checkpoints, the parallel layout), except the fields of
:data:`PER_RANK`, with these resolved first:

* ``data.train`` / ``data.val`` by **content**, not path (one digest of the graph files' contents, or of the
  raw events' file names and sizes), so ranks that see one dataset under different mount points agree and
  ranks given different data do not;
* ``data.plans`` by the content of the plans' manifests;
* ``parallel.device`` as the device it resolves to (``auto`` on a GPU node is ``cuda``), and
  ``parallel.domain_size`` as the group size it resolves to;
* a user's model also by the digest of its source file (two nodes with two versions of ``my_model.py``
  differ), and the domainpar and torch versions of every rank.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from domainpar import __version__
from domainpar.comm.agreement import Setting, agree
from domainpar.data.dataset import event_inputs
from domainpar.data.graph_files import graph_files, has_graph_files
from domainpar.model.registry import model_source
from domainpar.npzfile import archive_digest
from domainpar.train.config import TrainConfig, device_kind, domain_size_of

#: Settings each rank may set for itself, and why: they change only how fast or how patiently this rank
#: works, or what only rank 0 shows. Everything else must be rank 0's.
PER_RANK = {
    "parallel.ranks": "under torchrun/srun the launcher sets the world size; the field is not used",
    "parallel.threads": "this rank's torch threads: speed only",
    "parallel.timeout_s": "how long this rank waits in a collective before it gives up: failure detection only",
    "parallel.heartbeat_s": "how long this rank waits for a silent peer: failure detection only",
    "data.workers": "this rank's preparation processes: speed only",
    "data.prefetch": "how far ahead this rank stages its parts: speed only",
    "data.cache_gb": "this rank's host memory for parts kept between epochs: speed only",
    "run.progress": "only rank 0 draws a progress bar",
}

#: What the line tells the user to do.
ADVICE = "give every rank the same flags and config file (docs/training.md, 'Ranks agree before they compute')"


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, (list, dict, tuple)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _flatten(nested: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in nested.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _sha(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode("utf-8", "surrogatepass")).hexdigest()


def inputs_setting(path: str | None) -> Setting:
    """A dataset as compared between ranks: its graph files' contents (names and
    :func:`~domainpar.npzfile.archive_digest`), or its raw events' file names and sizes."""
    if path is None:
        return Setting("none", "none")
    where = Path(path)
    if has_graph_files(where):
        files = graph_files(where)
        digest = _sha([f"{f.name}\0{archive_digest(f)}" for f in files])
        return Setting(digest, f"{path} ({len(files)} graph file(s), content {digest[:12]})")
    prefixes = event_inputs(where)
    lines = []
    for prefix in prefixes:
        for file in sorted(prefix.parent.glob(prefix.name + "-*.csv*")):
            lines.append(f"{file.name}\0{file.stat().st_size}")
    digest = _sha(lines)
    return Setting(digest, f"{path} ({len(prefixes)} raw event(s), files {digest[:12]})")


def plans_setting(path: str | None) -> Setting:
    """The plans of ``data.plans`` as compared between ranks: the content of every manifest."""
    if path is None:
        return Setting("none", "none")
    root = Path(path)
    manifests = sorted(root.glob("manifest.json")) + sorted(root.glob("*/manifest.json"))
    digest = _sha([f"{m.relative_to(root)}\0{hashlib.sha256(m.read_bytes()).hexdigest()}" for m in manifests])
    return Setting(digest, f"{path} ({len(manifests)} plan(s), content {digest[:12]})")


def run_settings(config: TrainConfig, world_size: int) -> dict[str, Setting]:
    """Everything the ranks of a run must agree on, by dotted name (see the module docstring)."""
    flat = _flatten(config.to_dict())
    settings = {key: Setting(json.dumps(value, sort_keys=True), _shown(value)) for key, value in flat.items()
                if key not in PER_RANK}  # fmt: skip
    device = device_kind(config)
    settings["parallel.device"] = Setting(device, device)
    group = domain_size_of(config, world_size)
    settings["parallel.domain_size"] = Setting(str(group), str(group))
    settings["data.train"] = inputs_setting(config.data.train)
    settings["data.val"] = inputs_setting(config.data.val)
    settings["data.plans"] = plans_setting(config.data.plans)
    source = model_source(config.model.name)
    if source is not None:
        settings["model.source"] = Setting(source.digest, source.shown)
    settings["domainpar.version"] = Setting(__version__, __version__)
    settings["torch.version"] = Setting(torch.__version__, torch.__version__)
    return settings


def agree_on_run(config: TrainConfig, world_size: int) -> None:
    """Every rank of a torchrun/srun job: compare this rank's run with rank 0's (see the module docstring).

    Raises:
        RanksRefused: on every rank, naming the settings that differ, rank 0's value and another rank's.
    """
    agree(run_settings(config, world_size), what="train", advice=ADVICE, timeout_s=config.parallel.timeout_s)


__all__ = ["ADVICE", "PER_RANK", "agree_on_run", "inputs_setting", "plans_setting", "run_settings"]

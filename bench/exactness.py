"""Exactness section: the partitioned gradients against one process, through ``domainpar verify``.

For 1–4 parts and the METIS and geometric partitioners, ``domainpar verify
--graph G --parts N --method M --json FILE`` spawns N gloo ranks, runs a
training step of the partitioned model and of the single-process model on
the same weights, and reports the largest relative gradient error and the
largest logit difference. This is the engine's contract
(../shared/DESIGN.md): the numbers must be at float rounding level.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.report import REPO_ROOT, Column, Section
from bench.workloads import Workload


def verify(graph: Path, num_parts: int, method: str, *, checkpointing: bool = False, overlap: bool = False, timeout_s: float = 600.0) -> dict:
    """Run ``domainpar verify`` once and return its JSON record (plus the exit code and wall time)."""
    with tempfile.TemporaryDirectory(prefix="domainpar-bench-verify-") as tmp:
        json_path = Path(tmp) / "verify.json"
        argv = [sys.executable, "-m", "domainpar", "verify", "--graph", str(graph), "--parts", str(num_parts),
                "--method", method, "--json", str(json_path)]
        if checkpointing:
            argv.append("--checkpointing")
        if overlap:
            argv.append("--overlap")
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, cwd=REPO_ROOT)
        seconds = time.perf_counter() - start
        if not json_path.is_file():
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-10:])
            raise RuntimeError(f"domainpar verify --parts {num_parts} --method {method} wrote no JSON (exit {done.returncode}):\n{tail}")
        record = json.loads(json_path.read_text())
    record["exit_code"] = done.returncode
    record["seconds"] = seconds
    return record


def verify_available() -> bool:
    """Whether this checkout has the ``domainpar verify`` command."""
    import importlib.util

    return importlib.util.find_spec("domainpar.cli.verify") is not None


def run(workload: Workload, *, parts: tuple[int, ...] = (1, 2, 3, 4), methods: tuple[str, ...] = ("metis", "geometric"), extra: bool = True) -> Section:
    """The exactness section (see the module docstring)."""
    start = time.perf_counter()
    section = Section(
        name="exactness",
        title="Exactness: partitioned vs single-process gradients",
        columns=[
            Column("method", "method"),
            Column("num_parts", "parts"),
            Column("options", "options"),
            Column("max_rel_err_grad", "max rel. gradient error", "{:.2e}"),
            Column("max_abs_err_logits", "max abs. logit error", "{:.2e}"),
            Column("passed", "passed"),
        ],
    )
    if not verify_available():
        section.skipped = "`domainpar verify` is not available in this checkout"
        return section
    cases = [(method, n, False, False) for method in methods for n in parts]
    if extra:
        # The two optimisations that must stay exact, at the largest part count.
        cases += [(methods[0], max(parts), True, False), (methods[0], max(parts), False, True)]
    for method, num_parts, checkpointing, overlap in cases:
        record = verify(workload.path, num_parts, method, checkpointing=checkpointing, overlap=overlap)
        options = ", ".join(name for name, on in (("checkpointing", checkpointing), ("overlap", overlap)) if on) or "–"
        section.rows.append({"method": method, "options": options, **record})
    section.notes += [
        f"Graph: {workload.name} ({workload.num_nodes:,} nodes, {workload.num_edges:,} edges); `domainpar verify` spawns "
        "the ranks (gloo) and compares one training step against one process on the same weights.",
        "Relative gradient error: max over parameters of max |g_parts − g_single| / max |g_single|.",
    ]
    failed = [r for r in section.rows if not r.get("passed")]
    if failed:
        section.notes.append(f"**{len(failed)} case(s) FAILED** — see the JSON report.")
    section.seconds = time.perf_counter() - start
    return section

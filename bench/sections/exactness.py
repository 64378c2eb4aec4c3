"""Exactness section: the partitioned gradients against one process, through ``domainpar verify``.

For 1–4 parts and the METIS and geometric partitioners, ``domainpar verify
--graph G --parts N --method M --json FILE`` spawns N gloo ranks, runs a
training step of the partitioned model and of the single-process model on
the same weights, and reports the largest relative gradient error and the
largest logit difference. This is the engine's contract
(docs/design.md): the numbers must be at float rounding level.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common.report import REPO_ROOT, Column, Section
from bench.common.workloads import Workload


def verify(
    graph: Path, num_parts: int, method: str, *, dtype: str = "float32", checkpointing: bool = False, overlap: bool = False,
    hidden: int = 64, iterations: int = 8, timeout_s: float = 600.0,
) -> dict:
    """Run ``domainpar verify`` once and return its JSON record (plus the exit code and wall time)."""
    with tempfile.TemporaryDirectory(prefix="domainpar-bench-verify-") as tmp:
        json_path = Path(tmp) / "verify.json"
        argv = [sys.executable, "-m", "domainpar", "verify", "--graph", str(graph), "--parts", str(num_parts),
                "--method", method, "--dtype", dtype, "--hidden", str(hidden), "--iterations", str(iterations),
                "--json", str(json_path)]
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


def run(
    workload: Workload,
    *,
    parts: tuple[int, ...] = (1, 2, 3, 4),
    methods: tuple[str, ...] = ("metis", "geometric"),
    dtypes: tuple[str, ...] = ("float32",),
    extra: bool = True,
    hidden: int = 64,
    iterations: int = 8,
) -> Section:
    """The exactness section (see the module docstring)."""
    start = time.perf_counter()
    section = Section(
        name="exactness",
        title="Exactness: partitioned vs single-process gradients",
        columns=[
            Column("method", "method"),
            Column("num_parts", "parts"),
            Column("dtype", "dtype"),
            Column("options", "options"),
            Column("max_rel_err_grad", "max rel. gradient error", "{:.2e}"),
            Column("max_abs_err_logits", "max abs. logit error", "{:.2e}"),
            Column("passed", "passed"),
        ],
    )
    if not verify_available():
        section.skipped = "`domainpar verify` is not available in this checkout"
        return section
    cases = [(dtype, method, n, False, False) for dtype in dtypes for method in methods for n in parts]
    if extra:
        # The two optimisations that must stay exact, at the largest part count.
        cases += [(dtypes[0], methods[0], max(parts), True, False), (dtypes[0], methods[0], max(parts), False, True)]
    for dtype, method, num_parts, checkpointing, overlap in cases:
        record = verify(
            workload.path, num_parts, method, dtype=dtype, checkpointing=checkpointing, overlap=overlap, hidden=hidden, iterations=iterations
        )
        options = ", ".join(name for name, on in (("checkpointing", checkpointing), ("overlap", overlap)) if on) or "–"
        section.rows.append({"method": method, "options": options, "dtype": dtype, **record})
    section.notes += [
        f"Graph: {workload.name} ({workload.num_nodes:,} nodes, {workload.num_edges:,} edges); model hidden {hidden}, "
        f"{iterations} iterations; `domainpar verify` spawns "
        "the ranks (gloo) and compares one training step against one process on the same weights.",
        "Relative gradient error: max over parameters of max |g_parts − g_single| / max |g_single| "
        "(`domainpar verify`'s tolerance: 1e-5 in float32, 1e-10 in float64).",
    ]
    failed = [r for r in section.rows if not r.get("passed")]
    if failed:
        section.notes.append(f"**{len(failed)} case(s) FAILED** — see the JSON report.")
    section.seconds = time.perf_counter() - start
    return section


def section(ctx) -> Section:
    """Entry point (see :mod:`bench.sections`): the real small event; float32 quick, float64 full."""
    hidden, iterations = ctx.size((32, 4), (64, 8))
    return run(
        ctx.real_small(), parts=ctx.size((2, 3, 4), (1, 2, 3, 4)), dtypes=ctx.size(("float32",), ("float64",)),
        hidden=hidden, iterations=iterations,
    )

"""The commands the docs show run as written.

* Every ``bash`` block of ``examples/*.md`` is executed, in order, in a fresh
  workspace (``examples/`` and ``tests/`` of the repository linked in, as in a
  clone), scaled down by :data:`SCALE_DOWN` (:data:`SCALE_DOWN_ENV` for the
  scripts a doc runs) — sizes only, never options or paths. Docs that name
  data they do not make get it from a fixture: TrackML events in
  ``data/train`` (ids 1000 …) and ``data/val`` (1100), and for the acorn page
  those events as PyG files in ``acorn/gnn_input/{trainset,valset,testset}``.
  Lines that set up the environment (``make install``, ``source``) are skipped:
  the test runs with this environment's ``domainpar``.
* Every ``domainpar`` call in README.md, ``docs/*.md``, ``examples/*.md`` and
  ``slurm/`` (also under torchrun, srun and ``python -m``) names a command that
  exists and only options that command has.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from domainpar.cli.main import COMMANDS
from fixtures import REPO

EXAMPLES = REPO / "examples"
#: Sizes that make a doc's commands run in a minute or two on two cores (pattern → replacement): events, epochs,
#: and the width of a run (4 ranks or parts, a 4-GPU node's, are 2 on the test machine's 2 cores).
SCALE_DOWN = [(r"--particles \d+", "--particles 150"), (r"--epochs \d+", "--epochs 1"),
              (r"PARTICLES=\d+", "PARTICLES=150"), (r"EPOCHS=\d+", "EPOCHS=1"),
              (r"--ranks 4\b", "--ranks 2"), (r"--parts 4\b", "--parts 2")]  # fmt: skip
#: The same sizes for scripts that read them from the environment.
SCALE_DOWN_ENV = {"PARTICLES": "150", "EPOCHS": "1"}
#: Environment set-up lines of the docs (the test already runs in an environment with domainpar).
SETUP_LINES = ("make ", "source ")
#: Which data a doc uses without making it itself.
FIXTURES = {"quickstart.md": (), "bring_your_own_data.md": (), "bring_your_acorn_graphs.md": ("data", "acorn"),
            "deploy_to_acts.md": ("data",)}  # fmt: skip


def bash_blocks(text: str) -> list[str]:
    """The fenced ```bash blocks of a Markdown text, in order."""
    return re.findall(r"^```bash\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def _logical_lines(block: str) -> list[str]:
    """Lines with backslash continuations joined."""
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def runnable(block: str) -> str:
    """A doc block as the test runs it: scaled down, set-up lines dropped, ``python`` this interpreter."""
    lines = []
    for line in _logical_lines(block):
        if line.lstrip().startswith(SETUP_LINES):
            # `make install && source ...`: keep nothing of it (the environment is this one).
            continue
        for pattern, replacement in SCALE_DOWN:
            line = re.sub(pattern, replacement, line)
        line = re.sub(r"^python ", f"{sys.executable} ", line)
        lines.append(line)
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ lint


def domainpar_calls(text: str) -> list[tuple[str, list[str]]]:
    """Every ``domainpar <command> args`` in shell text: (command, args), also after torchrun/srun/python -m."""
    calls = []
    for line in _logical_lines(text):
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            continue
        command: list[str] = []
        for token in tokens + [";"]:
            if token in (";", "&&", "||", "|"):
                if "domainpar" in command:
                    at = command.index("domainpar")
                    if at + 1 < len(command) and not command[at + 1].startswith("-"):
                        calls.append((command[at + 1], command[at + 2 :]))
                command = []
            else:
                command.append(token)
    return calls


def _shell_texts() -> dict[str, str]:
    texts = {"README.md": "\n".join(bash_blocks((REPO / "README.md").read_text()))}
    for doc in sorted((REPO / "docs").glob("*.md")) + sorted(EXAMPLES.glob("*.md")):
        texts[str(doc.relative_to(REPO))] = "\n".join(bash_blocks(doc.read_text()))
    for script in sorted((REPO / "slurm").glob("*.sbatch")) + [EXAMPLES / "quickstart.sh"]:
        texts[str(script.relative_to(REPO))] = script.read_text()
    return texts


def _options(name: str) -> set[str]:
    import importlib

    module, attr, _ = COMMANDS[name]
    command: click.Command = getattr(importlib.import_module(module), attr)
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)} | {"--help", "-h"}


@pytest.mark.parametrize("source", sorted(_shell_texts()))
def test_every_domainpar_call_in_the_docs_names_real_options(source):
    calls = domainpar_calls(_shell_texts()[source])
    for command, args in calls:
        assert command in COMMANDS, f"{source}: `domainpar {command}` is no command"
        known = _options(command)
        unknown = [a.split("=")[0] for a in args if a.startswith("--") and a.split("=")[0] not in known]
        assert not unknown, f"{source}: `domainpar {command}` has no option(s) {unknown}"


def test_the_lint_catches_a_wrong_option():
    calls = domainpar_calls("torchrun --nproc-per-node 2 -m domainpar train --config x.yaml --rank 2 && echo ok")
    assert calls == [("train", ["--config", "x.yaml", "--rank", "2"])]
    assert "--rank" not in _options("train") and "--ranks" in _options("train")


# ----------------------------------------------------------------------------------------------- run


def _domainpar(workspace: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "domainpar", *args], cwd=workspace, check=True, capture_output=True, timeout=600)


def _make_fixtures(workspace: Path, kinds: tuple[str, ...]) -> None:
    if "data" in kinds or "acorn" in kinds:
        _domainpar(workspace, "simulate", "--out", "data/train", "--events", "4", "--particles", "150",
                   "--first-event-id", "1000", "--seed", "1", "--quiet")
        _domainpar(workspace, "simulate", "--out", "data/val", "--events", "1", "--particles", "150",
                   "--first-event-id", "1100", "--seed", "2", "--quiet")
    if "acorn" in kinds:
        for kind, source in (("trainset", "data/train"), ("valset", "data/val"), ("testset", "data/val")):
            _domainpar(workspace, "build", "--input", source, "--out", f"acorn/gnn_input/{kind}", "--format", "pyg", "--quiet")


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("doc", sorted(FIXTURES))
def test_the_commands_of_an_example_run_as_written(doc, tmp_path):
    workspace = tmp_path / "clone"
    workspace.mkdir()
    for name in ("examples", "tests"):
        (workspace / name).symlink_to(REPO / name)
    _make_fixtures(workspace, FIXTURES[doc])
    script = "\n".join(runnable(block) for block in bash_blocks((EXAMPLES / doc).read_text()))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "SLURM_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["OMP_NUM_THREADS"] = "1"
    env.update(SCALE_DOWN_ENV)  # a script the doc runs (examples/quickstart.sh) reads its sizes from these
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=workspace, env=env, capture_output=True,
                          text=True, timeout=1700)
    assert done.returncode == 0, f"{doc}:\n{script}\n--- stderr:\n{done.stderr[-4000:]}"
    assert "Traceback" not in done.stderr


def test_every_example_page_is_run():
    assert {doc.name for doc in EXAMPLES.glob("*.md")} == set(FIXTURES)

"""The commands the docs show run as written.

* Every ``bash`` block of ``examples/*.md`` is executed, in order, in a fresh
  workspace (``examples/`` and ``tests/`` of the repository linked in, as in a
  clone), scaled down by :data:`SCALE_DOWN` (:data:`SCALE_DOWN_ENV` for the
  scripts a doc runs) — sizes only, never options or paths. Docs that name
  data they do not make get it from a fixture: TrackML events in
  ``data/train`` (ids 1000 …) and ``data/val`` (1100), and for the acorn page
  those events as PyG files in ``acorn/gnn_input/{trainset,valset,testset}``.
  Lines that set up the environment (``make install``, ``source``) are skipped:
  the test runs with this environment's ``domainpar``. A page whose steps are
  also one script (:data:`SCRIPTED`) runs the script alone, and the steps it
  shows must be the script's commands with the script's options. What a page's
  run leaves is checked where the page promises it (:data:`AFTERWARDS`: the
  deploy page's ``domainpar demo`` is the demo command's end-to-end test).
* Every ``domainpar`` call in README.md, ``docs/*.md``, ``examples/*.md`` and
  ``slurm/`` (also under torchrun, srun and ``python -m``) names a command that
  exists and only options that command has.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from domainpar.cli.main import COMMANDS
from domainpar.inference.model_io import load_model
from domainpar.pipeline.demo import DemoConfig, demo_recipe
from domainpar.pipeline.physics import TABLE_KEYS
from domainpar.pipeline.recipe import recipe_from_dict
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
            "deploy_to_acts.md": ()}  # fmt: skip
#: Pages whose step-by-step blocks are what one script of theirs runs (page → script): running both would run
#: the same commands twice, so the test runs the script and checks that the steps are its commands.
SCRIPTED = {"quickstart.md": "examples/quickstart.sh"}


def bash_blocks(text: str) -> list[str]:
    """The fenced ```bash blocks of a Markdown text, in order."""
    return re.findall(r"^```bash\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def _logical_lines(block: str) -> list[str]:
    """Lines with backslash continuations joined."""
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def page_blocks(doc: str) -> list[str]:
    """The bash blocks of an example page the test runs (a :data:`SCRIPTED` page: the blocks that run its script)."""
    blocks = bash_blocks((EXAMPLES / doc).read_text())
    if doc in SCRIPTED:
        blocks = [block for block in blocks if f"bash {SCRIPTED[doc]}" in block]
    return blocks


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


def _commands_and_options(text: str) -> list[tuple[str, list[tuple[str, str | None]]]]:
    """The ``domainpar`` calls of shell text as (command, [(option, value)]), a value None where it is a shell
    variable's (a script's sizes and paths) or the option takes none; ``--quiet`` aside (a script's own choice)."""
    calls = []
    for command, args in domainpar_calls(text):
        options = []
        for at, arg in enumerate(args):
            if arg.startswith("--") and arg != "--quiet":
                value = args[at + 1] if at + 1 < len(args) and not args[at + 1].startswith("--") else None
                options.append((arg, None if value is None or "$" in value else value))
        calls.append((command, options))
    return calls


@pytest.mark.parametrize("doc", sorted(SCRIPTED))
def test_the_steps_of_a_scripted_page_are_its_scripts_commands(doc):
    blocks = bash_blocks((EXAMPLES / doc).read_text())
    steps = "\n".join(block for block in blocks if block not in page_blocks(doc))
    shown, scripted = _commands_and_options(steps), _commands_and_options((REPO / SCRIPTED[doc]).read_text())
    assert len(shown) >= 5 and [c for c, _ in shown] == [c for c, _ in scripted]
    for (command, page_options), (_, script_options) in zip(shown, scripted):
        assert [o for o, _ in page_options] == [o for o, _ in script_options], (doc, command)
        # Where the script takes a value from a variable (its sizes and paths) the page shows one value of it.
        differ = [(o, a, b) for (o, a), (_, b) in zip(page_options, script_options) if a is not None and b is not None and a != b]
        assert not differ, (doc, command, differ)


def test_the_lint_catches_a_wrong_option():
    calls = domainpar_calls("torchrun --nproc-per-node 2 -m domainpar train --config x.yaml --rank 2 && echo ok")
    assert calls == [("train", ["--config", "x.yaml", "--rank", "2"])]
    assert "--rank" not in _options("train") and "--ranks" in _options("train")


# ----------------------------------------------------------------------------------------------- run


def _domainpar(workspace: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "domainpar", *args], cwd=workspace, check=True, capture_output=True, timeout=600)


def _make_fixtures(workspace: Path, kinds: tuple[str, ...]) -> None:
    # One process each (--workers 1): a pool's workers would each import torch and torch_geometric (~8 CPU s a
    # worker) for events of 150 particles; the files do not depend on --workers.
    if "data" in kinds or "acorn" in kinds:
        _domainpar(workspace, "simulate", "--out", "data/train", "--events", "4", "--particles", "150",
                   "--first-event-id", "1000", "--seed", "1", "--workers", "1", "--quiet")
        _domainpar(workspace, "simulate", "--out", "data/val", "--events", "1", "--particles", "150",
                   "--first-event-id", "1100", "--seed", "2", "--workers", "1", "--quiet")
    if "acorn" in kinds:
        for kind, source in (("trainset", "data/train"), ("valset", "data/val")):
            _domainpar(workspace, "build", "--input", source, "--out", f"acorn/gnn_input/{kind}", "--format", "pyg",
                       "--workers", "1", "--quiet")
        shutil.copytree(workspace / "acorn/gnn_input/valset", workspace / "acorn/gnn_input/testset")  # the same events


def _the_demo_records_the_recipe_it_ran(workspace: Path, script: str) -> None:
    """The deploy page's ``domainpar demo`` is the demo command's end-to-end run (``tests/pipeline/test_demo.py``
    tests its parts): the outputs the page and the docs name are where they say, and ``eval.json`` records the
    recipe the demo's options make."""
    (options,) = [args for command, args in domainpar_calls(script) if command == "demo"]
    sizes = {name[2:]: int(value) for name, value in zip(options, options[1:]) if name in ("--particles", "--epochs")}
    out = workspace / "runs" / "demo"
    result = json.loads((out / "eval.json").read_text())
    recipe = demo_recipe(DemoConfig(**sizes))
    assert recipe_from_dict(result["recipe"], source="eval.json") == recipe
    assert set(result["evaluate"]) == {"simulated", "real"}  # tests/data/trackml holds a labelled real event
    assert load_model(out / "train" / "model.pt").model.config.hidden == recipe.train.model.hidden
    assert (out / "filter.pt").is_file() and (out / "partition.png").stat().st_size > 0
    for label in ("simulated", "real"):
        assert (out / "plots" / label / "roc.png").stat().st_size > 0
        assert list((out / "submissions" / label).glob("event*-submission.csv"))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["evaluate"]["real"] == {key: result["evaluate"]["real"].get(key) for key in TABLE_KEYS}


#: What a page's run must leave beside its exit status 0 (page → check of the workspace and the script run).
AFTERWARDS = {"deploy_to_acts.md": _the_demo_records_the_recipe_it_ran}


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
    script = "\n".join(runnable(block) for block in page_blocks(doc))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "SLURM_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["OMP_NUM_THREADS"] = "1"
    env.update(SCALE_DOWN_ENV)  # a script the doc runs (examples/quickstart.sh) reads its sizes from these
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=workspace, env=env, capture_output=True,
                          text=True, timeout=1700)
    assert done.returncode == 0, f"{doc}:\n{script}\n--- stderr:\n{done.stderr[-4000:]}"
    if doc in AFTERWARDS:
        AFTERWARDS[doc](workspace, script)
    assert "Traceback" not in done.stderr


def test_every_example_page_is_run():
    assert {doc.name for doc in EXAMPLES.glob("*.md")} == set(FIXTURES)

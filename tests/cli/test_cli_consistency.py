"""One command line: types and defaults in every --help, --quiet wherever progress is drawn, no carriage-return
bars in logs, honest step counts after a resume, and errors that say what the file is."""

from __future__ import annotations

import importlib
import io
import json
import subprocess
import sys

import click
import pytest

from domainpar.cli.main import COMMANDS, main
from domainpar.cli.options import OptionalValue, ShownChoices
from domainpar.progress import LineProgress, progress
from fixtures import write_graphs


def _commands() -> dict[str, click.Command]:
    return {name: getattr(importlib.import_module(module), attr) for name, (module, attr, _) in COMMANDS.items()}


def _help_records(command: click.Command) -> dict[str, tuple[click.Option, str, str]]:
    ctx = click.Context(command, info_name=command.name)
    records = {}
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden:
            record = param.get_help_record(ctx)
            if record is not None:
                records[param.opts[0]] = (param, *record)
    return records


def test_train_help_shows_types_defaults_and_choices():
    records = _help_records(_commands()["train"])
    assert records["--hidden"][1].startswith("--hidden INTEGER") and "[default: 64]" in records["--hidden"][2]
    # The domain is shown with the default (domainpar.domains): what click refuses is what --help says.
    assert records["--lr"][1].startswith("--lr FLOAT") and "[default: 0.001; (0, 10]]" in records["--lr"][2]
    assert records["--max-steps"][1].startswith("--max-steps INTEGER|none") and "[default: none]" in records["--max-steps"][2]
    assert records["--domain-size"][1].startswith("--domain-size INTEGER|none")
    assert records["--mode"][1].startswith("--mode [domain|sectors|single]") and "[default: domain]" in records["--mode"][2]
    assert records["--precision"][1].startswith("--precision [fp32|bf16|fp64]")
    assert "[default: progress]" in records["--progress"][2]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_shows_its_type_and_default(name):
    """No numeric option typed TEXT, and every option with a default shows it (train's included, whose options
    default to "not given" so that they override a config file only when given)."""
    for flag, (param, declaration, help_text) in _help_records(_commands()[name]).items():
        if flag in ("--help", "--version", "--config"):
            continue
        kind = param.type.base if isinstance(param.type, OptionalValue) else param.type
        if isinstance(kind, (click.types.StringParamType, ShownChoices)) or param.is_flag:
            pass
        else:
            assert " TEXT" not in declaration, f"{name} {flag}: numeric option shown as TEXT"
        # A plain switch (--quiet) is off unless given; everything else with a default shows it.
        has_default = param.default is not None and param.default != "" and not param.required
        if (has_default or param.show_default) and not (param.is_flag and not param.secondary_opts):
            assert "[default: " in help_text, f"{name} {flag} does not show its default"


@pytest.mark.parametrize("name", ["simulate", "build", "partition", "train", "evaluate", "demo"])
def test_every_command_that_draws_progress_takes_quiet(name):
    assert "--quiet" in {opt for param in _commands()[name].params for opt in param.opts}


def test_optional_numbers_are_checked_while_parsing_and_none_clears_a_config_value(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", "--max-steps", "three"])
    assert info.value.code == 2
    assert "'three' is not a valid integer" in capsys.readouterr().err
    config = tmp_path / "run.yaml"
    config.write_text("run:\n  max_steps: 5\n")
    from domainpar.cli.options import given_fields
    from domainpar.train.config import load_config

    ctx = _commands()["train"].make_context("train", ["--config", str(config), "--max-steps", "none"])
    assert load_config(config, given_fields({k: v for k, v in ctx.params.items() if "__" in k})).run.max_steps is None


def test_progress_in_a_log_is_plain_lines_at_a_sane_rate():
    stream = io.StringIO()
    bar = progress(total=1000, desc="epoch 1/3", unit="step", file=stream)
    assert isinstance(bar, LineProgress)
    for _ in range(1000):
        bar.update(1)
    bar.set_postfix(loss="0.4127")
    bar.close()
    assert stream.getvalue() == ""  # work shorter than the interval (30 s) says nothing: the command's output follows
    ticking = LineProgress(total=3, desc="epoch 1/3", unit="step", file=stream, every_s=0.0)
    for _ in range(3):
        ticking.set_postfix(loss="0.4127")
        ticking.update(1)
    ticking.close()
    text = stream.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert [line.split(",")[0] for line in lines] == ["epoch 1/3: 1/3 step (33%)", "epoch 1/3: 2/3 step (67%)",
                                                      "epoch 1/3: 3/3 step (100%)"]
    assert all(line.endswith("loss=0.4127") for line in lines)
    quiet = io.StringIO()
    silent = progress(total=3, file=quiet, enabled=False)
    silent.update(3)
    silent.close()
    assert quiet.getvalue() == ""


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar():
    from tqdm import tqdm

    bar = progress(total=2, file=_Terminal())
    assert isinstance(bar, tqdm)
    bar.close()


@pytest.mark.timeout(120)
def test_a_command_writes_no_carriage_returns_into_a_pipe(tmp_path):
    done = subprocess.run([sys.executable, "-m", "domainpar", "simulate", "--out", str(tmp_path / "ev"), "--events", "2",
                           "--particles", "20"], capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr and "%|" not in done.stderr


def _train_args(data, out, *extra):
    return ["train", "--data", str(data), "--mode", "single", "--hidden", "4", "--iterations", "1", "--mlp-layers", "1",
            "--out", str(out), "--no-curves", "--quiet", "--epochs", "1", *extra]


@pytest.mark.timeout(300)
def test_a_resumed_run_reports_the_steps_it_trained(tmp_path, capsys):
    data = tmp_path / "g"
    write_graphs(data, 4)
    out = tmp_path / "run"
    # --stop-after-steps pauses the 4-step run (--max-steps would make it a 2-step run, whose schedule a resume keeps).
    main(_train_args(data, out, "--max-steps", "4", "--stop-after-steps", "2"))
    assert capsys.readouterr().out.startswith("paused after step 2 of 4 (--stop-after-steps)")
    main(_train_args(data, out, "--max-steps", "4", "--resume"))
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("trained 2 steps (steps 3-4, resumed at step 2; 1 epochs in all)"), first
    assert json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 4


def test_evaluate_given_an_edge_filter_says_so(tmp_path, capsys):
    from domainpar.filter.edge_filter import EdgeFilter, FilterConfig, FilterNet

    config = FilterConfig()
    path = tmp_path / "filter.pt"
    EdgeFilter(FilterNet(7, config.hidden, config.layers), 0.1, None, None, config, {}).save(path)
    write_graphs(tmp_path / "g", 1)
    with pytest.raises(SystemExit) as info:
        main(["evaluate", "--checkpoint", str(path), "--data", str(tmp_path / "g")])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "format version" not in err
    assert "found an edge filter" in err and "pass the GNN's model.pt" in err

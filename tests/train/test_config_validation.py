"""Training options and configs at the boundary, and a run that fails before it starts leaving nothing behind."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from domainpar.errors import DomainparError
from domainpar.model.config import ModelConfig
from domainpar.train.config import check_model_size, load_config, validate_config
from domainpar.train.run import train
from fixtures import write_graphs


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"optim.lr": "inf"}, r"command line: --lr must be a finite number \(got 'inf'\)"),
        ({"optim.lr": float("nan")}, r"--lr must be a finite number \(got nan\)"),
        ({"parallel.timeout_s": "inf"}, r"--timeout must be a finite number \(got 'inf'\)"),
        ({"optim.clip": 1e400}, r"--clip must be a finite number"),
        ({"run.epochs": 10**30}, r"--epochs must be an integer of at most 64 bits \(got 1000000000000000000000000000000\)"),
        ({"run.seed": "1" * 100}, r"--seed must be an integer \(got '1{60}'\.\.\. \(100 characters\)\)"),
        ({"run.epochs": True}, r"--epochs must be an integer \(got True\)"),
        ({"optim.lr": [1, 2]}, r"--lr must be a number \(got \[1, 2\]\)"),
    ],
)
def test_numeric_options_are_finite_and_64_bit(overrides, message):
    with pytest.raises(DomainparError, match=message) as info:
        load_config(None, overrides)
    assert len(str(info.value)) < 300


def test_yaml_config_read_as_utf8_with_clear_errors(tmp_path):
    bad = tmp_path / "run.yaml"
    bad.write_bytes(b"optim:\n  lr: 0.001\n# caf\xe9\n")
    with pytest.raises(DomainparError, match=r"run.yaml: expected a UTF-8 YAML config file \(found byte 0xe9 at position 24, not UTF-8 text\)"):
        load_config(bad)
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(DomainparError, match=r"dir.yaml: expected a YAML config file \(found a directory\)"):
        load_config(tmp_path / "dir.yaml")
    utf8 = tmp_path / "ok.yaml"
    utf8.write_text("# café — UTF-8 is fine\noptim:\n  lr: 0.002\n", encoding="utf-8")
    assert load_config(utf8).optim.lr == 0.002


def test_yaml_alias_bomb_value_is_refused_quickly(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 12):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    lines.append("optim:\n  lr: *a11")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DomainparError) as info:
        load_config(path)
    assert len(str(info.value)) < 400


def test_model_that_cannot_fit_memory_is_refused_without_allocating():
    check_model_size(ModelConfig(hidden=64))
    with pytest.raises(DomainparError, match=r"--hidden/--iterations/--mlp-layers: a model of hidden size 60000, 8 iterations .* GiB of memory"):
        check_model_size(ModelConfig(hidden=60000))


def test_out_of_range_options(tmp_path):
    data = tmp_path / "g"
    write_graphs(data, 1)
    base = {"data.train": str(data), "run.out": str(tmp_path / "o"), "parallel.mode": "single"}
    for extra, message in [
        ({"model.hidden": 10**6}, r"--hidden must be at most 65536 \(got 1000000\)"),
        ({"parallel.domain_size": 0}, r"--domain-size must be an integer >= 1 \(got 0\)"),
        ({"run.seed": -1}, r"--seed must be an integer in \[0, 2\^63\) \(got -1\)"),
    ]:
        with pytest.raises(DomainparError, match=message):
            validate_config(load_config(None, {**base, **extra}), world_size=1, cuda_available=False)


def _tiny(data: Path, out: Path, **extra):
    return load_config(None, {"data.train": str(data), "run.out": str(out), "parallel.mode": "single", "model.hidden": 4,
                              "model.num_iterations": 1, "run.progress": False, "run.curves": False, **extra})  # fmt: skip


def test_failed_run_leaves_no_config_yaml(tmp_path):
    """A graph whose content is bad (NaN features: found when it is loaded) stops the run before --out exists."""
    data = tmp_path / "g"
    (path,) = write_graphs(data, 1)
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["x"][3, 0] = np.nan
    np.savez(path, **arrays)
    out = tmp_path / "run"
    with pytest.raises(DomainparError, match=r"x must be finite numbers \(got nan at \[3, 0\]\)"):
        train(_tiny(data, out))
    assert not out.exists()


def test_bad_validation_graph_is_found_before_training(tmp_path):
    data, val = tmp_path / "g", tmp_path / "v"
    write_graphs(data, 2)
    (bad,) = write_graphs(val, 1, first_id=50)
    with np.load(bad, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["y"][0] = 3.0
    np.savez(bad, **arrays)
    out = tmp_path / "run"
    with pytest.raises(DomainparError, match=r"y must be edge labels 0 or 1"):
        train(_tiny(data, out, **{"data.val": str(val), "run.epochs": 3}))
    assert not out.exists()  # used to fail after the first epoch, with config.yaml, steps and a checkpoint written


def test_batch_larger_than_the_dataset_is_refused(tmp_path):
    data = tmp_path / "g"
    write_graphs(data, 2)
    with pytest.raises(DomainparError, match=r"--batch-events 5 must be at most the number of training events \(2 in"):
        train(_tiny(data, tmp_path / "run", **{"optim.batch_events": 5}))
    assert not (tmp_path / "run").exists()


def test_successful_run_writes_its_config(tmp_path):
    data = tmp_path / "g"
    write_graphs(data, 1)
    train(_tiny(data, tmp_path / "run"))
    assert load_config(tmp_path / "run" / "config.yaml").model.hidden == 4

"""Training engine pieces without processes: config, sampler, schedule, metrics, checkpoints."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from domainpar.errors import DomainparError
from domainpar.train.checkpoint import (
    CHECKPOINT_FORMAT_VERSION,
    checkpoint_files,
    latest_checkpoint,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from domainpar.train.config import TrainConfig, flatten, load_config, validate_config
from domainpar.train.metrics import EdgeCounter, roc_auc_from_histograms
from domainpar.train.sampler import BucketSampler, assign_round_robin
from domainpar.train.schedule import learning_rate
from domainpar.train.sections import OptimConfig


@pytest.fixture()
def data_dir(tmp_path):
    from fixtures import write_graphs

    write_graphs(tmp_path / "graphs", 2)
    return tmp_path / "graphs"


def test_yaml_and_overrides(tmp_path, data_dir):
    path = tmp_path / "run.yaml"
    path.write_text(f"data:\n  train: {data_dir}\noptim:\n  lr: 0.01\nparallel:\n  mode: sectors\n  domain_size: 2\n")
    config = load_config(path, {"optim.lr": "0.5", "run.epochs": 3, "data.val": "none"})
    assert config.optim.lr == 0.5 and config.run.epochs == 3 and config.parallel.mode == "sectors"
    assert config.parallel.domain_size == 2 and config.data.val is None
    assert load_config(None, {}) == TrainConfig()
    # Round trip: every field of a non-default config survives to_dict → overrides → config.
    assert load_config(None, flatten(config.to_dict(), "round trip")) == config


def test_every_config_field_is_a_flag_with_its_docstring():
    """The train command's options are generated from the config dataclasses: one per field, help = docstring."""
    import dataclasses

    from domainpar.cli.options import field_docs
    from domainpar.cli.train import train as train_command
    from domainpar.train.config import DERIVED_FIELDS, SECTION_TYPES, flag_name

    options = {opt for param in train_command.params for opt in param.opts}
    helps = {param.opts[0]: param.help for param in train_command.params}
    flags = []
    for section, cls in SECTION_TYPES.items():
        docs = field_docs(cls)
        for field in dataclasses.fields(cls):
            dotted = f"{section}.{field.name}"
            if dotted in DERIVED_FIELDS:
                assert flag_name(dotted) not in options
                continue
            flag = flag_name(dotted)
            flags.append(flag)
            assert flag in options, dotted
            assert docs.get(field.name) and helps[flag] == docs[field.name], dotted
    assert len(flags) == len(set(flags)), "two config fields share a flag"


def test_model_section_is_the_model_config_and_derived_widths_are_refused(tmp_path):
    from domainpar.model.config import ModelConfig

    config = load_config(None, {"model.num_iterations": 3, "model.checkpointing": "true"})
    assert isinstance(config.model, ModelConfig) and config.model.num_iterations == 3 and config.model.checkpointing
    with pytest.raises(DomainparError, match="model.node_features cannot be set"):
        load_config(None, {"model.node_features": 5})
    # One validation, in ModelConfig, reported with the user's flag name.
    with pytest.raises(DomainparError, match=r"command line: --hidden must be a positive integer \(got 0\)"):
        load_config(None, {"model.hidden": 0})
    path = tmp_path / "bad.yaml"
    path.write_text("model:\n  num_iterations: -1\n")
    with pytest.raises(DomainparError, match=r"bad.yaml: model.num_iterations must be a non-negative integer"):
        load_config(path)


def test_example_yaml_loads():
    config = load_config("examples/train_default.yaml")
    assert config.parallel.mode == "domain" and config.optim.batch_events == 2


@pytest.mark.parametrize(
    "text, match",
    [
        ("optim:\n  lrr: 1\n", r"unknown config key 'optim.lrr'"),
        ("bogus:\n  lr: 1\n", r"unknown config key 'bogus.lr'"),
        ("optim:\n  lr: fast\n", r"optim.lr must be a number \(got 'fast'\)"),
        ("run:\n  epochs: 1.5\n", r"run.epochs must be an integer"),
        ("run: [1, 2]\n", r"section 'run' must be a mapping"),
        ("- a\n- b\n", r"expected a YAML mapping"),
        ("optim: {lr: [\n", r"expected a YAML config file, could not parse it"),
    ],
)
def test_yaml_errors(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(DomainparError, match=match):
        load_config(path)


def test_missing_config_file(tmp_path):
    with pytest.raises(DomainparError, match=r"config file not found"):
        load_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    "overrides, world, match",
    [
        ({"parallel.domain_size": 2}, 3, r"world size 3 must be divisible by --domain-size 2 \(got remainder 1\)"),
        ({"parallel.mode": "hybrid"}, 2, r"--mode must be one of domain, sectors, single \(got 'hybrid'\)"),
        ({"run.precision": "bf16"}, 1, r"--precision bf16 needs a CUDA device"),
        ({"data.train": "/no/such/dir"}, 1, r"--data /no/such/dir: no such file or directory"),
        ({"data.train": ""}, 1, r"--data is required"),
        ({"parallel.mode": "single"}, 2, r"--mode single runs one process \(got 2 ranks\)"),
        ({"parallel.mode": "single", "parallel.ranks": 2}, 1, r"--ranks must be 1 in single mode \(got 2\)"),
        ({"parallel.domain_size": 1, "optim.batch_events": 3}, 2, r"--batch-events 3 must be a multiple of the number of replicas 2"),
        ({"data.method": "random"}, 1, r"--method must be one of metis, geometric"),
        ({"optim.lr_scaling": "cube"}, 1, r"--lr-scaling must be one of none, linear, sqrt"),
        ({"run.keep": 0}, 1, r"--keep must be an integer >= 1 \(got 0\)"),
        ({"run.resume_from": "/no/ckpt.pt"}, 1, r"--resume-from /no/ckpt.pt: checkpoint file not found"),
        ({"run.out": "OUT_WITH_CHECKPOINT"}, 1, r"already holds checkpoints \(newest step-00000001.pt\); pass --resume"),
    ],
)
def test_config_validation(tmp_path, data_dir, overrides, world, match):
    if overrides.get("run.out") == "OUT_WITH_CHECKPOINT":
        save_checkpoint(_state(1), tmp_path / "old" / "checkpoints", keep=1)
        overrides = {"run.out": str(tmp_path / "old")}
    with pytest.raises(DomainparError, match=match):
        # A value outside its field's domain is refused as the config is built (domainpar.domains), the others here.
        config = load_config(None, {"data.train": str(data_dir), "run.out": str(tmp_path / "fresh"), **overrides})
        validate_config(config, world_size=world, cuda_available=False)


def test_sampler_is_seeded_bucketed_and_layout_free():
    sizes = np.array([5, 100, 7, 98, 6, 102, 8, 97, 50])
    sampler = BucketSampler(sizes, batch_events=2, seed=3)
    assert sampler.steps_per_epoch == 4
    batches = sampler.epoch_batches(0)
    assert batches.shape == (4, 2)
    assert len(set(batches.ravel().tolist())) == 8  # one left-over event skipped, no repeats
    for a, b in batches:  # size buckets: the two replicas of a step get similar work
        assert abs(sizes[a] - sizes[b]) <= 3 or {sizes[a], sizes[b]} & {50}
    np.testing.assert_array_equal(batches, BucketSampler(sizes, 2, seed=3).epoch_batches(0))
    assert not np.array_equal(batches, sampler.epoch_batches(1))
    # The two replicas of a step split the step's events; one replica takes all of them.
    step = sampler.epoch_batches(2)[1].tolist()
    assert sampler.replica_events(2, 1, 0, 2) + sampler.replica_events(2, 1, 1, 2) == step
    assert sampler.replica_events(2, 1, 0, 1) == step
    with pytest.raises(DomainparError, match=r"--batch-events 20 needs at least that many training events \(got 9\)"):
        BucketSampler(sizes, 20, 0)


def test_round_robin_assignment_covers_every_event_once():
    parts = assign_round_robin([3, 9, 1, 7, 5], 2)
    assert sorted(parts[0] + parts[1]) == [0, 1, 2, 3, 4]
    assert parts[0][0] == 1 and parts[1][0] == 3


def test_schedule():
    optim = OptimConfig(lr=1.0, warmup=4, schedule="cosine", min_lr_ratio=0.1)
    values = [learning_rate(s, 14, optim) for s in range(14)]
    assert values[:4] == [0.25, 0.5, 0.75, 1.0]
    assert values[4] == 1.0 and math.isclose(values[-1], 0.1)
    assert all(a >= b for a, b in zip(values[4:], values[5:]))
    step = OptimConfig(lr=1.0, schedule="step", step_size=3, gamma=0.5)
    assert [learning_rate(s, 10, step) for s in (0, 2, 3, 6)] == [1.0, 1.0, 0.5, 0.25]
    assert learning_rate(5, 10, OptimConfig(lr=0.1, schedule="constant", lr_scaling="linear"), 4) == pytest.approx(0.4)
    assert learning_rate(5, 10, OptimConfig(lr=0.1, schedule="constant", lr_scaling="sqrt"), 4) == pytest.approx(0.2)


def test_metrics_counts_and_auc():
    gen = torch.Generator().manual_seed(0)
    labels = (torch.rand(4000, generator=gen) < 0.3).float()
    scores = torch.sigmoid(torch.randn(4000, generator=gen) + 2 * labels)
    whole, split = EdgeCounter(0.5), EdgeCounter(0.5)
    whole.add_edges(scores, labels)
    whole.add_loss(0.75, events=2)
    split.add_loss(0.5, events=2)
    split.add_edges(scores[:1000], labels[:1000])
    other = EdgeCounter(0.5)
    other.add_edges(scores[1000:], labels[1000:])
    other.add_loss(0.25, events=0)  # the other part of the same events: its loss share only
    split.load_packed(split.packed() + other.packed())  # what the world all-reduce does
    a, b = whole.summary(), split.summary()
    assert a == b and a.loss == 0.375 and a.num_events == 2
    passed, truth = scores >= 0.5, labels > 0.5
    assert a.efficiency == pytest.approx(float((passed & truth).sum() / truth.sum()))
    assert a.purity == pytest.approx(float((passed & truth).sum() / passed.sum()))
    pos, neg = scores[truth].double(), scores[~truth].double()
    exact = float((pos[:, None] > neg[None, :]).double().mean())
    assert a.auc == pytest.approx(exact, abs=1e-4)
    assert math.isnan(roc_auc_from_histograms(np.ones(3), np.zeros(3)))


def _state(step: int) -> dict:
    return {
        "format_version": CHECKPOINT_FORMAT_VERSION,
        "step": step,
        "epoch": 0,
        "step_in_epoch": step,
        "model": {"w": torch.full((3,), float(step))},
        "model_config": {"hidden": 4},
        "optimizer": {"state": {}, "param_groups": []},
        "config": {"optim": {"batch_events": 1}},
        "rng": rng_state(),
    }


def test_checkpoints_keep_last_k_and_ignore_temporaries(tmp_path):
    for step in range(1, 6):
        save_checkpoint(_state(step), tmp_path, keep=2)
    (tmp_path / ".step-00000009.pt.tmp-abc.pt").write_bytes(b"half written")
    assert [p.name for p in checkpoint_files(tmp_path)] == ["step-00000004.pt", "step-00000005.pt"]
    state = load_checkpoint(latest_checkpoint(tmp_path))
    assert state["step"] == 5 and torch.equal(state["model"]["w"], torch.full((3,), 5.0))


def test_rng_state_round_trip():
    state = rng_state()
    a = (torch.rand(3), np.random.rand(3), __import__("random").random())
    set_rng_state(state)
    b = (torch.rand(3), np.random.rand(3), __import__("random").random())
    assert torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2] == b[2]


@pytest.mark.parametrize("damage", ["truncate", "garbage", "not_a_dict"])
def test_corrupted_checkpoint_is_a_clear_error(tmp_path, damage):
    path = save_checkpoint(_state(1), tmp_path, keep=1)
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:200])
    elif damage == "garbage":
        path.write_bytes(b"\x00garbage" * 50)
    else:
        torch.save({"weights": torch.ones(2)}, path)
    with pytest.raises(DomainparError, match=r"step-00000001.pt: (expected a domainpar checkpoint|checkpoint is missing)"):
        load_checkpoint(path)


def test_cli_config_error_is_one_line(data_dir, capsys):
    from domainpar.cli.main import main

    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--data", str(data_dir), "--ranks", "3", "--domain-size", "2"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: world size 3 must be divisible by --domain-size 2 (got remainder 1)"


def test_tensorboard_requested_without_package(data_dir, tmp_path):
    import importlib.util

    if importlib.util.find_spec("tensorboard") is not None:
        pytest.skip("tensorboard is installed here")
    config = load_config(None, {"data.train": str(data_dir), "run.out": str(tmp_path / "o"), "run.tensorboard": True})
    with pytest.raises(DomainparError, match=r"--tensorboard needs the tensorboard package"):
        validate_config(config, world_size=1, cuda_available=False)


def test_a_resume_refuses_every_setting_but_the_elastic_ones():
    """The comparison is generic: a field of the config or the model config that is not listed as elastic is
    refused when it differs — so a setting added later (a model option, a loss option) is compared by default."""
    import dataclasses

    from domainpar.model.config import ModelConfig
    from domainpar.train.config import SECTION_TYPES, TrainConfig
    from domainpar.train.state import RESUME_ELASTIC, _differences

    def other(value):
        if isinstance(value, bool):
            return not value
        if isinstance(value, (int, float)):
            return value + 1
        if isinstance(value, str):
            return value + "-other"
        if isinstance(value, dict):
            return {**value, "an_option": 1}  # model options: a key that one run has and the other has not
        return 7 if value is None else None

    base = TrainConfig().to_dict()
    checked = 0
    for section, cls in SECTION_TYPES.items():
        for f in dataclasses.fields(cls):
            if f.name not in base[section]:
                continue  # derived fields are compared through the model config
            changed = {**base, section: {**base[section], f.name: other(base[section][f.name])}}
            found = [d for d, _, _ in _differences(base, changed, "")]
            dotted = f"{section}.{f.name}"
            expected = dotted + (".an_option" if isinstance(base[section][f.name], dict) else "")
            assert found == ([] if dotted in RESUME_ELASTIC else [expected]), dotted
            checked += 1
    model = ModelConfig().to_dict()
    for name, value in model.items():
        found = [d for d, _, _ in _differences(model, {**model, name: other(value)}, "model.")]
        dotted = f"model.{name}" + (".an_option" if isinstance(value, dict) else "")
        assert found == ([] if f"model.{name}" in RESUME_ELASTIC else [dotted]), name
    # A model option that does not exist today (e.g. a model registry's name) is compared too.
    assert [d for d, _, _ in _differences({**model, "name": "a"}, {**model, "name": "b"}, "model.")] == ["model.name"]
    # domain and single mode train exactly the same model; sectors does not.
    single, domain, sectors = ({**base, "parallel": {**base["parallel"], "mode": m}} for m in ("single", "domain", "sectors"))
    assert _differences(single, domain, "") == [] and [d for d, _, _ in _differences(single, sectors, "")] == ["parallel.mode"]
    assert checked > 40

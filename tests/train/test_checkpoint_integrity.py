"""Checkpoints that cannot lie: a checksum verified on every load, typed entries, no stale temporaries,
durable renames, ``--resume-from`` an older checkpoint moving the newer ones aside, and the learning rate
after a resume with another replica count kept unless the user asks (and said in the log)."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch


from domainpar.errors import DomainparError
from domainpar.train.checkpoint import (
    CHECKPOINT_FORMAT_VERSION,
    DIGEST_KEY,
    SUPERSEDED_DIR,
    checkpoint_files,
    load_checkpoint,
    remove_stale_checkpoint_temporaries,
    retire_newer_checkpoints,
    seal_state,
    state_digest,
    write_checkpoint,
)
from domainpar.train.run import train
from fixtures import checkpointed_run_config, write_graphs


_config = checkpointed_run_config


@pytest.fixture(scope="module")
def run_dir(checkpointed_run) -> Path:
    """A finished 6-step run with a checkpoint at every step (shared with the other resume tests: read-only)."""
    return checkpointed_run


def _flip(path: Path, target: Path, entry: int = 0, count: int = 64) -> Path:
    """A copy of ``path`` with up to ``count`` bytes inverted inside one tensor storage of the zip
    (``entry`` 0 = the largest storage, 1 the next ..., -1 the smallest): what a bad disk or transfer does."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        storages = sorted((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: -i.file_size)
    info = storages[entry]
    data = bytearray(path.read_bytes())
    # The data starts after the *local* header, whose extra field (torch's alignment padding) is not the central one.
    name_length, extra_length = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
    start = info.header_offset + 30 + name_length + extra_length
    for i in range(start, start + min(count, info.file_size)):
        data[i] ^= 0xFF
    target.write_bytes(bytes(data))
    return target


# ----------------------------------------------------------------------------- the checksum


def test_every_written_checkpoint_carries_a_verified_checksum(run_dir):
    files = checkpoint_files(run_dir / "run" / "checkpoints")
    assert len(files) == 6
    for path in files + [run_dir / "run" / "model.pt"]:
        raw = torch.load(path, weights_only=True)
        assert raw["format_version"] == CHECKPOINT_FORMAT_VERSION
        assert raw[DIGEST_KEY] == state_digest(raw) == load_checkpoint(path, resumable=False)[DIGEST_KEY]
    assert len({load_checkpoint(p, resumable=False)[DIGEST_KEY] for p in files}) == 6


def test_digest_is_canonical_and_sees_one_bit():
    state = {"b": torch.arange(6, dtype=torch.float32).reshape(2, 3), "a": {"x": [1, 2.5, None, True], "y": (3, "s")}}
    reordered = {"a": {"y": (3, "s"), "x": [1, 2.5, None, True]}, "b": state["b"].clone()}
    assert state_digest(state) == state_digest(reordered)
    flipped = state["b"].clone()
    flipped.view(torch.int32)[1, 2] ^= 1  # one bit of one float
    assert state_digest({**state, "b": flipped}) != state_digest(state)
    # Same values, other container or dtype: other content.
    assert state_digest({**state, "a": {"x": (1, 2.5, None, True), "y": (3, "s")}}) != state_digest(state)
    assert state_digest({**state, "b": state["b"].double()}) != state_digest(state)
    assert state_digest({**state, "a": {"x": [1, 2.5, None, 1], "y": (3, "s")}}) != state_digest(state)


@pytest.mark.parametrize("entry", [0, 1, 5, -1])
def test_flipped_bytes_are_refused_on_every_load(run_dir, tmp_path, entry):
    """Flipped bytes in any tensor storage (weights, optimiser moments, a step counter): never loaded as if intact."""
    source = checkpoint_files(run_dir / "run" / "checkpoints")[-1]
    damaged = _flip(source, tmp_path / source.name, entry=entry)
    with pytest.raises(DomainparError, match=r"(does not match its checksum|could not load it)") as info:
        load_checkpoint(damaged)
    assert "\n" not in str(info.value)
    from domainpar.inference import load_model

    with pytest.raises(DomainparError, match=r"(does not match its checksum|could not load it)"):
        load_model(damaged)


def test_checksum_is_what_catches_flipped_weights(run_dir, tmp_path):
    """The damage used above loads fine without the checksum: torch itself does not notice it."""
    source = checkpoint_files(run_dir / "run" / "checkpoints")[-1]
    intact = torch.load(source, weights_only=True)
    for entry in (0, 1, 5, -1):
        damaged = torch.load(_flip(source, tmp_path / "x.pt", entry=entry), weights_only=True)
        assert damaged.keys() == intact.keys()
        assert state_digest(damaged) != intact[DIGEST_KEY], entry


def test_rank_digest_mismatch_is_named(run_dir):
    first, second = checkpoint_files(run_dir / "run" / "checkpoints")[-2:]
    digest = load_checkpoint(first, resumable=False)[DIGEST_KEY]
    assert load_checkpoint(first, expected_digest=digest)[DIGEST_KEY] == digest
    with pytest.raises(DomainparError, match=r"but rank 0 loaded .* the ranks see different files"):
        load_checkpoint(second, expected_digest=digest)


def test_checkpoint_without_checksum_is_refused(run_dir, tmp_path):
    state = torch.load(run_dir / "run" / "model.pt", weights_only=True)
    del state[DIGEST_KEY]
    torch.save(state, tmp_path / "a.pt")
    with pytest.raises(DomainparError, match=r"entry 'sha256' must be a SHA-256 hex digest \(got NoneType None\)"):
        load_checkpoint(tmp_path / "a.pt", resumable=False)
    state["format_version"] = 1
    torch.save(state, tmp_path / "b.pt")
    with pytest.raises(DomainparError, match=r"format version must be 2 \(got 1\) \(written without a checksum"):
        load_checkpoint(tmp_path / "b.pt", resumable=False)


# ----------------------------------------------------------------------------- typed entries under a valid checksum


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s.__setitem__("step", "two"), r"entry 'step' must be a non-negative integer \(got str 'two'\)"),
        (lambda s: s.__setitem__("step", True), r"entry 'step' must be a non-negative integer \(got bool True\)"),
        (lambda s: s.__setitem__("epoch", 1.5), r"entry 'epoch' must be a non-negative integer \(got float 1.5\)"),
        (lambda s: s.pop("optimizer"), r"missing entries \['optimizer'\]"),
        (lambda s: s.__setitem__("optimizer", {"state": 1}), r"entry 'optimizer' must be an optimizer state_dict"),
        (lambda s: s.__setitem__("rng", {"torch": "seed"}), r"entry 'rng' must be the RNG states"),
        (lambda s: s["model_config"].__setitem__("hidden", "8"), r"entry 'model_config.hidden' must be an integer \(got str '8'\)"),
        (lambda s: s["model_config"].__setitem__("layer_norm", "yes"), r"entry 'model_config.layer_norm' must be true or false"),
        (lambda s: s["model_config"].__setitem__("depth", 3), r"entry 'model_config' is not a valid model config \(model config has unknown keys \['depth'\]"),
        (lambda s: s["config"].__setitem__("optim", "fast"), r"checkpoint entry config: section 'optim' must be a mapping"),
        (lambda s: s["config"]["optim"].__setitem__("lr", "fast"), r"checkpoint entry config: optim.lr must be a number \(got 'fast'\)"),
        (lambda s: s["model"].__setitem__(next(iter(s["model"])), s["model"][next(iter(s["model"]))].int()), r"must be a floating-point tensor"),
        (lambda s: s.__setitem__("step_losses", ["x"]), r"entry 'step_losses' must be a list of numbers"),
        (lambda s: s["schedule"].__setitem__("num_replicas", 0), r"entry 'schedule.num_replicas' must be a positive integer \(got int 0\)"),
        (lambda s: s.__setitem__("step_in_epoch", 10**6), r"entry 'step_in_epoch' must be at most step"),
        (lambda s: s.__setitem__("step", "x" * 10**6), r"\(got str 'x{60}'\.\.\. \(1,000,000 characters\)\)$"),
    ],
)
def test_wrong_or_missing_entries_are_one_line(run_dir, tmp_path, edit, message):
    state = torch.load(checkpoint_files(run_dir / "run" / "checkpoints")[-1], weights_only=True)
    edit(state)
    write_checkpoint(state, tmp_path / "step-00000099.pt")  # a valid checksum over the wrong content
    with pytest.raises(DomainparError, match=message) as info:
        load_checkpoint(tmp_path / "step-00000099.pt")
    assert "\n" not in str(info.value) and len(str(info.value)) < 500


def test_model_pt_needs_only_the_model_entries(run_dir):
    state = load_checkpoint(run_dir / "run" / "model.pt", resumable=False)
    assert state["step"] == 6
    with pytest.raises(DomainparError, match=r"missing entries \['epoch', 'step_in_epoch', 'optimizer'\] \(expected a resumable checkpoint\)"):
        load_checkpoint(run_dir / "run" / "model.pt")


# ----------------------------------------------------------------------------- writes: durable, no stale temporaries


def test_write_fsyncs_the_file_and_then_the_directory(tmp_path, monkeypatch):
    import domainpar.atomic as atomic

    events = []
    real_replace, real_fsync = os.replace, os.fsync
    monkeypatch.setattr(atomic.os, "replace", lambda a, b: (events.append(("replace", Path(b).name)), real_replace(a, b))[1])
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: (events.append(("fsync", "dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "file")), real_fsync(fd))[1])
    write_checkpoint({"format_version": CHECKPOINT_FORMAT_VERSION, "model": {"w": torch.ones(2)}, "model_config": {}}, tmp_path / "m.pt")
    assert events == [("fsync", "file"), ("replace", "m.pt"), ("fsync", "dir")]


def test_stale_temporaries_are_removed_and_nothing_else(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    stale = [checkpoints / ".step-00000004.pt.tmp-k2j3.pt", tmp_path / ".model.pt.tmp-x1.pt", tmp_path / ".metrics.jsonl.tmp-zz.jsonl"]
    kept = [checkpoints / "step-00000003.pt", tmp_path / ".hidden", tmp_path / "notes.tmp-1", checkpoints / ".other.tmp-1"]
    for path in stale + kept:
        path.write_bytes(b"x")
    removed = remove_stale_checkpoint_temporaries(tmp_path)
    assert sorted(removed) == sorted(stale)
    assert all(p.exists() for p in kept) and not any(p.exists() for p in stale)


_SLOW_WRITER = textwrap.dedent(
    """
    import os, sys, time
    real_replace = os.replace
    def replace(src, dst, *args, **kwargs):
        name = str(src).rsplit("/", 1)[-1]
        if name.startswith(".step-00000003.pt.tmp-"):
            # Killed here: the temporary file is half written and was never renamed.
            with open(src, "r+b") as fh:
                fh.truncate(fh.seek(0, 2) // 2)
            print("WRITING", flush=True)
            time.sleep(600)
        return real_replace(src, dst, *args, **kwargs)
    os.replace = replace
    from domainpar.cli.main import main
    main(sys.argv[1:])
    """
)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_kill_during_checkpoint_write_leaves_no_temporary_after_the_next_run(tmp_path):
    data = tmp_path / "graphs"
    write_graphs(data, 3)
    out = tmp_path / "run"
    argv = ["train", "--data", str(data), "--out", str(out), "--mode", "single", "--epochs", "2", "--hidden", "8",
            "--iterations", "1", "--checkpoint-every", "1", "--keep", "10", "--threads", "1", "--no-progress", "--no-curves",
            "--lr", "0.01", "--seed", "3", "--schedule", "constant"]  # fmt: skip  (the settings of _config: the resume below continues this run)
    process = subprocess.Popen([sys.executable, "-c", _SLOW_WRITER, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.strip() == "WRITING", process.stderr.read()
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=60)
        process.stdout.close()
        process.stderr.close()
    temporaries = sorted(p.name for p in (out / "checkpoints").glob(".step-*.pt.tmp-*"))
    assert len(temporaries) == 1 and temporaries[0].startswith(".step-00000003.pt.tmp-")
    assert [p.name for p in checkpoint_files(out / "checkpoints")] == ["step-00000001.pt", "step-00000002.pt"]

    summary = train(_config(data, out, **{"run.resume": True}))
    assert summary["steps"] == 6 and summary["steps_this_run"] == 4  # resumed from step 2, the last complete one
    assert sorted(p.name for p in out.rglob("*") if ".tmp-" in p.name) == []


# ----------------------------------------------------------------------------- --resume-from an older checkpoint


def test_resume_from_older_checkpoint_moves_newer_ones_aside(run_dir, tmp_path, capfd):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(run_dir / "run", out)
    files = checkpoint_files(out / "checkpoints")
    digests = {p.name: load_checkpoint(p, resumable=False)[DIGEST_KEY] for p in files}
    older = files[1]  # step 2
    summary = train(_config(run_dir / "graphs", out, **{"run.resume_from": str(older)}))
    assert summary["steps"] == 6 and summary["steps_this_run"] == 4
    aside = sorted((out / "checkpoints" / SUPERSEDED_DIR).glob("*/step-*.pt"))
    assert [p.name for p in aside] == [p.name for p in files[2:]]
    assert all(load_checkpoint(p, resumable=False)[DIGEST_KEY] == digests[p.name] for p in aside)  # moved, intact, not deleted
    assert "moved 4 newer checkpoint(s) aside to" in capfd.readouterr().err
    # The newest files are now those of the new history: a later --resume continues it, not the old one.
    new = checkpoint_files(out / "checkpoints")
    assert [p.name for p in new] == [f"step-{s:08d}.pt" for s in range(1, 7)]
    assert load_checkpoint(new[-1])["step"] == 6


def test_retire_keeps_the_resumed_file_and_older_ones(tmp_path):
    for step in (1, 2, 3, 4):
        write_checkpoint({"format_version": CHECKPOINT_FORMAT_VERSION, "step": step, "model": {"w": torch.ones(1)}, "model_config": {}},
                         tmp_path / f"step-{step:08d}.pt")  # fmt: skip
    moved = retire_newer_checkpoints(tmp_path, 2, tmp_path / "step-00000002.pt")
    assert [p.name for p in moved] == ["step-00000003.pt", "step-00000004.pt"]
    assert [p.name for p in checkpoint_files(tmp_path)] == ["step-00000001.pt", "step-00000002.pt"]
    assert retire_newer_checkpoints(tmp_path, 2, tmp_path / "step-00000002.pt") == []


# ----------------------------------------------------------------------------- learning rate after a resume on other replicas


@pytest.mark.parametrize("rescale", [False, True])
def test_learning_rate_on_resume_with_other_replica_count(run_dir, tmp_path, capfd, rescale):
    """A checkpoint written by 4 replicas under linear scaling, resumed on 1: the rate stays 4x unless asked."""
    import shutil

    out = tmp_path / "run"
    shutil.copytree(run_dir / "run", out)
    source = checkpoint_files(out / "checkpoints")[1]
    state = torch.load(source, weights_only=True)
    state["schedule"]["num_replicas"] = 4
    # As written by such a run: a resume must keep every setting of the run but the layout.
    state["config"]["optim"].update(lr_scaling="linear", schedule="constant")
    write_checkpoint(state, source)
    config = _config(run_dir / "graphs", out, **{"run.resume_from": str(source), "optim.lr_scaling": "linear",
                                                 "optim.schedule": "constant", "optim.rescale_lr_on_resume": rescale})  # fmt: skip
    train(config)
    err = capfd.readouterr().err
    records = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    after = [r["lr"] for r in records if r["step"] > 2]
    expected = 0.01 * (1 if rescale else 4)
    assert after and all(abs(lr - expected) < 1e-12 for lr in after), after
    assert "resuming step 2 on 1 replica(s) (checkpoint: 4); --lr-scaling linear" in err
    if rescale:
        assert "with --rescale-lr-on-resume: learning rate 0.01 (peak 0.01 x 1), was 0.04" in err
    else:
        assert "keeping the checkpoint's learning rate 0.04 (peak 0.01 x 4); --rescale-lr-on-resume would use 0.01" in err
    # The kept scaling is recorded again, so a further resume keeps it too.
    assert load_checkpoint(checkpoint_files(out / "checkpoints")[-1])["schedule"]["num_replicas"] == (1 if rescale else 4)


def test_seal_state_does_not_change_the_input():
    state = {"format_version": CHECKPOINT_FORMAT_VERSION, "x": torch.zeros(1)}
    sealed = seal_state(state)
    assert DIGEST_KEY not in state and sealed[DIGEST_KEY] == state_digest(state)


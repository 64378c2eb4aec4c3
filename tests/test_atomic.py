"""Atomic writes and staged outputs: all of a command's outputs appear together, or none do."""

from __future__ import annotations

import errno
import os

import pytest

from domainpar.atomic import (
    atomic_path,
    is_temporary_name,
    remove_stale_temporaries,
    remove_temporaries_of,
    staged_outputs,
    temporary_prefix,
)


def _tree(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_staged_outputs_publish_merges_into_existing_directories(tmp_path):
    out = tmp_path / "out"
    (out / "event1").mkdir(parents=True)
    (out / "event1" / "stale.npz").write_text("old plan file")
    (out / "keep.txt").write_text("kept")
    with staged_outputs() as outputs:
        staging = outputs.directory(out)
        (staging / "event1").mkdir()
        (staging / "event1" / "part.npz").write_text("new")
        (staging / "event2.npz").write_text("graph")
        outputs.file(tmp_path / "deep" / "er" / "report.json").write_text("{}")
        assert not (out / "event2.npz").exists() and not (tmp_path / "deep" / "er" / "report.json").exists()
    # A directory entry is replaced as a whole (no stale part of an older plan), files beside it stay.
    assert _tree(out) == ["event1", "event1/part.npz", "event2.npz", "keep.txt"]
    assert (tmp_path / "deep" / "er" / "report.json").read_text() == "{}"
    assert [p for p in tmp_path.rglob("*") if is_temporary_name(p.name)] == []


def test_staged_outputs_discard_leaves_nothing_and_touches_nothing(tmp_path):
    (tmp_path / "existing").mkdir()
    (tmp_path / "existing" / "a.txt").write_text("before")
    before = _tree(tmp_path)
    with pytest.raises(RuntimeError, match="event 2 failed"):
        with staged_outputs() as outputs:
            (outputs.directory(tmp_path / "existing") / "a.txt").write_text("after")
            (outputs.directory(tmp_path / "new" / "sub") / "b.txt").write_text("x")
            outputs.file(tmp_path / "other" / "c.json").write_text("{}")
            raise RuntimeError("event 2 failed")
    assert _tree(tmp_path) == before  # created parents ("new", "other") removed too
    assert (tmp_path / "existing" / "a.txt").read_text() == "before"


def test_staged_files_get_the_umask_mode(tmp_path):
    umask = os.umask(0o022)
    try:
        with staged_outputs() as outputs:
            outputs.file(tmp_path / "a.csv").write_text("x")
            outputs.directory(tmp_path / "d")
    finally:
        os.umask(umask)
    assert (tmp_path / "a.csv").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o755


def test_atomic_path_leaves_nothing_on_failure_and_stale_files_are_recognised(tmp_path):
    with pytest.raises(ValueError):
        with atomic_path(tmp_path / "m.pt") as tmp:
            tmp.write_text("half")
            assert is_temporary_name(tmp.name)
            raise ValueError("killed")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / ".m.pt.tmp-abc.pt").write_text("left by a kill")
    (tmp_path / ".hidden").write_text("not ours")
    assert [p.name for p in remove_stale_temporaries(tmp_path)] == [".m.pt.tmp-abc.pt"]
    assert [p.name for p in tmp_path.iterdir()] == [".hidden"]


def test_an_output_that_is_a_symbolic_link_is_written_through(tmp_path):
    """The link stays a link; its target gets the new content (as cp and shell redirection do)."""
    target = tmp_path / "real" / "report.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "report.json"
    link.symlink_to(target)
    with atomic_path(link) as tmp:
        assert tmp.parent == target.parent  # the rename stays on the target's file system
        tmp.write_text("new")
    assert link.is_symlink() and os.readlink(link) == str(target) and target.read_text() == "new"
    directory = tmp_path / "real_dir"
    directory.mkdir()
    (tmp_path / "out").symlink_to(directory)
    with staged_outputs() as outputs:
        (outputs.directory(tmp_path / "out") / "a.txt").write_text("a")
        outputs.file(tmp_path / "out" / "b.txt").write_text("b")
    assert (tmp_path / "out").is_symlink() and sorted(p.name for p in directory.iterdir()) == ["a.txt", "b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "real", "real_dir", "report.json"]  # no temporaries


def test_a_write_failure_names_the_destination_not_the_temporary(tmp_path):
    destination = tmp_path / "model.pt"
    with pytest.raises(OSError) as info:
        with atomic_path(destination) as tmp:
            with open(tmp, "wb"):
                raise OSError(errno.EFBIG, "File too large")  # what write() raises: no file name
    assert info.value.filename == str(destination) and list(tmp_path.iterdir()) == []
    with pytest.raises(OSError) as info:
        with staged_outputs() as outputs:
            staged = outputs.directory(tmp_path / "events")
            raise FileNotFoundError(errno.ENOENT, "No such file", str(staged / "event1-hits.csv"))
    assert info.value.filename == str(tmp_path / "events" / "event1-hits.csv") and list(tmp_path.iterdir()) == []


def test_a_worker_failure_line_names_the_destination_not_the_temporary(tmp_path):
    """A pool worker's failure reaches the parent as text (a MachineFault or DomainparError line): the staged
    directory it names is renamed in the text, a path that only starts with the same characters is not."""
    from domainpar.errors import DomainparError, MachineFault

    for kind in (MachineFault, DomainparError):
        with pytest.raises(kind) as info:
            with staged_outputs() as outputs:
                staged = outputs.directory(tmp_path / "events")
                raise kind(f"event1: {staged}/event1-hits.csv: file too large; {staged}x stays; in {staged}")
        assert str(info.value) == (f"event1: {tmp_path}/events/event1-hits.csv: file too large; {staged}x stays; "
                                   f"in {tmp_path}/events")  # fmt: skip
        assert list(tmp_path.iterdir()) == []


def test_the_temporaries_of_a_killed_writer_are_found_by_its_pid(tmp_path):
    mine = tmp_path / (temporary_prefix("event1.npz") + "abc.npz")
    mine.write_text("half")
    (tmp_path / (temporary_prefix("plan") + "xyz")).mkdir()
    other = tmp_path / ".event2.npz.tmp-1-abc.npz"  # another writer's (pid 1): not ours to remove
    other.write_text("half")
    keep = tmp_path / "event3.npz"
    keep.write_text("done")
    removed = remove_temporaries_of([tmp_path], [os.getpid()])
    assert len(removed) == 2 and sorted(p.name for p in tmp_path.iterdir()) == [other.name, keep.name]


def test_publishing_is_all_or_nothing_when_a_destination_cannot_be_replaced(tmp_path, monkeypatch):
    # Three outputs replace three older files; the second cannot be moved (an immutable or busy file: EPERM). The
    # files replaced before it must come back, byte for byte, and nothing staged may remain.
    out = tmp_path / "scores"
    out.mkdir()
    for name in ("event1.npz", "event2.npz", "event3.npz"):
        (out / name).write_text(f"old {name}")
    (tmp_path / "report.json").write_text("old report")
    blocked = out / "event2.npz"
    real_rename = os.rename

    def rename(src, dst, *args, **kwargs):
        if os.fspath(src) == os.fspath(blocked) or os.fspath(dst) == os.fspath(blocked):
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), os.fspath(src), os.fspath(dst))
        return real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(PermissionError) as info:
        with staged_outputs() as outputs:
            staging = outputs.directory(out)
            for name in ("event1.npz", "event2.npz", "event3.npz"):
                (staging / name).write_text(f"new {name}")
            outputs.file(tmp_path / "report.json").write_text("new report")
    assert info.value.filename == str(blocked)  # the user's file, not a temporary
    assert {p.name: p.read_text() for p in out.iterdir()} == {n: f"old {n}" for n in ("event1.npz", "event2.npz", "event3.npz")}
    assert (tmp_path / "report.json").read_text() == "old report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "scores"]


def test_a_staged_file_never_replaces_a_directory(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "event1.csv").mkdir()
    (tmp_path / "report.json").write_text("old")
    with pytest.raises(IsADirectoryError) as info:
        with staged_outputs() as outputs:
            (outputs.directory(tmp_path / "out") / "event1.csv").write_text("new")
            outputs.file(tmp_path / "report.json").write_text("new")
    assert info.value.filename == str(tmp_path / "out" / "event1.csv")
    assert (tmp_path / "out" / "event1.csv").is_dir() and (tmp_path / "report.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "report.json"]


@pytest.mark.parametrize("name", ["n" * 250 + ".json", "m" * 251 + ".npz", "é" * 126 + ".pt", "x" * 255, "a." + "b" * 253])
def test_a_destination_of_a_legal_name_always_gets_a_temporary(tmp_path, name):
    # 255 bytes is the longest legal name; its temporary (dot, marker, pid, random part, suffix) must fit too.
    assert len(os.fsencode(name)) <= 255
    with atomic_path(tmp_path / name) as tmp:
        assert len(os.fsencode(tmp.name)) <= 255 and is_temporary_name(tmp.name)
        tmp.write_text("x")
    with staged_outputs() as outputs:
        outputs.file(tmp_path / "dir" / name).write_text("y")
        (outputs.directory(tmp_path / ("d" + name[1:])) / "f").write_text("z")
    assert (tmp_path / name).read_text() == "x" and (tmp_path / "dir" / name).read_text() == "y"
    assert [p for p in tmp_path.rglob("*") if is_temporary_name(p.name)] == []


def test_a_name_too_long_for_the_file_system_is_named_as_given(tmp_path):
    name = "z" * 256 + ".json"
    with pytest.raises(OSError) as info:
        with atomic_path(tmp_path / name) as tmp:
            tmp.write_text("x")
    assert info.value.errno == errno.ENAMETOOLONG and info.value.filename == str(tmp_path / name)
    assert list(tmp_path.iterdir()) == []

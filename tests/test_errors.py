"""Messages: one short line whatever was found, and the exit status that says whose fault it was."""

from __future__ import annotations

import errno
import os
import socket

import pytest

from domainpar.cli.main import main
from domainpar.errors import message_line, not_a_file, one_line, shorten


def test_shorten_bounds_every_kind_of_value():
    assert shorten("abc") == "'abc'" and shorten("") == "''"
    assert shorten("7" * 2_000_000) == "'" + "7" * 60 + "'... (2,000,000 characters)"
    assert shorten(b"\xff" * 1000).endswith("... (1,000 bytes)")
    assert shorten(float("nan")) == "nan" and shorten(1e40) == "1e+40" and shorten(7) == "7"
    assert shorten(10**5000) == "an integer of about 5,001 digits"
    assert shorten("line\nbreak") == "'line\\nbreak'"
    bomb = [1]
    for _ in range(40):
        bomb = [bomb] * 9  # 9^40 leaves if expanded: a YAML alias bomb
    assert len(shorten(bomb)) < 200
    import numpy as np

    assert shorten(np.float32(1.5)) == "1.5"


def test_message_line_is_one_bounded_line():
    line = message_line("a\nb\tc " + "x" * 10_000)
    assert "\n" not in line and len(line) <= 600 and line.startswith("a b c x")


def _run(capsys, *argv):
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    err = capsys.readouterr().err
    return info.value.code, [line for line in err.splitlines() if line.strip()]


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["frobnicate"], "error: domainpar: No such command 'frobnicate' (see 'domainpar --help')"),
        (["simulate", "--events", "1"], "error: domainpar simulate: Missing option '--out' (see 'domainpar simulate --help')"),
        (["partition", "--parts"], "error: domainpar partition: Option '--parts' requires an argument (see 'domainpar partition --help')"),
        (["partition", "--graph", "g", "--out", "o", "--parts", "two"],
         "error: domainpar partition: Invalid value for '--parts': 'two' is not a valid integer (see 'domainpar partition --help')"),
        (["evaluate", "--checkpoint", "c", "--data", "d", "--timeout", "inf"],
         "error: domainpar evaluate: Invalid value for '--timeout': 'inf' is not a finite number (see 'domainpar evaluate --help')"),
        (["score", "--event", "e", "--submission", "s", "extra"],
         "error: domainpar score: Got unexpected extra argument (extra) (see 'domainpar score --help')"),
        (["build", "--input", "i", "--out", "o", "--quiet=yes"],
         "error: domainpar build: Option '--quiet' does not take a value (see 'domainpar build --help')"),
    ],
)
def test_usage_errors_are_one_line_exit_2(capsys, argv, expected):
    code, lines = _run(capsys, *argv)
    assert code == 2 and lines == [expected]


def test_usage_error_with_a_huge_value_stays_short(capsys):
    code, lines = _run(capsys, "partition", "--graph", "g", "--out", "o", "--parts", "9" * 1_000_000 + "x")
    assert code == 2 and len(lines) == 1 and len(lines[0]) <= 620


@pytest.mark.parametrize("number, code", [(errno.EACCES, 2), (errno.ENOENT, 2), (errno.EROFS, 2), (errno.ENOSPC, 1), (errno.EIO, 1)])
def test_os_errors_name_the_path_and_whose_fault(capsys, monkeypatch, number, code):
    import domainpar.cli.score as score

    def fail(path):
        raise OSError(number, __import__("os").strerror(number), "/data/x.csv")

    monkeypatch.setattr(score, "read_submission", fail)
    found, lines = _run(capsys, "score", "--event", "tests/data/trackml/event000000001", "--submission", "x.csv")
    assert found == code and len(lines) == 1 and lines[0].startswith("error: /data/x.csv: ")


def test_no_arguments_shows_the_help(capsys):
    with pytest.raises(SystemExit) as info:
        main([])
    captured = capsys.readouterr()
    assert info.value.code == 0 and "Commands:" in captured.out and captured.err == ""


def test_one_line_collapses_and_shortens():
    assert one_line(ValueError("Error tokenizing data.\nC error: saw 4\n")) == "Error tokenizing data. C error: saw 4"
    assert one_line(KeyError()) == "KeyError"
    long = one_line(RuntimeError("first sentence. " + "advice " * 100))
    assert long == "first sentence."


def test_not_a_file_says_not_found_only_when_nothing_is_there(tmp_path):
    assert str(not_a_file(tmp_path / "none.pt", "checkpoint file")) == f"{tmp_path / 'none.pt'}: checkpoint file not found"
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    (tmp_path / "dir").mkdir()
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock"))
    try:
        found = {name: str(not_a_file(tmp_path / name, "edge filter file", prefix="--filter ")) for name in ("fifo", "loop", "dangling", "dir", "sock")}
    finally:
        server.close()
    assert found == {
        "fifo": f"--filter {tmp_path / 'fifo'}: expected an edge filter file, found a named pipe (FIFO)",
        "loop": f"--filter {tmp_path / 'loop'}: expected an edge filter file, found a symbolic link that cannot be followed "
        f"({os.strerror(errno.ELOOP)})",
        "dangling": f"--filter {tmp_path / 'dangling'}: expected an edge filter file, found a symbolic link to nothing",
        "dir": f"--filter {tmp_path / 'dir'}: expected an edge filter file, found a directory",
        "sock": f"--filter {tmp_path / 'sock'}: expected an edge filter file, found a socket",
    }

"""One writer per --out: a live holder is named and refused, a dead one's lock is named and taken over."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from domainpar.comm.watchdog import process_identity
from domainpar.errors import DomainparError
from domainpar.launch.runlock import LOCK_NAME, acquire, release, run_lock


def _write_lock(out, **fields) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / LOCK_NAME).write_text(json.dumps(fields))


def _dead_pid_identity() -> dict:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return {**process_identity(), "pid": child.pid, "start": "", "since": 0, "command": "domainpar train --out x"}


def test_second_writer_is_refused_naming_the_holder(tmp_path):
    out = tmp_path / "run"
    with run_lock(out) as lock:
        holder = json.loads(lock.path.read_text())
        assert holder["pid"] == os.getpid() and holder["host"] == process_identity()["host"]
        with pytest.raises(DomainparError) as info:
            acquire(out)
        message = str(info.value)
        assert "\n" not in message
        assert message.startswith(f"--out {out}: another training run is writing there (pid {os.getpid()} on host ")
        assert message.endswith("wait for it, stop it, or choose another --out")
    assert not out.exists()  # released, and the directory it made for itself removed (the run wrote nothing)
    release(acquire(out))  # and free again


def test_release_keeps_a_directory_the_run_wrote_into(tmp_path):
    out = tmp_path / "new" / "run"
    with run_lock(out):
        (out / "config.yaml").write_text("run: {}\n")
    assert (out / "config.yaml").exists() and not (out / LOCK_NAME).exists()
    with run_lock(tmp_path / "other" / "run"):
        pass
    assert not (tmp_path / "other").exists()


def test_stale_lock_of_a_dead_process_is_named_and_taken_over(tmp_path, capsys):
    out = tmp_path / "run"
    dead = _dead_pid_identity()
    _write_lock(out, **dead)
    lock = acquire(out)
    try:
        assert json.loads(lock.path.read_text())["pid"] == os.getpid()
    finally:
        release(lock)
    err = capsys.readouterr().err
    assert f"taking over the stale lock of pid {dead['pid']} on host {dead['host']}" in err
    assert "(that process is gone)" in err and len(err.strip().splitlines()) == 1


def test_lock_with_a_reused_pid_is_stale(tmp_path):
    out = tmp_path / "run"
    # This very process's pid, but recorded with another start time: the recorded process is gone.
    _write_lock(out, **{**process_identity(), "start": "1", "since": 0})
    release(acquire(out))


def test_lock_from_another_host_is_refused_with_a_way_out(tmp_path):
    out = tmp_path / "run"
    _write_lock(out, **{**process_identity(), "host": "node-b", "boot": "other", "pid": 4242, "since": 0})
    with pytest.raises(DomainparError, match=r"another training run holds .*train\.lock \(pid 4242 on host node-b.*"
                                             r"cannot be checked from host .*if that run is dead, delete the lock file"):
        acquire(out)
    assert json.loads((out / LOCK_NAME).read_text())["pid"] == 4242  # untouched


def test_torn_lock_is_stale(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK_NAME).write_text('{"host": "vm", "pi')  # its writer died mid-write
    release(acquire(out))


def test_release_leaves_another_runs_lock(tmp_path):
    out = tmp_path / "run"
    lock = acquire(out)
    lock.path.write_text(json.dumps({**process_identity(), "pid": 1}))  # someone else's now
    release(lock)
    assert lock.path.exists()


@pytest.mark.parametrize(("name", "what"), [(LOCK_NAME, "training run"), ("reconstruct.lock", "reconstruction")])
def test_a_lock_from_this_hosts_previous_boot_is_taken_over(tmp_path, capsys, name, what):
    # Issue 41 item 3: after a node crashed and rebooted, the requeued job was refused by its own dead run's lock
    # ("another reconstruction is writing there (pid N on host vm ...)"), so it never resumed.
    out = tmp_path / "run"
    out.mkdir()
    before = {**process_identity(), "boot": "00000000-dead-boot-0000-000000000000", "pid": os.getpid(), "since": 0}
    (out / name).write_text(json.dumps(before))  # even a pid that is alive now: it is another boot's process
    lock = acquire(out, name=name, what=what)
    try:
        assert json.loads(lock.path.read_text())["boot"] == process_identity()["boot"]
    finally:
        release(lock)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"domainpar: {out / name}: taking over the stale lock of pid {os.getpid()} on host "
                             f"{before['host']} since "), err  # fmt: skip
    assert err[0].endswith(f"(host {before['host']} has rebooted since)"), err


def test_a_lock_from_another_pid_namespace_of_this_host_is_refused_with_a_way_out(tmp_path):
    out = tmp_path / "run"
    _write_lock(out, **{**process_identity(), "pidns": "4026531836-other", "pid": 4242, "since": 0})
    with pytest.raises(DomainparError, match=r"another training run holds .*\(pid 4242 on host .*cannot be checked "
                                             r"from this process's pid namespace .*if that run is dead, delete the lock file"):  # fmt: skip
        acquire(out)


def test_a_live_holder_is_named_with_the_option_it_was_given(tmp_path):
    out = tmp_path / "rec"
    with run_lock(out, "--out", "reconstruct.lock", "reconstruction"):
        with pytest.raises(DomainparError, match=rf"^--out {out}: another reconstruction is writing there \(pid "
                                                 rf"{os.getpid()} on host .*; wait for it, stop it, or choose another --out$"):  # fmt: skip
            acquire(out, "--out", "reconstruct.lock", "reconstruction")

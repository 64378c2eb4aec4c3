"""Machine faults are machine faults, and interrupts leave nothing behind, in every command.

* A full disk (a file-size limit, ``RLIMIT_FSIZE`` with SIGXFSZ ignored so a write raises EFBIG) while a command
  writes its outputs: exit status 1, one ``error:`` line naming the file and what to try, no temporary left, no
  abort (torch's C++ writers used to abort the export with SIGABRT and turn a checkpoint write into a traceback).
* An allocation failure inside torch (its allocator's RuntimeError, ``torch.OutOfMemoryError``), in the command
  or on a rank: exit status 1, one line with what to try.
* A worker process killed by the system: exit status 1, the event and the worker named.
* SIGINT or SIGTERM of a command with a worker pool or a long simulation: it stops within seconds with
  130 / 143 and one line, removes its temporaries, and leaves no process behind.
* An interrupt is the interrupt wherever it lands: inside a package's initialisation (onnxruntime's import
  turns it into an ImportError), inside an exporter that turns it into its own failure, in a library that swallows
  it; while local ranks start (no child traceback) or write (they unwind: no temporary); a hang-up of a worker
  pool's process group (no resource-tracker traceback).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import process as cf_process
from pathlib import Path

import pytest

from domainpar.cli.main import main
from domainpar.errors import MachineFault
from domainpar.workers import run_items
from hostile_workspace import TINY_TRAIN, make_base, run_main

#: Longest a command may take to stop after SIGINT/SIGTERM.
STOP_WITHIN_S = 5.0

#: A child interpreter that runs ``domainpar`` commands under a file-size limit and reports each as one JSON line.
_FULL_DISK_CHILD = textwrap.dedent(
    """
    import contextlib, io, json, os, resource, signal, sys
    # No bytecode written here: a .pyc cut short by the limit would be read by every later process of the suite.
    sys.dont_write_bytecode = True
    from domainpar.cli.main import main
    limit = int(sys.argv[1])
    jobs = json.loads(sys.argv[2])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG instead of killing us
    for cwd, argv in jobs:
        os.chdir(cwd)
        err = io.StringIO()
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        print(json.dumps({"argv": argv, "code": code, "stderr": err.getvalue()}), flush=True)
    """
)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    base = make_base(tmp_path_factory.mktemp("faults-base"))
    # Compiles (and caches) the track-building kernels too: a cold numba cache would be written under the limit.
    assert _run(["evaluate", "--checkpoint", base.model, "--data", base.graphs, "--quiet"])[0] == 0
    return base


def _run(argv) -> tuple[int, str]:
    import contextlib
    import io

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            main([str(a) for a in argv])
        return 0, err.getvalue()
    except SystemExit as exc:
        return exc.code, err.getvalue()


def _lines(stderr: str) -> list[str]:
    return [line for line in stderr.replace("\r", "\n").splitlines() if line.strip() and "%|" not in line]


def _temporaries(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".tmp-" in p.name)


def _writing_commands(base, root: Path) -> dict[str, tuple[list, str]]:
    """Every command that writes outputs: its argv and the output path its error line must name."""
    events = root / "events"
    events.mkdir()
    for source in base.events.iterdir():
        for event in (1, 2):  # two events: the pool of --workers 2 gets work
            shutil.copy(source, events / source.name.replace("000000001", f"00000000{event}"))
    return {
        "simulate": (["simulate", "--out", root / "sim", "--events", "1", "--particles", "50", "--quiet"], "sim/event000000001-"),
        "simulate-pool": (["simulate", "--out", root / "sim2", "--events", "2", "--particles", "50", "--workers", "2", "--quiet"],
                          "sim2/event00000000"),
        "build": (["build", "--input", base.events, "--out", root / "g1", "--quiet"], "g1/event000000001.npz"),
        "build-pool": (["build", "--input", events, "--out", root / "g2", "--workers", "2", "--quiet"], "g2/event00000000"),
        "partition": (["partition", "--graph", base.graphs, "--parts", "2", "--out", root / "plans"], "plans/event000000001"),
        "train": (["train", "--data", base.graphs, "--out", root / "run", *TINY_TRAIN, "--threads", "1"], "run/"),
        "export-torchscript": (["export", "--checkpoint", base.model, "--format", "torchscript", "--out", root / "m.pt"], "m.pt"),
        "export-onnx": (["export", "--checkpoint", base.model, "--format", "onnx", "--out", root / "m.onnx"], "m.onnx"),
        "evaluate": (["evaluate", "--checkpoint", base.model, "--data", base.graphs, "--submissions", root / "subs", "--quiet"],
                     "subs/event000000001-submission.csv"),
    }  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_full_disk_is_a_machine_fault_in_every_writing_command(base, tmp_path):
    commands = _writing_commands(base, tmp_path)
    jobs = []
    for name, (argv, _) in commands.items():
        (tmp_path / f"cwd-{name}").mkdir()
        jobs.append([str(tmp_path / f"cwd-{name}"), [str(a) for a in argv]])
    result = subprocess.run([sys.executable, "-c", _FULL_DISK_CHILD, "1024", json.dumps(jobs)], capture_output=True,
                            text=True, timeout=540)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]  # no abort, no traceback out of main()
    reports = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(reports) == len(commands), result.stdout[-2000:] + result.stderr[-2000:]
    for (name, (_, names)), report in zip(commands.items(), reports):
        lines = _lines(report["stderr"])
        assert report["code"] == 1, (name, report["stderr"][-2000:])
        assert len(lines) == 1 and lines[0].startswith("error: "), (name, report["stderr"][-2000:])
        assert "file too large" in lines[0] and "free space" in lines[0], (name, lines[0])
        assert f"{tmp_path}/{names}" in lines[0], (name, lines[0])  # the output the user asked for, not a temporary
        assert ".tmp-" not in lines[0], (name, lines[0])
    assert _temporaries(tmp_path) == []
    # No output directory the commands created stays behind empty (a user would take it for a result).
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("cwd-") and p.name != "events")
    assert left == [], left


ALLOCATOR_TEXT = ("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to "
                  "allocate 68719476736 bytes. Error code 12 (Cannot allocate memory)")  # fmt: skip


def _torch_allocator_failure(*args, **kwargs):
    raise RuntimeError(ALLOCATOR_TEXT)


def _torch_out_of_memory(*args, **kwargs):
    import torch

    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.11 GiB total capacity)")


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "command, target, advice",
    [
        ("train", "domainpar.train.step.StepRunner.train", "training step 1: out of memory (can't allocate memory: you tried to allocate 68719476736 bytes"),
        ("evaluate", "domainpar.inference.runner.whole_graph_logits", "try more --parts"),
        ("partition", "domainpar.partition.dataset.partition_graph", "try fewer --workers"),
        ("build", "domainpar.data.dataset.build_event_graph", "try fewer --workers"),
        ("export", "domainpar.export.writer.deploy_model", "out of memory"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("failure", [_torch_allocator_failure, _torch_out_of_memory], ids=["allocator", "OutOfMemoryError"])
def test_an_allocation_failure_inside_torch_is_one_line_and_exit_1(base, tmp_path, monkeypatch, command, target, advice, failure):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(target, failure)
    argv = {
        "train": ["train", "--data", base.graphs, "--out", tmp_path / "run", *TINY_TRAIN, "--threads", "1"],
        "evaluate": ["evaluate", "--checkpoint", base.model, "--data", base.graphs, "--json", tmp_path / "e.json", "--quiet"],
        "partition": ["partition", "--graph", base.graphs, "--parts", "2", "--out", tmp_path / "plans", "--workers", "1"],
        "build": ["build", "--input", base.events, "--out", tmp_path / "g", "--workers", "1", "--quiet"],
        "export": ["export", "--checkpoint", base.model, "--format", "torchscript", "--out", tmp_path / "m.pt"],
    }[command]
    code, stderr = _run(argv)
    lines = _lines(stderr)
    assert code == 1, stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in stderr, stderr[-3000:]
    assert "out of memory" in lines[0] and (advice in lines[0] or failure is _torch_out_of_memory), lines[0]
    assert _temporaries(tmp_path) == []


#: What numba raises when a cached kernel is defined and no directory can hold its cache (a read-only installation).
NUMBA_CACHE_TEXT = "cannot cache function '_wrap_angle': no locator available for file '/cvmfs/domainpar/kernels/segments.py'"


def _no_cache_locator(*args, **kwargs):
    raise RuntimeError(NUMBA_CACHE_TEXT)


def _environment_fault_line(code: int, stderr: str) -> str:
    lines = _lines(stderr)
    assert code == 1, stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


def test_an_environment_fault_met_while_building_events_is_not_the_events(tmp_path, monkeypatch):
    # Issue 41 item 6: "2 of 2 events failed ... RuntimeError at caching.py:453" blamed the events.
    from hostile_workspace import REAL_EVENT

    monkeypatch.setattr("domainpar.data.dataset.build_event_graph", _no_cache_locator)
    code, stderr = _run(["build", "--input", REAL_EVENT, "--out", tmp_path / "g", "--workers", "1", "--quiet"])
    line = _environment_fault_line(code, stderr)
    assert line == (f"error: numba found no writable directory for its kernel cache ({NUMBA_CACHE_TEXT}); a fault of "
                    "this machine's set-up, not of the inputs or options: set NUMBA_CACHE_DIR to a writable directory")  # fmt: skip
    assert not (tmp_path / "g").exists()


@pytest.mark.parametrize("failure", [_no_cache_locator, ModuleNotFoundError("No module named 'scipy'", name="scipy")],
                         ids=["numba-cache", "dependency"])  # fmt: skip
def test_a_built_in_model_that_does_not_import_is_the_installations_fault_not_the_options(tmp_path, monkeypatch, failure):
    # Issue 41 item 6: train exited 2 blaming --model 'domainpar.model.interaction_network:InteractionNetwork', an
    # option the user never gave. A user's own model that fails to import stays the option's mistake (tests/model).
    import importlib

    from domainpar.model import registry

    def import_module(name):
        if name == "domainpar.model.interaction_network":
            if isinstance(failure, BaseException):
                raise failure
            failure()
        return importlib.import_module(name)

    monkeypatch.setattr(registry, "importlib", type("importlib", (), {"import_module": staticmethod(import_module),
                                                                      "util": importlib.util}))  # fmt: skip
    code, stderr = _run(["train", "--data", tmp_path / "graphs", "--out", tmp_path / "run", *TINY_TRAIN])
    line = _environment_fault_line(code, stderr)
    assert line.startswith("error: the built-in model domainpar.model.interaction_network does not import: "), line
    assert "--model" not in line and "model.name" not in line, line
    assert ("set NUMBA_CACHE_DIR to a writable directory" if failure is _no_cache_locator
            else "cannot import scipy (No module named 'scipy'); a fault of this installation") in line, line  # fmt: skip
    assert not (tmp_path / "run").exists()


def _rank_out_of_memory(rank: int, world_size: int) -> None:
    if rank == 1:
        raise RuntimeError(ALLOCATOR_TEXT)
    time.sleep(60)


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_a_rank_out_of_memory_is_named_as_that_ranks_machine_fault():
    from domainpar.launch.ranks import SpawnError, spawn

    with pytest.raises(SpawnError) as info:
        spawn(_rank_out_of_memory, 2, timeout_s=120)
    assert info.value.line.startswith("rank 1 of 2: out of memory (can't allocate memory: you tried to allocate 68719476736 bytes")
    assert info.value.traceback_text == ""  # a machine fault is its line, not a traceback
    assert info.value.failure is not None and not info.value.failure.user_error


def _killed_for_item(item: int) -> int:
    if item == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's out-of-memory killer would
    time.sleep(0.2)
    return item


@pytest.mark.timeout(180)
def test_a_killed_worker_is_a_machine_fault_naming_the_event():
    with pytest.raises(MachineFault, match=r"^event1: a worker process was killed by SIGKILL \(by the system's out-of-memory killer\?\); try fewer --workers$"):
        run_items(_killed_for_item, [0, 1, 2, 3], names=[f"event{i}" for i in range(4)], workers=2, progress=False)


def test_waking_a_pool_whose_manager_closed_its_pipe_is_silent():
    # Python 3.11's exit hook wakes a stopped pool's manager thread without the pool's lock; a manager winding down
    # at that moment closed the pipe under it, and CI showed "Exception ignored ... Bad file descriptor" under
    # `build`'s one line after SIGTERM.
    from domainpar.workers import _tolerate_a_closed_wakeup

    pool = cf_process.ProcessPoolExecutor(max_workers=1)
    wakeup = pool._executor_manager_thread_wakeup
    _tolerate_a_closed_wakeup(pool)
    # The manager's close() landing between the exit hook's "closed?" check and its write: the descriptor is gone.
    os.close(wakeup._writer.fileno())
    wakeup.wakeup()  # Python's own wake-up raises OSError: [Errno 9] Bad file descriptor here
    wakeup._writer._handle = None  # already closed above: keep the pool's own close from closing it twice
    wakeup._closed = True
    wakeup._reader.close()
    pool.shutdown(wait=True)


# ----------------------------------------------------------------------------- interrupts


def _start(argv: list, cwd: Path) -> subprocess.Popen:
    # Its own session: the test can signal the command alone, or its whole process group as a terminal's Ctrl-C does.
    return subprocess.Popen([sys.executable, "-m", "domainpar", *[str(a) for a in argv]], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip


def _stop(process: subprocess.Popen, signum: int, group: bool) -> tuple[float, str]:
    sent = time.monotonic()
    if group:
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)
    try:
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    elapsed = time.monotonic() - sent
    return elapsed, stderr


def _group_alive(pgid: int) -> list[str]:
    """Processes of the command's group still running (zombies waiting for init are not running)."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(entry.name)
    return alive


def _wait_for(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "the command did not get going"
        time.sleep(0.02)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("signum, group", [(signal.SIGINT, True), (signal.SIGTERM, False), (signal.SIGTERM, True)],
                         ids=["SIGINT-to-group", "SIGTERM", "SIGTERM-to-group"])  # fmt: skip
def test_an_interrupted_worker_pool_stops_cleanly(base, tmp_path, signum, group):
    events = tmp_path / "events"
    events.mkdir()
    for event in range(1, 121):  # copies of the small event: seconds of work for two workers
        for source in base.events.iterdir():
            shutil.copy(source, events / source.name.replace("000000001", f"{event:09d}"))
    out = tmp_path / "graphs"
    process = _start(["build", "--input", events, "--out", out, "--workers", "2", "--quiet"], tmp_path)
    # Signalled while both workers are busy: once the first graphs are written.
    _wait_for(lambda: out.is_dir() and len(list(out.glob("event*.npz"))) >= 2, 120)
    elapsed, stderr = _stop(process, signum, group)
    time.sleep(0.5)
    assert process.returncode == 128 + signum, stderr[-3000:]
    assert elapsed < STOP_WITHIN_S, (elapsed, stderr[-3000:])
    lines = _lines(stderr)
    assert lines in (["error: interrupted"], ["error: domainpar build stopped by SIGTERM"]), stderr[-3000:]
    assert _temporaries(tmp_path) == []
    assert _group_alive(process.pid) == []
    built = sorted(out.glob("event*.npz"))
    assert 2 <= len(built) < 120  # stopped part way; what was written is complete
    from domainpar.data.graph_files import load_graph

    load_graph(built[-1])


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_simulation_leaves_no_temporary(tmp_path, signum):
    process = _start(["simulate", "--out", tmp_path / "sim", "--events", "3", "--particles", "20000", "--quiet"], tmp_path)
    _wait_for(lambda: any(".tmp-" in p.name for p in tmp_path.iterdir()), 120)  # the staging directory exists
    time.sleep(0.5)
    elapsed, stderr = _stop(process, signum, group=False)
    assert process.returncode == 128 + signum, stderr[-3000:]
    assert elapsed < STOP_WITHIN_S, (elapsed, stderr[-3000:])
    assert _lines(stderr) in (["error: interrupted"], ["error: domainpar simulate stopped by SIGTERM"]), stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no staging directory, no half an event


@pytest.mark.timeout(120)
def test_a_simulation_of_a_billion_events_streams_and_stops_on_sigint(tmp_path):
    # Issue 41 item 7: with --workers every event got a future, a name and a list entry before the first ran
    # (~24 GB within seconds; under a memory limit a MemoryError, exit 1 where SIGINT should give 130). Run under a
    # 6 GB address-space limit, as the probe did: it streams, holds little, and stops at once.
    limit = 6 * 2**30
    process = subprocess.Popen(
        [sys.executable, "-c", "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (%d, %d)); "
         "from domainpar.cli.main import main; main(sys.argv[1:])" % (limit, limit),
         "simulate", "--out", str(tmp_path / "sim"), "--events", "999999999", "--particles", "300", "--workers", "2",
         "--quiet"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    staged = lambda: [p for d in tmp_path.iterdir() if ".tmp-" in d.name for p in d.glob("event*-truth.csv.gz")]  # noqa: E731
    _wait_for(lambda: process.poll() is not None or len(staged()) >= 2, 90)  # both workers have written an event
    assert process.poll() is None, (process.returncode, process.communicate()[1][-3000:])
    peak_kb = int(next(line for line in Path(f"/proc/{process.pid}/status").read_text().splitlines()
                       if line.startswith("VmHWM:")).split()[1])  # fmt: skip
    elapsed, stderr = _stop(process, signal.SIGINT, group=True)
    assert process.returncode == 130, stderr[-3000:]
    assert elapsed < STOP_WITHIN_S, (elapsed, stderr[-3000:])
    assert _lines(stderr) == ["error: interrupted"], stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing staged left, nothing published
    assert peak_kb < 400_000, f"the command's own process peaked at {peak_kb} kB"  # no memory per event


# ----------------------------------------------------------------------------- interrupts that land anywhere


def _one_stop_line(outcome, code: int, line: str) -> None:
    lines = _lines(outcome.stderr)
    assert outcome.traceback is None, outcome.traceback
    assert outcome.code == code and lines == [line], (outcome.code, outcome.stderr[-3000:])


class _InterruptedImport:
    """A meta-path finder: importing ``name`` is interrupted by ``signum`` inside the package's initialisation, which
    turns it into an ImportError (what a pybind11 extension such as onnxruntime's does: "initialization failed")."""

    def __init__(self, name: str, signum: int) -> None:
        self.name, self.signum = name, signum

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        try:
            os.kill(os.getpid(), self.signum)
            time.sleep(5)  # the handler raises here
        except BaseException as exc:  # noqa: BLE001 - as the extension's initialisation does
            raise ImportError("initialization failed") from exc
        raise AssertionError("the signal did not arrive")


@pytest.mark.timeout(240)
def test_sigterm_while_onnxruntime_loads_is_the_stop_not_a_missing_package(base, tmp_path, monkeypatch):
    for name in [n for n in sys.modules if n == "onnxruntime" or n.startswith("onnxruntime.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_InterruptedImport("onnxruntime", signal.SIGTERM), *sys.meta_path])
    outcome = run_main(["export", "--checkpoint", base.model, "--format", "onnx", "--out", tmp_path / "m.onnx"])
    _one_stop_line(outcome, 143, "error: domainpar export stopped by SIGTERM")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(240)
def test_sigint_inside_the_onnx_exporter_is_the_stop_not_an_export_failure(base, tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    import torch

    def interrupted_export(*args, **kwargs):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except BaseException as exc:  # noqa: BLE001 - the exporter reports any failure as its own
            raise RuntimeError("Failed to export the model with torch.export") from exc
        raise AssertionError("the signal did not arrive")

    monkeypatch.setattr(torch.onnx, "export", interrupted_export)
    outcome = run_main(["export", "--checkpoint", base.model, "--format", "onnx", "--out", tmp_path / "m.onnx"])
    _one_stop_line(outcome, 130, "error: interrupted")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(240)
def test_a_hangup_a_library_swallowed_still_stops_the_command_before_it_publishes(base, tmp_path, monkeypatch):
    from domainpar.export import writer

    real = writer.verify_file

    def swallowing(*args, **kwargs):
        try:
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(5)
        except BaseException:  # noqa: BLE001 - a library that swallows the interrupt and carries on
            pass
        return real(*args, **kwargs)

    monkeypatch.setattr(writer, "verify_file", swallowing)
    outcome = run_main(["export", "--checkpoint", base.model, "--format", "torchscript", "--out", tmp_path / "m.pt"])
    _one_stop_line(outcome, 129, "error: domainpar export stopped by SIGHUP")
    assert list(tmp_path.iterdir()) == []  # neither the model nor its sidecar was published


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("signum, group", [(signal.SIGTERM, False), (signal.SIGINT, True)], ids=["SIGTERM", "SIGINT-to-group"])
def test_verify_stopped_while_its_ranks_start_prints_no_child_traceback(base, tmp_path, signum, group):
    process = _start(["verify", "--graph", base.graph, "--parts", "2", "--hidden", "4", "--iterations", "1"], tmp_path)
    seen: set[int] = set()

    def a_rank(pid: int) -> bool:
        try:
            return "spawn_main" in Path(f"/proc/{pid}/cmdline").read_text()
        except OSError:
            return False

    def ranks_starting() -> bool:
        seen.update(_descendants(process.pid))
        return any(a_rank(pid) for pid in seen)

    # The first rank exists: it imports while this process hands it its arguments, where a stop used to leave a
    # rank printing a traceback (an unpickling error, a KeyboardInterrupt in its imports).
    _wait_for(ranks_starting, 120)
    elapsed, stderr = _stop(process, signum, group)
    time.sleep(0.5)
    assert process.returncode == 128 + signum, stderr[-3000:]
    assert "Traceback" not in stderr and _lines(stderr) in (["error: interrupted"], ["error: domainpar verify stopped by SIGTERM"]), stderr[-3000:]
    assert elapsed < 10, elapsed
    assert [pid for pid in seen if Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[:1]] == []


_STOPPED_SPAWN = textwrap.dedent(
    """
    import sys
    from domainpar.signals import stops_unwind
    from domainpar.errors import Terminated
    from domainpar.launch.ranks import spawn
    from hostile_workspace import write_and_wait
    try:
        with stops_unwind():
            spawn(write_and_wait, 2, args=(sys.argv[1],), timeout_s=200)
    except Terminated as exc:
        sys.exit(exc.exit_code)
    """
)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_spawned_ranks_stopped_mid_write_remove_their_temporaries(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-c", _STOPPED_SPAWN, str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True, env=env)  # fmt: skip
    _wait_for(lambda: len(list(out.glob("writing*"))) == 2, 120)  # both ranks are inside their atomic writers
    elapsed, stderr = _stop(process, signal.SIGTERM, group=False)
    time.sleep(0.5)
    assert process.returncode == 128 + signal.SIGTERM and elapsed < STOP_WITHIN_S + 5, (process.returncode, elapsed, stderr[-3000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    assert _temporaries(out) == [] and sorted(p.name for p in out.iterdir()) == ["writing0", "writing1"]
    assert _group_alive(process.pid) == []


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_hangup_of_a_worker_pools_group_leaves_no_resource_tracker_traceback(base, tmp_path):
    import numpy as np

    graphs = tmp_path / "graphs"
    graphs.mkdir()
    with np.load(base.graph, allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}
    for event in range(1, 41):  # distinct events: seconds of work for two workers
        arrays["event_id"] = np.int64(event)
        with open(graphs / f"event{event:09d}.npz", "wb") as fh:
            np.savez(fh, **arrays)
    out = tmp_path / "plans"
    process = _start(["partition", "--graph", graphs, "--parts", "2", "--out", out, "--workers", "2", "--quiet"], tmp_path)
    _wait_for(lambda: out.is_dir() and any(out.glob("event*")), 120)
    elapsed, stderr = _stop(process, signal.SIGHUP, group=True)
    time.sleep(1.0)
    assert process.returncode == 128 + signal.SIGHUP, stderr[-3000:]
    assert _lines(stderr) == ["error: domainpar partition stopped by SIGHUP"], stderr[-3000:]
    assert _temporaries(tmp_path) == [] and _group_alive(process.pid) == []

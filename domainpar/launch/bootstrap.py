"""How a spawned rank is started, so that its death before it runs any of our code is seen at once and named.

``multiprocessing``'s spawn start hands a child its arguments through a pipe while the parent still holds the
child's read end: a child that dies before it has read them all (killed while it imports, or failing to unpickle
them) leaves the parent blocked in ``Process.start()`` for ever once the arguments exceed the pipe's buffer, with
the stop signals held, so not even Ctrl-C ends it. And a child whose unpickling raises prints ``spawn_main``'s
traceback and exits 1 without a word to the parent.

:class:`RankProcess` starts the same interpreter the same way, except that the parent closes the child's ends of
the pipes before it writes (a dead reader is then a :class:`StartFailed` with the child's exit status), and the
child runs ``spawn_main`` inside a guard that writes what went wrong to a file in one line (:func:`start_reason`).
"""

from __future__ import annotations

import io
import os
import signal
from multiprocessing import reduction, resource_tracker, spawn, util
from multiprocessing.context import SpawnProcess, set_spawning_popen
from multiprocessing.popen_spawn_posix import Popen

from domainpar.errors import one_line

#: Seconds the parent waits for a child whose pipe broke to exit, before it kills it.
_EXIT_WAIT_S = 5.0

#: The child's first code: multiprocessing's spawn_main, guarded. Plain text on purpose: it imports nothing of
#: domainpar (the child's sys.path is the parent's only once spawn_main has read it).
_GUARD = """\
import os, sys
from multiprocessing.spawn import spawn_main
try:
    spawn_main(pipe_handle={pipe_handle!r}, tracker_fd={tracker_fd!r})
except SystemExit:
    raise
except BaseException as exc:
    try:
        with open({reason_path!r}, "w") as fh:
            fh.write(type(exc).__name__ + ": " + " ".join(str(exc).split())[:400])
    except OSError:
        pass
    os._exit(1)
"""


class StartFailed(Exception):
    """The child died before it had read its start-up arguments (the parent's write found the pipe broken).

    Args:
        exitcode: its exit status as ``Process.exitcode`` gives it (negative: the signal that killed it).
    """

    def __init__(self, exitcode: int) -> None:
        super().__init__(f"child exited with status {exitcode} while reading its start-up arguments")
        self.exitcode = exitcode


def start_reason(path: str) -> str | None:
    """What a child whose start-up failed wrote to ``path`` (one line), None when it wrote nothing."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    return one_line(text, limit=300) if text.strip() else None


class _RankPopen(Popen):
    """``popen_spawn_posix.Popen`` whose parent cannot block on a dead child, and whose child reports a start-up
    failure in ``process_obj.reason_path`` (Python 3.11's ``_launch``, otherwise unchanged)."""

    def _launch(self, process_obj) -> None:
        tracker_fd = resource_tracker.getfd()
        self._fds.append(tracker_fd)
        prep_data = spawn.get_preparation_data(process_obj._name)
        fp = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, fp)
            reduction.dump(process_obj, fp)
        finally:
            set_spawning_popen(None)

        parent_r = child_w = child_r = parent_w = None
        try:
            parent_r, child_w = os.pipe()
            child_r, parent_w = os.pipe()
            prog = _GUARD.format(pipe_handle=child_r, tracker_fd=tracker_fd, reason_path=process_obj.reason_path)
            cmd = [spawn.get_executable(), *util._args_from_interpreter_flags(), "-c", prog, "--multiprocessing-fork"]
            self._fds.extend([child_r, child_w])
            self.pid = util.spawnv_passfds(spawn.get_executable(), cmd, self._fds)
            self.sentinel = parent_r
            # The child has its copies: with ours closed, its death breaks the pipe instead of blocking the write.
            os.close(child_r)
            os.close(child_w)
            child_r = child_w = None
            try:
                with open(parent_w, "wb", closefd=False) as f:
                    f.write(fp.getbuffer())
            except BrokenPipeError:
                code = self.wait(_EXIT_WAIT_S)
                if code is None:  # closed its end yet still running: it cannot start without its arguments
                    os.kill(self.pid, signal.SIGKILL)
                    code = self.wait(_EXIT_WAIT_S)
                raise StartFailed(-signal.SIGKILL if code is None else code) from None
        finally:
            fds_to_close = [fd for fd in (parent_r, parent_w) if fd is not None]
            self.finalizer = util.Finalize(self, util.close_fds, fds_to_close)
            for fd in (child_r, child_w):
                if fd is not None:
                    os.close(fd)


class RankProcess(SpawnProcess):
    """A spawn-started process started by :class:`_RankPopen`; set ``reason_path`` (a file in a private directory)
    before ``start()``."""

    reason_path: str = os.devnull

    @staticmethod
    def _Popen(process_obj):
        return _RankPopen(process_obj)


__all__ = ["RankProcess", "StartFailed", "start_reason"]

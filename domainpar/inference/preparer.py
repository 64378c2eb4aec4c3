"""Events prepared ahead of the one being scored: :class:`Preparer`.

A run hands reading, graph building and the edge filter (:func:`~domainpar.inference.events.prepare_event`) to a
*preparing* process that works ``prefetch`` events ahead, so event i+1 is read and built while event i is scored,
tracked and written; with ``prefetch`` 0 the scoring process prepares each event itself, the same event either way.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import os
import queue
import signal
import threading
from typing import Any

from domainpar.errors import DomainparError, MachineFault
from domainpar.inference.events import PreparedEvent, prepare_event
from domainpar.inference.graphs import GraphStage
from domainpar.inference.sources import EventSource
from domainpar.workers import failure_line


class PreparingFailed(Exception):
    """Preparing an event failed in the preparing process (its one line, and whether the machine failed)."""

    def __init__(self, line: str, fault: bool, kind: str | None = None, bad_input: bool = False) -> None:
        super().__init__(line)
        self.line, self.fault, self.kind, self.bad_input = line, fault, kind, bad_input


def _preparer_main(stage: GraphStage, threads: int, jobs: Any, results: Any) -> None:
    """A preparing process: prepare every event it is sent, in order, until it is sent None (or the host is gone).

    Each result goes back as ``(name, "ok", PreparedEvent)`` or ``(name, "error", (line, is a machine fault, its kind,
    is the event's bad input))``
    on ``results``, sent by a thread of its own: a prepared event is larger than the pipe, and the next one is
    prepared while the host has not read the last one yet.
    """
    import torch

    from domainpar.launch.lifeline import die_with_parent

    die_with_parent()
    # Ctrl-C reaches the whole process group: the scoring process decides. A preparer writes no file, so that
    # process's SIGTERM (it stops while events are still being prepared) ends it at once.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(128 + signum))
    torch.set_num_threads(threads)
    prune = stage.prune()
    outbox: queue.Queue = queue.Queue()

    def send() -> None:
        while (message := outbox.get()) is not None:
            try:
                results.send(message)
            except OSError:  # the host is gone: nobody reads what is left
                os._exit(0)

    sender = threading.Thread(target=send, name="domainpar-preparer-send", daemon=True)
    sender.start()
    while True:
        try:
            source = jobs.recv()
        except (EOFError, OSError):  # the host closed its end: it has stopped
            os._exit(0)
        if source is None:
            break
        try:
            outbox.put((source.name, "ok", prepare_event(source, stage, prune)))
        except Exception as exc:  # noqa: BLE001 - reported to the scoring process, which names the event and goes on
            outbox.put((source.name, "error", (*failure_line(exc), isinstance(exc, DomainparError))))
    outbox.put(None)
    sender.join()


class Preparer:
    """Reads and builds events ahead of the scoring process: a process of its own (``prefetch`` > 0) or that one.

    A plain process with a pipe each way rather than a pool or queues: it is stopped at once when the run is
    interrupted, nothing of it waits at the interpreter's exit, and it has no semaphores to leak. This process
    keeps only the read end of the results pipe: a preparing process that dies (the out-of-memory killer,
    SIGKILL), even in the middle of a message, closes the pipe's last write end, so the read ends at once and
    :meth:`get` names the death instead of waiting for the rest of the message for ever.
    """

    def __init__(self, stage: GraphStage, prefetch: int, threads: int) -> None:
        self.stage, self.prefetch = stage, prefetch
        self.process = None
        self.prune = None
        self.sent: list[str] = []
        if prefetch > 0:
            context = mp.get_context("spawn")
            jobs_in, self.jobs = context.Pipe(duplex=False)
            self.results, results_out = context.Pipe(duplex=False)
            self.process = context.Process(target=_preparer_main, args=(stage, threads, jobs_in, results_out),
                                           name="domainpar-preparer", daemon=True)  # fmt: skip
            try:
                self.process.start()
            finally:
                # The child has its own copies now; ours would keep the pipes open after its death.
                jobs_in.close()
                results_out.close()
        else:
            self.prune = stage.prune()

    def _died(self, source: EventSource) -> MachineFault:
        """The preparing process has ended while the host waits on it: its one line, with the exit code."""
        self.process.join(5.0)
        return MachineFault(f"{source.path}: the process preparing events died (exit code {self.process.exitcode}; "
                            f"killed by the system's out-of-memory killer?)", kind="memory")  # fmt: skip

    def ahead(self, sources: list[EventSource], index: int) -> None:
        """Make sure events index .. index+prefetch are being prepared.

        Raises:
            MachineFault: the preparing process has died.
        """
        if self.process is None:
            return
        for source in sources[index : index + self.prefetch + 1]:
            if source.name not in self.sent:
                try:
                    self.jobs.send(source)
                except OSError:  # its end of the pipe is closed: it is gone
                    raise self._died(source) from None
                self.sent.append(source.name)

    def get(self, source: EventSource) -> PreparedEvent:
        """The prepared event (raises what preparing it raised; the events come back in the order sent).

        Raises:
            MachineFault: the preparing process died before the whole event came back.
        """
        if self.process is None:
            return prepare_event(source, self.stage, self.prune)
        # Wait on the pipe and on the process itself: a death is seen within the second either way.
        while not mp.connection.wait([self.results, self.process.sentinel], timeout=1.0):
            pass
        try:
            name, status, value = self.results.recv()
        except (EOFError, OSError):  # nothing, or part of a message, came before the end of the pipe
            raise self._died(source) from None
        self.sent.remove(name)  # the pipe keeps the order: name is source.name
        if status == "error":
            raise PreparingFailed(*value)
        return value

    def close(self, finished: bool) -> None:
        """End the preparing process: let it exit when the work is done, stop it when the run is interrupted."""
        if self.process is None:
            return
        process, self.process = self.process, None
        if finished:
            try:
                self.jobs.send(None)
            except OSError:  # already gone
                pass
            process.join(10.0)
        if process.exitcode is None:
            process.terminate()
            process.join(3.0)
            if process.exitcode is None:
                process.kill()
                process.join()
        self.jobs.close()
        self.results.close()


__all__ = ["Preparer", "PreparingFailed"]

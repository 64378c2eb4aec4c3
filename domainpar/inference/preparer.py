"""Events prepared ahead of the one being scored: :class:`Preparer`.

A run hands reading, graph building and the edge filter
(:func:`~domainpar.inference.events.prepare_event`) to a *preparing* process
that works ``prefetch`` events ahead, so event i+1 is read and built while
event i is scored, tracked and written; with ``prefetch`` 0 the scoring
process prepares each event itself. Either way the prepared event is the same.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
from typing import Any

from domainpar.errors import MachineFault
from domainpar.inference.events import PreparedEvent, prepare_event
from domainpar.inference.graphs import GraphStage
from domainpar.inference.sources import EventSource
from domainpar.workers import failure_line


class PreparingFailed(Exception):
    """Preparing an event failed in the preparing process (its one line, and whether the machine failed)."""

    def __init__(self, line: str, fault: bool, kind: str | None = None) -> None:
        super().__init__(line)
        self.line, self.fault, self.kind = line, fault, kind


def _preparer_main(stage: GraphStage, threads: int, jobs: Any, results: Any) -> None:
    """A preparing process: prepare every event it is sent, in order, until it is sent None.

    Each result goes back as ``(name, "ok", PreparedEvent)`` or ``(name, "error", (line, is a machine fault, its kind))``.
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
    while (source := jobs.get()) is not None:
        try:
            results.put((source.name, "ok", prepare_event(source, stage, prune)))
        except Exception as exc:  # noqa: BLE001 - reported to the scoring process, which names the event and goes on
            results.put((source.name, "error", tuple(failure_line(exc))))


class Preparer:
    """Reads and builds events ahead of the scoring process: a process of its own (``prefetch`` > 0) or that one.

    A plain process with two queues rather than a pool: it is stopped at once when the run is interrupted, and
    nothing of it waits at the interpreter's exit.
    """

    def __init__(self, stage: GraphStage, prefetch: int, threads: int) -> None:
        self.stage, self.prefetch = stage, prefetch
        self.process = None
        self.prune = None
        self.sent: list[str] = []
        if prefetch > 0:
            context = mp.get_context("spawn")
            self.jobs, self.results = context.Queue(), context.Queue()
            self.process = context.Process(target=_preparer_main, args=(stage, threads, self.jobs, self.results),
                                           name="domainpar-preparer", daemon=True)  # fmt: skip
            self.process.start()
        else:
            self.prune = stage.prune()

    def ahead(self, sources: list[EventSource], index: int) -> None:
        """Make sure events index .. index+prefetch are being prepared."""
        if self.process is None:
            return
        for source in sources[index : index + self.prefetch + 1]:
            if source.name not in self.sent:
                self.sent.append(source.name)
                self.jobs.put(source)

    def get(self, source: EventSource) -> PreparedEvent:
        """The prepared event (raises what preparing it raised; the events come back in the order sent)."""
        if self.process is None:
            return prepare_event(source, self.stage, self.prune)
        while True:
            try:
                name, status, value = self.results.get(timeout=1.0)
                break
            except queue.Empty:
                if not self.process.is_alive():
                    raise MachineFault(f"{source.path}: the process preparing events died (exit code "
                                       f"{self.process.exitcode}; killed by the system's out-of-memory killer?)",
                                       kind="memory") from None  # fmt: skip
        self.sent.remove(name)
        if name != source.name:  # pragma: no cover - the queue keeps the order
            raise RuntimeError(f"preparer returned {name} for {source.name}")
        if status == "error":
            raise PreparingFailed(*value)
        return value

    def close(self, finished: bool) -> None:
        """End the preparing process: let it exit when the work is done, stop it when the run is interrupted."""
        if self.process is None:
            return
        process, self.process = self.process, None
        if finished:
            self.jobs.put(None)
            process.join(10.0)
        if process.exitcode is None:
            process.terminate()
            process.join(3.0)
            if process.exitcode is None:
                process.kill()
                process.join()
        for channel in (self.jobs, self.results):
            channel.cancel_join_thread()  # whatever is left in a pipe is dropped, not waited for at exit
            channel.close()


__all__ = ["Preparer", "PreparingFailed"]

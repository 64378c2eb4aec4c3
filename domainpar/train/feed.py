"""Feeding a rank: the next events' parts read, validated and staged on the device while the current step runs.

The trainer knows the events of every future step (the sampler is a pure
function of seed, epoch and sizes), so a :class:`Feeder` walks that order in a
background thread: it reads this rank's part of each event (or takes it from
the :class:`PartCache`), and stages it on the device up to ``depth`` events
ahead. The step then asks for the event it needs and only waits if the
thread is behind; that wait is what ``steps.jsonl`` reports as
``data_wait_seconds``.

Nothing here runs a collective: the exchange of a part (a collective for more
than one part) is built on the main thread by
:func:`domainpar.parallel.part.attach`, in the same order on every rank.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Hashable, Iterable, Iterator

import torch

from domainpar.parallel.part import StagedPart, stage
from domainpar.partition.part_data import PartData


class PartCache:
    """Host parts kept between epochs, least recently used evicted first, bounded in bytes (thread-safe).

    Args:
        max_bytes: bound on the summed :attr:`PartData.nbytes` of the cached parts (0: cache nothing).
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = int(max_bytes)
        self._parts: OrderedDict[Hashable, PartData] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        """Lookups answered from the cache."""

    @property
    def nbytes(self) -> int:
        """Bytes held now (at most ``max_bytes``)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._parts)

    def get(self, key: Hashable) -> PartData | None:
        with self._lock:
            data = self._parts.get(key)
            if data is None:
                return None
            self._parts.move_to_end(key)
            self.hits += 1
            return data

    def put(self, key: Hashable, data: PartData) -> None:
        """Keep ``data`` unless it alone exceeds the bound; evict the least recently used parts to fit it."""
        size = data.nbytes
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._parts.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            while self._parts and self._bytes + size > self.max_bytes:
                _, evicted = self._parts.popitem(last=False)
                self._bytes -= evicted.nbytes
            self._parts[key] = data
            self._bytes += size


class _Stop:
    """End of the order (or the feeder was closed)."""


#: Held while any feeder reads a part from disk: reads of all feeders of the process (training and validation
#: run at once) happen one at a time. numpy parses every ``.npy`` header with ``ast.literal_eval``, and CPython
#: 3.11's AST constructor keeps its recursion depth in per-interpreter state that two threads corrupt
#: ("SystemError: AST constructor recursion depth mismatch", cpython gh-106905), so concurrent reads fail at
#: random. Prefetching still overlaps reading with the step, which is what it is for.
READ_LOCK = threading.Lock()


class Feeder:
    """Parts of the events of ``order``, prepared ``depth`` events ahead in a background thread.

    Args:
        load: ``index → PartData`` (reads this rank's part of event ``index``; thread-safe).
        order: the event indices in the order :meth:`next` will ask for them (may be an endless iterator).
        depth: events prepared ahead (0: read synchronously in :meth:`next`).
        device: the compute device.
        dtype: compute dtype of the features.
        cache: parts kept between epochs (None: none).
        kind: cache key prefix and thread name ("train", "val").
    """

    def __init__(
        self,
        load: Callable[[int], PartData],
        order: Iterable[int],
        *,
        depth: int,
        device: torch.device,
        dtype: torch.dtype | None,
        cache: PartCache | None = None,
        kind: str = "train",
    ) -> None:
        self._load = load
        self._order: Iterator[int] = iter(order)
        self.depth = int(depth)
        self.device = torch.device(device)
        self.dtype = dtype
        self.cache = cache
        self.kind = kind
        self.wait_seconds = 0.0
        """Seconds :meth:`next` spent waiting so far."""
        self.fresh = 0
        """Parts read from disk (not the cache) so far."""
        self._closed = threading.Event()
        self._queue: queue.Queue = queue.Queue(maxsize=max(self.depth, 1))
        self._thread: threading.Thread | None = None
        if self.depth > 0:
            self._thread = threading.Thread(target=self._run, name=f"domainpar-feed-{kind}", daemon=True)
            self._thread.start()

    def _host(self, index: int) -> PartData:
        key = (self.kind, index)
        data = self.cache.get(key) if self.cache is not None else None
        if data is None:
            with READ_LOCK:
                data = self._load(index)
            self.fresh += 1
            if self.cache is not None:
                self.cache.put(key, data)
        return data

    def _prepare(self, index: int, stream: Any) -> StagedPart:
        return stage(self._host(index), self.device, self.dtype, stream=stream)

    def _run(self) -> None:
        stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        try:
            for index in self._order:
                if self._closed.is_set():
                    return
                try:
                    item = (index, self._prepare(index, stream), None)
                except BaseException as exc:  # noqa: BLE001 - handed to the main thread, raised where the part is needed
                    item = (index, None, exc)
                if not self._put(item) or item[2] is not None:
                    return
            self._put((None, _Stop(), None))
        except BaseException as exc:  # noqa: BLE001 - e.g. the order iterator itself failed
            self._put((None, None, exc))

    def _put(self, item: tuple) -> bool:
        while not self._closed.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def next(self, index: int) -> tuple[StagedPart, float]:
        """The staged part of event ``index`` (the next one of the order) and the seconds spent waiting for it.

        Raises:
            Whatever reading the part raised (e.g. a :class:`DomainparError` naming a damaged part file).
            RuntimeError: ``index`` is not the next event of the order (a bug in the caller).
        """
        start = time.perf_counter()
        if self._thread is None:
            expected = next(self._order, None)
            staged = self._prepare(index, None) if expected == index else None
        else:
            while True:
                try:
                    expected, staged, error = self._queue.get(timeout=1.0)
                    break
                except queue.Empty:
                    if not self._thread.is_alive():
                        raise RuntimeError(f"the {self.kind} prefetch thread stopped without a result") from None
            if error is not None:
                raise error
        waited = time.perf_counter() - start
        self.wait_seconds += waited
        if expected != index or not isinstance(staged, StagedPart):
            raise RuntimeError(f"{self.kind} feeder: asked for event {index}, the order has {expected} next")
        return staged, waited

    def close(self) -> None:
        """Stop the thread (it finishes the part it is reading) and drop what it prepared."""
        self._closed.set()
        if self._thread is not None:
            while True:
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break
            self._thread.join(timeout=30.0)

    def __enter__(self) -> "Feeder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Feeder", "PartCache"]

"""What child processes send on a multiprocessing queue, read by a thread of its own: :class:`Inbox`.

A child killed in the middle of a message leaves part of it in the queue's pipe: the reader takes the header,
then waits for the rest, and since the reader holds the pipe's write end itself, end-of-file never comes
(``Queue.get``'s timeout covers the wait for the first byte only). :class:`Inbox` moves the reads to a daemon
thread: the caller waits on an in-process queue, with a timeout that holds, and between waits looks at its
children to name a death. A thread stuck on a dead child's half message stays stuck, harmless.
"""

from __future__ import annotations

import queue
import threading
from typing import Any


class Inbox:
    """The messages of a multiprocessing queue, in order, through a reading thread (see the module docstring).

    Args:
        channel: the multiprocessing queue the children write.
        name: the reading thread's name.
    """

    def __init__(self, channel: Any, name: str = "domainpar-inbox") -> None:
        self._items: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(channel,), name=name, daemon=True)
        self._thread.start()

    def _read(self, channel: Any) -> None:
        while not self._stop.is_set():
            try:
                item = channel.get(timeout=0.2)
            except queue.Empty:
                continue
            except (EOFError, OSError, ValueError, TypeError):  # the queue was closed, or its pipe ended
                return
            self._items.put(item)

    def get(self, timeout: float) -> Any:
        """The next message.

        Raises:
            queue.Empty: none within ``timeout`` seconds (look at the children, then wait again).
        """
        return self._items.get(timeout=timeout)

    def empty(self) -> bool:
        """Whether no message is waiting (one may still be on its way through the pipe)."""
        return self._items.empty()

    def close(self) -> None:
        """Stop reading (a thread stuck on a dead child's half message is left to the interpreter's exit)."""
        self._stop.set()
        self._thread.join(1.0)


__all__ = ["Inbox"]

"""The line of appends that wait for a writer's append lock (flat combining).

Threads that find the append lock taken do not queue on the lock: each release would
wake one, a system call and a context switch per append (a convoy). They leave their
batches in a ``AppendLine`` and wait on their own item; whoever holds the lock
appends everything in line before it lets go (``run``), each call still atomic and in
its thread's order, as group commit does for fsync. ``LocalLog`` owns the line and
decides when to serve it; this module owns only the queue and its items' hand-over.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable

# ``(data, records, largest timestamp, bytes)`` per batch, as ``LocalLog`` appends them
Batches = list[tuple[Any, int, int, int]]


class Waiting:
    """One waiting call: its batches (``atomic``: as one unit), and how it ended:
    ``result`` (its offsets) or ``error``, or ``again`` (handed back: its own thread
    tries again). ``done`` is released when it ended."""

    __slots__ = ("batches", "atomic", "done", "result", "error", "again")

    def __init__(self, batches: Batches, atomic: bool) -> None:
        self.batches = batches
        self.atomic = atomic
        self.done = threading.Lock()
        self.done.acquire()
        self.result = range(0)
        self.error: BaseException | None = None
        self.again = False


class AppendLine(deque[Waiting]):
    """The waiting calls in arrival order (a deque, so that the hot path's ``if line``
    costs no Python call). Items are added by ``join`` and leave only through
    ``run``, ``hand_back`` or ``fail``, each of which ends them."""

    def join(self, batches: Batches, atomic: bool) -> Waiting:
        item = Waiting(batches, atomic)
        self.append(item)
        return item

    @staticmethod
    def wait(item: Waiting) -> bool:
        """Block until ``item`` ended: True if it was appended (``item.result``), False
        if handed back; its error raised."""
        item.done.acquire()
        if item.error is not None:
            raise item.error
        return not item.again

    def run(self, put: Callable[[Batches, bool], range]) -> tuple[list[Waiting], bool]:
        """(append lock held) ``put`` every call in line, including those that join
        meanwhile, in order; the calls served and whether all succeeded. A failure is
        the failing call's (its ``error``); the calls after it stay in line. The
        caller publishes or aborts, then ``release``-s the served calls."""
        served: list[Waiting] = []
        try:
            while self:
                item = self.popleft()
                served.append(item)
                item.result = put(item.batches, item.atomic)
        except BaseException as e:
            served[-1].error = e
            return served, False
        return served, True

    @staticmethod
    def release(served: list[Waiting]) -> None:
        for item in served:
            item.done.release()

    def hand_back(self) -> None:
        """Every call in line goes back to its own thread, which tries again (and
        raises what its own call would have, if the log refuses writes)."""
        while self:
            item = self.popleft()
            item.again = True
            item.done.release()

    def fail(self, e: BaseException) -> None:
        """Every call in line fails with ``e`` (nothing of theirs was written)."""
        while self:
            item = self.popleft()
            item.error = e
            item.done.release()

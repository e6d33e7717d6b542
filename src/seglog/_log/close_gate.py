"""While a writer's close waits for the append lock, the changes other threads start
meanwhile wait for its outcome (``LocalLog``'s close gate).

Locks are not fair: a thread that lets go of the append lock (or the flush or the
maintenance lock) and calls again takes it before a waiting close is woken. Threads
appending, flushing and compacting in loops beside busy readers held a close off for
30 s and more. With the gate shut, their next way in waits until the close is done;
then they find the log closed, or open still if the close failed.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

Begin = Callable[[bool], bool]


class CloseGate:
    """Shut by the closing thread for the close's duration (``shut``); ``wait`` is
    every other way in's first step."""

    __slots__ = ("_gate",)

    def __init__(self) -> None:
        self._gate: threading.RLock | None = None

    @contextmanager
    def shut(self, begin: Begin) -> Iterator[Begin]:
        """Shut until the block ends; yields ``begin`` made to wait for the outcome
        first (the closing thread itself passes at once: it holds the gate)."""
        gate = threading.RLock()

        def begin_after_close(blocking: bool) -> bool:
            with gate:
                pass
            return begin(blocking)
        with gate:
            self._gate = gate
            try:
                yield begin_after_close
            finally:
                self._gate = None

    def wait(self) -> None:
        """A close under way in another thread: its outcome first."""
        gate = self._gate
        if gate is not None:
            with gate:
                pass

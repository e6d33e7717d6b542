"""Waiting for a writer's end offset to move: ``Log.wait`` callers of the writer's
own process, woken by the append path (``LocalLog`` notifies after it let go of the
append lock). A readonly reader waits on the files instead (``_log.wait``)."""

from __future__ import annotations

import threading
import time
from typing import Callable


class EndWatch:
    """The callers blocked in ``wait`` and the condition they wait on. ``waiting`` is
    read by the append hot path (a slot, not a property: no call per append) and
    written only here."""

    __slots__ = ("_cond", "waiting")

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self.waiting = 0

    def notify(self) -> None:
        """Wake every ``wait`` caller: the end moved, or the log closed."""
        with self._cond:
            self._cond.notify_all()

    def wait(self, reached: Callable[[], bool], check: Callable[[], None],
             deadline: float | None) -> tuple[bool, bool]:
        """Block until ``reached()`` (True) or the ``time.monotonic()`` ``deadline``
        (False); ``check()`` raises once waiting is pointless (the log closed).
        Returns (reached, whether it had to wait)."""
        with self._cond:
            self.waiting += 1
            try:
                waited = False
                while not reached():
                    check()
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False, waited
                    self._cond.wait(None if left is None else min(left, threading.TIMEOUT_MAX))
                    waited = True
                return True, waited
            finally:
                self.waiting -= 1

    def after_fork(self) -> None:
        """A forked child's copy: nobody waits, and a new lock."""
        self._cond = threading.Condition(threading.Lock())
        self.waiting = 0

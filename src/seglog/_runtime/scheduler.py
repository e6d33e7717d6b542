"""One flusher thread and one maintenance thread per process, shared by every open log.

Kafka runs one flush scheduler and one retention task for all logs of a broker;
seglog does the same for all logs of a process, so a topic of 64 partitions costs
two threads, not 128. Each log registers a periodic job; a job holds its log only
weakly (a log nobody references is garbage-collected, which closes it) and only
while it runs. Flushes and maintenance have a thread each, so a long compaction
never delays another log's timed flush.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
import weakref
# Any: a job's owner (any object, held weakly) and its callback
from typing import Any, Callable

_log = logging.getLogger("seglog")


class Job:
    """A periodic call of ``fn(obj)`` while ``obj`` lives and the job is not cancelled."""

    __slots__ = ("ref", "period", "fn", "cancelled", "__weakref__")

    def __init__(self, obj: Any, period_s: float, fn: Callable[[Any], None]) -> None:
        self.ref = weakref.ref(obj)
        self.period = period_s
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _Worker:
    def __init__(self, name: str) -> None:
        self.name = name
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Job]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, job: Job) -> None:
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + job.period, next(self._seq), job))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify()

    def pending(self) -> int:
        """Jobs still scheduled (cancelled ones leave at their next turn)."""
        with self._cond:
            return sum(1 for _, _, j in self._heap if not j.cancelled and j.ref() is not None)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        _, _, job = heapq.heappop(self._heap)
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
            if job.cancelled:
                continue
            obj = job.ref()
            if obj is None:
                continue
            try:
                job.fn(obj)
            except Exception as e:   # noqa: BLE001 - a job's failure must not stop the others
                _log.warning("seglog: %s job failed: %s", self.name, e)
            del obj          # the job must not keep its log alive between runs
            if not job.cancelled:
                with self._cond:
                    heapq.heappush(self._heap,
                                   (time.monotonic() + job.period, next(self._seq), job))


_lock = threading.Lock()
_workers: dict[str, _Worker] = {}


def _worker(name: str) -> _Worker:
    with _lock:
        w = _workers.get(name)
        if w is None:
            w = _workers[name] = _Worker(name)
        return w


def schedule(kind: str, obj: Any, period_s: float, fn: Callable[[Any], None]) -> Job:
    """Run ``fn(obj)`` every ``period_s`` on the process's ``kind`` thread
    ("flush" or "maintenance"); cancel with ``job.cancel()``."""
    job = Job(obj, period_s, fn)
    _worker(f"seglog-{kind}").add(job)
    return job


def pending(kind: str) -> int:
    return _worker(f"seglog-{kind}").pending()


def _forget_in_child() -> None:
    # a forked child has none of the parent's threads: it starts its own on first use
    global _lock
    _lock = threading.Lock()
    _workers.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)

"""asyncio without blocking the event loop and without spinning: seglog's blocking
waits and polls run in worker threads of a pool of its own while the loop awaits
them (``Log.wait_async``, ``async for`` over a ``Consumer``).

* ``pool()``: the process's worker threads for them. A pool of seglog's own, so
  that long waits never hold the threads of the loop's default executor (the
  application's ``asyncio.to_thread`` calls); threads are made on demand.
* ``Waiters``: the async waiters of one log, served by one worker at a time: it
  waits for the log to grow in steps of at most ``STEP_S``, resolves every
  waiter whose offset the end passed, and queues its next step in the pool (so
  that logs awaited beyond the pool's size all get steps). A waiter that is
  cancelled or times out leaves at once; the worker ends within one step once
  nobody waits.
* ``poll_in_thread``: a poll run in a worker such that what it returns after its
  awaiting task was cancelled is given back, never lost.
* ``Serial``: one call at a time on an object used from several threads (the event
  loop's and a worker's), where a caller that has to wait makes a waiting poll
  return at once.
"""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, ContextManager, Generic, TypeVar

T = TypeVar("T")
STEP_S = 0.25            # the longest a worker waits before it looks at its waiters again
_MAX_THREADS = 128       # beyond it, jobs queue for a free worker

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def pool() -> ThreadPoolExecutor:
    """The process's pool of worker threads for asyncio callers (made on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_MAX_THREADS, thread_name_prefix="seglog-async")
        return _pool


def _after_fork_in_child() -> None:
    # the parent's workers do not exist here, and its lock may have been held
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _set(fut: "asyncio.Future[bool]", value: bool | BaseException) -> None:
    """On the waiter's loop: resolve it unless it was cancelled meanwhile."""
    if fut.done():
        return
    if isinstance(value, BaseException):
        fut.set_exception(value)
    else:
        fut.set_result(value)


def _resolve(loop: asyncio.AbstractEventLoop, fut: "asyncio.Future[bool]",
             value: bool | BaseException) -> None:
    try:
        loop.call_soon_threadsafe(_set, fut, value)
    except RuntimeError:
        pass                # its loop is closed: nobody awaits it any more


class Waiters:
    """The async waiters of one log (see the module). ``wait(offset, timeout_s)``
    is the log's blocking wait (True once its end passed ``offset``, False after
    the timeout; what it raises goes to every waiter), ``end()`` the end it saw
    last, without I/O."""

    def __init__(self, wait: Callable[[int, float], bool], end: Callable[[], int]) -> None:
        self._wait = wait
        self._end = end
        self._lock = threading.Lock()
        self._items: list[tuple[int, asyncio.AbstractEventLoop, "asyncio.Future[bool]"]] = []
        self._serving = False         # a worker is in ``_serve`` (or about to be)

    def add(self, offset: int, fut: "asyncio.Future[bool]") -> None:
        """Resolve ``fut`` (of the running loop) with True once the end passes
        ``offset``."""
        loop = fut.get_loop()
        with self._lock:
            self._items.append((offset, loop, fut))
            if self._serving:
                return
            self._serving = True
        try:
            pool().submit(self._serve)
        except BaseException:         # the interpreter is shutting down
            with self._lock:
                self._serving = False
                self._items = [i for i in self._items if i[2] is not fut]
            raise

    def discard(self, fut: "asyncio.Future[bool]") -> None:
        """``fut`` waits no more (cancelled, timed out or resolved)."""
        with self._lock:
            self._items = [i for i in self._items if i[2] is not fut]

    def _serve(self) -> None:
        """One step; then the pool again: a log whose waiters stay unresolved must
        not keep a worker for as long (other logs' steps queue for one)."""
        with self._lock:
            if not self._items:
                self._serving = False
                return
            lowest = min(i[0] for i in self._items)
        try:
            # any growth wakes it (a waiter for a lower offset may have come since),
            # and a waiter the end already passed returns at once
            self._wait(min(lowest, self._end()), STEP_S)
            end = self._end()
        except BaseException as e:
            self._fail(e)
            return
        with self._lock:
            done = [i for i in self._items if end > i[0]]
            if done:
                self._items = [i for i in self._items if end <= i[0]]
        for _, loop, fut in done:
            _resolve(loop, fut, True)
        try:
            pool().submit(self._serve)
        except BaseException as e:      # the interpreter is shutting down
            self._fail(e)

    def _fail(self, e: BaseException) -> None:
        """What the wait raised goes to every waiter; the worker ends."""
        with self._lock:
            items, self._items = self._items, []
            self._serving = False
        for _, loop, fut in items:
            _resolve(loop, fut, e)


class Serial:
    """A re-entrant lock for the calls of one object (a user callback may call it
    again). A thread that has to wait for it counts itself in ``calls`` and sets
    ``wake``: a poll holding it waits on ``wake`` between its looks and returns as
    soon as ``calls`` is not 0, so a waiting call (``close`` from the event loop,
    say) gets it within one look, never after the poll's whole timeout."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._calls_lock = threading.Lock()
        self.calls = 0
        self.wake = threading.Event()

    def __enter__(self) -> "Serial":
        lock = self._lock
        if not lock.acquire(blocking=False):
            with self._calls_lock:
                self.calls += 1
                self.wake.set()
            try:
                lock.acquire()
            finally:
                with self._calls_lock:
                    self.calls -= 1
                    if not self.calls:
                        self.wake.clear()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class _Handoff(Generic[T]):
    """What a worker's poll returned, handed to the awaiting task under ``lock``
    unless the task was cancelled (then the worker gives it back itself)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cancelled = False
        self.result: T | None = None


async def poll_in_thread(poll: Callable[[], T], give_back: Callable[[T], None],
                         locked: ContextManager[object]) -> T:
    """``poll()`` in a worker thread, awaited without blocking the loop.

    If the awaiting task is cancelled, the poll's result goes to ``give_back``:
    in the worker right after the poll, or here if the worker had already
    handed it over. ``locked`` is the consumer's lock: the poll, and either
    give-back, run under it, so no other poll runs between a poll and its
    give-back. A poll not started when the task is cancelled never runs."""
    box: _Handoff[T] = _Handoff()

    def job() -> None:
        with locked:
            if box.cancelled:
                return
            result = poll()
            with box.lock:
                if not box.cancelled:
                    box.result = result
                    return
            give_back(result)

    loop = asyncio.get_running_loop()
    try:
        await loop.run_in_executor(pool(), job)
    except asyncio.CancelledError:
        with box.lock:
            box.cancelled = True
            result, box.result = box.result, None
        if result is not None:
            with locked:
                give_back(result)
        raise
    with box.lock:
        result, box.result = box.result, None
    assert result is not None        # the job handed it over: it was not cancelled
    return result

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
* ``in_thread``: a call (a consumer's poll) run in a worker under the consumer's
  lock; a task cancelled meanwhile leaves what it returns with the consumer.
* ``Serial``: one call at a time on an object used from several threads (the event
  loop's and a worker's), where a caller that has to wait makes a waiting poll
  return at once.
"""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

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


class _Wake:
    """``threading.Event`` on a re-entrant lock: a signal handler may set it while the
    thread it interrupted is inside ``set`` or ``clear`` (an ``Event``'s own lock
    would then never be released)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.RLock())
        self._flag = False

    def set(self) -> None:
        with self._cond:
            self._flag = True
            self._cond.notify_all()

    def clear(self) -> None:
        with self._cond:
            self._flag = False

    def wait(self, timeout: float) -> bool:
        with self._cond:
            if not self._flag:
                self._cond.wait(timeout)
            return self._flag


class Serial:
    """A re-entrant lock for the calls of one object (a user callback may call it
    again). A thread that has to wait for it counts itself in ``calls`` and sets
    ``wake``: a poll holding it waits on ``wake`` between its looks and returns as
    soon as ``calls`` is not 0, so a waiting call (``close`` from the event loop,
    say) gets it within one look, never after the poll's whole timeout.

    ``held_here()`` tells a call made from inside another (a callback, a signal
    handler interrupting the thread) from one that waits its turn; ``then(fn)`` runs
    ``fn`` when the outermost hold ends, before the lock is released."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        # re-entrant: a signal handler may wait for the lock while the thread it
        # interrupted is counting itself in
        self._calls_lock = threading.RLock()
        self.calls = 0
        self.wake = _Wake()
        self._owner: int | None = None
        self._depth = 0
        self._then: Callable[[], None] | None = None

    def held_here(self) -> bool:
        """Does the calling thread hold the lock (a call made from inside a call)?"""
        return self._owner == threading.get_ident()

    def then(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when the calling thread's outermost hold ends (it holds it)."""
        self._then = fn

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
        self._depth += 1
        self._owner = threading.get_ident()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._depth == 1:
                while self._then is not None:
                    fn, self._then = self._then, None
                    fn()
        finally:
            self._depth -= 1
            if not self._depth:
                self._owner = None
            self._lock.release()


async def in_thread(fn: Callable[[], T], cancelled: T) -> T:
    """``fn()`` in a worker thread, awaited without blocking the loop. If the awaiting
    task is cancelled, the worker still finishes what it started (``fn`` leaves its
    result with its owner: a consumer's poll holds its batch, undelivered); a job
    not started by then never runs (its result would be ``cancelled``)."""
    gone = threading.Event()

    def job() -> T:
        return cancelled if gone.is_set() else fn()

    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(pool(), job)
    except asyncio.CancelledError:
        gone.set()
        raise

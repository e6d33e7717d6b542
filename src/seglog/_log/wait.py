"""A reader waiting for messages: ``Log.wait`` (a writer's condition, or a readonly
reader's polling of the files) and ``Log.wait_async`` (the same, awaited, served by
one worker thread per log: ``_runtime.aio.Waiters``)."""

from __future__ import annotations

import asyncio
import math
import os
import threading
import time
import weakref

from .._runtime import aio as _aio
from ..errors import LogClosedError
from .live import LiveLog
from .local_log import LocalLog

# what the read path reads: a writer's list, or a readonly reader's
View = LocalLog | LiveLog


def _checked(local: View, offset: int, timeout: float | None) -> float | None:
    """``Log.wait``'s arguments checked (``TypeError``, ``ValueError``) and the log open
    (``closed_error()``, even if its end passed ``offset``): the timeout as a
    ``time.monotonic()`` deadline (None: none)."""
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError(f"offset must be an int, not {type(offset).__name__}")
    if offset < 0:
        raise ValueError(f"offset must be 0 or more, not {offset}")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError(f"timeout must be a number of seconds or None, not {timeout!r}")
        if math.isnan(timeout) or timeout < 0:
            raise ValueError(f"timeout must be 0 or more seconds (0: look once) or None, "
                             f"not {timeout}")
        if math.isinf(timeout):
            timeout = None
    local.check_readable()
    return None if timeout is None else time.monotonic() + timeout


def wait(local: View, offset: int, timeout: float | None) -> bool:
    """``Log.wait``: the arguments checked, then a writer's ``LocalLog.wait_for`` or a
    readonly reader's polling."""
    deadline = _checked(local, offset, timeout)
    if isinstance(local, LiveLog):
        return _wait_polling(local, offset, deadline)
    return local.wait_for(offset, deadline)


# per log, its async waiters and the worker that serves them (``_runtime.aio.Waiters``)
_waiters: "weakref.WeakKeyDictionary[View, _aio.Waiters]" = weakref.WeakKeyDictionary()
_waiters_lock = threading.Lock()


def _waiters_of(local: View) -> _aio.Waiters:
    with _waiters_lock:
        w = _waiters.get(local)
        if w is None:
            # the worker reaches the log weakly: the entry must not keep its key alive
            # (every waiter's coroutine holds the log while it waits)
            ref = weakref.ref(local)

            def alive() -> View:
                lg = ref()
                if lg is None:
                    raise LogClosedError("the log was dropped while waited for")
                return lg

            w = _waiters[local] = _aio.Waiters(lambda off, s: wait(alive(), off, s),
                                               lambda: alive().end)
        return w


async def wait_async(local: View, offset: int, timeout: float | None) -> bool:
    """``Log.wait_async``: ``wait``'s contract, awaited. The blocking wait runs in a
    worker thread (one per log, however many wait: ``_runtime.aio.Waiters``), each step of it
    bounded, so the event loop never blocks and a cancelled wait leaves no thread
    behind for longer than a step; the timeout is the loop's own timer."""
    deadline = _checked(local, offset, timeout)
    loop = asyncio.get_running_loop()
    if local.follows:
        if deadline is not None and deadline <= time.monotonic():
            # look once: a re-listing of the files, in a worker
            return await loop.run_in_executor(_aio.pool(), wait, local, offset, 0)
    elif local.end > offset:
        return True                # as ``LocalLog.wait_for``: no need to wait
    elif deadline is not None and deadline <= time.monotonic():
        return False
    fut: asyncio.Future[bool] = loop.create_future()
    waiters = _waiters_of(local)
    waiters.add(offset, fut)
    try:
        if deadline is None:
            return await fut
        try:
            async with asyncio.timeout_at(loop.time() + deadline - time.monotonic()):
                return await fut
        except TimeoutError:
            # the end may have passed the offset just as the time ran out
            return local.end > offset
    finally:
        waiters.discard(fut)


def _after_fork_in_child() -> None:
    # the parent's workers do not exist here
    global _waiters_lock
    _waiters_lock = threading.Lock()
    _waiters.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _wait_polling(local: View, offset: int, deadline: float | None) -> bool:
    """A readonly reader polls the files (sub-millisecond at first, backing off to
    20 ms) until ``end_offset > offset`` or ``deadline``."""
    delay = 0.0005
    waited = False
    with local.metrics.polling():
        while True:
            local.check_readable()
            local.refresh()
            if local.end > offset:
                if waited:
                    local.metrics.woke()
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            time.sleep(delay if left is None else min(delay, left))
            waited = True
            delay = min(delay * 2, 0.02)

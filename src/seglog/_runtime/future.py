"""``LightFuture``: a ``concurrent.futures.Future`` that makes its condition variable,
waiter list and callback list only when someone asks for them.

A ``Future`` builds a ``threading.Condition`` (an RLock, a deque, bound methods) in
its constructor: most of the cost of ``Producer.send`` and most of the garbage a
busy producer leaves. Most futures of a producer are never waited on one by one;
this one resolves without ever building them unless a thread looks (``result``,
``done``, ``add_done_callback``, ``concurrent.futures.wait``...). Every future keeps
a condition of its own, as ``Future`` does (``concurrent.futures.wait`` takes the
conditions of several futures in id order: sharing one between futures could
deadlock it).

The lazy attributes are made under one process-wide lock, which the three
resolving calls take too: a resolve either finds no condition (then nobody can be
waiting or have a callback: both need it) or goes the ``Future`` way. If this
Python's ``Future`` keeps other fields than the ones below, ``new_future`` makes
plain ``Future`` objects instead.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
# Any: a Future's result: the user's value
from typing import Any, Callable, Iterable

_MAKE = threading.Lock()
_LAZY: dict[str, Callable[[], Any]] = {
    "_condition": threading.Condition, "_waiters": list, "_done_callbacks": list}


def _states() -> tuple[str, str, str] | None:
    """Future's PENDING, RUNNING and FINISHED markers, as this Python spells them
    (None if its fields are not the ones this module knows)."""
    f: Future[Any] = Future()
    fields = vars(f)
    if set(fields) != {"_state", "_result", "_exception", *_LAZY}:
        return None
    pending = fields["_state"]
    f.set_running_or_notify_cancel()
    running = fields["_state"]
    f.set_result(None)
    return pending, running, fields["_state"]


_STATES = _states()
_PENDING, _RUNNING, _FINISHED = _STATES or ("", "", "")


class LightFuture(Future[Any]):
    """A ``Future`` whose condition and lists are made on first use (see the module)."""

    def __init__(self) -> None:     # no super().__init__(): that builds the condition
        self._state = _PENDING
        self._result = None
        self._exception: BaseException | None = None
        # True until someone asks for the condition or a list (then Future's way):
        # an attribute, not a look into ``__dict__``, which would build the dict
        # that CPython otherwise never makes for an instance
        self._light = True

    def __getattr__(self, name: str) -> Any:
        make = _LAZY.get(name)
        if make is None:
            raise AttributeError(name)
        with _MAKE:
            value = self.__dict__.get(name)
            if value is None:
                self._light = False
                value = self.__dict__[name] = make()
        return value

    # A finished future never changes again (FINISHED is Future's last state, set
    # after its result under the lock): reading it needs neither the condition nor
    # the lock. Waiting for a batch's futures one by one (``[f.result() for f in
    # futs]``) otherwise built a condition per future, most of a producer's cost.
    def result(self, timeout: float | None = None) -> Any:
        if self._state is _FINISHED:
            if self._exception is not None:
                try:
                    raise self._exception
                finally:
                    self = None         # type: ignore[assignment]  # no cycle via the frame
            return self._result
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state is _FINISHED:
            return self._exception
        return super().exception(timeout)

    def done(self) -> bool:
        return self._state is _FINISHED or super().done()

    def set_running_or_notify_cancel(self) -> bool:
        with _MAKE:
            if self._light and self._state is _PENDING:
                self._state = _RUNNING
                return True
        return super().set_running_or_notify_cancel()

    def set_result(self, result: Any) -> None:
        with _MAKE:
            if self._light and self._state in (_PENDING, _RUNNING):
                self._result = result
                self._state = _FINISHED
                return
        super().set_result(result)

    def set_exception(self, exception: BaseException | None) -> None:
        with _MAKE:
            if self._light and self._state in (_PENDING, _RUNNING):
                self._exception = exception
                self._state = _FINISHED
                return
        super().set_exception(exception)


# a LightFuture, or a plain Future where its fields are unknown (the class itself:
# one call less per send)
new_future: Callable[[], "Future[Any]"] = LightFuture if _STATES is not None else Future


def start_all(futures: list["Future[Any]"]) -> list[bool]:
    """``set_running_or_notify_cancel`` of each future (False: cancelled, not to be
    run), the untouched ones in one pass under one lock."""
    if _STATES is None:
        return [f.set_running_or_notify_cancel() for f in futures]
    out: list[bool] = []
    touched: list[int] = []
    with _MAKE:
        for i, f in enumerate(futures):
            if type(f) is LightFuture and f._light and f._state is _PENDING:
                f._state = _RUNNING
                out.append(True)
            else:
                touched.append(i)
                out.append(False)
    for i in touched:       # someone looked (or a plain Future): Future's own way
        out[i] = futures[i].set_running_or_notify_cancel()
    return out


def finish_all(futures: list["Future[Any]"], results: Iterable[Any]) -> None:
    """``set_result`` of each running future, the untouched ones in one pass."""
    if _STATES is None:
        for f, r in zip(futures, results):
            f.set_result(r)
        return
    touched: list[tuple[Future[Any], Any]] = []
    with _MAKE:
        for f, r in zip(futures, results):
            if type(f) is LightFuture and f._light and f._state is _RUNNING:
                f._result = r
                f._state = _FINISHED
            else:
                touched.append((f, r))
    for f, r in touched:
        f.set_result(r)

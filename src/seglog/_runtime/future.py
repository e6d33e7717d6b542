"""``LightFuture``: a ``concurrent.futures.Future`` that makes its condition variable,
waiter list and callback list only when someone asks for them; ``FutureRound``:
futures made together, started together and resolved a batch at a time.

A ``Future`` builds a ``threading.Condition`` (an RLock, a deque, bound methods) in
its constructor: most of the cost of ``Producer.send`` and most of the garbage a
busy producer leaves. Most futures of a producer are never waited on one by one;
this one resolves without ever building them unless a thread looks (``result``,
``done``, ``add_done_callback``, ``concurrent.futures.wait``...). Every future keeps
a condition of its own, as ``Future`` does (``concurrent.futures.wait`` takes the
conditions of several futures in id order: sharing one between futures could
deadlock it).

A future of a round (``FutureRound.new``) keeps no state of its own at first: it is
pending until its round starts, running after, and finished once the round resolves
the span of the round's futures it is in (``resolve``: one step for a whole batch,
whatever its size). Its state is copied onto it when first read finished, and
when someone looks at it the ``Future`` way (it then joins the round's touched
futures, which the round starts and resolves one by one, as ``Future`` does).

The lazy attributes are made, and every state read off a round, under one
process-wide lock, which the resolving calls take too: a resolve either finds a
future untouched (then nobody can be waiting or have a callback: both need its
condition) or goes the ``Future`` way. If this Python's ``Future`` keeps other
fields than the ones below, a round makes plain ``Future`` objects instead and
starts and resolves them one by one.
"""

from __future__ import annotations

import os
import threading
from bisect import bisect_right
from concurrent.futures import Future
from itertools import count, repeat
from operator import itemgetter
# Any: a Future's result: the user's value
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

# Reentrant, as Future's own condition is: a finalizer the cyclic collector runs
# while this thread holds it (an allocation under it) may look at a future too
_MAKE = threading.RLock()
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
    """A ``Future`` whose condition and lists are made on first use, and whose state
    a round may hold for it (see the module)."""

    # Its fields start as these class attributes and ``__init__`` is ``object``'s:
    # a new future is made by C alone, no Python frame (half of what one cost). A
    # field set on the instance hides its default.
    _state = _PENDING
    _result: Any = None
    _exception: BaseException | None = None
    # True until someone asks for the condition or a list (then Future's way)
    _light = True
    # the round whose state this future has until it is copied onto it
    _round: "FutureRound | None" = None
    if not TYPE_CHECKING:       # (to mypy: Future's, which takes the same arguments)
        __init__ = object.__init__

    def __getattr__(self, name: str) -> Any:
        make = _LAZY.get(name)
        if make is None:
            raise AttributeError(name)
        with _MAKE:
            value = self.__dict__.get(name)
            if value is None:
                if self._light:
                    self._light = False
                    rnd = self._round
                    if rnd is not None:
                        # looked at the Future way: its state copied onto it;
                        # unless finished, its round starts and resolves it alone
                        self._round = None
                        got = rnd._outcome(self)
                        if got is not None:
                            self._result = got[0]
                            self._state = _FINISHED
                        else:
                            self._state = rnd._touch(self)
                value = self.__dict__[name] = make()
        return value

    def _settled(self) -> bool:
        """True if finished (a round's future: its outcome copied onto it, once its
        span is resolved)."""
        if self._state is _FINISHED:
            return True
        rnd = self._round
        if rnd is None or not rnd.resolved_any():
            return False
        rnd.place(self)         # (a round's first read: O(n), not under the lock)
        with _MAKE:
            if self._round is not rnd:      # settled or looked at meanwhile
                return self._state is _FINISHED
            got = rnd._outcome(self)
            if got is None:
                return False
            self._result = got[0]
            self._state = _FINISHED
            self._round = None
            return True

    # A finished future never changes again (FINISHED is Future's last state, set
    # after its result under the lock): reading it needs no condition, and once its
    # outcome is on it (a round's: copied at the first read, under the lock) no lock.
    # Waiting for a batch's futures one by one (``[f.result() for f in futs]``)
    # otherwise built a condition per future, most of a producer's cost.
    def result(self, timeout: float | None = None) -> Any:
        if self._settled() and self._state is _FINISHED:
            if self._exception is not None:
                try:
                    raise self._exception
                finally:
                    self = None         # type: ignore[assignment]  # no cycle via the frame
            return self._result
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._settled() and self._state is _FINISHED:
            return self._exception
        return super().exception(timeout)

    def done(self) -> bool:
        return self._settled() or super().done()

    def set_running_or_notify_cancel(self) -> bool:
        with _MAKE:
            if self._light and self._round is None and self._state is _PENDING:
                self._state = _RUNNING
                return True
        return super().set_running_or_notify_cancel()

    def set_result(self, result: Any) -> None:
        with _MAKE:
            if self._own_finish():
                self._result = result
                self._state = _FINISHED
                return
        super().set_result(result)

    def set_exception(self, exception: BaseException | None) -> None:
        with _MAKE:
            if self._own_finish():
                self._exception = exception
                self._state = _FINISHED
                return
        super().set_exception(exception)

    def _own_finish(self) -> bool:
        """(``_MAKE`` held) True if this future may be finished by setting its own
        fields: untouched and not finished (a round's: not yet resolved by its round,
        from which it is then detached)."""
        if not self._light:
            return False
        rnd = self._round
        if rnd is None:
            return self._state is _PENDING or self._state is _RUNNING
        if rnd._outcome(self) is not None:
            return False            # resolved already: Future's way says so
        self._round = None
        return True


class FutureRound:
    """Futures made together (``new``), started together (``start``) and resolved
    by spans of them (``resolve``), each step one call whatever the number of
    futures: none is touched unless someone looked at it. Results are the values
    of the spans' sequences, paired with ``tag`` when it is not None. A round's
    futures may still be finished one by one (``finish_all``, ``set_exception``):
    those are detached from it. Thread-safe.

    It keeps the ids of its futures, never the futures (a future it refers to would
    refer back: a cycle, freed only by the cyclic collector): a future not yet read
    keeps its round's ids, 8 bytes and an int a future, and the map of places made
    on the first read; the first read of a round costs about as much as setting
    every future's state one by one did."""

    __slots__ = ("_tag", "_started", "_ids", "_pos", "_spans", "_early", "_touched",
                 "_plain")

    def __init__(self, tag: int | None = None) -> None:
        self._tag = tag
        self._started = False
        self._ids: list[int] = []                # id of each future, in round order
        self._pos: dict[int, int] | None = None  # id -> place, made on first need
        self._spans: list[tuple[int, Sequence[int]]] = []   # (first place, results)
        # looked at the Future way, not finished: before the start (places unknown),
        # and by place once started
        self._early: list[LightFuture] = []
        self._touched: dict[int, LightFuture] = {}
        # where light futures are unknown: the round's plain ones, finished one by one
        self._plain: list[Future[Any]] = []

    def new(self) -> "Future[Any]":
        """A new pending future of this round (a plain ``Future`` where light ones
        are unknown)."""
        if _STATES is None:
            return Future()
        f = LightFuture()
        f._round = self
        return f

    def start(self, futures: list["Future[Any]"]) -> list[bool] | None:
        """The round's futures, all of them, in the order of their work, start
        running: ``cancel`` fails from now. None if every one runs; else a flag for
        each (False: cancelled, not to be run; the round's ``resolve`` then does not
        apply: finish them one by one)."""
        if _STATES is None:
            self._plain = futures
            return [f.set_running_or_notify_cancel() for f in futures]
        ids = list(map(id, futures))        # made before the lock: O(n)
        with _MAKE:
            self._started = True
            self._ids = ids
            early, self._early = self._early, []
        if not early:
            return None
        pos = self._positions()
        with _MAKE:
            for f in early:
                self._touched[pos.get(id(f), -1)] = f
        cancelled = [f for f in early if not f.set_running_or_notify_cancel()]
        if not cancelled:
            return None
        keep = [True] * len(futures)
        for f in cancelled:
            keep[pos[id(f)]] = False
        return keep

    def resolve(self, first: int, results: Sequence[int]) -> None:
        """The futures at places ``first``.. of the round finish with ``results``
        (paired with the tag), in one step (touched ones one by one)."""
        tag = self._tag
        stop = first + len(results)
        if _STATES is None:
            finish_all(self._plain[first:stop],
                       results if tag is None else zip(repeat(tag), results))
            return
        due: list[tuple[LightFuture, Any]] = []
        with _MAKE:
            spans = self._spans
            spans.insert(bisect_right(spans, first, key=_FIRST), (first, results))
            touched = self._touched
            if touched:
                # the smaller of the touched futures and the span: O(span) a round
                if len(touched) < stop - first:
                    places = [i for i in touched if first <= i < stop]
                else:
                    places = [i for i in range(first, stop) if i in touched]
                for i in places:
                    r = results[i - first]
                    due.append((touched.pop(i), r if tag is None else (tag, r)))
        for f, r in due:
            if not f.done():        # failed one by one meanwhile
                f.set_result(r)

    def _positions(self) -> dict[int, int]:
        """Each future's place, by id (after ``start``; made once, O(n), on the first
        need: outside the lock where the caller can)."""
        pos = self._pos
        if pos is None:
            pos = self._pos = dict(zip(self._ids, count()))
        return pos

    def _outcome(self, f: LightFuture) -> tuple[Any] | None:
        """(``_MAKE`` held) ``(result,)`` if a span resolved ``f``, else None."""
        spans = self._spans
        if not spans:
            return None
        i = self.place(f)
        at = bisect_right(spans, i, key=_FIRST) - 1
        if at < 0:
            return None
        first, results = spans[at]
        if i - first >= len(results):
            return None
        r = results[i - first]
        return (r if self._tag is None else (self._tag, r),)

    def resolved_any(self) -> bool:
        """True once a span is resolved (read without the lock: spans only grow)."""
        return bool(self._spans)

    def place(self, f: LightFuture) -> int:
        """``f``'s place in the round (-1: not in its work), after ``start``."""
        return self._positions().get(id(f), -1)

    def _touch(self, f: LightFuture) -> str:
        """(``_MAKE`` held) ``f``, not finished, is looked at the ``Future`` way: the
        round starts (if it has not yet) and resolves it one by one; its state now."""
        if not self._started:
            self._early.append(f)
            return _PENDING
        self._touched[self.place(f)] = f
        return _RUNNING


_FIRST = itemgetter(0)


def _after_fork_in_child() -> None:
    # a thread of the parent may have held the lock when it forked: in the child it
    # would be held for ever (futures resolved before the fork are read under it)
    global _MAKE
    _MAKE = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def finish_all(futures: list["Future[Any]"], results: Iterable[Any]) -> None:
    """``set_result`` of each running future, the untouched ones in one pass (a
    round's future is detached from its round)."""
    if _STATES is None:
        for f, r in zip(futures, results):
            f.set_result(r)
        return
    touched: list[tuple[Future[Any], Any]] = []
    with _MAKE:
        for f, r in zip(futures, results):
            if type(f) is LightFuture and f._light and (
                    f._state is _RUNNING if f._round is None else f._own_finish()):
                f._result = r
                f._state = _FINISHED
            else:
                touched.append((f, r))
    for f, r in touched:
        f.set_result(r)

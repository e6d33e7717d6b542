"""One of several writers' way into and out of a change (``LocalLog``'s shared mode).

In: this process's append lock, then the other writer processes' (the writers' file's
lock, through ``_shared.writers.WritersFile``), both within ``lock_timeout_ms``, and what the
others published meanwhile, for ``LocalLog`` to follow. Out: what this writer changed
published (only the tail when only appends happened), or, after a failure inside a
write, nothing published and the holder left for the next writer's repair. What this
writer last published is remembered here, and only here.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from .writers import Shared, WritersFile
from ..errors import LogClosedError, SeglogError
from ..segment import ActiveSegment, WriterState


class SharedMode:
    """Built by ``LocalLog`` around its append lock and its handle on the header;
    ``follow(moved)`` is how the writer takes what the others published (the active
    segment's ``WriterState`` or the whole ``Shared`` state, lock held);
    ``fail_line(e)`` fails the appends waiting in the writer's line when the way in
    fails for them too."""

    __slots__ = ("_lock", "_w", "_closed_error", "_fail_line", "_follow",
                 "_gen", "_changes", "_marks", "_end")

    def __init__(self, lock: threading.Lock, w: WritersFile,
                 closed_error: Callable[[], SeglogError],
                 fail_line: Callable[[BaseException], None],
                 follow: Callable[[WriterState | Shared], None]) -> None:
        self._lock = lock
        self._w = w
        self._closed_error = closed_error
        self._fail_line = fail_line
        self._follow = follow
        # what this writer published last: the list generation, the change count,
        # the active segment's marks, the end offset (-1: nothing yet)
        self._gen = self._changes = self._marks = self._end = -1

    def enter(self, blocking: bool = True, what: str = "nothing was written") -> bool:
        """Step 1 of a change: this process's lock (False at once if another thread
        holds it and not ``blocking``), then the other writers' (together within
        ``lock_timeout_ms``, else ``LogLockedError`` ending with ``what``), then what
        they published since this writer last looked, followed; True. While this
        thread waits for the other writers, this process's other appends wait in
        line; they fail as this fails. (LocalLog's ``_begin`` itself: the append
        path's frames are few.)"""
        lock, w = self._lock, self._w
        if lock.acquire(False):
            try:
                moved = w.enter()
            except BlockingIOError:
                moved = self._enter_waiting(w.timeout, what)
            except LogClosedError:
                lock.release()
                self._fail_line(self._closed_error())
                raise self._closed_error() from None
            except BaseException as e:
                lock.release()
                self._fail_line(e)
                raise
        elif not blocking:
            return False
        else:
            start = time.monotonic()
            if not lock.acquire(timeout=w.timeout):
                raise w.timed_out(what)
            moved = self._enter_waiting(w.timeout - (time.monotonic() - start), what)
        if moved is not None:
            if type(moved) is WriterState:
                self._end = moved.next_offset   # the header's end is this writer's
            self._follow(moved)
        return True

    def _enter_waiting(self, left: float, what: str) -> WriterState | Shared | None:
        """(this process's lock held) The other writers' lock, waited for at most
        ``left`` seconds, and what moved; a failure lets go of both."""
        w = self._w
        try:
            if w.closed:
                raise self._closed_error()
            w.lock(max(0.0, left), what)
            return w.enter(True)       # (it lets go of the lock if it fails)
        except BaseException as e:
            self._lock.release()
            self._fail_line(e)
            raise

    def commit(self, seg: ActiveSegment, end: int, changes: int, gen: int, start: int,
               flushed: int) -> None:
        """Publish what changed since this writer last published (everything when more
        than the active segment's tail moved: the list, the start, the flushed
        offset), then let go of both locks. ``seg``: the active segment; ``end``: the
        next offset; ``changes`` and ``gen``: the writer's change count and list
        generation; ``flushed``: the writer's flushed offset."""
        w = self._w
        try:
            if changes != self._changes:
                self.publish(seg, end, changes, gen, start, flushed)
                w.leave()
            elif seg.marks != self._marks:
                # appends alone, which moved an index entry or the largest timestamp:
                # the active segment's tail at the same version (a whole publish would
                # make the next writer read and follow it all)
                self._end = end
                self._marks = seg.marks
                w.leave_state(seg.writer_state())
            elif end != self._end:
                self._end = end
                w.leave_tail(seg.size, end)
            else:
                w.leave()
        finally:
            self._lock.release()

    def abort(self) -> None:
        """Let go after a failure inside a write or a roll: as after a death, nothing
        is published and the holder stays, for the next writer's repair."""
        try:
            self._w.leave_for_repair()
        finally:
            self._lock.release()

    def publish(self, seg: ActiveSegment, end: int, changes: int, gen: int, start: int,
                flushed: int) -> None:
        """Everything, now (lock held): the log start, the flushed offset, the active
        segment's state, and a new list generation if the list changed."""
        self._w.publish(start, flushed, gen != self._gen, seg.writer_state())
        self.published(seg, end, changes, gen)

    def published(self, seg: ActiveSegment, end: int, changes: int, gen: int) -> None:
        """What the header says now is this writer's view (it followed the others)."""
        self._gen = gen
        self._end = end
        self._marks = seg.marks
        self._changes = changes

    def changed(self, seg: ActiveSegment, end: int, changes: int) -> bool:
        """Did anything move since this writer last published?"""
        return seg.marks != self._marks or end != self._end or changes != self._changes

    def changes_since(self, changes: int) -> bool:
        """Did more than appends move since this writer last published?"""
        return changes != self._changes

"""Reads in flight over one log's segments, and the lifetime of the segments' files.

Every ``pread``, index lookup and fsync of a segment happens inside a counted read
(``InFlight.enter``/``leave``). A segment that leaves its log's list (retention,
compaction, a re-listing, another writer's roll) is retired at once (a reader that
meets it re-finds its place), but its descriptors close only when no read is in
flight, so no descriptor number is closed (and reused by another open) under a
reader. Sealed segments' files are opened on use and the oldest idle ones closed past
a budget (``OpenSegments``), so a log of thousands of segments holds a few
descriptors. Closing a log refuses new reads and waits for those in flight.

Used by both lists of segments: a writer's (``_log.local_log.LocalLog``) and a readonly
reader's (``_log.live.LiveLog``); neither changes this state but through these methods.
"""

from __future__ import annotations

import threading
from typing import Callable, Iterable, Sequence

from ..errors import SeglogError
from ..segment import Segment


# sealed segments a log keeps open besides its last two (the active one, and the one
# it rolled from, which a writer's repair may still walk): three descriptors each
OPEN_SEALED = 4


class OpenSegments:
    """The sealed segments of one log whose files are open, oldest opened first. Past
    ``OPEN_SEALED`` of them (not counting the ones to ``keep``), the oldest are
    closed once no read is in flight; their next use opens them again."""

    __slots__ = ("_lock", "_order", "_frozen")

    def __init__(self) -> None:
        self._lock = threading.Lock()       # innermost: nothing is called holding it
        self._order: dict[Segment, None] = {}
        self._frozen = False

    def opened(self, seg: Segment) -> None:
        """``seg``'s files were opened (on use, or it was sealed holding them)."""
        with self._lock:
            self._order.pop(seg, None)
            self._order[seg] = None

    def forget(self, seg: Segment) -> None:
        with self._lock:
            self._order.pop(seg, None)

    def over(self) -> bool:
        return len(self._order) > OPEN_SEALED + 2 and not self._frozen

    def freeze(self) -> None:
        """Close nothing from now on: a compaction pass failed after swapping files
        on disk that the list still names as they were (their descriptors hold the
        data the list describes; the next open finishes the swap)."""
        self._frozen = True

    def idle(self, keep: Sequence[Segment]) -> list[Segment]:
        """The oldest opened past the budget, ``keep`` aside: forgotten, to close."""
        with self._lock:
            order = self._order
            n = sum(1 for s in order if s not in keep)
            out = []
            for s in list(order):
                if n <= OPEN_SEALED:
                    break
                if s not in keep:
                    del order[s]
                    out.append(s)
                    n -= 1
            return out

    def watch(self, segs: Sequence[Segment]) -> None:
        """Be told when the files of ``segs`` are opened on use."""
        for seg in segs:
            seg.watch(self.opened)

    def found(self, segs: Sequence[Segment]) -> None:
        """Of ``segs``, those whose files are open already (the loader's)."""
        for seg in segs:
            if seg.opened:
                self.opened(seg)

    def close_idle(self, keep: Sequence[Segment]) -> None:
        """Close the files of the oldest opened past the budget, ``keep`` aside (the
        caller made sure no read is in flight): a log holds a bounded number of
        descriptors however much of it is read. The next use opens them again."""
        for seg in self.idle(keep):
            try:
                if not seg.close_if_unused():
                    # a thread uses its files now (a sendfile to a slow reader): never
                    # wait for it here, under the read count's lock; a later pass does
                    self.opened(seg)
            except OSError:
                pass        # closing a read-only descriptor: nothing was lost

    def after_fork(self) -> None:
        self._lock = threading.Lock()


class InFlight:
    """The reads in flight over one log's segments and the closers of the files of
    segments that left it. ``closed_error()`` is what a read raises once the log
    closes; ``current()`` the log's segments now (the last two are never closed as
    idle: the active one, and the one it rolled from)."""

    def __init__(self, closed_error: Callable[[], SeglogError],
                 current: Callable[[], Sequence[Segment]]) -> None:
        self._closed_error = closed_error
        self._current = current
        self._lock = threading.Lock()           # lock 6 of docs/DESIGN.md's order
        self._idle = threading.Condition(self._lock)
        self._count = 0
        self._stopped = False
        self._graveyard: list[Callable[[], None]] = []
        self._open = OpenSegments()

    @property
    def stopped(self) -> bool:
        """True once ``stop`` refused new reads (the log is closing or closed)."""
        return self._stopped

    def enter(self) -> None:
        """Count a read in flight (``closed_error()`` once stopped); ``leave`` after."""
        with self._lock:
            if self._stopped:
                raise self._closed_error()
            self._count += 1

    def leave(self) -> None:
        """The end of a read counted by ``enter``: the last one out closes retired
        files and idle ones past the budget."""
        with self._lock:
            self._count -= 1
            if not self._count:
                if self._graveyard:
                    self._bury()
                if self._open.over():
                    self._open.close_idle(self._current()[-2:])
                self._idle.notify_all()

    def stop(self, wait: bool = True) -> None:
        """Refuse new reads and (``wait``) wait for those in flight: the log closes."""
        with self._lock:
            self._stopped = True
            while wait and self._count:
                self._idle.wait()

    def dispose(self, close: Callable[[], None]) -> None:
        """Run ``close`` (which closes descriptors) once no read is in flight."""
        with self._lock:
            if self._count:
                self._graveyard.append(close)
            else:
                close()

    def retire(self, segs: Iterable[Segment], why: str) -> None:
        """Segments that left the list: readers that meet them re-find their place;
        their files close once no read is in flight (one this writer had active and
        another sealed: as they are, its map dropped unseen)."""
        for seg in segs:
            # marked at once (a reader between steps re-finds), closed once no read is
            self._open.forget(seg)
            self.dispose(seg.retire(why, keep_files=seg.is_active))

    def bury(self) -> None:
        """Run every waiting closer now (the log closes: no read is in flight)."""
        with self._lock:
            self._bury()

    def _bury(self) -> None:
        for close in self._graveyard:      # retired segments' descriptors
            close()
        self._graveyard.clear()

    def watch(self, segs: Sequence[Segment]) -> None:
        """Be told when the files of ``segs`` are opened on use."""
        self._open.watch(segs)

    def found(self, segs: Sequence[Segment]) -> None:
        """Of ``segs``, those whose files are open already (the loader's)."""
        self._open.found(segs)

    def sealed(self, seg: Segment) -> None:
        """``seg`` was sealed holding its files: closed once idle past the budget,
        now if no read is in flight."""
        self._open.opened(seg)
        if self._open.over():
            with self._lock:              # else the last read in flight closes them
                if not self._count:
                    self._open.close_idle(self._current()[-2:])

    def freeze(self) -> None:
        """Close no idle file from now on (``OpenSegments.freeze``)."""
        self._open.freeze()

    def after_fork(self) -> None:
        """In a forked child: new locks, no reads in flight."""
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._count = 0
        self._open.after_fork()

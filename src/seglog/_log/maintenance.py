"""A writer's maintenance policy (Kafka's ``deleteOldSegments`` and the cleaner's
passes): retention, which checkpoints the new log start before any file goes;
compaction through ``cleaner.compact``; the delayed deletes of what they removed;
one pass at a time. ``Log`` runs them when called and on the process's maintenance
thread, where a failure is logged and kept for the next call.
"""

from __future__ import annotations

import logging
import os
import threading
from contextlib import contextmanager
from typing import Callable, ContextManager, Iterator, Sequence

from .._runtime import platform as _platform
from .._runtime.files import (CLEANED, LOG_START, MAINTENANCE_LOCK, SWAP, fsync_dir, remove,
                              write_checkpoint)
from ..cleaner import CompactionStats, compact, resolve_interrupted
from ..errors import SeglogError, StorageError, storage_error
from .local_log import LocalLog
from ..retention import DelayedDeletes, expired_prefix, remove_orphans
from ..segment import Segment, SegmentGoneError

_log = logging.getLogger("seglog")


_Check = Callable[[], None]
_Fail = Callable[[BaseException], StorageError]


class _Measured:
    """A segment's size and largest timestamp as retention asks for them, each read
    counted in flight on its own: not the whole pass, so that a pass over thousands
    of segments (an old log reopened) holds a few files open, not all of them."""

    __slots__ = ("_seg", "_reading")

    def __init__(self, seg: Segment, reading: Callable[[], ContextManager[object]]) -> None:
        self._seg = seg
        self._reading = reading

    @property
    def size(self) -> int:
        with self._reading():
            return self._seg.size

    @property
    def max_timestamp(self) -> int:
        with self._reading():
            return self._seg.max_timestamp


class _TurnLock:
    """A reentrant lock taken in turn, first come first served. A thread calling
    ``compact()`` in a loop otherwise took a plain lock again before a waiting
    ``enforce_retention()`` (or ``close()``) was woken, for minutes: locks are not
    fair. Each pass is long, so a turn costs nothing that shows."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._owner: int | None = None
        self._depth = 0
        self._next = 0          # the next ticket given
        self._serving = 0       # the ticket whose turn it is
        self._gone: set[int] = set()    # tickets whose waiter gave up (interrupted)

    def __enter__(self) -> None:
        me = threading.get_ident()
        with self._cond:
            if self._owner == me:
                self._depth += 1
                return
            ticket = self._next
            self._next += 1
            try:
                while self._serving != ticket:
                    self._cond.wait()
            except BaseException:
                # interrupted while waiting: its turn, when it comes, is passed on
                self._skip(ticket)
                raise
            self._owner = me
            self._depth = 1

    def _skip(self, ticket: int) -> None:
        """(``_cond`` held) Give up ``ticket``: served now, the next turn goes on."""
        if self._serving == ticket:
            self._advance()
        else:
            self._gone.add(ticket)

    def _advance(self) -> None:
        """(``_cond`` held) The next waiting ticket's turn."""
        self._serving += 1
        while self._serving in self._gone:     # tickets given up meanwhile
            self._gone.discard(self._serving)
            self._serving += 1
        self._cond.notify_all()

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._depth -= 1
            if self._depth:
                return
            self._owner = None
            self._advance()


class Maintenance:
    """The retention and compaction passes over one writer's ``LocalLog``. Each pass
    is given the log's ``check`` (raises what an append would) and ``fail`` (poisons
    the log after an I/O error, returning the ``StorageError`` to raise): passed
    per call, never kept, so nothing here keeps the ``Log`` alive."""

    def __init__(self, local: LocalLog, shared: bool) -> None:
        self._local = local
        self._shared = shared       # one of several writer processes
        # retention and compaction, one at a time, never holding the append lock long
        # (lock 1: close() takes it too, to wait for a running pass)
        self.lock = _TurnLock()
        self._deletes = DelayedDeletes(local.path)
        # a failure of the background pass, raised by the next call of either
        self.background_error: BaseException | None = None

    def after_fork(self) -> None:
        """In a forked child: a new lock (another thread may have held it at the fork)."""
        self.lock = _TurnLock()

    @staticmethod
    @contextmanager
    def _poisoning(fail: _Fail) -> Iterator[None]:
        """An I/O error inside poisons the log, as a failed append does."""
        try:
            yield
        except OSError as e:
            raise fail(e) from e

    def enforce(self, now_ms: int, check: _Check, fail: _Fail) -> list[int]:
        """The delete policy: the new log start offset is checkpointed durably before
        any file is removed, so a crash in between leaves segments below the start
        offset, which the next open deletes, and never a start offset pointing at
        deleted data. The deleted base offsets."""
        local = self._local
        cfg = local.config
        if not cfg.deletes:
            return []
        with self.lock, self._poisoning(fail), self._one_process() as mine:
            check()
            if not mine:
                return []
            return self._enforce(now_ms)

    def _enforce(self, now_ms: int) -> list[int]:
        local = self._local
        cfg = local.config
        self._deletes.purge()
        def due(segs: Sequence[Segment]) -> int:
            return expired_prefix([_Measured(s, self._reading) for s in segs], now_ms,
                                  cfg.retention_ms, cfg.retention_bytes)
        # decided once outside the append lock, on the list this writer has, which
        # measures (and caches) what the decision needs; then for real under it, on
        # the list as it is then (other writers may have changed it), reading few files
        try:
            due(local.segs)
        except (SegmentGoneError, FileNotFoundError):
            pass        # another writer removed one: the list under the lock lacks it
        doomed = local.expire(due)
        self._deletes.delete(doomed, cfg.file_delete_delay_ms)
        local.metrics.retention_ran(len(doomed), sum(s.size for s in doomed))
        if self._shared:
            remove_orphans(local.path, local.start, local.active_base,
                           cfg.file_delete_delay_ms)
        return [s.base_offset for s in doomed]

    def compact(self, now_ms: int | None, check: _Check, fail: _Fail) -> CompactionStats:
        """One compaction pass over the sealed segments (``cleaner.compact``) as they are
        when it starts (taken under the append lock: ``LogLockedError`` when another
        writer held it for ``lock_timeout_ms``, nothing done), swapping each rewritten
        group in with ``LocalLog.replace``."""
        local = self._local
        with self.lock, self._poisoning(fail), self._one_process() as mine:
            check()
            if not mine:
                return CompactionStats(skipped="another writer process runs a maintenance pass")
            segs, start = local.sealed_now()
            try:
                # each segment read counts as a read in flight on its own (not the
                # whole pass: idle files close between segments)
                st = compact(local.path, segs, start, local.config, local.replace, now_ms,
                             self._compacting)
            except BaseException:
                local.freeze_open_files()
                raise
            if st.skipped is None:
                local.metrics.compaction_ran(st.bytes_before - st.bytes_after)
            return st

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """A pass reads segments as a reader does: counted in flight, so that no
        descriptor it uses is closed under it (idle segments' or retired ones')."""
        self._local.enter()
        try:
            yield
        finally:
            self._local.leave()

    @contextmanager
    def _compacting(self) -> Iterator[None]:
        """``_reading`` for the cleaner: a failure inside (after a swap on disk, the
        list may still name the files it replaced) stops the closing of idle files
        before this read stops counting."""
        self._local.enter()
        try:
            yield
        except BaseException:
            self._local.freeze_open_files()
            raise
        finally:
            self._local.leave()

    @contextmanager
    def _one_process(self) -> Iterator[bool]:
        """With several writer processes, one maintenance pass at a time among them (a
        flock on ``.maintenance``; False: another runs one, this pass is skipped).
        What a dead writer's compaction left is finished first, under the append
        lock, and the segment list follows the files."""
        local = self._local
        if not self._shared:
            yield True
            return
        fd = os.open(os.path.join(local.path, MAINTENANCE_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                _platform.flock(fd, _platform.LOCK_EX_NB)
            except BlockingIOError:
                yield False
                return
            if any(n.startswith((SWAP, CLEANED)) for n in os.listdir(local.path)):
                local.files_swapped(lambda: _finish_swaps(local.path))
            yield True
        finally:
            os.close(fd)

    def raise_background_error(self) -> None:
        """Raise (once) what the last background pass failed with."""
        e = self.background_error
        if e is not None:
            self.background_error = None
            raise storage_error(
                e, f"the background maintenance of {self._local.path} failed: {e}") from e

    def run(self, now_ms: int, check: _Check, fail: _Fail) -> None:
        """The maintenance thread's pass: retention, compaction and delayed deletes,
        beside appends (the append lock is taken only to swap the segment list). A
        failure is logged and kept for ``raise_background_error``."""
        local = self._local
        try:
            with self.lock:
                check()
                if local.config.deletes:
                    self.enforce(now_ms, check, fail)
                if local.config.compacted:
                    self.compact(None, check, fail)
                self._deletes.purge()
        except (SeglogError, OSError) as e:
            if not local.closed and not local.closing:
                # kept before it is logged: whoever reads the warning finds it raised
                self.background_error = e
                _log.warning("seglog: maintenance of %s failed: %s", local.path, e)

    def purge_all(self) -> None:
        """At close: delete what waits for its delay now (the next writer's open
        removes what this could not)."""
        if len(self._deletes):
            try:
                self._deletes.purge(everything=True)
            except OSError:
                pass


def _finish_swaps(directory: str) -> None:
    """Committed compaction swaps rolled forward, uncommitted output removed."""
    resolve_interrupted(directory)
    for n in os.listdir(directory):
        if n.startswith(CLEANED):
            remove(os.path.join(directory, n))
    fsync_dir(directory)

"""``LocalLog``: a log's segment list and its state, as Kafka's ``LocalLog`` is under
``UnifiedLog``.

It owns the tuple of segments, the start and end offsets, the append lock, rolling,
a readonly reader's re-listing of the directory, and the lifetime of segments that
leave the list (reads in flight are counted; a retired segment's descriptors close
once none is). The read path over it is ``_log_reads``; policy (flushing,
poisoning, locking the directory, retention and compaction, tailing) is the
``Log``'s, which holds a ``LocalLog``.

The writer's interface (``Log``'s, nothing else): under ``lock``, the writer appends
to ``active`` (a plain attribute: the append hot path reads it with one lookup),
then moves ``end`` past what it wrote; ``roll`` when the active segment refuses a
batch. Readers take a snapshot of ``segs`` (a tuple, replaced whole) and re-find
their place when a segment they hold is retired.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Iterable, Protocol, Sequence

from . import _live, recovery
from ._files import LOG_START, RECOVERY_POINT, read_checkpoint, write_checkpoint
from ._metrics import Metrics
from .config import LogConfig
from .codec import NEVER
from .errors import LogClosedError, SeglogError
from .segment import Segment

_RACY_NS = 3_000_000_000  # a directory listing this close to its mtime is not trusted


class AppendLock(Protocol):
    """A ``threading.Lock`` (one writer process), or a ``_shared_log.SharedLock``."""

    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...
    def release(self) -> None: ...
    def __enter__(self) -> bool: ...
    def __exit__(self, *exc: Any) -> Any: ...


def active_capacity(config: LogConfig) -> int:
    """The size an active segment's file is made: a full segment plus the largest batch
    (and room for its framing), so an append that fits the roll check always fits."""
    return config.segment_bytes + config.max_message_bytes + 65536


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


class LocalLog:
    """The segments of one log directory and their state (see the module docstring).
    A writer's is built from the loader's result (``segments`` not empty, the last
    one active); a readonly reader's starts empty and fills at ``refresh``."""

    # segs[-1], kept beside the tuple for the append hot path: set whenever the list
    # is not empty (a writer's never is; a readonly reader does not use it)
    active: Segment

    def __init__(self, path: str, config: LogConfig, readonly: bool,
                 segments: Sequence[Segment] = (), start: int = 0, end: int = 0,
                 recovery_point: int = -1) -> None:
        self.path = path
        self.config = config
        self.readonly = readonly
        # the append lock: appends, rolls and every change of the segment list; with
        # several writer processes, a SharedLock (``shared``), which also follows them
        self.lock: AppendLock = threading.Lock()
        self.shared: Any = None
        # a readonly reader or one of several writers: others change the files
        self.follows = readonly
        # bumped by every change of the segment list (``list_gen``) and of the start
        # or flushed offset (``changes``): what other writers must learn
        self.list_gen = 0
        self.changes = 0
        self.segs: tuple[Segment, ...] = ()
        self.open_segs = OpenSegments()
        self._set(tuple(segments))
        self.open_segs.found(self.segs[:-1])
        self.start = start
        self.end = end
        self.closed = False
        self._closing = False
        self.capacity = active_capacity(config)
        # reads in flight (every pread, index lookup and fsync of a segment happens inside
        # one): a retired segment's descriptors close only when none is, so no number
        # is closed (and reused by another open) under a reader
        self._rlock = threading.Lock()
        self._idle = threading.Condition(self._rlock)
        self._inflight = 0
        self._graveyard: list[Callable[[], None]] = []
        self._refresh_lock = threading.Lock()
        self._dir_mtime = 0
        self._listed_at = 0
        self._pid = os.getpid()
        self._forked_from: int | None = None
        # counters every layer of this log adds to (``Log.metrics()`` shows them)
        self.metrics = Metrics()
        self._reported_damage: BaseException | None = None
        # every offset below ``flushed`` was fsynced; the recovery-point checkpoint says
        # so up to ``_checkpointed``; past ``flush_at`` an append flushes
        self.flushed = end
        self._checkpointed = recovery_point
        self._ckpt_lock = threading.Lock()
        self.flush_at = NEVER
        self._update_flush_at()
        # tailing: ``Log.wait`` callers of this process (the append path notifies them)
        self.waiters = 0
        self._cond = threading.Condition(threading.Lock())
        # metrics that cost the append path nothing: messages and bytes appended come
        # from the end offset and the segments' sizes against these
        self._end_at_open = end
        self._active_bytes_at_open = 0
        self._rolled_bytes = 0
        if segments and not readonly:
            self._active_bytes_at_open = self.active.size
            self.active.set_roll_policy(config.segment_bytes, config.segment_ms)

    def _set(self, segs: tuple[Segment, ...]) -> None:
        self.segs = segs
        if segs:
            self.active = segs[-1]
        self.open_segs.watch(segs)

    # -- what a reader sees -------------------------------------------------------------
    @property
    def start_offset(self) -> int:
        """The first offset still in the log (a readonly reader looks again first)."""
        if self.follows:
            self.refresh()
        return self.start

    @property
    def end_offset(self) -> int:
        """The next offset to assign (a readonly reader looks again first)."""
        if self.follows:
            self.refresh()
        return self.end

    @property
    def segments(self) -> tuple[Segment, ...]:
        """The segments, oldest first (a readonly reader looks again first)."""
        if self.follows:
            self.refresh()
        return self.segs

    @property
    def flushed_offset(self) -> int:
        """Every offset below this survives power loss (the writers' shared one)."""
        if self.shared is not None:
            self.refresh()
        return self.flushed

    # -- open, closed, forked ---------------------------------------------------------
    def closed_error(self) -> SeglogError:
        """What using a closed log raises (a forked child's copy of a writer says so)."""
        if self._forked_from is not None:
            return SeglogError(
                f"log {self.path} was opened by process {self._forked_from}; this process "
                f"({self._pid}) is a fork of it and may not use the writer: open the log "
                f"again here (readonly=True to read while the parent writes)")
        return LogClosedError(f"log {self.path} is closed")

    def check_readable(self) -> None:
        """``closed_error()`` once closed."""
        if self.closed:
            raise self.closed_error()

    def begin_close(self) -> bool:
        """Refuse new reads and wait for those in flight; False if already closed."""
        with self._rlock:
            if self.closed:
                return False
            self._closing = True
            while self._inflight:
                self._idle.wait()
        return True

    @property
    def closing(self) -> bool:
        """True from ``begin_close`` on."""
        return self._closing

    def close(self, clean: bool = False, alone: Callable[[], bool] | None = None) -> None:
        """Close (append lock held). ``clean``: the writer's clean shutdown first (seal
        the active segment, checkpoint, write the clean-shutdown marker; an
        ``OSError`` propagates), then every segment's files and retired segments'
        files, whatever happened. One of several writers does that only if it is the
        last (``alone()``); else it lets go of its files as they are."""
        if self.shared is not None and not self.shared.close(clean, alone):
            self.abandon()
            return
        self.closed = True
        try:
            if clean:
                self.active.seal()
                write_checkpoint(self.path, RECOVERY_POINT, self.end)
                recovery.write_marker(self.path, self.active, self.end)
                self.flushed = self.end
        finally:
            for seg in self.segs:
                try:
                    seg.close(seal=False)    # sealed above, unless it failed
                except OSError:
                    pass
            self._bury()

    def abandon(self) -> None:
        """Drop every segment as a killed process would (append lock held): no seal."""
        self.closed = True
        for seg in self.segs:
            seg.abandon()
        self._bury()

    def _bury(self) -> None:
        for close in self._graveyard:      # retired segments' descriptors
            close()
        self._graveyard.clear()

    def after_fork(self) -> None:
        """In a forked child: new locks (another thread of the parent may have held
        one at the fork), no reads in flight; a writer's copy is closed for good."""
        self.lock = threading.Lock()
        self._rlock = threading.Lock()
        self._idle = threading.Condition(self._rlock)
        self._refresh_lock = threading.Lock()
        self._ckpt_lock = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        self._inflight = 0
        self.waiters = 0
        self.open_segs.after_fork()
        if self.shared is not None:
            self.shared.after_fork()
        for seg in self.segs:
            seg.reset_locks()
        if self.readonly:
            return
        self._forked_from = self._pid
        self._pid = os.getpid()
        self.closed = True

    # -- reads in flight and retired segments ------------------------------------------
    def enter(self) -> None:
        """Count a read in flight (``closed_error()`` once closing); ``leave`` after."""
        with self._rlock:
            if self._closing or self.closed:
                raise self.closed_error()
            self._inflight += 1

    def leave(self) -> None:
        """The end of a read counted by ``enter``: the last one out closes retired files."""
        with self._rlock:
            self._inflight -= 1
            if not self._inflight:
                if self._graveyard:
                    self._bury()
                if self.open_segs.over():
                    self.open_segs.close_idle(self.segs[-2:])
                self._idle.notify_all()

    def _dispose(self, close: Callable[[], None]) -> None:
        """Run ``close`` (which closes descriptors) once no read is in flight."""
        with self._rlock:
            if self._inflight:
                self._graveyard.append(close)
            else:
                close()

    def _retire(self, segs: Iterable[Segment], why: str) -> None:
        """Segments that left the list (retention, compaction, a reader's re-listing):
        readers that meet them re-find their place; their files close once no read
        is in flight (one this writer had active and another sealed: as they are)."""
        for seg in segs:
            # marked at once (a reader between steps re-finds), closed once no read is
            self.open_segs.forget(seg)
            self._dispose(seg.retire(why, keep_files=seg.is_active))

    # -- changes of the list -----------------------------------------------------------
    def roll(self, old: Segment) -> Segment:
        """Seal the active segment ``old`` and start a new one at the end offset (append
        lock held; an empty segment never rolls: ``old`` again). The sealed segment
        was fsynced, so everything before the new base offset is durable: it becomes
        the recovery point. An ``OSError`` propagates (the caller poisons the log)."""
        if not old.size:
            return old
        end = self.end
        old.next_offset = end
        old.seal()
        self.open_segs.opened(old)       # sealed, its files open: closed when idle
        if self.open_segs.over():
            with self._rlock:            # else the last read in flight closes them
                if not self._inflight:
                    self.open_segs.close_idle(self.segs[-2:])
        cfg = self.config
        new = Segment.create(self.path, end, self.capacity, cfg.index_interval_bytes,
                             cfg.max_index_bytes)
        new.set_roll_policy(cfg.segment_bytes, cfg.segment_ms)
        self._set(self.segs + (new,))
        self._list_changed()
        if self.shared is not None:
            self.shared.rolled(new)
        self.metrics.rolls += 1
        self._rolled_bytes += old.size - self._active_bytes_at_open
        self._active_bytes_at_open = 0
        if self.flushed < end:
            self.flushed = end
            self._update_flush_at()
        self.write_recovery_point(end)
        return new

    # -- flushing and the recovery point --------------------------------------------------
    def flush(self, seg: Segment, target: int) -> int:
        """fsync ``seg`` (the active segment when the end offset was ``target``) with its
        indexes, then move the recovery point to ``target``; the flushed offset.
        ``OSError`` or ``ValueError`` propagate (the caller poisons the log)."""
        if target > self.flushed:
            # in flight: a compaction that retires this (rolled meanwhile) segment
            # must not close its descriptors under the fsync
            self.enter()
            t0 = time.perf_counter()
            try:
                seg.flush()
            finally:
                self.leave()
            m = self.metrics
            m.fsync.observe(time.perf_counter() - t0)
            m.flushes += 1
            # the checkpoint is what lets recovery tell flushed data (whose damage
            # is corruption) from a torn tail: it moves with every flush (R6); with
            # several writers it is theirs, moved under their lock
            if self.shared is not None:
                with self.lock:
                    self._flushed_to(target)
            else:
                self._flushed_to(target)
        return self.flushed

    def _flushed_to(self, target: int) -> None:
        self.write_recovery_point(target)
        if target > self.flushed:
            self.flushed = target
            self.changes += 1
            self._update_flush_at()

    def _list_changed(self) -> None:
        self.list_gen += 1
        self.changes += 1

    def files_changed(self) -> None:
        """Segment files changed on disk behind the list (lock held): the writers
        re-list them."""
        self._list_changed()

    def follow_flushed(self, flushed: int) -> None:
        """Another writer fsynced up to ``flushed`` and checkpointed it."""
        self._checkpointed = max(self._checkpointed, flushed)
        if flushed > self.flushed:
            self.flushed = flushed
            self._update_flush_at()

    def count_from_here(self) -> None:
        """A writer joining others: its counters start at the log as it found it."""
        self._end_at_open = self.end
        self._active_bytes_at_open = self.active.size
        self._rolled_bytes = 0

    def follow_list(self, segs: list[Segment], gone: list[Segment]) -> None:
        """The segment list another writer made (``_writers.follow``), lock held."""
        if self.segs and segs[-1] is not self.segs[-1]:
            self._rolled_bytes += max(0, self.segs[-1].size - self._active_bytes_at_open)
            self._active_bytes_at_open = 0
        self._set(tuple(segs))
        self._retire(gone, "replaced by compaction, deleted by retention or sealed by another "
                           "writer")

    def _update_flush_at(self) -> None:
        every = self.config.flush_messages
        if every is not None:
            self.flush_at = self.flushed + every - 1

    def write_recovery_point(self, offset: int) -> None:
        """Durably record that every offset below ``offset`` was fsynced (monotonic)."""
        with self._ckpt_lock:       # innermost lock: flush and roll both get here
            if offset <= self._checkpointed:
                return
            write_checkpoint(self.path, RECOVERY_POINT, offset)
            self._checkpointed = offset

    def appended(self) -> tuple[int, int]:
        """Messages and bytes a writer appended since it opened (a reader: 0, 0)."""
        if self.readonly:
            return 0, 0
        active = self.segs[-1].size if self.segs else 0
        return (max(0, self.end - self._end_at_open),
                self._rolled_bytes + active - self._active_bytes_at_open)

    # -- tailing ------------------------------------------------------------------------
    def notify(self) -> None:
        """Wake ``wait_for`` callers (after the append lock is released)."""
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, offset: int, deadline: float | None) -> bool:
        """A writer's ``Log.wait``: block until ``end > offset`` (True) or the
        ``time.monotonic()`` ``deadline`` (False); ``closed_error()`` once closed."""
        with self._cond:
            self.waiters += 1
            try:
                waited = False
                while self.end <= offset:
                    self.check_readable()
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._cond.wait(None if left is None else min(left, threading.TIMEOUT_MAX))
                    waited = True
                if waited:
                    self.metrics.wait_wakeups += 1
                return True
            finally:
                self.waiters -= 1

    def drop_prefix(self, n: int, new_start: int) -> tuple[Segment, ...]:
        """Remove the ``n`` oldest segments (retention; the new start offset is already
        checkpointed) and retire them; the removed segments."""
        with self.lock:   # appends only add segments at the end: the prefix is ours
            doomed = self.segs[:n]
            self.start = max(self.start, new_start)
            self._set(self.segs[n:])
            self._list_changed()
        # readers of this process re-find their place; the files close once no read
        # is in flight (readers in other processes are what a delayed delete is for)
        self._retire(doomed, "deleted by retention")
        return doomed

    def replace(self, old: list[Segment], new: Segment) -> None:
        """Swap compaction's ``new`` segment in for the consecutive ``old`` ones
        (Kafka's ``replaceSegments``); the files were swapped on disk already."""
        bases = {s.base_offset for s in old}
        with self.lock:
            # by base offset, not identity: with several writers, taking the lock may
            # have re-listed the files, which the swap on disk already changed
            cur = self.segs
            i = next(k for k, s in enumerate(cur) if s.base_offset == old[0].base_offset)
            j = i
            while j < len(cur) and cur[j].base_offset in bases:
                j += 1
            self._set(cur[:i] + (new,) + cur[j:])
            self._list_changed()
        self._retire(list(old) + [s for s in cur[i:j] if s not in old],
                     "replaced by compaction")

    # -- a readonly reader's view of another process's writer ---------------------------
    def raise_damage(self) -> None:
        """A reader at the visible end: raise damage found there, if any."""
        if self.readonly and self.segs and self.segs[-1].corruption is not None:
            damage = self.segs[-1].corruption
            if damage is not self._reported_damage:     # counted once, however often raised
                self._reported_damage = damage
                self.metrics.corrupt_batches += 1
            raise damage

    def refresh(self, force: bool = False) -> None:
        """Pick up new data and new or deleted segments written by another process."""
        if self.closed or not self.follows:
            return
        if self.shared is not None:
            self.shared.refresh(force)
            return
        with self._refresh_lock:
            self._refresh_locked(force)

    def _refresh_locked(self, force: bool) -> None:
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except FileNotFoundError:
            raise LogClosedError(f"log directory {self.path} is gone") from None
        segs = self.segs
        # an unchanged mtime proves nothing while the listing is within the clock's
        # granularity of it (coarse on some file systems: 1 s on HFS+, 2 s on FAT):
        # a change in the same tick leaves the same mtime, so look again
        if (force or mtime != self._dir_mtime or not segs
                or self._listed_at - mtime < _RACY_NS):
            self._dir_mtime = mtime
            self._listed_at = time.time_ns()
            new, gone, closers = _live.relist(self.path, segs, self.config.max_index_bytes)
            for close in closers:
                self._dispose(close)
            self._set(tuple(new))
            self._retire(gone, "replaced by compaction or deleted by retention")
            start = read_checkpoint(self.path, LOG_START)
            self.start = max(start or 0, new[0].base_offset if new else 0)
        if self.segs:
            last = self.segs[-1]
            try:
                _live.refresh_live(last)
            except FileNotFoundError:
                return
            self.end = last.next_offset if last.next_offset is not None else last.base_offset

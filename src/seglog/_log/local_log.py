"""``LocalLog``: a log's segment list and its state, as Kafka's ``LocalLog`` is under
``UnifiedLog``.

A writer's: it owns the tuple of segments, the start and end offsets, the recovery
point, the append lock, rolling, the changes retention and compaction make to the
list, and (through its ``_log.inflight.InFlight``) the lifetime of segments that leave
the list. Its fields are private: they change only through its own methods. A
readonly reader's list is ``_log.live.LiveLog``. The read path over it is
``_log.reads``; policy (flushing, poisoning, locking the directory, retention and
compaction, tailing) is the ``Log``'s, which holds a ``LocalLog``.

A writer's mode is chosen once, at construction: one writer process (a
``threading.Lock``), or one of several (the lock, then the other processes' through
``_shared.writers.WritersFile``, this writer's handle on the shared header). Every change
goes through the same three steps: ``_begin`` takes the append lock and brings the
view up to date (with several writers: what the others published, following the
header, repairing after a writer that died holding the lock), ``_commit`` publishes
what changed and lets go, ``_abort`` lets go after a failure inside a write (with
several writers the holder stays in the header, so the next writer repairs). No
decision is taken on a view that was not refreshed under the lock: when the lock
cannot be had in ``lock_timeout_ms``, ``LogLockedError``, and nothing changed.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Protocol, Sequence

from .. import recovery
from .._runtime.files import LOG_START, read_checkpoint, write_checkpoint
from .flush_marks import FlushMarks
from .append_line import AppendLine, Batches
from .close_gate import CloseGate
from .end_watch import EndWatch
from .inflight import InFlight
from .._shared.mode import SharedMode
from .metrics import AppendCounts, Metrics
from .._shared.writers import (Shared, WritersFile, adopt, follow, remove_unwritten, rolling_cut,
                               stray_segments)
from ..config import LogConfig
from .._codec.format import LENGTH_END, MAGIC, ONE_PREFIX as _ONE_PREFIX
from ..errors import LogClosedError, LogLockedError, SeglogError, StorageError, storage_error
from ..segment import ActiveSegment, ActiveSettings, LogSegments, Segment, WriterState

# what a refused call did not do, said by its LogLockedError
_NOT_FLUSHED = ("the flush did not happen: what was appended is written (readable, safe "
                "from a crash of this process), not yet safe from power loss; flush again")
_NOT_CLOSED = "the log is still open"
_NOT_DELETED = "nothing was deleted"
_NOT_COMPACTED = "nothing was compacted"
_NOT_SWAPPED = ("the compacted files are in place on disk; this writer's list follows "
                "them at its next append")


class ModeLock(Protocol):
    """The directory's mode lock a writer holds (``_log.opening.DirLock``): ``alone`` is
    True if no other writer holds it (one of several then holds it alone, else it
    has let go of it), ``release`` lets go of it."""

    def alone(self) -> bool: ...
    def release(self) -> None: ...


class LocalLog:
    """A writer's segments of one log directory and their state (see the module
    docstring), built from the loader's result (``segments``, the last one active),
    with ``tail`` when it is one of several writers (then ``attach`` follows the
    others before first use, and an empty ``segments`` is filled from the header).
    A readonly reader's list is ``_log.live.LiveLog``."""

    # what the read path asks of a list of segments (``_log.reads``)
    readonly = False
    follows = False       # nobody else changes this writer's files (several writers
    #                       read through a LiveLog)

    def __init__(self, path: str, config: LogConfig, segments: Sequence[Segment] = (),
                 start: int = 0, end: int = 0, recovery_point: int = -1, *,
                 active: ActiveSegment | None = None,
                 writers: WritersFile | None = None) -> None:
        self.path = path
        self.config = config
        # counters every layer of this log adds to (``Log.metrics()`` shows them)
        self.metrics = Metrics()
        # what each active segment is made with: its file's length, its roll policy
        self._settings = ActiveSettings.of(config)
        self._segs = LogSegments()
        self._reads = InFlight(self.closed_error, lambda: self._segs)
        self._start = start
        self._end = end
        self._closed = False
        self._failed: BaseException | None = None     # an I/O error poisoned the writer
        self._writable = True                          # False once closed or poisoned
        # the append lock: appends, rolls and every change of the segment list; with
        # several writers, this process's threads', then the other processes' (the
        # writers' file's flock, through ``_w``, this writer's handle on the header)
        self._lock = threading.Lock()
        self._w = writers
        self._bind_mode()
        # appends of threads that found the lock taken, appended by its holder
        self._line = AppendLine()
        # bumped by every change of the segment list (``_list_gen``) and of the start
        # or flushed offset (``_changes``); with several writers, whether it must
        # follow the files afresh at its next lock (``_relist``)
        self._list_gen = 0
        self._changes = 0
        self._relist = False
        self._pid = os.getpid()
        self._forked_from: int | None = None
        # what survives power loss, and when the next append flushes
        self._marks = FlushMarks(path, end, recovery_point, config.flush_messages)
        # tailing: ``Log.wait`` callers of this process (the append path notifies them)
        self._watch = EndWatch()
        self._counts = AppendCounts(end)
        self._batches = 0          # batches appended since open (under the append lock)
        self._gate = CloseGate()   # shut by a close under way
        if segments:
            assert active is not None
            self._set(LogSegments(segments), active)
            self._reads.found(self._segs[:-1])
            self._counts.restart(end, self._active.size)
            self._watch_reservations(self._active)

    def _bind_mode(self) -> None:
        """The three steps of every change, chosen once for the writer's mode."""
        if self._w is None:
            lock = self._lock
            self._begin: Callable[[bool], bool] = lock.acquire
            self._commit: Callable[[], None] = lock.release
            self._abort: Callable[[], None] = lock.release
        else:
            self._shared = SharedMode(self._lock, self._w, self.closed_error, self._fail_line,
                                      self._follow)
            self._begin = self._shared.enter
            self._commit = self._commit_shared
            self._abort = self._abort_shared

    # the writer's role of segs[-1] (its appends, its roll, its seal): set whenever the
    # list is not empty (it is never empty once the writer is attached)
    _active: ActiveSegment

    def _set(self, segs: LogSegments, active: ActiveSegment | None = None) -> None:
        """The list from now on; ``active``: the role of its new last segment (a roll,
        another writer's list; None: the last one did not change)."""
        if active is not None:
            self._active = active
        assert not segs or segs[-1] is self._active.segment
        self._segs = segs
        self._reads.watch(segs)

    def _watch_reservations(self, seg: ActiveSegment) -> None:
        """With several writers, the active segment tells the header each reservation
        of disk blocks (the bound of what a writer that died may have left)."""
        if self._w is not None:
            seg.watch_reservations(self._w.reserve)

    # -- what a reader sees -------------------------------------------------------------
    @property
    def start(self) -> int:
        """The first offset in the log as this object last saw it."""
        return self._start

    @property
    def end(self) -> int:
        """The next offset to assign as this object last saw it."""
        return self._end

    @property
    def segs(self) -> LogSegments:
        """The segments as this object last saw them (a tuple, replaced whole)."""
        return self._segs

    @property
    def active_base(self) -> int:
        """The active (last) segment's base offset; -1 with no segment."""
        return self._segs[-1].base_offset if self._segs else -1

    # a writer's own list is current: what it last saw is what is there (a readonly
    # reader's ``LiveLog`` looks again for these)
    start_offset, end_offset, segments = start, end, segs

    @property
    def flushed_offset(self) -> int:
        """Every offset below this survives power loss (the writers' shared one, read
        from the header without the append lock)."""
        w = self._w
        if w is not None and not self._closed:
            try:
                return max(self._marks.flushed, w.flushed_now())
            except ValueError:
                pass        # a close in another thread unmapped the header meanwhile
        return self._marks.flushed

    @property
    def flush_at(self) -> int:
        """An append at or past this offset flushes (``flush_messages``)."""
        return self._marks.flush_at

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def closing(self) -> bool:
        """True once ``close`` had the append lock and refuses new reads."""
        return self._reads.stopped

    @property
    def failed(self) -> BaseException | None:
        """The I/O error that poisoned the writer, if any."""
        return self._failed

    # -- open, closed, poisoned, forked -----------------------------------------------
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
        if self._closed:
            raise self.closed_error()

    def check_writable(self) -> None:
        """Raise what an append would raise now: ``LogClosedError``, ``ReadOnlyError``,
        or ``StorageError`` after an I/O error poisoned the log."""
        if self._writable:
            return
        failed = self._failed
        if self._closed or failed is None:     # closed, or a close is under way
            raise self.closed_error()
        raise storage_error(failed, f"log {self.path} refuses writes after an I/O error: "
                                    f"{failed}; reopen it") from failed

    def poison(self, e: BaseException) -> None:
        """An I/O error of a write: every later write is refused (``check_writable``)."""
        self._failed = e
        self._writable = False

    def _begin_writing(self, what: str) -> None:
        """Take the append lock for a change other than an append, on a refreshed view
        (``LogLockedError`` naming ``what`` was not done, after ``lock_timeout_ms``
        with several writers); refused (lock released) if the log is not writable."""
        self._gate.wait()
        if self._w is None:
            self._lock.acquire()
        else:
            self._shared.enter(True, what)
        if not self._writable:
            self._done_writing()
            self.check_writable()

    # -- appending (the hot path: one call each from ``Log``) ---------------------------
    def append_one(self, ts: int, check: int, body: bytes) -> int:
        """Append one short keyless record (``ActiveSegment.append_one``'s arguments, the
        offset aside), rolling when the active segment refuses it; its offset. An
        ``OSError`` propagates (the caller poisons the log).

        Threads that find the append lock taken do not queue on it (each release
        would wake one, a system call and a context switch an append: a convoy):
        they leave their records in line, and the holder appends them before it lets
        go (``_serve_line``), each call still atomic and in its thread's order."""
        if not self._begin(False):
            # the line's form of the record: the one-record batch ``append_one`` makes
            size = _ONE_PREFIX.size + len(body)
            data = _ONE_PREFIX.pack(0, size - LENGTH_END, MAGIC, check) + body
            return self._wait_in_line([(data, 1, ts, size)], False).start
        if not self._writable:
            self._done_writing()
            self.check_writable()
        try:
            off = self._end
            seg = self._active
            if seg.append_one(off, ts, check, body) < 0:
                self._roll(seg).append_one(off, ts, check, body)
            self._end = off + 1
            self._batches += 1
        except BaseException:
            self._abort_writing()
            raise
        self._commit()
        if self._line:
            self._serve_line()
        if self._watch.waiting:
            self.notify()
        return off

    def append_encoded(self, batches: Batches, atomic: bool = False) -> range:
        """Append encoded batches (``(data, records, largest timestamp, bytes)``), each
        atomically or (``atomic``) all as one (``ActiveSegment.append_group``), rolling as
        needed; the range of their offsets. An ``OSError`` propagates (the caller
        poisons the log); batches copied before it stay."""
        if not self._begin(False):
            return self._wait_in_line(batches, atomic)
        return self._append_holding(batches, atomic)

    def _append_holding(self, batches: Batches, atomic: bool) -> range:
        """``append_encoded`` with the append lock taken: appended, the lock let go."""
        if not self._writable:
            self._done_writing()
            self.check_writable()
        try:
            got = self._put(batches, atomic)
        except BaseException:
            self._abort_writing()
            raise
        self._done_writing()
        if self._watch.waiting:
            self.notify()
        return got

    def _put(self, batches: Batches, atomic: bool) -> range:
        """(lock held) Copy ``batches`` in after the end, rolling as needed; their
        offsets. The end moves past each batch as it lands (past all, ``atomic``)."""
        first = off = self._end
        if atomic:
            if batches:
                seg = self._active
                if seg.append_group(batches, off) < 0:
                    self._roll(seg).append_group(batches, off)
                self._end = off = off + sum(b[1] for b in batches)
        else:
            for data, n, max_ts, size in batches:
                seg = self._active
                if seg.append(data, off, off + n, max_ts, size) < 0:
                    self._roll(seg).append(data, off, off + n, max_ts, size)
                off += n
                self._end = off
        self._batches += len(batches)
        return range(first, off)

    def _wait_in_line(self, batches: Batches, atomic: bool) -> range:
        """Leave ``batches`` for the holder of the append lock to append, and wait; if
        it hands them back, append them here (taking the lock, waiting for it)."""
        line = self._line
        item = line.join(batches, atomic)
        # the holder may have let go since this thread found the lock taken: then
        # nobody would serve the line but this thread
        self._serve_line()
        if line.wait(item):
            return item.result
        self._begin(True)
        return self._append_holding(batches, atomic)

    def _serve_line(self) -> None:
        """(with the append lock let go) Take it again if it is free, and append what
        threads left in line, each as its own call would have: atomically, in order;
        they return when published. A failure is the failing call's; the calls after
        it are handed back to their threads, as are all when the log refuses writes
        (each then raises what it would have). If the lock cannot be had (with
        several writers, another holds it past ``lock_timeout_ms``), the calls in line
        fail as theirs would have."""
        line = self._line
        while line:
            try:
                if not self._begin(False):
                    return           # another thread holds the lock: it serves them
            except BaseException as e:
                self._fail_line(e)   # (with several writers, done already)
                return
            if not self._writable:
                self._commit()
                line.hand_back()
                return
            served, ok = line.run(self._put)
            if ok:
                self._commit()
            else:
                self._abort()
            line.release(served)
            if not ok:
                line.hand_back()
                return
            if self._watch.waiting:
                self.notify()

    def _abort_writing(self) -> None:
        """Step 3 for a failed change: let go (``_abort``), then serve the appends that
        waited in line meanwhile."""
        self._abort()
        if self._line:
            self._serve_line()

    def _done_writing(self) -> None:
        """Step 2 for a change other than an append: publish, let go, and serve the
        appends that waited in line meanwhile."""
        self._commit()
        if self._line:
            self._serve_line()

    def next_offset(self) -> int:
        """The offset the next append gets, on a refreshed view (``append_batch([])``);
        what an append would raise if the log is not writable."""
        self._begin_writing("nothing was written")
        end = self._end
        self._done_writing()
        return end

    def _roll(self, old: ActiveSegment) -> ActiveSegment:
        """Seal the active segment ``old`` and start a new one at the end offset (append
        lock held; an empty segment never rolls: ``old`` again). The sealed segment
        was fsynced, so everything before the new base offset is durable: it becomes
        the recovery point. With several writers the new list is published at once,
        so the header always names the active segment. An ``OSError`` propagates."""
        if not old.size:
            return old
        end = self._end
        assert old.next_offset == end
        w = self._w
        if w is not None:
            w.rolling(old.base_offset)
        old.seal()
        self._reads.sealed(old.segment)   # sealed, its files open: closed when idle
        new = ActiveSegment.create(self.path, end, self._settings)
        self._watch_reservations(new)
        self._set(self._segs.added(new.segment), new)
        self._list_changed()
        self._counts.rolled(old.size)
        self._marks.sealed_through(end)
        if w is not None:
            w.rolled()
            self._publish()
        self.metrics.rolled()
        self._marks.checkpoint(end)
        return new

    # -- several writers: following the others, publishing ------------------------------
    def _fail_line(self, e: BaseException) -> None:
        """The appends waiting in line fail as the holder's call failed before it
        wrote anything (the lock could not be had, the log is closed)."""
        if isinstance(e, LogLockedError) and self._w is not None:
            e = self._w.timed_out()         # said of an append: nothing was written
        self._line.fail(e)

    def _follow(self, moved: WriterState | Shared) -> None:
        """(lock held) Take what the other writers published since this writer last
        looked; after a writer that died holding the lock, repair what it left. A
        failure lets go of the lock for the next writer's repair and makes this writer
        follow the files afresh at its next lock (an ``OSError`` is a
        ``StorageError`` naming the log)."""
        try:
            if type(moved) is WriterState:   # only appends: the active segment's tail
                self._active.follow_tail(moved)
                self._end = moved.next_offset
                return
            self._follow_state(moved)    # type: ignore[arg-type]
        except BaseException as e:
            self._abort_shared()
            self._line.hand_back()     # each tries again itself
            if isinstance(e, OSError) and not isinstance(e, SeglogError):
                raise StorageError(e.errno, f"following the other writers of {self.path} "
                                            f"failed: {e}") from e
            raise

    def _follow_state(self, sh: Shared) -> None:
        w = self._w
        assert w is not None
        # measured before anything maps the active segment (a dead roller cut it back)
        cut = rolling_cut(self.path, sh) if sh.holder else None
        if self._relist or w.list_moved(sh) or not self._segs:
            new, gone, active = follow(self.path, self._segs, self._active_or_none(), sh,
                                       self._settings if cut is None
                                       else self._settings._replace(capacity=cut))
            self._take_list(new, gone, active)
            self._relist = False
        else:
            self._active.reload(sh.state)
        self._start = max(self._start, sh.start)
        self._end = sh.state.next_offset
        self._marks.followed(sh.flushed)
        w.followed(sh)
        self._mark_published()
        if sh.holder:
            self._repair(sh, cut)

    def _active_or_none(self) -> ActiveSegment | None:
        return self._active if self._segs else None

    def _take_list(self, segs: list[Segment], gone: list[Segment],
                   active: ActiveSegment) -> None:
        """The segment list another writer made (``_shared.writers.follow``), lock held;
        ``active``: its last one's writer role."""
        old = self._active_or_none()
        if old is not None and active is not old:
            self._counts.rolled(old.size)
        self._set(LogSegments(segs), active)
        self._watch_reservations(active)
        self._reads.retire(gone, "replaced by compaction, deleted by retention or sealed "
                                 "by another writer")

    def _repair(self, sh: Shared, cut: int | None) -> None:
        """A writer died holding the lock (it never published what it did last), or
        failed inside a write; ``cut``: it died inside a roll (``rolling_cut``)."""
        seg = self._active
        if cut is not None:
            # it died inside a roll, after cutting the segment (and maybe its indexes)
            # back: this writer's maps of them are never touched again; the file is
            # mapped anew at the size it was cut to, the batches it had appended kept,
            # the roll finished. Never extended: a reader may have seen the segment
            # sealed with the next one after it (which is empty), and trusts its size
            # from then on; so no writer may append to it again, whenever this
            # repair dies (the file stays cut back, or the next segment stays made)
            settings = self._settings._replace(capacity=cut)
            fresh = ActiveSegment(
                Segment(self.path, seg.base_offset, max_index_bytes=settings.max_index_bytes,
                        owner=True, index_interval_bytes=settings.index_interval_bytes),
                sh.state, settings)
            self._take_list([*self._segs[:-1], fresh.segment], [seg.segment], fresh)
            seg = fresh
            adopt(seg, cut)
        else:
            adopt(seg, min(max(sh.reserved, seg.size), self._settings.capacity))
        if seg.next_offset is not None:
            self._end = seg.next_offset
        for base in stray_segments(self.path, seg.base_offset):
            remove_unwritten(self.path, base)
        if cut is not None:
            self._roll(seg)
        # a retention pass that died between its checkpoint and its swap
        self._start = max(self._start, read_checkpoint(self.path, LOG_START) or 0)
        self._changes += 1

    def _commit_shared(self) -> None:
        """Step 2 with several writers: publish what changed, let go."""
        self._shared.commit(self._active, self._end, self._changes, self._list_gen,
                            self._start, self._marks.flushed)

    def _abort_shared(self) -> None:
        """Step 3 with several writers, after a failure inside a write or a roll: as
        after a death, nothing is published, the holder stays for the next writer's
        repair, and this writer follows the files afresh at its next lock."""
        self._relist = True
        self._shared.abort()

    def _publish(self) -> None:
        self._shared.publish(self._active, self._end, self._changes, self._list_gen,
                             self._start, self._marks.flushed)

    def _mark_published(self) -> None:
        self._shared.published(self._active, self._end, self._changes, self._list_gen)

    def attach(self, first: bool) -> None:
        """Opening one of several writers (the opener holds the append lock across
        processes): ``first``, the writer that recovered the files, starts a session
        and publishes; any other takes the header's view, repairing after a writer
        that died holding the lock."""
        w = self._w
        assert w is not None
        if first:
            w.begin()
            self._list_changed()
            self._publish()
            return
        self._follow_state(w.read())
        self._counts.restart(self._end, self._active.size)   # counted from the log found
        if self._shared.changes_since(self._changes):
            self._publish()
        w.unhold()

    def _relist_now(self) -> None:
        """(lock held, several writers) The segment list as the files and the header
        say it is, after files changed on disk behind it."""
        w = self._w
        assert w is not None
        sh = w.read()
        new, gone, active = follow(self.path, self._segs, self._active_or_none(), sh,
                                   self._settings)
        self._take_list(new, gone, active)
        self._list_changed()

    # -- maintenance: retention and compaction swap the list here ----------------------
    def expire(self, due: Callable[[Sequence[Segment]], int]) -> list[Segment]:
        """Retention's swap (Kafka's ``deleteOldSegments``), decided on the list as it
        is now: under the append lock (with several writers after following the
        others; ``LogLockedError`` after ``lock_timeout_ms``, nothing changed),
        ``due(segments)`` says how many of the oldest are due; segments wholly below
        the log start go with them; never the active one. The new log start is
        checkpointed durably, then the list drops everything through the last due
        segment's base offset. Returns the dropped segments, retired (their files are
        the caller's to delete)."""
        self._begin_writing(_NOT_DELETED)
        try:
            segs = self._segs
            n = due(segs)
            below = sum(1 for nxt in segs[1:] if nxt.base_offset <= self._start)
            n = min(max(n, below), len(segs) - 1)
            doomed: tuple[Segment, ...] = ()
            if n > 0:
                through, new_start = segs[n - 1].base_offset, segs[n].base_offset
                if new_start > self._start:
                    # durable before any file goes: a crash in between leaves segments
                    # below the start, which the next writer removes, never a start
                    # pointing at deleted data
                    write_checkpoint(self.path, LOG_START, new_start)
                    self._start = new_start
                kept, doomed = segs.split_through(through)
                self._set(kept)
                self._list_changed()
        except BaseException:
            self._abort_writing()
            raise
        self._done_writing()
        # readers of this process re-find their place; the files close once no read
        # is in flight (readers in other processes are what a delayed delete is for)
        self._reads.retire(doomed, "deleted by retention")
        return list(doomed)

    def sealed_now(self) -> tuple[tuple[Segment, ...], int]:
        """The sealed segments and the log start as they are now (compaction's input),
        taken under the append lock (``LogLockedError`` after ``lock_timeout_ms``)."""
        self._begin_writing(_NOT_COMPACTED)
        segs, start = self._segs[:-1], self._start
        self._done_writing()
        return segs, start

    def replace(self, old: list[Segment], new: Segment) -> None:
        """Swap compaction's ``new`` segment in for the consecutive ``old`` ones
        (Kafka's ``replaceSegments``), matched by base offset; the files were swapped
        on disk already. If the list no longer holds them as they were (another
        writer's list changed meanwhile), it follows the files instead."""
        bases = [s.base_offset for s in old]
        if self._w is None:
            self._lock.acquire()
        else:
            try:
                self._shared.enter(True, _NOT_SWAPPED)
            except BaseException:
                self._relist = True
                raise
        gone: list[Segment] = []
        try:
            swapped = self._segs.replaced(bases, new)
            if swapped is not None:
                self._set(swapped[0])
                gone = list(swapped[1])
                self._list_changed()
            elif self._w is not None:
                self._relist_now()
            else:
                raise StorageError(f"compaction of {self.path} replaced segments "
                                   f"{bases[0]}..{bases[-1]}, which the log no longer lists")
        except BaseException:
            self._abort_writing()
            raise
        self._done_writing()
        self._reads.retire(gone + [s for s in old if s not in gone], "replaced by compaction")

    def files_swapped(self, resolve: Callable[[], None]) -> None:
        """(several writers) ``resolve()`` finishes on disk what a dead writer's
        compaction left, under the append lock; the list then follows the files."""
        self._begin_writing(_NOT_COMPACTED)
        try:
            resolve()
            if self._w is not None:
                self._relist_now()
        except BaseException:
            self._abort_writing()
            raise
        self._done_writing()

    def freeze_open_files(self) -> None:
        """A compaction pass failed after swapping files on disk that the list still
        names as they were: close no idle file from now on (their descriptors hold the
        data the list describes; the next open finishes the swap)."""
        self._reads.freeze()

    # -- flushing and the recovery point --------------------------------------------------
    def flush(self, what: str = _NOT_FLUSHED) -> int:
        """fsync the active segment (as it is now: with several writers, every writer's
        appends are in it) with its indexes, outside the append lock, then move the
        recovery point; the flushed offset. ``LogLockedError`` (ending with ``what``)
        after ``lock_timeout_ms``; ``OSError``, ``ValueError`` propagate (to poison)."""
        self._begin_writing(what)
        target, seg = self._end, self._active
        self._done_writing()
        if target <= self._marks.flushed:
            return self._marks.flushed
        # in flight: a compaction or another writer's roll that retires this segment
        # must not close its descriptors under the fsync
        self.enter()
        t0 = time.perf_counter()
        try:
            seg.flush()
        finally:
            self.leave()
        self.metrics.flushed(time.perf_counter() - t0)
        # the checkpoint is what lets recovery tell flushed data (whose damage is
        # corruption) from a torn tail: it moves with every flush; with several
        # writers it is theirs, moved and published under their lock
        if self._w is None:
            self._flushed_to(target)
            return self._marks.flushed
        self._begin_writing(what)
        try:
            self._flushed_to(target)
        except BaseException:
            self._abort_writing()
            raise
        self._done_writing()
        return self._marks.flushed

    def _flushed_to(self, target: int) -> None:
        if self._marks.reached(target):
            self._changes += 1

    def _list_changed(self) -> None:
        self._list_gen += 1
        self._changes += 1

    def appended(self) -> tuple[int, int, int]:
        """Messages, bytes and batches this writer appended since it opened."""
        return (*self._counts.since_open(self._end, self._segs[-1].size if self._segs else 0),
                self._batches)

    # -- closing ------------------------------------------------------------------------
    def close(self, clean: bool, mode_lock: ModeLock) -> None:
        """Close. A writer takes the append lock first (with several writers,
        ``LogLockedError`` after ``lock_timeout_ms``, and the log stays open and
        working; other threads' changes meanwhile wait for the outcome: ``_log.close_gate``),
        then refuses new reads and waits for those in flight. ``clean``:
        the clean shutdown (seal the active segment, checkpoint, write the
        clean-shutdown marker; an ``OSError`` propagates); one of several writers does
        that only if it is the last (``mode_lock.alone()``), else it fsyncs what is
        appended and publishes the recovery point. Then every segment's files close,
        whatever happened, and ``mode_lock`` is released before the append lock (the
        next opener, under the append lock, finds the mode lock as this close left
        it). Not ``clean`` (after a failure): nothing is sealed; with several writers
        the holder stays for the next writer's repair. Idempotent."""
        if self._closed:
            return
        begin = self._begin
        with self._gate.shut(begin) as self._begin:
            try:
                self._close_locked(clean, mode_lock)
            finally:
                self._begin = begin

    def _close_locked(self, clean: bool, mode_lock: ModeLock) -> None:
        w = self._w
        if w is None:
            self._lock.acquire()
        else:
            self._shared.enter(True, _NOT_CLOSED)
        sealed = False
        try:
            # reads never take the append lock: waiting for them here cannot deadlock
            self._reads.stop()
            self._writable = False
            if w is None:
                if clean:
                    self._seal_clean()
                    sealed = True
            elif clean and mode_lock.alone():
                w.end()
                self._seal_clean()
                sealed = True
            elif clean:
                # one of several: what this writer appended (and every other's, in the
                # same file) survives power loss before it lets go
                self._active.flush()
                self._flushed_to(self._end)
        except BaseException:
            self._shut(mode_lock, keep=w is not None, release="repair")
            raise
        self._shut(mode_lock, keep=w is not None and not sealed,
                   release="publish" if clean and not sealed else
                   "plain" if clean else "repair")

    def _seal_clean(self) -> None:
        active = self._active
        active.seal()
        self._marks.closed_clean(self._end)
        recovery.write_marker(self.path, active, self._end)

    def _shut(self, mode_lock: ModeLock, keep: bool = False, release: str = "plain") -> None:
        """Closed from now on (lock held): with several writers, publish what changed
        (``release`` "publish"), or not ("plain": the session ended), or leave the
        holder for the next writer's repair ("repair"), and close the header, which
        lets go of the lock; close every file (``keep``: as they are, the active
        segment unsealed: another writer goes on with it)."""
        self._closed = True
        self._writable = False
        w = self._w
        try:
            if w is not None:
                try:
                    if release == "publish" and self._shared.changed(
                            self._active, self._end, self._changes):
                        self._publish()
                    if release != "repair" and not w.closed:
                        w.unhold()
                finally:
                    try:
                        mode_lock.release()
                    finally:
                        w.close()    # which lets go of the other processes' lock
            else:
                mode_lock.release()
        finally:
            try:
                for seg in self._segs:
                    try:
                        if keep:
                            seg.abandon()
                        else:
                            seg.close()     # sealed above, unless it failed
                    except OSError:
                        pass
                self._reads.bury()
            finally:
                self._lock.release()
            self.notify()
            if self._line:
                self._serve_line()          # hands them back: each is refused

    def abandon(self) -> None:
        """Drop every segment as a killed process would: no seal, no publish, the
        append lock across processes released (``testing.abandon``)."""
        if self._closed:
            return
        lock = self._lock if self._w is None else None
        if lock is not None:
            lock.acquire()
        self._closed = True
        self._writable = False
        self._reads.stop(wait=False)
        try:
            for seg in self._segs:
                seg.abandon()
            self._reads.bury()
            if self._w is not None:
                self._w.close()    # the kernel lets go of the other processes' lock
        finally:
            if lock is not None:
                lock.release()
        self.notify()
        if self._line:
            self._serve_line()

    def after_fork(self) -> None:
        """In a forked child: new locks (another thread of the parent may have held
        one at the fork), no reads in flight; a writer's copy is closed for good."""
        self._lock = threading.Lock()
        self._gate = CloseGate()
        self._bind_mode()
        self._marks.after_fork()
        self._watch.after_fork()
        self._reads.after_fork()
        self._reads.stop(wait=False)
        if self._w is not None:
            self._w.drop_copy()
        for seg in self._segs:
            seg.reset_locks()
        self._forked_from = self._pid
        self._pid = os.getpid()
        self._closed = True
        self._writable = False

    # -- reads in flight ---------------------------------------------------------------
    def enter(self) -> None:
        """Count a read in flight (``closed_error()`` once closing); ``leave`` after."""
        self._reads.enter()

    def leave(self) -> None:
        """The end of a read counted by ``enter``."""
        self._reads.leave()

    # -- tailing ------------------------------------------------------------------------
    def notify(self) -> None:
        """Wake ``wait_for`` callers (after the append lock is released)."""
        self._watch.notify()

    def wait_for(self, offset: int, deadline: float | None) -> bool:
        """A writer's ``Log.wait``: block until ``end > offset`` (True) or the
        ``time.monotonic()`` ``deadline`` (False); ``closed_error()`` once closed."""
        reached, waited = self._watch.wait(lambda: self._end > offset, self.check_readable,
                                           deadline)
        if reached and waited:
            self.metrics.woke()
        return reached

    @property
    def waiters(self) -> int:
        """``wait_for`` callers blocked now."""
        return self._watch.waiting

    def refresh(self, force: bool = False) -> None:
        """(the read path) A writer's own list is current: nothing to look at again (a
        readonly reader's ``LiveLog`` re-lists the files)."""

    def raise_damage(self) -> None:
        """(the read path, at the visible end) A writer's own data ends where it wrote:
        nothing to raise (a readonly reader's ``LiveLog`` raises damage found there)."""

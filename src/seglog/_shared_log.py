"""``SharedLock``: the append lock of a log several processes write (``multi_writer``).

It stands where an exclusive writer's ``threading.Lock`` stands (``LocalLog.lock``),
so the append path is the same code: entering takes this process's lock, then the
other writers' (the ``.writers`` file's flock, ``_writers.WritersFile``), and brings
the ``LocalLog`` up to the header when its counter moved: the new tail (one compare
and two ints when only appends happened), or the new segment list after a roll,
retention or compaction (``_writers.follow``). Leaving publishes what this writer
changed. A writer that died holding the lock is repaired after: the whole batches it
wrote are kept, a torn one is erased, a roll it left half done is finished.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable

from . import codec
from ._scan import Damage, walk
from ._files import LOG_START, SEGMENT_SUFFIXES, fsync_dir, read_checkpoint, remove, segment_path
from ._platform import LOCK_EX_NB as _EX_NB, LOCK_UN as _UN, flock as _flock
from ._writers import (CURRENT, HOLDER, Shared, WritersFile, follow,
                       stray_segments)
from .errors import CorruptRecordError, SeglogError, StorageError
from .local_log import LocalLog
from .segment import Segment

# a read waits this long at most for the other writers' lock (see ``refresh``)
READ_WAIT = 0.1
_exception = sys.exception


class SharedLock:
    """The append lock of ``local`` shared with the other writers through ``w``."""

    def __init__(self, local: LocalLog, w: WritersFile) -> None:
        self._t = threading.Lock()
        self._local = local
        self._w = w
        # the header as this writer last saw or published it
        self._cur = -1                  # the header's current word (counter, slot)
        self._version = 0
        self._gen = 0                   # the header's list generation
        self._local_gen = local.list_gen
        self._pub_end = local.end
        self._pub_marks = -1
        self._pub_changes = -1
        self._keep_holder = False       # closing after a failure: the next writer repairs
        self._exc: BaseException | None = None   # the exception being handled at acquire

    # -- the lock (the append path: one flock round trip, one compare, two packs) ----
    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock; ``LogLockedError`` once ``lock_timeout_ms`` passed, waiting for
        this process's other threads and the other writers together. ``timeout`` (s,
        >= 0): a reader's bound instead, returning False when it passes."""
        t, w = self._t, self._w
        left = None
        if not t.acquire(False):
            start = time.monotonic()
            if not t.acquire(timeout=w.timeout if timeout < 0 else timeout):
                if timeout >= 0:
                    return False
                raise w.timed_out()
            left = (w.timeout if timeout < 0 else timeout) - (time.monotonic() - start)
        elif timeout >= 0:
            left = timeout
        try:
            fd = w.fd
            if fd < 0:
                raise self._local.closed_error()
            try:
                _flock(fd, _EX_NB)
            except BlockingIOError:
                if not w.lock(left, raising=timeout < 0):
                    t.release()
                    return False
            try:
                words = w.words
                cur, holder = words[CURRENT], words[HOLDER]
                if cur != self._cur or holder:
                    self._sync(cur, holder)
                words[HOLDER] = w.token
                self._exc = _exception()
            except OSError as e:
                _flock(fd, _UN)
                raise StorageError(e.errno, f"following the other writers of "
                                            f"{self._local.path} failed: {e}") from e
            except BaseException:
                _flock(fd, _UN)
                raise
        except BaseException:
            t.release()
            raise
        return True

    def release(self) -> None:
        w = self._w
        local = self._local
        try:
            if w.fd < 0:
                return
            try:
                e = _exception()
                if e is not None and e is not self._exc and _may_have_written(e):
                    # failed inside (a write, a roll): as after a death, the holder
                    # stays for the next writer's repair, nothing is published, and
                    # this writer follows the files afresh at its next lock
                    self._cur = self._gen = -1
                    self._exc = None
                    return
                self._exc = None
                if local.closed:
                    if not self._keep_holder:
                        w.unhold()
                    return
                seg = local.active
                if seg.marks != self._pub_marks or local.changes != self._pub_changes:
                    self._publish()
                elif local.end != self._pub_end:
                    self._cur = w.publish_tail(self._cur, seg.size, local.end)
                    self._pub_end = local.end
                w.words[HOLDER] = 0
            finally:
                _flock(w.fd, _UN)
                if local.closed:
                    w.close()
        finally:
            self._t.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    # -- following the header ------------------------------------------------------------
    def _sync(self, cur: int, holder: int) -> None:
        w = self._w
        local = self._local
        if not holder:
            version, size, nxt = w.fast(cur)
            if version == self._version:
                local.active.set_measured(size, nxt)
                local.end = self._pub_end = nxt
                self._cur = cur
                return
        sh = w.read()
        cut = self._rolling(sh) if holder else None
        self._apply(sh, False, cut)
        if holder:
            self._repair(sh, cut)

    def _apply(self, sh: Shared, force: bool, cut: int | None = None) -> None:
        """Take the header's view; ``cut``: the size of the active segment's file,
        which its dead holder cut back inside a roll (mapped at that size, never
        extended: readers may have seen it sealed, see ``_repair``)."""
        local = self._local
        cfg = local.config
        if force or sh.list_gen != self._gen or not local.segs:
            new, gone = follow(local.path, local.segs, sh,
                               local.capacity if cut is None else cut,
                               cfg.index_interval_bytes, cfg.max_index_bytes)
            local.follow_list(new, gone)
            local.active.set_roll_policy(cfg.segment_bytes, cfg.segment_ms)
            local.active.on_reserve = self._w.reserve
        else:
            local.active.reload(sh.state)
        local.start = max(local.start, sh.start)
        local.end = sh.state.next_offset
        local.follow_flushed(sh.flushed)
        self._cur, self._version, self._gen = sh.current, sh.version, sh.list_gen
        self._mark_published()

    def _mark_published(self) -> None:
        local = self._local
        self._local_gen = local.list_gen
        self._pub_end = local.end
        self._pub_marks = local.active.marks
        self._pub_changes = local.changes

    def _publish(self) -> None:
        local = self._local
        self._version += 1
        if local.list_gen != self._local_gen:
            self._gen += 1
        self._cur = self._w.publish(self._cur, self._version, self._gen, local.start,
                                    local.flushed, local.active.writer_state())
        self._mark_published()

    def _rolling(self, sh: Shared) -> int | None:
        """If the dead holder died inside a roll, the size of the header's active
        segment's file (it cut the file back, or made the next segment already),
        measured before anything maps it; else None."""
        local = self._local
        base = sh.state.base_offset
        try:
            size = os.stat(segment_path(local.path, base, ".log")).st_size
        except FileNotFoundError:
            return None             # ``follow`` says the active segment is missing
        if size < local.capacity or stray_segments(local.path, base):
            return size
        return None

    def _repair(self, sh: Shared, cut: int | None) -> None:
        """A writer died holding the lock (it never published what it did last);
        ``cut``: it died inside a roll (``_rolling``)."""
        local = self._local
        seg = local.active
        if cut is not None:
            # it died inside a roll, after cutting the segment (and maybe its indexes)
            # back: this writer's maps of them are never touched again; the file is
            # mapped anew at the size it was cut to, the batches it had appended kept,
            # the roll finished. Never extended: a reader may have seen the segment
            # sealed with the next one after it (which is empty), and trusts its size
            # from then on; so no writer may append to it again, whenever this
            # repair dies (the file stays cut back, or the next segment stays made)
            cfg = local.config
            fresh = Segment(local.path, seg.base_offset, max_index_bytes=cfg.max_index_bytes,
                            writer=True, index_interval_bytes=cfg.index_interval_bytes)
            fresh.activate(cut, sh.state)
            fresh.set_roll_policy(cfg.segment_bytes, cfg.segment_ms)
            local.follow_list(list(local.segs[:-1]) + [fresh], [seg])
            seg = fresh
            adopt(seg, cut)
        else:
            adopt(seg, min(max(self._w.reserved(), seg.size), local.capacity))
        local.end = seg.next_offset if seg.next_offset is not None else local.end
        for base in stray_segments(local.path, seg.base_offset):
            _remove_unwritten(local.path, base)
        if cut is not None:
            local.roll(seg)
        # a retention pass that died between its checkpoint and its swap
        local.start = max(local.start, read_checkpoint(local.path, LOG_START) or 0)
        local.changes += 1

    # -- what LocalLog and the opener call ----------------------------------------------
    def attach(self, first: bool) -> None:
        """Opening (the opener holds ``w``'s flock): ``first``, the writer that recovered
        the files, starts a session and publishes; any other takes the header's view,
        repairing after a writer that died holding the lock."""
        w = self._w
        if first:
            w.begin()
            # the counter goes on from the last session's (a writer of it may still
            # hold its last value)
            self._cur = int(w.words[CURRENT])
            self._version, self._gen = 1, 1
            self._local.active.on_reserve = w.reserve
            self._publish()
            w.unhold()                  # a dead holder of the last session's, if any
            return
        sh = w.read()
        cut = self._rolling(sh) if sh.holder else None
        self._apply(sh, True, cut)
        if sh.holder:
            self._repair(sh, cut)
        self._local.count_from_here()
        if self._local.changes != self._pub_changes:
            self._publish()
        w.unhold()

    def refresh(self, force: bool) -> None:
        """A reader of this writer's ``Log``: the other writers' appends and list changes
        (``force``: the files, after one vanished under a read). Waits for the lock
        at most ``READ_WAIT`` s, never raising for it: past that (a stopped writer holds
        it, so nothing new can be published meanwhile) the view stays as it was."""
        if not self.acquire(timeout=min(READ_WAIT, self._w.timeout)):
            return
        try:
            if force:
                self._apply(self._w.read(), True)
        finally:
            self.release()

    def close(self, clean: bool, alone: Callable[[], bool] | None) -> bool:
        """Closing (lock held): True if this is the last writer and closes the log
        cleanly (the caller then seals and writes the clean-shutdown marker, and the
        session ends); else this writer publishes what it did (after a failure it
        leaves that to the next writer's repair) and lets go of its files."""
        if clean and alone is not None and alone():
            self._w.end()
            return True
        if clean and (self._local.changes != self._pub_changes
                      or self._local.active.marks != self._pub_marks
                      or self._local.end != self._pub_end):
            self._publish()
        self._keep_holder = not clean
        return False

    def rolled(self, new: Segment) -> None:
        """This writer rolled (lock held): published at once, so the header always names
        the active segment (an append that rolls several times and dies leaves whole
        sealed segments, never unpublished ones); the new one reserves afresh."""
        new.on_reserve = self._w.reserve
        self._w.clear_reserved()
        self._publish()
        self._w.words[HOLDER] = self._w.token

    def abandoned(self) -> None:
        """``testing.abandon``: as a process killed outside an append."""
        self._keep_holder = False

    def after_fork(self) -> None:
        self._t = threading.Lock()
        self._w.drop_copy()


def adopt(seg: Segment, limit: int) -> int:
    """After a writer of the active ``seg`` died inside an append: keep the whole
    batches it wrote past ``seg.size`` that continue the log (readers may have seen
    them), appended again over themselves (the same bytes), and zero what follows up
    to ``limit`` (a torn batch). Returns the batches kept."""
    kept = 0
    try:
        for buf, p, _, hdr in walk(seg.fileno(), seg.size, limit, expect=seg.next_offset,
                                   check=True):
            n = codec.LENGTH_END + hdr[codec.H_LENGTH]
            if seg.append(buf[p:p + n], hdr[codec.H_BASE], codec.last_offset(hdr) + 1,
                          hdr[codec.H_MAX_TS]) < 0:
                break
            kept += 1
    except Damage:
        pass
    seg.erase_after(limit)
    return kept


def _may_have_written(e: BaseException) -> bool:
    """An exception out of the locked section that may leave bytes or a roll half done
    (an I/O error, an interrupt mid-copy): anything but a refusal before writing."""
    return not isinstance(e, SeglogError) or isinstance(e, StorageError)


def _remove_unwritten(directory: str, base: int) -> None:
    """Remove a segment a dead writer created inside a roll, once shown to hold no
    batch; anything else after the active segment is damage, never deleted."""
    path = segment_path(directory, base, ".log")
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        fd = -1
    if fd >= 0:
        try:
            if any(os.pread(fd, codec.HEADER_SIZE, 0)):
                raise CorruptRecordError(f"segment {base} after the active segment holds data",
                                         path, 0, base)
        finally:
            os.close(fd)
    for ext in SEGMENT_SUFFIXES:
        remove(segment_path(directory, base, ext))
    fsync_dir(directory)

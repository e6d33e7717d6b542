"""A readonly view of a log another process writes: its active segment grows under
the reader, new segments appear, retention and compaction remove or replace files.

Readers never map segment files and never write; they scan forward from what they
have seen, checking checksums, and re-list the directory when it changed.
``LiveLog`` is a readonly reader's list of segments (a ``readonly=True`` ``Log``'s,
and what one of several writers reads through: a read never waits for the append
lock); the functions below are its re-listing and the live segment's refresh.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

from .._codec import format as _format
from .._runtime import points as _points
from .._runtime.files import (LOG_START, RECOVERY_POINT, list_segments, read_checkpoint,
                              superseded_segments)
from .inflight import InFlight
from .metrics import Metrics
from .._storage import marker as _marker
from .._storage.scan import ScanResult, scan
from ..config import LogConfig
from ..errors import CorruptRecordError, LogClosedError, SeglogError
from ..recovery import continuing_batch_after, read_marker
from ..segment import LogSegments, Segment

_RACY_NS = 3_000_000_000  # a directory listing this close to its mtime is not trusted


class LiveLog:
    """A readonly reader's segments of the log in ``path``: empty until ``refresh``,
    which picks up what writers in any process appended, rolled, deleted or replaced.
    Its state changes only through ``refresh`` (and closing). ``log_id``: the id in
    the log's marker when it was opened (None: a log from before ids); a directory
    that no longer holds that log (deleted, or made again under the same name) is
    gone for this reader, never read on as if it were the same log."""

    def __init__(self, path: str, config: LogConfig, metrics: Metrics | None = None,
                 log_id: str | None = None) -> None:
        self.path = path
        self._id = log_id
        self.config = config
        self.metrics = metrics if metrics is not None else Metrics()
        self._segs = LogSegments()
        self._start = 0
        self._end = 0
        self._closed = False
        self._pid = os.getpid()
        self._reads = InFlight(self.closed_error, lambda: self._segs)
        self._lock = threading.Lock()       # one re-listing at a time
        self._dir_mtime = 0
        self._listed_at = 0
        self._reported_damage: BaseException | None = None

    # what the read path asks of a list of segments (``_log.reads``)
    readonly = True
    follows = True        # others change the files: look again before reading

    @property
    def start(self) -> int:
        """The first offset as this reader last saw it."""
        return self._start

    @property
    def end(self) -> int:
        """The end offset as this reader last saw it."""
        return self._end

    @property
    def segs(self) -> LogSegments:
        """The segments as this reader last saw them (a tuple, replaced whole)."""
        return self._segs

    @property
    def start_offset(self) -> int:
        """The first offset still in the log (looked at again first)."""
        self.refresh()
        return self._start

    @property
    def end_offset(self) -> int:
        """The next offset a writer assigns (looked at again first)."""
        self.refresh()
        return self._end

    @property
    def segments(self) -> LogSegments:
        """The segments, oldest first (looked at again first)."""
        self.refresh()
        return self._segs

    @property
    def flushed_offset(self) -> int:
        """Every offset below this survives power loss: the writers' recovery point."""
        return read_checkpoint(self.path, RECOVERY_POINT) or 0

    @property
    def closed(self) -> bool:
        return self._closed

    def closed_error(self) -> SeglogError:
        return LogClosedError(f"log {self.path} is closed")

    def check_readable(self) -> None:
        """``LogClosedError`` once closed."""
        if self._closed:
            raise self.closed_error()

    def enter(self) -> None:
        """Count a read in flight (``LogClosedError`` once closing); ``leave`` after."""
        self._reads.enter()

    def leave(self) -> None:
        self._reads.leave()

    def close(self) -> None:
        """Refuse new reads, wait for those in flight, close every file. Idempotent."""
        if self._closed:
            return
        self._reads.stop()
        with self._lock:
            self._closed = True
            for seg in self._segs:
                try:
                    seg.close()
                except OSError:
                    pass
            self._reads.bury()

    def after_fork(self) -> None:
        """In a forked child: new locks, no reads in flight (a reader goes on reading)."""
        self._lock = threading.Lock()
        self._reads.after_fork()
        self.metrics.after_fork()
        for seg in self._segs:
            seg.reset_locks()

    def raise_damage(self) -> None:
        """At the visible end: raise damage found there, if any (counted once)."""
        if self._segs and self._segs[-1].corruption is not None:
            damage = self._segs[-1].corruption
            if damage is not self._reported_damage:
                self._reported_damage = damage
                self.metrics.corrupt_batch()
            raise damage

    def refresh(self, force: bool = False) -> None:
        """Pick up new data and new or deleted segments written by another process
        (``force``: list the directory even if it seems unchanged)."""
        if self._closed:
            return
        _points.reach("reader.refresh")
        with self._lock:
            # again under the lock: a close that took it first closed every file, and
            # a refresh after it would open the last segment's again (for good)
            if not self._closed:
                self._refresh(force)

    def _relist(self, segs: tuple[Segment, ...]
                ) -> tuple[list[Segment], list[Segment], list[Callable[[], None]]]:
        """``relist``, again when a file it named went while it listed (retention or
        compaction in another process); ``LogClosedError`` when the directory went
        (the log or its topic was deleted)."""
        for attempt in range(3):
            try:
                return relist(self.path, segs, self.config.max_index_bytes)
            except FileNotFoundError:
                if not os.path.isdir(self.path):
                    raise LogClosedError(f"log directory {self.path} is gone") from None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _check_same_log(self) -> None:
        """At each listing: the directory still holds the log this reader opened (a
        log's marker never goes while the log lives; a topic deleted and made again
        puts another id there)."""
        if self._id is None:
            return
        try:
            m = _marker.read(self.path)
        except (OSError, SeglogError):
            m = None
        if m is None or m.get("id") != self._id:
            raise LogClosedError(f"log directory {self.path} is gone (deleted, or another "
                                 f"log made in its place)")

    def _refresh(self, force: bool) -> None:
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except FileNotFoundError:
            raise LogClosedError(f"log directory {self.path} is gone") from None
        segs = self._segs
        # an unchanged mtime proves nothing while the listing is within the clock's
        # granularity of it (coarse on some file systems: 1 s on HFS+, 2 s on FAT):
        # a change in the same tick leaves the same mtime, so look again
        if (force or mtime != self._dir_mtime or not segs
                or self._listed_at - mtime < _RACY_NS):
            self._dir_mtime = mtime
            self._listed_at = time.time_ns()
            self._check_same_log()
            new, gone, closers = self._relist(segs)
            for close in closers:
                self._reads.dispose(close)
            # the start first: a reader that sees the new list sees the start with it
            start = read_checkpoint(self.path, LOG_START)
            self._start = max(start or 0, new[0].base_offset if new else 0)
            self._segs = LogSegments(new)
            self._reads.watch(self._segs)
            self._reads.retire(gone, "replaced by compaction or deleted by retention")
        if self._segs:
            last = self._segs[-1]
            try:
                refresh_live(last)
            except FileNotFoundError:
                return
            self._end = last.next_offset if last.next_offset is not None else last.base_offset


def relist(directory: str, segs: tuple[Segment, ...], max_index_bytes: int
           ) -> tuple[list[Segment], list[Segment], list[Callable[[], None]]]:
    """The segment list of ``directory`` now, given the reader's ``segs``.

    Returns (the new list, the objects that left it, closers of index files that
    are no longer used). Objects whose files are unchanged are kept; a segment that
    gained a successor was sealed by its writer and is read as a file from now on.
    """
    names = os.listdir(directory)
    bases = list_segments(directory, names)
    gone = superseded_segments(directory, names, bases)
    if gone:
        bases = [b for b in bases if b not in gone]
    # segments wholly below the log start: a retention pass checkpointed the start
    # and its writer was killed or stopped before removing them (a writer's open does)
    start = read_checkpoint(directory, LOG_START)
    if start is not None:
        bases = bases[sum(1 for nxt in bases[1:] if nxt <= start):]
    known = {s.base_offset: s for s in segs}
    new = []
    for b in bases:
        s = known.get(b)
        if s is not None and s.retired:
            s = None
        if s is not None and not s.at_path():
            # compaction replaced it; or (a live one) a multi-writer that died inside a
            # roll had made it, and the next removed it and made it anew
            s = None
        if s is None:
            s = Segment(directory, b, max_index_bytes=max_index_bytes)
        new.append(s)
    closers: list[Callable[[], None]] = []
    for s in new[:-1]:
        if s.live:
            # it has a successor now, so its writer sealed it: finish it as a file
            refresh_live(s)
            closers.extend(s.end_live())
    if new and new[-1] is not (segs[-1] if segs else None):
        new[-1] = live_segment(new[-1], max_index_bytes)
    kept = set(map(id, new))
    return new, [s for s in segs if id(s) not in kept], closers


def live_segment(seg: Segment, max_index_bytes: int) -> Segment:
    """A reader's view of another process's active segment, sized by scanning.

    The scan starts at the last offset-index entry, so opening a reader does not
    read the whole segment.
    """
    live = Segment(seg.directory, seg.base_offset, size=0, next_offset=seg.base_offset,
                   max_index_bytes=max_index_bytes, live=True)
    try:
        off, pos = live.index.lookup(1 << 62)
        last_ts = live.time_index.last_entry()
        # the writer may be halfway through writing that entry (struct writes it field
        # by field): trust it only if a batch with that base offset starts there
        if pos and not batch_starts_at(live, pos, off):
            off, pos, last_ts = seg.base_offset, 0, None
    except FileNotFoundError:
        off, pos, last_ts = seg.base_offset, 0, None
    live.set_measured(pos, off, last_ts[0] if last_ts is not None else -1)
    return live


def batch_starts_at(seg: Segment, pos: int, base_offset: int) -> bool:
    """True if a batch header with ``base_offset`` and sane framing is at ``pos``."""
    hdr = _format.framed_header(os.pread(seg.fileno(), _format.HEADER_SIZE, pos))
    return hdr is not None and hdr.base_offset == base_offset


def _corruption_error(seg: Segment, res: ScanResult) -> CorruptRecordError:
    return CorruptRecordError(f"bad batch ({res.stop}) inside written data", seg.path,
                              res.end, res.next_offset)


def refresh_live(seg: Segment) -> None:
    """Advance a reader's view of a segment another process appends to.

    Scans forward from the known end, checking checksums: a batch caught half-written
    ends the visible data until the next refresh. Damage that cannot be a write
    in progress (valid data follows it, or the writer shut down cleanly past it)
    is recorded in ``seg.corruption`` and raised to whoever reads that far.
    """
    start = seg.size           # a live segment's, always measured
    file_size = os.fstat(seg.fileno()).st_size
    if file_size <= start:
        return
    if seg.corruption is None and not any(os.pread(seg.fileno(), _format.HEADER_SIZE, start)):
        # the writer's preallocated zeros: nothing new (a scan would stop there too,
        # after reading a whole chunk of them)
        return
    # a live segment's first batch starts at its base offset; checking that matters:
    # the writer stamps a batch's base offset (outside the checksum) as it copies it in,
    # so a reader can catch a whole batch whose offset still reads 0
    res = scan(seg, start, file_size, seg.next_offset if start else seg.base_offset,
               max_timestamp=seg.max_timestamp)
    if res.end > start:
        seg.set_measured(res.end, res.next_offset, res.max_timestamp)
        seg.mark_damage(None)
    elif seg.corruption is not None:
        return
    # "partial": a batch claiming bytes past the end of the file (a live file is
    # preallocated, so no write in progress does that): damage, if proven below
    if res.stop in ("checksum", "framing", "offsets", "partial"):
        marker = read_marker(seg.directory) or {}
        clean_past = (marker.get("active_base") == seg.base_offset
                      and isinstance(marker.get("active_size"), int)
                      and marker["active_size"] > res.end)
        if clean_past or continuing_batch_after(seg, res.end, file_size,
                                                res.next_offset) is not None:
            # a live writer may be finishing that batch: look again before saying so
            for delay in (0.0, 0.002, 0.02):
                time.sleep(delay)
                again = scan(seg, res.end, os.fstat(seg.fileno()).st_size, res.next_offset,
                             max_timestamp=res.max_timestamp)
                if again.end > res.end:
                    seg.set_measured(again.end, again.next_offset, again.max_timestamp)
                    return
            seg.mark_damage(_corruption_error(seg, res))

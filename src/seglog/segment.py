"""``Segment``: one ``.log`` file of whole batches plus its two indexes, in two roles.

A ``Segment`` is what a log's list and its readers hold: finding and reading
batches, its size, its files' lifetime. The ``ActiveSegment`` is the writer's role
of the last one: appending bytes and rolling by the limits it was made with, until
it seals. The mechanism only: policy (when to roll, flush or delete) lives in ``Log``.

Writing: the active segment's file is mapped read-write to its capacity
(``segment_bytes`` plus room for one largest batch); an append is a copy into the
page cache (no system call), so it survives a crash of the process the moment it
returns (rule R1). Disk blocks are reserved ahead of the write position with
``posix_fallocate``, which extends the file as it goes (its length follows its
reservation), so that a full disk is an ``OSError`` on a system call, never a SIGBUS
on a page fault. On roll and close the file is cut back to its data, so a clean
segment file holds exactly its batches.

Reading: always ``os.pread`` into bytes, never a mapping, in every process: a file
cut back under a mapping would raise SIGBUS in the reader (rule R8).
"""

from __future__ import annotations

import io
import mmap
import os
from bisect import bisect_right
from operator import attrgetter
from struct import Struct
from typing import Any, Callable, ContextManager, Iterator, NamedTuple, Sequence, cast

from ._codec import encode as _encode, format as _format
from ._views import notebook as _notebook
from ._storage import scan as _scan, segment_read as _segment_read
from ._runtime.files import fsync_dir, fsync_file, remove, segment_name
from ._codec.format import BIG_ENDIAN_HOST
from ._storage.segment_indexes import close_all, for_reading, replace_files, reserve_room
# SegmentGoneError is raised by the .log descriptor's holder, and known by Segment's name
from ._storage.segment_file import SegmentFile
from ._storage.segment_file import SegmentGoneError as SegmentGoneError
from .config import LogConfig
from .errors import CorruptRecordError
from .index import MAX_RELATIVE_OFFSET, OffsetIndex, TimeIndex, next_entry_position
from ._storage.writable_map import WritableMap

_OFFSET = _format.BASE_OFFSET
_LENGTH = _format.LENGTH
# native order and size: packed with one memcpy of 4 bytes, which compiles to a single
# store (a little-endian Struct packs byte by byte: a kill between bytes would tear it)
_NATIVE_U32 = Struct("I")
_PREFIX = _format.ONE_PREFIX
_MAGIC = _format.MAGIC
_PREFIX_SIZE = _PREFIX.size
NO_TIMESTAMP = -1
NEVER = _format.NEVER
# the largest offset - base offset a segment may hold (the index's 32-bit relative offsets)
_MAX_DELTA = MAX_RELATIVE_OFFSET


class WriterState(NamedTuple):
    """The writer's mutable tail of its active segment, as plain ints (a NamedTuple:
    built on every publish of several writers, at a third of a dataclass's cost):
    what a writer must know to go on appending where another left off. Equal states
    mean the same tail; ``ActiveSegment.writer_state()`` takes it, an ``ActiveSegment``
    is made at one, and ``ActiveSegment.reload`` sets it.

    ``size``: bytes of whole batches (the next write position); ``next_offset``: the
    offset after the last batch; ``index_entries`` / ``time_entries``: the valid
    entries of the offset and time index; ``next_index_pos``: the position from which
    the next batch gets an index entry; ``max_timestamp`` (-1: none) and the offset
    of its batch; ``first_timestamp``: the first batch's largest timestamp (-1: not
    known), which ``segment_ms`` counts from.
    """

    base_offset: int
    size: int
    next_offset: int
    index_entries: int
    time_entries: int
    next_index_pos: int
    max_timestamp: int
    max_ts_offset: int
    first_timestamp: int


class ActiveSettings(NamedTuple):
    """What an active segment is made with, derived once from the log's settings
    (``of``) and handed to every ``ActiveSegment`` made, so that no segment takes
    appends without its roll policy.

    ``capacity``: the length its file may reach and is mapped to (a full segment
    plus the largest batch and its framing, so an append that passes the roll check
    always fits; blocks are reserved as it grows, never further); ``segment_bytes``
    and ``segment_ms``: when appends roll (Kafka's conditions, see ``append_one``);
    ``index_interval_bytes`` and ``max_index_bytes``: its indexes' shape.
    """

    capacity: int
    segment_bytes: int
    segment_ms: int | None
    index_interval_bytes: int
    max_index_bytes: int

    @classmethod
    def of(cls, config: LogConfig) -> "ActiveSettings":
        """A log's active segments' settings (``config`` is validated)."""
        return cls(config.segment_bytes + config.max_message_bytes + 65536,
                   config.segment_bytes, config.segment_ms, config.index_interval_bytes,
                   config.max_index_bytes)


def _native_u32(v: int) -> int:
    """``v`` such that ``_NATIVE_U32`` stores it little-endian (the format's order)."""
    return int.from_bytes(v.to_bytes(4, "little"), "big") if BIG_ENDIAN_HOST else v


def _at_path(seg: Segment) -> bool:
    """Is the ``.log`` file at its path the one this object read? False once another
    took its place (compaction; while this object's descriptor was closed, even one
    given the same inode number) or none is there; True if it never opened one."""
    return seg._log.at_path()


def _close_if_unused(seg: Segment) -> bool:
    """Close the files of this sealed segment (idle in its log), unless a thread is
    using them now (a ``sendfile``, an index load: it holds their lock); then close
    nothing and return False, never waiting for it."""
    lock = seg._log.lock
    if not lock.acquire(blocking=False):
        return False
    try:
        seg._release_files()
    finally:
        lock.release()
    return True


class Segment:
    """One segment: ``<base>.log``, ``.index`` and ``.timeindex``; ``size`` (bytes of
    whole batches), ``next_offset`` (after the last batch; None until known),
    ``max_timestamp`` (-1 when empty). What every holder of a segment may do: read,
    find, measure, and (its log) ``flush``, ``retire``, ``close``, ``delete``. A reader
    of another process's active segment (``live``) follows it with ``set_measured``.
    Appending is another object's: the ``ActiveSegment`` a log makes of its last
    segment (``ActiveSegment.create`` / ``ActiveSegment(seg, state, settings)``),
    which this one reads its tail from while it is active."""

    def __init__(self, directory: str, base_offset: int, *, size: int | None = None,
                 next_offset: int | None = None, max_index_bytes: int = 10 << 20,
                 live: bool = False, owner: bool = False,
                 index_interval_bytes: int = 4096) -> None:
        self.directory = directory
        self.base_offset = base_offset
        stem = os.path.join(directory, segment_name(base_offset))
        self.path, self.index_path, self.timeindex_path = (stem + ".log", stem + ".index",
                                                           stem + ".timeindex")
        # _size and _max_ts are None until known (a reader measures lazily); while
        # this process appends, the tail is its ActiveSegment's (``_writer``)
        self._size: int = size  # type: ignore[assignment]
        self._next = next_offset
        self._max_index_bytes = max_index_bytes
        self._live = live          # another process may still append to it
        # the .log descriptor; its lock also guards the lazy index loads
        self._log = SegmentFile(self.path, f"segment {base_offset} of {directory}")
        self._index: OffsetIndex | None
        self._timeindex: TimeIndex | None
        self._index = self._timeindex = None
        self._max_ts: int = None  # type: ignore[assignment]
        self._interval = index_interval_bytes
        self._writer: ActiveSegment | None = None   # set while this process appends
        # opened by the directory's owner (its writer, the loader, the cleaner): a
        # damaged index is rebuilt on disk, where a reader rebuilds it in memory only
        self.owner = owner
        self.index_repairs = 0      # indexes found damaged and rebuilt
        self._checked = False       # the sealed indexes passed the full check once
        self.corruption: CorruptRecordError | None = None   # a reader's scan: not a torn tail

    # -- the two roles: made active, sealed (``ActiveSegment`` calls these) -------------
    def _activated(self, active: ActiveSegment, ix: OffsetIndex, tix: TimeIndex) -> None:
        """``active`` appends to this segment from now on, through ``ix`` and ``tix``."""
        self._index, self._timeindex = ix, tix
        self._live = False
        self._writer = active

    def _sealed(self, size: int, next_offset: int, max_timestamp: int) -> None:
        """Its writer sealed it at this tail: a plain segment from now on (the values
        first, so a reader in another thread sees the writer's or the same ones)."""
        self._size, self._next, self._max_ts = size, next_offset, max_timestamp
        self._writer = None

    def set_measured(self, size: int, next_offset: int | None,
                     max_timestamp: int | None = None) -> None:
        """What a scan found (the loader's, a live reader's): whole batches up to
        ``size``, the offset after them, their largest timestamp (None: unchanged)."""
        assert self._writer is None
        self._size = size
        self._next = next_offset
        if max_timestamp is not None:
            self._max_ts = max_timestamp

    def count_index_repairs(self, n: int) -> None:
        """``n`` more index files of this segment were found damaged and rebuilt (the
        loader checks an active segment's indexes itself)."""
        self.index_repairs += n

    def mark_damage(self, damage: CorruptRecordError | None) -> None:
        """A live reader's scan proved damage past ``size`` (None: no longer: data
        arrived past it); raised to whoever reads that far."""
        self.corruption = damage

    @property
    def live(self) -> bool:
        """True for a reader's view of a segment another process still appends to."""
        return self._live

    @property
    def retired(self) -> bool:
        """True once its log retired it (deleted, replaced, closed): use the log."""
        return self._log.gone is not None

    @property
    def opened(self) -> bool:
        """True once this object opened its ``.log`` file (``inode`` is known; it may
        be closed now, while idle)."""
        return self._log.identity is not None

    @property
    def inode(self) -> int:
        """The inode of the ``.log`` file this object reads (the one it first opened)."""
        return self._log.inode()

    def end_live(self) -> list[Callable[[], None]]:
        """Its writer sealed it: read it as a file now; the live views' closers."""
        with self._log.lock:
            self._live = False
            old = [ix for ix in (self._index, self._timeindex) if ix is not None]
            self._index = self._timeindex = None
        return [ix.close for ix in old]

    @property
    def is_active(self) -> bool:
        """True while this process appends to it."""
        w = self._writer
        return w is not None and w.mapped

    # -- properties ---------------------------------------------------------------
    @property
    def size(self) -> int:
        """Bytes of whole batches in the segment."""
        w = self._writer
        if w is not None:
            return w.size
        if self._size is None:
            # from the open descriptor, not the path: size and bytes then come from the
            # same file even if compaction swaps a new one in between
            self._size = os.fstat(self.fileno()).st_size
        return self._size

    @property
    def next_offset(self) -> int | None:
        """The offset after its last batch (None: not known yet)."""
        w = self._writer
        return w.next_offset if w is not None else self._next

    @property
    def max_timestamp(self) -> int:
        """Largest record timestamp in the segment, -1 if it has none."""
        w = self._writer
        if w is not None:
            return w.max_timestamp
        if self._max_ts is None:
            self._max_ts = _segment_read.largest_timestamp(self)
        return self._max_ts

    @property
    def index(self) -> OffsetIndex:
        """The offset index (opened, checked, on first use)."""
        ix = self._index
        return ix if ix is not None else self._indexes()[0]

    @property
    def time_index(self) -> TimeIndex:
        """The time index (opened, checked, on first use)."""
        tix = self._timeindex
        return tix if tix is not None else self._indexes()[1]

    def _indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        """Both indexes, loaded once even when threads ask at the same time
        (``_storage.segment_indexes.for_reading``)."""
        with self._log.lock:
            if self._index is None or self._timeindex is None:
                self._log.check_present()
                self._index, self._timeindex, repaired = for_reading(
                    self, self._max_index_bytes, self._interval, self._live, self._checked)
                self.index_repairs += repaired
                self._checked = not repaired and not self._live
                self._log.opened()
            assert self._index is not None and self._timeindex is not None
            return self._index, self._timeindex

    def watch(self, on_open: Callable[["Segment"], None]) -> None:
        """Call ``on_open(self)`` when its files are opened on use (after a close too)."""
        self._log.watch(lambda: on_open(self))

    def write_indexes(self, res: "_scan.ScanResult", final: bool) -> None:
        """Replace both index files by the entries of a scan (``final``: trimmed, as a
        sealed segment's), through temp files renamed in and a directory fsync; the
        index objects held are dropped (the next use opens the new files)."""
        assert self._writer is None
        replace_files(self, res, self._max_index_bytes, final)
        for ix in (self._index, self._timeindex):
            if ix is not None:
                ix.release()
        self._index = self._timeindex = None
        fsync_dir(self.directory)

    def fileno(self) -> int:
        """The ``.log`` descriptor (opened on use; ``SegmentGoneError`` once retired)."""
        return self._log.get().fileno()

    @property
    def file(self) -> io.FileIO:
        """The ``.log`` file, opened on first use (``SegmentGoneError`` once retired)."""
        return self._log.get()

    # -- its files: durability and lifetime -----------------------------------------
    def flush(self) -> None:
        """fsync data and indexes: recovery then trusts index entries below the
        recovery point and scans only the tail. Safe beside a seal in another thread
        (a flush outside the append lock of a segment a roll seals meanwhile): the
        files' lock keeps a trim from closing an index's descriptor under the fsync."""
        with self._log.lock:
            self._log.fsync()
            for ix in (self._index, self._timeindex):
                if ix is not None:
                    ix.flush()

    def close(self) -> None:
        """Release its files (an active segment's writer is dropped unsealed: seal it
        first, ``ActiveSegment.close``)."""
        self._release_files()

    def _release_files(self, trim: bool = True) -> None:
        with self._log.lock:
            w = self._writer
            if w is not None:
                w.unmap()
            close_all((self._index, self._timeindex), trim)
            self._index = self._timeindex = None
            self._log.close()

    def abandon(self) -> None:
        """Close everything without sealing, trimming or syncing (a simulated kill):
        unmapping loses nothing, the pages are in the cache."""
        self._release_files(trim=False)

    def retire(self, why: str, keep_files: bool = False) -> Callable[[], None]:
        """Leave the log: from now on uses raise ``SegmentGoneError`` (a reader between
        steps re-finds its place). Returns the closer of its files, run once no read
        is in flight (``keep_files``: as they are, another writer sealed them)."""
        self._log.retire(why)
        return self.abandon if keep_files else self._release_files

    def reset_locks(self) -> None:
        """In a forked child: new locks (the parent's threads may have held them)."""
        self._log.reset_lock()
        w = self._writer
        if w is not None:
            w.reset_lock()

    def sendfile(self, out: int, pos: int, count: int) -> int:
        """``os.sendfile`` from its file, which cannot be closed meanwhile."""
        return self._log.sendfile(out, pos, count)

    def delete(self) -> None:
        """Unlink the files (the caller retires the object and fsyncs the directory)."""
        for p in (self.path, self.index_path, self.timeindex_path):
            remove(p)

    # -- reading (``_storage.segment_read``): functions of the public surface above, bound
    # here as methods, so a read costs no extra call ----------------------------------
    pread = _segment_read.pread
    batches = _segment_read.batches
    first_header = _segment_read.first_header
    find_position = _segment_read.find_position
    read = _segment_read.read
    read_at = _segment_read.read_at
    at_path, close_if_unused = _at_path, _close_if_unused      # defined above the class

    __repr__ = _notebook.segment_repr
    _repr_html_ = _notebook.segment_html


# a batch this large goes in through the file, not the map (``_write_batch``): the
# copy runs without the interpreter lock, so threads sending to a Producer go on
# meanwhile, and no page of the map is faulted in, or again after an fsync made it
# clean (bench/bench_threads.py: a Producer's rounds, durable or not)
THROUGH_FILE = 64 << 10


class ActiveSegment:
    """The active role of one segment: its writable map, its roll limits (given at
    creation: ``ActiveSettings``) and its tail (``size``, ``next_offset``, the index
    positions and timestamps), changed only by its own appends, by ``reload`` /
    ``follow_tail`` (another writer of the same files moved it) and by ``seal``.
    Only its log holds it (``LocalLog``, the loader, the writers' repair); the
    segment it writes (``segment``) is what the log's list and its readers hold, and
    reads its tail from here until ``seal`` makes it a plain sealed segment.

    ``ActiveSegment.create`` makes a new segment; ``ActiveSegment(seg, state,
    settings)`` takes an existing one at ``state`` (its files hold what it says;
    ``next_index_pos`` -1: from the last index entry, by Kafka's rule), mapped to
    ``settings.capacity`` and rolling by its ``segment_bytes`` and ``segment_ms``:
    appends return -1 once the next batch would pass ``segment_bytes``, its timestamp
    is ``segment_ms`` past the segment's first, an offset would not fit the index's
    32-bit relative offset, or an index is full. An empty segment never rolls."""

    def __init__(self, seg: Segment, state: WriterState, settings: ActiveSettings) -> None:
        assert seg._writer is None and state.base_offset == seg.base_offset
        self.segment = seg
        self.base_offset = seg.base_offset
        self._file = seg._log
        self._interval = settings.index_interval_bytes
        self._roll_bytes, self._roll_ms = settings.segment_bytes, settings.segment_ms
        self._roll_size = self._roll_ts = self._roll_off = NEVER
        # bumped by appends that moved more than size and next offset (an index
        # entry, the largest or first timestamp: several writers then publish the
        # whole tail); _on_reserve: told each reservation's end before a write
        self.marks = 0
        self._on_reserve: Callable[[int], None] | None = None
        self.size = state.size
        self.next_offset = state.next_offset
        # _mm is _map.mm, cached for the appends (None once unmapped)
        self._map: WritableMap | None = WritableMap(
            self._file.open_for_writing().fileno(), state.size, settings.capacity,
            self._reserved)
        self._mm: mmap.mmap = cast(mmap.mmap, self._map.mm)
        self._alloc_end = state.size    # appends ending at or below need no _allocate()
        self._next_index_pos = 1 << 62
        self._max_ts = self._max_ts_offset = NO_TIMESTAMP
        self.first_timestamp: int | None = None
        ix: OffsetIndex | None = None
        tix: TimeIndex | None = None
        try:
            ix = self._index = OffsetIndex(seg.index_path, seg.base_offset,
                                           settings.max_index_bytes, writable=True,
                                           entries=state.index_entries)
            tix = self._timeindex = TimeIndex(seg.timeindex_path, seg.base_offset,
                                              settings.max_index_bytes, writable=True,
                                              entries=state.time_entries)
            self.reload(state)
        except BaseException:
            # the segment does not know them yet (its close would not reach them):
            # released here, untrimmed (another writer may be appending to the files)
            close_all((ix, tix), trim=False)
            self.unmap()
            raise
        seg._activated(self, ix, tix)

    @classmethod
    def create(cls, directory: str, base_offset: int, settings: ActiveSettings
               ) -> "ActiveSegment":
        """A new empty segment made with ``settings``, files and directory entry
        durable (R2, DURABILITY.md), active."""
        seg = Segment(directory, base_offset, size=0, next_offset=base_offset,
                      max_index_bytes=settings.max_index_bytes, owner=True,
                      index_interval_bytes=settings.index_interval_bytes)
        SegmentFile.create(seg.path, seg.index_path, seg.timeindex_path)
        try:
            active = cls(seg, WriterState(base_offset, 0, base_offset, 0, 0,
                                          settings.index_interval_bytes, NO_TIMESTAMP,
                                          base_offset, NO_TIMESTAMP), settings)
            seg.flush()
            fsync_dir(directory)
        except BaseException:
            seg.close()
            raise
        return active

    def reload(self, state: WriterState) -> None:
        """Take ``state`` as this active segment's tail (another writer of the same
        files moved it): size, offsets, timestamps, index entry counts."""
        assert state.base_offset == self.base_offset
        self._index.set_entries(state.index_entries)
        self._timeindex.set_entries(state.time_entries)
        self.size = state.size
        self.next_offset = state.next_offset
        # Kafka's rule: an entry for the first batch at least an interval past the last
        self._next_index_pos = (state.next_index_pos if state.next_index_pos >= 0 else
                                next_entry_position(self._index.last_entry()[1],
                                                    self._interval))
        self._max_ts = state.max_timestamp
        self._max_ts_offset = state.max_ts_offset
        self.first_timestamp = None if state.first_timestamp < 0 else state.first_timestamp
        self._set_roll_limits()

    def follow_tail(self, state: WriterState) -> None:
        """Another writer of this active segment appended, moving its tail to
        ``state``: its size and next offset, and (``reload``) the rest when an index
        entry, the largest timestamp or the first one moved (an index entry moves
        the next index position), or the segment was empty here (its first batch
        sets the roll limits, and may move none of those: a timestamp of -1)."""
        first = self.first_timestamp
        if (not self.size or state.next_index_pos != self._next_index_pos
                or state.max_timestamp != self._max_ts
                or state.first_timestamp != (NO_TIMESTAMP if first is None else first)):
            self.reload(state)
            return
        self.size = state.size
        self.next_offset = state.next_offset

    def writer_state(self) -> WriterState:
        """The tail now (``WriterState``)."""
        first = self.first_timestamp
        return WriterState(self.base_offset, self.size, self.next_offset, len(self._index),
                           len(self._timeindex), self._next_index_pos, self._max_ts,
                           self._max_ts_offset, NO_TIMESTAMP if first is None else first)

    @property
    def max_timestamp(self) -> int:
        """Largest record timestamp appended, -1 if none."""
        return self._max_ts

    @property
    def mapped(self) -> bool:
        """True until sealed or released: appends may go on."""
        return self._mm is not None

    def _reserved(self, end: int) -> None:
        reserve_room((self._index, self._timeindex), end, self._interval)
        if self._on_reserve is not None:
            self._on_reserve(end)

    def watch_reservations(self, on_reserve: Callable[[int], None]) -> None:
        """Call ``on_reserve(end)`` after each reservation of disk blocks up to ``end``,
        before anything below it is written (several writers record it in their
        header: the bound of what a writer that died may have left)."""
        self._on_reserve = on_reserve

    def erase_after(self, limit: int) -> None:
        """Zero the map from ``size`` to ``limit`` (a dead writer's torn batch)."""
        cast(WritableMap, self._map).zero(self.size, limit)

    def _set_roll_limits(self) -> None:
        # precomputed, so that an append compares three ints
        if not self.size:
            self._roll_size = self._roll_ts = self._roll_off = NEVER
            return
        self._roll_size = 0 if self.index_full else self._roll_bytes
        ms, first = self._roll_ms, self.first_timestamp
        self._roll_ts = first + ms if ms is not None and first is not None else NEVER
        self._roll_off = self.base_offset + _MAX_DELTA

    # -- writing --------------------------------------------------------------------
    def append(self, data: bytes | list[bytes], base_offset: int, next_offset: int,
               max_timestamp: int, size: int | None = None) -> int:
        """Copy one encoded batch (bytes, or its two parts: header, records) to the end;
        return the position written at, or -1 (nothing written) if the segment must
        roll first (its ``ActiveSettings``).

        Stamps the batch's base offset field: the checksum does not cover it, so a batch
        can be encoded before its offset is known (outside the log's lock). A batch
        of ``THROUGH_FILE`` bytes or more goes in through the file (``_write_batch``).
        """
        mm = self._mm
        assert mm is not None
        pos = self.size
        if size is None:
            size = len(data) if isinstance(data, bytes) else sum(map(len, data))
        if (pos + size > self._roll_size or max_timestamp > self._roll_ts
                or next_offset - 1 > self._roll_off):
            return -1
        if size >= THROUGH_FILE:
            end = pos + size
            if end > self._alloc_end:
                self._allocate(end, populate=False)
            self._write_batch(pos, data, base_offset)
        elif type(data) is list:
            end = pos + size
            if end > self._alloc_end:
                self._allocate(end)
            # the base offset is stamped before the records go in: a reader in another
            # process must not catch a whole batch (checksum good) still saying offset 0
            head, body = data       # the append_batch fast path
            p = pos + len(head)
            mm[pos:p] = head
            _OFFSET.pack_into(mm, pos, base_offset)
            mm[p:end] = body
        else:
            end = pos + len(data)
            if end > self._alloc_end:
                self._allocate(end)
            _OFFSET.pack_into(mm, pos, base_offset)
            # the header before the records, in two copies: one memcpy may write its
            # end first, and recovery relies on a torn batch's header being whole
            # (its length says which bytes are its own)
            h = pos + _format.HEADER_SIZE
            with memoryview(cast(bytes, data)) as view:
                mm[pos + 8:h] = view[8:_format.HEADER_SIZE]
                mm[h:end] = view[_format.HEADER_SIZE:]
        self._appended(pos, end, base_offset, next_offset, max_timestamp)
        return pos

    def append_group(self, batches: Sequence[tuple[Any, int, int, int]], base_offset: int) -> int:
        """Copy encoded batches ``(data, records, max timestamp, size)`` (``data``: a
        buffer, or its parts) that follow each other from ``base_offset``, so that
        readers, recovery and a writer repairing after a death see all of them or
        none. Returns the position written at, or -1 (nothing written) if the
        segment must roll first.

        The first batch's header goes in first, claiming the whole group as its
        length: its checksum fails, so readers stop before it, recovery cuts it as
        a torn tail and a repairing writer erases it; the batches after it lie
        inside the bytes it claims, which prove nothing (``_storage.scan.survey``). Once
        every byte is in, one 4-byte store of its true length makes the group
        whole. Index entries and the tail state follow, as for ``append``.

        The bytes go in through the file (``_write_batch``), not the map: a group is
        large (a Spark task's rows), and a copy into fresh pages of the map faults on
        each of them.
        """
        mm = self._mm
        assert mm is not None and batches
        pos = self.size
        total = sum(b[3] for b in batches)
        after = base_offset + sum(b[1] for b in batches)
        if (pos + total > self._roll_size or max(b[2] for b in batches) > self._roll_ts
                or after - 1 > self._roll_off):
            return -1
        end = pos + total
        if end > self._alloc_end:
            self._allocate(end, populate=False)
        wmap = self._map
        assert wmap is not None
        p, off = pos, base_offset
        handed = pos
        for i, (data, n, _, size) in enumerate(batches):
            self._write_batch(p, data, off, total if not i else None)
            p += size
            off += n
            # the sink fsyncs a group next: its writeback starts as it goes in, so
            # that fsync waits for the last pages only
            handed = wmap.hand_on(handed, p)
        # the commit point: one store (a single instruction) of the first batch's length
        _NATIVE_U32.pack_into(mm, pos + 8, _native_u32(batches[0][3] - _format.LENGTH_END))
        p, off = pos, base_offset
        for _, n, max_ts, size in batches:
            self._appended(p, p + size, off, off + n, max_ts)
            p += size
            off += n
        return pos

    def _write_batch(self, pos: int, data: bytes | memoryview | list[bytes], base_offset: int,
                     claim: int | None = None) -> None:
        """Write one batch (a buffer, or its parts: header, records) at ``pos`` through
        the file (``WritableMap.write``; its blocks reserved), its header first and
        whole, with the base offset stamped (and, ``claim``, the length of a group
        ending ``claim`` bytes on: ``append_group``'s), then its records: what a
        reader or a recovery may find after a kill is what ``append``'s copies
        leave. The copy runs without the interpreter lock and faults on no page of
        the map (nor does an fsync make the writer fault on them again)."""
        wmap = self._map
        assert wmap is not None
        parts = data if isinstance(data, list) else [data]
        with memoryview(parts[0]) as view:
            header = bytearray(view[:_format.HEADER_SIZE])
            _OFFSET.pack_into(header, 0, base_offset)
            if claim is not None:
                _LENGTH.pack_into(header, _format.FRAMING_AT, claim - _format.LENGTH_END)
            wmap.write(pos, (header, view[_format.HEADER_SIZE:], *parts[1:]))

    def append_one(self, offset: int, timestamp: int, check: int, body: bytes) -> int:
        """``Log.append``'s hot path: one short keyless record. ``body`` is the batch
        from its attributes on (``_codec.format.ONE_TAIL`` and the value: the bytes
        ``check``, their checksum, covers, computed outside the lock); only the
        prefix before it is packed here. Returns the position written at, or -1
        (nothing written) if the segment must roll first. Byte for byte what
        ``_codec.encode.encode_batch`` makes (tested)."""
        pos = self.size
        end = pos + _PREFIX_SIZE + len(body)
        if end > self._roll_size or timestamp > self._roll_ts or offset > self._roll_off:
            return -1
        mm = self._mm
        if end > self._alloc_end:
            self._allocate(end)
        _PREFIX.pack_into(mm, pos, offset, end - pos - 12, _MAGIC, check)
        mm[pos + _PREFIX_SIZE:end] = body
        if pos >= self._next_index_pos or timestamp > self._max_ts or not pos:
            self._appended(pos, end, offset, offset + 1, timestamp)
        else:
            self.size = end
            self.next_offset = offset + 1
        return pos

    def _appended(self, pos: int, end: int, base_offset: int, next_offset: int,
                  max_timestamp: int) -> None:
        """The one post-append bookkeeping: index entries, timestamps, size, offsets.

        Kafka's index rule: an entry for the first batch that starts at least
        ``index_interval_bytes`` past the last entry (``index.next_entry_position``).
        """
        if pos >= self._next_index_pos:
            self._add_index_entry(base_offset, pos)
            self.marks += 1
        if max_timestamp > self._max_ts:
            self._max_ts = max_timestamp
            self._max_ts_offset = base_offset
            self.marks += 1
        if self.first_timestamp is None:
            # the first batch's, or (a segment reopened without it known) the first
            # seen: segment_ms then rolls a little late, never not at all
            self.first_timestamp = max_timestamp
            self.marks += 1
        self.size = end
        self.next_offset = next_offset
        if not pos:
            self._set_roll_limits()      # the first batch: the segment may roll from now

    def _add_index_entry(self, offset: int, pos: int) -> None:
        ix, tix = self._index, self._timeindex
        # room is reserved ahead by allocate(); a full index takes no more entries
        # (one time-index slot stays free for the entry seal adds)
        if len(ix) >= ix.slots or len(tix) >= tix.slots - 1:
            self._next_index_pos = 1 << 62
            return
        ix.append(offset, pos)
        tix.append(self._max_ts, self._max_ts_offset)
        self._next_index_pos = next_entry_position(pos, self._interval)
        if len(ix) >= ix.slots or len(tix) >= tix.slots - 1:
            self._roll_size = 0         # an index filled: roll at the next append

    def _allocate(self, end: int, populate: bool = True) -> None:
        """Reserve room up to ``end`` (``WritableMap.grow``): the rare append that
        passes ``_alloc_end``."""
        wmap = self._map
        assert wmap is not None
        self._alloc_end = wmap.grow(end, populate)

    @property
    def index_full(self) -> bool:
        """True when an index has no slot left for an append's entry (the time index
        keeps its last one for the entry ``seal`` adds): the next append rolls. The
        same test as ``_add_index_entry``'s, so a writer that takes the segment at
        that count (another writer's tail, a recovery) rolls as the one that filled it."""
        ix, tix = self._index, self._timeindex
        return len(ix) >= ix.slots or len(tix) >= tix.slots - 1

    def flush(self) -> None:
        """fsync data and indexes (``Segment.flush``)."""
        self.segment.flush()

    def seal(self) -> None:
        """Stop appending: cut the file back to its data, trim the indexes, fsync all;
        the segment is a plain sealed one from then on."""
        if self._mm is None:
            return
        if self.size:
            self._timeindex.append_last(self._max_ts, self._max_ts_offset)
        self.unmap()
        self._roll_size = self._roll_ts = self._roll_off = NEVER
        with self._file.lock:            # a flush in another thread: see ``flush``
            fd = self._file.get().fileno()
            os.ftruncate(fd, self.size)
            fsync_file(fd)
            self._index.trim()
            self._timeindex.trim()
        self.segment._sealed(self.size, self.next_offset, self._max_ts)

    def close(self) -> None:
        """Seal and release the segment's files, even if sealing fails."""
        try:
            self.seal()
        finally:
            self.segment.close()

    def unmap(self) -> None:
        """Drop the map, once the prefaulter is not using it (appends end here)."""
        wmap = self._map
        if wmap is not None:
            self._mm = None  # type: ignore[assignment]
            self._map = None
            wmap.close()

    def reset_lock(self) -> None:
        """In a forked child: a new lock for the map (``Segment.reset_locks``)."""
        if self._map is not None:
            self._map.reset_lock()


_BASE = attrgetter("base_offset")


class LogSegments(tuple[Segment, ...]):
    """A log's segments in offset order, as one immutable value (Kafka's
    ``LogSegments``): a tuple, so a reader holding one sees a list that never changes
    under it, and every change makes a new one, by the list's owner (a writer's
    ``LocalLog``, a reader's ``LiveLog``). The active segment, if any, is the last.
    Lookup by offset (``holding``), by time (``reaching``); the changes a log makes, each returning the new
    list: ``added`` (a roll), ``split_through`` (retention: the prefix through a base
    offset goes), ``replaced`` (compaction's swap)."""

    __slots__ = ()

    def holding(self, offset: int) -> int:
        """The index of the segment that holds ``offset`` if any does: the last one
        whose base offset is at most ``offset`` (-1: below the first one)."""
        return bisect_right(self, offset, key=_BASE) - 1

    def reaching(self, ts: int, reading: Callable[[], ContextManager[object]]
                 ) -> Iterator[tuple[int, Segment]]:
        """Lookup by time (Kafka's time lookup walks its segments the same way): each
        non-empty segment, with its index, in offset order, whose largest timestamp
        is at least ``ts``; each measured inside ``reading()`` (the caller's read in
        flight, which keeps that segment's files open while it is looked at)."""
        for j, seg in enumerate(self):
            with reading():
                hit = seg.size and seg.max_timestamp >= ts
            if hit:
                yield j, seg

    def added(self, seg: Segment) -> "LogSegments":
        """This list and ``seg`` (a new active segment) after it."""
        return LogSegments((*self, seg))

    def split_through(self, base: int) -> tuple["LogSegments", tuple[Segment, ...]]:
        """(the segments whose base offset is above ``base``, the others)."""
        i = bisect_right(self, base, key=_BASE)
        return LogSegments(self[i:]), tuple(self[:i])

    def replaced(self, bases: Sequence[int], new: Segment
                 ) -> tuple["LogSegments", tuple[Segment, ...]] | None:
        """(the list with ``new`` in place of the consecutive sealed segments whose
        base offsets are ``bases``, those segments); None if the list does not hold
        them so (it changed since they were taken), or they reach the active one."""
        i = self.holding(bases[0])
        n = len(bases)
        if (i < 0 or i + n >= len(self)
                or [s.base_offset for s in self[i:i + n]] != list(bases)):
            return None
        return LogSegments((*self[:i], new, *self[i + n:])), tuple(self[i:i + n])

"""Sparse, memory-mapped segment indexes: ``OffsetIndex`` and ``TimeIndex``.

An index is a hint, never the truth: every entry points at the start of a batch in
the segment's ``.log`` file, lookups are floor lookups that the caller finishes by
scanning, and an index can always be rebuilt from the log.

Four ways to hold one, chosen by the segment:

* ``writable``: the writer's index of its active segment, a sparse file of
  ``max_index_bytes`` mapped read-write; the entry count lives in memory. Disk
  blocks are reserved (``posix_fallocate``) ahead of the entries before any is
  written through the mapping, so a full disk is an ``OSError`` from a system call
  and never a ``SIGBUS`` from a page fault.
* in memory: a reader's stand-in for a damaged index, rebuilt from the log into
  anonymous memory (a reader writes nothing, and needs no disk space).
* read-only and final (a rolled segment): mapped read-only; entries = size / entry.
* ``live``: another process's active index. It is read with ``os.pread`` and never
  mapped, because its writer trims the file on roll and a mapping beyond the new end
  would raise SIGBUS (rule R8). Unwritten (zero) slots end the entries.
"""

from __future__ import annotations

import mmap
import os
import sys
from array import array
from operator import ge
from struct import Struct
from typing import Callable, Self, Sequence, cast

from ._runtime.files import fsync_file
from ._runtime import platform as _platform


_OFFSET_ENTRY = Struct("<II")
# the largest offset - base offset a segment may hold: the offset index's relative
# offsets are 32-bit (a writer rolls before, compaction never merges past it)
MAX_RELATIVE_OFFSET = (1 << 32) - 2
_BIG = sys.byteorder == "big"


def offset_arrays(data: bytes | memoryview) -> tuple[array[int], array[int]]:
    """The (relative offset, position) columns of offset-index bytes (whole entries;
    zero slots included)."""
    raw = array("I")
    raw.frombytes(data[:len(data) - len(data) % 8])
    if _BIG:
        raw.byteswap()
    return raw[0::2], raw[1::2]


def entries_valid(rel: Sequence[int], pos: Sequence[int], stamps: Sequence[int],
                  data_size: int) -> bool:
    """The one check of index entries (C-level passes): offset entries ascend
    strictly in both offset and position, point inside the segment's ``data_size``
    bytes and never at 0 (the start needs no entry); time entries ascend strictly."""
    if len(pos) and (pos[0] == 0 or pos[-1] >= data_size or any(map(ge, rel, rel[1:]))
                     or any(map(ge, pos, pos[1:]))):
        return False
    return not any(map(ge, stamps, stamps[1:]))


def next_entry_position(last_entry_position: int, interval: int) -> int:
    """Kafka's rule for sparse entries, the one every writer of index entries uses:
    the next entry goes to the first batch that starts at least ``interval``
    (``index_interval_bytes``) past the last entry's position (0: the segment start,
    which needs no entry)."""
    return last_entry_position + interval

_TIME_ENTRY = Struct("<qI")
# blocks are reserved as many entries again as the index has room for, from 512 to
# 4096 at a time: a small log's indexes reserve a block or two
_MIN_RESERVE_SLOTS = 512
_RESERVE_SLOTS = 4096

# an unpacked entry: (offset - base, position) or (timestamp, offset - base)
Entry = tuple[int, int]


class _Index:
    ENTRY: Struct
    SIZE: int

    def __init__(self, path: str, base_offset: int, max_bytes: int = 10 << 20, *,
                 writable: bool = False, live: bool = False, entries: int | None = None) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_bytes = max_bytes - max_bytes % self.SIZE
        self._writable = writable
        self._live = live and not writable
        self._mm: mmap.mmap | None = None
        self._fd = -1
        # slots an append may fill without reserving more disk blocks (none unless
        # writable), so the append path tests one number; _slots: the most there can be
        self._room = 0
        self._slots = self.max_bytes // self.SIZE
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT if writable else os.O_RDONLY, 0o644)
        try:
            size = os.fstat(self._fd).st_size
            if writable:
                self._entries = size // self.SIZE if entries is None else entries
                self._entries = min(self._entries, self._slots)
                if size < self.max_bytes:
                    os.ftruncate(self._fd, self.max_bytes)
                self._mm = mmap.mmap(self._fd, self.max_bytes)
                # blocks of entries already written exist; the rest is reserved on demand
                self._room = self._entries
            else:
                self._entries = size // self.SIZE
                if not self._live:
                    if self._entries:
                        self._mm = mmap.mmap(self._fd, self._entries * self.SIZE,
                                             access=mmap.ACCESS_READ)
                    # the map holds its own descriptor: a sealed index costs one
                    os.close(self._fd)
                    self._fd = -1
        except BaseException:
            if self._fd >= 0:
                os.close(self._fd)
            self._fd = -1
            raise

    # -- reading ---------------------------------------------------------------
    def __len__(self) -> int:
        return self._entries

    def _reader(self) -> tuple[int, Callable[[int], Entry | None]]:
        """(slot count, entry(i) returning the unpacked entry or None if empty)."""
        mm = self._mm
        unpack = self.ENTRY.unpack_from
        size = self.SIZE
        if mm is not None:
            return self._entries, lambda i: unpack(mm, i * size)
        if not self._live:
            return 0, lambda i: None
        fd = self._fd
        slots = os.fstat(fd).st_size // size

        def entry(i: int) -> Entry | None:
            b = os.pread(fd, size, i * size)
            if len(b) < size or not any(b):
                return None
            return unpack(b)
        return slots, entry

    def _floor(self, key: int, field: int) -> Entry | None:
        """The last entry whose ``field`` is <= key (entries ascend in it)."""
        n, entry = self._reader()
        lo, hi = 0, n
        found = None
        while lo < hi:
            mid = (lo + hi) // 2
            e = entry(mid)
            if e is not None and e[field] <= key:
                found = e
                lo = mid + 1
            else:
                hi = mid
        return found

    def entries(self) -> list[Entry]:
        """All entries, oldest first."""
        n, entry = self._reader()
        out = []
        for i in range(n):
            e = entry(i)
            if e is None:
                break
            out.append(e)
        return out

    @property
    def is_full(self) -> bool:
        """True when every slot holds an entry."""
        return self._entries >= self._slots

    @property
    def slots(self) -> int:
        """The most entries the index can hold (``max_index_bytes`` / entry size)."""
        return self._slots

    def raw_entries(self) -> bytes:
        """The packed bytes of the valid entries."""
        if self._mm is not None:
            return self._mm[:self._entries * self.SIZE]
        return b"".join(self.ENTRY.pack(*e) for e in self.entries())

    def set_entries(self, n: int) -> None:
        """The writer's count of valid entries, as a writer of this file recorded it
        (``ActiveSegment.reload``): the slots past it are free."""
        if not self._writable:
            raise ValueError(f"index {self.path} is not writable")
        self._entries = min(n, self._slots)
        self._room = max(self._room, self._entries)

    @classmethod
    def in_memory(cls, base_offset: int, entries: list[tuple[int, int]],
                  max_bytes: int = 10 << 20) -> Self:
        """A read-only index of ``entries`` (absolute keys) in anonymous memory."""
        ix = cls.__new__(cls)
        ix.path = "<memory>"
        ix.base_offset = base_offset
        ix.max_bytes = max_bytes - max_bytes % cls.SIZE
        ix._writable = ix._live = False
        ix._fd = -1
        ix._room = 0
        ix._slots = ix.max_bytes // cls.SIZE
        entries = entries[:ix._slots]
        ix._entries = len(entries)
        ix._mm = None
        if entries:
            ix._mm = mm = mmap.mmap(-1, max(1, len(entries) * cls.SIZE))
            for i, e in enumerate(entries):
                cls.ENTRY.pack_into(mm, i * cls.SIZE, *e)
        return ix

    def reserve(self, slots: int) -> None:
        """Reserve disk blocks for at least ``slots`` entries (capped at the maximum)
        before they are written through the mapping. ``OSError`` (ENOSPC) if the
        disk is full: nothing was written."""
        if slots <= self._room or not self._writable or self._mm is None:
            return
        need = min(self._slots, slots)
        step = min(_RESERVE_SLOTS, max(_MIN_RESERVE_SLOTS, self._room))
        want = min(self._slots, max(slots, self._room + step))
        lo = self._room * self.SIZE
        try:
            _platform.reserve(self._fd, lo, want * self.SIZE - lo)
        except OSError as e:
            if e.errno not in _platform.NO_SPACE or want <= need:
                raise
            want = need          # a nearly full disk: just what is needed now
            _platform.reserve(self._fd, lo, want * self.SIZE - lo)
        self._room = want

    # -- writing ---------------------------------------------------------------
    def _make_room(self) -> None:
        """The slow branch of an append: reserve more blocks, or refuse."""
        if not self._writable or self._mm is None:
            raise ValueError(f"index {self.path} is not writable")
        if self._entries >= self._slots:
            raise ValueError(f"index {self.path} is full")
        self.reserve(self._entries + 1)

    def trim(self) -> None:
        """Shrink the file to its entries, make it durable and map it read-only.

        Lookups in flight keep the old mapping object alive; they touch only
        entries below the count, which the shrunk file still holds.
        """
        if not self._writable:
            return
        size = self._entries * self.SIZE
        os.ftruncate(self._fd, size)
        fsync_file(self._fd)
        self._writable = False
        self._room = 0
        self._mm = (mmap.mmap(self._fd, size, access=mmap.ACCESS_READ) if size else None)
        os.close(self._fd)      # sealed: the map holds its own descriptor
        self._fd = -1

    def flush(self) -> None:
        """fsync the file (an index being written; a sealed one has nothing to sync)."""
        if self._fd >= 0:
            fsync_file(self._fd)

    def release(self) -> None:
        """Release the file without trimming (after a failure)."""
        self._room = 0
        self._mm = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def close(self) -> None:
        """Release the file, whatever happens. A writable index is trimmed first (an
        ``OSError`` of the trim propagates, the descriptor closed all the same)."""
        try:
            if self._writable and self._fd >= 0:
                self.trim()
        finally:
            self.release()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path} entries={self._entries}>"


class OffsetIndex(_Index):
    """Sparse map from offset to file position of a batch start in one segment.

    Entries are (offset - base_offset: uint32, position: uint32), little-endian,
    strictly ascending in both, one per ``index_interval_bytes`` of log data. No entry
    points at position 0 (the segment start needs none), so a zero slot is empty.
    """

    ENTRY = _OFFSET_ENTRY
    SIZE = 8

    def append(self, offset: int, position: int) -> None:
        """Add an entry for the batch starting at ``position`` with base ``offset``."""
        n = self._entries
        if n >= self._room:
            self._make_room()
        # inlined _append: once per index interval on the append path; below _room
        # (or after _make_room) the index is writable, so mapped (cast: no check)
        _OFFSET_ENTRY.pack_into(cast("mmap.mmap", self._mm), n * 8, offset - self.base_offset,
                                position)
        self._entries = n + 1

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before ``offset``.

        Falls back to (base_offset, 0), the segment start.
        """
        e = self._floor(offset - self.base_offset, 0)
        if e is None:
            return self.base_offset, 0
        return self.base_offset + e[0], e[1]

    def last_entry(self) -> tuple[int, int]:
        """The last entry, or (base_offset, 0) if there is none."""
        if self._live:
            return self.lookup(self.base_offset + (1 << 40))
        n, entry = self._reader()
        e = entry(self._entries - 1) if self._entries else None
        if e is None:
            return self.base_offset, 0
        return self.base_offset + e[0], e[1]


class TimeIndex(_Index):
    """Sparse map from timestamp to offset: (timestamp: int64, offset - base: uint32).

    Timestamps ascend strictly; an entry is added with an offset-index entry when the
    segment's largest timestamp has grown, and once more when the segment is rolled,
    so the last entry holds the segment's largest timestamp.
    """

    ENTRY = _TIME_ENTRY
    SIZE = 12

    _last_ts: int | None = None

    def set_entries(self, n: int) -> None:
        super().set_entries(n)
        self._last_ts = None        # read again from the new last entry

    def append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) if ``timestamp`` is above the last entry's."""
        if self._last_ts is None and self._entries:
            # appends go to the writer's index, which is mapped (cast: no check)
            self._last_ts = self.ENTRY.unpack_from(cast("mmap.mmap", self._mm),
                                                   (self._entries - 1) * self.SIZE)[0]
        if self._last_ts is not None and timestamp <= self._last_ts:
            return
        n = self._entries
        if n >= self._room:
            self._make_room()
        _TIME_ENTRY.pack_into(cast("mmap.mmap", self._mm), n * 12, timestamp,
                              offset - self.base_offset)   # mapped, as in OffsetIndex.append
        self._entries = n + 1
        self._last_ts = timestamp

    def append_last(self, timestamp: int, offset: int) -> None:
        """Add a sealed segment's last entry, its largest timestamp (readers and
        retention take it from there). A full index (one written under a larger
        ``max_index_bytes``) gives its last entry up for it: lookups then walk a
        little further, and never miss the segment."""
        n = self._entries
        if n and n >= self._slots:
            last = self.ENTRY.unpack_from(cast("mmap.mmap", self._mm), (n - 1) * self.SIZE)
            if last[0] >= timestamp:
                return
            self._entries = n - 1
            self._last_ts = None
        self.append(timestamp, offset)

    def lookup(self, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry with timestamp <= ``timestamp``."""
        e = self._floor(timestamp, 0)
        if e is None:
            return None
        return e[0], self.base_offset + e[1]

    def last_entry(self) -> tuple[int, int] | None:
        """The last (timestamp, offset) entry: the segment's largest timestamp once rolled."""
        if self._live:
            return self.lookup((1 << 63) - 1)
        n, entry = self._reader()
        e = entry(self._entries - 1) if self._entries else None
        return None if e is None else (e[0], self.base_offset + e[1])

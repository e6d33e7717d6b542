"""A segment's two index files: opening them checked, rebuilding a damaged pair from
the log (on disk by the writer, in memory by a reader or on a full disk), and
replacing both files by a scan's entries.

Functions of the segment's public surface (``index_path``, ``timeindex_path``,
``base_offset``, ``size``, ``pread``, ``owner``, ``write_indexes``) and of its index
settings, passed in; ``Segment`` keeps the index objects they return.
"""

from __future__ import annotations

import os
from typing import Iterable, Protocol, Sequence

from .._codec import format as _format
from . import scan as _scan
from .._runtime.files import tmp_path
from ..errors import CorruptRecordError
from ..index import OffsetIndex, TimeIndex, entries_valid, offset_arrays


class IndexedSegment(_scan.ScannableSegment, Protocol):
    """The surface these functions use of a segment (``Segment`` has it): where its
    index files are, its data (read and scanned), whether this process may write
    them, and its way of replacing them (``write_indexes``, which comes back to
    ``replace_files``)."""

    @property
    def index_path(self) -> str: ...
    @property
    def timeindex_path(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def owner(self) -> bool: ...

    def pread(self, n: int, pos: int) -> bytes: ...

    def write_indexes(self, res: _scan.ScanResult, final: bool) -> None: ...


def open_pair(seg: IndexedSegment, max_bytes: int, **how: bool) -> tuple[OffsetIndex, TimeIndex]:
    """Both index files of ``seg``, opened as ``how`` says (``live``, ``writable``...)."""
    return (OffsetIndex(seg.index_path, seg.base_offset, max_bytes, **how),
            TimeIndex(seg.timeindex_path, seg.base_offset, max_bytes, **how))


def indexes_ok(ix: OffsetIndex, tix: TimeIndex, size: int, sealed: bool = True) -> bool:
    """Cheap sanity check of a segment's indexes (``index.entries_valid``)."""
    if os.path.getsize(ix.path) % ix.SIZE or os.path.getsize(tix.path) % tix.SIZE:
        return False
    if sealed and size and not len(tix):
        return False                       # a sealed segment always has its last time entry
    rel: Sequence[int] = ()
    pos: Sequence[int] = ()
    if len(ix):
        rel, pos = offset_arrays(ix.raw_entries())
    stamps = [e[0] for e in tix.entries()] if len(tix) else []
    return entries_valid(rel, pos, stamps, size)


def entry_fits(seg: IndexedSegment, ix: OffsetIndex) -> bool:
    """Does the index's last entry point at a batch that holds its offset, in the
    file ``seg`` reads? An index opened by path can belong to another file than the
    ``.log`` descriptor the segment holds: a compaction swap renames a new ``.log``
    in, then its indexes, between a reader's opening the one and the others (the
    reader would then walk from positions of another file)."""
    if not len(ix):
        return True
    offset, pos = ix.last_entry()
    data = seg.pread(_format.HEADER_SIZE, pos)
    hdr = _format.read_header(data, 0, seg.size - pos)   # the whole batch in the file
    return hdr is not None and hdr.base_offset <= offset <= hdr.last_offset


def memory_indexes(base: int, res: _scan.ScanResult, max_bytes: int
                   ) -> tuple[OffsetIndex, TimeIndex]:
    """A reader's stand-in for a damaged index it may not rewrite (or a writer's on a
    full disk): the rebuilt entries in anonymous memory, no file, no disk space."""
    times = list(res.time_index)
    if res.max_timestamp >= 0 and (not times or times[-1][0] < res.max_timestamp):
        times.append((res.max_timestamp, res.max_ts_offset))    # a sealed segment's last
    slots = max_bytes // TimeIndex.SIZE
    if len(times) > slots:
        # too many for the index: the largest timestamp stays, as on disk
        times[slots - 1:] = times[-1:]
    ix = OffsetIndex.in_memory(base, [(o - base, p) for o, p in res.index], max_bytes)
    tix = TimeIndex.in_memory(base, [(t, o - base) for t, o in times], max_bytes)
    return ix, tix


def rebuilt(seg: IndexedSegment, max_bytes: int, interval: int) -> tuple[OffsetIndex, TimeIndex]:
    """Indexes rebuilt by a scan of ``seg``'s data: written to disk by a writer
    (``seg.write_indexes``), else, or if the disk is full, in memory."""
    res = _scan.scan(seg, 0, seg.size, None, interval)
    if seg.owner:
        try:
            seg.write_indexes(res, final=True)
            return open_pair(seg, max_bytes)
        except OSError:
            pass        # a full disk must not fail a read: the next open rebuilds it
    return memory_indexes(seg.base_offset, res, max_bytes)


def load(seg: IndexedSegment, max_bytes: int, interval: int, checked: bool = False
         ) -> tuple[OffsetIndex, TimeIndex, bool]:
    """A sealed segment's indexes, checked cheaply: entries ascend, point inside the
    file, and the files hold whole entries (``checked``: these files passed that
    before, only the last entry is looked at again). A missing or damaged pair is
    ``rebuilt``; the flag says it was."""
    ix = tix = None
    try:
        ix, tix = open_pair(seg, max_bytes)
        if (checked or indexes_ok(ix, tix, seg.size)) and entry_fits(seg, ix):
            return ix, tix, False
    except (OSError, ValueError, CorruptRecordError):
        pass
    for bad in (ix, tix):
        if bad is not None:
            bad.release()
    return *rebuilt(seg, max_bytes, interval), True


def for_reading(seg: IndexedSegment, max_bytes: int, interval: int, live: bool, checked: bool
                ) -> tuple[OffsetIndex, TimeIndex, bool]:
    """A segment's indexes as its reads use them: a live segment's as views that
    follow its writer, a sealed one's ``load``-ed (checked; rebuilt from the log if
    missing or damaged: on disk by the writer, in memory by a reader); the flag
    says they were rebuilt."""
    if live:
        return *open_pair(seg, max_bytes, live=True), False
    return load(seg, max_bytes, interval, checked)


def active_entries(seg: IndexedSegment, max_bytes: int, interval: int) -> tuple[int, int, bool]:
    """Entry counts of the (trimmed) indexes of a cleanly closed segment that is to
    become active again, ``rebuilt`` first if they fail the check (the flag)."""
    try:
        ix, tix = open_pair(seg, max_bytes)
        ok = indexes_ok(ix, tix, seg.size, sealed=False)
        counts = len(ix), len(tix)
        ix.close()
        tix.close()
        if ok:
            return *counts, False
    except (OSError, ValueError):
        pass
    ix, tix = rebuilt(seg, max_bytes, interval)
    counts = len(ix), len(tix)
    ix.close()
    tix.close()
    return *counts, True


def replace_files(seg: IndexedSegment, res: _scan.ScanResult, max_bytes: int, final: bool) -> None:
    """Replace both index files of ``seg`` by the entries of a scan (``final``:
    trimmed), through temp files renamed in; the caller fsyncs the directory."""
    tmp_ix, tmp_tix = tmp_path(seg.index_path), tmp_path(seg.timeindex_path)
    try:
        _scan.write_index_files(seg.base_offset, res, max_bytes, final, tmp_ix, tmp_tix)
        os.rename(tmp_ix, seg.index_path)
        os.rename(tmp_tix, seg.timeindex_path)
    except OSError:
        for p in (tmp_ix, tmp_tix):
            try:
                os.unlink(p)
            except OSError:
                pass
        raise


def close_all(indexes: Iterable[OffsetIndex | TimeIndex | None], trim: bool) -> None:
    """Close index objects (``trim``: cut their files to their entries; if that
    fails, or without it, just release them)."""
    for ix in indexes:
        if ix is None:
            continue
        if trim:
            try:
                ix.close()
                continue
            except OSError:
                pass
        ix.release()


def reserve_room(indexes: Iterable[OffsetIndex | TimeIndex | None], end: int,
                 interval: int) -> None:
    """Index room for every entry the bytes up to ``end`` can take (plus the one
    seal adds), reserved before any of them is written through a mapping."""
    slots = end // interval + 2
    for ix in indexes:
        if ix is not None:
            ix.reserve(slots)

"""The one chunked batch walker over a segment file, ``walk``: readers' offset and
time lookups (``Segment.batches``), reads of batches larger than a chunk, recovery,
readers following a live segment, index rebuilds and the cleaner go through it.
(``iter()`` decodes whole chunks with ``codec.iter_batches``, and single headers are
read where one is all a caller needs.) ``scan`` is its checking use: framing, checksum,
offsets and timestamps of every batch, and the index entries a writer would have
made for them; it never raises for bad data, its result says where and why it
stopped."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterator

from . import codec
from ._files import remove
from .errors import CorruptRecordError
from .index import OffsetIndex, TimeIndex, next_entry_position

CHUNK = 1 << 20


class Damage(CorruptRecordError):
    """What ``walk`` found wrong, at a file position. ``reason``: ``"short"`` (the
    file ends before ``end``), ``"partial"`` (a batch runs past ``end``), ``"zeros"``,
    ``"framing"``, ``"checksum"``, ``"offsets"``."""

    def __init__(self, reason: str, message: str, position: int,
                 offset: int | None = None) -> None:
        super().__init__(message, None, position, offset)
        self.reason = reason


def walk(fd: int, start: int, end: int, *, expect: int | None = None, check: bool = False,
         chunk: int = CHUNK, to_damage: bool = False
         ) -> Iterator[tuple[bytes, int, int, codec.BatchHeader]]:
    """(buffer, position in it, the buffer's file position, header) of each whole
    batch in the file ``fd`` from position ``start`` (a batch start) to ``end``.

    The file is read in ``chunk``-sized ``pread``s; a batch larger than a chunk is
    read whole. Framing is checked, and offsets: each batch starts where the last
    ended (after compaction, anywhere above it), the first at ``expect`` if given.
    ``check`` adds the checksum and the timestamps. The first bad batch raises
    ``Damage`` (without a path: the caller places it with ``.at``). A file shorter
    than ``end`` is damage at once, before any batch of the short read is yielded;
    ``to_damage`` (recovery's use) yields every whole batch up to the damage first.
    """
    pos = start
    header_size = codec.HEADER_SIZE
    while pos < end:
        want = min(chunk, end - pos)
        buf = os.pread(fd, want, pos)
        n = len(buf)
        if n < want and not to_damage:
            raise Damage("short", f"the file ends at {pos + n}, before the {end} bytes "
                         f"of whole batches it held (cut back?)", pos + n)
        p = 0
        while p < n:
            try:
                hdr = codec.read_header(buf, p, n)
            except CorruptRecordError as e:
                zeros = not any(memoryview(buf)[p:p + header_size])
                raise Damage("zeros" if zeros else "framing",
                             "zero-filled space where a batch should start" if zeros
                             else e.message, pos + p) from None
            if hdr is None:
                break
            expect = _checked(buf, p, pos, hdr, expect, check)
            yield buf, p, pos, hdr
            p += codec.LENGTH_END + hdr[codec.H_LENGTH]
        if p == 0:
            # no whole batch at the start of this read: [start, end) holds whole
            # batches, so this is damage unless the batch is merely larger than a chunk
            if n < want:
                raise Damage("short", f"the file ends at {pos + n}, before the {end} bytes "
                             f"of whole batches it held (cut back?)", pos + n)
            if n < header_size:
                # a chunk smaller than a header: read the header alone
                if end - pos < header_size:
                    raise Damage("partial", "partial batch header inside the data", pos)
                buf = os.pread(fd, header_size, pos)
                if len(buf) < header_size:
                    raise Damage("short", "the file ends inside a batch header (cut back?)",
                                 pos + len(buf))
                try:
                    codec.read_header(buf, 0, 1 << 62)
                except CorruptRecordError as e:
                    zeros = not any(buf)
                    raise Damage("zeros" if zeros else "framing",
                                 "zero-filled space where a batch should start" if zeros
                                 else e.message, pos) from None
            hdr = codec.HEADER.unpack_from(buf)
            size = codec.LENGTH_END + hdr[codec.H_LENGTH]
            if pos + size > end:
                raise Damage("partial", "batch runs past the end of the data", pos, hdr[codec.H_BASE])
            big = os.pread(fd, size, pos)
            if len(big) < size:
                raise Damage("short", "the file ends inside a batch (cut back?)",
                             pos + len(big), hdr[codec.H_BASE])
            expect = _checked(big, 0, pos, hdr, expect, check)
            yield big, 0, pos, hdr
            p = size
        pos += p


def _checked(buf: bytes, p: int, filepos: int, hdr: codec.BatchHeader, expect: int | None,
             check: bool) -> int:
    """Check one batch; return the offset the next must start at."""
    base = hdr[codec.H_BASE]
    if check and not codec.checksum_ok(buf, p, hdr):
        raise Damage("checksum", "checksum mismatch", filepos + p, base)
    if expect is not None and (base < expect or (base != expect and not hdr[codec.H_ATTRS] & codec.F_OFFSETS)):
        raise Damage("offsets", f"batch starts at offset {base}, expected {expect}",
                     filepos + p, base)
    if check and (hdr[codec.H_MAX_TS] < hdr[codec.H_BASE_TS] or hdr[codec.H_BASE_TS] < 0):
        raise Damage("framing", "bad batch timestamps", filepos + p, base)
    return base + hdr[codec.H_LAST_DELTA] + 1


@dataclass
class ScanResult:
    """What a scan of one segment found, and the index entries for it."""

    end: int                       # position after the last good batch
    next_offset: int               # offset after the last good batch
    max_timestamp: int = -1
    max_ts_offset: int = 0
    first_timestamp: int | None = None
    stop: str = "end"              # "end", "partial", "zeros", "framing", "checksum", "offsets"
    index: list[tuple[int, int]] = field(default_factory=list)       # (offset, position)
    time_index: list[tuple[int, int]] = field(default_factory=list)  # (timestamp, offset)
    batches: int = 0
    interval: int | None = None    # index entries are made only with an interval
    next_entry: int = 0

    def add(self, pos: int, base_offset: int, max_timestamp: int) -> None:
        """Account for a batch at ``pos``: the index entries a writer makes (the
        same rule as ``Segment._appended``), timestamps."""
        if self.interval is not None and pos >= self.next_entry:
            self.index.append((base_offset, pos))
            if self.max_timestamp >= 0 and (not self.time_index
                                            or self.time_index[-1][0] < self.max_timestamp):
                self.time_index.append((self.max_timestamp, self.max_ts_offset))
            self.next_entry = next_entry_position(pos, self.interval)
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.max_ts_offset = base_offset
        if self.first_timestamp is None:
            self.first_timestamp = max_timestamp
        self.batches += 1


def scan(seg: Any, start: int, end: int, next_offset: int | None,
         interval: int | None = None, max_timestamp: int = -1) -> ScanResult:
    """Validate batches of ``seg`` from file position ``start`` to ``end``.

    ``next_offset`` is the offset the first batch must start at (None: the first
    batch sets it; later batches must follow contiguously or, after compaction,
    ascending). With ``interval`` the index entries are rebuilt as the writer would
    have made them (``start`` is then the last entry's position, or 0). Never
    raises for bad data: the result says where and why it stopped.
    """
    res = ScanResult(end=start, next_offset=next_offset if next_offset is not None
                     else seg.base_offset, max_timestamp=max_timestamp,
                     max_ts_offset=seg.base_offset, interval=interval,
                     next_entry=next_entry_position(start, interval or 0))
    try:
        for buf, p, filepos, hdr in walk(seg.fileno(), start, end, expect=next_offset,
                                         check=True, to_damage=True):
            res.add(filepos + p, hdr[codec.H_BASE], hdr[codec.H_MAX_TS])
            res.next_offset = hdr[codec.H_BASE] + hdr[codec.H_LAST_DELTA] + 1
            res.end = filepos + p + codec.LENGTH_END + hdr[codec.H_LENGTH]
    except Damage as d:
        res.stop = "partial" if d.reason == "short" else d.reason
    return res


def write_index_files(base_offset: int, res: ScanResult, max_index_bytes: int, final: bool,
                      index_path: str, timeindex_path: str) -> None:
    """Write fresh, fsynced index files from a scan's entries.

    ``final`` (a sealed segment) adds the time index's last entry: the segment's
    largest timestamp, which a sealed segment's readers take from it. Entries that
    do not fit are dropped (lookups then walk further), never that last one: as in
    a writer's index, its slot is kept free.
    """
    for path, cls, entries in ((index_path, OffsetIndex, res.index),
                               (timeindex_path, TimeIndex, res.time_index)):
        remove(path)
        ix = cls(path, base_offset, max_index_bytes, writable=True, entries=0)
        last = final and cls is TimeIndex and res.max_timestamp >= 0
        for a, b in entries[: ix.max_bytes // ix.SIZE - (1 if last else 0)]:
            ix.append(a, b)
        if last:
            ix.append(res.max_timestamp, res.max_ts_offset)
        ix.close()

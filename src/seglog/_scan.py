"""The batch walker that checks: framing, CRC, offsets and timestamps of every
batch in a stretch of a segment file, and the index entries a writer would have
made for them. Used by recovery, by readers following a live segment, by index
rebuilds and (its result type) by the cleaner. Pure over the file's bytes: it never
raises for bad data; the result says where and why it stopped."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from . import codec
from ._files import remove
from .errors import CorruptRecordError
from .index import OffsetIndex, TimeIndex

_SCAN_CHUNK = 1 << 20


@dataclass
class ScanResult:
    """What a scan of one segment found."""

    end: int                       # position after the last good batch
    next_offset: int               # offset after the last good batch
    max_timestamp: int = -1
    max_ts_offset: int = 0
    first_timestamp: int | None = None
    stop: str = "end"              # "end", "partial", "zeros", "framing", "crc", "offsets"
    index: list[tuple[int, int]] = field(default_factory=list)       # (offset, position)
    time_index: list[tuple[int, int]] = field(default_factory=list)  # (timestamp, offset)
    batches: int = 0


def scan(seg: Any, start: int, end: int, next_offset: int | None,
         interval: int | None = None, max_timestamp: int = -1) -> ScanResult:
    """Validate batches of ``seg`` from file position ``start`` to ``end``.

    ``next_offset`` is the offset the first batch must start at (None: the first
    batch sets it; later batches must follow contiguously or, after compaction,
    ascending). With ``interval`` the index entries are rebuilt as the writer would
    have made them. Never raises for bad data: the result says where and why it
    stopped.
    """
    fd = seg.fileno()
    res = ScanResult(end=start, next_offset=next_offset if next_offset is not None else seg.base_offset,
                     max_timestamp=max_timestamp, max_ts_offset=seg.base_offset)
    expected = next_offset
    since_index = 0
    pos = start
    want = _SCAN_CHUNK
    header_size = codec.HEADER_SIZE
    while pos < end:
        buf = os.pread(fd, min(want, end - pos), pos)
        want = _SCAN_CHUNK
        grow = False
        n = len(buf)
        p = 0
        mv = memoryview(buf)
        while p + header_size <= n:
            try:
                hdr = codec.read_header(buf, p, 1 << 62)
            except CorruptRecordError:
                res.stop = "zeros" if not any(mv[p:p + header_size]) else "framing"
                return res
            assert hdr is not None
            size = codec.LENGTH_END + hdr[1]
            if p + size > n:
                if pos + p + size > end:
                    res.stop = "partial"
                    return res
                if p == 0:
                    want, grow = size, True
                break
            if codec.crc32(mv[p + codec.CRC_FROM:p + size]) != hdr[3]:
                res.stop = "crc"
                return res
            base = hdr[0]
            if expected is not None and (base < expected or (base != expected
                                                              and not hdr[4] & codec.F_OFFSETS)):
                res.stop = "offsets"
                return res
            if hdr[8] < hdr[7] or hdr[7] < 0:
                res.stop = "framing"
                return res
            if interval is not None:
                if since_index >= interval:
                    res.index.append((base, pos + p))
                    if res.max_timestamp >= 0 and (not res.time_index
                                                   or res.time_index[-1][0] < res.max_timestamp):
                        res.time_index.append((res.max_timestamp, res.max_ts_offset))
                    since_index = 0
                since_index += size
            if hdr[8] > res.max_timestamp:
                res.max_timestamp = hdr[8]
                res.max_ts_offset = base
            if res.first_timestamp is None:
                res.first_timestamp = hdr[8]
            expected = base + hdr[5] + 1
            res.next_offset = expected
            res.batches += 1
            p += size
            res.end = pos + p
        if p == 0 and not grow:
            res.stop = "partial"
            return res
        pos += p
    return res


def write_index_files(base_offset: int, res: ScanResult, max_index_bytes: int, final: bool,
                      index_path: str, timeindex_path: str) -> None:
    """Write fresh, fsynced index files from a scan's entries.

    ``final`` (a sealed segment) adds the time index's last entry: the segment's
    largest timestamp.
    """
    for path, cls, entries in ((index_path, OffsetIndex, res.index),
                               (timeindex_path, TimeIndex, res.time_index)):
        remove(path)
        ix = cls(path, base_offset, max_index_bytes, writable=True, entries=0)
        for a, b in entries[: ix.max_bytes // ix.SIZE]:
            ix.append(a, b)
        if final and cls is TimeIndex and res.max_timestamp >= 0 and not ix.is_full:
            ix.append(res.max_timestamp, res.max_ts_offset)
        ix.close()

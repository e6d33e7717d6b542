"""Finding and reading whole batches in one segment's file: always ``os.pread``
into bytes, never a mapping, in every process (a file cut back under a mapping
would raise SIGBUS in the reader, rule R8).

Functions of a segment's public surface (``size``, ``fileno()``, ``pread``,
``index``, ``base_offset``, ``path``); ``Segment`` has them as its methods
(``batches``, ``first_header``, ``find_position``, ``read``, ``read_at``).
"""

from __future__ import annotations

import os
from typing import Iterator, Protocol

from .._codec import format as _format
from . import scan as _scan
from ..errors import CorruptRecordError
from ..index import OffsetIndex, TimeIndex
from ..message import MessageSet

_SCAN_CHUNK = 1 << 16


class ReadableSegment(Protocol):
    """The surface these functions read a segment through (``Segment`` has it: it
    binds them as its methods, so ``pread`` and ``batches`` are these functions)."""

    @property
    def base_offset(self) -> int: ...
    @property
    def path(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def index(self) -> OffsetIndex: ...
    @property
    def time_index(self) -> TimeIndex: ...

    def fileno(self) -> int: ...

    def pread(self, n: int, pos: int) -> bytes: ...

    def batches(self, start: int = 0, end: int | None = None, expect: int | None = None
                ) -> Iterator[tuple[int, _format.BatchHeader]]: ...

    def sendfile(self, out: int, pos: int, count: int) -> int: ...


def pread(seg: ReadableSegment, n: int, pos: int) -> bytes:
    """``n`` bytes of the ``.log`` file from ``pos`` (fewer at its end)."""
    return os.pread(seg.fileno(), n, pos)


def batches(seg: ReadableSegment, start: int = 0, end: int | None = None, expect: int | None = None
            ) -> Iterator[tuple[int, _format.BatchHeader]]:
    """(position, header) of each whole batch from ``start`` up to ``end``.

    Framing and offsets only (``expect``: the first batch's base offset, then
    each continues the last); CRCs are not checked. ``CorruptRecordError`` for a
    batch that does not fit before ``end`` (the end of whole batches).
    """
    end = seg.size if end is None else end
    try:
        # the descriptor asked for at each read: the caller may hold this generator
        # while the log closes the segment's idle files (and another file takes the
        # number), then go on
        for _, p, filepos, hdr in _scan.walk(seg.fileno, start, end, expect=expect,
                                             chunk=_SCAN_CHUNK):
            yield filepos + p, _format.as_header(hdr)
    except CorruptRecordError as e:
        raise e.at(seg.path, e.position, e.offset) from None


def first_header(seg: ReadableSegment) -> _format.BatchHeader | None:
    """The header of the segment's first batch, None if it holds none. Only the
    header is read, however large the batch; its framing is checked, and that
    the batch ends within the segment's data."""
    size = seg.size
    if not size:
        return None
    try:
        hdr = _format.read_header(seg.pread(_format.HEADER_SIZE, 0), 0, size)
    except CorruptRecordError as e:
        raise e.at(seg.path, 0, None) from None
    if hdr is None:
        raise CorruptRecordError(f"the first batch runs past the segment's {size} bytes "
                                 f"of data", seg.path, 0)
    return hdr


def find_position(seg: ReadableSegment, offset: int, end: int | None = None
                  ) -> tuple[int, _format.BatchHeader | None]:
    """Position of the first batch whose last offset is >= ``offset``.

    Returns (position, header), or (end, None) if no such batch.
    """
    end = seg.size if end is None else end
    try:
        ix_off, pos = seg.index.lookup(offset)
    except (OSError, ValueError):
        ix_off, pos = seg.base_offset, 0
    if pos > end:
        pos = 0
    try:
        for p, hdr in batches(seg, pos, end, ix_off):
            if hdr.last_offset >= offset:
                return p, hdr
        return end, None
    except CorruptRecordError:
        if not pos:
            raise
    # an index is a hint: scan from the segment start
    for p, hdr in batches(seg, 0, end, seg.base_offset):
        if hdr.last_offset >= offset:
            return p, hdr
    return end, None


def read(seg: ReadableSegment, offset: int, max_bytes: int, end: int | None = None,
         max_offset: int | None = None) -> MessageSet:
    """Whole batches holding messages from ``offset``, up to about ``max_bytes``.

    At least one whole batch is returned if one exists, however large.
    """
    end = seg.size if end is None else end
    start, hdr = find_position(seg, offset, end)
    while hdr is not None and not hdr.record_count:
        # an empty batch over offsets compaction removed: nothing to return from it
        offset = hdr.last_offset + 1
        start, hdr = find_position(seg, offset, end)
    if hdr is None:
        return MessageSet(b"", min_offset=offset, next_offset=offset)
    return read_at(seg, start, offset, max_bytes, end, max_offset, expect=hdr.base_offset)


def read_at(seg: ReadableSegment, start: int, min_offset: int, max_bytes: int, end: int,
            max_offset: int | None = None, expect: int | None = None) -> MessageSet:
    """Whole batches from file position ``start`` (a batch start), the first
    starting at offset ``expect`` when the caller knows it."""
    want = max(min(max_bytes, end - start), _format.HEADER_SIZE)
    buf = seg.pread(want, start)
    n = len(buf)
    if n < min(want, end - start):
        raise CorruptRecordError(f"the file ends at {start + n}, before the {end} bytes "
                                 f"of whole batches it held (cut back?)", seg.path, start + n)
    try:
        p, at = _format.whole_batches(buf, 0, n)
    except CorruptRecordError as e:
        raise e.at(seg.path, start + (e.position or 0)) from None
    last = _format.read_header(buf, at) if at >= 0 else None
    if last is None:
        # a short read, or a first batch larger than max_bytes: the walker reads
        # it whole or says what is wrong
        try:
            for buf, _, _, raw in _scan.walk(seg.fileno(), start, end, chunk=n or 1):
                p = len(buf)
                last = _format.as_header(raw)
                break
        except CorruptRecordError as e:
            raise e.at(seg.path, e.position, e.offset) from None
    after = last.last_offset + 1 if last is not None else None
    nxt = after if after is not None else min_offset
    if max_offset is not None:
        nxt = min(nxt, max_offset)
    return MessageSet(buf, 0, p, min_offset=min_offset, max_offset=max_offset,
                      next_offset=max(nxt, min_offset), file=seg,
                      file_position=start, path=seg.path, expect=expect, last_next=after)


def largest_timestamp(seg: ReadableSegment) -> int:
    """A sealed segment's largest record timestamp (-1: none): its time index's last
    entry, or (a segment rolled before its first entry) a walk over its batches."""
    last = seg.time_index.last_entry()
    if last is not None:
        return int(last[0])                  # (timestamp, offset)
    if not seg.size:
        return -1
    return max((h.max_timestamp for _, h in seg.batches()), default=-1)

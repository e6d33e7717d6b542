"""The one chunked batch walker over a segment file, ``walk``: readers' offset and
time lookups (``Segment.batches``), reads of batches larger than a chunk, recovery,
readers following a live segment, index rebuilds and the cleaner go through it.
(``iter()`` decodes whole chunks with ``_codec.decode.iter_messages``, and single headers are
read where one is all a caller needs.) ``scan`` is its checking use: framing, checksum,
offsets and timestamps of every batch, and the index entries a writer would have
made for them; it never raises for bad data, its result says where and why it
stopped."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol

from .._codec import decode as _decode, format as _format
from .._runtime.files import remove
from ..errors import CorruptRecordError
from ..index import OffsetIndex, TimeIndex, next_entry_position

CHUNK = 1 << 20


class ScannableSegment(Protocol):
    """What ``scan`` reads of a segment (``Segment`` has it): its first offset and
    its ``.log`` descriptor."""

    @property
    def base_offset(self) -> int: ...

    def fileno(self) -> int: ...


class Damage(CorruptRecordError):
    """What ``walk`` found wrong, at a file position. ``reason``: ``"short"`` (the
    file ends before ``end``), ``"partial"`` (a batch runs past ``end``), ``"zeros"``,
    ``"framing"``, ``"checksum"``, ``"offsets"``."""

    def __init__(self, reason: str, message: str, position: int,
                 offset: int | None = None) -> None:
        super().__init__(message, None, position, offset)
        self.reason = reason


def walk(fd: int | Callable[[], int], start: int, end: int, *, expect: int | None = None,
         check: bool = False, chunk: int = CHUNK, to_damage: bool = False
         ) -> Iterator[tuple[bytes, int, int, _format.RawHeader]]:
    """(buffer, position in it, the buffer's file position, header) of each whole
    batch in the file ``fd`` from position ``start`` (a batch start) to ``end``
    (``fd`` a callable: asked for the descriptor at each read, for a walk that
    may be left waiting while its file is closed and opened again).

    The file is read in ``chunk``-sized ``pread``s; a batch larger than a chunk is
    read whole. Framing is checked, and offsets: each batch starts where the last
    ended (after compaction, anywhere above it), the first at ``expect`` if given.
    ``check`` adds the checksum and the timestamps. The first bad batch raises
    ``Damage`` (without a path: the caller places it with ``.at``). A file shorter
    than ``end`` is damage at once, before any batch of the short read is yielded;
    ``to_damage`` (recovery's use) yields every whole batch up to the damage first.
    """
    pos = start
    header_size = _format.HEADER_SIZE
    get = fd if callable(fd) else None
    f = -1 if callable(fd) else fd
    while pos < end:
        if get is not None:
            f = get()
        want = min(chunk, end - pos)
        buf = os.pread(f, want, pos)
        n = len(buf)
        if n < want and not to_damage:
            raise Damage("short", f"the file ends at {pos + n}, before the {end} bytes "
                         f"of whole batches it held (cut back?)", pos + n)
        p = 0
        while p < n:
            try:
                hdr = _format.read_raw_header(buf, p, n)
            except CorruptRecordError as e:
                raise _framing_damage(buf, p, pos, e) from None
            if hdr is None:
                break
            expect = _checked(buf, p, pos, hdr, expect, check)
            yield buf, p, pos, hdr
            p += _format.LENGTH_END + hdr[1]     # the raw header's batch_length
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
                buf = os.pread(f, header_size, pos)
                if len(buf) < header_size:
                    raise Damage("short", "the file ends inside a batch header (cut back?)",
                                 pos + len(buf))
            try:
                hdr = _format.read_raw_header(buf, 0)     # the header alone: buf holds it
            except CorruptRecordError as e:
                raise _framing_damage(buf, 0, pos, e) from None
            assert hdr is not None
            base, length, _, _, _, _, _, _, _ = hdr
            size = _format.LENGTH_END + length
            if pos + size > end:
                raise Damage("partial", "batch runs past the end of the data", pos, base)
            big = os.pread(f, size, pos)
            if len(big) < size:
                raise Damage("short", "the file ends inside a batch (cut back?)",
                             pos + len(big), base)
            expect = _checked(big, 0, pos, hdr, expect, check)
            yield big, 0, pos, hdr
            p = size
        pos += p


def _framing_damage(buf: bytes, p: int, filepos: int, e: CorruptRecordError) -> Damage:
    """The damage for a header at ``buf[p:]`` that ``_codec.format.read_header`` refused."""
    zeros = not any(memoryview(buf)[p:p + _format.HEADER_SIZE])
    return Damage("zeros" if zeros else "framing",
                  "zero-filled space where a batch should start" if zeros else e.message,
                  filepos + p)


def _checked(buf: bytes, p: int, filepos: int, hdr: _format.RawHeader, expect: int | None,
             check: bool) -> int:
    """Check one batch; return the offset the next must start at."""
    base, _, _, _, attrs, last_delta, _, base_ts, max_ts = hdr
    if check and not _format.checksum_ok(buf, p, hdr):
        raise Damage("checksum", "checksum mismatch", filepos + p, base)
    if expect is not None and base != expect and not _format.continues(expect, base, attrs):
        raise Damage("offsets", f"batch starts at offset {base}, expected {expect}",
                     filepos + p, base)
    if check and (max_ts < base_ts or base_ts < 0):
        raise Damage("framing", "bad batch timestamps", filepos + p, base)
    return base + last_delta + 1


def next_data(fd: int, pos: int, end: int) -> int:
    """The first position at or after ``pos`` that may hold non-zero bytes: holes and
    never-written reserved blocks (what a writer preallocates) are skipped without
    reading them. ``end`` if there are none before it; ``pos`` where the file system
    cannot tell."""
    seek_data = getattr(os, "SEEK_DATA", None)
    if seek_data is None or pos >= end:
        return min(pos, end)
    try:
        return min(os.lseek(fd, pos, seek_data), end)
    except OSError as e:
        return end if e.errno == errno.ENXIO else pos


def zeros_to(fd: int, start: int, end: int) -> bool:
    """True if ``[start, end)`` of the file holds only zeros (or the file ends first)."""
    pos = next_data(fd, start, end)
    while pos < end:
        buf = os.pread(fd, min(CHUNK, end - pos), pos)
        if not buf:
            return True
        if buf.count(0) != len(buf):
            return False
        pos = next_data(fd, pos + len(buf), end)
    return True


@dataclass
class Survey:
    """What lies in a file from a bad batch at ``start`` to ``end`` (``survey``)."""

    start: int
    head_messages: int | None = None    # the bad batch's count, if its checksum is good
    head_base: int | None = None  # its base offset, likewise (what may be wrong with it)
    head_span: int | None = None  # the offsets it spans, likewise
    first: int | None = None      # the first good batch after it that continues the log
    batches: int = 0              # good batches after it that continue the log
    messages: int = 0             # their messages
    end_offset: int | None = None  # one past the last offset of the last of them
    data_end: int = 0             # after the last non-zero byte or the last good batch

    @property
    def data_bytes(self) -> int:
        """Bytes of data from ``start`` on (the rest up to ``end`` is zeros)."""
        return max(0, self.data_end - self.start)

    @property
    def good_messages(self) -> int:
        """Messages in the batches with a good checksum from ``start`` on."""
        return (self.head_messages or 0) + self.messages


def survey(fd: int, start: int, end: int, min_offset: int, first_only: bool = False
           ) -> Survey:
    """Look at the file ``fd`` from a bad batch at ``start`` to ``end``: the batches
    with a good checksum and a base offset at or past ``min_offset`` after it (a
    stale copy of an earlier batch does not count), their messages, and where the
    data ends (zero-filled space after it is a writer's reservation, not data).
    ``first_only`` stops at the first such batch (``first``).

    A writer writes a batch's header first, then its records, and nothing after a
    batch before it is complete. So if the header at ``start`` frames sanely (magic,
    a length within the file), the bytes it claims are its own records, and a batch
    found among them (a value that holds another log's batches) proves nothing
    about later writes: the search starts past them. A header that does not frame
    claims nothing: the search starts at the next byte. Zero-filled stretches are
    skipped at C speed, holes without reading them.
    """
    sv = Survey(start=start, data_end=start)
    skip = start + 1
    hdr = _format.framed_header(os.pread(fd, _format.HEADER_SIZE, start))
    if hdr is not None:
        size = hdr.size
        if start + size <= end:
            skip = start + size
            if not first_only:
                data = os.pread(fd, size, start)
                if len(data) == size and _format.checksum_ok(data, 0, hdr):
                    sv.head_messages = hdr.record_count
                    sv.head_base = hdr.base_offset
                    sv.head_span = hdr.last_offset_delta + 1
                    sv.data_end = skip
    magic = _format.MAGIC.to_bytes(1, "little")
    p = next_data(fd, start, end)
    while p < end:
        want = min(CHUNK + _format.HEADER_SIZE, end - p)
        buf = os.pread(fd, want, p)
        n = len(buf)
        if not n:
            break       # the file was cut back meanwhile (its writer sealed it)
        # this round owns positions [p, p + limit); a header starting in the last
        # HEADER_SIZE bytes of a chunk is the next round's (unless the file ends here)
        limit = n if n < want or p + n >= end else min(CHUNK, n - _format.HEADER_SIZE + 1)
        nonzero = len(buf[:limit].rstrip(b"\0"))
        if nonzero:
            sv.data_end = max(sv.data_end, p + nonzero)
        i = buf.find(magic, max(_format.LENGTH_END, skip - p + _format.LENGTH_END))
        while 0 <= i - _format.LENGTH_END < limit:
            q = i - _format.LENGTH_END
            after = i + 1
            hdr = _format.framed_header(buf, q)   # None: not a whole header in buf
            if hdr is not None:
                size = hdr.size
                if hdr.base_offset >= min_offset and p + q + size <= end:
                    data = buf if q + size <= n else os.pread(fd, size, p + q)
                    at = q if data is buf else 0
                    if len(data) >= at + size and _format.checksum_ok(data, at, hdr):
                        if sv.first is None:
                            sv.first = p + q
                            if first_only:
                                return sv
                        sv.batches += 1
                        sv.messages += hdr.record_count
                        sv.end_offset = hdr.last_offset + 1
                        skip = p + q + size
                        sv.data_end = max(sv.data_end, skip)
                        after = q + size + _format.LENGTH_END
            i = buf.find(magic, after)
        # the bytes of a good batch are data: no need to read them for zeros
        p = next_data(fd, max(p + limit, sv.data_end if sv.data_end == skip else 0), end)
    return sv


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
        same rule as ``ActiveSegment._appended``), timestamps."""
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


def scan(seg: ScannableSegment, start: int, end: int, next_offset: int | None,
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
            base, length, _, _, _, last_delta, _, _, max_ts = hdr
            res.add(filepos + p, base, max_ts)
            res.next_offset = base + last_delta + 1
            res.end = filepos + p + _format.LENGTH_END + length
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

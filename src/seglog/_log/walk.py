"""Walking a log directory's files without opening the log and without any lock:
every batch of every segment in order, each checked (``walk_log``), or only the
batches of an offset range found through the offset index (``read_range``), and
where the data of the last segment ends (``extent``). It works beside a live
writer: the batch the writer is copying in and the zeros it reserved past its
data are the end of the data, not damage, and segment files retention or
compaction delete under the walk are skipped. Damage is decided as opening the
log for writing decides it (``_tail``). ``repair`` (``seglog verify``, ``dump``,
``stats``, ``recover --truncate-at-damage``) stands on it and re-exports its
public names.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Generator, Iterator

from .._codec import decode as _decode, format as _format
from .._runtime.files import (LOG_START, MARKER, RECOVERY_POINT, SWAP, list_segments,
                              read_checkpoint, segment_path)
from .._storage.scan import CHUNK, Damage, survey, walk, zeros_to
from ..errors import CorruptRecordError, NotALogError
from ..index import offset_arrays
from ..recovery import read_marker, writer_alive

Progress = Callable[[int], None]     # called with the bytes just read
_LIVE_RETRIES = (0.002, 0.02, 0.2)   # looking again: a live writer finishing a batch or a swap
# ``read_range`` reads this much at a time: a range is near where the index points
RANGE_CHUNK = 64 << 10
Batch = tuple[str, int, bytes, int, _format.BatchHeader]


class DamageAt(CorruptRecordError):
    """Damage placed in its file, with ``reason``: ``"framing"``, ``"zeros"``,
    ``"partial"``, ``"short"``, ``"checksum"``, ``"offsets"`` or ``"records"`` (the
    record layout inside a batch does not add up). ``position`` is where the data
    stops being good (the start of the first bad batch); ``next_offset`` the offset
    that batch should have started at: where the log ends if it is cut there."""

    def __init__(self, reason: str, message: str, path: str, position: int,
                 offset: int | None, next_offset: int, torn: bool = False) -> None:
        super().__init__(message, path, position, offset)
        self.reason = reason
        self.next_offset = next_offset
        self.torn = torn      # a torn tail no writer holds: opening the log cuts it


@dataclass
class Problem:
    """One thing wrong: where (file, position, offset) and why. ``torn``: a torn
    tail (a batch cut short by a crash at the end of the log, which opening the log
    for writing cuts off, as recovery does)."""

    path: str
    position: int | None
    offset: int | None
    reason: str
    message: str
    torn: bool = False


@dataclass
class BatchInfo:
    """One batch as ``check`` saw it (``batches=True``)."""

    segment: str
    position: int
    size: int
    base_offset: int
    last_offset: int
    count: int
    attributes: int
    base_timestamp: int
    max_timestamp: int


@dataclass
class Extent:
    """One segment file as a walk saw it."""

    path: str
    base_offset: int
    file_bytes: int          # the file's size when the walk opened it
    data_bytes: int = 0      # whole good batches from its start: the bytes it stores
    inode: int = 0           # of the file walked (compaction may replace it later)
    ctime_ns: int = 0        # with the inode, tells the file walked from a later one
                             # that reuses its inode number


@dataclass
class WalkInfo:
    """What ``walk_log`` saw besides the batches.

    ``tail`` says why the last segment's data ends before its file does:
    ``"reserved"`` (zeros a writer preallocated), ``"appended"`` (a live writer
    wrote on after the walk had reached the end) or ``"writing"`` (a live writer's
    batch caught half copied in); None when the data fills the file.
    """

    listed: list[str] = field(default_factory=list)          # the log's segment files
    segments: list[Extent] = field(default_factory=list)     # walked, in order
    vanished: list[str] = field(default_factory=list)        # deleted under the walk
    # segments a committed compaction swap replaced but has not deleted yet (its
    # writer was killed or stopped in the middle): the next writer's open deletes them
    superseded: list[str] = field(default_factory=list)
    start_offset: int | None = None
    end_offset: int | None = None
    tail: str | None = None

    @property
    def stored_bytes(self) -> int:
        """Bytes of whole batches in the walked segments."""
        return sum(e.data_bytes for e in self.segments)

    @property
    def reserved_bytes(self) -> int:
        """File bytes past the data: a writer's zero-filled reservation (or a batch a
        live writer is copying in)."""
        return sum(e.file_bytes - e.data_bytes for e in self.segments)


def segment_paths(directory: str) -> list[tuple[int, str]]:
    """(base offset, path) of the segment files of a log directory, in order;
    ``NotALogError`` if it has no seglog marker."""
    if not os.path.isfile(os.path.join(directory, MARKER)):
        raise NotALogError(f"{directory} is not a seglog log (no {MARKER})")
    return [(b, segment_path(directory, b)) for b in list_segments(directory)]


def walk_log(directory: str, progress: Progress | None = None, decode: bool = True,
             info: WalkInfo | None = None, live: bool | None = None) -> Iterator[Batch]:
    """(segment path, file position, buffer, position in it, header) of every batch
    of the log in order, each checked: framing, checksum, offsets (each segment's
    first batch at its base offset, its file name; each batch where the one before
    ended; each segment where the one before ended), and with ``decode`` the record
    layout. Raises ``DamageAt`` at the first bad batch.

    Segments wholly below the log start offset (retention's, which a writer deletes
    when it opens) are not read; a segment file deleted after the listing was
    retention's or compaction's (``info.vanished``), and the walk goes on at the
    next. The last segment's data may end before its file (``info.tail``); it ends
    in damage only where a writer opening the log would refuse or cut something.
    ``info`` receives what the walk saw: segments, stored bytes, offsets. ``live``
    says whether a writer may be appending (None: find out; False: the caller holds
    the writer's lock).
    """
    info = WalkInfo() if info is None else info
    segs = segment_paths(directory)
    start = read_checkpoint(directory, LOG_START)
    if start is not None:
        bases = [b for b, _ in segs]
        below = sum(1 for nxt in bases[1:] if nxt <= start)
        segs = segs[below:]
    info.listed = [p for _, p in segs]
    swaps = committed_swaps(directory)
    expect: int | None = None
    for i, (base, path) in enumerate(segs):
        if expect is not None and base < expect and any(
                b < base < e and expect <= e for b, e in swaps):
            # the output of a committed swap was renamed in and has been walked; this
            # is one of the segments it replaced, which its writer (killed or
            # stopped) has not deleted yet: the next writer's open deletes it
            info.superseded.append(path)
            continue
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            info.vanished.append(path)
            expect = None              # nothing to check the next segment against
            continue
        with f:
            if expect is not None and base != expect and _gone(path, live, directory):
                info.vanished.append(path)      # a compaction's swap was deleting it
                expect = None
                continue
            if expect is not None and base != expect:
                if base < expect:
                    raise DamageAt("offsets", f"the segment starts at offset {base}, below "
                                   f"{expect} where the one before ended", path, 0, base,
                                   expect)
                raise DamageAt("offsets", f"offsets {expect}..{base - 1} are missing: the "
                               f"segments before hold offsets up to {expect - 1}, this one "
                               f"starts at {base}", path, 0, base, expect)
            st = os.fstat(f.fileno())
            ext = Extent(path, base, st.st_size, inode=st.st_ino, ctime_ns=st.st_ctime_ns)
            info.segments.append(ext)
            if info.start_offset is None:
                info.start_offset = max(base, start or 0)
            expect = yield from walk_segment(f.fileno(), ext, i + 1 == len(segs), directory,
                                              progress, decode, info, live)
            info.end_offset = expect


def committed_swaps(directory: str) -> list[tuple[int, int]]:
    """(base, end) of the compaction swaps committed in ``directory`` (their manifest
    written) and not finished: the output replaces the segments from base to end."""
    out = []
    for name in os.listdir(directory):
        if name.startswith(SWAP) and name[len(SWAP):].isdigit():
            end = read_checkpoint(directory, name)
            if end is not None:
                out.append((int(name[len(SWAP):]), end))
    return out


def _gone(path: str, live: bool | None, directory: str) -> bool:
    """True if the segment file at ``path`` is deleted within a moment by a live
    writer: compaction renames its output over the first segment of a group, then
    deletes the rest, so a walk can meet the output and then a segment it replaced."""
    if not (writer_alive(directory) if live is None else live):
        return False
    for delay in (0.0,) + _LIVE_RETRIES:
        time.sleep(delay)
        if not os.path.exists(path):
            return True
    return False


def walk_segment(fd: int, ext: Extent, last: bool, directory: str,
                  progress: Progress | None, decode: bool, info: WalkInfo,
                  live: bool | None, start: int = 0, expect: int | None = None,
                  chunk: int = CHUNK) -> Generator[Batch, None, int]:
    """The batches of one segment file from ``start`` (a batch start, 0 or where the
    offset index points; its first batch at ``expect``), read ``chunk`` bytes at a
    time; returns the offset after its last. ``ext.data_bytes`` ends where the good
    data does (from ``start``)."""
    path, base, size = ext.path, ext.base_offset, ext.file_bytes
    nxt = base if expect is None else expect
    ext.data_bytes = start
    try:
        for buf, p, filepos, raw in walk(fd, start, size, expect=nxt, check=True,
                                         chunk=chunk, to_damage=True):
            hdr = _format.as_header(raw)     # the visitors take it by its fields
            b = hdr.base_offset
            if decode:
                try:
                    for _ in _decode.decode_batch(buf, p, hdr):
                        pass
                except CorruptRecordError as e:
                    raise DamageAt("records", e.message, path, filepos + p, b, nxt) from None
            nxt = hdr.last_offset + 1
            end = filepos + p + hdr.size
            if progress is not None:
                progress(end - ext.data_bytes)
            ext.data_bytes = end
            yield path, filepos + p, buf, p, hdr
    except Damage as d:
        message = d.message
        if d.reason == "offsets" and not ext.data_bytes:
            message = (f"the first batch starts at offset {d.offset}, not at the segment's "
                       f"base offset {base} (its file name)")
        elif d.reason == "short":
            message = (f"the file ends at {os.fstat(fd).st_size}, inside the batch at "
                       f"{ext.data_bytes} (cut back?)")
        if not last:
            raise DamageAt(d.reason, message, path, ext.data_bytes, d.offset, nxt) from None
        info.tail = _tail(fd, ext, d.reason, message, d.offset, nxt, directory, live)
    return nxt


def _continues_at(fd: int, pos: int, nxt: int) -> bool:
    """True if a whole batch with a good checksum that continues the log (base
    offset ``nxt``, or above it in a compacted batch) starts at ``pos``."""
    hdr = _format.sane_header(os.pread(fd, _format.HEADER_SIZE, pos))
    if hdr is None or not _format.continues(nxt, hdr.base_offset, hdr.attributes):
        return False
    data = os.pread(fd, hdr.size, pos)
    return len(data) == hdr.size and _format.checksum_ok(data, 0, hdr)


def _tail(fd: int, ext: Extent, reason: str, message: str, offset: int | None, nxt: int,
          directory: str, live: bool | None) -> str:
    """Why the last segment's good data ends at ``ext.data_bytes``: ``"reserved"``,
    ``"appended"`` or ``"writing"`` (see ``WalkInfo.tail``), or ``DamageAt``.

    The rules are recovery's, so that this agrees with what opening the log for
    writing would do: damage where a clean shutdown recorded more data, below the
    recovery point (flushed data), or followed by a good batch that continues the
    log; a torn tail (which opening cuts) unless its writer is still running. The
    checkpoints are read before the file is looked at again: a live writer that
    wrote on meanwhile has put a good batch where the walk stopped.
    """
    at = ext.data_bytes
    torn = False
    rp = read_checkpoint(directory, RECOVERY_POINT)
    marker = read_marker(directory) or {}
    alive = writer_alive(directory) if live is None else live
    if _continues_at(fd, at, nxt):
        return "appended"
    size = os.fstat(fd).st_size       # now: a writer that closed cut the file back
    why: str | None = None
    clean_size = marker.get("active_size")
    if (marker.get("active_base") == ext.base_offset and isinstance(clean_size, int)
            and clean_size == size and clean_size > at):
        why = f"the log was shut down cleanly with data up to position {clean_size}"
    elif rp is not None and nxt < rp:
        why = f"inside data flushed before (recovery point {rp})"
    elif zeros_to(fd, at, size):
        return "reserved"
    elif survey(fd, at, size, nxt, first_only=True).first is not None:
        why = "followed by valid batches"
    elif not alive:
        why = "a torn tail: opening the log for writing cuts it off"
        torn = True
    for delay in _LIVE_RETRIES if alive else ():
        if _continues_at(fd, at, nxt):
            return "appended"
        time.sleep(delay)
    if _continues_at(fd, at, nxt):
        return "appended"
    if why is None:
        return "writing"
    raise DamageAt(reason, f"{message} ({why})", ext.path, at, offset, nxt, torn)


def index_floor(index_path: str, offset: int, base: int, data_size: int
                ) -> tuple[int, int] | None:
    """(offset, position) of the offset-index entry at or below ``offset`` in the
    index file of the segment at ``base`` holding ``data_size`` bytes, by a binary
    search of ``pread`` calls (a few dozen bytes, however large the index); None without
    one. A slot whose position is 0 is empty (the segment's start needs no entry);
    an entry past the data is not used. A hint: the caller checks the batch there."""
    try:
        fd = os.open(index_path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        slots = os.fstat(fd).st_size // 8

        def entry(i: int) -> tuple[int, int] | None:
            rel, pos = offset_arrays(os.pread(fd, 8, i * 8))
            return (base + rel[0], pos[0]) if len(pos) and pos[0] else None
        lo, hi, found = 0, slots, None
        while lo < hi:
            mid = (lo + hi) // 2
            e = entry(mid)
            if e is not None and e[0] <= offset:
                found, lo = e, mid + 1
            else:
                hi = mid
        return found if found is not None and found[1] < data_size else None
    finally:
        os.close(fd)


def _start_in(fd: int, path: str, base: int, offset: int, size: int) -> tuple[int, int]:
    """(position, its batch's base offset) to walk a segment from for ``offset``:
    where the offset index points, if a batch header that starts at or below
    ``offset`` is there, else the segment's start."""
    hint = index_floor(path[:-4] + ".index", offset, base, size)
    if hint is not None:
        hdr = _format.sane_header(os.pread(fd, _format.HEADER_SIZE, hint[1]))
        if hdr is not None and base <= hdr.base_offset <= offset:
            return hint[1], hdr.base_offset
    return 0, base


@dataclass
class RangeRead:
    """What ``read_range`` found: the batches holding the offsets asked for, the
    damage met on the way (reading stops there), and the bytes read."""

    batches: list[BatchInfo] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    bytes_read: int = 0


def read_range(directory: str, lo: int, hi: int | None, progress: Progress | None = None
               ) -> RangeRead:
    """Every batch holding an offset in ``[lo, hi)`` (``hi`` None: to the end), each
    checked as ``check`` checks it, read from where the segment's offset index
    points (``seglog dump --from/--to``): only the segments and the part of the
    first that can hold them are read, not the whole log. Damage met is listed
    and ends the read; the rest of the log is not checked. Reads only."""
    out = RangeRead()
    segs = segment_paths(directory)
    first = 0
    for i, (base, _) in enumerate(segs):
        if base <= lo:
            first = i
    info = WalkInfo(listed=[p for _, p in segs])

    def counted(n: int) -> None:
        out.bytes_read += n
        if progress is not None:
            progress(n)
    for i in range(first, len(segs)):
        base, path = segs[i]
        if hi is not None and base >= hi:
            break
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            continue                      # retention's or compaction's, meanwhile
        with f:
            st = os.fstat(f.fileno())
            hint = _start_in(f.fileno(), path, base, lo, st.st_size)
            for pos, expect in (hint, (0, base)) if hint[0] else (hint,):
                # an index is a hint: damage met from where it points is looked for
                # again from the segment's start (the index may be what is wrong)
                kept = len(out.batches)
                ext = Extent(path, base, st.st_size, inode=st.st_ino, ctime_ns=st.st_ctime_ns)
                try:
                    if _range_in(f.fileno(), ext, i + 1 == len(segs), directory, counted,
                                 info, pos, expect, lo, hi, out):
                        return out
                    break
                except DamageAt as e:
                    del out.batches[kept:]
                    if pos and expect != base:
                        continue
                    out.problems.append(Problem(e.path or directory, e.position, e.offset,
                                                e.reason, e.message, e.torn))
                    return out
    return out


def _range_in(fd: int, ext: Extent, last: bool, directory: str, counted: Progress,
              info: WalkInfo, pos: int, expect: int, lo: int, hi: int | None,
              out: RangeRead) -> bool:
    """``read_range`` in one segment from ``pos``; True once past ``hi``."""
    for bpath, bpos, _b, _p, hdr in walk_segment(fd, ext, last, directory, counted, True,
                                                  info, None, pos, expect, RANGE_CHUNK):
        first_off, last_off = hdr.base_offset, hdr.last_offset
        if hi is not None and first_off >= hi:
            return True
        if last_off >= lo:
            out.batches.append(BatchInfo(
                bpath, bpos, hdr.size, first_off, last_off, hdr.record_count,
                hdr.attributes, hdr.base_timestamp, hdr.max_timestamp))
    return False


def extent(directory: str) -> tuple[int | None, int | None, int]:
    """(start offset, end offset, bytes of data) of a log, for a progress total and
    a range's note: each segment file's length, the last one's only up to its last
    whole batch (a writer's reserved zeros past it are not data), and the end where
    that batch ends. Reads a few pages: the last segment from its last offset-index
    entry on. Files deleted meanwhile count nothing; (None, None, 0) without
    segments."""
    segs = segment_paths(directory)
    if not segs:
        return None, None, 0
    total = 0
    end: int | None = None
    for i, (base, path) in enumerate(segs):
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if i + 1 < len(segs):
                    total += size
                    continue
                pos, end = _start_in(f.fileno(), path, base, 1 << 62, size)
                data_end = pos
                try:
                    for _, p, filepos, hdr in walk(f.fileno(), pos, size, expect=end,
                                                   to_damage=True):
                        base, length, _, _, _, last_delta, _, _, _ = hdr
                        data_end = filepos + p + _format.LENGTH_END + length
                        end = base + last_delta + 1
                except CorruptRecordError:
                    pass                      # zeros (reserved), or damage: data ends
                total += data_end
        except FileNotFoundError:
            pass
    start = max(segs[0][0], read_checkpoint(directory, LOG_START) or 0)
    return start, end, total


def data_bytes(directory: str) -> int:
    """The bytes of data in a log's segment files (``extent``)."""
    return extent(directory)[2]




__all__ = ["DamageAt", "Problem", "BatchInfo", "Extent", "WalkInfo", "segment_paths",
           "walk_log", "walk_segment", "committed_swaps", "index_floor", "RangeRead",
           "read_range", "extent", "data_bytes"]

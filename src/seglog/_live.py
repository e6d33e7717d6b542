"""A readonly view of a log another process writes: its active segment grows under
the reader, new segments appear, retention and compaction remove or replace files.

Readers never map segment files and never write; they scan forward from what they
have seen, checking checksums, and re-list the directory when it changed.
"""

from __future__ import annotations

import os
import time
from typing import Callable

from . import codec
from ._files import LOG_START, list_segments, read_checkpoint, superseded_segments
from ._scan import ScanResult, scan
from .errors import CorruptRecordError
from .recovery import continuing_batch_after, read_marker
from .segment import Segment


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
    hdr = codec.framed_header(os.pread(seg.fileno(), codec.HEADER_SIZE, pos))
    return hdr is not None and hdr[codec.H_BASE] == base_offset


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
    if seg.corruption is None and not any(os.pread(seg.fileno(), codec.HEADER_SIZE, start)):
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
        seg.corruption = None
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
            seg.corruption = _corruption_error(seg, res)

"""Checking a log's files from end to end, and the operator's way out of damage.

``check`` reads every batch of every segment of a log directory (framing, checksum,
offsets within and across segments and against each segment's name, record
layout) and every index entry, without opening the log and without any lock: it
is what ``seglog verify``, ``dump`` and ``stats`` stand on. It works beside a live
writer: the batch the writer is copying in and the zeros it reserved past its data
are the end of the data, not damage, and segment files retention or compaction
delete under the walk are skipped. On a log no writer holds, it finds damage
exactly where opening the log for writing would refuse or cut something, or
reading it would fail.

``plan_cut`` and ``cut`` are ``seglog recover --truncate-at-damage``: when the
library refuses to open a log (damage followed by valid data on the same boot, or
inside flushed data), the operator may cut it at the first bad batch, after seeing
exactly what will be lost.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Generator, Iterator

from . import _marker, _platform, _writers, codec
from ._files import (CLEANED, LOCK_FILE, LOG_START, MARKER, RECOVERY_POINT, SWAP, fsync_dir,
                     fsync_file, list_segments, read_checkpoint, remove, segment_path, write_checkpoint)
from ._scan import Damage, survey, walk, zeros_to
from .errors import CorruptRecordError, LogLockedError, NotALogError, SeglogError
from .index import TimeIndex, entries_valid, offset_arrays
from .recovery import read_marker, writer_alive

Progress = Callable[[int], None]     # called with the bytes just read
_LIVE_RETRIES = (0.002, 0.02, 0.2)   # looking again: a live writer finishing a batch or a swap
Batch = tuple[str, int, bytes, int, codec.BatchHeader]


class DamageAt(CorruptRecordError):
    """Damage placed in its file, with ``reason``: ``"framing"``, ``"zeros"``,
    ``"partial"``, ``"short"``, ``"checksum"``, ``"offsets"`` or ``"records"`` (the
    record layout inside a batch does not add up). ``position`` is where the data
    stops being good (the start of the first bad batch); ``next_offset`` the offset
    that batch should have started at: where the log ends if it is cut there."""

    def __init__(self, reason: str, message: str, path: str, position: int,
                 offset: int | None, next_offset: int) -> None:
        super().__init__(message, path, position, offset)
        self.reason = reason
        self.next_offset = next_offset


@dataclass
class Problem:
    """One thing wrong: where (file, position, offset) and why."""

    path: str
    position: int | None
    offset: int | None
    reason: str
    message: str


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


@dataclass
class CheckReport:
    """What ``check`` found in one log directory. Offsets as a ``Log`` has them:
    ``start_offset`` the first offset in the log, ``end_offset`` one past the last
    message (the next to assign), ``last_offset`` the last message's (None: no
    message). ``bytes`` counts whole batches, ``reserved_bytes`` the files' space
    past them (a writer's preallocation)."""

    path: str
    segments: int = 0
    batches: int = 0
    messages: int = 0
    bytes: int = 0
    reserved_bytes: int = 0
    start_offset: int | None = None
    end_offset: int | None = None
    last_offset: int | None = None
    tail: str | None = None
    vanished: list[str] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    stopped_at_damage: bool = False   # the walk ended at a bad batch: the rest is unread

    @property
    def ok(self) -> bool:
        """True when the check found no problem at all."""
        return not self.problems


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
            expect = yield from _walk_segment(f.fileno(), ext, i + 1 == len(segs), directory,
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


def _walk_segment(fd: int, ext: Extent, last: bool, directory: str,
                  progress: Progress | None, decode: bool, info: WalkInfo,
                  live: bool | None) -> Generator[Batch, None, int]:
    """The batches of one segment file; returns the offset after its last."""
    path, base, size = ext.path, ext.base_offset, ext.file_bytes
    nxt = base
    try:
        for buf, p, filepos, hdr in walk(fd, 0, size, expect=base, check=True,
                                         to_damage=True):
            b = hdr[codec.H_BASE]
            if decode:
                try:
                    for _ in codec.decode_batch(buf, p, hdr):
                        pass
                except CorruptRecordError as e:
                    raise DamageAt("records", e.message, path, filepos + p, b, nxt) from None
            nxt = codec.last_offset(hdr) + 1
            end = filepos + p + codec.batch_size(hdr)
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
    if progress is not None and size > ext.data_bytes:
        progress(size - ext.data_bytes)
    return nxt


def _continues_at(fd: int, pos: int, nxt: int) -> bool:
    """True if a whole batch with a good checksum that continues the log (base
    offset ``nxt``, or above it in a compacted batch) starts at ``pos``."""
    hdr = codec.sane_header(os.pread(fd, codec.HEADER_SIZE, pos))
    if hdr is None or not codec.continues(nxt, hdr[codec.H_BASE], hdr[codec.H_ATTRS]):
        return False
    data = os.pread(fd, codec.batch_size(hdr), pos)
    return len(data) == codec.batch_size(hdr) and codec.checksum_ok(data, 0, hdr)


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
    for delay in _LIVE_RETRIES if alive else ():
        if _continues_at(fd, at, nxt):
            return "appended"
        time.sleep(delay)
    if _continues_at(fd, at, nxt):
        return "appended"
    if why is None:
        return "writing"
    raise DamageAt(reason, f"{message} ({why})", ext.path, at, offset, nxt)


def check(directory: str, progress: Progress | None = None,
          batches: list[BatchInfo] | None = None) -> CheckReport:
    """Read and check every batch and index entry of the log in ``directory``.

    Never raises for damage: the report lists it (reading stops at the first bad
    batch; index problems are listed and reading goes on). ``batches``, if given,
    receives every good batch. Takes no lock and changes nothing.
    """
    rep = CheckReport(path=directory)
    info = WalkInfo()
    starts: dict[str, dict[int, int]] = {}
    stopped: str | None = None        # the file the walk stopped in, at damage
    try:
        for path, pos, _buf, _p, hdr in walk_log(directory, progress, info=info):
            size = codec.batch_size(hdr)
            base, last = hdr[codec.H_BASE], codec.last_offset(hdr)
            starts.setdefault(path, {})[pos] = base
            rep.batches += 1
            rep.messages += hdr[codec.H_COUNT]
            if batches is not None:
                batches.append(BatchInfo(path, pos, size, base, last, hdr[codec.H_COUNT],
                                         hdr[codec.H_ATTRS], hdr[codec.H_BASE_TS],
                                         hdr[codec.H_MAX_TS]))
    except DamageAt as e:
        rep.problems.append(Problem(e.path or directory, e.position, e.offset, e.reason,
                                    e.message))
        info.end_offset = e.next_offset          # the good data ends there
        stopped = e.path
    rep.segments = len(info.listed) - len(info.vanished) - len(info.superseded)
    rep.bytes, rep.reserved_bytes = info.stored_bytes, info.reserved_bytes
    for seen in info.segments:
        if seen.path == stopped:
            # the walk stopped at the damage: what follows it in that file is unread
            # (bad or later batches), not a writer's reserved zeros
            rep.reserved_bytes -= seen.file_bytes - seen.data_bytes
    rep.stopped_at_damage = stopped is not None
    rep.start_offset, rep.end_offset = info.start_offset, info.end_offset
    if rep.end_offset is not None and rep.start_offset is not None \
            and rep.end_offset > rep.start_offset:
        rep.last_offset = rep.end_offset - 1
    rep.tail, rep.vanished, rep.superseded = info.tail, info.vanished, info.superseded
    walked = {e.path: e for e in info.segments}
    for path in info.listed:
        if path in info.vanished or path in info.superseded:
            continue
        try:
            # a committed swap's output renamed in, its indexes not yet: they are the
            # ones the next writer's open puts beside it (before the commit point, or
            # before its .log is renamed in, the cleaned files are not the segment's)
            cleaned = os.path.join(directory, CLEANED + os.path.basename(path))
            manifest = os.path.join(directory, SWAP + os.path.basename(path)[:-4])
            swapped = os.path.exists(manifest) and not os.path.exists(cleaned)
            stem = cleaned if swapped and os.path.exists(cleaned[:-4] + ".index") else path
            problems = _check_indexes(path, int(os.path.basename(path)[:-4]),
                                      starts.get(path, {}), os.path.getsize(path), stem)
            # compaction renames a segment's new .log over the old first, then its
            # indexes: if the .log walked is still there, the indexes read were its own.
            # The inode alone does not tell: a file created since (a later pass's
            # output, the walked file deleted meanwhile) can reuse its number, so the
            # change time must be the walk's too (a file written since, the active
            # segment, is then checked again by a later verify, not judged now)
            ext = walked.get(path)
            now = os.stat(path)
            if ext is None or (now.st_ino, now.st_ctime_ns) == (ext.inode, ext.ctime_ns):
                rep.problems += problems
        except FileNotFoundError:
            if path not in walked:
                rep.segments -= 1             # deleted after the walk ended
    return rep


def _check_indexes(path: str, base: int, starts: dict[int, int], size: int,
                   stem: str | None = None) -> list[Problem]:
    """Every offset-index entry points at a batch start holding its offset; the time
    index ascends. Missing index files are not damage (a writer rebuilds them).
    ``stem``: the index files' path less its extension, if not the segment's."""
    out: list[Problem] = []
    stem = (path if stem is None else stem)[:-4]
    ipath, tpath = stem + ".index", stem + ".timeindex"
    if os.path.exists(ipath):
        with open(ipath, "rb") as f:
            rel, pos = offset_arrays(f.read())
        n = len(pos)
        while n and pos[n - 1] == 0:           # preallocated, unused slots
            n -= 1
        rel, pos = rel[:n], pos[:n]
        if not entries_valid(rel, pos, (), size):
            out.append(Problem(ipath, None, None, "index", "offset index entries do not "
                               "ascend or point outside the segment"))
        for r, p in zip(rel, pos):
            if starts and p not in starts:
                if p < max(starts):
                    out.append(Problem(ipath, p, base + r, "index",
                                       f"index entry for offset {base + r} points at "
                                       f"position {p}, not a batch start"))
                break
            if starts and starts[p] > base + r:
                out.append(Problem(ipath, p, base + r, "index",
                                   f"index entry for offset {base + r} points at a batch "
                                   f"starting at {starts[p]}"))
                break
    if os.path.exists(tpath):
        with open(tpath, "rb") as f:
            data = f.read()
        stamps = [TimeIndex.ENTRY.unpack_from(data, i)[0]
                  for i in range(0, len(data) - len(data) % TimeIndex.SIZE, TimeIndex.SIZE)]
        while stamps and stamps[-1] == 0:
            stamps.pop()
        if not entries_valid((), (), stamps, size):
            out.append(Problem(tpath, None, None, "index", "time index entries do not ascend"))
    return out


@dataclass
class CutPlan:
    """What ``cut`` would do: cut ``path`` at ``position`` (the first bad batch) and
    delete the segments after it. The log then ends at ``offset``.

    What goes: ``lost_messages`` in the batches with a good checksum from the cut
    on (offsets up to ``lost_end_offset``), ``valid_after`` of those batches after
    the damaged one (data a torn write would not have left); if ``damaged_unread``,
    also what the damaged bytes held, which cannot be counted. ``lost_bytes`` of
    data, and ``reserved_bytes`` of zeros a writer had preallocated.
    """

    directory: str
    path: str
    position: int
    offset: int
    reason: str
    message: str
    lost_bytes: int
    reserved_bytes: int
    lost_messages: int
    lost_end_offset: int | None
    damaged_unread: bool
    later_segments: list[str]
    valid_after: int
    start_offset: int | None = None     # the log's first offset (None: not known)


def plan_cut(directory: str, live: bool | None = None) -> CutPlan | None:
    """Where the first damage is and what cutting there loses; None if the log's
    batches are all good. Reads only. ``live`` as ``walk_log``'s."""
    info = WalkInfo()
    try:
        for _ in walk_log(directory, info=info, live=live):
            pass
    except DamageAt as e:
        assert e.path is not None and e.position is not None
        segs = [p for _, p in segment_paths(directory)]
        later = segs[segs.index(e.path) + 1:] if e.path in segs else []
        lost = reserved = messages = valid = 0
        end: int | None = None
        unread = False
        for path in [e.path] + later:
            at = e.position if path == e.path else 0
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                sv = survey(f.fileno(), at, size, e.next_offset)
            lost += sv.data_bytes
            reserved += size - at - sv.data_bytes
            messages += sv.good_messages
            valid += sv.batches + (path != e.path and sv.head_messages is not None)
            head_end = None
            if sv.head_base is not None and sv.head_span is not None:
                # a bad batch's own base offset may be what is wrong: it belongs at
                # next_offset at least
                head_end = max(sv.head_base, e.next_offset) + sv.head_span
            if path == e.path:
                unread = sv.head_messages is None
            ends = [x for x in (end, head_end, sv.end_offset) if x is not None]
            end = max(ends) if ends else None
        return CutPlan(directory, e.path, e.position, e.next_offset, e.reason, e.message,
                       lost, reserved, messages, end, unread, later, valid,
                       info.start_offset)
    return None


def cut(plan: CutPlan) -> None:
    """Carry a ``plan_cut`` out: under the writer's lock (``LogLockedError`` if a
    writer has the log), cut the segment at the damage, delete the later segments
    and the cut segment's indexes (the next open rebuilds them) and lower the
    recovery point to the cut. Refuses (``SeglogError``) if the files changed
    since the plan was made."""
    d = plan.directory
    fd = os.open(os.path.join(d, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            _platform.flock(fd, _platform.LOCK_EX_NB)
        except BlockingIOError:
            raise LogLockedError(f"{d} is open for writing by another process") from None
        again = plan_cut(d, live=False)
        if again is None or (again.path, again.position) != (plan.path, plan.position):
            raise SeglogError(f"the files of {d} changed since the plan was made; "
                              f"plan again")
        if _marker.ownership(d, os.listdir(d)) == "empty":     # raises for foreign files
            raise NotALogError(f"{d} holds no log")
        _writers.invalidate(d)      # the next multi-writer recovers from the files
        rp = read_checkpoint(d, RECOVERY_POINT)
        if rp is None or rp > plan.offset:
            write_checkpoint(d, RECOVERY_POINT, plan.offset)
        with open(plan.path, "r+b") as f:
            f.truncate(plan.position)
            fsync_file(f.fileno())
        first = segment_paths(d)[0][1]
        for p in plan.later_segments + [plan.path]:
            if p != plan.path or (plan.position == 0 and p != first):
                remove(p)                      # (an emptied segment after others too)
            remove(p[:-4] + ".index")
            remove(p[:-4] + ".timeindex")
        fsync_dir(d)
    finally:
        os.close(fd)


__all__ = ["check", "CheckReport", "Problem", "BatchInfo", "plan_cut", "cut", "CutPlan",
           "walk_log", "segment_paths", "DamageAt"]

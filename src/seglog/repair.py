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
from typing import Callable, Protocol

from ._codec import format as _format
from ._storage import marker as _marker
from ._runtime import platform as _platform
from ._views import verdict as _verdict
from ._shared import writers as _writers
from ._runtime.files import (CLEANED, LOCK_FILE, RECOVERY_POINT, SWAP, fsync_dir, fsync_file,
                             read_checkpoint, remove, write_checkpoint)
from ._storage.scan import survey
from ._log.walk import (BatchInfo, DamageAt, Extent, Problem, Progress, RangeRead, WalkInfo,
                        committed_swaps, data_bytes, extent, index_floor, read_range,
                        segment_paths, walk_log)
from .errors import LogClosedError, LogLockedError, NotALogError, SeglogError
from .index import TimeIndex, entries_valid, offset_arrays


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
    cut: CutPlan | None = None        # at damage: what lies after it (what a cut loses)
    checked_at: int = 0               # when the check ran (ms since the epoch)

    @property
    def ok(self) -> bool:
        """True when the check found no problem at all."""
        return not self.problems

    @property
    def name(self) -> str:
        """The log's directory name."""
        return os.path.basename(os.path.abspath(self.path))

    def summary(self, name: str | None = None) -> str:
        """What was read, and at damage where it is, what is at stake and what to do
        next: one scope per line (``seglog verify`` prints it)."""
        return "\n".join(_verdict.report_lines(self, name or self.name))

    def __str__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        return _verdict.report_html([self])


class CheckReports(list[CheckReport]):
    """The reports of several logs (a topic's partitions, ``Topic.verify()``); a
    notebook shows them as one table."""

    @property
    def ok(self) -> bool:
        """True when no log has a problem."""
        return all(r.ok for r in self)

    def __str__(self) -> str:
        return "\n".join(r.summary() for r in self)

    def _repr_html_(self) -> str:
        return _verdict.report_html(list(self))


def latest(path: str) -> CheckReport | None:
    """The report of this process's latest ``check`` of the log at ``path`` (the
    notebook views say what was checked, and when), None if it was not checked."""
    rep = _verdict.latest(path)
    return rep if isinstance(rep, CheckReport) else None


class VerifiableLog(Protocol):
    """What ``verify`` needs of a log (``Log`` has it; this module sits below it):
    whether it is closed, and its directory."""

    @property
    def closed(self) -> bool: ...
    @property
    def path(self) -> str: ...


def verify(log: VerifiableLog) -> CheckReport:
    """Read and check every batch and index entry of the log, as ``seglog verify``
    does (``check``): a ``CheckReport`` that says what was read, and at damage where
    it is, what is at stake and what to do next (a notebook shows it as a table;
    ``str()`` is the command's text). Reads only and takes no lock, beside any
    writer; the log's notebook views then say when it was verified and what was
    found. ``LogClosedError`` if the log is closed. (``Log.verify``.)"""
    if log.closed:
        raise LogClosedError(f"{log.path} is closed")
    return check(log.path)


def check(directory: str, progress: Progress | None = None,
          batches: list[BatchInfo] | None = None, *,
          visit: Callable[[bytes, int, _format.BatchHeader], None] | None = None,
          decode: bool = True) -> CheckReport:
    """Read and check every batch and index entry of the log in ``directory``.

    Never raises for damage: the report lists it (reading stops at the first bad
    batch; index problems are listed and reading goes on), with what lies after
    the damage (``cut``). ``batches``, if given, receives every good batch;
    ``visit`` is called with each good batch (its buffer, position and header).
    ``decode=False`` leaves the record layout inside batches unchecked (``stats``
    counts from headers): such a check is not remembered as the log's ``latest``.
    Takes no lock and changes nothing.
    """
    rep = CheckReport(path=directory, checked_at=int(time.time() * 1000))
    info = WalkInfo()
    starts: dict[str, dict[int, int]] = {}
    stopped: str | None = None        # the file the walk stopped in, at damage
    try:
        for path, pos, buf, p, hdr in walk_log(directory, progress, decode, info=info):
            size = hdr.size
            base, last = hdr.base_offset, hdr.last_offset
            starts.setdefault(path, {})[pos] = base
            rep.batches += 1
            rep.messages += hdr.record_count
            if visit is not None:
                visit(buf, p, hdr)
            if batches is not None:
                batches.append(BatchInfo(path, pos, size, base, last, hdr.record_count,
                                         hdr.attributes, hdr.base_timestamp,
                                         hdr.max_timestamp))
    except DamageAt as e:
        rep.problems.append(Problem(e.path or directory, e.position, e.offset, e.reason,
                                    e.message, e.torn))
        info.end_offset = e.next_offset          # the good data ends there
        stopped = e.path
        try:
            rep.cut = _plan(directory, e, info.start_offset)
        except FileNotFoundError:
            pass            # a live writer's retention took the files meanwhile
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
    if decode:
        _verdict.remember(rep.path, rep)
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
    # the damaged batch's message count as its header says, if the header is sane
    # (its checksum failed: the count may be wrong too)
    damaged_count: int | None = None

    @property
    def lost_segments(self) -> int:
        """Segment files the cut changes: the damaged one and every later one."""
        return 1 + len(self.later_segments)


def plan_cut(directory: str, live: bool | None = None) -> CutPlan | None:
    """Where the first damage is and what cutting there loses; None if the log's
    batches are all good. Reads only. ``live`` as ``walk_log``'s."""
    info = WalkInfo()
    try:
        for _ in walk_log(directory, info=info, live=live):
            pass
    except DamageAt as e:
        return _plan(directory, e, info.start_offset)
    return None


def _plan(directory: str, e: DamageAt, start_offset: int | None) -> CutPlan:
    """What a cut at the damage ``e`` loses: the good batches from it to the end of
    the log, counted by a survey of the rest of its file and the later segments."""
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
    with open(e.path, "rb") as f:
        head = _format.sane_header(os.pread(f.fileno(), _format.HEADER_SIZE, e.position))
    count = None
    # a count larger than the offsets the batch spans, or than its bytes, is damage
    # in the count itself: not believed
    if head is not None and 0 < head.record_count <= min(head.last_offset_delta + 1,
                                                           head.size):
        count = head.record_count
    return CutPlan(directory, e.path, e.position, e.next_offset, e.reason, e.message,
                   lost, reserved, messages, end, unread, later, valid, start_offset, count)


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
        _verdict.forget(d)          # the check before the cut is history
    finally:
        os.close(fd)


__all__ = ["check", "CheckReport", "CheckReports", "Problem", "BatchInfo", "plan_cut", "cut",
           "CutPlan", "walk_log", "segment_paths", "DamageAt", "read_range", "RangeRead",
           "data_bytes", "extent", "latest", "WalkInfo", "Extent", "committed_swaps",
           "index_floor"]

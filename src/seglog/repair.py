"""Checking a log's files from end to end, and the operator's way out of damage.

``check`` reads every batch of every segment of a log directory (framing, checksum,
offset continuity within and across segments, record layout) and every index entry,
without opening the log and without any lock: it is what ``seglog verify`` and
``seglog dump`` stand on. ``plan_cut`` and ``cut`` are ``seglog recover
--truncate-at-damage``: when the library refuses to open a log (damage followed by
valid data on the same boot, or inside flushed data), the operator may cut it at
the first bad batch, after seeing exactly what will be lost.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Iterator

from . import _marker, _platform, codec
from ._files import (LOCK_FILE, MARKER, RECOVERY_POINT, fsync_dir, fsync_file, list_segments,
                     read_checkpoint, remove, write_checkpoint)
from ._scan import Damage, walk
from .errors import CorruptRecordError, LogLockedError, NotALogError, SeglogError
from .index import TimeIndex, entries_valid, offset_arrays

Progress = Callable[[int], None]     # called with the bytes just read


class DamageAt(CorruptRecordError):
    """Damage placed in its file, with ``reason``: ``"framing"``, ``"zeros"``,
    ``"partial"``, ``"short"``, ``"checksum"``, ``"offsets"`` or ``"records"`` (the
    record layout inside a batch does not add up)."""

    def __init__(self, reason: str, message: str, path: str, position: int | None,
                 offset: int | None) -> None:
        super().__init__(message, path, position, offset)
        self.reason = reason


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
class CheckReport:
    """What ``check`` found in one log directory."""

    path: str
    segments: int = 0
    batches: int = 0
    messages: int = 0
    bytes: int = 0
    first_offset: int | None = None
    next_offset: int | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def segment_paths(directory: str) -> list[tuple[int, str]]:
    """(base offset, path) of the segment files of a log directory, in order;
    ``NotALogError`` if it has no seglog marker."""
    if not os.path.isfile(os.path.join(directory, MARKER)):
        raise NotALogError(f"{directory} is not a seglog log (no {MARKER})")
    return [(b, os.path.join(directory, f"{b:020d}.log")) for b in list_segments(directory)]


def walk_log(directory: str, progress: Progress | None = None, decode: bool = True
             ) -> Iterator[tuple[str, int, bytes, int, codec.BatchHeader]]:
    """(segment path, file position, buffer, position in it, header) of every batch
    of the log in order, each checked (framing, checksum, offsets, and with
    ``decode`` the record layout). Raises ``Damage`` placed in its file at the first
    bad batch. Zero-filled space ends the last segment (a live writer's
    preallocated tail); anywhere else it is damage."""
    segs = segment_paths(directory)
    expect: int | None = None
    for i, (base, path) in enumerate(segs):
        if expect is not None and base < expect:
            raise DamageAt("offsets", f"segment starts at offset {base}, below {expect} "
                           f"where the one before ended", path, 0, base)
        last = i + 1 == len(segs)
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            done = 0
            try:
                for buf, p, filepos, hdr in walk(f.fileno(), 0, size, expect=None,
                                                 check=True, to_damage=True):
                    b = hdr[codec.H_BASE]
                    if expect is not None and (b < expect or (
                            b != expect and not hdr[codec.H_ATTRS] & codec.F_OFFSETS)):
                        raise Damage("offsets", f"batch starts at offset {b}, expected "
                                     f"{expect}", filepos + p, b)
                    if b < base:
                        raise Damage("offsets", f"batch offset {b} is below the segment's "
                                     f"base offset {base}", filepos + p, b)
                    if decode:
                        try:
                            for _ in codec.decode_batch(buf, p, hdr):
                                pass
                        except CorruptRecordError as e:
                            raise DamageAt("records", e.message, path, filepos + p, b) from None
                    expect = b + hdr[codec.H_LAST_DELTA] + 1
                    end = filepos + p + codec.LENGTH_END + hdr[codec.H_LENGTH]
                    if progress is not None:
                        progress(end - done)
                    done = end
                    yield path, filepos + p, buf, p, hdr
            except Damage as d:
                # only zeros from here to the end of the last segment: a live writer's
                # preallocated space, not damage
                if not (last and d.reason in ("zeros", "short", "partial")
                        and not any(_nonzero(f.fileno(), d.position or 0, size))):
                    why = d.message
                    if last and d.reason == "partial":
                        why += " (a torn tail: opening the log for writing cuts it off)"
                    raise DamageAt(d.reason, why, path, d.position, d.offset) from None
            if progress is not None and size > done:
                progress(size - done)
        if expect is None:
            expect = base


def _nonzero(fd: int, start: int, end: int) -> Iterator[bool]:
    """Whether each 1 MiB of ``[start, end)`` holds a non-zero byte."""
    pos = start
    while pos < end:
        buf = os.pread(fd, min(1 << 20, end - pos), pos)
        if not buf:
            return
        yield buf.count(0) != len(buf)
        pos += len(buf)


def check(directory: str, progress: Progress | None = None,
          batches: list[BatchInfo] | None = None) -> CheckReport:
    """Read and check every batch and index entry of the log in ``directory``.

    Never raises for damage: the report lists it (reading stops at the first bad
    batch; index problems are listed and reading goes on). ``batches``, if given,
    receives every good batch. Takes no lock and changes nothing.
    """
    rep = CheckReport(path=directory)
    starts: dict[str, dict[int, int]] = {}
    try:
        for path, pos, _buf, _p, hdr in walk_log(directory, progress):
            size = codec.LENGTH_END + hdr[codec.H_LENGTH]
            base, last = hdr[codec.H_BASE], codec.last_offset(hdr)
            starts.setdefault(path, {})[pos] = base
            rep.batches += 1
            rep.messages += hdr[codec.H_COUNT]
            rep.bytes += size
            if rep.first_offset is None:
                rep.first_offset = base
            rep.next_offset = last + 1
            if batches is not None:
                batches.append(BatchInfo(path, pos, size, base, last, hdr[codec.H_COUNT],
                                         hdr[codec.H_ATTRS], hdr[codec.H_BASE_TS],
                                         hdr[codec.H_MAX_TS]))
    except DamageAt as e:
        rep.problems.append(Problem(e.path or directory, e.position, e.offset, e.reason,
                                    e.message))
    segs = segment_paths(directory)
    rep.segments = len(segs)
    for base, path in segs:
        rep.problems += _check_indexes(path, base, starts.get(path, {}),
                                       os.path.getsize(path))
    return rep


def _check_indexes(path: str, base: int, starts: dict[int, int], size: int) -> list[Problem]:
    """Every offset-index entry points at a batch start holding its offset; the time
    index ascends. Missing index files are not damage (a writer rebuilds them)."""
    out: list[Problem] = []
    ipath, tpath = path[:-4] + ".index", path[:-4] + ".timeindex"
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
    """What ``cut`` would do: cut ``path`` at ``position`` (the first bad batch, whose
    offsets start at ``offset``) and delete the segments after it."""

    directory: str
    path: str
    position: int
    offset: int
    reason: str
    message: str
    lost_bytes: int                    # from the cut to the end of the log's files
    later_segments: list[str]
    valid_after: int                   # batches with a good checksum after the damage


def plan_cut(directory: str) -> CutPlan | None:
    """Where the first damage is and what cutting there loses; None if the log's
    batches are all good. Reads only."""
    try:
        for _ in walk_log(directory):
            pass
    except DamageAt as e:
        assert e.path is not None and e.position is not None
        segs = [p for _, p in segment_paths(directory)]
        later = segs[segs.index(e.path) + 1:] if e.path in segs else []
        lost = os.path.getsize(e.path) - e.position + sum(map(os.path.getsize, later))
        offset = e.offset if e.offset is not None else _offset_before(e.path)
        return CutPlan(directory, e.path, e.position, offset, e.reason, e.message, lost,
                       later, _valid_after(e.path, e.position))
    return None


def _offset_before(path: str) -> int:
    """The offset the batch at the damage would have started at: after the last good
    batch before it, or the segment's base."""
    base = int(os.path.basename(path)[:-4])
    nxt = base
    with open(path, "rb") as f:
        try:
            for _, _, _, hdr in walk(f.fileno(), 0, os.fstat(f.fileno()).st_size,
                                     to_damage=True):
                nxt = codec.last_offset(hdr) + 1
        except Damage:
            pass
    return nxt


def _valid_after(path: str, position: int) -> int:
    """Batches with a good checksum anywhere after ``position`` in the file (the
    data the cut gives up, which a torn tail would not have)."""
    with open(path, "rb") as f:
        data = f.read()
    n = 0
    magic = bytes([codec.MAGIC])
    i = data.find(magic, position + 1 + codec.LENGTH_END)
    while i != -1:
        start = i - codec.LENGTH_END
        try:
            hdr = codec.read_header(data, start, len(data))
        except CorruptRecordError:
            hdr = None
        if hdr is not None and codec.checksum_ok(data, start, hdr):
            n += 1
            i = data.find(magic, start + codec.batch_size(hdr) + codec.LENGTH_END)
        else:
            i = data.find(magic, i + 1)
    return n


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
        again = plan_cut(d)
        if again is None or (again.path, again.position) != (plan.path, plan.position):
            raise SeglogError(f"the files of {d} changed since the plan was made; "
                              f"plan again")
        if _marker.ownership(d, os.listdir(d)) == "empty":     # raises for foreign files
            raise NotALogError(f"{d} holds no log")
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

"""Loading a log directory: checkpoints, the clean-shutdown marker and the tail scan.

A clean open (marker present and consistent) reads no segment data. Otherwise only
the segments from the recovery point on are scanned: every batch's framing, checksum and
offsets are checked, the indexes of scanned segments are rebuilt, and the log is cut
at the first batch that fails (a torn tail from a crash).
"""

from __future__ import annotations

import json
import os
import time
from bisect import bisect_right
from dataclasses import dataclass, field, replace
# Any: parsed JSON / JSON documents (dict[str, Any]): seglog.json
from typing import Any

from ._codec import format as _format
from ._runtime import platform as _platform
from ._runtime.files import (LOCK_FILE, LOG_START, RECOVERY_POINT, SEGMENT_SUFFIXES,
                             WRITER_SESSION, atomic_write, fsync_dir, fsync_file, is_leftover,
                             list_segments, read_checkpoint, remove, segment_path,
                             write_checkpoint)
from ._storage.scan import ScanResult, Survey, scan, survey
from .cleaner import resolve_interrupted
from .errors import CorruptRecordError
from .index import TimeIndex, entries_valid, offset_arrays
from .retention import remove_leftovers
from ._storage.segment_indexes import active_entries
from .segment import NO_TIMESTAMP, ActiveSegment, ActiveSettings, Segment, WriterState

CLEAN_MARKER = ".clean-shutdown"


@dataclass
class Loaded:
    """The state a writer opens with: its segments, the last one's writer role."""

    segments: list[Segment]
    active: ActiveSegment
    start_offset: int
    end_offset: int
    recovery_point: int
    report: "RecoveryReport | None" = None


def load_for_writer(directory: str, settings: ActiveSettings) -> Loaded:
    """Open every segment of ``directory`` for a writer, recovering after a crash; the
    last one active, made with ``settings``."""
    opened: list[Segment] = []
    try:
        return _load(directory, settings, opened)
    except BaseException:
        for seg in opened:
            try:
                seg.close()
            except OSError:
                pass
        raise


def _load(directory: str, settings: ActiveSettings, opened: list[Segment]) -> Loaded:
    names = os.listdir(directory)
    # one listing serves a clean open; the rare leftovers of interrupted work re-list.
    # Committed compaction swaps are finished first (they rename cleaned files in)
    if any(map(is_leftover, names)):
        resolve_interrupted(directory)
        remove_leftovers(directory)
        names = os.listdir(directory)
    bases = list_segments(directory, names)
    start = read_checkpoint(directory, LOG_START)
    marker = read_marker(directory)
    if not bases:
        base = start or 0
        created = ActiveSegment.create(directory, base, settings)
        opened.append(created.segment)
        _remove_marker(directory, marker)
        write_session(directory)
        return Loaded([created.segment], created, base, base, base)
    if start is None or start < bases[0]:
        start = bases[0]
    # a retention pass checkpoints the start offset before it deletes: finish its work
    below = [b for b, nxt in zip(bases, bases[1:]) if nxt <= start]
    for b in below:
        for ext in SEGMENT_SUFFIXES:
            remove(segment_path(directory, b, ext))
    if below:
        fsync_dir(directory)
        bases = bases[len(below):]
    # a sealed segment covers up to the next one's base offset
    max_index_bytes, interval = settings.max_index_bytes, settings.index_interval_bytes
    segs = [Segment(directory, b, next_offset=nxt, max_index_bytes=max_index_bytes,
                    owner=True, index_interval_bytes=interval)
            for b, nxt in zip(bases, [*bases[1:], None])]
    opened.extend(segs)
    last = segs[-1]
    if marker is not None and _marker_matches(marker, last):
        _remove_marker(directory, marker)
        active = ActiveSegment(last, _clean_state(last, marker, max_index_bytes, interval),
                               settings)
        write_session(directory)
        return Loaded(segs, active, start, marker["end_offset"], marker["end_offset"])
    _remove_marker(directory, marker)
    # a segment with a successor was sealed and fsynced before the successor was
    # created (and compaction output is fsynced before it is swapped in): everything
    # below the last segment is durable, whatever the checkpoint says or if it is lost.
    # So the recovery point is in the last segment, and only that one is scanned: a
    # torn tail is always the log's end, never followed by a segment (damage in an
    # earlier segment is corruption, which reads report where they meet it)
    rp = max(read_checkpoint(directory, RECOVERY_POINT) or 0, bases[-1])
    same_boot = _previous_boot(directory) == boot_id() is not None
    report = RecoveryReport(recovery_point=rp, same_boot=same_boot)
    active = _recover_tail(last, rp, same_boot, settings, report)
    end = active.next_offset
    # what recovery kept may still be only in the page cache: make it durable, so
    # that flushed_offset == end_offset is true after an unclean open
    active.flush()
    write_checkpoint(directory, RECOVERY_POINT, end)
    write_session(directory)
    return Loaded(segs, active, start, end, end, report=report)


def _recover_tail(seg: Segment, rp: int, same_boot: bool, settings: ActiveSettings,
                  report: "RecoveryReport") -> ActiveSegment:
    """Scan the last segment from the recovery point (checksums included), cut a
    torn tail, rebuild its indexes and open it for appends (its writer role)."""
    file_size = os.stat(seg.path).st_size
    start_pos, start_off, trusted = (0, seg.base_offset, None)
    if rp > seg.base_offset:
        start_pos, start_off, trusted = _trusted_prefix(seg, rp, settings.max_index_bytes)
    tmax, tmax_off = (trusted[1][-1] if trusted and trusted[1] else (-1, seg.base_offset))
    t0 = time.perf_counter()
    res = scan(seg, start_pos, file_size, start_off, settings.index_interval_bytes,
               max_timestamp=tmax)
    report.scan_seconds += time.perf_counter() - t0
    if res.max_timestamp == tmax:
        res = replace(res, max_ts_offset=tmax_off)
    report.scanned_bytes += res.end - start_pos
    report.segments_scanned += 1
    sv = None
    if res.end < file_size:
        sv = survey(seg.fileno(), res.end, file_size, res.next_offset)
    if res.stop != "end":
        why = _damage_is_corruption(res, sv, rp, same_boot)
        if why:
            raise CorruptRecordError(f"bad batch ({res.stop}) {why}", seg.path, res.end,
                                     res.next_offset)
    if trusted is not None:
        res.index[:0] = trusted[0]
        # the scan starts its own time entries afresh: those not past the trusted
        # prefix's last timestamp repeat it (time entries strictly ascend)
        last_t = trusted[1][-1][0] if trusted[1] else -1
        res.time_index[:] = trusted[1] + [e for e in res.time_index if e[0] > last_t]
        res = replace(res, first_timestamp=_first_timestamp(seg))
    if res.end < file_size:
        # cut the torn tail (and the old preallocation) off first, which also frees
        # its blocks for the index rebuild on a nearly full disk; the writer's
        # reservations extend it again with fresh zeros. Nothing maps it yet (rule R8).
        _truncate_durably(seg.path, res.end)
    seg.write_indexes(res, final=False)
    if sv is not None:
        report.truncated.append((seg.path, res.end, file_size - res.end, res.stop))
        report.cuts.append(Cut(seg.path, res.end, res.stop, file_size - res.end,
                               sv.data_bytes, sv.good_messages))
    first = res.first_timestamp
    return ActiveSegment(seg, WriterState(
        seg.base_offset, res.end, res.next_offset, len(res.index), len(res.time_index), -1,
        res.max_timestamp, res.max_ts_offset, NO_TIMESTAMP if first is None else first),
        settings)


def _truncate_durably(path: str, size: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.ftruncate(fd, size)
        fsync_file(fd)
    finally:
        os.close(fd)


@dataclass
class Cut:
    """What recovery removed from one segment file: the bytes after ``position``
    (``reason``: why the scan stopped there). Of the ``file_bytes`` removed, ``data_bytes`` were data
    (a torn batch and anything written after it; with ``messages`` in batches whose
    checksum was good) and ``reserved_bytes`` zeros the writer had preallocated."""

    path: str
    position: int
    reason: str
    file_bytes: int
    data_bytes: int
    messages: int

    @property
    def reserved_bytes(self) -> int:
        return self.file_bytes - self.data_bytes


@dataclass
class RecoveryReport:
    """What an unclean open found and did (``Log.recovery``). ``truncated`` lists
    the files cut (path, position, bytes the file lost, why); ``cuts`` says what
    those bytes were. ``deleted_segments`` stays empty: recovery cuts only the last
    segment's tail, and never deletes a segment."""

    recovery_point: int
    same_boot: bool
    segments_scanned: int = 0
    scanned_bytes: int = 0
    scan_seconds: float = 0.0
    truncated: list[tuple[str, int, int, str]] = field(default_factory=list)  # path, at, bytes, why
    deleted_segments: list[int] = field(default_factory=list)
    cuts: list[Cut] = field(default_factory=list)

    @property
    def cut_messages(self) -> int:
        """Messages in batches with a good checksum that recovery removed."""
        return sum(c.messages for c in self.cuts)

    @property
    def cut_data_bytes(self) -> int:
        """Bytes of data (not the writer's zero-filled reservation) removed."""
        return sum(c.data_bytes for c in self.cuts)

    @property
    def reserved_bytes(self) -> int:
        """Bytes of the writer's zero-filled reservation dropped."""
        return sum(c.reserved_bytes for c in self.cuts)


def _damage_is_corruption(res: ScanResult, sv: Survey | None, rp: int,
                          same_boot: bool) -> str | None:
    """Rules R5/R6: why the damage the scan stopped at is corruption, or None (torn tail).

    * It holds offsets below the recovery point: data that was fsynced.
    * The machine did not restart (same boot id as the last writer) and a valid batch
      continues the log after it: a killed process leaves at most its last batch
      torn, and its page cache survives, so damage before good data is not a crash.
    After a restart, writes past the last fsync may have reached the disk in any
    order, so only the recovery point separates durable data from a torn tail.
    """
    if res.next_offset < rp:
        return f"inside data flushed before the crash (recovery point {rp})"
    if same_boot and sv is not None and sv.first is not None:
        return "followed by valid batches"
    return None


def _trusted_prefix(seg: Segment, rp: int, max_index_bytes: int
                    ) -> tuple[int, int, tuple[list[tuple[int, int]], list[tuple[int, int]]] | None]:
    """Where to start scanning the segment holding the recovery point.

    The index entries of flushed data were fsynced with it: entries up to the
    recovery point are kept if they ascend and the last of them points at a batch
    of its offset; the scan (with checksums) starts there. Otherwise: from the start.
    """
    base = seg.base_offset
    try:
        with open(seg.index_path, "rb") as f:
            data = f.read()
        with open(seg.timeindex_path, "rb") as f:
            tdata = f.read()
    except OSError:
        return 0, base, None
    rel, pos = offset_arrays(data)
    n = pos.index(0) if 0 in pos else len(pos)       # zero slots end the entries
    k = bisect_right(rel, rp - base, 0, n)
    rel, pos = rel[:k], pos[:k]
    if not k or not entries_valid(rel, pos, (), 1 << 62):
        return 0, base, None
    off, start = base + rel[-1], pos[-1]
    hdr = _format.sane_header(os.pread(seg.fileno(), _format.HEADER_SIZE, start))
    if hdr is None or hdr.base_offset != off:
        return 0, base, None
    tentries = []
    for t, r in TimeIndex.ENTRY.iter_unpack(tdata[:len(tdata) - len(tdata) % TimeIndex.SIZE]):
        if (t == 0 and r == 0) or base + r > off:
            break
        tentries.append((t, base + r))
    if not entries_valid((), (), [t for t, _ in tentries], 0):
        tentries = []
    return start, off, ([(base + r, p) for r, p in zip(rel, pos)], tentries)


def _first_timestamp(seg: Segment) -> int | None:
    hdr = _format.sane_header(os.pread(seg.fileno(), _format.HEADER_SIZE, 0))
    return hdr.max_timestamp if hdr is not None else None


def boot_id() -> str | None:
    """This boot's id (changes when the machine restarts), None if unknown."""
    return _platform.boot_id()


def _previous_boot(directory: str) -> str | None:
    try:
        with open(os.path.join(directory, WRITER_SESSION), "rb") as f:
            boot = json.loads(f.read()).get("boot_id")
        return boot if isinstance(boot, str) else None
    except (OSError, ValueError, AttributeError):
        return None


def writer_alive(directory: str) -> bool:
    """True if a writer holds the log now, found without taking its lock (which would
    stop a writer from opening meanwhile): on Linux, a ``flock`` held on the lock
    file, as ``/proc/locks`` lists it; elsewhere, the last writer's process still
    running on this boot without having shut down cleanly (a reused process id
    makes a dead writer look alive)."""
    held = _flock_held(os.path.join(directory, LOCK_FILE))
    if held is not None:
        return held
    if os.path.exists(os.path.join(directory, CLEAN_MARKER)):
        return False
    try:
        with open(os.path.join(directory, WRITER_SESSION), "rb") as f:
            session = json.loads(f.read())
        pid, boot = session["pid"], session.get("boot_id")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    if not isinstance(pid, int) or pid <= 0 or (boot is not None and boot != boot_id()):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True             # another user's process
    return True


def _flock_held(path: str) -> bool | None:
    """Whether a process holds a ``flock`` on ``path`` (Linux's ``/proc/locks``);
    None where that cannot be told."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    except OSError:
        return None
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as f:
            # "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF"; waiters carry "->"
            return any(key in line.split() and "FLOCK" in line and "->" not in line
                       for line in f)
    except OSError:
        return None


def write_session(directory: str) -> None:
    """Record which boot this writer runs in (read by the next recovery)."""
    atomic_write(os.path.join(directory, WRITER_SESSION),
                 json.dumps({"version": 1, "boot_id": boot_id(), "pid": os.getpid()}).encode())


def read_marker(directory: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(directory, CLEAN_MARKER), "rb") as f:
            m = json.loads(f.read())
        if isinstance(m, dict) and m.get("version") == 1:
            return m
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        pass
    return {}


def _clean_state(seg: Segment, marker: dict[str, Any], max_index_bytes: int,
                 interval: int) -> WriterState:
    """The ``WriterState`` of a cleanly closed segment reopened for appends: the clean
    shutdown recorded its tail, the index entry counts come from its index files
    (rebuilt first if they fail the check)."""
    ie, te, repaired = active_entries(seg, max_index_bytes, interval)
    seg.count_index_repairs(repaired)
    first = marker.get("first_timestamp")
    return WriterState(seg.base_offset, seg.size, marker["end_offset"], ie, te, -1,
                       marker["max_timestamp"], marker["max_ts_offset"],
                       NO_TIMESTAMP if first is None else first)


def _marker_matches(marker: dict[str, Any], active: Segment) -> bool:
    try:
        return (marker["active_base"] == active.base_offset
                and marker["active_size"] == os.stat(active.path).st_size
                and isinstance(marker["end_offset"], int))
    except (KeyError, OSError):
        return False


def _remove_marker(directory: str, marker: dict[str, Any] | None) -> None:
    if marker is not None and remove(os.path.join(directory, CLEAN_MARKER)):
        fsync_dir(directory)


def write_marker(directory: str, active: ActiveSegment, end_offset: int) -> None:
    """Record a clean shutdown: the state a clean open needs without reading data."""
    st = active.writer_state()
    data = {"version": 1, "end_offset": end_offset, "active_base": active.base_offset,
            "active_size": st.size, "max_timestamp": st.max_timestamp,
            "max_ts_offset": st.max_ts_offset,
            "first_timestamp": st.first_timestamp if st.first_timestamp >= 0 else None}
    atomic_write(os.path.join(directory, CLEAN_MARKER), json.dumps(data).encode())


def continuing_batch_after(seg: Segment, pos: int, file_size: int, next_offset: int) -> int | None:
    """Position of a valid batch after the bad batch at ``pos`` that continues the
    log (base offset at or past ``next_offset``), if any (``_storage.scan.survey``).

    Such a batch beyond a damaged spot proves the damage is inside written data, not
    a torn tail. A stale copy of an earlier batch (base offset too low) proves
    nothing, nor does a batch among the bytes a sanely framed bad batch claims.
    """
    return survey(seg.fileno(), pos, file_size, next_offset, first_only=True).first

"""One Kafka partition directory's segment files, read and never written: listing
them, reading whole batches in chunks (``chunks``), walking batch headers, and the
sparse ``.index``/``.timeindex`` files, used when they agree with the log and rebuilt
in memory otherwise.

Files are opened ``O_RDONLY`` (and ``O_NOATIME`` where the kernel allows it, so not
even their access times move) and closed after each read; nothing here takes a lock,
creates, renames or deletes a file.
"""

from __future__ import annotations

import os
import re
from bisect import bisect_right
from struct import Struct
from typing import Iterator

from ..errors import CorruptRecordError, OffsetOutOfRangeError
from . import _wire
from ._wire import BatchInfo

SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
CHUNK = 1 << 20
ARROW_CHUNK = 4 << 20      # Arrow reads: fewer, larger record batches (as Log.iter_arrow)
_INDEX_ENTRY = Struct(">ii")        # relative offset, position
_TIME_ENTRY = Struct(">qi")         # timestamp, relative offset
_NOATIME = getattr(os, "O_NOATIME", 0)


def open_readonly(path: str) -> int:
    """A read-only descriptor of ``path`` that leaves its access time alone when the
    kernel lets this process ask for that (``O_NOATIME``: the file's owner, or root)."""
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
    if _NOATIME:
        try:
            return os.open(path, flags | _NOATIME)
        except PermissionError:
            pass
    return os.open(path, flags)


def read_file(path: str) -> bytes:
    fd = open_readonly(path)
    try:
        parts: list[bytes] = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return b"".join(parts)
            parts.append(b)
    finally:
        os.close(fd)


class Segment:
    """One ``<base>.log`` as listed (its size then: a broker may append meanwhile; what
    was past that size is read by the next listing). ``active``: the partition's last
    segment, whose torn tail is its end, not damage. Index lookups and the walks'
    results are kept, as the file is only ever appended to."""

    def __init__(self, directory: str, base: int, size: int, active: bool) -> None:
        self.base = base
        self.path = os.path.join(directory, "%020d.log" % base)
        self.size = size
        self.active = active
        self._stem = os.path.join(directory, "%020d" % base)
        self._index: tuple[list[int], list[int]] | None = None     # last offsets, positions
        self._index_trusted = True
        self._times: tuple[list[int], list[int]] | None = None     # timestamps, offsets
        self._end: int | None = None
        self._max_ts: int | None = None

    def same_file(self, size: int, active: bool) -> bool:
        return self.size == size and self.active == active

    # -- reading -------------------------------------------------------------------
    def chunks(self, pos: int, stop: int | None = None, chunk: int = CHUNK
               ) -> Iterator[tuple[bytes, int, int]]:
        """(buffer, bytes of whole batches in it, file position of its start) from
        ``pos`` to ``stop`` (default: the listed size), about ``chunk`` at a time; a
        batch larger than that comes whole in a buffer of its own. A batch cut short
        by the end is the end in the active segment, damage anywhere else."""
        end = self.size if stop is None else min(stop, self.size)
        if pos >= end:
            return
        fd = open_readonly(self.path)
        try:
            while pos < end:
                buf = os.pread(fd, min(chunk, end - pos), pos)
                n = len(buf)
                i = 0
                size: int | None = None
                while True:
                    try:
                        size = _wire.batch_size(buf, i, n)
                    except CorruptRecordError as e:
                        if self.active and not any(buf[i:]):
                            size = None             # zeros after the data: the end
                            end = pos + i
                            break
                        raise e.at(self.path, pos + i) from None
                    if size is None or i + size > n:
                        break
                    i += size
                if i == 0:
                    if size is not None and pos + size <= end and size > n:
                        buf = os.pread(fd, size, pos)
                        if len(buf) == size:
                            yield buf, size, pos
                            pos += size
                            continue
                    if pos >= end:
                        return
                    if self.active:
                        return                      # a torn tail: where the log ends
                    raise CorruptRecordError("a batch cut short by the end of a sealed segment",
                                             self.path, pos)
                yield buf, i, pos
                pos += i
        finally:
            os.close(fd)

    def headers(self, pos: int = 0, stop: int | None = None) -> Iterator[BatchInfo]:
        """Every batch's header from ``pos`` on, positions in the file; framing and
        header checked (not the checksum: ``_wire.check``)."""
        header = _wire.header
        for buf, n, at in self.chunks(pos, stop):
            i = 0
            while i < n:
                size = _wire.batch_size(buf, i, n)
                assert size is not None
                try:
                    info = header(buf, i, size)
                except CorruptRecordError as e:
                    raise e.at(self.path, at + i) from None
                yield info._replace(position=at + i)
                i += size

    # -- the offset index ------------------------------------------------------------
    def _load_index(self) -> tuple[list[int], list[int]]:
        if self._index is None:
            offsets: list[int] = []
            positions: list[int] = []
            try:
                raw = read_file(self._stem + ".index")
            except OSError:
                raw = b""
            last_rel, last_pos = -1, -1
            for rel, pos in _INDEX_ENTRY.iter_unpack(raw[:len(raw) - len(raw) % 8]):
                # an active segment's index is preallocated with zeros: entries end
                # where they stop growing
                if rel <= last_rel or pos <= last_pos or pos >= self.size:
                    break
                offsets.append(self.base + rel)
                positions.append(pos)
                last_rel, last_pos = rel, pos
            self._index = (offsets, positions)
        return self._index

    def _rebuild_index(self) -> None:
        """Every batch's (last offset, position), from the log itself, in memory."""
        offsets: list[int] = []
        positions: list[int] = []
        for info in self.headers():
            offsets.append(info.last_offset)
            positions.append(info.position)
        self._index = (offsets, positions)
        self._index_trusted = False

    def position_for(self, offset: int) -> int:
        """A position at or before the batch holding ``offset``: the index's floor entry
        when the batch there is the one it names, else (the index disagrees with the
        log, and is rebuilt from it) the rebuilt index's."""
        offsets, positions = self._load_index()
        k = bisect_right(offsets, offset - 1)        # entries whose batch ends below it
        if k == 0:
            return 0
        pos = positions[k - 1]
        if self._index_trusted and not self._agrees(pos, offsets[k - 1]):
            self._rebuild_index()
            return self.position_for(offset)
        return pos

    def _agrees(self, pos: int, last_offset: int) -> bool:
        fd = open_readonly(self.path)
        try:
            b = os.pread(fd, _wire.V2_HEADER_SIZE, pos)
        finally:
            os.close(fd)
        try:
            size = _wire.batch_size(b, 0, len(b))
            if size is None and len(b) < _wire.LEGACY_HEADER_SIZE:
                return False
            info = _wire.header(b, 0, size or len(b))
        except (CorruptRecordError, IndexError, ValueError):
            return False
        return info.last_offset == last_offset

    @property
    def index_trusted(self) -> bool:
        """False once the offset index was found to disagree with the log."""
        self._load_index()
        return self._index_trusted

    # -- what a walk finds ------------------------------------------------------------
    def end_offset(self) -> int:
        """The offset after the segment's last batch (its base offset if it has none),
        walking from the last index entry the log agrees with."""
        if self._end is None:
            offsets, positions = self._load_index()
            start = 0
            if offsets:
                start = self.position_for(offsets[-1] + 1)
            last = self.base - 1
            for info in self.headers(start):
                last = info.last_offset
            self._end = max(last + 1, self.base)
        return self._end

    def time_entries(self) -> tuple[list[int], list[int]]:
        """(timestamps, offsets) of the time index: each the largest timestamp so far
        and an offset of a batch holding it; rebuilt from the batches' headers when
        the file disagrees with the log (a checked entry's batch must have that
        largest timestamp, and entries must grow)."""
        if self._times is None:
            try:
                raw = read_file(self._stem + ".timeindex")
            except OSError:
                raw = b""
            stamps: list[int] = []
            offs: list[int] = []
            for ts, rel in _TIME_ENTRY.iter_unpack(raw[:len(raw) - len(raw) % 12]):
                if stamps and (ts <= stamps[-1] or self.base + rel <= offs[-1]):
                    break                            # preallocated zeros: the end
                if not stamps and ts == 0 and rel == 0:
                    break
                stamps.append(ts)
                offs.append(self.base + rel)
            if stamps and not self._time_agrees(stamps[-1], offs[-1]):
                stamps, offs = [], []
                running = None
                for info in self.headers():
                    if running is None or info.max_timestamp > running:
                        running = info.max_timestamp
                        stamps.append(running)
                        offs.append(info.last_offset)
            self._times = (stamps, offs)
        return self._times

    def _time_agrees(self, ts: int, offset: int) -> bool:
        pos = self.position_for(offset)
        for info in self.headers(pos):
            if info.last_offset >= offset:
                return info.max_timestamp == ts or info.base_timestamp == ts
        return False

    def max_timestamp(self) -> int:
        """The largest batch timestamp in the segment (-1: none)."""
        if self._max_ts is None:
            pos = 0
            stamps, offs = self.time_entries()
            best = stamps[-1] if stamps else -1
            if offs:
                pos = self.position_for(offs[-1])
            for info in self.headers(pos):
                best = max(best, info.max_timestamp)
            self._max_ts = best
        return self._max_ts


def list_segments(directory: str, previous: dict[int, Segment] | None = None
                  ) -> list[Segment]:
    """The directory's segments in offset order, keeping ``previous`` ones whose file
    did not change (their indexes and walks). Files that are not ``<20 digits>.log``
    (a cleaner's ``.cleaned``/``.swap``, a deleted ``.deleted``, anything else) are
    ignored."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError as e:
        raise OffsetOutOfRangeError(f"{directory} is gone") from e
    bases = sorted(int(m.group(1)) for m in map(SEGMENT_NAME.match, names) if m)
    out: list[Segment] = []
    for k, base in enumerate(bases):
        active = k == len(bases) - 1
        try:
            size = os.stat(os.path.join(directory, "%020d.log" % base)).st_size
        except FileNotFoundError:
            continue                     # deleted by the broker's retention meanwhile
        old = (previous or {}).get(base)
        out.append(old if old is not None and old.same_file(size, active)
                   else Segment(directory, base, size, active))
    return out

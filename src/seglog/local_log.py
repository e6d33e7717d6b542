"""``LocalLog``: a log's segment list and the mechanics over it, as Kafka's
``LocalLog`` is under ``UnifiedLog``.

It owns the tuple of segments, the start and end offsets, rolling, the read path
(``read``, ``iter``, ``offset_for_time``), a readonly reader's re-listing of the
directory, and the lifetime of segments that leave the list (reads in flight are
counted; a retired segment's descriptors close once none is). Policy (flushing,
poisoning, locking the directory, retention and compaction, tailing) is the
``Log``'s, which is a ``LocalLog``: the append hot path reads this state with one
attribute lookup.

Thread-safety: mutators of the list run under ``self._lock`` (the ``Log``'s append
lock); readers take a snapshot of ``self._segs`` (a tuple, replaced whole) and
re-find their place when a segment they hold is retired.
"""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_right
from itertools import chain
from operator import attrgetter
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from . import _live, _notebook, codec
from ._metrics import Metrics
from ._files import LOG_START, read_checkpoint
from .config import LogConfig
from .errors import CorruptRecordError, LogClosedError, OffsetOutOfRangeError, SeglogError
from .message import (Columns, Message, MessageSet, arrow_modules, arrow_schema, as_ms,
                      check_timestamp)
from .segment import Segment, SegmentGoneError

_BASE = attrgetter("base_offset")
_ARROW_BATCH_BYTES = 16 << 20    # one RecordBatch per about this many bytes of values
_RACY_NS = 3_000_000_000  # a directory listing this close to its mtime is not trusted
_RELOCATIONS = 64         # a reader re-finds its place at most this often per step
_T = TypeVar("_T")
_ITER_CHUNK = 1 << 20


class LocalLog:
    """The segments of one log directory and the mechanics over them (see the module
    docstring). Not used on its own: ``Log`` is the public face."""

    def __init__(self, path: str, config: LogConfig, readonly: bool) -> None:
        self.path = path
        self.config = config
        self.readonly = readonly
        # the append lock: appends, rolls and every change of the segment list
        self._lock = threading.Lock()
        self._segs: tuple[Segment, ...] = ()
        self._start = 0
        self._end = 0
        self._closed = False
        self._closing = False
        self._capacity = config.segment_bytes + config.max_message_bytes + 65536
        # reads in flight (every pread, index lookup and fsync of a segment happens inside
        # one): a retired segment's descriptors close only when none is, so no number
        # is closed (and reused by another open) under a reader
        self._rlock = threading.Lock()
        self._idle = threading.Condition(self._rlock)
        self._inflight = 0
        self._graveyard: list[Callable[[], None]] = []
        self._refresh_lock = threading.Lock()
        self._dir_mtime = 0
        self._listed_at = 0
        self._pid = os.getpid()
        self._forked_from: int | None = None
        self._metrics = Metrics()
        self._reported_damage: BaseException | None = None

    # -- the segment list ------------------------------------------------------------
    def _closed_error(self) -> SeglogError:
        if self._forked_from is not None:
            return SeglogError(
                f"log {self.path} was opened by process {self._forked_from}; this process "
                f"({self._pid}) is a fork of it and may not use the writer: open the log "
                f"again here (readonly=True to read while the parent writes)")
        return LogClosedError(f"log {self.path} is closed")

    def _enter(self) -> None:
        with self._rlock:
            if self._closing or self._closed:
                raise self._closed_error()
            self._inflight += 1

    def _leave(self) -> None:
        with self._rlock:
            self._inflight -= 1
            if not self._inflight:
                if self._graveyard:
                    for close in self._graveyard:
                        close()
                    self._graveyard.clear()
                self._idle.notify_all()

    def _dispose(self, close: Callable[[], None]) -> None:
        """Run ``close`` (which closes descriptors) once no read is in flight."""
        with self._rlock:
            if self._inflight:
                self._graveyard.append(close)
            else:
                close()

    def _retire(self, segs: Iterable[Segment], why: str) -> None:
        """Segments that left the list (retention, compaction, a reader's re-listing):
        readers that meet them re-find their place; their files close once no read
        is in flight."""
        for seg in segs:
            # marked at once (a reader between steps re-finds), closed once no read is
            self._dispose(seg.retire(why))

    @property
    def start_offset(self) -> int:
        """The first offset still in the log."""
        if self.readonly:
            self._refresh()
        return self._start

    @property
    def end_offset(self) -> int:
        """The next offset to assign (one past the last message)."""
        if self.readonly:
            self._refresh()
        return self._end

    @property
    def segments(self) -> tuple[Segment, ...]:
        """The segments, oldest first; the last one is active."""
        if self.readonly:
            self._refresh()
        return self._segs

    def _set_segments(self, segs: Sequence[Segment]) -> None:
        self._segs = tuple(segs)

    def _roll_segment(self, old: Segment) -> Segment:
        """Seal the active segment and start a new one at the end offset (lock held).
        The caller makes the new segment's base offset the recovery point."""
        old.next_offset = self._end
        old.seal()
        cfg = self.config
        new = Segment.create(self.path, self._end, self._capacity, cfg.index_interval_bytes,
                             cfg.max_index_bytes)
        new.set_roll_policy(cfg.segment_bytes, cfg.segment_ms)
        self._set_segments(self._segs + (new,))
        return new

    def _check_readable(self) -> None:
        if self._closed:
            raise self._closed_error()

    def _locate(self, offset: int) -> tuple[tuple[Segment, ...], int]:
        segs = self._segs
        return segs, max(0, bisect_right(segs, offset, key=_BASE) - 1)

    def _look_again(self, offset: int, err: Exception) -> None:
        """A segment left the list (retired), or vanished before this reader opened
        it (retention or compaction in the writer's process): find the current list.
        Raises ``OffsetOutOfRangeError`` if ``offset`` was deleted meanwhile."""
        if self.readonly:
            self._refresh(force=True)
        elif not isinstance(err, SegmentGoneError):
            # the writer's own list is always current: a file went away behind its back
            raise CorruptRecordError(f"a segment file of {self.path} vanished: {err}") from err
        if offset < self._start:
            raise OffsetOutOfRangeError(
                f"offset {offset} was deleted (log start is now {self._start})") from None

    def read(self, offset: int, max_bytes: int = 1 << 20) -> MessageSet:
        """Whole batches holding messages from ``offset`` on, up to about ``max_bytes``.

        ``OffsetOutOfRangeError`` unless ``start_offset <= offset <= end_offset``;
        ``offset == end_offset`` gives an empty set. At least one whole batch is
        returned when one exists, however large: in a compacted log whose hole runs
        to a segment's end, its messages may all lie below ``offset`` (read on from
        ``next_offset``, as ``iter()`` does).
        """
        self._check_readable()
        if type(offset) is not int or type(max_bytes) is not int:
            if not isinstance(offset, int) or isinstance(offset, bool):
                raise TypeError("offset must be an int")
            if not isinstance(max_bytes, int) or isinstance(max_bytes, bool):
                raise TypeError("max_bytes must be an int")
        if max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        self._enter()
        try:
            for _ in range(_RELOCATIONS):
                if self.readonly:
                    self._refresh()
                start, end = self._start, self._end
                if not start <= offset <= end:
                    raise OffsetOutOfRangeError(f"offset {offset} is outside [{start}, {end}]")
                if offset == end:
                    self._raise_corruption()
                    return MessageSet(b"", min_offset=offset, next_offset=offset)
                try:
                    return self._read_from(offset, max_bytes, end)
                except (SegmentGoneError, FileNotFoundError) as e:
                    self._look_again(offset, e)
            raise self._unsettled()
        finally:
            self._leave()

    def _unsettled(self) -> SeglogError:
        return SeglogError(f"the segments of {self.path} changed {_RELOCATIONS} times "
                           f"under one read; try again")

    def _read_from(self, offset: int, max_bytes: int, end: int) -> MessageSet:
        segs, i = self._locate(offset)
        for j in range(i, len(segs)):
            seg = segs[j]
            ms = seg.read(max(offset, seg.base_offset), max_bytes)
            if ms:
                return ms
            if j + 1 < len(segs):
                # nothing at or after offset here: the next segment must start there
                _check_covers(seg, ms.next_offset, segs[j + 1].base_offset, seg.size)
        return MessageSet(b"", min_offset=offset, next_offset=end)

    def read_arrow(self, start: int | None = None, end: int | None = None) -> Any:
        """Messages with ``start <= offset < end`` as a ``pyarrow.Table``
        (``seglog.message.arrow_schema()``), built from whole batches' buffers
        without an object per message (``MessageSet.columns()``).

        ``start`` defaults to ``start_offset``, ``end`` to ``end_offset`` when called.
        ``OffsetOutOfRangeError`` if ``start`` is outside the log or retention
        deletes what is being read. Needs pyarrow and numpy (the ``spark`` extra).
        """
        pa = arrow_modules()[0]
        self._check_readable()
        if self.readonly:
            self._refresh()
        lo = self._start if start is None else start
        hi = self._end if end is None else end
        for name, v in (("start", lo), ("end", hi)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"{name} must be an int or None")
        if not self._start <= lo <= self._end:
            raise OffsetOutOfRangeError(f"offset {lo} is outside [{self._start}, {self._end}]")
        batches = []
        parts: list[codec.ColumnPart] = []
        size = 0
        for part in self._batch_iters(lo, hi, columns=True):
            parts.append(part)
            size += len(part.values)
            if size >= _ARROW_BATCH_BYTES:
                batches.append(Columns.from_parts(parts).to_arrow())
                parts, size = [], 0
        if parts or not batches:
            batches.append(Columns.from_parts(parts).to_arrow())
        large = any(b.schema.field("value").type == pa.large_binary() for b in batches)
        if large:
            batches = [b.cast(arrow_schema(True)) for b in batches]
        return pa.Table.from_batches(batches, schema=arrow_schema(large))

    def iter(self, start: int | None = None, end: int | None = None) -> Iterator[Message]:
        """Messages with ``start <= offset < end``, in order.

        ``start`` defaults to ``start_offset``; ``end`` to the end of the log as the
        iteration reaches it (it does not wait for more: see ``wait``). Compaction
        and retention may run meanwhile: the iterator goes on in the current
        segments (``OffsetOutOfRangeError`` if retention deleted its next offset).
        """
        self._check_readable()
        if self.readonly:
            self._refresh()
        lo = self._start if start is None else start
        if not isinstance(lo, int) or isinstance(lo, bool):
            raise TypeError("start must be an int")
        if end is not None and (not isinstance(end, int) or isinstance(end, bool)):
            raise TypeError("end must be an int or None")
        if not self._start <= lo <= self._end:
            raise OffsetOutOfRangeError(f"offset {lo} is outside [{self._start}, {self._end}]")
        return chain.from_iterable(self._batch_iters(lo, end))

    def __iter__(self) -> Iterator[Message]:
        return self.iter()

    # -- for people: notebooks and operators ------------------------------------------
    def __len__(self) -> int:
        """Messages between ``start_offset`` and ``end_offset``: the offsets in between,
        or after compaction (which leaves gaps) the records, counted from the batches."""
        self._check_readable()
        if self.readonly:
            self._refresh()
        if "compact" not in self.config.cleanup_policy:
            return self._end - self._start
        return self._count()[2]

    def _count(self) -> tuple[int, int, int]:
        """(start, end, the records from start to end), counted again from the new
        start if retention deletes some under the count."""
        for _ in range(_RELOCATIONS):
            start, end = self._start, self._end
            try:
                return start, end, sum(1 for _ in self.iter(start, end))
            except OffsetOutOfRangeError:
                if self.readonly:
                    self._refresh(force=True)
                if self._start <= start:
                    raise
        raise self._unsettled()

    def stats(self) -> dict[str, Any]:
        """A snapshot as a plain dict: offsets, messages (``len``), segments, bytes
        (of stored batches: a writer's preallocated space is not counted), the oldest
        and newest record timestamps (ms; None when empty): the first batch's and
        the segments' largest. Reads batch headers only, whatever the batch sizes;
        a reader beside a writer that deletes or replaces segments looks again."""
        self._check_readable()
        return self._settled(self._stats)

    def _settled(self, look: Callable[[], _T]) -> _T:
        """``look()`` over the current segments, again over the new list when
        retention or compaction retired a segment under it (a bounded number of
        times: ``_unsettled`` past that)."""
        self._enter()
        try:
            for _ in range(_RELOCATIONS):
                if self.readonly:
                    self._refresh()
                try:
                    return look()
                except (SegmentGoneError, FileNotFoundError) as e:
                    try:
                        self._look_again(self._start, e)
                    except OffsetOutOfRangeError:
                        pass
            raise self._unsettled()
        finally:
            self._leave()

    def _stats(self, count: bool = True) -> dict[str, Any]:
        if count and "compact" in self.config.cleanup_policy:
            start, end, n = self._count()
        else:
            start, end = self._start, self._end
            n = end - start
        return _notebook.log_stats(self.path, start, end, n if count else None, self._segs,
                                   self.readonly)

    def _window(self, start: int | None, end: int | None, since: object,
                until: object) -> tuple[int, int, int | None, int | None]:
        """Offsets [lo, hi) and the time bounds in ms of a to_pandas-style window."""
        self._check_readable()
        if self.readonly:
            self._refresh()
        lo = self._start if start is None else start
        hi = self._end if end is None else min(end, self._end)
        t0 = None if since is None else as_ms(since, "since")
        t1 = None if until is None else as_ms(until, "until")
        if t0 is not None:
            at = self.offset_for_time(t0)
            lo = max(lo, self._end if at is None else at)
        if t1 is not None:
            at = self.offset_for_time(t1)
            hi = min(hi, self._end if at is None else at)
        return lo, max(lo, hi), t0, t1

    def to_pandas(self, start: int | None = None, end: int | None = None, *,
                  since: object = None, until: object = None) -> Any:
        """Messages as a ``pandas.DataFrame`` (columns offset, timestamp as UTC
        datetimes, key, value, headers), from offset ``start`` to ``end`` and with
        timestamps in ``[since, until)`` (datetimes, ISO 8601 strings or ms; naive
        means UTC). Built from ``read_arrow``; needs pandas and pyarrow (the ``spark``
        extra). Without ``start``, retention deleting the first messages meanwhile (a
        writer in another process) makes it read again from the new start."""
        for _ in range(_RELOCATIONS):
            lo, hi, t0, t1 = self._window(start, end, since, until)
            try:
                return _notebook.frame(self.read_arrow(lo, hi), t0, t1)
            except OffsetOutOfRangeError:
                if start is not None or self._start <= lo:
                    raise
        raise self._unsettled()

    def _html_stats(self) -> dict[str, Any]:
        """``stats()`` without the message count, which the view does not show (in a
        compacted log it would read every record)."""
        self._check_readable()
        return self._settled(lambda: self._stats(count=False))

    def _repr_html_(self) -> str:
        if self._closed:
            return _notebook.closed_html("seglog.Log", [("path", self.path)])
        st = self._html_stats()
        last = self._last(5, st["end_offset"])
        return _notebook.log_html(st, self._segs, self.config, last)

    def _last(self, n: int, end: int) -> list[Message]:
        """The messages of the ``n`` offsets before ``end``; if retention deletes
        them meanwhile (a writer in another process), those from the new start."""
        for _ in range(_RELOCATIONS):
            start = self.start_offset
            end = max(end, start)
            try:
                return list(self.iter(max(start, end - n), end))
            except OffsetOutOfRangeError:
                if self.readonly:
                    self._refresh(force=True)
                if self._start <= start:
                    raise
        raise self._unsettled()

    def _batch_iters(self, offset: int, end: int | None,
                     columns: bool = False) -> Iterator[Any]:
        # per batch an iterator of Messages, or with ``columns`` a codec.ColumnPart;
        # [segment, position, base offset of the batch there (None: unknown)]; files
        # are touched only inside _iter_step, never while messages are being yielded
        st: list[Any] = [None, 0, None]
        careful = False
        while True:
            if end is not None and offset >= end:
                return
            self._enter()
            try:
                step = self._iter_step(st, offset, end, careful)
            finally:
                self._leave()
            careful = False
            if step is None:
                return
            seg, pos = st[0], st[1]
            if isinstance(step, bytes):
                # decode the chunk's whole batches straight from the buffer
                try:
                    if columns:
                        done = yield from codec.iter_column_parts(
                            step, 0, len(step), offset, end, expect=st[2], partial=True)
                    else:
                        done = yield from codec.iter_messages(
                            step, 0, len(step), offset, end, expect=st[2], partial=True,
                            message_type=Message)
                except CorruptRecordError as e:
                    self._metrics.corrupt_batches += 1
                    raise e.at(seg.path, pos + (e.position or 0), e.offset) from None
                if done.position:
                    st[1] = pos + done.position
                    st[2] = done.next_offset
                    offset = max(offset, done.next_offset)
                else:
                    # a batch larger than the chunk, a short read or damage
                    careful = True
                continue
            yield from step.column_parts() if columns else step.message_iters()
            st[1] = pos + step.size_in_bytes
            offset = max(offset, step.next_offset)
            if step.end_of_batches is not None:
                st[2] = step.end_of_batches

    def _iter_step(self, st: list[Any], offset: int, end: int | None,
                   careful: bool) -> bytes | MessageSet | None:
        """The next chunk of the current segment (bytes), or a MessageSet read
        carefully, or None at the end of the log. Moves ``st`` to the next segment
        when the current one is done; re-finds ``offset`` after the segment list
        changed (compaction, retention, a reader's re-listing)."""
        for _ in range(_RELOCATIONS):
            try:
                seg: Segment | None = st[0]
                if seg is None or seg.retired:
                    if offset < self._start:
                        raise OffsetOutOfRangeError(
                            f"offset {offset} was deleted by retention while iterating "
                            f"(log start is now {self._start})")
                    segs, i = self._locate(offset)
                    if not segs:
                        return None
                    seg = segs[i]
                    pos, hdr = seg.find_position(offset)
                    st[:] = [seg, pos, hdr[codec.H_BASE] if hdr is not None else None]
                while True:
                    pos = st[1]
                    seg_end = seg.size
                    if pos >= seg_end and self.readonly:
                        self._refresh()
                        if seg.retired:
                            raise SegmentGoneError("re-listed")
                        seg_end = seg.size
                    if pos < seg_end:
                        break
                    if offset < self._start:
                        raise OffsetOutOfRangeError(
                            f"offset {offset} was deleted by retention while iterating "
                            f"(log start is now {self._start})")
                    segs = self._segs
                    k = bisect_right(segs, seg.base_offset, key=_BASE)
                    if k >= len(segs):
                        self._raise_corruption()
                        return None
                    _check_covers(seg, st[2] if st[2] is not None else offset,
                                  segs[k].base_offset, seg_end)
                    seg = segs[k]
                    st[:] = [seg, 0, seg.base_offset]
                if not careful:
                    buf = seg.pread(min(_ITER_CHUNK, seg_end - pos), pos)
                    if len(buf) >= _ITER_CHUNK or pos + len(buf) >= seg_end:
                        return buf
                return seg.read_at(pos, offset, _ITER_CHUNK, seg_end, end, st[2])
            except (SegmentGoneError, FileNotFoundError) as e:
                self._look_again(offset, e)
                st[0] = None
        raise self._unsettled()

    def offset_for_time(self, timestamp: int) -> int | None:
        """The first offset whose message timestamp is >= ``timestamp``, or None."""
        self._check_readable()
        ts = check_timestamp(timestamp)
        return self._settled(lambda: self._offset_for_time(ts))

    def _offset_for_time(self, ts: int) -> int | None:
        lo = self._start
        segs = self._segs
        for j, seg in enumerate(segs):
            if seg.max_timestamp < ts or not seg.size:
                continue
            entry = seg.time_index.lookup(ts)
            ix_off, pos = seg.index.lookup(entry[1]) if entry is not None else (seg.base_offset, 0)
            end = seg.size
            covered = ix_off
            for p, hdr in seg.batches(pos, end):
                covered = codec.last_offset(hdr) + 1
                if hdr[codec.H_MAX_TS] < ts or covered <= lo:
                    continue
                ms = seg.read_at(p, lo, 1, end)
                for m in ms:
                    if m[1] >= ts:
                        if j and segs[j - 1].base_offset >= lo:
                            # the answer may have been in records missing from the end
                            # of the segment before (timestamps mostly ascend)
                            prev = segs[j - 1]
                            _check_covers(prev, _end_offset(prev), seg.base_offset, prev.size)
                        return m[0]
            if j + 1 < len(segs):
                # walked to the end of a segment whose records reach ts: it must end
                # where the next begins, or the answer may be in what is missing
                _check_covers(seg, covered, segs[j + 1].base_offset, end)
        return None

    def _raise_corruption(self) -> None:
        """A reader at the visible end: raise damage found there, if any."""
        if self.readonly and self._segs and self._segs[-1].corruption is not None:
            damage = self._segs[-1].corruption
            if damage is not self._reported_damage:     # counted once, however often raised
                self._reported_damage = damage
                self._metrics.corrupt_batches += 1
            raise damage

    def _refresh(self, force: bool = False) -> None:
        """Pick up new data and new or deleted segments written by another process."""
        if self._closed:
            return
        with self._refresh_lock:
            self._refresh_locked(force)

    def _refresh_locked(self, force: bool) -> None:
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except FileNotFoundError:
            raise LogClosedError(f"log directory {self.path} is gone") from None
        segs = self._segs
        # an unchanged mtime proves nothing while the listing is within the clock's
        # granularity of it (coarse on some file systems: 1 s on HFS+, 2 s on FAT):
        # a change in the same tick leaves the same mtime, so look again
        if (force or mtime != self._dir_mtime or not segs
                or self._listed_at - mtime < _RACY_NS):
            self._dir_mtime = mtime
            self._listed_at = time.time_ns()
            new, gone, closers = _live.relist(self.path, segs, self.config.max_index_bytes)
            for close in closers:
                self._dispose(close)
            self._set_segments(new)
            self._retire(gone, "replaced by compaction or deleted by retention")
            start = read_checkpoint(self.path, LOG_START)
            self._start = max(start or 0, new[0].base_offset if new else 0)
        if self._segs:
            last = self._segs[-1]
            try:
                _live.refresh_live(last)
            except FileNotFoundError:
                return
            self._end = last.next_offset if last.next_offset is not None else last.base_offset



def _end_offset(seg: Segment) -> int:
    """One past the last offset of a sealed segment's last batch (a short walk from
    its last offset-index entry)."""
    off, pos = seg.index.last_entry()
    end = off
    for _, hdr in seg.batches(pos, seg.size, off):
        end = codec.last_offset(hdr) + 1
    return end


def _check_covers(seg: Segment, covered: int, next_base: int, position: int) -> None:
    """A sealed segment's batches end where the next segment begins (compaction
    leaves an empty batch over offsets it removed at the end): else offsets are
    missing from the middle of the log, which is damage, never a silent skip."""
    if covered < next_base:
        raise CorruptRecordError(
            f"offsets {covered} to {next_base - 1} are missing: the segment ends early "
            f"(cut back?) before the next segment starts", seg.path, position, covered)

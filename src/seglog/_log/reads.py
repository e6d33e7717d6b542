"""The read path over a ``LocalLog``: ``read``, ``iter``, ``read_arrow``, offset and
time lookups, counting, and the notebook views, each over a snapshot of the segment
tuple (Kafka's ``LocalLog.read``). ``Log``'s read methods are these, one call each.

A reader holds no lock while it yields messages: it counts itself in flight
(``LocalLog.enter``/``leave``) only around each ``pread``, index lookup or chunk
read, and re-finds its place when retention or compaction retired the segment it
holds (``OffsetOutOfRangeError`` if its next offset was deleted).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from functools import partial
from itertools import chain
from typing import Any, Callable, Iterator, TypeVar

from .._codec import decode as _decode
from .._runtime import points as _points
from .._codec.arrow_batches import arrow_columns
from .._codec.columns import arrow_modules, arrow_schema
from .._codec.records import as_ms, check_timestamp, make_message
from .._views import notebook as _notebook, verdict as _verdict
from ..errors import CorruptRecordError, OffsetOutOfRangeError, SeglogError
from ..message import Message, MessageSet
from ..segment import LogSegments, Segment, SegmentGoneError
from .live import LiveLog
from .local_log import LocalLog

# what the read path reads: a writer's list, or a readonly reader's
View = LocalLog | LiveLog

_RELOCATIONS = 64         # a reader re-finds its place at most this often per step
_T = TypeVar("_T")
_ITER_CHUNK = 1 << 20
# read_arrow's chunk: one pread, one numpy pass and one RecordBatch each (measured:
# bench/bench_peers.py)
_ARROW_CHUNK = 4 << 20


def _locate(local: View, offset: int) -> tuple[LogSegments, int]:
    """The segment list as it is now and the index of the segment holding ``offset``;
    ``OffsetOutOfRangeError`` if retention removed it after the caller checked the
    log start (the list is read once, after the start)."""
    _points.reach("read.lookup")
    segs = local.segs
    i = segs.holding(offset)
    if i < 0 and segs:
        raise OffsetOutOfRangeError(
            f"offset {offset} was deleted (log start is now {segs[0].base_offset})")
    return segs, max(0, i)


def _current(local: View) -> None:
    """The list as it is now: a readonly reader's looks at the files again (a
    writer's own list is always current; the check spares its hot path a call)."""
    if local.follows:
        local.refresh()


def _settled(local: View, look: Callable[..., _T], offset: int | None = None, *,
             relist: bool = True, from_start: bool = False, relocate: bool = True) -> _T:
    """The read path's one retry loop: ``look()`` over the current segments (after
    ``_current``, unless not ``relist``: an iterator's step looks again only at a
    segment's end), done again over the new list when retention or compaction
    retired a segment under it or a file vanished, a bounded number of times
    (``_unsettled`` past that). ``offset``: the reader's position, deleted
    meanwhile an ``OffsetOutOfRangeError`` (None: a look over the whole log, from
    wherever its start is now). ``from_start``: ``look(start)`` reads from the log
    start, taken once per try, and is done again from the new start when retention
    deletes what it reads (a writer in another process). ``relocate`` False: a look through ``iterate`` or
    ``read_arrow``, which find their place again themselves: a list that changed or a
    file that vanished under it (a refresh's ``FileNotFoundError``) is the caller's,
    not looked at again. ``look`` counts its reads in flight itself."""
    for _ in range(_RELOCATIONS):
        if relist:
            _current(local)
        start = local.start if from_start else 0
        try:
            return look(start) if from_start else look()
        except (SegmentGoneError, FileNotFoundError) as e:
            if not relocate:
                raise
            _look_again(local, offset, e)
        except OffsetOutOfRangeError:
            if not from_start:
                raise
            if local.follows:
                local.refresh(force=True)
            if local.start <= start:
                raise
    raise _unsettled(local)


def _look_again(local: View, offset: int | None, err: Exception) -> None:
    """A segment left the list (retired), or vanished before this reader opened
    it (retention or compaction in the writer's process): find the current list.
    Raises ``OffsetOutOfRangeError`` if ``offset`` was deleted meanwhile."""
    if local.follows:
        local.refresh(force=True)
    elif not isinstance(err, SegmentGoneError):
        # the writer's own list is always current: a file went away behind its back
        raise CorruptRecordError(f"a segment file of {local.path} vanished: {err}") from err
    if offset is not None and offset < local.start:
        raise OffsetOutOfRangeError(
            f"offset {offset} was deleted (log start is now {local.start})") from None


def read(local: View, offset: int, max_bytes: int = 1 << 20) -> MessageSet:
    """``Log.read`` (whose docstring states the contract)."""
    local.check_readable()
    if type(offset) is not int or type(max_bytes) is not int:
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise TypeError("offset must be an int")
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool):
            raise TypeError("max_bytes must be an int")
    if max_bytes < 1:
        raise ValueError("max_bytes must be >= 1")
    local.enter()
    try:
        return _settled(local, lambda: _read_at(local, offset, max_bytes), offset)
    finally:
        local.leave()


def _read_at(local: View, offset: int, max_bytes: int) -> MessageSet:
    start, end = local.start, local.end
    if not start <= offset <= end:
        raise OffsetOutOfRangeError(f"offset {offset} is outside [{start}, {end}]")
    if offset == end:
        local.raise_damage()
        return MessageSet(b"", min_offset=offset, next_offset=offset)
    return _read_from(local, offset, max_bytes, end)


def _unsettled(local: View) -> SeglogError:
    return SeglogError(f"the segments of {local.path} changed {_RELOCATIONS} times "
                       f"under one read; try again")


def _read_from(local: View, offset: int, max_bytes: int, end: int) -> MessageSet:
    segs, i = _locate(local, offset)
    for j in range(i, len(segs)):
        seg = segs[j]
        ms = seg.read(max(offset, seg.base_offset), max_bytes)
        if ms:
            return ms
        if j + 1 < len(segs):
            # nothing at or after offset here: the next segment must start there
            _check_covers(seg, ms.next_offset, segs[j + 1].base_offset, seg.size)
    return MessageSet(b"", min_offset=offset, next_offset=end)


def read_arrow(local: View, start: int | None = None, end: int | None = None,
               views: bool = False) -> Any:
    """``Log.read_arrow`` (whose docstring states the contract)."""
    pa = arrow_modules()[0]
    batches = list(iter_arrow(local, start, end, views))
    large = any(b.schema.field("value").type == pa.large_binary() for b in batches)
    if large:
        batches = [b.cast(arrow_schema(True)) for b in batches]
    return pa.Table.from_batches(batches, schema=arrow_schema(large, views=views and not large))


def iter_arrow(local: View, start: int | None = None, end: int | None = None,
               views: bool = False) -> Iterator[Any]:
    """``Log.iter_arrow`` (whose docstring states the contract); the arguments are
    checked at the call, not at the first batch."""
    arrow_modules()
    local.check_readable()
    _current(local)
    lo = local.start if start is None else start
    hi = local.end if end is None else end
    for name, v in (("start", lo), ("end", hi)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"{name} must be an int or None")
    if not local.start <= lo <= local.end:
        raise OffsetOutOfRangeError(f"offset {lo} is outside [{local.start}, {local.end}]")
    return _arrow_batches(local, lo, hi, views, end is None)


def _arrow_batches(local: View, lo: int, hi: int, views: bool, to_end: bool
                   ) -> Iterator[Any]:
    for cols in _batch_iters(local, lo, hi, arrow=True, views=views):
        yield cols.to_arrow()
    if to_end:
        # read to the visible end: damage a readonly reader found there ends it, and
        # must be told, as iter() and read() at the end tell it
        local.raise_damage()


def iterate(local: View, start: int | None = None, end: int | None = None,
            owner: object = None) -> Iterator[Message]:
    """``Log.iter`` (whose docstring states the contract). The iterator keeps
    ``owner`` alive (a ``Log`` that nothing else references is closed when it is
    collected: ``Log.open(p).iter()`` must still read to the end)."""
    local.check_readable()
    _current(local)
    lo = local.start if start is None else start
    if not isinstance(lo, int) or isinstance(lo, bool):
        raise TypeError("start must be an int")
    if end is not None and (not isinstance(end, int) or isinstance(end, bool)):
        raise TypeError("end must be an int or None")
    if not local.start <= lo <= local.end:
        raise OffsetOutOfRangeError(f"offset {lo} is outside [{local.start}, {local.end}]")
    return chain.from_iterable(_batch_iters(local, lo, end, owner=owner))


# -- for people: notebooks and operators ----------------------------------------------
def count(local: View) -> int:
    """``len(log)`` (whose docstring states the contract)."""
    local.check_readable()
    _current(local)
    if "compact" not in local.config.cleanup_policy:
        return local.end - local.start
    return _count(local)[2]


def _count(local: View) -> tuple[int, int, int]:
    """(start, end, the records from start to end), counted again from the new
    start if retention deletes some under the count."""
    def count(start: int) -> tuple[int, int, int]:
        end = local.end
        return start, end, sum(1 for _ in iterate(local, start, end))
    return _settled(local, count, relist=False, from_start=True, relocate=False)


def stats(local: View, readonly: bool) -> dict[str, Any]:
    """``Log.stats`` (whose docstring states the contract); ``readonly``: the ``Log``'s
    (one of several writers reads through a readonly reader's list)."""
    local.check_readable()
    return _settled(local, lambda: _stats(local, readonly))


@contextmanager
def _reading(local: View) -> Iterator[None]:
    """One read in flight: of one segment (or two neighbours) of a look over many,
    never of all of them at once, so that the log closes idle files in between
    (a log of thousands of segments would otherwise hold all their files)."""
    local.enter()
    try:
        yield
    finally:
        local.leave()


def _stats(local: View, readonly: bool, count: bool = True) -> dict[str, Any]:
    if count and "compact" in local.config.cleanup_policy:
        start, end, n = _count(local)
    else:
        start, end = local.start, local.end
        n = end - start
    segs = local.segs
    for seg in segs:
        with _reading(local):        # measured here, read from memory below
            if seg.size:
                seg.max_timestamp
    return _notebook.log_stats(local.path, start, end, n if count else None, segs,
                               readonly, partial(_reading, local))


def window(local: View, start: int | None, end: int | None, since: object,
            until: object) -> tuple[int, int, int | None, int | None]:
    """Offsets [lo, hi) and the time bounds in ms of a to_pandas-style window."""
    local.check_readable()
    _current(local)
    lo = local.start if start is None else start
    hi = local.end if end is None else min(end, local.end)
    t0 = None if since is None else as_ms(since, "since")
    t1 = None if until is None else as_ms(until, "until")
    if t0 is not None:
        at = offset_for_time(local, t0)
        lo = max(lo, local.end if at is None else at)
    if t1 is not None:
        at = offset_for_time(local, t1)
        hi = min(hi, local.end if at is None else at)
    return lo, max(lo, hi), t0, t1


def to_pandas(local: View, start: int | None = None, end: int | None = None, *,
              since: object = None, until: object = None, decode: str | None = None
              ) -> Any:
    """``Log.to_pandas`` (whose docstring states the contract)."""
    def frame(first: int | None = None) -> Any:
        # ``first``: the log start the retry loop took (no start offset given)
        lo, hi, t0, t1 = window(local, start if first is None else first, end, since,
                                until)
        # to the visible end (no end, no until): read_arrow's own end, which tells of
        # damage there
        to_end = end is None and until is None
        return _notebook.frame(read_arrow(local, lo, None if to_end else hi), t0, t1, decode)
    try:
        # without a start offset, from the log's start wherever retention moves it
        return _settled(local, frame, relist=False, from_start=start is None,
                        relocate=False)
    except CorruptRecordError as e:
        # raised from here, not from the read path's frames (a notebook shows the
        # user's call and this), with what to do next
        err = e.at(e.path, e.position, e.offset)
        err.add_note(f"log.verify() (or `seglog verify {local.path}`) says what is at "
                     f"stake and what to do")
        raise err from None


def repr_html(local: View, readonly: bool) -> str:
    if local.closed:
        return _notebook.closed_html("seglog.Log", [("path", local.path)])
    local.check_readable()

    def view() -> str:
        # built whole over one list of segments: done again over the new list when
        # retention or compaction removed a file the view measures (``_settled``)
        st = _stats(local, readonly, count=False)
        last: list[Message] = []
        last_error = None
        try:
            last = last_messages(local, 5, st["end_offset"])
        except CorruptRecordError as e:      # the view says so, and what to do
            last_error = str(e)
        return _notebook.log_html(_notebook.LogView(
            st, local.segs, local.config, partial(_reading, local), last, last_error,
            verified=_verdict.latest(local.path)))
    return _settled(local, view)


def last_messages(local: View, n: int, end: int) -> list[Message]:
    """The messages of the ``n`` offsets before ``end``; if retention deletes
    them meanwhile (a writer in another process), those from the new start."""
    def last(start: int) -> list[Message]:
        stop = max(end, start)
        return list(iterate(local, max(start, stop - n), stop))
    return _settled(local, last, from_start=True, relocate=False)


class _Place:
    """Where an iteration is: the segment it reads (None: to be found for its next
    offset), the position there, and the base offset of the batch at that position
    (None: not known), which the decoders check the batch against."""

    __slots__ = ("seg", "pos", "expect")

    def __init__(self) -> None:
        self.seg: Segment | None = None
        self.pos = 0
        self.expect: int | None = None

    def move(self, seg: Segment, pos: int, expect: int | None) -> None:
        self.seg, self.pos, self.expect = seg, pos, expect


def _batch_iters(local: View, offset: int, end: int | None, columns: bool = False,
                 owner: object = None, arrow: bool = False, views: bool = False
                 ) -> Iterator[Any]:
    # ``owner`` lives as long as this generator's frame (see ``iterate``);
    # per batch an iterator of Messages, or with ``columns`` a _codec.decode.ColumnPart, or
    # with ``arrow`` per chunk of batches an ArrowColumns (with ``views``: over the
    # chunk's bytes); ``at``: where it is (``_Place``); files are touched only
    # inside _iter_step, never while messages are being yielded
    at = _Place()
    careful = False
    chunk = _ARROW_CHUNK if arrow else _ITER_CHUNK
    while True:
        if end is not None and offset >= end:
            return
        local.enter()
        try:
            step = _iter_step(local, at, offset, end, careful, chunk,
                              _pool_pread if arrow else None)
        finally:
            local.leave()
        careful = False
        if step is None:
            return
        seg, pos = at.seg, at.pos
        assert seg is not None           # a step that read something holds its segment
        if not isinstance(step, MessageSet):
            # decode the chunk's whole batches straight from the buffer
            try:
                if arrow:
                    cols, done = arrow_columns(step, 0, len(step), offset, end, expect=at.expect,
                                               partial=True, views=views)
                    if len(cols.offsets):
                        yield cols
                elif columns:
                    done = yield from _decode.iter_column_parts(
                        step, 0, len(step), offset, end, expect=at.expect, partial=True)
                else:
                    done = yield from _decode.iter_messages(
                        step, 0, len(step), offset, end, expect=at.expect, partial=True,
                        message_type=make_message)
            except CorruptRecordError as e:
                local.metrics.corrupt_batch()
                raise e.at(seg.path, pos + (e.position or 0), e.offset) from None
            if done.position:
                at.pos = pos + done.position
                at.expect = done.next_offset
                offset = max(offset, done.next_offset)
            else:
                # a batch larger than the chunk, a short read or damage
                careful = True
            continue
        if arrow:
            yield step.arrow_columns(views=views)
        else:
            yield from step.column_parts() if columns else step.message_iters()
        at.pos = pos + step.size_in_bytes
        offset = max(offset, step.next_offset)
        if step.end_of_batches is not None:
            at.expect = step.end_of_batches


def _pool_pread(seg: Segment, n: int, pos: int) -> Any:
    """``seg.pread`` into a buffer of Arrow's memory pool (a ``pyarrow.Buffer``),
    which the arrays built over it keep alive; the pool hands back the memory of
    earlier reads, where fresh memory costs a page fault a page."""
    buf = arrow_modules()[0].allocate_buffer(n)
    got = os.preadv(seg.fileno(), [buf], pos)
    return buf if got == n else buf.slice(0, got)


def _iter_step(local: View, at: _Place, offset: int, end: int | None,
               careful: bool, chunk: int = _ITER_CHUNK,
               pread: Callable[[Segment, int, int], Any] | None = None
               ) -> bytes | MessageSet | None:
    """The next chunk of the current segment (bytes), or a MessageSet read
    carefully, or None at the end of the log. Moves ``st`` to the next segment
    when the current one is done; re-finds ``offset`` after the segment list
    changed (compaction, retention, a reader's re-listing)."""
    def step() -> bytes | MessageSet | None:
        try:
            return _step(local, at, offset, end, careful, chunk, pread)
        except (SegmentGoneError, FileNotFoundError):
            at.seg = None             # found again in the list as it is then
            raise
    return _settled(local, step, offset, relist=False)


def _step(local: View, at: _Place, offset: int, end: int | None, careful: bool,
          chunk: int, pread: Callable[[Segment, int, int], Any] | None
          ) -> bytes | MessageSet | None:
    """One try of ``_iter_step``, over the list as it is (``SegmentGoneError`` or
    ``FileNotFoundError``: it changed under this reader)."""
    seg: Segment | None = at.seg
    if seg is None or seg.retired:
        if offset < local.start:
            raise OffsetOutOfRangeError(
                f"offset {offset} was deleted by retention while iterating "
                f"(log start is now {local.start})")
        segs, i = _locate(local, offset)
        if not segs:
            return None
        seg = segs[i]
        pos, hdr = seg.find_position(offset)
        at.move(seg, pos, hdr.base_offset if hdr is not None else None)
    while True:
        pos = at.pos
        seg_end = seg.size
        if pos >= seg_end and local.follows:
            local.refresh()
            if seg.retired:
                raise SegmentGoneError("re-listed")
            seg_end = seg.size
        if pos < seg_end:
            break
        if offset < local.start:
            raise OffsetOutOfRangeError(
                f"offset {offset} was deleted by retention while iterating "
                f"(log start is now {local.start})")
        segs = local.segs
        k = segs.holding(seg.base_offset) + 1
        if not k or segs[k - 1] is not seg:
            # the list changed under this reader (compaction swapped in a copy
            # of its segment, merged with the next ones, and has not retired
            # the old one yet): its next segment is not this list's next
            raise SegmentGoneError("replaced in the list")
        if k >= len(segs):
            local.raise_damage()
            return None
        if seg.size != seg_end:
            # it grew after this reader measured it, then rolled (the list with
            # its next segment came later): read what was added first
            continue
        _check_covers(seg, at.expect if at.expect is not None else offset,
                      segs[k].base_offset, seg_end)
        seg = segs[k]
        at.move(seg, 0, seg.base_offset)
    if not careful:
        buf = (pread or Segment.pread)(seg, min(chunk, seg_end - pos), pos)
        if len(buf) >= chunk or pos + len(buf) >= seg_end:
            return buf
    return seg.read_at(pos, offset, chunk, seg_end, end, at.expect)


def offset_for_time(local: View, timestamp: int) -> int | None:
    """``Log.offset_for_time`` (whose docstring states the contract)."""
    local.check_readable()
    ts = check_timestamp(timestamp)
    return _settled(local, lambda: _offset_for_time(local, ts))


def _offset_for_time(local: View, ts: int) -> int | None:
    lo = local.start
    segs = local.segs
    for j, seg in segs.reaching(ts, partial(_reading, local)):
        with _reading(local):
            found = _offset_in(segs, j, seg, lo, ts)
        if found is not None:
            return found
    return None


def _offset_in(segs: tuple[Segment, ...], j: int, seg: Segment, lo: int, ts: int
               ) -> int | None:
    """``_offset_for_time`` in the ``j``-th segment ``seg`` of ``segs``, one whose
    largest timestamp reaches ``ts``."""
    entry = seg.time_index.lookup(ts)
    ix_off, pos = seg.index.lookup(entry[1]) if entry is not None else (seg.base_offset, 0)
    end = seg.size
    covered = ix_off
    for p, hdr in seg.batches(pos, end):
        covered = hdr.last_offset + 1
        if hdr.max_timestamp < ts or covered <= lo:
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


def _end_offset(seg: Segment) -> int:
    """One past the last offset of a sealed segment's last batch (a short walk from
    its last offset-index entry)."""
    off, pos = seg.index.last_entry()
    end = off
    for _, hdr in seg.batches(pos, seg.size, off):
        end = hdr.last_offset + 1
    return end


def _check_covers(seg: Segment, covered: int, next_base: int, position: int) -> None:
    """A sealed segment's batches end where the next segment begins (compaction
    leaves an empty batch over offsets it removed at the end): else offsets are
    missing from the middle of the log, which is damage, never a silent skip."""
    if covered < next_base:
        raise CorruptRecordError(
            f"offsets {covered} to {next_base - 1} are missing: the segment ends early "
            f"(cut back?) before the next segment starts", seg.path, position, covered)

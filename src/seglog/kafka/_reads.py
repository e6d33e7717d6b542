"""The read path over a partition's segments: ``walk`` (every data batch a reader may
see between two offsets, each framed and checksummed, control batches and, under
read_committed, aborted transactions' batches left out) and ``message_iters`` (the
messages of each batch: uniform batches by strided slices, ``_uniform``; any other by
``_wire.decode``).
"""

from __future__ import annotations

from bisect import bisect_right
from functools import lru_cache
from itertools import repeat
from operator import itemgetter
# Any: the caller's message type (as _codec.decode)
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from ..errors import CorruptRecordError
from . import _uniform, _wire
from ._segments import CHUNK, Segment
from ._txn import Fates
from ._wire import CONTROL, TIMESTAMP_TYPE, TRANSACTIONAL, BatchInfo

T = TypeVar("T")
# (buffer, batch header with its position in the buffer, segment path, the buffer's
# file position)
Found = tuple[bytes, BatchInfo, str, int]


def _checked(segments: Sequence[Segment], start: int, end: int, chunk: int = CHUNK
             ) -> Iterator[tuple[str, bytes, BatchInfo, int]]:
    """(segment path, buffer, header, the buffer's file position) of every batch
    holding offsets in ``[start, end)``, framed and checksummed."""
    bases = [s.base for s in segments]
    k = max(bisect_right(bases, start) - 1, 0)
    batch_size, header, check = _wire.batch_size, _wire.header, _wire.check
    first = True
    for seg in segments[k:]:
        if seg.base >= end:
            return
        pos = seg.position_for(start) if first else 0
        first = False
        path = seg.path
        for buf, n, at in seg.chunks(pos, chunk=chunk):
            i = 0
            while i < n:
                size = batch_size(buf, i, n)
                try:
                    info = header(buf, i, size)          # type: ignore[arg-type]
                    i += size                            # type: ignore[operator]
                    if info.last_offset < start:
                        continue
                    if info.base_offset >= end:
                        return
                    check(buf, info)
                except CorruptRecordError as e:
                    raise e.at(path, at + (e.position or 0), e.offset) from None
                yield path, buf, info, at


def walk(segments: Sequence[Segment], start: int, end: int, fates: Fates | None,
         chunk: int = CHUNK) -> Iterator[Found]:
    """The data batches holding offsets in ``[start, end)``, in order, read ``chunk``
    bytes at a time."""
    for path, buf, info, at in _checked(segments, start, end, chunk):
        attrs = info.attributes
        if info.magic == 2 and attrs & (CONTROL | TRANSACTIONAL):
            if attrs & CONTROL:
                continue
            if fates is not None and fates.skips(info):
                continue
        yield buf, info, path, at


def every_batch(segments: Sequence[Segment], start: int, end: int, decode: bool
                ) -> Iterator[tuple[str, BatchInfo, _wire.Records | None]]:
    """Every batch holding offsets in ``[start, end)``, control batches too: (segment
    path, header with its position in the file, its records when ``decode``), each
    checksummed; ``CorruptRecordError`` at the first damage."""
    for path, buf, info, at in _checked(segments, start, end):
        try:
            recs = _wire.decode(buf, info) if decode else None
        except CorruptRecordError as e:
            raise e.at(path, at + (e.position or 0), e.offset) from None
        yield path, info._replace(position=at + info.position), recs


def message_iters(found: Iterator[Found], start: int, end: int,
                  message: Callable[[Any], T]) -> Iterator[Iterator[T]]:
    """Per batch, an iterator of its messages with offsets in ``[start, end)`` built by
    ``message`` from (offset, timestamp, key, value, headers)."""
    runs_of, zz = _uniform.runs, _uniform.ZIGZAG
    for buf, info, path, at in found:
        try:
            if info.magic == 2 and info.base_offset >= start and info.last_offset < end:
                data, s, e = _wire.records_span(buf, info)
                runs = runs_of(data, s, e, info.records)
                if runs is not None:
                    base = info.base_offset
                    log_append = info.attributes & TIMESTAMP_TYPE
                    base_ts = info.base_timestamp
                    for r in runs:
                        p, stop, st, m = r.start, r.stop, r.stride, r.records
                        o = base + r.first_delta
                        ts: Iterable[int]
                        if log_append:
                            ts = repeat(info.max_timestamp, m)
                        else:
                            tsd = data[p + r.ts_at:stop:st]
                            if tsd.count(0) == m:
                                ts = repeat(base_ts, m)
                            else:               # a few distinct deltas: one add each
                                table = {v: base_ts + zz[v] for v in set(tsd)}
                                ts = map(table.__getitem__, tsd)
                        yield map(message, zip(
                            range(o, o + m), ts,
                            _fields(data, p, stop, st, r.key_at, r.key_len, m),
                            _fields(data, p, stop, st, r.value_at, r.value_len, m),
                            repeat((), m)))
                    continue
                recs = general(buf, info, (data, s, e))
            else:
                recs = general(buf, info, None)
        except CorruptRecordError as e:
            raise placed_in(e, path, at, info) from None
        items: Iterable[Any] = zip(recs.offsets, recs.timestamps, recs.keys, recs.values, recs.headers)
        if recs.offsets[0] < start or recs.offsets[-1] >= end:
            items = (t for t in items if start <= t[0] < end)
        yield map(message, items)


def _fields(data: bytes, p: int, stop: int, stride: int, at: int, length: int, m: int
            ) -> Iterable[bytes | None]:
    """One field of every record of a run: a tuple of its values cut from the run's
    bytes by one cached ``itemgetter`` of slices (one C call), or Nones for a null."""
    if length < 0:
        return repeat(None, m)
    return _cutter(stride, at, length, m)(data[p:stop])  # type: ignore[no-any-return]


@lru_cache(maxsize=256)
def _cutter(stride: int, at: int, length: int, m: int) -> Callable[[bytes], Any]:
    """The field at ``at`` of ``length`` bytes of each of ``m`` records of ``stride``
    bytes, as an ``itemgetter`` of slices (a 1-tuple's getter returns no tuple)."""
    cuts = [slice(k * stride + at, k * stride + at + length) for k in range(m)]
    if m == 1:
        one = itemgetter(cuts[0])
        return lambda b: (one(b),)
    return itemgetter(*cuts)


def general(buf: bytes, info: BatchInfo, span: tuple[bytes, int, int] | None
            ) -> _wire.Records:
    """A batch's records by the general decoder: magic 2 from its records ``span``
    (buffer, start, end), legacy messages (``span`` None) from ``buf``."""
    if span is None:
        return _wire.decode(buf, info)
    data, s, e = span
    return _wire.decode_v2(data[s:e] if s or e != len(data) else data, info)


def placed_in(e: CorruptRecordError, path: str, at: int, info: BatchInfo
              ) -> CorruptRecordError:
    """A decoding error of a batch in a buffer read from file position ``at``, placed
    in the file (at the batch when the error has no position of its own)."""
    return e.at(path, at + (e.position if e.position is not None else info.position),
                e.offset)


def placed(e: Exception, path: str, position: int) -> Exception:
    """A decoding error of the batch at file ``position`` placed in its file (a
    ``CorruptRecordError`` with the position; any other error as it is)."""
    if isinstance(e, CorruptRecordError):
        return e.at(path, position, e.offset)
    return e



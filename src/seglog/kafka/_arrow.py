"""Arrow record batches (``arrow_schema()``, as ``Log.iter_arrow`` gives) from the
batches ``_reads.walk`` finds: a uniform batch's fields are gathered with numpy (one
strided copy of its values, timestamps from the deltas' bytes at once), any other
batch's from ``_wire.decode``'s lists. One record batch per chunk read (about 1 MiB).
"""

from __future__ import annotations

from itertools import chain
from typing import Any, Iterator

from .._columns import arrow_modules, arrow_schema, record_batch
from ..errors import CorruptRecordError
from . import _uniform, _wire
from ._reads import Found
from ._wire import CODEC_MASK, TIMESTAMP_TYPE, V2_HEADER_SIZE


class _Binary:
    """A binary column being gathered: lengths, pieces of data, null positions."""

    def __init__(self, np: Any) -> None:
        self.np = np
        self.lengths: list[Any] = []
        self.data: list[Any] = []
        self.nulls: list[Any] = []
        self.n = 0

    def strided(self, data: bytes, p: int, stop: int, stride: int, at: int, length: int,
                m: int) -> None:
        np = self.np
        if length < 0:
            self.lengths.append(np.zeros(m, np.int64))
            self.nulls.append(np.arange(self.n, self.n + m))
        else:
            rows = np.frombuffer(data, np.uint8, m * stride, p).reshape(m, stride)
            self.lengths.append(np.full(m, length, np.int64))
            self.data.append(rows[:, at:at + length])
        self.n += m

    def listed(self, items: list[bytes | None]) -> None:
        np = self.np
        self.lengths.append(np.fromiter((len(x) if x is not None else 0 for x in items),
                                        np.int64, len(items)))
        nulls = [i for i, x in enumerate(items) if x is None]
        if nulls:
            self.nulls.append(np.array(nulls, np.int64) + self.n)
        self.data.append(np.frombuffer(b"".join(x for x in items if x is not None), np.uint8))
        self.n += len(items)

    def array(self, pa: Any) -> Any:
        np = self.np
        n = self.n
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int64)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        total = int(offsets[-1])
        buf = np.empty(total, np.uint8)
        at = 0
        for piece in self.data:
            size = piece.size
            if piece.ndim == 2:
                buf[at:at + size].reshape(piece.shape)[...] = piece
            else:
                buf[at:at + size] = piece
            at += size
        large = total >= 1 << 31
        validity = None
        nulls = np.concatenate(self.nulls) if self.nulls else None
        if nulls is not None:
            mask = np.ones(n, bool)
            mask[nulls] = False
            validity = pa.array(mask).buffers()[1]
        kind = pa.large_binary() if large else pa.binary()
        return pa.Array.from_buffers(
            kind, n, [validity, pa.py_buffer(offsets if large else offsets.astype(np.int32)),
                      pa.py_buffer(buf)], null_count=0 if nulls is None else len(nulls))


def record_batches(found: Iterator[Found], start: int, end: int) -> Iterator[Any]:
    """``pyarrow.RecordBatch``es of the found batches' records in ``[start, end)``."""
    pa, np = arrow_modules()
    runs_of = _uniform.runs
    zz = np.array(_uniform.ZIGZAG, np.int64)

    def fresh() -> tuple[list[Any], list[Any], _Binary, _Binary, list[Any]]:
        return [], [], _Binary(np), _Binary(np), []

    offs, stamps, keys, values, headers = fresh()
    any_headers = False
    current = None
    for buf, info, path, at in found:
        if current is not None and at != current and offs:
            yield _batch(pa, np, offs, stamps, keys, values, headers if any_headers else None)
            offs, stamps, keys, values, headers = fresh()
            any_headers = False
        current = at
        try:
            if info.magic == 2 and info.base_offset >= start and info.last_offset < end:
                if info.attributes & CODEC_MASK:
                    data = _wire.records_region(buf, info)
                    s, e = 0, len(data)
                else:
                    data = buf
                    s, e = info.position + V2_HEADER_SIZE, info.position + info.size
                runs = runs_of(data, s, e, info.records)
                if runs is not None:
                    for r in runs:
                        p, stop, st, m = r.start, r.stop, r.stride, r.records
                        o = info.base_offset + r.first_delta
                        offs.append(np.arange(o, o + m, dtype=np.int64))
                        if info.attributes & TIMESTAMP_TYPE:
                            stamps.append(np.full(m, info.max_timestamp, np.int64))
                        else:
                            deltas = np.frombuffer(data, np.uint8, m * st, p).reshape(m, st)
                            stamps.append(zz[deltas[:, r.ts_at]] + info.base_timestamp)
                        keys.strided(data, p, stop, st, r.key_at, r.key_len, m)
                        values.strided(data, p, stop, st, r.value_at, r.value_len, m)
                        headers.append(((),) * m)
                    continue
                recs = _wire.decode_v2(data[s:e] if s or e != len(data) else data, info)
            else:
                recs = _wire.decode(buf, info)
        except CorruptRecordError as e:
            raise e.at(path, at + (e.position if e.position is not None else info.position),
                       e.offset) from None
        keep = [i for i, o in enumerate(recs.offsets) if start <= o < end]
        if len(keep) != len(recs.offsets):
            recs = _wire.Records(*([col[i] for i in keep] for col in recs))  # type: ignore[arg-type]
        if not recs.offsets:
            continue
        offs.append(np.array(recs.offsets, np.int64))
        stamps.append(np.array(recs.timestamps, np.int64))
        keys.listed(recs.keys)
        values.listed(recs.values)
        hs = [tuple((k, b"" if v is None else v) for k, v in h) for h in recs.headers]
        any_headers = any_headers or any(hs)
        headers.append(hs)
    if offs:
        yield _batch(pa, np, offs, stamps, keys, values, headers if any_headers else None)


def _batch(pa: Any, np: Any, offs: list[Any], stamps: list[Any], keys: _Binary,
           values: _Binary, headers: list[Any] | None) -> Any:
    o = pa.array(np.concatenate(offs))
    ts = pa.array(np.concatenate(stamps))
    return record_batch(o, ts, keys.array(pa), values.array(pa),
                        None if headers is None else list(chain.from_iterable(headers)))


def empty_table() -> Any:
    """A table of ``arrow_schema()`` with no rows."""
    return arrow_schema().empty_table()

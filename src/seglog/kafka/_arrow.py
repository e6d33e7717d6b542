"""Arrow record batches (``arrow_schema()``, as ``Log.iter_arrow`` gives) from the
batches ``_reads.walk`` finds: a uniform batch's fields are gathered with numpy (one
strided copy of its values, timestamps from the deltas' bytes at once), any other
batch's from ``_wire.decode``'s lists. One record batch per chunk read (about 1 MiB).
"""

from __future__ import annotations

from itertools import chain
# Any: pyarrow and numpy modules and arrays: they ship no type information
from typing import Any, Iterator

from .._codec.columns import arrow_modules, arrow_schema, record_batch
from ..errors import CorruptRecordError
from . import _uniform, _wire
from ._reads import Found, general, placed_in
from ._wire import TIMESTAMP_TYPE


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
    """``pyarrow.RecordBatch``es of the found batches' records in ``[start, end)``: one
    per chunk read. A chunk whose batches are all uncompressed uniform runs of one
    key and value length is gathered by numpy at once (``_gather``); any other
    chunk batch by batch."""
    pa, np = arrow_modules()
    runs_of, candidates = _uniform.runs, _uniform.candidates
    layouts: dict[tuple[int, int], tuple[Any, int]] = {}
    # per batch: (info, unchecked runs of a batch like it, None, (its records' span, the
    # shift from those runs' positions to its own)), (info,
    # checked runs, the buffer they are in, None) or (info, Records, None, None)
    pending: list[Any] = []
    current = None
    for buf, info, path, at in found:
        if current is not None and at != current and pending:
            yield _chunk(pa, np, current_buf, pending)
            pending = []
        current, current_buf = at, buf
        try:
            if info.magic == 2 and info.base_offset >= start and info.last_offset < end:
                data, s, e = _wire.records_span(buf, info)
                if data is buf:         # checked for the whole chunk at once, by numpy
                    # a batch of the size and count of one seen before is guessed to
                    # have its layout (numpy's check refuses a wrong guess)
                    key = (e - s, info.records)
                    seen = layouts.get(key)
                    if seen is None:
                        found_runs = candidates(data, s, e, info.records)
                        if found_runs is not None:
                            # the structural bytes the layout was read from: every
                            # record guessed to have it must have them
                            cands = [(r, rels, od, tuple(data[r.start + j] for j in rels))
                                     for r, rels, od in found_runs]
                            if len(layouts) > 64:
                                layouts.clear()
                            seen = layouts[key] = (cands, s)
                    if seen is not None:
                        pending.append((info, seen[0], None, (s, e, s - seen[1])))
                        continue
                runs = runs_of(data, s, e, info.records)
                if runs is not None:
                    pending.append((info, runs, data, None))
                    continue
                recs = general(buf, info, (data, s, e))
            else:
                recs = general(buf, info, None)
        except CorruptRecordError as e:
            raise placed_in(e, path, at, info) from None
        keep = [i for i, o in enumerate(recs.offsets) if start <= o < end]
        if len(keep) != len(recs.offsets):
            recs = _wire.Records(*([col[i] for i in keep] for col in recs))  # type: ignore[arg-type]
        if recs.offsets:
            pending.append((info, recs, None, None))
    if pending:
        yield _chunk(pa, np, current_buf, pending)


def _chunk(pa: Any, np: Any, buf: bytes, pending: list[Any]) -> Any:
    unchecked = [p for p in pending if p[3] is not None]
    if len(unchecked) == len(pending):
        shapes = {(r.key_len, r.value_len, r.ts_at, r.key_at, r.value_at, tuple(rels), od,
                   vals) for _, cands, _, _ in pending for r, rels, od, vals in cands}
        if len(shapes) == 1:
            key_len, value_len, ts_at, key_at, value_at, rels, od, vals = shapes.pop()
            if od == 1:
                got = _gather(pa, np, buf, pending, key_len, value_len, ts_at, key_at,
                              value_at, tuple(zip(rels, vals)))
                if got is not None:
                    return got
    checked = []
    for info, what, data, span in pending:
        if span is None:
            checked.append((info, what, data))
            continue
        runs = _uniform.runs(buf, span[0], span[1], info.records)
        if runs is not None:
            checked.append((info, runs, buf))
        else:
            checked.append((info, _wire.decode_v2(buf[span[0]:span[1]], info), None))
    zz = np.array(_uniform.ZIGZAG, np.int64)
    offs: list[Any] = []
    stamps: list[Any] = []
    keys, values = _Binary(np), _Binary(np)
    headers: list[Any] = []
    any_headers = False
    for info, what, data in checked:
        if data is None:
            recs = what
            offs.append(np.array(recs.offsets, np.int64))
            stamps.append(np.array(recs.timestamps, np.int64))
            keys.listed(recs.keys)
            values.listed(recs.values)
            hs = [tuple((k, b"" if v is None else v) for k, v in h) for h in recs.headers]
            any_headers = any_headers or any(hs)
            headers.append(hs)
            continue
        for r in what:
            p, stop, st, m = r.start, r.stop, r.stride, r.records
            o = info.base_offset + r.first_delta
            offs.append(np.arange(o, o + m, dtype=np.int64))
            if info.attributes & TIMESTAMP_TYPE:
                stamps.append(np.full(m, info.max_timestamp, np.int64))
            else:
                rows = np.frombuffer(data, np.uint8, m * st, p).reshape(m, st)
                stamps.append(zz[rows[:, r.ts_at]] + info.base_timestamp)
            keys.strided(data, p, stop, st, r.key_at, r.key_len, m)
            values.strided(data, p, stop, st, r.value_at, r.value_len, m)
            headers.append(((),) * m)
    return _batch(pa, np, offs, stamps, keys, values, headers if any_headers else None)


def _gather(pa: Any, np: Any, buf: bytes, pending: list[Any], key_len: int, value_len: int,
            ts_at: int, key_at: int, value_at: int, structural: tuple[tuple[int, int], ...]
            ) -> Any | None:
    """A chunk of uncompressed runs of one shape (one-byte offset deltas), checked and
    gathered by numpy at once: each record's row start; every record's structural
    bytes (``structural``: position in a record, value) those its layout was read
    from, its timestamp delta one byte, its offset delta the
    next; then the offsets, timestamps, keys and values of all of them by fancy
    indexing (values as rows of a sliding window over the chunk). None when a check
    fails (the caller checks batch by batch)."""
    ps, ms, sts, firsts, bases, append_ts, deltas0 = [], [], [], [], [], [], []
    for info, cands, _, span in pending:
        log_append = bool(info.attributes & TIMESTAMP_TYPE)
        for r, _, _, _ in cands:
            deltas0.append(r.first_delta)
            ps.append(r.start + span[2])
            ms.append(r.records)
            sts.append(r.stride)
            firsts.append(info.base_offset + r.first_delta)
            bases.append(info.max_timestamp if log_append else info.base_timestamp)
            append_ts.append(log_append)
    counts = np.array(ms, np.int64)
    n = int(counts.sum())
    seq = np.arange(n, dtype=np.int64)
    begin = np.repeat(np.cumsum(counts) - counts, counts)
    rows = np.repeat(np.array(ps, np.int64), counts) + \
        (seq - begin) * np.repeat(np.array(sts, np.int64), counts)
    offsets = np.repeat(np.array(firsts, np.int64) - (np.cumsum(counts) - counts), counts) + seq
    chunk = np.frombuffer(buf, np.uint8)
    for rel, val in structural:
        if not (chunk[rows + rel] == val).all():
            return None
    expected_od = 2 * (seq - begin + np.repeat(np.array(deltas0, np.int64), counts))
    raw_ts = chunk[rows + ts_at]
    if not ((raw_ts < 0x80).all() and (chunk[rows + ts_at + 1] == expected_od).all()):
        return None
    zz = np.array(_uniform.ZIGZAG, np.int64)
    deltas = zz[raw_ts]
    if any(append_ts):
        deltas[np.repeat(np.array(append_ts), counts)] = 0
    stamps = deltas + np.repeat(np.array(bases, np.int64), counts)

    def column(at: int, length: int) -> Any:
        if length < 0:
            return pa.nulls(n, pa.binary())
        if length == 0:
            data = np.zeros(0, np.uint8)
        else:
            window = np.lib.stride_tricks.sliding_window_view(chunk, length)
            data = window[rows + at].reshape(-1)
        ends = np.arange(n + 1, dtype=np.int32) * np.int32(length)
        return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(ends),
                                                      pa.py_buffer(data)])

    return record_batch(pa.array(offsets), pa.array(stamps), column(key_at, key_len),
                        column(value_at, value_len), None)


def _batch(pa: Any, np: Any, offs: list[Any], stamps: list[Any], keys: _Binary,
           values: _Binary, headers: list[Any] | None) -> Any:
    o = pa.array(np.concatenate(offs))
    ts = pa.array(np.concatenate(stamps))
    return record_batch(o, ts, keys.array(pa), values.array(pa),
                        None if headers is None else list(chain.from_iterable(headers)))


def empty_table() -> Any:
    """A table of ``arrow_schema()`` with no rows."""
    return arrow_schema().empty_table()

"""Arrow columns to seglog batches, for the sink: each batch's records section built
from whole columns with numpy (lengths from Arrow's offsets, the bytes sliced out of
Arrow's buffers), in the layout docs/FORMAT.md gives and ``_codec.encode.encode_batch``
writes (the same bytes for the same records: tested), finished by
``_codec.encode.finish_batch`` (compression, header, checksum). No Python step per row."""

from __future__ import annotations

from dataclasses import dataclass
# Any: pyarrow and numpy modules and arrays: they ship no type information
from typing import Any, Iterator

from .._codec import encode as _encode, format as _format
from .._codec.format import NULL_16 as _NULL16, NULL_32 as _NULL32
from .._log.batching import check_window
from ..config import LogConfig
from ..errors import MessageTooLargeError
from .._codec.columns import arrow_modules
from .._codec.records import HEADER_FRAMING

# what Log.append_batch counts per record against max_message_bytes when cutting
# batches (its _codec.encode: the same cut, so the same batches)
RECORD_OVERHEAD = 24
MAX_TIMESTAMP = (1 << 63) - 1


@dataclass
class Rows:
    """``n`` rows bound for one partition: ``values`` and ``keys`` binary Arrow arrays
    (nullable; ``keys`` None when there is no key column), ``stamps`` int64 ms (a
    numpy array, or one int for all), ``headers`` a list<struct<key, value>> array
    or None."""

    values: Any
    keys: Any
    stamps: Any
    headers: Any


def compute() -> Any:
    """``pyarrow.compute`` (a module ``import pyarrow`` does not load)."""
    import pyarrow.compute as pc
    return pc


def offsets_of(arr: Any) -> Any:
    """The ``len(arr) + 1`` offsets of a binary or string Arrow array into its data
    buffer, as int64 numpy (a slice's own, from its offsets buffer)."""
    pa, np = arrow_modules()
    n = len(arr)
    buf = arr.buffers()[1]
    if buf is None or not n:
        return np.zeros(n + 1, dtype=np.int64)
    large = pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type)
    return np.frombuffer(buf, dtype=np.int64 if large else np.int32,
                         count=arr.offset + n + 1)[arr.offset:].astype(np.int64)


class _Binary:
    """A binary column's lengths, nulls and bytes, as the format wants them: null
    slots hold no bytes (Arrow allows them some: those are dropped first)."""

    def __init__(self, arr: Any) -> None:
        pa, np = arrow_modules()
        self.nulls = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else None
        offsets = offsets_of(arr)
        lengths = np.diff(offsets)
        if self.nulls is not None and lengths[self.nulls].any():
            arr = compute().fill_null(arr, b"")
            offsets = offsets_of(arr)
            lengths = np.diff(offsets)
        self.offsets, self.lengths = offsets, lengths
        data = arr.buffers()[2]
        self.data = memoryview(data) if data is not None else memoryview(b"")

    def max_length(self, a: int, b: int) -> int:
        lens = self.lengths[a:b]
        return int(lens.max()) if len(lens) else 0

    def any_value(self, a: int, b: int) -> bool:
        return self.nulls is None or not self.nulls[a:b].all()

    def lengths_section(self, a: int, b: int, wide: bool) -> bytes:
        np = arrow_modules()[1]
        lens = self.lengths[a:b].astype("<u4" if wide else "<u2")
        if self.nulls is not None:
            lens[self.nulls[a:b]] = _NULL32 if wide else _NULL16
        return bytes(lens.data)

    def bytes_of(self, a: int, b: int) -> memoryview:
        return self.data[int(self.offsets[a]):int(self.offsets[b])]

    def has_null(self, a: int, b: int) -> bool:
        return self.nulls is not None and bool(self.nulls[a:b].any())


class _Headers:
    """A headers column: per row the count, the (key, value) lengths interleaved and
    their bytes interleaved, as the format lays them out."""

    def __init__(self, col: Any) -> None:
        pa, np = arrow_modules()
        counts = compute().list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False)
        if len(counts) and counts.max() > 0xFFFF:
            raise ValueError(f"a row has {int(counts.max())} headers; at most 65535 per record")
        self.counts = counts.astype(np.int64)
        flat = compute().list_flatten(col)
        if flat.null_count:
            raise ValueError("a header is null; each header needs a key and a value")
        hkeys, hvalues = flat.flatten()
        if hkeys.null_count or hvalues.null_count:
            raise ValueError("a header key or value is null; seglog headers have a string key "
                             "and a binary value, neither null")
        hkeys = hkeys.view(pa.binary()) if hkeys.type != pa.binary() else hkeys
        m = len(hkeys)
        klen = np.diff(offsets_of(hkeys))
        vlen = np.diff(offsets_of(hvalues))
        self.first = np.concatenate(([0], np.cumsum(self.counts)))      # per row, into flat
        per_header = np.concatenate(([0], np.cumsum(klen + vlen + HEADER_FRAMING)))
        self.row_bytes = per_header[self.first[1:]] - per_header[self.first[:-1]]
        lengths = np.empty(2 * m, dtype="<u4")
        lengths[0::2], lengths[1::2] = klen, vlen
        self.lengths = lengths
        order = np.empty(2 * m, dtype=np.int64)
        order[0::2], order[1::2] = np.arange(m), np.arange(m) + m
        joined = pa.concat_arrays([hkeys, hvalues]).take(pa.array(order))
        self.joined = _Binary(joined)

    def any_header(self, a: int, b: int) -> bool:
        return bool(self.first[b] > self.first[a])

    def sections(self, a: int, b: int) -> list[Any]:
        i, j = int(self.first[a]), int(self.first[b])
        return [bytes(self.counts[a:b].astype("<u2").data),
                bytes(self.lengths[2 * i:2 * j].data)]

    def bytes_of(self, a: int, b: int) -> memoryview:
        return self.joined.bytes_of(2 * int(self.first[a]), 2 * int(self.first[b]))


def encode_rows(rows: Rows, config: LogConfig, compress: int, now: int, where: str
                ) -> Iterator[tuple[list[bytes], int, int]]:
    """The batches of ``rows`` (base offset 0, to be stamped when appended), cut as
    ``Log.append_batch`` cuts (at most ``max_message_bytes`` each): (the batch's
    parts, its record count, its largest timestamp). Every check is made before
    the first batch is yielded: a record over ``max_message_bytes``
    (``MessageTooLargeError``), timestamps outside the log's window or below 0
    (``ValueError``), null headers; ``where`` names the partition in messages."""
    np = arrow_modules()[1]
    values = _Binary(rows.values)
    n = len(values.lengths)
    keys = _Binary(rows.keys) if rows.keys is not None and rows.keys.null_count < n else None
    headers = _Headers(rows.headers) if rows.headers is not None else None
    sizes = values.lengths.copy()
    if keys is not None:
        sizes += keys.lengths
    if headers is not None:
        sizes += headers.row_bytes
    limit = config.max_message_bytes
    if n and int(sizes.max()) > limit:
        i = int(np.argmax(sizes))
        raise MessageTooLargeError(f"{where}: a record of {int(sizes[i])} bytes (key, value and "
                                   f"headers) exceeds max_message_bytes={limit}")
    stamps = rows.stamps
    if isinstance(stamps, int):
        lo = hi = stamps
    elif n:
        lo, hi = int(stamps.min()), int(stamps.max())
    else:
        lo = hi = now
    if lo < 0 or hi > MAX_TIMESTAMP:
        raise ValueError(f"{where}: timestamp {lo if lo < 0 else hi} is outside 0 to "
                         f"{MAX_TIMESTAMP} ms")
    try:
        check_window(config, lo, hi, now)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    ends = np.cumsum(sizes + RECORD_OVERHEAD)
    a = 0
    while a < n:
        base = int(ends[a - 1]) if a else 0
        b = max(int(np.searchsorted(ends, base + limit, side="right")), a + 1)
        yield _batch(values, keys, headers, stamps, a, b, compress)
        a = b


def _batch(values: _Binary, keys: _Binary | None, headers: _Headers | None, stamps: Any,
           a: int, b: int, compress: int) -> tuple[list[bytes], int, int]:
    """Rows ``a`` to ``b`` as one batch: what ``_codec.encode.encode_batch`` makes of them."""
    n = b - a
    attrs = 0
    sections: list[Any] = []
    if keys is not None and not keys.any_value(a, b):
        keys = None                          # no key in this batch: no key arrays
    maxlen = max(values.max_length(a, b), keys.max_length(a, b) if keys is not None else 0)
    wide = maxlen >= _NULL16
    if wide:
        attrs |= _format.F_WIDE
    if isinstance(stamps, int):
        base_ts = max_ts = stamps
    else:
        part = stamps[a:b]
        base_ts, max_ts = int(part.min()), int(part.max())
        if base_ts != max_ts:
            attrs |= _format.F_TIMESTAMPS
            deltas = part - base_ts
            if max_ts - base_ts <= _NULL32:
                sections.append(bytes(deltas.astype("<u4").data))
            else:
                attrs |= _format.F_WIDE_TS
                sections.append(bytes(deltas.astype("<i8").data))
    if keys is not None:
        attrs |= _format.F_KEYS
        sections.append(keys.lengths_section(a, b, wide))
    if values.has_null(a, b):
        attrs |= _format.F_NULL_VALUES
    sections.append(values.lengths_section(a, b, wide))
    with_headers = headers is not None and headers.any_header(a, b)
    if with_headers:
        assert headers is not None
        attrs |= _format.F_HEADERS
        sections += headers.sections(a, b)
    if keys is not None:
        sections.append(keys.bytes_of(a, b))
    sections.append(values.bytes_of(a, b))
    if with_headers:
        assert headers is not None
        sections.append(headers.bytes_of(a, b))
    return _encode.finish_batch(sections, attrs, n - 1, n, base_ts, max_ts, compress), n, max_ts

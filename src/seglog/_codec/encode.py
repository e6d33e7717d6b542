"""Encoding batches: pure functions from validated records to bytes (docs/FORMAT.md).

The layout is columnar so that a batch of N records encodes with a handful of
C-level calls: the lengths of all values are one ``array``, the values are one
``b"".join``, the checksum is one XXH3 pass (``CHECKSUM``; ``checksum_two`` over the
header's tail and the values apart, never copied together). Keys, per-record
timestamps and headers cost nothing when a batch has none of them.
"""

from __future__ import annotations

from array import array
from functools import lru_cache
from itertools import chain, repeat
from operator import add
from struct import Struct
from typing import Sequence, cast

import lz4.block

from .format import (BIG_ENDIAN_HOST, CHECKSUM, CODEC_LZ4, CODEC_NONE, F_HEADERS, F_HORIZON,
                     F_KEYS, F_NULL_VALUES, F_OFFSETS, F_TIMESTAMPS, F_WIDE, F_WIDE_TS, I64,
                     LENGTH_END, LZ4_MIN_RECORDS, MAGIC, NULL_16, NULL_32, U32, checksum_two)

# a header in two parts: the fields outside the checksum and the checksum, then the
# checksummed rest
_HEAD = Struct("<qIBQ")
_TAIL = Struct("<HIIqq")


def _le(arr: array[int]) -> bytes:
    if BIG_ENDIAN_HOST:
        arr = array(arr.typecode, arr)
        arr.byteswap()
    return arr.tobytes()


def _lengths(items: Sequence[bytes | None], wide: bool, null: int) -> array[int]:
    """Lengths of items, ``null`` standing for None."""
    typecode = "I" if wide else "H"
    if None in items:
        return array(typecode, [null if x is None else len(x) for x in items])
    return array(typecode, map(len, cast("Sequence[bytes]", items)))   # no None in items


def encode_values_parts(body: bytes, lengths: list[int], timestamp: int,
                        codec: int = CODEC_NONE) -> tuple[int, list[bytes]]:
    """Encode keyless, headerless values sharing one timestamp (``append_batch``'s hot path).

    ``body`` is the values joined and ``lengths`` their lengths (the caller has both
    already: joining is its type check). Returns (size, parts): the batch is
    ``b"".join(parts)`` with base offset 0, left in pieces so that the writer copies
    the values once, not twice.
    """
    n = len(lengths)
    # no value is longer than all of them together: most batches skip max()
    wide = len(body) >= NULL_16 and max(lengths, default=0) >= NULL_16
    attrs = F_WIDE if wide else 0
    lens = _lengths_struct(n, wide).pack(*lengths)
    if codec == CODEC_LZ4:
        packed = _lz4(n, lens, body)
        if packed is not None:
            attrs |= CODEC_LZ4
            lens, body = b"", packed
    tail = _TAIL.pack(attrs, n - 1, n, timestamp, timestamp) + lens
    size = _HEAD.size + len(tail) + len(body)
    return size, [_HEAD.pack(0, size - LENGTH_END, MAGIC, checksum_two(tail, body)) + tail, body]


@lru_cache(maxsize=256)
def _lengths_struct(n: int, wide: bool) -> Struct:
    return Struct(f"<{n}{'I' if wide else 'H'}")


def encode_batch(base_offset: int, values: Sequence[bytes | None],
                 timestamps: int | Sequence[int],
                 keys: Sequence[bytes | None] | None = None,
                 headers: Sequence[Sequence[tuple[bytes, bytes]]] | None = None,
                 codec: int = CODEC_NONE,
                 offset_deltas: Sequence[int] | None = None,
                 last_offset_delta: int | None = None,
                 delete_horizon: int | None = None) -> bytes:
    """Encode one batch. Inputs must already be validated (bytes, ints in range).

    ``timestamps`` is one int for all records or one per record. ``headers`` holds,
    per record, (utf-8 key bytes, value bytes) pairs. ``offset_deltas`` (with
    ``last_offset_delta``) describes a compacted batch whose offsets have holes.
    """
    n = len(values)
    attrs = 0
    if keys is not None and keys.count(None) == n:
        keys = None
    maxlen = max(map(len, filter(None, chain(values, keys or ()))), default=0)
    wide = maxlen >= NULL_16
    null = NULL_32 if wide else NULL_16
    if wide:
        attrs |= F_WIDE
    parts: list[bytes] = []
    if offset_deltas is not None:
        attrs |= F_OFFSETS
        parts.append(_le(array("I", offset_deltas)))
        last_delta = last_offset_delta if last_offset_delta is not None else offset_deltas[-1]
    else:
        last_delta = n - 1
    if isinstance(timestamps, int):
        base_ts = max_ts = timestamps
    else:
        base_ts = min(timestamps)
        max_ts = max(timestamps)
        if base_ts != max_ts:
            attrs |= F_TIMESTAMPS
            deltas = map(add, timestamps, repeat(-base_ts))
            if max_ts - base_ts <= NULL_32:
                parts.append(_le(array("I", deltas)))
            else:
                attrs |= F_WIDE_TS
                parts.append(_le(array("q", deltas)))
    if keys is not None:
        attrs |= F_KEYS
        parts.append(_le(_lengths(keys, wide, null)))
    vlens = _lengths(values, wide, null)
    if null in vlens:
        attrs |= F_NULL_VALUES
    parts.append(_le(vlens))
    hdr_data = b""
    if headers is not None and any(headers):
        attrs |= F_HEADERS
        parts.append(_le(array("H", map(len, headers))))
        flat = list(chain.from_iterable(headers))
        parts.append(_le(array("I", chain.from_iterable((len(k), len(v)) for k, v in flat))))
        hdr_data = b"".join(chain.from_iterable(flat))
    if keys is not None:
        parts.append(b"".join(filter(None, keys)))
    parts.append(b"".join(filter(None, values)) if attrs & F_NULL_VALUES
                 else b"".join(cast("Sequence[bytes]", values)))   # no None in values
    parts.append(hdr_data)
    return b"".join(finish_batch(parts, attrs, last_delta, n, base_ts, max_ts, codec,
                                 base_offset, delete_horizon))


def finish_batch(sections: Sequence[bytes | memoryview], attrs: int, last_delta: int, n: int,
                 base_ts: int, max_ts: int, codec: int = CODEC_NONE, base_offset: int = 0,
                 delete_horizon: int | None = None) -> list[bytes]:
    """A batch from its records section in parts (in the format's order, ``attrs``
    saying which are present): compressed with ``codec`` where that pays, the
    delete horizon, the header and its checksum. Returns (header, the rest): the
    batch is their join."""
    if codec == CODEC_LZ4:
        packed = _lz4(n, *sections)
        if packed is not None:
            attrs |= CODEC_LZ4
            sections = (packed,)
    if delete_horizon is not None:
        attrs |= F_HORIZON
        sections = (I64.pack(delete_horizon), *sections)
    # one copy of the records: joined behind the header's checked fields
    checked = b"".join((_TAIL.pack(attrs, last_delta, n, base_ts, max_ts), *sections))
    return [_HEAD.pack(base_offset, _HEAD.size - LENGTH_END + len(checked), MAGIC,
                       CHECKSUM(checked)), checked]


def _lz4(n: int, *records: bytes | memoryview) -> bytes | None:
    """The compressed form (size prefix and LZ4 block) of the records section
    ``records`` (in parts) of ``n`` records, or None where lz4 does not pay: fewer
    than ``LZ4_MIN_RECORDS`` records, or nothing saved."""
    if n < LZ4_MIN_RECORDS:
        return None
    section = b"".join(records)
    packed: bytes = lz4.block.compress(section, store_size=False)
    if U32.size + len(packed) >= len(section):
        return None
    return U32.pack(len(section)) + packed

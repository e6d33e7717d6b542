"""Batch codec: pure functions between records and bytes, with no file handling.

The layout (docs/FORMAT.md has it byte by byte) is columnar so that a batch of N
records encodes and decodes with a handful of C-level calls: the lengths of all
values are one ``array``, the values are one ``b"".join``, the checksum is one
XXH3 call (``CHECKSUM``). Keys, per-record timestamps and headers cost nothing when
a batch has none of them.

All integers are little-endian.
"""

from __future__ import annotations

import sys
from array import array
from io import BytesIO
from bisect import bisect_left
from functools import lru_cache
from itertools import chain, islice, repeat
from operator import add
from struct import Struct
from struct import error as struct_error
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence, cast, overload

import lz4.block
from xxhash import xxh3_64_intdigest

from .errors import CorruptRecordError

# the format version, in every batch's magic byte: 2 is the XXH3 checksum (format 1,
# CRC-32, is refused with a message that says so; nobody has format-1 data to convert)
MAGIC = 2
OLD_MAGIC = 1

# base_offset q, batch_length I, magic B, checksum Q, attributes H,
# last_offset_delta I, record_count I, base_timestamp q, max_timestamp q
HEADER = Struct("<qIBQHIIqq")
# the fields of an unpacked header, by name (other modules index headers only so)
(H_BASE, H_LENGTH, H_MAGIC, H_CHECKSUM, H_ATTRS, H_LAST_DELTA, H_COUNT, H_BASE_TS,
 H_MAX_TS) = range(9)
HEADER_SIZE = HEADER.size                 # 47
LENGTH_END = 12                           # batch_length counts the bytes after this
CHECKSUM_FROM = 21                        # the checksum covers bytes [21, end of batch)
MIN_BATCH_LENGTH = HEADER_SIZE - LENGTH_END
_HEAD = Struct("<qIBQ")
_TAIL = Struct("<HIIqq")
# a one-record, keyless, headerless batch with a short value (``Log.append``'s hot
# path packs these two straight into the segment): the tail its checksum starts with,
# and the whole header with the value's length
ONE_TAIL = Struct("<HIIqqH")
ONE_HEADER = Struct("<qIBQHIIqqH")
# what the read loop unpacks of every header: HEADER without max_timestamp, and the
# value length that follows the header of a one-record batch
_SCAN = Struct("<qIBQHIIq8xH")
_U32 = Struct("<I")
_I64 = Struct("<q")

# attribute bits
CODEC_MASK = 0x7
CODEC_NONE = 0
CODEC_LZ4 = 1
F_KEYS = 1 << 3
F_HEADERS = 1 << 4
F_TIMESTAMPS = 1 << 5
F_WIDE = 1 << 6
F_OFFSETS = 1 << 7
F_WIDE_TS = 1 << 8
F_NULL_VALUES = 1 << 9
F_HORIZON = 1 << 10
_KNOWN_ATTRS = (CODEC_MASK | F_KEYS | F_HEADERS | F_TIMESTAMPS | F_WIDE | F_OFFSETS
                | F_WIDE_TS | F_NULL_VALUES | F_HORIZON)

_NULL_H = 0xFFFF
_NULL_I = 0xFFFFFFFF
_BIG = sys.byteorder == "big"
# lz4 cannot expand data by more than this factor; a larger claim is a bomb
_LZ4_MAX_RATIO = 255
# lz4 is tried on batches of at least this many records. One record alone (what
# Log.append writes) has too little repetition in it: lz4 made no single access-log
# line, JSON event or random value smaller, while two records of either text came
# out 21-23 % smaller (docs/FORMAT.md has the figures).
LZ4_MIN_RECORDS = 2
DEFAULT_MAX_UNCOMPRESSED = 1 << 30
NEVER = 1 << 63         # above every offset

# one decoded message: (offset, timestamp, key, value, headers), the 5-tuple a
# ``message_type`` is built from
MessageTuple = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]
if TYPE_CHECKING:
    from typing import TypeVar

    from _typeshed import ReadableBuffer
    _M = TypeVar("_M")

# The batch checksum of bytes 21 .. end of a batch: XXH3-64, all 64 bits, so that the
# one definition every writer and checker calls is a C function (a Python function
# keeping 32 of the bits costs ~0.1 us per batch: docs/FORMAT.md)
CHECKSUM: Callable[[ReadableBuffer], int] = xxh3_64_intdigest


def _le(arr: array[int]) -> bytes:
    if _BIG:
        arr = array(arr.typecode, arr)
        arr.byteswap()
    return arr.tobytes()


def _array(typecode: str, data: bytes | memoryview) -> array[int]:
    arr = array(typecode)
    arr.frombytes(data)
    if _BIG:
        arr.byteswap()
    return arr


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
    wide = len(body) >= _NULL_H and max(lengths, default=0) >= _NULL_H
    attrs = F_WIDE if wide else 0
    lens = _lengths_struct(n, wide).pack(*lengths)
    if codec == CODEC_LZ4:
        packed = _lz4(n, lens, body)
        if packed is not None:
            attrs |= CODEC_LZ4
            lens, body = b"", packed
    tail = _TAIL.pack(attrs, n - 1, n, timestamp, timestamp) + lens
    size = _HEAD.size + len(tail) + len(body)
    return size, [_HEAD.pack(0, size - LENGTH_END, MAGIC, CHECKSUM(tail + body)) + tail, body]


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
    wide = maxlen >= _NULL_H
    null = _NULL_I if wide else _NULL_H
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
            if max_ts - base_ts <= _NULL_I:
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
    records = b"".join(parts)
    if codec == CODEC_LZ4:
        packed = _lz4(n, records)
        if packed is not None:
            attrs |= CODEC_LZ4
            records = packed
    if delete_horizon is not None:
        attrs |= F_HORIZON
        records = _I64.pack(delete_horizon) + records
    checked = _TAIL.pack(attrs, last_delta, n, base_ts, max_ts) + records
    return b"".join((_HEAD.pack(base_offset, _HEAD.size - LENGTH_END + len(checked), MAGIC,
                                CHECKSUM(checked)),
                     checked))


def _lz4(n: int, *records: bytes) -> bytes | None:
    """The compressed form (size prefix and LZ4 block) of the records section
    ``records`` (in parts) of ``n`` records, or None where lz4 does not pay: fewer
    than ``LZ4_MIN_RECORDS`` records, or nothing saved."""
    if n < LZ4_MIN_RECORDS:
        return None
    section = b"".join(records)
    packed: bytes = lz4.block.compress(section, store_size=False)
    if _U32.size + len(packed) >= len(section):
        return None
    return _U32.pack(len(section)) + packed


BatchHeader = tuple[int, int, int, int, int, int, int, int, int]


def read_header(data: bytes | memoryview, pos: int, end: int) -> BatchHeader | None:
    """The header of the batch at ``pos`` if the whole batch lies before ``end``.

    Returns None when the bytes stop short (a partial batch, or the end). Raises
    CorruptRecordError when the framing is impossible (bad magic, bad length,
    zero-filled space). The checksum is not checked here; see ``checksum_ok``.
    """
    if pos + HEADER_SIZE > end or pos + HEADER_SIZE > len(data):
        if _old_magic_at(data, pos, end):
            raise framing_error(OLD_MAGIC, 0, 0, pos, None)
        return None
    hdr = HEADER.unpack_from(data, pos)
    length = hdr[1]
    if hdr[2] != MAGIC or length < MIN_BATCH_LENGTH or hdr[0] < 0 or hdr[4] & ~_KNOWN_ATTRS:
        raise framing_error(hdr[2], length, hdr[0], pos, None)
    if pos + LENGTH_END + length > end:
        return None
    return hdr


def _old_magic_at(data: bytes | memoryview, pos: int, end: int) -> bool:
    """A format-1 batch can be shorter than a format-2 header: its magic byte says so."""
    return pos + LENGTH_END < min(end, len(data)) and data[pos + LENGTH_END] == OLD_MAGIC


def framing_error(magic: int, length: int, base: int, pos: int,
                  offset: int | None) -> CorruptRecordError:
    """The error for a batch header that cannot be one of this format's."""
    if magic == OLD_MAGIC:
        return CorruptRecordError(
            f"a batch of format {OLD_MAGIC} (magic byte {OLD_MAGIC}, CRC-32 checksums): this "
            f"seglog reads format {MAGIC} only, and converts no older data", position=pos,
            offset=offset)
    return CorruptRecordError(
        f"bad batch framing (magic {magic}, length {length}, base offset {base})",
        position=pos, offset=offset)


def checksum_ok(data: bytes | memoryview, pos: int, hdr: BatchHeader) -> bool:
    """True when the batch at ``pos`` matches its checksum."""
    with memoryview(data) as mv:
        return CHECKSUM(mv[pos + CHECKSUM_FROM: pos + LENGTH_END + hdr[1]]) == hdr[3]


def batches_in(data: bytes | memoryview, start: int, end: int
               ) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole batch in ``data[start:end]``, framing checked.

    Stops quietly at a batch that does not fit before ``end`` (the caller knows
    whether that is the end of a chunk or damage); raises ``CorruptRecordError``
    (``position`` in ``data``) where the framing is impossible. Checksums are not checked.
    """
    pos = start
    end = min(end, len(data))    # read_header's end may lie past a header-only buffer
    while True:
        hdr = read_header(data, pos, end)
        if hdr is None:
            return
        yield pos, hdr
        pos += LENGTH_END + hdr[1]


def last_offset(hdr: BatchHeader) -> int:
    return hdr[0] + hdr[5]


def batch_size(hdr: BatchHeader) -> int:
    return LENGTH_END + hdr[1]


class _Bad(Exception):
    pass


# the messages are MessageTuples, or what ``message_type`` makes of them; with
# ``columns``, ColumnParts (iter_column_parts) or message iterators
@overload
def iter_batches(data: bytes, start: int, end: int, min_offset: int = ...,
                 max_offset: int | None = ..., max_uncompressed: int = ...,
                 message_type: Callable[[MessageTuple], Any] = ..., expect: int | None = ...,
                 progress: list[int] | None = ..., lead: tuple[Any, ...] = ..., *,
                 columns: bool) -> Iterator[Any]: ...
@overload
def iter_batches(data: bytes, start: int, end: int, min_offset: int = ...,
                 max_offset: int | None = ..., max_uncompressed: int = ..., *,
                 expect: int | None = ..., progress: list[int] | None = ..., lead: tuple[Any, ...] = ...
                 ) -> Iterator[Iterable[MessageTuple]]: ...
@overload
def iter_batches(data: bytes, start: int, end: int, min_offset: int = ...,
                 max_offset: int | None = ..., max_uncompressed: int = ..., *,
                 message_type: Callable[[MessageTuple], _M], expect: int | None = ...,
                 progress: list[int] | None = ..., lead: tuple[Any, ...] = ...
                 ) -> Iterator[Iterable[_M]]: ...
@overload
def iter_batches(data: bytes, start: int, end: int, min_offset: int,
                 max_offset: int | None, max_uncompressed: int,
                 message_type: Callable[[MessageTuple], _M], expect: int | None = ...,
                 progress: list[int] | None = ..., lead: tuple[Any, ...] = ...
                 ) -> Iterator[Iterable[_M]]: ...
def iter_batches(data: bytes, start: int, end: int, min_offset: int = 0,
                 max_offset: int | None = None,
                 max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED,
                 message_type: Callable[[MessageTuple], Any] = tuple,
                 expect: int | None = None,
                 progress: list[int] | None = None,
                 lead: tuple[Any, ...] = (), columns: bool = False) -> Iterator[Any]:
    """The messages of the whole batches in ``data[start:end]``, in order, as
    iterators: one per batch, or one for a run of one-record batches.

    Checks framing, checksum and offsets of each batch before decoding it and raises
    CorruptRecordError (with ``position`` relative to ``data``) on the first bad
    one, after the messages of the batches before it. The base offset is outside
    the checksum, so batches must follow each other: each starts at the previous
    one's last offset + 1 (after compaction, anywhere above it); ``expect`` is where
    the first must start, if known. Messages below ``min_offset`` or at/after
    ``max_offset`` are skipped.

    With ``progress`` (a list of two ints), ``data[start:end]`` may end inside a
    batch (a chunk of a file): a batch that does not fit ends the iteration
    instead of raising, and once it ends ``progress`` holds the position after the
    last whole batch and the offset the next batch must start at (unchanged if
    there was no whole batch).
    ``lead`` values come before the five fields of every message (a consumer's
    topic and partition), so ``message_type`` gets one tuple and no copy is made.
    With ``columns`` it yields ``ColumnPart``s instead (see ``iter_column_parts``):
    one per batch, or one for a run of one-record batches.

    This is the read path's inner loop. A plain batch (no keys, headers, nulls,
    per-record timestamps or compression) decodes with a few C-level calls. A run
    of plain one-record batches (``Log.append``'s) costs one header unpack, one
    checksum, one slice and two list appends per batch in Python, and its messages
    are made in one C-level pass.
    """
    mv = memoryview(data)
    bio = BytesIO(data) if type(data) is bytes else None
    unpack = _SCAN.unpack_from
    one_size = ONE_HEADER.size
    one_length = one_size - LENGTH_END      # batch_length of a one-record batch, less its value
    one_tail = one_size - CHECKSUM_FROM     # its checksummed bytes before the value
    stop = NEVER if max_offset is None else max_offset
    # where the last one-record batch could start: the loop then makes no int to compare
    last_start = end - one_size
    leads = tuple(map(repeat, lead))
    # the one-record loop's constants, as locals
    this_format, length_end, checksum, checksum_from = MAGIC, LENGTH_END, CHECKSUM, CHECKSUM_FROM
    # below this value length a one-record batch is read from a copy (measured: a
    # memoryview costs about what copying 1-2 KB does)
    copy_below = 1024
    if expect is None:
        # the first batch may start anywhere: it sets the offsets that follow (fewer
        # bytes than that hold no batch to check)
        expect = _I64.unpack_from(data, start)[0] if start + 8 <= end else 0
    pos = start
    while pos < end:
        if bio is not None and expect >= min_offset:
            # Log.append's batches: a run of one-record plain batches, each checked
            # (framing, continuity, bounds, checksum) with the least work. Their values
            # and timestamps are gathered and made messages in one C-level pass when
            # the run ends; a batch this loop does not take, good or bad, is left to
            # the general path below, which checks and reports it.
            values: list[bytes] = []
            stamps: list[int] = []
            while pos <= last_start:
                # the header (without max_timestamp), then the value length of a
                # one-record batch
                base, length, magic, check, attrs, last_delta, count, base_ts, vlen = \
                    unpack(data, pos)
                # length + 12 is one of CPython's cached small ints for values of up to
                # 211 bytes: one int made per batch here, not two
                nxt = pos + (length + length_end)
                if (count != 1 or attrs or last_delta or base != expect or magic != this_format
                        or vlen != length - one_length or nxt > end or base >= stop):
                    break
                if vlen < copy_below:
                    # a copy of a short batch's checksummed bytes costs less than a
                    # memoryview of them, and its value is sliced from that copy
                    checked = data[pos + checksum_from:nxt]
                    if checksum(checked) != check:
                        break
                    values.append(checked[one_tail:])
                elif checksum(mv[pos + checksum_from:nxt]) == check:
                    values.append(data[pos + one_size:nxt])
                else:
                    break
                stamps.append(base_ts)
                expect = base + 1
                pos = nxt
            if values:
                # batches of a run follow each other: consecutive offsets
                n = len(values)
                if columns:
                    yield (range(expect - n, expect), stamps[0], stamps,
                           array("I", map(len, values)), b"".join(values), None, None, None,
                           None, None, expect - 1)
                else:
                    yield _plain(message_type, leads, expect - n, n, stamps, values)
                if pos >= end:
                    break
        # any other batch: one at a time, every check with its own error
        if pos + HEADER_SIZE > end:
            if _old_magic_at(data, pos, end):
                raise framing_error(OLD_MAGIC, 0, 0, pos, None)
            if progress is not None:
                break
            raise CorruptRecordError("partial batch header", position=pos)
        hdr = HEADER.unpack_from(data, pos)
        base, length, magic, check, attrs, last_delta, count, base_ts, _ = hdr
        nxt = pos + LENGTH_END + length
        if magic != MAGIC or length < MIN_BATCH_LENGTH or nxt > end:
            if progress is not None and magic == MAGIC and length >= MIN_BATCH_LENGTH:
                break
            raise framing_error(magic, length, base, pos, base)
        if base != expect and (not attrs & F_OFFSETS or base < expect):
            raise CorruptRecordError(f"batch starts at offset {base}, expected {expect}",
                                     position=pos, offset=base)
        if base >= stop:
            break
        expect = base + last_delta + 1
        if expect <= min_offset:
            pos = nxt
            continue
        if CHECKSUM(mv[pos + CHECKSUM_FROM:nxt]) != check:
            raise CorruptRecordError("checksum mismatch", position=pos, offset=base)
        if columns:
            yield column_part(data, pos, hdr, min_offset, max_offset, max_uncompressed)
        elif (attrs & ~F_WIDE) or bio is None or count != last_delta + 1:
            yield decode_batch(data, pos, hdr, min_offset, max_offset, max_uncompressed,
                               message_type, lead)
        else:
            p = pos + HEADER_SIZE
            q = p + (4 if attrs else 2) * count
            if q > nxt:
                raise CorruptRecordError("length array runs past the batch", position=pos,
                                         offset=base)
            lens = _array("I" if attrs else "H", mv[p:q])
            if q + sum(lens) != nxt:
                raise CorruptRecordError("record lengths do not add up", position=pos,
                                         offset=base)
            bio.seek(q)
            it = _plain(message_type, leads, base, count, repeat(base_ts), map(bio.read, lens))
            if min_offset > base or stop <= base + last_delta:
                lo = max(0, min_offset - base)
                it = islice(it, lo, max(lo, min(count, stop - base)))
            yield it
        pos = nxt
    if progress is not None and pos > start:
        progress[0] = pos
        progress[1] = expect


def _plain(mtype: Callable[[MessageTuple], Any], leads: tuple[Iterator[Any], ...], first: int,
           n: int, stamps: Iterable[int], values: Iterable[bytes]) -> Iterator[Any]:
    """The messages of ``n`` keyless, headerless records with consecutive offsets from
    ``first``: one C-level pass (zip reuses its tuple, ``mtype`` copies it)."""
    return map(mtype, zip(*leads, range(first, first + n), stamps, repeat(None), values,
                          repeat(())))


def iter_column_parts(data: bytes, start: int, end: int, min_offset: int = 0,
                      max_offset: int | None = None,
                      max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED,
                      expect: int | None = None) -> Iterator["ColumnPart"]:
    """Per whole batch in ``data[start:end]``, its records as a ``ColumnPart``, with
    every check ``iter_batches`` makes (it is the same walk)."""
    return cast("Iterator[ColumnPart]", iter_batches(data, start, end, min_offset, max_offset,
                                                     max_uncompressed, tuple, expect,
                                                     columns=True))


@overload
def decode_batch(data: bytes, pos: int, hdr: BatchHeader,
                 min_offset: int = ..., max_offset: int | None = ...,
                 max_uncompressed: int = ..., message_type: None = ...,
                 lead: tuple[Any, ...] = ...) -> Iterator[MessageTuple]: ...
@overload
def decode_batch(data: bytes, pos: int, hdr: BatchHeader,
                 min_offset: int = ..., max_offset: int | None = ...,
                 max_uncompressed: int = ..., *,
                 message_type: Callable[[MessageTuple], _M],
                 lead: tuple[Any, ...] = ...) -> Iterator[_M]: ...
@overload
def decode_batch(data: bytes, pos: int, hdr: BatchHeader,
                 min_offset: int, max_offset: int | None, max_uncompressed: int,
                 message_type: Callable[[MessageTuple], _M],
                 lead: tuple[Any, ...] = ...) -> Iterator[_M]: ...
def decode_batch(data: bytes, pos: int, hdr: BatchHeader,
                 min_offset: int = 0, max_offset: int | None = None,
                 max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED,
                 message_type: Callable[[MessageTuple], Any] | None = None,
                 lead: tuple[Any, ...] = ()) -> Iterator[Any]:
    """Messages of the (checksum-checked) batch at ``pos`` with min <= offset < max.

    Returns an iterator of ``message_type`` (a 5-tuple type: offset, timestamp, key,
    value, headers, after the ``lead`` values if any). Raises CorruptRecordError if
    the records do not add up.
    """
    try:
        return _decode(data, pos, hdr, min_offset, max_offset, max_uncompressed,
                       message_type or tuple, lead)
    except (_Bad, lz4.block.LZ4BlockError, ValueError, OverflowError, UnicodeDecodeError,
            struct_error) as e:
        raise CorruptRecordError(f"undecodable batch: {e}", position=pos, offset=hdr[0]) from None


class _Layout:
    """A batch's records as parsed arrays (the part of decoding shared by messages
    and columns); ``data[body:]`` holds the keys, then the values, then the headers."""

    __slots__ = ("data", "body", "offsets", "timestamps", "klens", "vlens", "knulls",
                 "vnulls", "hcounts", "hlens", "key_bytes", "value_bytes")

    def __init__(self, data: bytes, pos: int, hdr: BatchHeader, max_uncompressed: int) -> None:
        base, length, _, _, attrs, last_delta, count, base_ts, _ = hdr
        end = pos + LENGTH_END + length
        p = pos + HEADER_SIZE
        if attrs & F_HORIZON:
            p += 8
        if p > end:
            raise _Bad("batch too short for its attributes")
        if attrs & CODEC_MASK:
            if attrs & CODEC_MASK != CODEC_LZ4:
                raise _Bad(f"unknown codec {attrs & CODEC_MASK}")
            (usize,) = _U32.unpack_from(data, p)
            clen = end - p - 4
            if usize > min(max_uncompressed, clen * _LZ4_MAX_RATIO + 64):
                raise _Bad(f"claimed uncompressed size {usize} exceeds the bound")
            with memoryview(data) as mv:
                data = lz4.block.decompress(mv[p + 4:end], uncompressed_size=usize)
            if len(data) != usize:
                raise _Bad("uncompressed size mismatch")
            p, end = 0, usize
        elif type(data) is not bytes:
            data = bytes(data[p:end])
            p, end = 0, len(data)
        wide = attrs & F_WIDE
        lw = 4 if wide else 2
        ltype = "I" if wide else "H"
        null = _NULL_I if wide else _NULL_H

        def take(typecode: str, size: int, n: int) -> array[int]:
            nonlocal p
            q = p + size * n
            if q > end:
                raise _Bad("arrays run past the batch")
            arr = _array(typecode, data[p:q])
            p = q
            return arr

        self.offsets: Sequence[int]
        if attrs & F_OFFSETS:
            deltas = take("I", 4, count)
            if count and (deltas[-1] > last_delta or any(map(int.__ge__, deltas, deltas[1:]))):
                raise _Bad("offset deltas not increasing")
            self.offsets = list(map(add, deltas, repeat(base)))
        else:
            if count != last_delta + 1:
                raise _Bad("record count does not match offset span")
            self.offsets = range(base, base + count)
        self.timestamps: list[int] | None = None        # None: all at base_ts
        if attrs & F_TIMESTAMPS:
            wide_ts = attrs & F_WIDE_TS
            self.timestamps = list(map(add, take("q" if wide_ts else "I", 8 if wide_ts else 4,
                                                 count), repeat(base_ts)))
        klens = take(ltype, lw, count) if attrs & F_KEYS else None
        vlens = take(ltype, lw, count)
        self.hcounts = self.hlens = None
        if attrs & F_HEADERS:
            self.hcounts = take("H", 2, count)
            self.hlens = take("I", 4, 2 * sum(self.hcounts))
        self.knulls = None
        if klens is not None:
            self.knulls = _nulls(klens, null)
            if self.knulls:
                klens = _zero_nulls(klens, null)
        self.vnulls = _nulls(vlens, null) if attrs & F_NULL_VALUES else None
        if self.vnulls:
            vlens = _zero_nulls(vlens, null)
        self.klens, self.vlens = klens, vlens
        self.key_bytes = sum(klens) if klens is not None else 0
        self.value_bytes = sum(vlens)
        total = self.key_bytes + self.value_bytes + (sum(self.hlens) if self.hlens else 0)
        if p + total != end:
            raise _Bad(f"record lengths add up to {total}, batch holds {end - p}")
        self.data, self.body = data, p

    def headers(self, read: Callable[[int], bytes]) -> list[tuple[tuple[str, bytes], ...]]:
        """Every record's headers, reading from where the values end."""
        assert self.hcounts is not None and self.hlens is not None
        blobs = list(map(read, self.hlens))
        pairs = iter(list(zip(map(bytes.decode, blobs[0::2]), blobs[1::2])))
        return [tuple(islice(pairs, c)) for c in self.hcounts]


def _decode(data: bytes, pos: int, hdr: BatchHeader, min_offset: int,
            max_offset: int | None, max_uncompressed: int,
            mtype: Callable[[MessageTuple], Any], lead: tuple[Any, ...]) -> Iterator[Any]:
    lay = _Layout(data, pos, hdr, max_uncompressed)
    bio = BytesIO(lay.data)
    bio.seek(lay.body)
    read = bio.read
    keys: Iterable[bytes | None]
    if lay.klens is not None:
        keys = _read_all(read, lay.klens, lay.knulls)
    else:
        keys = repeat(None)
    values: Iterable[bytes | None]
    if lay.vnulls or lay.hcounts is not None:
        values = _read_all(read, lay.vlens, lay.vnulls)
    else:
        values = map(read, lay.vlens)
    headers: Iterable[tuple[tuple[str, bytes], ...]]
    headers = lay.headers(read) if lay.hcounts is not None else repeat(())
    offsets = lay.offsets
    it: Iterator[Any] = map(mtype, zip(*map(repeat, lead), offsets,
                                       lay.timestamps or repeat(hdr[H_BASE_TS]), keys,
                                       values, headers))
    base, last = hdr[H_BASE], hdr[H_BASE] + hdr[H_LAST_DELTA]
    if min_offset > base or (max_offset is not None and max_offset <= last):
        lo = bisect_left(offsets, min_offset)
        hi = len(offsets) if max_offset is None else bisect_left(offsets, max_offset)
        it = islice(it, lo, max(lo, hi))
    return it


# One batch's records with ``min <= offset < max`` as columns (``column_part``):
# (offsets, base_ts, timestamps or None (all base_ts), value lengths as the batch
# stores them (array 'H' or 'I'; a null is length 0 and listed by index), the values
# back to back, value null indices or None, then the same three for keys (None: no
# keys), headers per record or None, the batch's last offset). A tuple: one C-level
# allocation per batch on the bulk read path.
ColumnPart = tuple[Sequence[int], int, "list[int] | None", "array[int]", "bytes | memoryview",
                   "list[int] | None", "array[int] | None", "bytes | memoryview | None",
                   "list[int] | None", "list[tuple[tuple[str, bytes], ...]] | None", int]


def column_part(data: bytes, pos: int, hdr: BatchHeader, min_offset: int = 0,
                max_offset: int | None = None,
                max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED) -> ColumnPart:
    """The (checksum-checked) batch at ``pos`` as a ``ColumnPart``, with no object
    per record unless it has keys with nulls, per-record timestamps or headers.

    Raises CorruptRecordError if the records do not add up.
    """
    base, length, _, _, attrs, last_delta, count, base_ts, _ = hdr
    last = base + last_delta
    part: ColumnPart
    try:
        if not attrs & ~F_WIDE and count == last_delta + 1:
            # a plain batch: lengths, then the values, nothing else
            p = pos + HEADER_SIZE
            q = p + (4 if attrs else 2) * count
            nxt = pos + LENGTH_END + length
            with memoryview(data) as mv:
                lens = _array("I" if attrs else "H", mv[p:q])
                if q > nxt or q + sum(lens) != nxt:
                    raise _Bad("record lengths do not add up")
                part = (range(base, last + 1), base_ts, None, lens, mv[q:nxt], None,
                        None, None, None, None, last)
        else:
            lay = _Layout(data, pos, hdr, max_uncompressed)
            kend = lay.body + lay.key_bytes
            vend = kend + lay.value_bytes
            headers = None
            if lay.hcounts is not None:
                bio = BytesIO(lay.data)
                bio.seek(vend)
                headers = lay.headers(bio.read)
            with memoryview(lay.data) as mv:
                part = (lay.offsets, base_ts, lay.timestamps, lay.vlens, mv[kend:vend],
                        lay.vnulls or None, lay.klens,
                        mv[lay.body:kend] if lay.klens is not None else None,
                        lay.knulls or None, headers, last)
    except (_Bad, lz4.block.LZ4BlockError, ValueError, OverflowError, UnicodeDecodeError,
            struct_error) as e:
        raise CorruptRecordError(f"undecodable batch: {e}", position=pos, offset=base) from None
    if min_offset > base or (max_offset is not None and max_offset <= last):
        offsets = part[0]
        return _clip(part, bisect_left(offsets, min_offset),
                     len(offsets) if max_offset is None else bisect_left(offsets, max_offset))
    return part


def _clip(part: ColumnPart, lo: int, hi: int) -> ColumnPart:
    offsets, base_ts, stamps, vlens, values, vnulls, klens, keys, knulls, headers, last = part
    hi = max(lo, hi)
    vstart = sum(vlens[:lo])
    values = values[vstart:vstart + sum(vlens[lo:hi])]
    if klens is not None and keys is not None:
        kstart = sum(klens[:lo])
        keys = keys[kstart:kstart + sum(klens[lo:hi])]
        klens = klens[lo:hi]
        knulls = [i - lo for i in knulls or () if lo <= i < hi] or None
    return (offsets[lo:hi], base_ts, None if stamps is None else stamps[lo:hi], vlens[lo:hi],
            values, [i - lo for i in vnulls or () if lo <= i < hi] or None, klens, keys, knulls,
            None if headers is None else headers[lo:hi], last)


def _nulls(lengths: array[int], null: int) -> list[int]:
    return [i for i, x in enumerate(lengths) if x == null] if null in lengths else []


def _zero_nulls(lengths: array[int], null: int) -> array[int]:
    return array(lengths.typecode, [0 if x == null else x for x in lengths])


def _read_all(read: Callable[[int], bytes], lengths: array[int], nulls: list[int] | None) -> list[bytes | None]:
    out: list[bytes | None] = list(map(read, lengths))
    for i in nulls or ():
        out[i] = None
    return out

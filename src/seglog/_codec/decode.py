"""Decoding batches: pure functions from bytes to messages or columns (docs/FORMAT.md).

``iter_messages`` and ``iter_column_parts`` are the read path's fused walk and
decode over a buffer of whole batches: one walk (``_log.walk``) checks every batch's
framing, offsets and checksum and makes messages, or a ``ColumnPart``, of each
batch or each run of one-record batches.
``decode_batch`` and ``column_part`` decode one batch already checked.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from io import BytesIO
from itertools import islice, repeat
from operator import add
from struct import Struct
from struct import error as struct_error
# Any: the caller's message type and the lead values it is built with (a Message, a
# consumer's ConsumerMessage, a plain tuple)
from typing import (TYPE_CHECKING, Any, Callable, Generator, Iterable, Iterator, NamedTuple,
                    Sequence, TypeVar, cast, overload)

import lz4.block

from .format import (BIG_ENDIAN_HOST, CHECKSUM, CHECKSUM_FROM, CODEC_LZ4, CODEC_MASK,
                     DEFAULT_MAX_UNCOMPRESSED, F_HEADERS, F_HORIZON, F_KEYS, F_NULL_VALUES,
                     F_OFFSETS, F_TIMESTAMPS, F_WIDE, F_WIDE_TS, HEADER, HEADER_SIZE, I64,
                     LENGTH_END, MAGIC, MIN_BATCH_LENGTH, NEVER, NULL_16, NULL_32, OLD_MAGIC,
                     ONE_HEADER, U32, MessageTuple, RawHeader, continues, framing_error,
                     old_magic_at)
from ..errors import CorruptRecordError

_M = TypeVar("_M")
_T = TypeVar("_T")

# what the walk unpacks of every header: HEADER without max_timestamp, and the value
# length that follows the header of a one-record batch
_SCAN = Struct("<qIBQ10sq8xH")
# attributes, last offset delta and record count of a one-record batch, as _SCAN
# reads them (one bytes compared instead of three ints)
_ONE_FIELDS = Struct("<HII").pack(0, 0, 1)
_FIELDS = Struct("<HII")
# lz4 cannot expand data by more than this factor; a larger claim is a bomb
_LZ4_MAX_RATIO = 255
# the errors a batch whose records do not add up raises while it is decoded
_UNDECODABLE = (lz4.block.LZ4BlockError, ValueError, OverflowError, UnicodeDecodeError,
                struct_error)


class WalkEnd(NamedTuple):
    """Where a walk of a buffer stopped (``iter_messages``' and ``iter_column_parts``'
    return value): after the last whole batch it took (its start if none), and the
    offset the next batch must start at."""

    position: int
    next_offset: int


class ColumnPart(NamedTuple):
    """One batch's records with ``min <= offset < max`` as columns (``column_part``),
    or a run of one-record batches'. Value lengths are as the batch stores them
    (array 'H' or 'I'); a null value has length 0 and its index in ``value_nulls``.
    Keys likewise (``key_lengths`` None: no keys). ``Columns.from_parts`` joins parts."""

    offsets: Sequence[int]
    base_timestamp: int
    timestamps: list[int] | None              # None: every record has base_timestamp
    value_lengths: array[int]
    values: bytes | memoryview                # back to back
    value_nulls: list[int] | None
    key_lengths: array[int] | None
    keys: bytes | memoryview | None
    key_nulls: list[int] | None
    headers: list[tuple[tuple[str, bytes], ...]] | None   # per record, None: none has any
    last_offset: int                          # the batch's last offset (unclipped)


# a ColumnPart from a tuple of its fields with one C-level call (no Python __new__):
# one per batch on the bulk read path
_tuple_new = cast("Callable[[type[ColumnPart], tuple[Any, ...]], ColumnPart]", tuple.__new__)


def _walk(data: bytes, start: int, end: int, min_offset: int, max_offset: int | None,
          expect: int | None, partial_ok: bool, columns: bool,
          message_type: Callable[[MessageTuple], Any], lead: tuple[Any, ...],
          max_uncompressed: int) -> Generator[Any, None, WalkEnd]:
    """The walk under ``iter_messages`` and ``iter_column_parts`` (``columns``): yields
    the messages (or a ``ColumnPart``) of each run of plain one-record batches and of
    every other batch with records at or after ``min_offset``, each checked
    (framing, offsets, checksum) first; stops before the first batch at or after
    ``max_offset``.

    The fast loop takes plain batches wholly wanted: a run of one-record batches
    (``Log.append``'s) costs one header unpack, one checksum, one slice and two list
    appends per batch in Python, and a plain batch of several records
    (``append_batch``'s; messages only) one header unpack, one checksum, its length
    array and one C-level pass over its values, built from the fields of that one
    unpack. A batch this loop does not take, good or bad, is left to the general
    path below it, which checks and reports it. What is made of a batch is chosen
    inside the loop, not by a callable per kind: a call per batch is what the read
    path cannot afford.
    """
    mv = memoryview(data)
    bio = BytesIO(data) if type(data) is bytes else None
    leads = tuple(map(repeat, lead))
    # unbounded repeats keep no state: every batch's zip shares them
    nothing, no_headers = repeat(None), repeat(())
    stop = NEVER if max_offset is None else max_offset
    unpack = _SCAN.unpack_from
    one_fields, fields_of = _ONE_FIELDS, _FIELDS.unpack
    one_size = ONE_HEADER.size
    one_length = one_size - LENGTH_END      # batch_length of a one-record batch, less its value
    one_tail = one_size - CHECKSUM_FROM     # its checksummed bytes before the value
    # where the last batch the loop takes could start: the loop then makes no int to
    # compare (a plain batch is never shorter than a one-record one)
    last_start = end - one_size
    # the loop's constants, as locals
    this_format, length_end, checksum, checksum_from = MAGIC, LENGTH_END, CHECKSUM, CHECKSUM_FROM
    header_size, not_plain, swap = HEADER_SIZE, ~F_WIDE, BIG_ENDIAN_HOST
    # below this value length a one-record batch is read from a copy (measured: a
    # memoryview costs about what copying 1-2 KB does)
    copy_below = 1024
    if expect is None:
        # the first batch may start anywhere: it sets the offsets that follow (fewer
        # bytes than that hold no batch to check)
        expect = I64.unpack_from(data, start)[0] if start + 8 <= end else 0
    pos = start
    while pos < end:
        if bio is not None and expect >= min_offset:
            read, seek = bio.read, bio.seek
            values: list[bytes] = []
            stamps: list[int] = []
            while pos <= last_start:
                # the header (without max_timestamp), then the first value length
                # (a one-record batch's only one)
                base, length, magic, check, fields, base_ts, vlen = unpack(data, pos)
                # length + 12 is one of CPython's cached small ints for values of up to
                # 211 bytes: one int made per batch here, not two
                nxt = pos + (length + length_end)
                # base == expect: the strict case of ``continues``. A one-record batch is
                # taken at the end of the loop's body, where the compiler repeats the
                # loop's test (a ``continue`` would add a jump a batch); any other here
                if (fields != one_fields or base != expect or magic != this_format
                        or vlen != length - one_length or nxt > end or base >= stop):
                    attrs, last_delta, count = fields_of(fields)
                    # a plain batch (attributes F_WIDE at most) wholly wanted, as messages
                    # (columns take the general path): its lengths, then its values
                    p = pos + header_size
                    q = p + (4 if attrs else 2) * count
                    if (columns or attrs & not_plain or count != last_delta + 1
                            or base != expect or magic != this_format or q > nxt or nxt > end
                            or base + last_delta >= stop
                            or checksum(mv[pos + checksum_from:nxt]) != check):
                        break
                    lengths = array("I" if attrs else "H")
                    lengths.frombytes(mv[p:q])
                    if swap:
                        lengths.byteswap()
                    if q + sum(lengths) != nxt:
                        break
                    if values:
                        n = len(values)
                        yield _plain(message_type, leads, expect - n, n, stamps, values)
                        values, stamps = [], []
                    seek(q)
                    expect = base + count
                    yield map(message_type, zip(*leads, range(base, expect), repeat(base_ts),
                                                nothing, map(read, lengths), no_headers))
                    pos = nxt
                    continue
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
                    yield _tuple_new(ColumnPart, (
                        range(expect - n, expect), stamps[0], stamps,
                        array("I", map(len, values)), b"".join(values), None, None, None,
                        None, None, expect - 1))
                else:
                    yield _plain(message_type, leads, expect - n, n, stamps, values)
            if pos >= end:
                break
        # any other batch: one at a time, every check with its own error
        if pos + HEADER_SIZE > end:
            if old_magic_at(data, pos, end):
                raise framing_error(OLD_MAGIC, 0, 0, pos, None)
            if partial_ok:
                break
            raise CorruptRecordError("partial batch header", position=pos)
        hdr = HEADER.unpack_from(data, pos)
        base, length, magic, check, attrs, last_delta, count, base_ts, _ = hdr
        nxt = pos + LENGTH_END + length
        if magic != MAGIC or length < MIN_BATCH_LENGTH or nxt > end:
            if partial_ok and magic == MAGIC and length >= MIN_BATCH_LENGTH:
                break
            raise framing_error(magic, length, base, pos, base)
        if base != expect and not continues(expect, base, attrs):
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
            yield _column_part(data, mv, pos, hdr, min_offset, max_offset, max_uncompressed)
        elif (attrs & ~F_WIDE) or bio is None or count != last_delta + 1:
            yield decode_batch(data, pos, hdr, min_offset, max_offset, max_uncompressed,
                               message_type, lead)
        else:
            p = pos + HEADER_SIZE
            q = p + (4 if attrs else 2) * count
            if q > nxt:
                raise CorruptRecordError("length array runs past the batch", position=pos,
                                         offset=base)
            lens = _plain_lengths(mv, p, q, nxt, attrs)
            if lens is None:
                raise CorruptRecordError("record lengths do not add up", position=pos,
                                         offset=base)
            bio.seek(q)
            it = _plain(message_type, leads, base, count, repeat(base_ts), map(bio.read, lens))
            if min_offset > base or stop <= base + last_delta:
                lo = max(0, min_offset - base)
                it = islice(it, lo, max(lo, min(count, stop - base)))
            yield it
        pos = nxt
    return WalkEnd(pos, expect)


def iter_messages(data: bytes, start: int, end: int, min_offset: int = 0,
                  max_offset: int | None = None, *, expect: int | None = None,
                  partial: bool = False, message_type: Callable[[MessageTuple], Any] = tuple,
                  lead: tuple[Any, ...] = (),
                  max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED
                  ) -> Generator[Iterator[Any], None, WalkEnd]:
    """The messages of the whole batches in ``data[start:end]`` with ``min_offset <=
    offset < max_offset``, in order, as iterators: one per batch, or one for a run of
    one-record batches. Returns (``StopIteration.value``, or ``yield from``'s value)
    a ``WalkEnd``.

    Checks framing, checksum and offsets of each batch before decoding it and raises
    CorruptRecordError (with ``position`` relative to ``data``) on the first bad
    one, after the messages of the batches before it. The base offset is outside
    the checksum, so batches must follow each other (``continues``); ``expect`` is
    where the first must start, if known. With ``partial``, ``data[start:end]`` may
    end inside a batch (a chunk of a file): a batch that does not fit ends the walk
    instead of raising.

    Messages are ``message_type`` of a 5-tuple (offset, timestamp, key, value,
    headers), after the ``lead`` values if any (a consumer's topic and partition):
    ``message_type`` gets one tuple and no copy is made. A plain batch (no keys,
    headers, nulls, per-record timestamps or compression) decodes with a few
    C-level calls, and a run's messages are made in one C-level pass.
    """
    return _walk(data, start, end, min_offset, max_offset, expect, partial, False,
                 message_type, lead, max_uncompressed)


def _plain(mtype: Callable[[MessageTuple], Any], leads: tuple[Iterator[Any], ...], first: int,
           n: int, stamps: Iterable[int], values: Iterable[bytes]) -> Iterator[Any]:
    """The messages of ``n`` keyless, headerless records with consecutive offsets from
    ``first``: one C-level pass (zip reuses its tuple, ``mtype`` copies it)."""
    return map(mtype, zip(*leads, range(first, first + n), stamps, repeat(None), values,
                          repeat(())))


def iter_column_parts(data: bytes, start: int, end: int, min_offset: int = 0,
                      max_offset: int | None = None, *, expect: int | None = None,
                      partial: bool = False,
                      max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED
                      ) -> Generator[ColumnPart, None, WalkEnd]:
    """What ``iter_messages`` walks (with every check it makes), as ``ColumnPart``s:
    one per batch, or one for a run of one-record batches. Returns a ``WalkEnd``."""
    return _walk(data, start, end, min_offset, max_offset, expect, partial, True, tuple, (),
                 max_uncompressed)


@overload
def decode_batch(data: bytes, pos: int, hdr: RawHeader,
                 min_offset: int = ..., max_offset: int | None = ...,
                 max_uncompressed: int = ..., message_type: None = ...,
                 lead: tuple[Any, ...] = ...) -> Iterator[MessageTuple]: ...
@overload
def decode_batch(data: bytes, pos: int, hdr: RawHeader,
                 min_offset: int = ..., max_offset: int | None = ...,
                 max_uncompressed: int = ..., *,
                 message_type: Callable[[MessageTuple], _M],
                 lead: tuple[Any, ...] = ...) -> Iterator[_M]: ...
@overload
def decode_batch(data: bytes, pos: int, hdr: RawHeader,
                 min_offset: int, max_offset: int | None, max_uncompressed: int,
                 message_type: Callable[[MessageTuple], _M],
                 lead: tuple[Any, ...] = ...) -> Iterator[_M]: ...
def decode_batch(data: bytes, pos: int, hdr: RawHeader,
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
    except (_Bad, *_UNDECODABLE) as e:
        raise CorruptRecordError(f"undecodable batch: {e}", position=pos, offset=hdr[0]) from None


class _Bad(Exception):
    pass


def _array(typecode: str, data: bytes | memoryview) -> array[int]:
    arr = array(typecode)
    arr.frombytes(data)
    if BIG_ENDIAN_HOST:
        arr.byteswap()
    return arr


class _Layout:
    """A batch's records as parsed arrays (the part of decoding shared by messages
    and columns); ``data[body:]`` holds the keys, then the values, then the headers."""

    __slots__ = ("data", "body", "offsets", "timestamps", "klens", "vlens", "knulls",
                 "vnulls", "hcounts", "hlens", "key_bytes", "value_bytes")

    def __init__(self, data: bytes, pos: int, hdr: RawHeader, max_uncompressed: int) -> None:
        base, length, _, _, attrs, last_delta, count, base_ts, _ = hdr
        end = pos + LENGTH_END + length
        p = pos + HEADER_SIZE
        if attrs & F_HORIZON:
            p += I64.size
        if p > end:
            raise _Bad("batch too short for its attributes")
        if attrs & CODEC_MASK:
            if attrs & CODEC_MASK != CODEC_LZ4:
                raise _Bad(f"unknown codec {attrs & CODEC_MASK}")
            (usize,) = U32.unpack_from(data, p)
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
        null = NULL_32 if wide else NULL_16

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


def _decode(data: bytes, pos: int, hdr: RawHeader, min_offset: int,
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
    base, _, _, _, _, last_delta, _, base_ts, _ = hdr
    it: Iterator[Any] = map(mtype, zip(*map(repeat, lead), offsets,
                                       lay.timestamps or repeat(base_ts), keys,
                                       values, headers))
    last = base + last_delta
    if min_offset > base or (max_offset is not None and max_offset <= last):
        lo = bisect_left(offsets, min_offset)
        hi = len(offsets) if max_offset is None else bisect_left(offsets, max_offset)
        it = islice(it, lo, max(lo, hi))
    return it


def column_part(data: bytes, pos: int, hdr: RawHeader, min_offset: int = 0,
                max_offset: int | None = None,
                max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED) -> ColumnPart:
    """The (checksum-checked) batch at ``pos`` as a ``ColumnPart``, with no object
    per record unless it has keys with nulls, per-record timestamps or headers.

    Raises CorruptRecordError if the records do not add up.
    """
    with memoryview(data) as mv:
        return _column_part(data, mv, pos, hdr, min_offset, max_offset, max_uncompressed)


def _column_part(data: bytes, mv: memoryview, pos: int, hdr: RawHeader, min_offset: int,
                 max_offset: int | None, max_uncompressed: int) -> ColumnPart:
    """``column_part``, given a view of ``data`` (the walk holds one for all batches)."""
    base, length, _, _, attrs, last_delta, count, base_ts, _ = hdr
    last = base + last_delta
    part: ColumnPart
    try:
        if not attrs & ~F_WIDE and count == last_delta + 1:
            # a plain batch: lengths, then the values, nothing else
            p = pos + HEADER_SIZE
            q = p + (4 if attrs else 2) * count
            nxt = pos + LENGTH_END + length
            lens = _plain_lengths(mv, p, q, nxt, attrs)
            if lens is None:
                raise _Bad("record lengths do not add up")
            part = _tuple_new(ColumnPart, (range(base, last + 1), base_ts, None, lens, mv[q:nxt],
                                           None, None, None, None, None, last))
        else:
            lay = _Layout(data, pos, hdr, max_uncompressed)
            kend = lay.body + lay.key_bytes
            vend = kend + lay.value_bytes
            headers = None
            if lay.hcounts is not None:
                bio = BytesIO(lay.data)
                bio.seek(vend)
                headers = lay.headers(bio.read)
            with memoryview(lay.data) as lmv:
                part = _tuple_new(ColumnPart, (
                    lay.offsets, base_ts, lay.timestamps, lay.vlens, lmv[kend:vend],
                    lay.vnulls or None, lay.klens,
                    lmv[lay.body:kend] if lay.klens is not None else None,
                    lay.knulls or None, headers, last))
    except (_Bad, *_UNDECODABLE) as e:
        raise CorruptRecordError(f"undecodable batch: {e}", position=pos, offset=base) from None
    if min_offset > base or (max_offset is not None and max_offset <= last):
        offsets = part[0]
        return _clip(part, bisect_left(offsets, min_offset),
                     len(offsets) if max_offset is None else bisect_left(offsets, max_offset))
    return part


def _plain_lengths(mv: memoryview, p: int, q: int, nxt: int, wide: int) -> array[int] | None:
    """The value lengths of a plain batch (attributes ``F_WIDE`` at most, offsets
    without holes) ending at ``nxt``, stored at ``mv[p:q]`` (uint32 if ``wide``):
    its records section is the lengths, then the values, nothing else. None where
    they do not add up to the batch. (It reads the array itself rather than through
    ``_array``: this runs once a batch on the read path.)"""
    lens = array("I" if wide else "H")
    lens.frombytes(mv[p:q])
    if BIG_ENDIAN_HOST:
        lens.byteswap()
    return lens if q <= nxt and q + sum(lens) == nxt else None


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
    return ColumnPart(offsets[lo:hi], base_ts, None if stamps is None else stamps[lo:hi],
                      vlens[lo:hi], values, [i - lo for i in vnulls or () if lo <= i < hi] or None,
                      klens, keys, knulls, None if headers is None else headers[lo:hi], last)


def _nulls(lengths: array[int], null: int) -> list[int]:
    return [i for i, x in enumerate(lengths) if x == null] if null in lengths else []


def _zero_nulls(lengths: array[int], null: int) -> array[int]:
    return array(lengths.typecode, [0 if x == null else x for x in lengths])


def _read_all(read: Callable[[int], bytes], lengths: array[int],
              nulls: list[int] | None) -> list[bytes | None]:
    out: list[bytes | None] = list(map(read, lengths))
    for i in nulls or ():
        out[i] = None
    return out

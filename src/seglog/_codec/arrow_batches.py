"""Arrow columns straight from a buffer of whole batches, built with numpy.

``arrow_columns`` is the columnar read path (``Log.read_arrow``,
``MessageSet.to_arrow``, the Spark source). Per batch it costs one short header
unpack and one checksum call in Python; everything else is numpy over all the
batches of the buffer at once: the headers are gathered through a sliding-window
view, the value lengths likewise, the value positions are one cumulative sum. The
values are not copied for ``views=True`` (``binary_view`` arrays over the buffer);
otherwise they are copied once, in C, into one contiguous ``binary`` buffer.

Only plain batches take this road: no compression, keys, headers, per-record
timestamps, nulls, wide lengths or offset holes (what ``append_batch`` and
``append`` write by default). Any other batch, and any batch that fails a check,
goes through ``_codec.decode.iter_column_parts``: it decodes the others and raises the
errors of the read path (``CorruptRecordError`` with the position), so both roads
check the same things and answer the same.
"""

from __future__ import annotations

import functools
from collections import deque
from struct import error as struct_error
# Any: pyarrow and numpy modules and arrays: they ship no type information
from typing import Any, NamedTuple

from . import decode as _decode, format as _format
from .columns import Columns, arrow_modules, record_batch

# length, magic, checksum and attributes: what the first pass reads of each header
_FIRST = _format.FRAMING
_FIRST_AT = _format.FRAMING_AT
_BASE = _format.BASE_OFFSET   # a batch's first 8 bytes: its base offset
_LENGTH_END = _format.LENGTH_END
_HEADER_SIZE = _format.HEADER_SIZE
# values of up to this many bytes live inside an Arrow view (Arrow's view layout)
_INLINE = 12
# a view holds its value's position in the buffer as an int32: values that end
# within this many bytes of the buffer's start can be viewed there
_VIEW_REACH = 1 << 31
# binary arrays whose values add up to this many bytes or more are large_binary
_LARGE = 1 << 31


class ArrowColumns(NamedTuple):
    """Messages as pyarrow arrays: offsets (int64), timestamps (int64 ms), keys and
    values (binary, or binary_view; null where None), and ``headers``: a list of
    per-message tuples, or None when no message has headers. ``arrow_arrays`` and
    ``headers`` are what ``Columns`` offers too, so either feeds the same Arrow
    layouts (``to_arrow``, the Spark source's batches)."""

    offsets: Any
    timestamps: Any
    keys: Any
    values: Any
    headers: list[tuple[tuple[str, bytes], ...]] | None

    def arrow_arrays(self) -> tuple[Any, Any, Any, Any]:
        """The offsets, timestamps, keys and values arrays (as ``Columns.arrow_arrays``)."""
        return self.offsets, self.timestamps, self.keys, self.values

    def to_arrow(self) -> Any:
        """A ``pyarrow.RecordBatch`` with the fields of ``ARROW_FIELDS``."""
        return record_batch(self.offsets, self.timestamps, self.keys, self.values, self.headers)


def arrow_columns(data: bytes | Any, start: int, end: int, min_offset: int = 0,
                  max_offset: int | None = None, *, expect: int | None = None,
                  partial: bool = False, views: bool = False,
                  max_uncompressed: int = _format.DEFAULT_MAX_UNCOMPRESSED
                  ) -> tuple[ArrowColumns, _decode.WalkEnd]:
    """The messages of the whole batches in ``data[start:end]`` with ``min_offset <=
    offset < max_offset`` as ``ArrowColumns``, and where the walk ended.

    The same contract as ``_codec.decode.iter_column_parts`` (``expect``, ``partial``, every
    batch's framing, offsets and checksum checked before its values are used,
    ``CorruptRecordError`` on the first bad one). ``data`` is ``bytes`` or a
    ``pyarrow.Buffer`` that nothing writes to any more: with ``views`` the key and
    value arrays are ``binary_view`` arrays pointing into it, which keep it alive.
    """
    pa, np = arrow_modules()
    pieces: list[ArrowColumns] = []
    stop = _format.NEVER if max_offset is None else max_offset
    pos = start
    while pos < end:
        if expect is None:
            # the first batch may start anywhere: it sets the offsets that follow
            expect = _BASE.unpack_from(data, pos)[0] if pos + 8 <= end else 0
        got = _plain_run(pa, np, data, pos, end, min_offset, stop, expect, views)
        if got is not None:
            piece, pos, expect = got
            if piece is not None:
                pieces.append(piece)
            continue
        # the batch at pos (and the run of other batches after it) is not plain, or
        # failed a check: the general walk decodes it or raises its error
        stop_at = _general_stretch(data, pos, end)
        parts, done = _walk_parts(data, pos, stop_at, min_offset, max_offset, expect,
                                  partial or stop_at < end, max_uncompressed)
        if parts:
            pieces.append(_from_parts(pa, parts, views))
        if done.position == pos:
            break
        pos, expect = done.position, done.next_offset
    return _concat(pa, pieces, views), _decode.WalkEnd(pos, 0 if expect is None else expect)


def _first_pass(data: bytes, pos: int, end: int) -> list[int]:
    """Positions of the run of plain batches from ``pos`` whose lengths fit and whose
    checksums match: one short unpack and one checksum a batch, the only Python per
    batch on this road."""
    mv = memoryview(data)
    unpack = _FIRST.unpack_from
    checksum, checksum_from, length_end, magic_ok = (_format.CHECKSUM, _format.CHECKSUM_FROM,
                                                     _LENGTH_END, _format.MAGIC)
    last = end - _HEADER_SIZE
    found: list[int] = []
    add = found.append
    try:
        while pos <= last:
            length, magic, check, attrs = unpack(data, pos + _FIRST_AT)
            nxt = pos + length + length_end
            if attrs or magic != magic_ok or nxt > end or \
                    checksum(mv[pos + checksum_from:nxt]) != check:
                break
            add(pos)
            pos = nxt
    except (struct_error, ValueError):
        # a header the buffer cuts short (an ``end`` past the data): the run ends
        # here, and the general walk reports what is there
        return found
    return found


def _plain_run(pa: Any, np: Any, data: bytes, pos: int, end: int, min_offset: int,
               stop: int, expect: int, views: bool
               ) -> tuple[ArrowColumns | None, int, int] | None:
    """The run of plain batches from ``pos`` as columns (None if it holds no
    message in range), the position after it and the offset expected next; None
    when the batch at ``pos`` is not a plain batch that passes every check."""
    found = _first_pass(data, pos, end)
    if not found:
        return None
    starts = np.array(found, dtype=np.int64)
    with _byte_view(data) as mv:
        # the headers, then the lengths arrays, each gathered by one join of a slice
        # a batch (cheaper than numpy's fancy indexing of rows: measured)
        hdr = np.frombuffer(_gather(mv, found, (starts + _HEADER_SIZE).tolist()),
                            dtype=_header_dtype(np))
        base = hdr["base"]
        count = hdr["count"].astype(np.int64)
        last_delta = hdr["last_delta"].astype(np.int64)
        length = hdr["length"].astype(np.int64)
        # the checks the walk makes of a plain batch, all batches at once; the first
        # batch failing one ends the run (the general walk then reports it)
        bad = (count != last_delta + 1) | (count < 1) | \
            (length < _format.MIN_BATCH_LENGTH + 2 * count) | (base >= stop)
        follows = np.empty(len(starts), dtype=bool)
        follows[0] = base[0] == expect
        np.equal(base[1:], base[:-1] + last_delta[:-1] + 1, out=follows[1:])
        bad |= ~follows
        n = int(np.argmax(bad)) if bad.any() else len(starts)
        if n == 0:
            return None
        if n < len(starts):
            starts, hdr, count, length = starts[:n], hdr[:n], count[:n], length[:n]
        values_at = starts + (_HEADER_SIZE + 2 * count)
        nxt = starts + (length + _LENGTH_END)
        lens = np.frombuffer(_gather(mv, (starts + _HEADER_SIZE).tolist(), values_at.tolist()),
                             dtype="<u2").astype(np.int64)
        firsts = np.cumsum(count) - count
        ok = np.add.reduceat(lens, firsts) == nxt - values_at
        if not ok.all():
            n = int(np.argmin(ok))
            if n == 0:
                return None
            hdr, count, nxt, values_at, firsts = hdr[:n], count[:n], nxt[:n], values_at[:n], \
                firsts[:n]
            lens = lens[:int(firsts[-1] + count[-1])]
        if views and int(nxt[-1]) <= _VIEW_REACH:
            values = _views(pa, np, data, lens, values_at, nxt, firsts)
        else:
            # (views of values past 2 GiB in the buffer: their 32-bit positions would
            # wrap, so the values are copied and the copy viewed)
            values = _copied(pa, np, mv, lens, values_at, nxt)
            if views and values.type == pa.binary():
                values = values.cast(pa.binary_view())
    total = len(lens)
    first = int(hdr["base"][0])
    after = int(nxt[-1])
    following = first + total
    lo = max(0, min(total, min_offset - first))
    hi = max(lo, min(total, stop - first))
    if lo >= hi:
        return None, after, following
    # offsets: first, first + 1, ...; timestamps: each batch's, repeated
    offsets = _pooled(pa, np, total, np.int64)
    offsets[:] = 1
    offsets[0] = first
    stamps = _pooled(pa, np, total, np.int64)
    stamps[:] = 0
    stamps[firsts] = np.diff(hdr["base_ts"], prepend=0)
    cols = ArrowColumns(pa.array(np.cumsum(offsets, out=offsets)),
                        pa.array(np.cumsum(stamps, out=stamps)),
                        pa.nulls(total, values.type), values, None)
    if lo or hi < total:
        # whole batches were decoded; the messages outside the range are cut off
        # (a zero-copy slice)
        offsets, stamps, keys, values = (c.slice(lo, hi - lo) for c in cols.arrow_arrays())
        cols = ArrowColumns(offsets, stamps, keys, values, None)
    return cols, after, following


def _byte_view(data: Any) -> memoryview:
    """A view of ``data``'s bytes as unsigned bytes (a ``pyarrow.Buffer``'s view says
    signed, which slice assignment between the two refuses)."""
    mv = memoryview(data)
    return mv if mv.format == "B" else mv.cast("B")


def _gather(mv: memoryview, lo: list[int], hi: list[int]) -> bytes:
    """``mv[lo[i]:hi[i]]`` for every i, end to end: one join, no Python per slice."""
    return b"".join(map(mv.__getitem__, map(slice, lo, hi)))


def _views(pa: Any, np: Any, data: bytes, lens: Any, values_at: Any, nxt: Any,
           firsts: Any) -> Any:
    """A ``binary_view`` array of the values, pointing into ``data``: 16 bytes a value
    (length, first 4 bytes, buffer 0, position), values of up to 12 bytes inside the
    view itself, as Arrow's layout has it."""
    raw = np.frombuffer(data, dtype=np.uint8)
    m = len(lens)
    # value i starts where value i - 1 ends, or at its batch's first value
    at = np.empty(m, dtype=np.int64)
    at[0] = 0
    at[1:] = lens[:-1]
    at[firsts] += values_at - np.concatenate(([0], nxt[:-1]))
    np.cumsum(at, out=at)
    view = _pooled(pa, np, 4 * m, np.int32).reshape(m, 4)
    view[:, 2] = 0                  # buffer 0: data
    view[:, 0] = lens
    big = lens > _INLINE
    if big.all():
        view[:, 1] = raw.take(at[:, None] + _span(np, 4)).view("<i4").reshape(-1)
        view[:, 3] = at
    else:
        big_at = at[big]
        view[big, 1] = raw.take(big_at[:, None] + _span(np, 4)).view("<i4").reshape(-1)
        view[big, 3] = big_at
        small = np.flatnonzero(~big)
        # the 12 bytes from a short value's start (clipped at the buffer's end),
        # zeroed past its length
        grab = raw.take(np.minimum(at[small][:, None] + _span(np, _INLINE), len(raw) - 1))
        grab[_span(np, _INLINE) >= lens[small][:, None]] = 0
        view[small, 1:] = grab.view("<i4")
    return pa.Array.from_buffers(pa.binary_view(), m, [None, pa.py_buffer(view), _buffer(pa, data)])


def _buffer(pa: Any, data: Any) -> Any:
    return data if isinstance(data, pa.Buffer) else pa.py_buffer(data)


@functools.lru_cache(maxsize=None)
def _span(np: Any, n: int) -> Any:
    return np.arange(n, dtype=np.int64)


def _copied(pa: Any, np: Any, mv: memoryview, lens: Any, values_at: Any, nxt: Any) -> Any:
    """A ``binary`` array of the values, copied once into one buffer: each batch's
    values are adjacent, so the copy is one slice assignment a batch, driven in C."""
    sizes = nxt - values_at
    ends = np.cumsum(sizes)
    out = pa.allocate_buffer(int(ends[-1]))
    with memoryview(out).cast("B") as dest:
        deque(map(dest.__setitem__, map(slice, (ends - sizes).tolist(), ends.tolist()),
                  map(mv.__getitem__, map(slice, values_at.tolist(), nxt.tolist()))), 0)
    large = out.size >= 1 << 31
    offsets = _pooled(pa, np, len(lens) + 1, np.int64 if large else np.int32)
    offsets[0] = 0
    np.cumsum(lens, out=offsets[1:])
    return pa.Array.from_buffers(pa.large_binary() if large else pa.binary(), len(lens),
                                 [None, pa.py_buffer(offsets), out])


def _pooled(pa: Any, np: Any, n: int, dtype: Any) -> Any:
    """An uninitialised numpy array of ``n`` items in memory from Arrow's pool: the
    pool hands back memory freed by earlier reads, where fresh memory costs a page
    fault a page (measured: a third of a read's time, from ``malloc``)."""
    return np.frombuffer(pa.allocate_buffer(n * np.dtype(dtype).itemsize), dtype=dtype)


def _general_stretch(data: bytes, pos: int, end: int) -> int:
    """Where the run of batches from ``pos`` that the first pass does not take ends:
    the next batch with no attributes (framing only, no checksum: the general walk
    checks them). ``end`` if none or if the framing breaks (the walk reports it)."""
    unpack = _FIRST.unpack_from
    p = pos
    first = True
    try:
        while p + _HEADER_SIZE <= end:
            length, magic, _, attrs = unpack(data, p + _FIRST_AT)
            if not attrs and not first:
                return p
            if magic != _format.MAGIC or length < _format.MIN_BATCH_LENGTH:
                break       # a header the walk must see with the rest of the buffer
            first = False
            p += length + _LENGTH_END
    except (struct_error, ValueError):
        return end          # a header cut short: the walk must see it with the rest
    return end


def _walk_parts(data: bytes, pos: int, end: int, min_offset: int, max_offset: int | None,
                expect: int | None, partial: bool, max_uncompressed: int
                ) -> tuple[list[_decode.ColumnPart], _decode.WalkEnd]:
    walk = _decode.iter_column_parts(data, pos, end, min_offset, max_offset, expect=expect,
                                   partial=partial, max_uncompressed=max_uncompressed)
    parts: list[_decode.ColumnPart] = []
    while True:
        try:
            parts.append(next(walk))
        except StopIteration as e:
            return parts, e.value


def _from_parts(pa: Any, parts: list[_decode.ColumnPart], views: bool) -> ArrowColumns:
    cols = Columns.from_parts(parts)
    offsets, stamps, keys, values = cols.arrow_arrays()
    if views:
        # values past 2 GiB stay large_binary: one view buffer cannot hold them
        keys, values = (a if a.type == pa.large_binary() else a.cast(pa.binary_view())
                        for a in (keys, values))
    return ArrowColumns(offsets, stamps, keys, values, cols.headers)


def _concat(pa: Any, pieces: list[ArrowColumns], views: bool) -> ArrowColumns:
    binary = pa.binary_view() if views else pa.binary()
    if not pieces:
        empty = pa.array([], pa.int64())
        return ArrowColumns(empty, empty, pa.array([], binary), pa.array([], binary), None)
    if len(pieces) == 1:
        return pieces[0]
    headers: list[tuple[tuple[str, bytes], ...]] | None = None
    if any(p.headers is not None for p in pieces):
        headers = []
        for p in pieces:
            headers += p.headers if p.headers is not None else [()] * len(p.offsets)
    cols: list[Any] = []
    for i in range(4):
        arrays: list[Any] = [p.arrow_arrays()[i] for p in pieces]
        if i >= 2:
            types = {a.type for a in arrays}
            # binary pieces each under 2 GiB may pass it together: their int32
            # offsets would overflow in the join
            if pa.large_binary() in types or _binary_bytes(pa, arrays) >= _LARGE:
                arrays = [a if a.type == pa.large_binary() else a.cast(pa.large_binary())
                          for a in arrays]
            elif len(types) > 1:
                arrays = [a.cast(binary) for a in arrays]
        cols.append(pa.concat_arrays(arrays))
    return ArrowColumns(cols[0], cols[1], cols[2], cols[3], headers)


def _binary_bytes(pa: Any, arrays: list[Any]) -> int:
    """The bytes of the values of the ``binary`` arrays among ``arrays`` (from each
    one's int32 offsets, as sliced)."""
    np = arrow_modules()[1]
    total = 0
    for a in arrays:
        if a.type == pa.binary() and len(a):
            offsets = np.frombuffer(a.buffers()[1], dtype="<i4")
            total += int(offsets[a.offset + len(a)]) - int(offsets[a.offset])
    return total


@functools.lru_cache(maxsize=None)
def _header_dtype(np: Any) -> Any:
    """A batch header as a numpy record (``_codec.format.HEADER``'s fields, little-endian)."""
    return np.dtype({"names": ["base", "length", "magic", "checksum", "attrs", "last_delta",
                               "count", "base_ts", "max_ts"],
                     "formats": ["<i8", "<u4", "u1", "<u8", "<u2", "<u4", "<u4", "<i8", "<i8"],
                     "offsets": [0, 8, 12, 13, 21, 23, 27, 31, 39],
                     "itemsize": _HEADER_SIZE})

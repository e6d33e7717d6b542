"""``MessageSet``: whole batches as read from a segment, decoded as iterated."""

from __future__ import annotations

import os
from itertools import chain
from operator import itemgetter
# Any: the caller's message type and lead values (as _codec.decode)
from typing import Any, Iterable, Iterator, Protocol

from . import decode as _decode, encode as _encode, format as _format
from .._views import html as _html
from .arrow_batches import ArrowColumns, arrow_columns
from .columns import Columns
from .records import Message, Record, make_message, messages_html, prepare_batch
from ..errors import CorruptRecordError, SeglogError


class SendfileSource(Protocol):
    """The file behind a set read from a segment (``Segment`` is one): ``write_to``
    sends from it zero-copy."""

    def sendfile(self, out: int, pos: int, count: int) -> int: ...


class HasFileno(Protocol):
    """A destination ``write_to`` writes to by its descriptor (a socket, a file)."""

    def fileno(self) -> int: ...


class MessageSet:
    """Whole batches as read from a segment: a zero-copy view until iterated.

    Iterating yields the ``Message`` objects with ``offset >= `` the offset asked
    for (the first batch may start earlier; its earlier records are skipped).
    ``write_to`` sends the raw batch bytes, zero-copy with ``os.sendfile`` when the
    set is backed by a file. Every batch's checksum is checked as it is iterated;
    a mismatch raises ``CorruptRecordError``.
    """

    __slots__ = ("_data", "_start", "_end", "_min", "_max", "_file", "_file_pos", "_path",
                 "_max_uncompressed", "_next", "_expect", "_last_next", "__weakref__")

    def __init__(self, data: bytes, start: int = 0, end: int | None = None, *,
                 min_offset: int = 0, max_offset: int | None = None,
                 next_offset: int | None = None, file: SendfileSource | None = None,
                 file_position: int | None = None, path: str | None = None,
                 max_uncompressed: int = _format.DEFAULT_MAX_UNCOMPRESSED,
                 expect: int | None = None, last_next: int | None = None) -> None:
        self._data = data
        self._start = start
        self._end = len(data) if end is None else end
        self._min = min_offset
        self._max = max_offset
        self._file = file
        self._file_pos = file_position
        self._path = path
        self._max_uncompressed = max_uncompressed
        self._next = next_offset
        self._expect = expect      # the first batch's base offset, when the reader knows it
        self._last_next = last_next   # one past the last batch's last offset (unclipped)

    @classmethod
    def from_records(cls, records: Iterable[bytes | Record], base_offset: int = 0,
                     compression: str | None = None, timestamp: int | None = None) -> "MessageSet":
        """Build an in-memory set of one batch with offsets from ``base_offset``."""
        import time
        now = time.time_ns() // 1_000_000 if timestamp is None else timestamp
        values, keys, stamps, headers = prepare_batch(list(records), now, None)
        if not values:
            return cls(b"", next_offset=base_offset, min_offset=base_offset)
        data = _encode.encode_batch(base_offset, values, stamps, keys, headers,
                                  _format.CODEC_LZ4 if compression == "lz4" else _format.CODEC_NONE)
        return cls(data, min_offset=base_offset)

    def _headers(self) -> Iterator[tuple[int, _format.RawHeader]]:
        # the headers as HEADER unpacks them: each caller unpacks them into names
        pos, end = self._start, self._end
        try:
            for pos, hdr in _format.raw_batches_in(self._data, pos, end):
                yield pos, hdr
                pos += _format.LENGTH_END + hdr[1]      # batch_length
        except CorruptRecordError as e:
            raise e.at(self._path, self._pos(e.position or 0)) from None
        if pos < end:
            raise CorruptRecordError("partial batch in message set", self._path, self._pos(pos))

    def message_iters(self, message_type: Any = make_message,
                      lead: tuple[Any, ...] = ()) -> Iterator[Iterable[Any]]:
        """The messages batch by batch: per batch (or run of one-record batches) an
        iterator of ``message_type((*lead, offset, timestamp, key, value, headers))``,
        checked as iterating is (``_codec.decode.iter_messages``)."""
        try:
            yield from _decode.iter_messages(self._data, self._start, self._end, self._min,
                                           self._max, expect=self._expect,
                                           message_type=message_type, lead=lead,
                                           max_uncompressed=self._max_uncompressed)
        except CorruptRecordError as e:
            pos = self._pos(e.position) if e.position is not None else None
            raise e.at(self._path, pos, e.offset) from None

    def _pos(self, pos: int) -> int:
        return pos - self._start + (self._file_pos or 0)

    def __iter__(self) -> Iterator[Message]:
        """The messages of the set (offsets from ``min_offset``, below ``max_offset``
        when given), in offset order; each batch's checksum is checked as it is
        reached (``CorruptRecordError`` naming the file, position and offset)."""
        return chain.from_iterable(self.message_iters())

    def iter_as(self, message_type: Any, lead: tuple[Any, ...]) -> Iterator[Any]:
        """The messages as ``message_type((*lead, offset, timestamp, key, value,
        headers))`` (a consumer's ``ConsumerMessage`` with its topic and partition
        in ``lead``), in offset order, each batch checked as iterating is."""
        return chain.from_iterable(self.message_iters(message_type, lead))

    def __len__(self) -> int:
        """The number of messages iteration yields (header arithmetic; a compacted
        or partly wanted batch is decoded to count)."""
        n = 0
        for pos, hdr in self._headers():
            base, _, _, _, attrs, last_delta, _, _, _ = hdr
            last = base + last_delta
            lo = self._min
            hi = last + 1 if self._max is None else min(last + 1, self._max)
            if attrs & _format.F_OFFSETS or (lo > base and hi <= last):
                if hi > lo and last >= lo:
                    n += sum(1 for _ in _decode.decode_batch(
                        self._data, pos, hdr, lo, self._max, self._max_uncompressed))
            else:
                n += max(0, hi - max(lo, base))
        return n

    def __bool__(self) -> bool:
        return self._end > self._start

    @property
    def size_in_bytes(self) -> int:
        """Bytes of whole batches in the set (what ``write_to`` sends)."""
        return self._end - self._start

    @property
    def end_of_batches(self) -> int | None:
        """One past the last offset of the set's last batch, not clipped to the
        offsets asked for: where a batch after the set must start. None when the
        reader that made the set did not say."""
        return self._last_next

    @property
    def first_offset(self) -> int | None:
        """Offset of the first message in the set, None if it is empty."""
        for m in self:
            return m[0]
        return None

    @property
    def next_offset(self) -> int:
        """The offset to read next: one past the set's last batch."""
        if self._next is not None:
            return self._next
        last = None
        for _, hdr in self._headers():
            last = hdr
        if last is None:
            return self._next if self._next is not None else self._min
        nxt = _format.as_header(last).last_offset + 1
        return nxt if self._max is None else min(nxt, self._max)

    def columns(self) -> "Columns":
        """The messages as columns, with no Python object per message where the
        batches allow it (no keys, headers or per-record timestamps): offsets as a
        ``range`` when they are contiguous, timestamps and lengths as ``array``s,
        the values back to back in one ``bytes``. Checks every batch as iterating
        does (``CorruptRecordError``)."""

        return Columns.from_parts(list(self.column_parts()))

    def column_parts(self) -> Iterator[_decode.ColumnPart]:
        """The messages batch by batch as ``_codec.decode.ColumnPart``s (``Columns.from_parts``
        joins them), checked as iterating is (``_codec.decode.iter_column_parts``)."""
        try:
            yield from _decode.iter_column_parts(self._data, self._start, self._end, self._min,
                                               self._max, expect=self._expect,
                                               max_uncompressed=self._max_uncompressed)
        except CorruptRecordError as e:
            pos = self._pos(e.position) if e.position is not None else None
            raise e.at(self._path, pos, e.offset) from None

    def to_arrow(self, *, views: bool = False) -> Any:
        """The messages as a ``pyarrow.RecordBatch`` (``ARROW_FIELDS``), built with
        numpy from the batches' bytes: no Python object per message unless batches
        have headers. Key and value columns are ``binary`` (the values copied once,
        in C), or with ``views=True`` ``binary_view`` arrays pointing into this set's
        buffer, which they keep alive (not every pyarrow kernel takes view types).
        Checks every batch as iterating does (``CorruptRecordError``). Needs pyarrow
        and numpy (the ``spark`` extra)."""
        return self.arrow_columns(views=views).to_arrow()

    def arrow_columns(self, *, views: bool = False) -> ArrowColumns:
        """The messages as pyarrow arrays (``ArrowColumns``: offsets, timestamps in
        ms, keys, values, and headers as a list or None): what ``to_arrow`` and the
        Spark source build their batches from. Checks as ``to_arrow`` does."""
        data, start, end = self._data, self._start, self._end
        if type(data) is not bytes:
            # the arrays keep the buffer alive: it must be one that never changes
            data, start, end = bytes(data[start:end]), 0, end - start
        try:
            cols, _ = arrow_columns(data, start, end, self._min, self._max,
                                    expect=self._expect, views=views,
                                    max_uncompressed=self._max_uncompressed)
        except CorruptRecordError as e:
            pos = None if e.position is None else self._pos(e.position - start + self._start)
            raise e.at(self._path, pos, e.offset) from None
        return cols

    def values(self) -> list[bytes | None]:
        """The values of all messages, as bytes (None for tombstones)."""
        return list(map(itemgetter(3), self))

    def validate(self) -> None:
        """Check framing and checksum of every batch; raise CorruptRecordError."""
        for pos, hdr in self._headers():
            if not _format.checksum_ok(self._data, pos, hdr):
                raise CorruptRecordError("checksum mismatch", self._path, self._pos(pos),
                                         _format.as_header(hdr).base_offset)
            for _ in _decode.decode_batch(self._data, pos, hdr,
                                        max_uncompressed=self._max_uncompressed):
                pass

    def buffer(self) -> memoryview:
        """A read-only view of the raw batch bytes (no copy)."""
        return memoryview(self._data)[self._start:self._end].toreadonly()

    def write_to(self, dest: int | HasFileno) -> int:
        """Send the raw batch bytes to a file descriptor, socket or file object.

        Uses ``os.sendfile`` from the segment file when the set is file-backed
        (zero-copy); otherwise writes the in-memory bytes. Returns bytes sent.
        """
        out = dest if isinstance(dest, int) else dest.fileno()
        total = self._end - self._start
        sent = 0
        if self._file is not None and self._file_pos is not None:
            try:
                while sent < total:
                    n = self._file.sendfile(out, self._file_pos + sent, total - sent)
                    if n == 0:
                        break
                    sent += n
                if sent == total:
                    return sent
            except (OSError, SeglogError):
                # not a file sendfile can send to, or the segment was retired since:
                # the bytes are in memory
                if sent:
                    raise
        with memoryview(self._data) as mv:
            view = mv[self._start + sent:self._end]
            while view:
                n = os.write(out, view)
                view = view[n:]
                sent += n
        return sent

    def __repr__(self) -> str:
        return f"<MessageSet {self.size_in_bytes} bytes from offset {self._min}>"

    def _repr_html_(self) -> str:
        ms = list(self)
        what = (f"offsets {_html.offsets(ms[0][0], ms[-1][0] + 1)}, "
                f"{_html.num(len(ms))} message(s)" if ms else "no messages")
        return messages_html(f"MessageSet: {what} in {_html.size(self.size_in_bytes)} of "
                             f"whole batches", iter(ms))


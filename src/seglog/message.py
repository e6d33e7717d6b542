"""Records going in (``Record``), messages coming out (``Message``) and ``MessageSet``."""

from __future__ import annotations

import os
import socket
from itertools import chain
from operator import itemgetter
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

from . import codec
from .errors import CorruptRecordError, SeglogError

Headers = Sequence[tuple[str, bytes]]


class Record(NamedTuple):
    """One record to append. ``value=None`` with a key is a tombstone."""

    value: bytes | None
    key: bytes | None = None
    timestamp: int | None = None
    headers: Headers = ()


try:
    # the C descriptor namedtuple fields use: about twice as fast as property(itemgetter)
    from _collections import _tuplegetter
except ImportError:  # another Python implementation
    def _tuplegetter(index: int, doc: str) -> Any:  # type: ignore[misc]
        return property(itemgetter(index), doc=doc)


class Message(tuple):
    """A message read from a log: ``offset, timestamp, key, value, headers``.

    A tuple (so it unpacks and compares like one) with named fields. Built from one
    5-tuple: ``Message((offset, timestamp, key, value, headers))``; the single
    argument keeps construction a C-level call on the read path.
    """

    __slots__ = ()
    offset: int = _tuplegetter(0, "Logical offset.")
    timestamp: int = _tuplegetter(1, "Milliseconds since the epoch.")
    key: bytes | None = _tuplegetter(2, "Key bytes or None.")
    value: bytes | None = _tuplegetter(3, "Value bytes; None is a tombstone.")
    headers: tuple[tuple[str, bytes], ...] = _tuplegetter(4, "(str, bytes) pairs.")

    def __repr__(self) -> str:
        return (f"Message(offset={self[0]}, timestamp={self[1]}, key={self[2]!r}, "
                f"value={_short(self[3])}, headers={self[4]!r})")


def _short(b: bytes | None, n: int = 40) -> str:
    if b is None or len(b) <= n:
        return repr(b)
    return f"{bytes(b[:n])!r}... ({len(b)} bytes)"


class MessageSet:
    """Whole batches as read from a segment: a zero-copy view until iterated.

    Iterating yields the ``Message`` objects with ``offset >= `` the offset asked
    for (the first batch may start earlier; its earlier records are skipped).
    ``write_to`` sends the raw batch bytes, zero-copy with ``os.sendfile`` when the
    set is backed by a file. Every batch's CRC is checked as it is iterated;
    a mismatch raises ``CorruptRecordError``.
    """

    __slots__ = ("_data", "_start", "_end", "_min", "_max", "_file", "_file_pos", "_path",
                 "_max_uncompressed", "_next", "_expect", "_last_next", "__weakref__")

    def __init__(self, data: bytes, start: int = 0, end: int | None = None, *,
                 min_offset: int = 0, max_offset: int | None = None,
                 next_offset: int | None = None, file: Any = None,
                 file_position: int | None = None, path: str | None = None,
                 max_uncompressed: int = codec.DEFAULT_MAX_UNCOMPRESSED,
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
        from .log import _prepare  # the same validation as Log.append_batch
        import time
        now = time.time_ns() // 1_000_000 if timestamp is None else timestamp
        values, keys, stamps, headers = _prepare(list(records), now, None)
        if not values:
            return cls(b"", next_offset=base_offset, min_offset=base_offset)
        data = codec.encode_batch(base_offset, values, stamps, keys, headers,
                                  codec.CODEC_LZ4 if compression == "lz4" else codec.CODEC_NONE)
        return cls(data, min_offset=base_offset)

    def _headers(self) -> Iterator[tuple[int, codec.BatchHeader]]:
        data, pos, end = self._data, self._start, self._end
        while pos < end:
            try:
                hdr = codec.read_header(data, pos, end)
            except CorruptRecordError as e:
                raise e.at(self._path, self._pos(pos)) from None
            if hdr is None:
                raise CorruptRecordError("partial batch in message set", self._path, pos)
            yield pos, hdr
            pos += codec.LENGTH_END + hdr[1]

    def _batch_iters(self) -> Iterator[Iterator[Message]]:
        try:
            yield from codec.iter_batches(self._data, self._start, self._end, self._min, self._max,
                                          self._max_uncompressed, Message, self._expect)
        except CorruptRecordError as e:
            pos = self._pos(e.position) if e.position is not None else None
            raise e.at(self._path, pos, e.offset) from None

    def _pos(self, pos: int) -> int:
        return pos - self._start + (self._file_pos or 0)

    def __iter__(self) -> Iterator[Message]:
        return chain.from_iterable(self._batch_iters())

    def __len__(self) -> int:
        n = 0
        for pos, hdr in self._headers():
            base, last = hdr[0], codec.last_offset(hdr)
            lo = self._min
            hi = last + 1 if self._max is None else min(last + 1, self._max)
            if hdr[4] & codec.F_OFFSETS or (lo > base and hi <= last):
                if hi > lo and last >= lo:
                    n += sum(1 for _ in codec.decode_batch(
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
        nxt = codec.last_offset(last) + 1
        return nxt if self._max is None else min(nxt, self._max)

    def values(self) -> list[bytes | None]:
        """The values of all messages, as bytes (None for tombstones)."""
        return list(map(itemgetter(3), self))

    def validate(self) -> None:
        """Check framing and CRC of every batch; raise CorruptRecordError."""
        for pos, hdr in self._headers():
            if not codec.check_crc(self._data, pos, hdr):
                raise CorruptRecordError("CRC mismatch", self._path, self._pos(pos), hdr[0])
            for _ in codec.decode_batch(self._data, pos, hdr,
                                        max_uncompressed=self._max_uncompressed):
                pass

    def buffer(self) -> memoryview:
        """A read-only view of the raw batch bytes (no copy)."""
        return memoryview(self._data)[self._start:self._end].toreadonly()

    def write_to(self, dest: int | socket.socket | Any) -> int:
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
                    n = self._file._sendfile(out, self._file_pos + sent, total - sent)
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

"""Records going in (``Record``), messages coming out (``Message``) and ``MessageSet``."""

from __future__ import annotations

import os
import socket
from array import array
from itertools import chain, repeat
from operator import itemgetter, mul
from struct import Struct
from typing import TYPE_CHECKING, Any, Iterable, Iterator, NamedTuple, Sequence, cast

from . import _html, codec
from .errors import CorruptRecordError, MessageTooLargeError, SeglogError

Headers = Sequence[tuple[str, bytes]]


class Record(NamedTuple):
    """One record to append. ``value=None`` with a key is a tombstone."""

    value: bytes | None
    key: bytes | None = None
    timestamp: int | None = None
    headers: Headers = ()


if TYPE_CHECKING:
    # _collections has no stub; to mypy a field is typed by its annotation below
    def field_getter(index: int, doc: str) -> Any: ...
    # Message is a tuple of these types (at run time a plain tuple subclass)
    _MessageBase = codec.MessageTuple
else:
    try:
        # the C descriptor namedtuple fields use: about twice as fast as property(itemgetter)
        from _collections import _tuplegetter as field_getter
    except ImportError:  # another Python implementation
        def field_getter(index: int, doc: str) -> Any:
            return property(itemgetter(index), doc=doc)
    _MessageBase = tuple


class Message(_MessageBase):
    """A message read from a log: ``offset, timestamp, key, value, headers``.

    A tuple (so it unpacks and compares like one) with named fields. Built from one
    5-tuple: ``Message((offset, timestamp, key, value, headers))``; the single
    argument keeps construction a C-level call on the read path.
    """

    __slots__ = ()
    _fields = ("offset", "timestamp", "key", "value", "headers")
    offset: int = field_getter(0, "Logical offset.")
    timestamp: int = field_getter(1, "Milliseconds since the epoch.")
    key: bytes | None = field_getter(2, "Key bytes or None.")
    value: bytes | None = field_getter(3, "Value bytes; None is a tombstone.")
    headers: tuple[tuple[str, bytes], ...] = field_getter(4, "(str, bytes) pairs.")

    def _asdict(self) -> dict[str, Any]:
        """The fields by name (as a namedtuple's ``_asdict``; pandas builds columns
        from ``_fields``)."""
        return dict(zip(self._fields, self))

    def __repr__(self) -> str:
        return (f"Message(offset={self[0]}, timestamp={self[1]}, key={self[2]!r}, "
                f"value={short_repr(self[3])}, headers={self[4]!r})")


class Columns(NamedTuple):
    """Messages as columns (``MessageSet.columns()``); index ``i`` of every column
    is one message.

    ``offsets`` is a ``range`` when the offsets are contiguous, else an
    ``array('q')``; ``timestamps`` an ``array('q')`` of milliseconds. Message ``i``'s
    value is ``values[s:s + value_lengths[i]]`` with ``s`` the sum of the lengths
    before it; a null value (tombstone) has length 0 and its index in
    ``value_nulls``. Keys likewise, or ``None`` when no message has a key.
    ``headers`` is a list of per-message tuples, or ``None`` when none has headers.
    """

    offsets: Sequence[int]
    timestamps: "array[int]"
    value_lengths: "array[int]"
    values: bytes
    value_nulls: list[int]
    key_lengths: "array[int] | None"
    keys: bytes | None
    key_nulls: list[int]
    headers: list[tuple[tuple[str, bytes], ...]] | None

    @classmethod
    def _join(cls, parts: list[codec.ColumnPart]) -> "Columns":
        # whole-buffer operations (join, bytes * n, frombytes) over the batches; a
        # Python step per message only for nulls, per-record timestamps, keys in
        # some batches but not others, and headers
        if not parts:
            return cls(range(0), array("q"), array("H"), b"", [], None, None, [], None)
        (offs, base_ts, stamps_, vlens_, values_, vnulls_, klens_, keys_, knulls_,
         headers_, _) = zip(*parts)
        counts = list(map(len, offs))
        total = sum(counts)
        nonempty = [o for o in offs if len(o)]
        offsets: Sequence[int]
        if not nonempty:
            offsets = range(0)
        elif all(type(o) is range for o in nonempty) and \
                nonempty[-1][-1] - nonempty[0][0] + 1 == total:
            offsets = range(nonempty[0][0], nonempty[-1][-1] + 1)    # no gaps
        else:
            offsets = array("q")
            for o in offs:
                offsets.extend(o)
        stamps = array("q")
        if stamps_.count(None) == len(parts):
            stamps.frombytes(b"".join(map(mul, map(_Q.pack, base_ts), counts)))
        else:
            for ts, every, n in zip(stamps_, base_ts, counts):
                stamps.extend(ts if ts is not None else repeat(every, n))
        vlens = _concat(vlens_)
        values = b"".join(values_)
        vnulls = _shifted(vnulls_, counts)
        keys = klens = None
        knulls: list[int] = []
        if klens_.count(None) != len(parts):
            kl, kb, kn = list(klens_), list(keys_), list(knulls_)
            for i, n in enumerate(counts):
                if kl[i] is None:                       # a batch without keys: all null
                    kl[i], kb[i], kn[i] = array("H", bytes(2 * n)), b"", list(range(n))
            klens = _concat(kl)
            keys = b"".join(kb)
            knulls = _shifted(kn, counts)
        headers: list[tuple[tuple[str, bytes], ...]] | None = None
        if headers_.count(None) != len(parts):
            headers = []
            for h, n in zip(headers_, counts):
                headers += h if h is not None else [()] * n
        return cls(offsets, stamps, vlens, values, vnulls, klens, keys, knulls, headers)

    def to_arrow(self) -> Any:
        """A ``pyarrow.RecordBatch`` with the fields of ``ARROW_FIELDS``; the
        timestamps, lengths and values become Arrow buffers without a copy per
        message. Needs pyarrow and numpy (the ``spark`` extra)."""
        pa, np = arrow_modules()
        n = len(self.offsets)
        offsets, ms, keys, values = self.arrow_arrays()
        stamps = ms.view(pa.timestamp("ms", tz="UTC"))
        if self.headers is None:
            headers = pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)),
                                               pa.array([], type=_HEADER_TYPE(pa)))
        else:
            headers = pa.array([[{"key": k, "value": v} for k, v in h] for h in self.headers],
                               type=pa.list_(_HEADER_TYPE(pa)))
        large = values.type == pa.large_binary()
        if large and keys.type != pa.large_binary():
            keys = keys.cast(pa.large_binary())
        return pa.RecordBatch.from_arrays([offsets, stamps, keys, values, headers],
                                          schema=arrow_schema(large))

    def arrow_arrays(self) -> tuple[Any, Any, Any, Any]:
        """pyarrow arrays of the offsets (int64), timestamps (int64 milliseconds),
        keys and values (binary, null where None), over the columns' buffers: the
        one conversion ``to_arrow`` and the Spark source build their batches from."""
        pa, np = arrow_modules()
        n = len(self.offsets)
        o = self.offsets
        if type(o) is range:
            offsets = pa.array(np.arange(o.start, o.stop, dtype=np.int64))
        else:
            offsets = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(o)])
        ms = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self.timestamps)])
        values = _binary(pa, np, self.value_lengths, self.values, self.value_nulls)
        if self.key_lengths is None or self.keys is None:
            keys = pa.nulls(n, pa.binary())
        else:
            keys = _binary(pa, np, self.key_lengths, self.keys, self.key_nulls)
        return offsets, ms, keys, values


ARROW_FIELDS = ("offset", "timestamp", "key", "value", "headers")


def arrow_modules() -> tuple[Any, Any]:
    try:
        import numpy
        import pyarrow
    except ImportError as e:
        raise ImportError(f"Arrow reads need pyarrow and numpy: pip install 'seglog[spark]' "
                          f"({e})") from e
    return pyarrow, numpy


def _HEADER_TYPE(pa: Any) -> Any:
    return pa.struct([pa.field("key", pa.string(), nullable=False),
                      pa.field("value", pa.binary(), nullable=False)])


def arrow_schema(large: bool = False) -> Any:
    """The ``pyarrow.Schema`` of ``to_arrow()``: offset int64, timestamp
    timestamp[ms, UTC], key binary (null: no key), value binary (null: tombstone),
    headers list<struct<key: string, value: binary>>. Binary columns are
    ``large_binary`` (``large=True``) in a batch whose values pass 2 GiB in total."""
    pa, _ = arrow_modules()
    binary = pa.large_binary() if large else pa.binary()
    return pa.schema([pa.field("offset", pa.int64(), nullable=False),
                      pa.field("timestamp", pa.timestamp("ms", tz="UTC"), nullable=False),
                      pa.field("key", binary),
                      pa.field("value", binary),
                      pa.field("headers", pa.list_(_HEADER_TYPE(pa)), nullable=False)])


def _binary(pa: Any, np: Any, lengths: "array[int]", data: bytes, nulls: list[int]) -> Any:
    """An Arrow binary array from lengths and the bytes back to back: the offsets are
    one numpy cumulative sum, the data buffer is ``data`` itself."""
    n = len(lengths)
    ends = np.frombuffer(lengths, dtype=np.uint32 if lengths.typecode == "I" else np.uint16)
    large = len(data) >= 1 << 31
    offsets = np.zeros(n + 1, dtype=np.int64 if large else np.int32)
    np.cumsum(ends, out=offsets[1:])
    validity = None
    if nulls:
        mask = np.ones(n, dtype=bool)
        mask[nulls] = False
        validity = pa.array(mask).buffers()[1]
    return pa.Array.from_buffers(pa.large_binary() if large else pa.binary(), n,
                                 [validity, pa.py_buffer(offsets),
                                                  pa.py_buffer(data)], null_count=len(nulls))


_Q = Struct("=q")


def _concat(arrays: Sequence["array[int] | None"]) -> "array[int]":
    """Lengths arrays end to end; all 'H' (the common case) is one join."""
    arrs = cast("Sequence[array[int]]", arrays)
    if all(a.typecode == "H" for a in arrs):
        out = array("H")
        out.frombytes(b"".join(arrs))
        return out
    out = array("I")
    for a in arrs:
        out += a if a.typecode == "I" else array("I", a)
    return out


def _shifted(nulls: Sequence[list[int] | None], counts: list[int]) -> list[int]:
    """Per-batch null indices as indices into the joined columns."""
    out: list[int] = []
    n = 0
    for ns, c in zip(nulls, counts):
        if ns:
            out += [i + n for i in ns]
        n += c
    return out


def short_repr(b: bytes | None, n: int = 40) -> str:
    if b is None or len(b) <= n:
        return repr(b)
    return f"{bytes(b[:n])!r}... ({len(b)} bytes)"


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
        import time
        now = time.time_ns() // 1_000_000 if timestamp is None else timestamp
        values, keys, stamps, headers = prepare_batch(list(records), now, None)
        if not values:
            return cls(b"", next_offset=base_offset, min_offset=base_offset)
        data = codec.encode_batch(base_offset, values, stamps, keys, headers,
                                  codec.CODEC_LZ4 if compression == "lz4" else codec.CODEC_NONE)
        return cls(data, min_offset=base_offset)

    def _headers(self) -> Iterator[tuple[int, codec.BatchHeader]]:
        pos, end = self._start, self._end
        try:
            for pos, hdr in codec.batches_in(self._data, pos, end):
                yield pos, hdr
                pos += codec.LENGTH_END + hdr[codec.H_LENGTH]
        except CorruptRecordError as e:
            raise e.at(self._path, self._pos(e.position or 0)) from None
        if pos < end:
            raise CorruptRecordError("partial batch in message set", self._path, self._pos(pos))

    def _batch_iters(self, message_type: Any = Message,
                     lead: tuple[Any, ...] = ()) -> Iterator[Iterable[Any]]:
        try:
            yield from codec.iter_batches(self._data, self._start, self._end, self._min, self._max,
                                          self._max_uncompressed, message_type, self._expect,
                                          lead=lead)
        except CorruptRecordError as e:
            pos = self._pos(e.position) if e.position is not None else None
            raise e.at(self._path, pos, e.offset) from None

    def _pos(self, pos: int) -> int:
        return pos - self._start + (self._file_pos or 0)

    def __iter__(self) -> Iterator[Message]:
        return chain.from_iterable(self._batch_iters())

    def iter_as(self, message_type: Any, lead: tuple[Any, ...]) -> Iterator[Any]:
        # the consumer's messages: ``message_type((*lead, offset, ..., headers))``
        return chain.from_iterable(self._batch_iters(message_type, lead))

    def __len__(self) -> int:
        n = 0
        for pos, hdr in self._headers():
            base, last = hdr[codec.H_BASE], codec.last_offset(hdr)
            lo = self._min
            hi = last + 1 if self._max is None else min(last + 1, self._max)
            if hdr[codec.H_ATTRS] & codec.F_OFFSETS or (lo > base and hi <= last):
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

    def columns(self) -> "Columns":
        """The messages as columns, with no Python object per message where the
        batches allow it (no keys, headers or per-record timestamps): offsets as a
        ``range`` when they are contiguous, timestamps and lengths as ``array``s,
        the values back to back in one ``bytes``. Checks every batch as iterating
        does (``CorruptRecordError``)."""

        return Columns._join(list(self._column_parts()))

    def _column_parts(self) -> Iterator[codec.ColumnPart]:
        try:
            yield from codec.iter_column_parts(self._data, self._start, self._end, self._min,
                                               self._max, self._max_uncompressed, self._expect)
        except CorruptRecordError as e:
            pos = self._pos(e.position) if e.position is not None else None
            raise e.at(self._path, pos, e.offset) from None

    def to_arrow(self) -> Any:
        """The messages as a ``pyarrow.RecordBatch`` (``ARROW_FIELDS``), built from
        ``columns()``'s buffers. Needs pyarrow and numpy (the ``spark`` extra)."""
        return self.columns().to_arrow()

    def values(self) -> list[bytes | None]:
        """The values of all messages, as bytes (None for tombstones)."""
        return list(map(itemgetter(3), self))

    def validate(self) -> None:
        """Check framing and checksum of every batch; raise CorruptRecordError."""
        for pos, hdr in self._headers():
            if not codec.checksum_ok(self._data, pos, hdr):
                raise CorruptRecordError("checksum mismatch", self._path, self._pos(pos),
                                         hdr[codec.H_BASE])
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
        return messages_html(f"MessageSet: {_html.size(self.size_in_bytes)} of whole batches",
                             iter(self))


def messages_html(title: str, messages: Iterator[codec.MessageTuple],
                  limit: int = 20) -> str:
    """A table of up to ``limit`` messages, values previewed safely."""
    rows: list[tuple[Any, ...]] = []
    more = False
    for m in messages:
        if len(rows) == limit:
            more = True
            break
        rows.append((m[0], _html.when(m[1]), _html.preview(m[2]), _html.preview(m[3]),
                     len(m[4])))
    return _html.grid(title, ("offset", "timestamp", "key", "value", "headers"), rows,
                      f"first {limit} messages shown" if more else "")


# -- input validation: every check before anything is written ---------------------
_MAX_TS = (1 << 63) - 1
HEADER_FRAMING = 8       # a header's key and value lengths


def as_ms(t: object, what: str = "time") -> int:
    """Milliseconds since the epoch from an int (ms), a ``datetime`` (naive means
    UTC) or an ISO 8601 string (``"2026-11-23T10:00:00Z"``)."""
    import datetime as dt
    if isinstance(t, str):
        try:
            t = dt.datetime.fromisoformat(t.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{what}: not an ISO 8601 time: {t!r}") from None
    if isinstance(t, dt.datetime):
        if t.tzinfo is None:
            t = t.replace(tzinfo=dt.timezone.utc)
        return check_timestamp(round(t.timestamp() * 1000))
    if isinstance(t, int) and not isinstance(t, bool):
        return check_timestamp(t)
    raise TypeError(f"{what} must be a datetime, an ISO 8601 string or int milliseconds, "
                    f"not {type(t).__name__}")


def check_timestamp(ts: object) -> int:
    if type(ts) is not int:
        if isinstance(ts, bool) or not isinstance(ts, int):
            raise TypeError(f"timestamp must be an int (ms since the epoch), not {type(ts).__name__}")
        ts = int(ts)
    if not 0 <= ts <= _MAX_TS:
        raise ValueError(f"timestamp must be in [0, 2**63), not {ts}")
    return ts


def _as_bytes(x: Any, what: str) -> bytes | None:
    """bytes, or the raw bytes of any buffer (bytearray, memoryview, array, ctypes):
    its byte size counts, never its ``len()``, which counts items."""
    if x is None or type(x) is bytes:
        return x
    if not isinstance(x, str):
        try:
            with memoryview(x) as view:
                return view.tobytes()
        except TypeError:
            pass
    raise TypeError(f"{what} must be bytes-like or None, not {type(x).__name__}")


def _check_headers(headers: Any) -> tuple[tuple[bytes, bytes], ...]:
    """Validate (str, bytes) pairs; keys come back utf-8 encoded."""
    if not headers:
        if headers is None or isinstance(headers, (tuple, list)):
            return ()
    if isinstance(headers, (str, bytes, dict)) or not isinstance(headers, Iterable):
        raise TypeError("headers must be a sequence of (str, bytes) pairs")
    out = []
    for pair in headers:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError("each header must be a (str, bytes) pair")
        k, v = pair
        if not isinstance(k, str):
            raise TypeError(f"header key must be str, not {type(k).__name__}")
        # encodable: a lone surrogate would fail later, after validation
        k.encode("utf-8")
        v = _as_bytes(v, "header value")
        if v is None:
            raise TypeError("header value must be bytes-like, not None")
        out.append((k.encode("utf-8"), v))
    if len(out) > 0xFFFF:
        raise ValueError("at most 65535 headers per record")
    return tuple(out)


# (values, keys or None, timestamps (one int if all equal), headers or None)
PreparedBatch = tuple[list[bytes | None], list[bytes | None] | None, int | list[int],
                      list[tuple[tuple[bytes, bytes], ...]] | None]


def prepare_batch(items: Sequence[Any], now: int, max_bytes: int | None) -> PreparedBatch:
    """Validate ``Log.append_batch`` input (``MessageSet.from_records`` too): (values,
    keys or None, timestamps (one int if all equal), headers or None).

    Raises TypeError/ValueError/MessageTooLargeError before anything is written.
    """
    if set(map(type, items)) <= {bytes}:
        values: list[bytes | None] = list(items)
        if (max_bytes is not None and values
                and max(map(len, cast("list[bytes]", values))) > max_bytes):  # all bytes
            size = max(map(len, cast("list[bytes]", values)))
            raise MessageTooLargeError(f"record of {size} bytes exceeds max_message_bytes={max_bytes}")
        return values, None, now, None
    if items and set(map(type, items)) == {Record}:
        fast = _prepare_records(items, now, max_bytes)
        if fast is not None:
            return fast
    values = []
    keys: list[bytes | None] = []
    stamps: list[int] = []
    headers: list[tuple[tuple[bytes, bytes], ...]] = []
    for item in items:
        if isinstance(item, Record):
            v, k, t, h = item
            v = _as_bytes(v, "value")
            k = _as_bytes(k, "key")
            t = now if t is None else check_timestamp(t)
            hs = _check_headers(h)
        elif item is None:
            v, k, t, hs = None, None, now, ()     # a null value, as append(None)
        else:
            try:
                v = _as_bytes(item, "item")
            except TypeError:
                raise TypeError(f"append_batch items must be bytes-like, None or Record, "
                                f"not {type(item).__name__}") from None
            k, t, hs = None, now, ()
        if max_bytes is not None:
            # a header's framing (two lengths) counts: it takes room in the batch too
            size = ((len(v) if v else 0) + (len(k) if k else 0)
                    + sum(len(a) + len(b) + HEADER_FRAMING for a, b in hs))
            if size > max_bytes:
                raise MessageTooLargeError(
                    f"record of {size} bytes exceeds max_message_bytes={max_bytes}")
        values.append(v)
        keys.append(k)
        stamps.append(t)
        headers.append(hs)
    return (values, keys if keys.count(None) != len(keys) else None,
            stamps if stamps.count(stamps[0]) != len(stamps) else (stamps[0] if stamps else now),
            headers if any(headers) else None)


_PLAIN = {bytes, type(None)}


def _prepare_records(items: Sequence[Record], now: int, max_bytes: int | None
                     ) -> PreparedBatch | None:
    """Column-wise validation of Records with C-level calls; None if a slow check is needed."""
    vals, ks, ts, hs = zip(*items)
    if not (set(map(type, vals)) <= _PLAIN and set(map(type, ks)) <= _PLAIN
            and set(map(type, ts)) <= {int, type(None)}) or any(hs):
        return None
    stamps = [now if t is None else t for t in ts] if None in ts else list(ts)
    if min(stamps) < 0 or max(stamps) > _MAX_TS:
        return None
    if max_bytes is not None:
        vsize = [len(v) if v is not None else 0 for v in vals] if None in vals else list(map(len, vals))
        if ks.count(None) != len(ks):
            vsize = [a + (len(k) if k is not None else 0) for a, k in zip(vsize, ks)]
        if max(vsize) > max_bytes:
            return None
    keys = list(ks) if ks.count(None) != len(ks) else None
    first = stamps[0]
    return (list(vals), keys, stamps if stamps.count(first) != len(stamps) else first, None)

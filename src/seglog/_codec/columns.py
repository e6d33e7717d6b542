"""Messages as columns (``Columns``: arrays and buffers, joined from the read
path's ``_codec.decode.ColumnPart``s) and their conversion to Arrow (pyarrow and numpy are
imported only there, by ``arrow_modules``)."""

from __future__ import annotations

from array import array
from itertools import repeat
from operator import mul
from struct import Struct
# Any: pyarrow and numpy modules and arrays: they ship no type information
from typing import Any, NamedTuple, Sequence, cast

from . import decode as _decode


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
    def from_parts(cls, parts: list[_decode.ColumnPart]) -> "Columns":
        """The columns of the batches whose parts ``parts`` are, in order (what
        ``_codec.decode.iter_column_parts`` and ``MessageSet.column_parts`` yield)."""
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
        return record_batch(*self.arrow_arrays(), self.headers)

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


def record_batch(offsets: Any, ms: Any, keys: Any, values: Any,
                 headers: list[tuple[tuple[str, bytes], ...]] | None) -> Any:
    """The ``pyarrow.RecordBatch`` of ``arrow_schema()`` from the int64 offsets and
    millisecond timestamps, the key and value arrays and per-message headers (None:
    no message has any); a view of the arrays, not a copy."""
    pa, np = arrow_modules()
    n = len(offsets)
    stamps = ms.view(pa.timestamp("ms", tz="UTC"))
    if headers is None:
        hdrs = pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)),
                                        pa.array([], type=_HEADER_TYPE(pa)))
    else:
        hdrs = pa.array([[{"key": k, "value": v} for k, v in h] for h in headers],
                        type=pa.list_(_HEADER_TYPE(pa)))
    large = pa.large_binary() in (keys.type, values.type)
    views = values.type == pa.binary_view()
    kind = pa.large_binary() if large else pa.binary_view() if views else pa.binary()
    keys, values = (a if a.type == kind else a.cast(kind) for a in (keys, values))
    return pa.RecordBatch.from_arrays([offsets, stamps, keys, values, hdrs],
                                      schema=arrow_schema(large, views=views))


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


def arrow_schema(large: bool = False, *, views: bool = False) -> Any:
    """The ``pyarrow.Schema`` of ``to_arrow()``: offset int64, timestamp
    timestamp[ms, UTC], key binary (null: no key), value binary (null: tombstone),
    headers list<struct<key: string, value: binary>>. Binary columns are
    ``large_binary`` (``large=True``) in a batch whose values pass 2 GiB in total,
    ``binary_view`` with ``views=True`` (``to_arrow(views=True)``)."""
    pa, _ = arrow_modules()
    binary = pa.large_binary() if large else pa.binary_view() if views else pa.binary()
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


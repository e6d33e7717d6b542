"""Records going in (``Record``, validated by ``prepare_batch``) and messages coming
out (``Message``). ``seglog.message`` is the face of this module, ``_codec.columns`` and
``_codec.messageset``."""

from __future__ import annotations

from operator import itemgetter
# Any: user values checked at run time: what append takes
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, NamedTuple, Sequence, cast

from . import format as _format
from .._views import html as _html
from ..errors import MessageTooLargeError

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
    _MessageBase = _format.MessageTuple
else:
    try:
        # the C descriptor namedtuple fields use: about twice as fast as property(itemgetter)
        from _collections import _tuplegetter as field_getter
    except ImportError:  # another Python implementation
        def field_getter(index: int, doc: str) -> Any:
            return property(itemgetter(index), doc=doc)
    _MessageBase = tuple


class _MessageType(type):
    """``Message(offset, timestamp, key, value, headers=())`` by its fields. A
    metaclass's ``__call__`` rather than ``Message.__new__``: the read path builds a
    Message per message from one 5-tuple with ``make_message``, the C-level call of
    ``tuple``'s own constructor, which a Python ``__new__`` would replace."""

    def __call__(cls, offset: int, timestamp: int, key: bytes | None, value: bytes | None,
                 headers: Headers = ()) -> Any:
        return type.__call__(cls, (offset, timestamp, key, value, tuple(headers)))


class Message(_MessageBase, metaclass=_MessageType):
    """A message read from a log: ``offset, timestamp, key, value, headers``.

    A tuple (so it unpacks and compares like one) with named fields, as a
    ``namedtuple`` is; made by its fields, by position or keyword:
    ``Message(offset, timestamp, key, value, headers=())`` (``headers`` kept as a
    tuple of ``(str, bytes)`` pairs).
    """

    __slots__ = ()
    _fields = ("offset", "timestamp", "key", "value", "headers")
    if TYPE_CHECKING:
        def __new__(cls, offset: int, timestamp: int, key: bytes | None,
                    value: bytes | None, headers: Headers = ()) -> "Message": ...
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



# a Message from one (offset, timestamp, key, value, headers) tuple: ``tuple``'s
# constructor called in C (``type.__call__`` bound to Message skips its metaclass's
# Python ``__call__``), as fast as calling a plain tuple subclass; the read path's
make_message: Callable[[_format.MessageTuple], Message] = type.__call__.__get__(Message)


def short_repr(b: bytes | None, n: int = 40) -> str:
    if b is None or len(b) <= n:
        return repr(b)
    return f"{bytes(b[:n])!r}... ({len(b)} bytes)"

def messages_html(title: str, messages: Iterator[_format.MessageTuple],
                  limit: int = 20) -> str:
    """A table of up to ``limit`` messages, values shown safely (``_views.html.messages``)."""
    return _html.messages(title, messages, limit)


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

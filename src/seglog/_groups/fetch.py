"""What a ``Consumer`` reads from the partitions it owns (docs/GROUPS.md,
"Fetching"): ``ConsumerMessage``, and the ``Fetcher`` that reads whole batches at
the positions it is given, in turn, keeps the read-ahead, applies the
deserializers, and returns where each position moves (the ``Assignment``, which
owns the positions, applies the moves). It reports what it cannot decide alone: a
position outside its log, a log whose directory is gone.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Callable, Iterator, NamedTuple

from .assignors import TP
from ..errors import LogClosedError, OffsetOutOfRangeError
from ..log import Log
from .._codec.records import field_getter, short_repr
from ..message import Headers, Message

FETCH_BYTES = 1 << 18     # one read per partition; what a poll leaves waits for the next
Deserializer = Callable[[bytes], Any]

if TYPE_CHECKING:
    _ConsumerMessageBase = tuple[str, int, int, int, Any, Any, Headers]
else:
    _ConsumerMessageBase = tuple


class ConsumerMessage(_ConsumerMessageBase):
    """One message as a consumer sees it:
    ``topic, partition, offset, timestamp, key, value, headers``.

    A tuple with named fields, like ``Message``; built from one 7-tuple so that the
    consume path makes it with C-level calls only. ``key`` and ``value`` are bytes
    (or None), or what the consumer's deserializers made of them.
    """

    __slots__ = ()
    __module__ = "seglog.consumer_group"       # where users import it from (and pickles)
    _fields = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")
    topic: str = field_getter(0, "Topic name.")
    partition: int = field_getter(1, "Partition number.")
    offset: int = field_getter(2, "Logical offset in the partition.")
    timestamp: int = field_getter(3, "Milliseconds since the epoch.")
    key: Any = field_getter(4, "Key bytes or None (deserialized with a key_deserializer).")
    value: Any = field_getter(5, "Value bytes; None is a tombstone (deserialized with a "
                                 "value_deserializer).")
    headers: Headers = field_getter(6, "(str, bytes) pairs.")

    _asdict = Message._asdict        # one definition: it reads ``_fields``

    def __repr__(self) -> str:
        return (f"ConsumerMessage(topic={self[0]!r}, partition={self[1]}, offset={self[2]}, "
                f"timestamp={self[3]}, key={self[4]!r}, value={short_repr(self[5])}, "
                f"headers={self[6]!r})")


class _Undeserializable(Exception):
    """A deserializer raised ``error`` on the message at ``offset``."""

    def __init__(self, offset: int, error: Exception) -> None:
        super().__init__(offset)
        self.offset = offset
        self.error = error


def _deserialize(out: list[ConsumerMessage], start: int, kd: Deserializer | None,
                 vd: Deserializer | None) -> None:
    """Apply the deserializers to ``out[start:]`` in place (None is never given to
    them). On a failure, ``out`` ends before the message that failed."""
    for i in range(start, len(out)):
        m = out[i]
        try:
            k = m[4] if kd is None or m[4] is None else kd(m[4])
            v = m[5] if vd is None or m[5] is None else vd(m[5])
        except Exception as e:
            del out[i:]
            e.add_note(f"seglog: deserializing {m[0]}-{m[1]} offset {m[2]}: the position "
                       f"stays there (seek past it to skip it)")
            raise _Undeserializable(m[2], e) from None
        out[i] = ConsumerMessage((m[0], m[1], m[2], m[3], k, v, m[6]))


class Fetched(NamedTuple):
    """What one fetch found: the ``messages`` it returns, the position of each
    partition it read after them (``moves``), the partitions whose position lies
    outside their log (``out_of_range``) and whose log directory is gone
    (``vanished``): those two moved nothing, and the fetch went on with the others;
    and the ``error`` to raise once the moves are applied (a fetch that met one
    before reading any message)."""
    messages: list[ConsumerMessage]
    moves: dict[TP, int]
    out_of_range: list[TP]
    vanished: list[TP]
    error: Exception | None = None


Part = tuple[TP, Log, int]       # a partition to fetch from: its reader and position


class Fetcher:
    """A consumer's reading, given at each fetch the partitions to read with their
    readers and positions. It keeps the read-ahead of each (valid only while the
    partition's reader and position are those it was read for: a seek, a give-back
    or a new reader makes it go) and an error met after other messages were read
    (raised by the next fetch that is given that partition at that position)."""

    def __init__(self, key_deserializer: Deserializer | None,
                 value_deserializer: Deserializer | None) -> None:
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer
        # per partition, what the last read returned and nobody took yet: the reader
        # and position it continues, the set's next offset and its messages
        self._ahead: dict[TP, tuple[Log, int, int, Iterator[ConsumerMessage]]] = {}
        self._pending: tuple[TP, Log, int, Exception] | None = None
        self._rr = 0

    def clear(self) -> None:
        self._ahead.clear()
        self._pending = None

    def _raise_pending(self, parts: list[Part]) -> None:
        """Raise the error the last fetch met after returning what it had read, if
        its partition is among ``parts`` at the same reader and position (kept while
        the partition is not fetched, a paused one; dropped once it moved)."""
        p = self._pending
        if p is None:
            return
        for tp, log, pos in parts:
            if tp == p[0]:
                self._pending = None
                if log is p[1] and pos == p[2]:
                    raise p[3]
                return

    def fetch(self, parts: list[Part], max_records: int) -> Fetched:
        """Up to ``max_records`` messages from ``parts`` (sorted), taking them in
        turn from one fetch to the next.

        Nothing moves but by the returned ``moves``: a fetch interrupted half-way
        moves nothing. An error in a partition (damage, an I/O error, a
        deserializer's) after messages were read is kept for the next fetch, and what
        was read before it is returned; with nothing read, it is returned as
        ``error``. A message a deserializer refused stays at the position. The error
        of the last fetch, kept, is raised here."""
        out: list[ConsumerMessage] = []
        moved: dict[TP, int] = {}
        outside: list[TP] = []
        vanished: list[TP] = []
        self._raise_pending(parts)
        if self._ahead:
            for tp in [tp for tp, a in self._ahead.items() if a[0].closed]:
                del self._ahead[tp]          # a partition given up
        if not parts:
            return Fetched(out, moved, outside, vanished)
        kd, vd = self.key_deserializer, self.value_deserializer
        plain = kd is None and vd is None
        n = len(parts)
        start = self._rr % n
        self._rr += 1
        keep: dict[TP, tuple[Log, int, int, Iterator[ConsumerMessage]]] = {}
        error: tuple[TP, Log, int, Exception] | None = None
        for i in range(n):
            tp, log, pos = parts[(start + i) % n]
            ahead = self._ahead.pop(tp, None)
            if ahead is not None and (ahead[0] is not log or ahead[1] != pos):
                ahead = None
            before = len(out)
            want = max_records - before
            try:
                if ahead is None:
                    try:
                        ms = log.read(pos, FETCH_BYTES)
                    except OffsetOutOfRangeError:
                        outside.append(tp)
                        continue
                    except LogClosedError:
                        if log.closed:
                            raise
                        vanished.append(tp)      # its directory went
                        continue
                    if not ms:
                        continue
                    ahead = log, pos, ms.next_offset, ms.iter_as(ConsumerMessage, tp)
                out += itertools.islice(ahead[3], want)
                if not plain:
                    _deserialize(out, before, kd, vd)
            except _Undeserializable as e:
                # the read-ahead goes: the next fetch reads again at the message
                moved[tp] = e.offset
                error = (tp, log, e.offset, e.error)
                break
            except Exception as e:
                # damage (or an I/O error) in this partition: what was read before it
                # is returned, the error waits for the next fetch
                if len(out) > before:
                    moved[tp] = out[-1][2] + 1
                error = (tp, log, moved.get(tp, pos), e)
                break
            if len(out) - before == want:
                # the rest of what was read waits for the next fetch: no read again
                moved[tp] = out[-1][2] + 1
                keep[tp] = (log, moved[tp], ahead[2], ahead[3])
                break
            # all of it taken: go on after the set (past batches compaction emptied)
            moved[tp] = max(pos, ahead[2])
        self._ahead.update(keep)
        if error is not None:
            if not out:
                return Fetched(out, moved, outside, vanished, error[3])
            self._pending = error
        return Fetched(out, moved, outside, vanished)

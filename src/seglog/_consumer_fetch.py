"""What a ``Consumer`` reads from the partitions it owns (docs/GROUPS.md,
"Fetching"): ``ConsumerMessage``, and the ``Fetcher`` that reads whole batches at
the partitions' positions in turn, keeps the read-ahead, skips paused partitions,
applies the deserializers, and moves positions only by what a fetch returns.
"""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from ._assignors import TP
from .errors import OffsetOutOfRangeError
from .log import Log
from .message import Headers, Message, field_getter, short_repr

_log = logging.getLogger("seglog")
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


class Fetcher:
    """A consumer's fetching over the member's ``owned`` readers and ``positions``
    (the same dicts, moved in place). ``group`` names the group in warnings."""

    def __init__(self, owned: dict[TP, Log], positions: dict[TP, int], group: str,
                 key_deserializer: Deserializer | None,
                 value_deserializer: Deserializer | None) -> None:
        self.owned = owned
        self.positions = positions
        self.group = group
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer
        # per partition, what the last read returned and nobody took yet: the set's
        # next offset and its messages
        self.buffered: dict[TP, tuple[int, Iterator[ConsumerMessage]]] = {}
        # an error met by a fetch that returned what it had read before it: raised by
        # the next poll (unless the partition went, was seeked or is paused)
        self.pending: tuple[TP, Exception] | None = None
        self.paused: set[TP] = set()
        self.rr = 0

    def forget(self, tps: Iterable[TP]) -> None:
        """Partitions the member gave up: their read-ahead, pause and waiting error go."""
        for tp in tps:
            self.drop(tp)
            self.paused.discard(tp)

    def drop(self, tp: TP) -> None:
        """The read-ahead and the waiting error of ``tp`` go (a seek, a give-back)."""
        self.buffered.pop(tp, None)
        if self.pending is not None and self.pending[0] == tp:
            self.pending = None

    def raise_pending(self) -> None:
        """Raise the error the last fetch met after returning what it had read (kept
        while its partition is paused)."""
        p = self.pending
        if p is not None and p[0] not in self.paused:
            self.pending = None
            raise p[1]

    def rewind(self, rest: Iterable[ConsumerMessage]) -> None:
        """Messages returned but not delivered go back: each partition's position
        moves back to the first of them (those still owned)."""
        firsts = {(m[0], m[1]): m[2] for m in reversed(list(rest))}
        for tp, off in firsts.items():
            if tp in self.owned:
                self.positions[tp] = off
                self.buffered.pop(tp, None)

    def clear(self) -> None:
        self.buffered.clear()
        self.pending = None
        self.paused.clear()

    def fetch(self, max_records: int) -> list[ConsumerMessage]:
        """Up to ``max_records`` messages from the owned, unpaused partitions, taking
        them in turn from one fetch to the next.

        Positions and read-ahead change only when the fetch is over, by what it
        returns: a fetch interrupted half-way moves nothing. An error in a partition
        (damage, an I/O error, a deserializer's) after messages were read is kept for
        the next poll, and what was read before it is returned; with nothing read,
        it is raised. A message a deserializer refused stays at the position."""
        out: list[ConsumerMessage] = []
        paused = self.paused
        tps = sorted(tp for tp in self.owned if tp not in paused) if paused else \
            sorted(self.owned)
        if not tps:
            return out
        kd, vd = self.key_deserializer, self.value_deserializer
        plain = kd is None and vd is None
        n = len(tps)
        start = self.rr % n
        self.rr += 1
        positions = self.positions
        moved: dict[TP, int] = {}
        keep: dict[TP, tuple[int, Iterator[ConsumerMessage]]] = {}
        error: tuple[TP, Exception] | None = None
        for i in range(n):
            tp = tps[(start + i) % n]
            buffered = self.buffered.pop(tp, None)
            before = len(out)
            want = max_records - before
            try:
                if buffered is None:
                    log = self.owned[tp]
                    pos = positions[tp]
                    try:
                        ms = log.read(pos, FETCH_BYTES)
                    except OffsetOutOfRangeError:
                        start_off = log.start_offset
                        _log.warning("seglog: group %s: offset %d of %s-%d was deleted by "
                                     "retention; resuming at the log start %d", self.group,
                                     pos, tp[0], tp[1], start_off)
                        moved[tp] = start_off
                        continue
                    if not ms:
                        continue
                    buffered = ms.next_offset, ms.iter_as(ConsumerMessage, tp)
                out += itertools.islice(buffered[1], want)
                if not plain:
                    _deserialize(out, before, kd, vd)
            except _Undeserializable as e:
                # the read-ahead goes: the next fetch reads again at the message
                moved[tp] = e.offset
                error = (tp, e.error)
                break
            except Exception as e:
                # damage (or an I/O error) in this partition: what was read before it
                # is returned, the error waits for the next poll
                if len(out) > before:
                    moved[tp] = out[-1][2] + 1
                error = (tp, e)
                break
            if len(out) - before == want:
                # the rest of what was read waits for the next poll: no read again
                keep[tp] = buffered
                moved[tp] = out[-1][2] + 1
                break
            # all of it taken: go on after the set (past batches compaction emptied)
            moved[tp] = max(positions[tp], buffered[0])
        positions.update(moved)
        self.buffered.update(keep)
        if error is not None:
            if not out:
                raise error[1]
            self.pending = error
        return out

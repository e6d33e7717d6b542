"""Kafka's transactions as a read_committed consumer sees them: which transactional
batches belong to aborted transactions, and the last stable offset (the first offset
of the earliest transaction still open; nothing from there on is committed-readable).

Derived from the log itself: each producer's transactional batches open its
transaction, the control batch (an ABORT or COMMIT marker) closes it. The ``.txnindex``
files hold the same aborted ranges for the broker's use; the markers are read instead,
so segments copied without their indexes (tiered storage) read the same.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Callable, Iterable, NamedTuple

from ._wire import CONTROL_ABORT, BatchInfo

# a transactional batch's event: (producer id, offset, kind): kind DATA for records
# (offset: the batch's base offset), else the control marker's type (offset: its own)
DATA = -1
Event = tuple[int, int, int]


class Fates(NamedTuple):
    """The aborted transactions' offset ranges per producer (first offsets, marker
    offsets, each sorted) and the last stable offset (None: no transaction is open)."""

    aborted: dict[int, tuple[list[int], list[int]]]
    last_stable: int | None

    def skips(self, info: BatchInfo) -> bool:
        """Whether a read_committed reader skips this transactional batch."""
        ranges = self.aborted.get(info.producer_id)
        if ranges is None:
            return False
        firsts, lasts = ranges
        k = bisect_right(firsts, info.base_offset)
        return k > 0 and info.base_offset < lasts[k - 1]


def events(batches: Iterable[BatchInfo], control_type: Callable[[BatchInfo], int]
           ) -> list[Event]:
    """The transactional events of one segment's batches, in order."""
    out: list[Event] = []
    for info in batches:
        if not info.is_transactional:
            continue
        if info.is_control:
            out.append((info.producer_id, info.last_offset, control_type(info)))
        else:
            out.append((info.producer_id, info.base_offset, DATA))
    return out


def fates(segment_events: Iterable[list[Event]]) -> Fates:
    """The fates of the transactions whose events (segment by segment, in offset
    order) are given."""
    open_: dict[int, int] = {}
    aborted: dict[int, tuple[list[int], list[int]]] = {}
    for evs in segment_events:
        for pid, offset, kind in evs:
            if kind == DATA:
                open_.setdefault(pid, offset)
                continue
            first = open_.pop(pid, None)
            if kind == CONTROL_ABORT and first is not None:
                firsts, lasts = aborted.setdefault(pid, ([], []))
                firsts.append(first)
                lasts.append(offset)
    return Fates(aborted, min(open_.values()) if open_ else None)

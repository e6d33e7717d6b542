"""What a consumer group member knows of its subscribed topics between looks at
the group (docs/GROUPS.md, "Deleting a topic"): their partition counts, whether a
topic's record was replaced (grown, or the topic deleted and made again), and the
owned partitions whose log directory a fetch found gone.

Deleting a topic removes its record and its logs, in either order; making it again
writes new logs (with new ids) and a new record. So a record that changed is the
cue to compare the owned partitions' logs with those they were taken with, and a
log directory gone while the record stays for the session timeout is a log removed
alone (a deletion's other half may come that late: its process may be stalled).
"""

from __future__ import annotations

import os

from .assignment import Assignment
from .assignors import TP
from .._runtime.files import topic_file
from .files import clock
from ..errors import LogClosedError
from ..topic import read_partition_count


def removed_alone(path: str, topic: str) -> LogClosedError:
    """What a member raises for a partition's log gone while its topic stays recorded
    (past the time a deletion's other half may take)."""
    return LogClosedError(f"log directory {path} is gone, but topic {topic!r} is still "
                          f"recorded (was a partition's log removed alone?)")


class TopicWatch:
    """The subscribed topics of one member, whose partitions it owns in ``parts``."""

    def __init__(self, root: str, parts: Assignment) -> None:
        self._root = root
        self._parts = parts
        # per topic, its record's stamp at the last look (None: no record)
        self._records: dict[str, tuple[int, int] | None] = {}
        self._counts: dict[str, int] = {}
        # owned partitions whose log directory went, and when (``clock``) it was seen
        self._vanished: dict[TP, float] = {}
        # assigned partitions a claim could not open: since when, and the record then
        self._unopened: dict[TP, tuple[float, tuple[int, int] | None]] = {}

    def count(self, topic: str) -> int | None:
        """The partition count of ``topic`` at the last look (None: no record)."""
        return self._counts.get(topic)

    def look(self, topics: list[str]) -> set[TP]:
        """Read ``topics``' records: the counts now; the owned partitions of a topic
        whose record was replaced since the last look and whose log is another now
        (the topic made again), to be taken anew."""
        records: dict[str, tuple[int, int] | None] = {}
        changed = set()
        for t in topics:
            records[t] = self._stamp(t)
            if t not in self._records or records[t] != self._records[t]:
                changed.add(t)
        self._records = records
        for t in changed:
            n = read_partition_count(self._root, t)
            if n is None:
                self._counts.pop(t, None)
            else:
                self._counts[t] = n
        for t in [t for t in self._counts if t not in records]:
            del self._counts[t]
        if not changed or not len(self._parts):
            return set()
        return {tp for tp in self._parts.owned() if tp[0] in changed
                and records.get(tp[0]) is not None and self._parts.replaced(tp)}

    def vanished(self, tp: TP) -> bool:
        """A fetch found owned ``tp``'s log directory gone: it is fetched no more
        until ``settle`` decides. True the first time."""
        if tp in self._vanished:
            return False
        self._vanished[tp] = clock()
        self._parts.set_aside(tp)
        return True

    def settle(self, now: float, after: float) -> set[TP]:
        """The vanished partitions made again since (to be taken anew). One whose
        topic's record is gone waits for the generation that drops it; one whose
        record is still there ``after`` seconds on is a log removed alone:
        ``LogClosedError``."""
        parts = self._parts
        again = {tp for tp in self._vanished if parts.replaced(tp)}
        for tp, since in self._vanished.items():
            if tp not in again and self._records.get(tp[0]) is not None \
                    and now - since >= after:
                raise removed_alone(parts.log(tp).path, tp[0])
        return again

    def unopened(self, tp: TP, after: float) -> bool:
        """A claim could not open assigned ``tp``'s log: False while that may be a
        deletion or a making under way (its topic's record gone, or replaced since
        this was first seen, or first seen under ``after`` seconds ago: the claim is
        tried again at the next look); True once it has lasted ``after`` seconds with
        the record unchanged (the error is raised)."""
        now = clock()
        rec = self._stamp(tp[0])
        first = self._unopened.get(tp)
        if rec is None or first is None or first[1] != rec:
            self._unopened[tp] = (now, rec)
            return False
        return now - first[0] >= after

    def opened(self, tp: TP) -> None:
        self._unopened.pop(tp, None)

    def forget(self, tps: set[TP]) -> None:
        """Partitions given up: what was seen of their logs goes (taken again, they
        start afresh)."""
        for tp in tps:
            self._vanished.pop(tp, None)
            self._unopened.pop(tp, None)

    def _stamp(self, topic: str) -> tuple[int, int] | None:
        try:
            s = os.stat(topic_file(self._root, topic))
        except OSError:
            return None
        return s.st_ino, s.st_ctime_ns

    def clear(self) -> None:
        self._vanished.clear()
        self._unopened.clear()

"""How a consumer group's partitions are dealt to its members (docs/GROUPS.md):
pure functions of the members and their topics, the partition counts and the
previous assignment."""

from __future__ import annotations

import itertools
from typing import Callable

TP = tuple[str, int]
Members = dict[str, list[str]]            # member id -> subscribed topics
Assignment = dict[str, list[TP]]


def _range(members: Members, partitions: dict[str, int], out: Assignment,
           previous: Assignment) -> None:
    """Per topic, contiguous runs, the first members one more (the Kafka paper's
    Algorithm 1)."""
    ids = sorted(members)
    for topic in sorted(partitions):
        subs = [m for m in ids if topic in members[m]]
        if not subs:
            continue
        n, k = partitions[topic], len(subs)
        start = 0
        for i, m in enumerate(subs):
            count = n // k + (1 if i < n % k else 0)
            out[m].extend((topic, p) for p in range(start, start + count))
            start += count


def _all(partitions: dict[str, int]) -> list[TP]:
    return [(t, p) for t in sorted(partitions) for p in range(partitions[t])]


def _roundrobin(members: Members, partitions: dict[str, int], out: Assignment,
                previous: Assignment) -> None:
    """All partitions dealt in turn, each to the next member subscribed to its topic."""
    ids = sorted(members)
    cycle = itertools.cycle(ids)
    for tp in _all(partitions):
        for _ in range(len(ids)):
            m = next(cycle)
            if tp[0] in members[m]:
                out[m].append(tp)
                break


def _sticky(members: Members, partitions: dict[str, int], out: Assignment,
            previous: Assignment) -> None:
    """Previous owners keep their partitions up to a fair quota; the rest go, one by
    one, to the subscribed member with the fewest."""
    ids = sorted(members)
    tps = _all(partitions)
    prev_owner = {tp: m for m, owned in previous.items() for tp in owned}
    quota = -(-len(tps) // max(1, len(ids)))
    free = []
    for tp in tps:
        owner = prev_owner.get(tp)
        if owner is not None and owner in out and tp[0] in members[owner] \
                and len(out[owner]) < quota:
            out[owner].append(tp)
        else:
            free.append(tp)
    for tp in free:
        subs = [m for m in ids if tp[0] in members[m]]
        if subs:
            out[min(subs, key=lambda m: (len(out[m]), m))].append(tp)
    for m in out:
        out[m].sort()


_ASSIGNORS: dict[str, Callable[[Members, dict[str, int], Assignment, Assignment], None]] = {
    "range": _range, "roundrobin": _roundrobin, "sticky": _sticky}
ASSIGNORS = tuple(_ASSIGNORS)


def assign(assignor: str, members: Members, partitions: dict[str, int],
           previous: Assignment | None = None) -> Assignment:
    """Every partition of every subscribed topic to exactly one member subscribed to
    its topic. ``range``: per topic, contiguous runs, the first members one more
    (the Kafka paper's Algorithm 1); ``roundrobin``: all partitions dealt in turn;
    ``sticky``: previous owners keep what they can, balanced to within one."""
    out: Assignment = {m: [] for m in members}
    _ASSIGNORS.get(assignor, _sticky)(members, partitions, out, previous or {})
    return out

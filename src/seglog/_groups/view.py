"""A consumer group as an operator reads it (``seglog groups`` and the notebook's
group view): its state, per partition the lag in messages and in time (the age of
the oldest message not yet consumed), the total, and lag per partition as a chart.
Functions of ``describe_group``'s answer (whose partitions may be keyed
``"topic-p"`` or ``(topic, p)``) and of the partitions' logs, read without a lock."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
# Any: describe_group's JSON-shaped description
from typing import Any, Mapping

from .._views import html as _html, svg as _svg
from .._views.html import duration, num, plural, when
from ..errors import SeglogError
from ..log import Log
from ..topic import partition_dir

STABLE, REBALANCING, EMPTY, NO_LIVE_OWNER = "stable", "rebalancing", "empty", "no live owner"
# the notebook's lag chart shows at most this many partitions (the largest lags)
_CHART_ROWS = 30


def tp_of(key: object) -> tuple[str, int]:
    """A partition key of ``describe_group`` as ``(topic, partition)``."""
    if isinstance(key, (tuple, list)):
        return str(key[0]), int(key[1])
    t, _, p = str(key).rpartition("-")
    return t, int(p)


@dataclass
class PartitionLag:
    """One partition of a group. ``lag`` counts the offsets from where the group
    resumes (the committed offset; without one, the log start, where a new member
    begins) to the end; ``never`` says nothing was committed. ``unread_ts``: the
    timestamp of the first message not yet consumed (None when caught up or not
    readable), ``time_lag`` its age in ms when the view was made."""

    topic: str
    partition: int
    owner: str | None
    committed: int | None
    start: int | None
    end: int | None
    lag: int | None
    never: bool
    unread_ts: int | None = None
    time_lag: int | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass
class GroupView:
    """``describe_group`` read for a person: ``state`` (stable, rebalancing, empty,
    no live owner) and why, the partitions' lags, their sum, and the largest time
    lag."""

    group: str
    generation: int
    assignor: str
    state: str
    why: str
    members: dict[str, dict[str, Any]]
    partitions: list[PartitionLag] = field(default_factory=list)
    now: int = 0

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)

    @property
    def never_committed(self) -> int:
        return sum(1 for p in self.partitions if p.never)

    @property
    def time_lag(self) -> int | None:
        """The age of the oldest message the group has not consumed, if any."""
        return max((p.time_lag for p in self.partitions if p.time_lag is not None),
                   default=None)

    @property
    def alive(self) -> int:
        return sum(1 for m in self.members.values() if m["status"] == "alive")


def state(desc: Mapping[str, Any]) -> tuple[str, str]:
    """(state, why) of a described group, as Kafka names its states where they
    apply: ``empty`` (no members), ``no live owner`` (members, none alive),
    ``rebalancing`` (a member is dead or silent, or a live member does not yet own
    what it is assigned: the group is moving partitions), else ``stable``."""
    members = desc["members"]
    if not members:
        return EMPTY, "no members: nothing consumes; lag grows"
    alive = [m for m, v in members.items() if v["status"] == "alive"]
    if not alive:
        return NO_LIVE_OWNER, (f"{plural(len(members), 'member')}, none alive: nothing consumes "
                               f"until a member joins")
    down = [m for m, v in members.items() if v["status"] != "alive"]
    if down:
        return REBALANCING, f"{plural(len(down), 'member')} dead or silent: the live ones take over"
    owners = {tp_of(k): v["owner"] for k, v in desc["partitions"].items()}
    moving = [tp for m in alive for tp in members[m]["assignment"]
              if owners.get(tp_of(tp)) != m]
    if moving:
        return REBALANCING, f"{plural(len(moving), 'partition')} not yet taken by their new owner"
    return STABLE, ("its live member owns its partitions" if len(alive) == 1 else
                    f"{len(alive)} live members own their partitions")


def view(root: str, desc: Mapping[str, Any], now_ms: int | None = None) -> GroupView:
    """The group's ``GroupView``: the description, and from each partition's log
    (read only) its start offset and the time of its first unconsumed message."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    st, why = state(desc)
    v = GroupView(desc["group"], desc["generation"], desc["assignor"], st, why,
                  dict(desc["members"]), now=now)
    for key, p in sorted(desc["partitions"].items(), key=lambda kv: tp_of(kv[0])):
        t, n = tp_of(key)
        start, unread = _read(root, t, n, p["committed"], p["end"])
        committed, end = p["committed"], p["end"]
        never = committed is None
        frm = start if never else committed
        lag = None if frm is None or end is None else max(end - frm, 0)
        v.partitions.append(PartitionLag(
            t, n, p["owner"], committed, start, end, lag, never, unread,
            None if unread is None else max(now - unread, 0)))
    return v


def _read(root: str, topic: str, p: int, committed: int | None, end: int | None
          ) -> tuple[int | None, int | None]:
    """(start offset, timestamp of the first message at or after where the group
    resumes) of a partition's log; Nones where it cannot be read."""
    try:
        log = Log.open(partition_dir(root, topic, p), readonly=True)
    except (OSError, SeglogError):
        return None, None
    with log:
        start = log.start_offset
        frm = start if committed is None else max(committed, start)
        if end is None or frm >= end:
            return start, None
        try:
            for m in log.iter(frm, end):
                return start, m[1]
        except (OSError, SeglogError):
            pass
        return start, None


def lag_text(p: PartitionLag) -> str:
    """A partition's lag: ``30,021`` (``30,021*`` when never committed)."""
    return "-" if p.lag is None else num(p.lag) + ("*" if p.never else "")


def group_html(desc: Mapping[str, Any], root: str) -> str:
    """The notebook's view of a described group: state, lag in messages and time,
    members, partitions, and a chart of lag per partition."""
    v = view(root, desc)
    kind = {STABLE: "ok", REBALANCING: "warn"}.get(v.state, "bad")
    oldest = v.time_lag
    summary = _html.fields_table([
        ("state", v.why),
        ("generation", f"{v.generation} (assignor {v.assignor})"),
        ("members", f"{len(v.members)} ({v.alive} alive)"),
        ("lag", f"{plural(v.total_lag, 'message')}" + (
            f", {plural(v.never_committed, 'partition')} never committed (counted from the log "
            f"start)" if v.never_committed else "")),
        ("oldest unconsumed", "-" if oldest is None else
         f"{duration(oldest)} old (time lag)")])
    members = _html.table(("member", "status", "partitions"), [
        (m, _html.pill(d["status"], "ok" if d["status"] == "alive" else "bad"),
         compact_tps([tp_of(x) for x in d["assignment"]]) or "none")
        for m, d in sorted(v.members.items())]) if v.members else _html.note("no members")
    parts = _html.table(
        ("partition", "owner", "committed", "end", "lag", "time lag", "oldest unconsumed"),
        [(p.name, p.owner or "-", "-" if p.committed is None else p.committed,
          "-" if p.end is None else p.end, lag_text(p),
          "-" if p.time_lag is None else duration(p.time_lag), when(p.unread_ts))
         for p in v.partitions], "llrrrrl")
    foot = "* never committed: counted from the log start, where a new member begins"
    chart = ""
    shown = sorted(v.partitions, key=lambda p: -(p.lag or 0))[:_CHART_ROWS]
    shown.sort(key=lambda p: (p.topic, p.partition))
    if any(p.lag for p in shown):
        chart = _svg.hbars([(p.name, p.lag or 0, lag_text(p) + (
            f"  ({duration(p.time_lag)})" if p.time_lag else "")) for p in shown],
            "lag per partition (messages, and the age of the oldest unconsumed)"
            + ("; red: never committed" if any(p.never for p in shown) else ""),
            warn=[p.never for p in shown])
    return _html.block(
        _html.title(f"consumer group {v.group!r}", _html.pill(v.state, kind)),
        _html.side_by_side(summary, chart), _html.title("members"), members,
        _html.title("partitions"), parts,
        _html.note(foot if v.never_committed else ""),
        _html.note(f"read at {when(v.now)}"))


def compact_tps(tps: list[tuple[str, int]]) -> str:
    """``orders-0..3, orders-5, clicks-1``: runs of partitions of a topic joined."""
    by: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        by.setdefault(t, []).append(p)
    out = []
    for t, ps in by.items():
        i = 0
        while i < len(ps):
            j = i
            while j + 1 < len(ps) and ps[j + 1] == ps[j] + 1:
                j += 1
            out.append(f"{t}-{ps[i]}" + (f"..{ps[j]}" if j > i else ""))
            i = j + 1
    return ", ".join(out)

"""``seglog groups``: the consumer groups of a root of topics, or one group, as
``kafka-consumer-groups --describe`` shows them, with the group's state and the
lag in messages and in time (``_groups.view``), in columns that fit the terminal."""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import IO, Any  # Any: values of the JSON documents --json prints

from .._groups import view as _group_view
from .output import EXIT_OK, Col, table, width
from .paths import require_root
from .._groups.view import GroupView, compact_tps, lag_text, tp_of
from .._views.html import duration, num, plural, when
from ..consumer_group import describe_group, list_groups

_FOOT = "* never committed: lag counted from the log start, where a new member begins"


def _json(v: GroupView, desc: dict[str, Any]) -> dict[str, Any]:
    """The description, as ``describe_group`` gives it, with the view's state, lags
    and times (``lag`` stays None without a commit; ``lag_from_start`` counts it)."""
    out = dict(desc)
    out["partitions"] = {f"{t}-{p}": d for (t, p), d in
                         sorted((tp_of(k), dict(d)) for k, d in desc["partitions"].items())}
    for p in v.partitions:
        out["partitions"][p.name].update(
            start=p.start, lag_from_start=p.lag if p.never else None,
            oldest_unconsumed_timestamp=p.unread_ts, time_lag_ms=p.time_lag)
    out.update(state=v.state, state_reason=v.why, total_lag=v.total_lag,
               never_committed=v.never_committed, time_lag_ms=v.time_lag)
    return out


def cmd_groups(a: argparse.Namespace, out: IO[str]) -> int:
    require_root(a.root)
    room = width(out)
    if a.group is None:
        descs = [describe_group(a.root, g) for g in list_groups(a.root)]
        views = [_group_view.view(a.root, d) for d in descs]
        if a.json:
            json.dump({"groups": [_json(v, d) for v, d in zip(views, descs)]}, out, indent=1)
            out.write("\n")
            return EXIT_OK
        if not descs:
            out.write(f"no consumer groups under {a.root}\n")
            return EXIT_OK
        cols = [Col("GROUP", rank=20, most=24), Col("STATE", rank=19),
                Col("MEMBERS", "r", 15), Col("LAG", "r", 18), Col("TIME LAG", "r", 17),
                Col("GEN", "r", 12)]
        rows = [[v.group, v.state, f"{v.alive}/{len(v.members)} alive",
                 num(v.total_lag) + ("*" if v.never_committed else ""),
                 "-" if v.time_lag is None else duration(v.time_lag), str(v.generation)]
                for v in views]
        out.write("\n".join(table(cols, rows, room)) + "\n")
        if any(v.never_committed for v in views):
            out.write(_FOOT + "\n")
        return EXIT_OK
    d = describe_group(a.root, a.group)
    v = _group_view.view(a.root, d)
    if a.json:
        json.dump(_json(v, d), out, indent=1)
        out.write("\n")
        return EXIT_OK
    for line in (f"group {v.group}: {v.state} ({v.why})",
                 f"generation {v.generation}, assignor {v.assignor}; lag "
                 f"{plural(v.total_lag, 'message')}" + (f", the oldest unconsumed {duration(v.time_lag)} old"
                                  if v.time_lag is not None else "")):
        out.write("\n".join(textwrap.wrap(line, room, subsequent_indent="    ")) + "\n")
    if v.members:
        out.write("\n")
        mcols = [Col("MEMBER", rank=20, most=36), Col("STATUS", rank=19),
                 Col("PARTITIONS", rank=18, most=60)]
        out.write("\n".join(table(mcols, [
            [m, md["status"], compact_tps([tp_of(x) for x in md["assignment"]]) or "none"]
            for m, md in sorted(v.members.items())], room)) + "\n")
    out.write("\n")
    pcols = [Col("PARTITION", rank=20, most=24), Col("OWNER", rank=13, most=16),
             Col("COMMITTED", "r", 17), Col("END", "r", 16), Col("LAG", "r", 19),
             Col("TIME LAG", "r", 18), Col("OLDEST UNCONSUMED", rank=11)]
    rows = [[p.name, p.owner or "-", "-" if p.committed is None else str(p.committed),
             "-" if p.end is None else str(p.end), lag_text(p),
             "-" if p.time_lag is None else duration(p.time_lag),
             "-" if p.unread_ts is None else when(p.unread_ts)[:19] + "Z"]
            for p in v.partitions]
    out.write("\n".join(table(pcols, rows, room)) + "\n")
    if v.never_committed:
        out.write(_FOOT + "\n")
    return EXIT_OK

"""What Kafka's admin client does for consumer groups, over a group's files and
without being a member (docs/GROUPS.md): listing groups, describing one (its
members' status probed by their locks), reading committed offsets, and committing
them for a reader outside the membership (a Spark query, a batch job).
"""

from __future__ import annotations

import os
import time
from typing import Any, Mapping

from . import view as _group_view
from .assignors import TP
from .._runtime.files import GROUPS_DIR
from .._storage.marker import check_root
from .files import GroupFiles, committed_offset, is_name, key, log_id, parse_key
from ..errors import InvalidConfigError, OffsetOutOfRangeError, SeglogError
from ..log import Log
from ..topic import check_name, partition_dir, read_partition_count

_DEFAULT_SESSION_S = 10.0     # for member files that do not say


def check_int(what: str, v: object) -> int:
    """A partition or offset given by a caller: an int (``True`` is not 1)."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{what} must be an int, not {type(v).__name__}")
    return v


def check_ms(name: str, v: object, lo: int) -> None:
    """A setting in milliseconds: an int (``TypeError``) of at least ``lo``
    (``InvalidConfigError``)."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an int")
    if v < lo:
        raise InvalidConfigError(f"{name} must be >= {lo}, not {v}")


class GroupDescription(dict[str, Any]):
    """``describe_group``'s answer: a plain dict that a notebook shows as tables
    (state, lag in messages and time, a chart of lag per partition); its
    ``partitions`` are keyed by ``(topic, partition)``, as ``commit`` and
    ``assignment`` key them."""

    root = ""         # the root of topics described: the view reads its logs' times

    def _repr_html_(self) -> str:
        return _group_view.group_html(self, self.root)


def list_groups(root: str | os.PathLike[str]) -> list[str]:
    """The groups under ``root`` (directories of ``__groups/`` with a group's name;
    anything else there is not a group)."""
    gdir = os.path.join(os.fspath(root), GROUPS_DIR)
    try:
        names = os.listdir(gdir)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(n for n in names if is_name(n) and os.path.isdir(os.path.join(gdir, n)))


def describe_group(root: str | os.PathLike[str], group: str) -> GroupDescription:
    """The group as its files and its members' locks say: ``generation``,
    ``members`` (id -> topics, assignment and ``status``: ``"alive"``, ``"silent"``
    when its heartbeat is older than its session timeout by the wall clock, or
    ``"dead"``, its process gone and the group not yet rebalanced), and per
    ``(topic, partition)``: ``owner`` (None when nobody holds it, or its holder is
    dead), ``committed`` (None with nothing committed for the log there now),
    ``end``, ``lag`` (end - committed, or None with nothing committed). Writes
    nothing, anywhere; ``NotALogError`` for a root seglog did not make."""
    check_name(group, "group")
    root = os.path.abspath(os.fspath(root))
    check_root(root)
    files = GroupFiles(root, group)
    if not os.path.isdir(files.dir):
        raise InvalidConfigError(f"no group {group!r} under {root}")
    st = files.state()
    owners = files.owners()
    offsets = files.offsets()
    now = time.time()
    status: dict[str, str] = {}

    def probe(m: str) -> str:
        if m not in status:
            status[m] = files.probe(m, _DEFAULT_SESSION_S, wall=now)
        return status[m]

    topics = sorted({t for ts in st.members.values() for t in ts}
                    | {parse_key(files.offsets_path, k)[0] for k in offsets})
    parts: dict[TP, dict[str, Any]] = {}
    for t in topics:
        n = read_partition_count(root, t)
        for p in range(n or 0):
            path = partition_dir(root, t, p)
            try:
                ident = log_id(path)
                log = Log.open(path, readonly=True)
            except (OSError, SeglogError):
                end = ident = None
            else:
                with log:
                    end = log.end_offset
            c = committed_offset(offsets.get(key((t, p))), ident)
            holder = owners.get(key((t, p)))
            owner = holder[0] if holder and probe(holder[0]) != "dead" else None
            parts[(t, p)] = {"owner": owner, "committed": c, "end": end,
                             "lag": (end - c) if (c is not None and end is not None) else None}
    desc = GroupDescription(
        group=group, generation=st.generation, assignor=st.assignor,
        members={m: {"topics": ts, "assignment": sorted(st.assignment.get(m, [])),
                     "status": probe(m)}
                 for m, ts in st.members.items()},
        partitions=parts)
    desc.root = root
    return desc


def commit_offsets(root: str | os.PathLike[str], group: str,
                   offsets: Mapping[tuple[str, int], int],
                   lock_timeout_ms: int = 10_000) -> dict[tuple[str, int], int]:
    """Durably record ``{(topic, partition): next offset}`` as ``group``'s committed
    offsets without being a member: for a reader that keeps its own position (a Spark
    query's checkpoint, a batch job's offset ranges) and wants ``describe_group`` to
    show its progress and lag.

    Under ``group.lock``, in ``offsets.json`` (the group and its directory are made
    when missing; an empty mapping changes nothing). Not fenced by generations,
    since the caller's own record is the truth; an offset below the committed one is
    ignored, so committed offsets never move backwards. Returns the committed
    offsets of the given partitions afterwards. ``InvalidConfigError``/``TypeError``
    for a bad group, topic, partition or offset, ``OffsetOutOfRangeError`` for an
    offset outside its partition's log (``start_offset`` to ``end_offset``),
    ``GroupBusyError`` if the lock stayed busy for ``lock_timeout_ms``: then nothing
    was written.
    """
    check_name(group, "group")
    if not isinstance(offsets, Mapping):
        raise TypeError(f"offsets must be a mapping, not {type(offsets).__name__}")
    check_ms("lock_timeout_ms", lock_timeout_ms, 0)
    root = os.path.abspath(os.fspath(root))
    check_root(root)      # someone else's directory: refused untouched
    todo: dict[TP, int] = {}
    counts: dict[str, int] = {}
    for tp, off in offsets.items():
        if not isinstance(tp, tuple) or len(tp) != 2:
            raise TypeError(f"offsets keys must be (topic, partition), not {tp!r}")
        topic, p = tp
        check_name(topic)
        if topic not in counts:
            n = read_partition_count(root, topic)
            if n is None:
                raise InvalidConfigError(f"topic {topic!r} does not exist under {root}")
            counts[topic] = n
        p = check_int("partition", p)
        off = check_int("offset", off)
        if not 0 <= p < counts[topic]:
            raise InvalidConfigError(
                f"topic {topic!r} has partitions 0 to {counts[topic] - 1}, not {p}")
        if off < 0:
            raise InvalidConfigError(f"offset must be >= 0, not {off} ({topic}-{p})")
        todo[(topic, p)] = off
    if not todo:
        return {}
    # an offset the log never had would make the group skip what is appended up to it
    ids: dict[TP, str | None] = {}
    for (topic, p), off in todo.items():
        path = partition_dir(root, topic, p)
        ids[(topic, p)] = log_id(path)
        with Log.open(path, readonly=True) as log:
            first, end = log.start_offset, log.end_offset
        if not first <= off <= end:
            raise OffsetOutOfRangeError(
                f"offset {off} is outside {topic}-{p}'s log [{first}, {end}]: nothing "
                f"committed")
    files = GroupFiles(root, group)
    files.make()
    with files.locked(lock_timeout_ms / 1000.0, f"commit_offsets to group {group!r}"):
        generation = files.state().generation
        current = files.offsets()
        changed = False
        for tp, off in todo.items():
            cur = committed_offset(current.get(key(tp)), ids[tp])
            if cur is None or off > cur:
                ident = ids[tp]
                current[key(tp)] = [off, generation] + ([ident] if ident is not None else [])
                changed = True
        if changed:
            files.write_offsets(current)
    return {tp: int(current[key(tp)][0]) for tp in todo}


def committed_offsets(root: str | os.PathLike[str], group: str) -> dict[tuple[str, int], int]:
    """``{(topic, partition): committed offset}`` of ``group`` as its ``offsets.json``
    says, for the logs there now (an offset committed for a log deleted since, its
    topic made again, is not one); empty for a group that does not exist (yet)."""
    check_name(group, "group")
    root = os.path.abspath(os.fspath(root))
    check_root(root)      # someone else's directory: NotALogError
    files = GroupFiles(root, group)
    out = {}
    for k, v in files.offsets().items():
        tp = parse_key(files.offsets_path, k)
        try:
            ident = log_id(partition_dir(root, tp[0], tp[1])) if len(v) > 2 else None
        except SeglogError:
            ident = None
        c = committed_offset(v, ident)
        if c is not None:
            out[tp] = c
    return out

"""The KafkaRDD pattern: ``offset_ranges`` -> ``rdd`` -> the job's output -> ``commit``,
so a group's offsets move only after the output succeeded. Needs no pyspark but
for ``rdd``'s SparkContext."""

from __future__ import annotations

import functools
import logging
import os
from typing import TYPE_CHECKING, Iterable, Iterator

from .._runtime.files import require_dir
from ..consumer_group import ConsumerMessage, commit_offsets, committed_offsets
from ..errors import InvalidConfigError, OffsetOutOfRangeError
from ..log import Log
from ..topic import check_name, partition_dir, read_partition_count
from ._options import TP, OffsetRange
from ._plan import split_ranges

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext

_log = logging.getLogger("seglog")


def offset_ranges(root: str | os.PathLike[str], topics: Iterable[str],
                  min_partitions: int | None = None, group: str | None = None
                  ) -> list[OffsetRange]:
    """What there is to read now in ``topics`` under ``root``: per partition from
    ``group``'s committed offset (from the log start without a group, or where the
    group has none, or where retention deleted the committed offset) to the end
    offset. Empty ranges are left out; ``min_partitions`` splits as the source's
    option does. ``InvalidConfigError`` for an unknown topic or a bad name."""
    if isinstance(topics, str):
        raise TypeError("topics must be a list of topic names, not a str")
    names = sorted({check_name(t) for t in topics})
    if not names:
        raise InvalidConfigError("give at least one topic")
    if min_partitions is not None and (isinstance(min_partitions, bool)
                                       or not isinstance(min_partitions, int) or min_partitions < 1):
        raise InvalidConfigError(f"min_partitions must be a positive int, not {min_partitions!r}")
    base = os.path.abspath(os.fspath(root))
    require_dir(base, "topic root", create=True)      # a file: NotALogError
    committed = committed_offsets(base, group) if group is not None else {}
    ranges = []
    for t in names:
        n = read_partition_count(base, t)
        if n is None:
            raise InvalidConfigError(f"topic {t!r} does not exist under {base}")
        for p in range(n):
            with Log.open(partition_dir(base, t, p), readonly=True) as log:
                first, end = log.start_offset, log.end_offset
            frm = committed.get((t, p), first)
            if frm < first:
                _log.warning("seglog: group %s: committed offset %d of %s-%d was deleted by "
                             "retention; starting at the log start %d", group, frm, t, p, first)
                frm = first
            if frm > end:
                raise InvalidConfigError(f"group {group!r} committed offset {frm} of {t}-{p}, "
                                         f"past its end {end} (was the log replaced?)")
            ranges.append(OffsetRange(t, p, frm, end))
    return split_ranges(ranges, min_partitions)


def _checked(ranges: Iterable[OffsetRange]) -> list[OffsetRange]:
    out = []
    for r in ranges:
        if not isinstance(r, OffsetRange):
            raise TypeError(f"ranges must be OffsetRange, not {type(r).__name__}")
        check_name(r.topic)
        if not 0 <= r.fromOffset <= r.untilOffset:
            raise InvalidConfigError(f"bad offset range {r}")
        out.append(r)
    return out


def _messages(root: str, r: OffsetRange) -> Iterator[ConsumerMessage]:
    """The messages of one range, as ``ConsumerMessage``s (a task of ``rdd``)."""
    with Log.open(partition_dir(root, r.topic, r.partition), readonly=True) as log:
        if r.fromOffset < log.start_offset:
            raise OffsetOutOfRangeError(
                f"seglog: offsets {r.fromOffset} to {log.start_offset - 1} of "
                f"{r.topic}-{r.partition} were deleted (retention) before the job read them")
        lead = (r.topic, r.partition)
        for m in log.iter(r.fromOffset, r.untilOffset):
            yield ConsumerMessage(lead + m)
        if log.end_offset < r.untilOffset:
            raise OffsetOutOfRangeError(f"seglog: {r.topic}-{r.partition} ends at "
                                        f"{log.end_offset}, before the range's end {r.untilOffset}")


def rdd(sc: "SparkContext", root: str | os.PathLike[str], ranges: Iterable[OffsetRange]
        ) -> "RDD[ConsumerMessage]":
    """An RDD of the ranges' messages (``ConsumerMessage``: topic, partition, offset,
    timestamp, key, value, headers), one Spark partition per range, each read on
    an executor straight from the log files. A range whose offsets retention
    deleted fails its task."""
    todo = _checked(ranges)
    if not todo:
        return sc.emptyRDD()
    base = os.path.abspath(os.fspath(root))
    return sc.parallelize(todo, len(todo)).flatMap(functools.partial(_messages, base))


def commit(root: str | os.PathLike[str], group: str, ranges: Iterable[OffsetRange]
           ) -> dict[TP, int]:
    """Record the ranges as processed by ``group``: the committed offset of each
    partition becomes its ranges' largest ``untilOffset`` (never lower than it was).
    Call it after the job's output is safely written, so a failed job commits
    nothing and the next run reads the same offsets again. Returns the group's
    committed offsets of those partitions."""
    ends: dict[TP, int] = {}
    for r in _checked(ranges):
        tp = (r.topic, r.partition)
        ends[tp] = max(ends.get(tp, 0), r.untilOffset)
    return commit_offsets(root, group, ends) if ends else {}

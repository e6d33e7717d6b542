"""Planning: where a query starts and ends, the offset ranges between two positions
as Kafka splits them, a stream's rate limit, and Kafka's offsets JSON."""

from __future__ import annotations

import logging
import math
# Any: parsed JSON / JSON documents (dict[str, Any]): Spark's offsets; an opener of a Log or
# a Kafka partition
from typing import Any, Callable, Mapping, Sequence

from ..errors import InvalidConfigError, OffsetOutOfRangeError
from ..log import Log
from ._options import EARLIEST, LATEST, TP, OffsetRange, Options, Spec

_log = logging.getLogger("seglog")


class Logs:
    """Readonly logs by directory, opened once and kept (a stream's planner looks at
    the ends every trigger; a readonly log sees new data and segments by itself)."""

    def __init__(self, opener: Callable[[str], Any] | None = None) -> None:
        self._logs: dict[str, Any] = {}
        self._open = opener or (lambda d: Log.open(d, readonly=True))

    def get(self, directory: str) -> Log:
        log = self._logs.get(directory)
        if log is None:
            log = self._logs[directory] = self._open(directory)
        return log

    def close(self) -> None:
        logs, self._logs = self._logs, {}
        for log in logs.values():
            log.close()


def resolve_offsets(o: Options, logs: Logs, parts: list[TP], spec: Spec,
             ts: int | dict[TP, int] | None, name: str, starting: bool) -> dict[TP, int]:
    """Per partition, the offset a starting or ending option names (timestamps
    through the time index). Offsets in JSON are returned as given: the caller
    checks them against the log."""
    out = {}
    if isinstance(spec, dict) and ts is None:
        # Kafka's rule: specific offsets name every partition read, and no other
        if set(spec) != set(parts):
            raise InvalidConfigError(
                f"option {name} gives specific offsets, so it must name every partition "
                f"read and no other: missing {sorted(set(parts) - set(spec))}, unknown "
                f"{sorted(set(spec) - set(parts))}")
    if isinstance(ts, dict) and set(ts) != set(parts):
        what = "startingOffsetsByTimestamp" if starting else "endingOffsetsByTimestamp"
        raise InvalidConfigError(
            f"option {what} must name every partition read and no other: missing "
            f"{sorted(set(parts) - set(ts))}, unknown {sorted(set(ts) - set(parts))}")
    for tp in parts:
        log = logs.get(o.directory(tp))
        if ts is not None:
            t = ts if isinstance(ts, int) else ts[tp]
            off = log.offset_for_time(t)
            if off is None:
                # Kafka: an end with no record at or after the time is the latest;
                # a start follows startingOffsetsByTimestampStrategy
                if starting and o.ts_strategy == "error":
                    raise InvalidConfigError(
                        f"{tp[0]}-{tp[1]} has no message with a timestamp >= {t}; set "
                        f"startingOffsetsByTimestampStrategy=latest to start at the end there")
                off = log.end_offset
            out[tp] = off
            continue
        v = spec if isinstance(spec, str) else spec[tp]
        if v in ("earliest", EARLIEST):
            out[tp] = log.start_offset
        elif v in ("latest", LATEST):
            out[tp] = log.end_offset
        else:
            assert isinstance(v, int)
            end = log.end_offset
            if v > end:
                raise InvalidConfigError(f"option {name}: offset {v} of {tp[0]}-{tp[1]} is past "
                                         f"its end offset {end}")
            out[tp] = v
    return out


def data_loss(o: Options, tp: TP, wanted: int, start: int, where: str) -> None:
    """Offsets ``wanted..start-1`` were deleted before they were read: fail (the
    default), or log and go on at ``start`` with ``failOnDataLoss=false``."""
    msg = (f"seglog: offsets {wanted} to {start - 1} of {tp[0]}-{tp[1]} were deleted "
           f"(retention) before this query read them ({where}); the log now starts at "
           f"{start}. Some data was lost")
    if o.fail_on_data_loss:
        raise OffsetOutOfRangeError(f"{msg}. Set the source option failOnDataLoss=false to "
                                    f"skip ahead instead of failing")
    _log.warning("%s; skipping ahead (failOnDataLoss=false)", msg)


def plan(o: Options, logs: Logs, start: Mapping[TP, int],
          end: Mapping[TP, int]) -> list[OffsetRange]:
    """The ranges to read between two positions, each checked against the log as it
    is now (data deleted meanwhile: failOnDataLoss), split as Kafka splits them."""
    ranges = []
    for tp in sorted(end):
        until = end[tp]
        log = logs.get(o.directory(tp))
        first = log.start_offset
        frm = start.get(tp, first)         # a partition new to a stream: from its start
        if frm < first:
            data_loss(o, tp, frm, first, "when planning")
            if until <= first:             # the whole range is gone
                continue
            frm = first
        if until < frm:
            raise OffsetOutOfRangeError(
                f"seglog: {tp[0]}-{tp[1]} now ends at {until}, before offset {frm} that this "
                f"query had reached (was the log deleted and made again?)")
        ranges.append(OffsetRange(tp[0], tp[1], frm, until))
    return split_ranges(ranges, o.min_partitions, o.max_records_per_partition)


def split_ranges(ranges: Sequence[OffsetRange], min_partitions: int | None = None,
                 max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """Kafka's ``KafkaOffsetRangeCalculator``: empty ranges dropped; ranges above
    ``max_records_per_partition`` cut into equal parts; then, if there are fewer
    than ``min_partitions``, each range is cut into parts proportional to its size
    (rounded, so the count is about ``min_partitions``), ranges that would get one
    part kept whole (they are left out of the shares)."""
    out = [r for r in ranges if r.untilOffset > r.fromOffset]
    if max_records_per_partition is not None:
        out = [part for r in out
               for part in _divide(r, math.ceil(_size(r) / max_records_per_partition))]
    if min_partitions is None or len(out) >= min_partitions:
        return out
    total = sum(map(_size, out))
    whole = {r for r in out if _part_count(_size(r), total, min_partitions) == 1}
    split_total = total - sum(map(_size, whole))
    split_min = max(min_partitions - len(whole), 1)
    return [part for r in out
            for part in _divide(r, 1 if r in whole else
                                _part_count(_size(r), split_total, split_min))]


def _size(r: OffsetRange) -> int:
    return r.untilOffset - r.fromOffset


def _part_count(size: int, total: int, min_parts: int) -> int:
    # Scala's math.round: half up
    return max(math.floor(size / total * min_parts + 0.5), 1)


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """``parts`` consecutive pieces; integer division, the last ones take the rest."""
    out, remaining, start = [], _size(r), r.fromOffset
    for part in range(parts):
        this = remaining // (parts - part)
        remaining -= this
        end = min(start + this, r.untilOffset)
        if end > start:
            out.append(OffsetRange(r.topic, r.partition, start, end))
        start = end
    return out


def rate_limit(limit: int, start: Mapping[TP, int], latest: Mapping[TP, int]) -> dict[TP, int]:
    """Kafka's ``maxOffsetsPerTrigger``: ``limit`` offsets shared among the partitions
    in proportion to what each has to read (a share below 1 is rounded up, so small
    partitions are not starved; others rounded down), never past ``latest``."""
    sizes = {tp: end - start[tp] for tp, end in latest.items()
             if tp in start and end - start[tp] > 0}
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        if tp not in sizes:
            out[tp] = end
            continue
        share = limit * (sizes[tp] / total)
        n = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, start[tp] + n)
    return out


def to_json(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """Kafka's offset JSON, topics and partitions in order (the JVM keeps offsets as
    JSON text: the same offsets must give the same text)."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), off in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = off
    return out


def from_json(offsets: Mapping[str, Any]) -> dict[TP, int]:
    return {(t, int(p)): int(off) for t, parts in offsets.items() for p, off in parts.items()}

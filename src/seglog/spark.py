"""Spark reads seglog topics straight off disk, as Spark's Kafka source reads Kafka
(docs/SPARK.md).

* ``register(spark)`` registers ``SeglogDataSource`` as the format ``"seglog"``:
  ``spark.read.format("seglog")`` (batch) and ``spark.readStream.format("seglog")``
  (micro-batch, ``Trigger.AvailableNow``, admission control), with the Kafka
  source's schema and option names.
* The KafkaRDD pattern: ``offset_ranges`` -> ``rdd`` -> the job's output -> ``commit``,
  so a group's offsets move only after the output succeeded.

Importing this module imports neither pyspark nor pyarrow: the data source classes
subclass pyspark's, so they are made on first use (``register``, or the attribute
``SeglogDataSource``), and Arrow is imported where batches are built. The
offset-range functions work without pyspark.
"""

from __future__ import annotations

import bisect
import functools
import json
import logging
import math
import os
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, NamedTuple, Sequence

from ._files import MARKER, list_topics, require_dir
from .consumer_group import ConsumerMessage, commit_offsets, committed_offsets
from .errors import GroupBusyError, InvalidConfigError, OffsetOutOfRangeError
from .log import Log
from .message import Columns
from .topic import check_name, partition_dir, read_partition_count

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadLimit
    from pyspark.sql.types import StructType

__all__ = ["register", "OffsetRange", "offset_ranges", "rdd", "commit", "SeglogDataSource"]

_log = logging.getLogger("seglog")
TP = tuple[str, int]
EARLIEST, LATEST = -2, -1        # Kafka's offsets JSON: -2 earliest, -1 latest
# one Log.read per this many bytes of batches: one Arrow RecordBatch of some 20 k
# rows of 200 bytes; larger chunks measured slower (cache misses), smaller ones pay
# the per-read cost more often
_CHUNK_BYTES = 4 << 20


class OffsetRange(NamedTuple):
    """Offsets ``fromOffset <= offset < untilOffset`` of one partition, as Kafka's
    ``OffsetRange``; also the value of each Spark input partition of the source."""

    topic: str
    partition: int
    fromOffset: int
    untilOffset: int


# -- options -------------------------------------------------------------------------

# Kafka's names; Spark hands them over lower-cased (options are case-insensitive)
_OPTIONS = ("path", "subscribe", "subscribePattern", "assign", "startingOffsets",
            "endingOffsets", "startingTimestamp", "startingOffsetsByTimestamp",
            "startingOffsetsByTimestampStrategy", "endingTimestamp",
            "endingOffsetsByTimestamp", "minPartitions", "maxRecordsPerPartition",
            "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
            "failOnDataLoss", "groupId", "includeHeaders")
_CANON = {o.lower(): o for o in _OPTIONS}
_BATCH_ONLY = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
_DURATION = re.compile(r"\s*(\d+)\s*(us|ms|s|m|min|h|d)?\s*", re.IGNORECASE)
_UNIT_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
            "d": 86_400_000}

# where to start or end: "earliest", "latest", or per partition an offset (or -2/-1)
Spec = str | dict[TP, int]


@dataclass(frozen=True)
class _Options:
    """The source's options, parsed and checked (``_parse_options``)."""

    root: str                                  # the topic root, or the log directory
    single: bool                               # path is one log directory
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[TP, ...] = ()
    starting: Spec = "earliest"
    ending: Spec = "latest"
    starting_ts: int | dict[TP, int] | None = None
    ts_strategy: str = "error"
    ending_ts: int | dict[TP, int] | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    fail_on_data_loss: bool = True
    group_id: str | None = None
    include_headers: bool = False

    def directory(self, tp: TP) -> str:
        return self.root if self.single else partition_dir(self.root, tp[0], tp[1])

    def partitions(self, must_exist: bool) -> list[TP]:
        """The partitions read now: subscribed topics' (a topic that does not exist
        is an error when ``must_exist``, else it has none yet), the pattern's, or
        the assigned ones."""
        if self.single:
            return [(os.path.basename(self.root), 0)]
        if self.assign:
            out = []
            for t, p in self.assign:
                n = read_partition_count(self.root, t)
                if n is None or p >= n:
                    if must_exist:
                        raise InvalidConfigError(
                            f"assign: {t}-{p} does not exist under {self.root}")
                    continue
                out.append((t, p))
            return out
        if self.pattern is not None:
            rx = re.compile(self.pattern)
            topics = [t for t in list_topics(self.root) if rx.fullmatch(t)]
        else:
            topics = list(self.subscribe)
        out = []
        for t in topics:
            n = read_partition_count(self.root, t)
            if n is None:
                if must_exist and self.pattern is None:
                    raise InvalidConfigError(f"subscribe: topic {t!r} does not exist under "
                                             f"{self.root}")
                continue
            out += [(t, p) for p in range(n)]
        return out


def _bool(name: str, v: str) -> bool:
    s = v.strip().lower()
    if s not in ("true", "false"):
        raise InvalidConfigError(f"option {name} must be true or false, not {v!r}")
    return s == "true"


def _positive(name: str, v: str) -> int:
    try:
        n = int(v.strip())
    except ValueError:
        raise InvalidConfigError(f"option {name} must be a positive integer, not {v!r}") from None
    if n < 1:
        raise InvalidConfigError(f"option {name} must be a positive integer, not {v!r}")
    return n


def _timestamp(name: str, v: str) -> int:
    try:
        n = int(v.strip())
    except ValueError:
        raise InvalidConfigError(f"option {name} must be milliseconds since the epoch, "
                                 f"not {v!r}") from None
    if n < 0:
        raise InvalidConfigError(f"option {name} must be >= 0, not {v!r}")
    return n


def _duration_ms(name: str, v: str) -> int:
    m = _DURATION.fullmatch(v)
    if not m:
        raise InvalidConfigError(f"option {name} must be a duration such as 15m, 30s or "
                                 f"500ms, not {v!r}")
    return int(int(m.group(1)) * _UNIT_MS[(m.group(2) or "ms").lower()])


def _per_partition(name: str, v: str, lo: int) -> dict[TP, int]:
    """Kafka's per-partition JSON, ``{"topic": {"0": 23, "1": -1}}``."""
    try:
        raw = json.loads(v)
    except ValueError as e:
        raise InvalidConfigError(f"option {name} is not valid JSON ({e}): {v!r}") from None
    if not isinstance(raw, dict):
        raise InvalidConfigError(f'option {name} must be "earliest", "latest" or JSON like '
                                 f'{{"topic":{{"0":23,"1":-1}}}}, not {v!r}')
    out = {}
    for t, parts in raw.items():
        check_name(t)
        if not isinstance(parts, dict):
            raise InvalidConfigError(f"option {name}: topic {t!r} needs an object of "
                                     f"partition -> value, not {parts!r}")
        for p, off in parts.items():
            if not (isinstance(p, str) and p.isdigit()) or isinstance(off, bool) \
                    or not isinstance(off, int) or off < lo:
                raise InvalidConfigError(f"option {name}: bad entry {t}/{p!r}: {off!r}")
            out[(t, int(p))] = off
    return out


def _offsets_spec(name: str, v: str | None, default: str, streaming: bool | None) -> Spec:
    if v is None:
        return default
    s = v.strip().lower()
    if s in ("earliest", "latest"):
        spec: Spec = s
    else:
        spec = _per_partition(name, v, EARLIEST)
    # Kafka's rules: a batch cannot start at latest nor end at earliest
    start = name == "startingOffsets"
    if streaming is False:
        bad = LATEST if start else EARLIEST
        if spec == ("latest" if start else "earliest") or \
                (isinstance(spec, dict) and bad in spec.values()):
            raise InvalidConfigError(
                f"option {name}: a batch query cannot {'start at latest' if start else 'end at earliest'}"
                f" ({'-1' if start else '-2'} or {'latest' if start else 'earliest'})")
    return spec


def _parse_options(options: Mapping[str, str], streaming: bool | None) -> _Options:
    """The checked options of a batch query, a stream (``streaming``), or either
    (None: the checks that do not depend on it); ``InvalidConfigError`` names what
    is wrong."""
    opts = {k.lower(): v for k, v in options.items()}
    unknown = sorted(k for k in opts if k not in _CANON)
    if unknown:
        raise InvalidConfigError(f"unknown option(s) of the seglog source: {', '.join(unknown)}; "
                                 f"known: {', '.join(_OPTIONS)}")

    def get(name: str) -> str | None:
        v = opts.get(name.lower())
        if v is not None and not isinstance(v, str):
            v = str(v)
        return v

    for name in (_BATCH_ONLY if streaming else ()):
        if get(name) is not None:
            raise InvalidConfigError(f"option {name} is for batch queries; a stream runs on "
                                     f"(use Trigger.AvailableNow to stop at the end)")
    path = get("path")
    if not path:
        raise InvalidConfigError("the seglog source needs a path: a topic root (with subscribe, "
                                 "subscribePattern or assign) or one log directory")
    root = os.path.abspath(os.path.expanduser(path))
    how = [n for n in ("subscribe", "subscribePattern", "assign") if get(n) is not None]
    if len(how) > 1:
        raise InvalidConfigError(f"give only one of subscribe, subscribePattern and assign, "
                                 f"not {' and '.join(how)}")
    kw: dict[str, Any] = {}
    if not how:
        if not os.path.isfile(os.path.join(root, MARKER)):
            raise InvalidConfigError(
                f"{root} is not a seglog log directory; to read topics under a root give "
                f"subscribe=topic1,topic2 (or subscribePattern, assign)")
        single = True
    else:
        single = False
        if not os.path.isdir(root):
            raise InvalidConfigError(f"path {root} is not a directory")
        if how[0] == "subscribe":
            topics = [t.strip() for t in (get("subscribe") or "").split(",") if t.strip()]
            if not topics:
                raise InvalidConfigError("option subscribe names no topic")
            kw["subscribe"] = tuple(sorted({check_name(t) for t in topics}))
        elif how[0] == "subscribePattern":
            pattern = get("subscribePattern") or ""
            try:
                re.compile(pattern)
            except re.error as e:
                raise InvalidConfigError(f"option subscribePattern is not a regular "
                                         f"expression: {e}") from None
            kw["pattern"] = pattern
        else:
            assigned = _per_partition_list(get("assign") or "")
            kw["assign"] = tuple(sorted(assigned))
    kw["starting"] = _offsets_spec("startingOffsets", get("startingOffsets"),
                                   "latest" if streaming else "earliest", streaming)
    if streaming is not True:
        kw["ending"] = _offsets_spec("endingOffsets", get("endingOffsets"), "latest", streaming)
    # Kafka's precedence: startingTimestamp over startingOffsetsByTimestamp over
    # startingOffsets (the same for the ends)
    for name, by, key in (("startingTimestamp", "startingOffsetsByTimestamp", "starting_ts"),
                          ("endingTimestamp", "endingOffsetsByTimestamp", "ending_ts")):
        v, vby = get(name), get(by)
        if v is not None:
            kw[key] = _timestamp(name, v)
        elif vby is not None:
            kw[key] = _per_partition(by, vby, 0)
    strategy = (get("startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise InvalidConfigError(f"option startingOffsetsByTimestampStrategy must be error or "
                                 f"latest, not {strategy!r}")
    kw["ts_strategy"] = strategy
    for name, key in (("minPartitions", "min_partitions"),
                      ("maxRecordsPerPartition", "max_records_per_partition"),
                      ("maxOffsetsPerTrigger", "max_offsets_per_trigger"),
                      ("minOffsetsPerTrigger", "min_offsets_per_trigger")):
        v = get(name)
        if v is not None:
            kw[key] = _positive(name, v)
    v = get("maxTriggerDelay")
    if v is not None:
        kw["max_trigger_delay_ms"] = _duration_ms("maxTriggerDelay", v)
    for name, key in (("failOnDataLoss", "fail_on_data_loss"),
                      ("includeHeaders", "include_headers")):
        v = get(name)
        if v is not None:
            kw[key] = _bool(name, v)
    v = get("groupId")
    if v is not None:
        kw["group_id"] = check_name(v, "group")
        if single:
            raise InvalidConfigError("option groupId needs topics (a root with subscribe, "
                                     "subscribePattern or assign), not one log directory")
        if streaming is False:
            raise InvalidConfigError("option groupId records a stream's progress; a batch "
                                     "query commits nothing (for batch jobs: "
                                     "seglog.spark.offset_ranges, rdd and commit)")
    return _Options(root=root, single=single, **kw)


def _per_partition_list(v: str) -> list[TP]:
    """Kafka's ``assign`` JSON: ``{"topicA": [0, 1], "topicB": [2]}``."""
    try:
        raw = json.loads(v)
    except ValueError as e:
        raise InvalidConfigError(f"option assign is not valid JSON ({e}): {v!r}") from None
    if not isinstance(raw, dict) or not raw:
        raise InvalidConfigError(f'option assign must be JSON like {{"topicA":[0,1]}}, not {v!r}')
    out = set()
    for t, ps in raw.items():
        check_name(t)
        if not isinstance(ps, list) or not all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in ps):
            raise InvalidConfigError(f"option assign: topic {t!r} needs a list of partition "
                                     f"numbers, not {ps!r}")
        out |= {(t, p) for p in ps}
    return sorted(out)


# -- offsets -------------------------------------------------------------------------

class _Logs:
    """Readonly logs by directory, opened once and kept (a stream's planner looks at
    the ends every trigger; a readonly log sees new data and segments by itself)."""

    def __init__(self) -> None:
        self._logs: dict[str, Log] = {}

    def get(self, directory: str) -> Log:
        log = self._logs.get(directory)
        if log is None:
            log = self._logs[directory] = Log.open(directory, readonly=True)
        return log

    def close(self) -> None:
        logs, self._logs = self._logs, {}
        for log in logs.values():
            log.close()


def _resolve(o: _Options, logs: _Logs, parts: list[TP], spec: Spec,
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


def _data_loss(o: _Options, tp: TP, wanted: int, start: int, where: str) -> None:
    """Offsets ``wanted..start-1`` were deleted before they were read: fail (the
    default), or log and go on at ``start`` with ``failOnDataLoss=false``."""
    msg = (f"seglog: offsets {wanted} to {start - 1} of {tp[0]}-{tp[1]} were deleted "
           f"(retention) before this query read them ({where}); the log now starts at "
           f"{start}. Some data was lost")
    if o.fail_on_data_loss:
        raise OffsetOutOfRangeError(f"{msg}. Set the source option failOnDataLoss=false to "
                                    f"skip ahead instead of failing")
    _log.warning("%s; skipping ahead (failOnDataLoss=false)", msg)


def _plan(o: _Options, logs: _Logs, start: Mapping[TP, int],
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
            _data_loss(o, tp, frm, first, "when planning")
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


def _to_json(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """Kafka's offset JSON, topics and partitions in order (the JVM keeps offsets as
    JSON text: the same offsets must give the same text)."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), off in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = off
    return out


def _from_json(offsets: Mapping[str, Any]) -> dict[TP, int]:
    return {(t, int(p)): int(off) for t, parts in offsets.items() for p, off in parts.items()}


# -- Arrow batches in Spark's layout -------------------------------------------------

def _spark_schema(include_headers: bool) -> "StructType":
    """The Kafka source's schema (all fields nullable, as Kafka's)."""
    from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType,
                                   StructField, StructType, TimestampType)
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType(
            [StructField("key", StringType()), StructField("value", BinaryType())]))))
    return StructType(fields)


def _header_type(pa: Any) -> Any:
    return pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])


@functools.lru_cache(maxsize=None)
def arrow_schema(include_headers: bool = False) -> Any:
    """The ``pyarrow.Schema`` Spark expects of the source's batches (what
    ``to_arrow_schema`` makes of the Kafka schema): batches equal to it pass into
    Spark without a Python step per row."""
    import pyarrow as pa
    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()),
              pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
              pa.field("offset", pa.int64()), pa.field("timestamp", pa.timestamp("us", tz="UTC")),
              pa.field("timestampType", pa.int32())]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.field("element", _header_type(pa)))))
    return pa.schema(fields)


def spark_batch(cols: Columns, topic: str, partition: int, include_headers: bool = False) -> Any:
    """``cols`` as a ``pyarrow.RecordBatch`` of ``arrow_schema(include_headers)``.

    Whole-column operations only (no Python object per message) unless headers are
    asked for and present: values and keys keep their buffers, timestamps become
    microseconds in one multiplication, topic and partition are repeated arrays.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    n = len(cols.offsets)
    offsets, ms, keys, values = cols.arrow_arrays()
    stamps = pc.multiply(ms, 1000).view(pa.timestamp("us", tz="UTC"))
    arrays = [keys, values, pa.repeat(pa.scalar(topic, pa.string()), n),
              pa.repeat(pa.scalar(partition, pa.int32()), n), offsets, stamps,
              pa.repeat(pa.scalar(0, pa.int32()), n)]    # 0: CreateTime, as Kafka's producer
    if include_headers:
        htype = pa.list_(pa.field("element", _header_type(pa)))
        if cols.headers is None:
            arrays.append(pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)),
                                                   pa.array([], type=_header_type(pa)),
                                                   type=htype))
        else:
            arrays.append(pa.array([[{"key": k, "value": v} for k, v in h] for h in cols.headers],
                                   type=htype))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(include_headers))


def _below(offsets: Sequence[int], until: int) -> int:
    """How many of the ascending ``offsets`` are below ``until``."""
    if isinstance(offsets, range):
        return len(range(offsets.start, min(offsets.stop, until)))
    return bisect.bisect_left(offsets, until)


def read_range(o: _Options, r: OffsetRange) -> Iterator[Any]:
    """The messages of ``r`` as Arrow batches in Spark's layout, read a chunk of whole
    batches at a time (``Log.read`` -> ``MessageSet.columns()``). Offsets deleted
    before they were read: ``failOnDataLoss``."""
    tp = (r.topic, r.partition)
    with Log.open(o.directory(tp), readonly=True) as log:
        pos = r.fromOffset
        while pos < r.untilOffset:
            try:
                ms = log.read(pos, _CHUNK_BYTES)
            except OffsetOutOfRangeError:
                first = log.start_offset
                if pos >= first:     # past the end: the log is shorter than planned
                    raise OffsetOutOfRangeError(
                        f"seglog: {r.topic}-{r.partition} ends at {log.end_offset}, before "
                        f"offset {pos} of the range {r.fromOffset} to {r.untilOffset} "
                        f"(was the log replaced?)") from None
                _data_loss(o, tp, pos, first, "while reading")
                pos = first
                continue
            if not ms:
                if ms.next_offset > pos:     # batches compaction emptied
                    pos = ms.next_offset
                    continue
                raise OffsetOutOfRangeError(
                    f"seglog: {r.topic}-{r.partition} ends at {pos}, before the end "
                    f"{r.untilOffset} of the range read (was the log replaced?)")
            cols = ms.columns()
            batch = spark_batch(cols, r.topic, r.partition, o.include_headers)
            k = _below(cols.offsets, r.untilOffset)
            if k < batch.num_rows:
                batch = batch.slice(0, k)
            if batch.num_rows:
                yield batch
            pos = ms.next_offset


# -- the data source -----------------------------------------------------------------

class _Source:
    """The ``"seglog"`` data source: Spark's Kafka source over seglog topics (or one
    log directory) on disk. Options: docs/SPARK.md."""

    options: Any          # set by pyspark's DataSource.__init__: case-insensitive str -> str

    @classmethod
    def name(cls) -> str:
        return "seglog"

    def schema(self) -> "StructType":
        # checks the options now, so that a bad one fails load(), not a task (whether
        # it is a batch or a stream is known only to reader() and streamReader())
        o = _parse_options(self.options, streaming=None)
        return _spark_schema(o.include_headers)

    def _check_schema(self, schema: "StructType", o: _Options) -> None:
        want = _spark_schema(o.include_headers)
        if schema != want:
            raise InvalidConfigError(f"the seglog source has a fixed schema (Kafka's), "
                                     f"{want.simpleString()}; it cannot read as "
                                     f"{schema.simpleString()}")

    def reader(self, schema: "StructType") -> "DataSourceReader":
        o = _parse_options(self.options, streaming=False)
        self._check_schema(schema, o)
        cls: Any = _spark_classes()["SeglogReader"]
        return cls(o)   # type: ignore[no-any-return]

    def streamReader(self, schema: "StructType") -> "DataSourceStreamReader":
        o = _parse_options(self.options, streaming=True)
        self._check_schema(schema, o)
        cls: Any = _spark_classes()["SeglogStreamReader"]
        return cls(o)   # type: ignore[no-any-return]


class _Reader:
    """What the batch and stream readers share: the options and reading a range."""

    def __init__(self, o: _Options) -> None:
        self.o = o
        self._logs = _Logs()

    def __getstate__(self) -> dict[str, Any]:
        # readers go to executors by pickle: open logs stay behind
        state = self.__dict__.copy()
        state["_logs"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._logs = _Logs()

    def read(self, partition: "InputPartition") -> Iterator[Any]:
        r = partition.value
        if r is None:              # pyspark's stand-in for a plan of no partitions
            return iter(())
        return read_range(self.o, r)

    def _partitions(self, ranges: list[OffsetRange]) -> list["InputPartition"]:
        from pyspark.sql.datasource import InputPartition
        return [InputPartition(r) for r in ranges]


class _BatchReader(_Reader):
    """Batch reads: the ranges from the starting to the ending offsets, as they are
    when the query is planned."""

    def partitions(self) -> list["InputPartition"]:
        o = self.o
        try:
            parts = o.partitions(must_exist=True)
            start = _resolve(o, self._logs, parts, o.starting, o.starting_ts,
                             "startingOffsets", True)
            end = _resolve(o, self._logs, parts, o.ending, o.ending_ts, "endingOffsets", False)
            for tp in parts:
                if end[tp] < start[tp]:
                    raise InvalidConfigError(
                        f"{tp[0]}-{tp[1]}: the starting offset {start[tp]} is after the "
                        f"ending offset {end[tp]}")
            return self._partitions(_plan(o, self._logs, start, end))
        finally:
            self._logs.close()


class _StreamReader(_Reader):
    """Micro-batch reads. Offsets are Kafka's JSON (``{"topic": {"0": 42}}``, the next
    offset of each partition); Spark's checkpoint keeps them, so a restarted query
    goes on where it stopped. Admission control: ``maxOffsetsPerTrigger`` (prorated
    as Kafka does) and ``minOffsetsPerTrigger`` with ``maxTriggerDelay``;
    ``Trigger.AvailableNow`` reads what exists when the query starts, then stops."""

    def __init__(self, o: _Options) -> None:
        super().__init__(o)
        self._target: dict[TP, int] | None = None     # Trigger.AvailableNow's end
        self._last_trigger_ms = 0.0                   # Kafka's: the first batch never waits
        self._reported: dict[TP, int] = {}            # what the group was last told

    def _ends(self) -> dict[TP, int]:
        if self._target is not None:
            return dict(self._target)
        return {tp: self._logs.get(self.o.directory(tp)).end_offset
                for tp in self.o.partitions(must_exist=False)}

    def initialOffset(self) -> dict[str, Any]:
        o = self.o
        parts = o.partitions(must_exist=False)
        return _to_json(_resolve(o, self._logs, parts, o.starting, o.starting_ts,
                                 "startingOffsets", True))

    def getDefaultReadLimit(self) -> "ReadLimit":
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows
        if self.o.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.o.max_offsets_per_trigger)
        if self.o.min_offsets_per_trigger is not None:
            return ReadMinRows(self.o.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = None
        self._target = self._ends()

    def latestOffset(self, start: dict[str, Any], limit: "ReadLimit") -> dict[str, Any]:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows
        o = self.o
        frm = _from_json(start)
        # Spark plans a batch from the end of the last one only after that one is
        # done (its commit log written): the group learns it now, not one batch late
        # when Spark calls commit() while planning the next batch
        self._report(frm)
        ends = self._ends()
        latest = dict(ends)
        for tp, off in frm.items():
            latest.setdefault(tp, off)        # a partition no longer listed stays put
        if isinstance(limit, ReadAllAvailable):
            return _to_json(latest)
        begin = {tp: self._begin(tp, frm.get(tp)) if tp in ends else frm[tp] for tp in latest}
        lower = limit.min_rows if isinstance(limit, ReadMinRows) else o.min_offsets_per_trigger
        upper = limit.max_rows if isinstance(limit, ReadMaxRows) else o.max_offsets_per_trigger
        # minOffsetsPerTrigger would make AvailableNow wait for data that never comes
        if lower is not None and self._target is None:
            now = time.time() * 1000
            if now - self._last_trigger_ms < o.max_trigger_delay_ms:
                available = sum(max(0, latest[tp] - begin[tp]) for tp in latest)
                if available < lower:
                    return start
            self._last_trigger_ms = now
        if upper is not None:
            latest = rate_limit(upper, begin, latest)
        return _to_json(latest)

    def _begin(self, tp: TP, position: int | None) -> int:
        """Where the next micro-batch of ``tp`` starts reading, for the limits: the
        stream's position; the log start for a partition new to the stream (as
        Kafka's); and, with ``failOnDataLoss=false``, the log start when retention
        deleted offsets the stream had not read. The batch then goes on from the
        new start at once (its plan reports the loss, once) instead of stepping
        through the deleted offsets ``maxOffsetsPerTrigger`` at a time, one empty
        batch each, and ``minOffsetsPerTrigger`` counts only offsets that exist."""
        first = self._logs.get(self.o.directory(tp)).start_offset
        if position is None or (position < first and not self.o.fail_on_data_loss):
            return first
        return position

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return _to_json(self._ends())

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list["InputPartition"]:
        return self._partitions(_plan(self.o, self._logs, _from_json(start), _from_json(end)))

    def commit(self, end: dict[str, Any]) -> None:
        self._report(_from_json(end))

    def _report(self, done: dict[TP, int]) -> None:
        """With ``groupId``: record processed offsets in the seglog group, for
        ``describe_group``'s lag. The checkpoint stays what the query resumes from."""
        if self.o.group_id is None or not done or done == self._reported:
            return
        try:
            commit_offsets(self.o.root, self.o.group_id, done)
        except (OffsetOutOfRangeError, GroupBusyError) as e:
            # the report only shows lag (the checkpoint is the truth): retention past
            # the reported offsets or a stalled group must not fail the query
            _log.warning("seglog: group %s not told the query's offsets: %s",
                         self.o.group_id, e)
            return
        self._reported = done

    def stop(self) -> None:
        self._logs.close()


_CLASSES: dict[str, type] = {}
_SPARK_NAMES = ("SeglogDataSource", "SeglogReader", "SeglogStreamReader")


def _spark_classes() -> dict[str, type]:
    """The classes Spark sees, made once: the behaviour above on pyspark's bases
    (pyspark is imported here, not when seglog.spark is). Named as module
    attributes, so pickle finds them by reference on the executors."""
    if _CLASSES:
        return _CLASSES
    try:
        from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
        from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
    except ImportError as e:
        raise ImportError(f"the seglog Spark source needs pyspark >= 4.2 with pyarrow: "
                          f"pip install 'seglog[spark]' ({e})") from e

    class SeglogDataSource(_Source, DataSource):
        __doc__ = _Source.__doc__

    class SeglogReader(_BatchReader, DataSourceReader):
        __doc__ = _BatchReader.__doc__

    class SeglogStreamReader(_StreamReader, DataSourceStreamReader, SupportsTriggerAvailableNow):
        __doc__ = _StreamReader.__doc__

    made: dict[str, type] = {"SeglogDataSource": SeglogDataSource, "SeglogReader": SeglogReader,
                             "SeglogStreamReader": SeglogStreamReader}
    for name, cls in made.items():
        cls.__module__ = __name__
        cls.__qualname__ = name
        globals()[name] = cls
    _CLASSES.update(made)
    return _CLASSES


def __getattr__(name: str) -> Any:
    if name in _SPARK_NAMES:
        return _spark_classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(spark: "SparkSession") -> None:
    """Register the ``"seglog"`` format with ``spark``: then
    ``spark.read.format("seglog")`` and ``spark.readStream.format("seglog")``.
    Executors' Python must import seglog (``PYSPARK_PYTHON``, docs/SPARK.md)."""
    spark.dataSource.register(_spark_classes()["SeglogDataSource"])


# -- the KafkaRDD pattern --------------------------------------------------------------

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

"""The source's options, parsed and checked with Kafka's names and rules, and the
offset range, the unit of every plan (docs/SPARK.md, Options)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

from .._runtime.files import MARKER, list_topics
from ..errors import InvalidConfigError
from ..log import Log
from ..topic import check_name, partition_dir, read_partition_count
from . import _kafka

TP = tuple[str, int]
EARLIEST, LATEST = -2, -1        # Kafka's offsets JSON: -2 earliest, -1 latest


class OffsetRange(NamedTuple):
    """Offsets ``fromOffset <= offset < untilOffset`` of one partition, as Kafka's
    ``OffsetRange``; also the value of each Spark input partition of the source."""

    topic: str
    partition: int
    fromOffset: int
    untilOffset: int



# Kafka's names; Spark hands them over lower-cased (options are case-insensitive)
_OPTIONS = ("path", "subscribe", "subscribePattern", "assign", "startingOffsets",
            "endingOffsets", "startingTimestamp", "startingOffsetsByTimestamp",
            "startingOffsetsByTimestampStrategy", "endingTimestamp",
            "endingOffsetsByTimestamp", "minPartitions", "maxRecordsPerPartition",
            "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
            "failOnDataLoss", "groupId", "includeHeaders", *_kafka.OPTIONS)
_CANON = {o.lower(): o for o in _OPTIONS}
_BATCH_ONLY = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
_DURATION = re.compile(r"\s*(\d+)\s*(us|ms|s|m|min|h|d)?\s*", re.IGNORECASE)
_UNIT_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
            "d": 86_400_000}

# where to start or end: "earliest", "latest", or per partition an offset (or -2/-1)
Spec = str | dict[TP, int]


@dataclass(frozen=True)
class Options:
    """The source's options, parsed and checked (``parse_options``)."""

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
    kafka_dirs: tuple[str, ...] = ()           # kafka.logDirs: Kafka's own files (_kafka)
    isolation: str = "read_uncommitted"

    def open_log(self, directory: str) -> Any:
        """The readonly log the planner and readers use: a seglog ``Log``, or over
        Kafka's files a ``_kafka.KafkaLog``."""
        if self.kafka_dirs:
            return _kafka.KafkaLog(directory, self.isolation)
        return Log.open(directory, readonly=True)

    def directory(self, tp: TP) -> str:
        if self.kafka_dirs:
            return _kafka.directory(self, tp)
        return self.root if self.single else partition_dir(self.root, tp[0], tp[1])

    def partitions(self, must_exist: bool) -> list[TP]:
        """The partitions read now: subscribed topics' (a topic that does not exist
        is an error when ``must_exist``, else it has none yet), the pattern's, or
        the assigned ones."""
        if self.single:
            return [(os.path.basename(self.root), 0)]
        if self.kafka_dirs:
            return _kafka.partitions(self, must_exist)
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


def parse_options(options: Mapping[str, str], streaming: bool | None) -> Options:
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
    kafka_kw = _kafka.parse(get)
    path = get("path") or ("" if kafka_kw else None)
    if not path and not kafka_kw:
        raise InvalidConfigError("the seglog source needs a path: a topic root (with subscribe, "
                                 "subscribePattern or assign) or one log directory")
    root = os.path.abspath(os.path.expanduser(path)) if path else ""
    how = [n for n in ("subscribe", "subscribePattern", "assign") if get(n) is not None]
    if len(how) > 1:
        raise InvalidConfigError(f"give only one of subscribe, subscribePattern and assign, "
                                 f"not {' and '.join(how)}")
    kw: dict[str, Any] = dict(kafka_kw)
    if kafka_kw and not how:
        raise InvalidConfigError("option kafka.logDirs needs subscribe, subscribePattern or "
                                 "assign: the topics to read there")
    if not how:
        if not os.path.isfile(os.path.join(root, MARKER)):
            raise InvalidConfigError(
                f"{root} is not a seglog log directory; to read topics under a root give "
                f"subscribe=topic1,topic2 (or subscribePattern, assign)")
        single = True
    else:
        single = False
        if not kafka_kw and not os.path.isdir(root):
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
    for name, key, parse in (("minPartitions", "min_partitions", _positive),
                             ("maxRecordsPerPartition", "max_records_per_partition", _positive),
                             ("maxOffsetsPerTrigger", "max_offsets_per_trigger", _positive),
                             ("minOffsetsPerTrigger", "min_offsets_per_trigger", _positive),
                             ("maxTriggerDelay", "max_trigger_delay_ms", _duration_ms),
                             ("failOnDataLoss", "fail_on_data_loss", _bool),
                             ("includeHeaders", "include_headers", _bool)):
        v = get(name)
        if v is not None:
            kw[key] = parse(name, v)
    v = get("groupId")
    if v is not None:
        kw["group_id"] = check_name(v, "group")
        if kafka_kw:
            raise InvalidConfigError("option groupId records progress in a seglog topic root; "
                                     "Kafka's log dirs are read-only")
        if single:
            raise InvalidConfigError("option groupId needs topics (a root with subscribe, "
                                     "subscribePattern or assign), not one log directory")
        if streaming is False:
            raise InvalidConfigError("option groupId records a stream's progress; a batch "
                                     "query commits nothing (for batch jobs: "
                                     "seglog.spark.offset_ranges, rdd and commit)")
    return Options(root=root, single=single, **kw)


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

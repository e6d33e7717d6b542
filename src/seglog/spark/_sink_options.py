"""The sink's options and the columns it takes (Spark's Kafka sink's), checked on the
driver before any task runs (docs/SPARK.md, Writing)."""

from __future__ import annotations

import difflib
import os
import typing
from dataclasses import dataclass, fields
# Any: a field of pyspark's schema, or None
from typing import TYPE_CHECKING, Any, Mapping

from ..config import LogConfig
from ..errors import InvalidConfigError
from ..topic import MAX_PARTITIONS, check_name

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

# Spark hands option names over lower-cased (they are case-insensitive)
_OPTIONS = ("path", "topic", "partitions", "checkpointLocation", "lockTimeoutMs")
_CANON = {o.lower(): o for o in _OPTIONS}
LOG_PREFIX = "log."             # log.<setting>: a LogConfig setting of topics the sink creates
_SETTINGS = {f.name: f for f in fields(LogConfig)}


@dataclass(frozen=True)
class SinkOptions:
    """The sink's options, parsed and checked (``parse_sink_options``)."""

    root: str                              # the topic root
    topic: str | None = None               # every row's topic (else the topic column's)
    partitions: int | None = None          # create a missing topic with this many
    settings: tuple[tuple[str, Any], ...] = ()    # LogConfig settings of topics it creates
    checkpoint: str | None = None          # a stream's checkpointLocation
    lock_timeout_ms: int = 10_000          # for the logs' append locks (other writers)


@dataclass(frozen=True)
class ColumnSpec:
    """The names of the Kafka sink's columns in the DataFrame (None: absent; Spark
    matches names without regard to case, so these are the DataFrame's spelling)."""

    value: str
    key: str | None = None
    headers: str | None = None
    partition: str | None = None
    timestamp: str | None = None
    topic: str | None = None               # read only without the topic option


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """The checked options of a write; ``InvalidConfigError`` names what is wrong."""
    opts = {k.lower(): v if isinstance(v, str) else str(v) for k, v in options.items()}
    unknown = sorted(k for k in opts if k not in _CANON and not k.startswith(LOG_PREFIX))
    if unknown:
        raise InvalidConfigError(
            f"unknown option(s) of the seglog sink: {', '.join(unknown)}; known: "
            f"{', '.join(_OPTIONS)} and {LOG_PREFIX}<setting> (a Log setting of topics the "
            f"sink creates, e.g. {LOG_PREFIX}compression)")
    path = opts.get("path")
    if not path:
        raise InvalidConfigError("the seglog sink needs a path: the topic root "
                                 "(.option(\"path\", root) or .save(root))")
    root = os.path.abspath(os.path.expanduser(path))
    if os.path.lexists(root) and not os.path.isdir(root):
        raise InvalidConfigError(f"path {root} is not a directory (a topic root)")
    topic = opts.get("topic")
    if topic is not None:
        check_name(topic.strip())
        topic = topic.strip()
    partitions = None
    if opts.get("partitions") is not None:
        partitions = _count("partitions", opts["partitions"], 1, MAX_PARTITIONS)
    settings = []
    for k, v in sorted(opts.items()):
        if k.startswith(LOG_PREFIX):
            name = k[len(LOG_PREFIX):]
            if name not in _SETTINGS:
                close = difflib.get_close_matches(name, sorted(_SETTINGS), n=1)
                raise InvalidConfigError(
                    f"unknown option {k}: not a Log setting"
                    + (f" (did you mean {LOG_PREFIX}{close[0]}?)" if close else ""))
            settings.append((name, _setting(name, v)))
    if settings:
        LogConfig.from_kwargs(dict(settings))            # each value in its range
    timeout = 10_000
    if opts.get("locktimeoutms") is not None:
        timeout = _count("lockTimeoutMs", opts["locktimeoutms"], 1, 3_600_000)
    return SinkOptions(root=root, topic=topic, partitions=partitions, settings=tuple(settings),
                       checkpoint=opts.get("checkpointlocation"), lock_timeout_ms=timeout)


def _count(name: str, v: str, lo: int, hi: int) -> int:
    try:
        n = int(v.strip())
    except ValueError:
        n = lo - 1
    if not lo <= n <= hi:
        raise InvalidConfigError(f"option {name} must be an integer from {lo} to {hi}, "
                                 f"not {v!r}")
    return n


def _setting(name: str, v: str) -> Any:
    """A LogConfig setting from an option's text, by the setting's type."""
    hint = typing.get_type_hints(LogConfig)[name]
    kinds = set(typing.get_args(hint)) or {hint}
    s = v.strip()
    if type(None) in kinds and s.lower() in ("none", "null", ""):
        return None
    for kind in (int, float, str):
        if kind in kinds:
            try:
                return kind(s)
            except ValueError:
                continue
    raise InvalidConfigError(f"option {LOG_PREFIX}{name} must be "
                             f"{' or '.join(sorted(k.__name__ for k in kinds))}, not {v!r}")


def check_columns(schema: "StructType", o: SinkOptions) -> ColumnSpec:
    """The columns of a DataFrame written to the sink: Kafka's sink's, ``value``
    required (binary or string), ``key`` (binary or string), ``headers``
    (array<struct<key: string, value: binary>>), ``partition`` (an integer type),
    ``timestamp`` (timestamp), and ``topic`` (string) when no topic option is
    given; other columns are ignored, as Kafka's sink ignores them.
    ``InvalidConfigError`` names a missing or mistyped one."""
    from pyspark.sql.types import (ArrayType, BinaryType, ByteType, IntegerType, LongType,
                                   ShortType, StringType, StructType, TimestampNTZType,
                                   TimestampType)
    by = {f.name.lower(): f for f in schema.fields}

    def kind(name: str, allowed: tuple[type, ...], what: str) -> Any:
        f = by.get(name)
        if f is None:
            return None
        if not isinstance(f.dataType, allowed):
            raise InvalidConfigError(f"column {f.name} of a DataFrame written to seglog must "
                                     f"be {what}, not {f.dataType.simpleString()}")
        return f.dataType
    value = kind("value", (BinaryType, StringType), "binary or string")
    if value is None:
        raise InvalidConfigError(f"a DataFrame written to seglog needs a value column (binary "
                                 f"or string); it has {', '.join(schema.fieldNames()) or 'none'}")
    key = kind("key", (BinaryType, StringType), "binary or string")
    h = by.get("headers")
    if h is not None:
        t = h.dataType
        ok = (isinstance(t, ArrayType) and isinstance(t.elementType, StructType)
              and [(f.name, type(f.dataType)) for f in t.elementType.fields]
              == [("key", StringType), ("value", BinaryType)])
        if not ok:
            raise InvalidConfigError(f"column headers of a DataFrame written to seglog must be "
                                     f"array<struct<key:string,value:binary>>, not "
                                     f"{t.simpleString()}")
    partition = kind("partition", (ByteType, ShortType, IntegerType, LongType), "an integer")
    stamp = kind("timestamp", (TimestampType, TimestampNTZType), "a timestamp")
    topic = None
    if o.topic is None:
        topic = kind("topic", (StringType,), "string")
        if topic is None:
            raise InvalidConfigError("give the topic: the option topic, or a topic column "
                                     "(string) naming each row's topic")

    def name(present: Any, column: str) -> str | None:
        return None if present is None else by[column].name
    return ColumnSpec(value=by["value"].name, key=name(key, "key"), headers=name(h, "headers"),
                      partition=name(partition, "partition"),
                      timestamp=name(stamp, "timestamp"), topic=name(topic, "topic"))

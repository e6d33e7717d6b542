"""The ``"seglog"`` data source: its behaviour as plain classes, and the classes
Spark sees, made on pyspark's bases on first use."""

from __future__ import annotations

import logging
import time
# Any: parsed JSON / JSON documents (dict[str, Any]): Spark's offsets, as pyspark's
# DataSource API types them
from typing import TYPE_CHECKING, Any, Iterator

from ..consumer_group import commit_offsets
from ..errors import GroupBusyError, InvalidConfigError, OffsetOutOfRangeError
from ._arrow import read_range, spark_schema
from ._options import TP, OffsetRange, Options, parse_options
from ._plan import Logs, from_json, plan, rate_limit, resolve_offsets, to_json
from ._sink import check_write, sink_classes

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import (DataSourceReader, DataSourceStreamReader,
                                        DataSourceStreamWriter, DataSourceWriter, InputPartition)
    from pyspark.sql.streaming.datasource import ReadLimit
    from pyspark.sql.types import StructType

_log = logging.getLogger("seglog")


class _Source:
    """The ``"seglog"`` data source: Spark's Kafka source over seglog topics (or one
    log directory) on disk, and its sink (``df.write``, ``df.writeStream``).
    Options: docs/SPARK.md."""

    options: Any          # set by pyspark's DataSource.__init__: case-insensitive str -> str

    @classmethod
    def name(cls) -> str:
        """The format's name: ``spark.read.format("seglog")``."""
        return "seglog"

    def schema(self) -> "StructType":
        """Kafka's source schema (``key``, ``value``, ``topic``, ``partition``,
        ``offset``, ``timestamp``, ``timestampType``, and ``headers`` with
        ``includeHeaders``). Bad options raise ``InvalidConfigError`` here, at
        ``load()``."""
        # checks the options now, so that a bad one fails load(), not a task (whether
        # it is a batch or a stream is known only to reader() and streamReader())
        o = parse_options(self.options, streaming=None)
        return spark_schema(o.include_headers)

    def _check_schema(self, schema: "StructType", o: Options) -> None:
        want = spark_schema(o.include_headers)
        if schema != want:
            raise InvalidConfigError(f"the seglog source has a fixed schema (Kafka's), "
                                     f"{want.simpleString()}; it cannot read as "
                                     f"{schema.simpleString()}")

    def reader(self, schema: "StructType") -> "DataSourceReader":
        """The batch reader of ``spark.read``: the ranges the options select, read
        on the executors. A schema other than the fixed one is ``InvalidConfigError``."""
        o = parse_options(self.options, streaming=False)
        self._check_schema(schema, o)
        cls: Any = spark_classes()["SeglogReader"]
        return cls(o)   # type: ignore[no-any-return]

    def streamReader(self, schema: "StructType") -> "DataSourceStreamReader":
        """The micro-batch reader of ``spark.readStream`` (offsets as Kafka's JSON,
        admission control, ``Trigger.AvailableNow``). A schema other than the fixed
        one is ``InvalidConfigError``."""
        o = parse_options(self.options, streaming=True)
        self._check_schema(schema, o)
        cls: Any = spark_classes()["SeglogStreamReader"]
        return cls(o)   # type: ignore[no-any-return]

    def writer(self, schema: "StructType", overwrite: bool) -> "DataSourceWriter":
        """The sink of ``df.write`` (``_sink``; docs/SPARK.md, Writing)."""
        return self._writer("SeglogWriter", schema, overwrite)  # type: ignore[no-any-return]

    def streamWriter(self, schema: "StructType", overwrite: bool) -> "DataSourceStreamWriter":
        """The sink of ``df.writeStream`` (``_sink``; docs/SPARK.md, Writing)."""
        return self._writer("SeglogStreamWriter", schema, overwrite)  # type: ignore[no-any-return]

    def _writer(self, name: str, schema: "StructType", overwrite: bool) -> Any:
        o, cols = check_write(self.options, schema, overwrite, name == "SeglogStreamWriter")
        classes: Any = spark_classes()
        return classes[name](o, cols, classes["SeglogCommitMessage"])


class _Reader:
    """What the batch and stream readers share: the options and reading a range."""

    def __init__(self, o: Options) -> None:
        self.o = o
        self._logs = Logs(self.o.open_log)

    def __getstate__(self) -> dict[str, Any]:
        # readers go to executors by pickle: open logs stay behind
        state = self.__dict__.copy()
        state["_logs"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._logs = Logs(self.o.open_log)

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
            start = resolve_offsets(o, self._logs, parts, o.starting, o.starting_ts,
                             "startingOffsets", True)
            end = resolve_offsets(o, self._logs, parts, o.ending, o.ending_ts, "endingOffsets", False)
            for tp in parts:
                if end[tp] < start[tp]:
                    raise InvalidConfigError(
                        f"{tp[0]}-{tp[1]}: the starting offset {start[tp]} is after the "
                        f"ending offset {end[tp]}")
            return self._partitions(plan(o, self._logs, start, end))
        finally:
            self._logs.close()


class _StreamReader(_Reader):
    """Micro-batch reads. Offsets are Kafka's JSON (``{"topic": {"0": 42}}``, the next
    offset of each partition); Spark's checkpoint keeps them, so a restarted query
    goes on where it stopped. Admission control: ``maxOffsetsPerTrigger`` (prorated
    as Kafka does) and ``minOffsetsPerTrigger`` with ``maxTriggerDelay``;
    ``Trigger.AvailableNow`` reads what exists when the query starts, then stops."""

    def __init__(self, o: Options) -> None:
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
        return to_json(resolve_offsets(o, self._logs, parts, o.starting, o.starting_ts,
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
        frm = from_json(start)
        # Spark plans a batch from the end of the last one only after that one is
        # done (its commit log written): the group learns it now, not one batch late
        # when Spark calls commit() while planning the next batch
        self._report(frm)
        ends = self._ends()
        latest = dict(ends)
        for tp, off in frm.items():
            latest.setdefault(tp, off)        # a partition no longer listed stays put
        if isinstance(limit, ReadAllAvailable):
            return to_json(latest)
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
        return to_json(latest)

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
        return to_json(self._ends())

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list["InputPartition"]:
        return self._partitions(plan(self.o, self._logs, from_json(start), from_json(end)))

    def commit(self, end: dict[str, Any]) -> None:
        self._report(from_json(end))

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
# the package the classes are named in: pickle finds them there by reference on
# the executors (through its module __getattr__), as users import them
_PACKAGE = __name__.rpartition(".")[0]


def spark_classes() -> dict[str, type]:
    """The classes Spark sees, made once: the behaviour above on pyspark's bases
    (pyspark is imported here, not when seglog.spark is). Named as attributes of
    ``seglog.spark``, so pickle finds them by reference on the executors."""
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
                             "SeglogStreamReader": SeglogStreamReader, **sink_classes()}
    for name, cls in made.items():
        cls.__module__ = _PACKAGE
        cls.__qualname__ = name
    _CLASSES.update(made)
    return _CLASSES


def register(spark: "SparkSession") -> None:
    """Register the ``"seglog"`` format with ``spark``: then
    ``spark.read.format("seglog")`` and ``spark.readStream.format("seglog")``.
    Executors' Python must import seglog (``PYSPARK_PYTHON``, docs/SPARK.md)."""
    spark.dataSource.register(spark_classes()["SeglogDataSource"])

"""Arrow batches in Spark's layout: the Kafka schema, and a range read as whole-column
record batches (the hot path of every Spark read)."""

from __future__ import annotations

import functools
# Any: pyarrow and numpy modules and arrays: they ship no type information
from typing import TYPE_CHECKING, Any, Iterator

from ..errors import OffsetOutOfRangeError
from .._codec.columns import arrow_modules
from ..message import ArrowColumns, Columns
from ._options import OffsetRange, Options
from ._plan import data_loss

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

EARLIEST, LATEST = -2, -1        # Kafka's offsets JSON: -2 earliest, -1 latest
# the bytes of batches behind one Arrow batch (what Log.iter_arrow reads at a time):
# some 20 k rows of 200 bytes; larger chunks measured slower (cache misses), smaller
# ones pay the per-read cost more often. bench/bench_spark.py reads by it too.
CHUNK_BYTES = 4 << 20


def spark_schema(include_headers: bool) -> "StructType":
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


def spark_batch(cols: ArrowColumns | Columns, topic: str, partition: int,
                include_headers: bool = False) -> Any:
    """``cols`` as a ``pyarrow.RecordBatch`` of ``arrow_schema(include_headers)``.

    ``cols``: ``MessageSet.arrow_columns()`` (what ``read_range`` reads) or
    ``MessageSet.columns()``. Whole-column operations only (no
    Python object per message) unless headers are asked for and present: values
    and keys keep their buffers, timestamps become microseconds in one numpy
    multiplication, and topic, partition and timestampType are slices of arrays
    made once per process (immutable, so batches may share them).
    """
    pa, np = arrow_modules()
    offsets, ms, keys, values = cols.arrow_arrays()
    n = len(offsets)
    micros = ms.to_numpy(zero_copy_only=True) * 1000
    stamps = pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, pa.py_buffer(micros)])
    arrays = [keys, values, _constant(pa, topic, n), _constant(pa, partition, n), offsets,
              stamps, _constant(pa, 0, n)]    # timestampType 0: CreateTime, as Kafka's producer
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


# (value, its Python type) -> an Arrow array repeating it: a batch's topic, partition
# and timestampType columns are slices of these (pa.repeat per batch cost more than
# building the rest of the batch)
_CONSTANTS: dict[tuple[object, type], Any] = {}
_CONSTANT_ROWS = 1 << 16
_CONSTANT_KINDS = 64         # more distinct values than this (topics): start afresh


def _constant(pa: Any, value: str | int, n: int) -> Any:
    """An array of ``n`` times ``value`` (string, or int32 for an int)."""
    key = (value, type(value))
    have = _CONSTANTS.get(key)
    if have is None or len(have) < n:
        if have is None and len(_CONSTANTS) >= _CONSTANT_KINDS:
            _CONSTANTS.clear()
        rows = max(n, _CONSTANT_ROWS, 2 * len(have) if have is not None else 0)
        have = pa.repeat(pa.scalar(value, pa.string() if isinstance(value, str) else pa.int32()),
                         rows)
        _CONSTANTS[key] = have
    return have.slice(0, n)


def read_range(o: Options, r: OffsetRange) -> Iterator[Any]:
    """The messages of ``r`` as Arrow batches in Spark's layout, one per 4 MiB read
    (``Log.iter_arrow``: every batch checked, arrays built with numpy, values copied
    once into Arrow's memory pool). Offsets deleted before they were read:
    ``failOnDataLoss``."""
    pa = arrow_modules()[0]
    tp = (r.topic, r.partition)
    with o.open_log(o.directory(tp)) as log:
        pos = r.fromOffset
        while pos < r.untilOffset:
            if log.end_offset < r.untilOffset:
                raise OffsetOutOfRangeError(
                    f"seglog: {r.topic}-{r.partition} ends at {log.end_offset}, before "
                    f"the end {r.untilOffset} of the range {r.fromOffset} to "
                    f"{r.untilOffset} (was the log replaced?)")
            try:
                for rb in log.iter_arrow(pos, r.untilOffset):
                    offsets, ms, keys, values, headers = rb.columns
                    batch = spark_batch(ArrowColumns(offsets, ms.view(pa.int64()), keys,
                                                     values, None), r.topic, r.partition)
                    if o.include_headers:
                        batch = pa.RecordBatch.from_arrays(
                            batch.columns + [headers.cast(arrow_schema(True).field(
                                "headers").type)], schema=arrow_schema(True))
                    pos = offsets[-1].as_py() + 1
                    yield batch
            except OffsetOutOfRangeError:
                first = log.start_offset
                if pos >= first:     # not deleted: the log is shorter than planned
                    raise
                data_loss(o, tp, pos, first, "while reading")
                pos = first
                continue
            return

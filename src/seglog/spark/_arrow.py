"""Arrow batches in Spark's layout: the Kafka schema, and a range read as whole-column
record batches (the hot path of every Spark read)."""

from __future__ import annotations

import bisect
import functools
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from ..errors import OffsetOutOfRangeError
from ..log import Log
from ..message import Columns
from ._options import OffsetRange, Options
from ._plan import data_loss

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

EARLIEST, LATEST = -2, -1        # Kafka's offsets JSON: -2 earliest, -1 latest
# one Log.read per this many bytes of batches: one Arrow RecordBatch of some 20 k
# rows of 200 bytes; larger chunks measured slower (cache misses), smaller ones pay
# the per-read cost more often
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


def read_range(o: Options, r: OffsetRange) -> Iterator[Any]:
    """The messages of ``r`` as Arrow batches in Spark's layout, read a chunk of whole
    batches at a time (``Log.read`` -> ``MessageSet.columns()``). Offsets deleted
    before they were read: ``failOnDataLoss``."""
    tp = (r.topic, r.partition)
    with Log.open(o.directory(tp), readonly=True) as log:
        pos = r.fromOffset
        while pos < r.untilOffset:
            try:
                ms = log.read(pos, CHUNK_BYTES)
            except OffsetOutOfRangeError:
                first = log.start_offset
                if pos >= first:     # past the end: the log is shorter than planned
                    raise OffsetOutOfRangeError(
                        f"seglog: {r.topic}-{r.partition} ends at {log.end_offset}, before "
                        f"offset {pos} of the range {r.fromOffset} to {r.untilOffset} "
                        f"(was the log replaced?)") from None
                data_loss(o, tp, pos, first, "while reading")
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

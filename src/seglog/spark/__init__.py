"""Spark reads seglog topics straight off disk, as Spark's Kafka source reads Kafka
(docs/SPARK.md).

* ``register(spark)`` registers ``SeglogDataSource`` as the format ``"seglog"``:
  ``spark.read.format("seglog")`` (batch) and ``spark.readStream.format("seglog")``
  (micro-batch, ``Trigger.AvailableNow``, admission control), with the Kafka
  source's schema and option names.
* The KafkaRDD pattern: ``offset_ranges`` -> ``rdd`` -> the job's output -> ``commit``,
  so a group's offsets move only after the output succeeded.
* ``check_java()`` before building a session: Spark needs Java 17 or newer, and
  without it ``JavaMissingError`` says how to install it (pyspark's launcher only
  fails with a gateway traceback).

Importing this package imports neither pyspark nor pyarrow: the data source classes
subclass pyspark's, so they are made on first use (``register``, or the attribute
``SeglogDataSource``), and Arrow is imported where batches are built. The
offset-range functions work without pyspark.

The parts: ``_options`` (options, ``OffsetRange``), ``_plan`` (offsets, ranges,
limits), ``_arrow`` (Spark's Arrow layout, reading a range), ``_source`` (the data
source and its readers), ``_rdd`` (the KafkaRDD pattern), ``_java`` (finding Java
as Spark's launcher does).
"""

from __future__ import annotations

from typing import Any

# the names seglog.spark offers, re-exported explicitly ("as": for mypy's strict mode)
from ._arrow import arrow_schema as arrow_schema, read_range as read_range
from ._arrow import spark_batch as spark_batch
from ._java import JavaMissingError as JavaMissingError, check_java as check_java
from ._options import EARLIEST as EARLIEST, LATEST as LATEST, TP as TP, Spec as Spec
from ._options import OffsetRange as OffsetRange
from ._plan import rate_limit as rate_limit, split_ranges as split_ranges
from ._rdd import commit as commit, offset_ranges as offset_ranges, rdd as rdd
from ._source import register as register, spark_classes

__all__ = ["register", "OffsetRange", "offset_ranges", "rdd", "commit", "SeglogDataSource",
           "check_java", "JavaMissingError"]

_SPARK_NAMES = ("SeglogDataSource", "SeglogReader", "SeglogStreamReader", "SeglogWriter",
                "SeglogStreamWriter", "SeglogCommitMessage")


def __getattr__(name: str) -> Any:
    # the classes on pyspark's bases are made on first use (pyspark is imported then)
    if name in _SPARK_NAMES:
        return spark_classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""seglog.kafka reading Kafka's own segment files, beside kafka-python's decoder of the
same bytes, in one run.

    scripts/bench bench_kafka.py               # 1,000,000 records
    scripts/bench bench_kafka.py --n 200000    # quicker

The data: uncompressed magic 2 batches of 50 records of 200 bytes, no key, no
headers (what a producer's batch of equal-sized records looks like), in one segment
file of a partition directory; built with kafka-python's record builder (one batch,
repeated at successive base offsets: the base offset lies outside the CRC).

* kafka-python: ``MemoryRecords`` over the same bytes, every record's offset,
  timestamp, key, value and headers read (kafka-python's consumer does this per
  fetched record); its CRC check is left out (in pure Python without the crc32c
  package it would dominate), so this is its decoding alone. seglog checks every
  batch's CRC32C.
* seglog iter(): ``KafkaPartition.iter()`` from the files, ``m.value`` read.
* seglog read_arrow(): ``KafkaPartition.read_arrow()``, one pyarrow Table.
* with ``--spark``: ``spark.read.format("seglog")`` over the Kafka log dir
  (``kafka.logDirs``) beside the same source over a seglog topic holding the same
  records (``Topic.append_batch``, same values and timestamps), ``count()`` and
  ``sum(length(value))``, minPartitions 2, best of the repeats taken in turns.

Never run as a test: timings need a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from seglog import kafka

PER_BATCH = 50
SIZE = 200
TS = 1_750_000_000_000


def build(path: str, n: int) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i in range(PER_BATCH):
        b.append(i, TS + i // 10, None, bytes([65 + i % 26]) * SIZE, [])
    one = bytes(b.build())
    parts = []
    for k in range(n // PER_BATCH):
        parts.append((k * PER_BATCH).to_bytes(8, "big") + one[8:])
    data = b"".join(parts)
    os.makedirs(path)
    with open(os.path.join(path, "%020d.log" % 0), "wb") as f:
        f.write(data)
    return data


def best(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--spark", action="store_true")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bench-kafka-")
    try:
        d = os.path.join(root, "events-0")
        data = build(d, a.n)
        n = len(data) // (len(data) // (a.n // PER_BATCH)) * PER_BATCH

        def kafka_python() -> None:
            mr = MemoryRecords(data)
            count = 0
            while True:
                batch = mr.next_batch()
                if batch is None:
                    break
                for r in batch:
                    r.offset, r.timestamp, r.key, r.value, r.headers
                    count += 1
            assert count == n

        part = kafka.open_partition(d)

        def seglog_iter() -> None:
            count = 0
            for m in part.iter():
                m.value
                count += 1
            assert count == n

        def seglog_arrow() -> None:
            assert part.read_arrow().num_rows == n

        print(f"{n:,} records of {SIZE} bytes in batches of {PER_BATCH}, uncompressed; "
              f"{platform.machine()} {platform.python_implementation()} "
              f"{platform.python_version()}, {os.cpu_count()} cpu(s), "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        base = best(kafka_python, a.reps)
        print(f"  kafka-python MemoryRecords: {n / base / 1e6:6.2f} M records/s")
        it = best(seglog_iter, a.reps)
        print(f"  seglog.kafka iter():        {n / it / 1e6:6.2f} M records/s "
              f"({base / it:.1f}x kafka-python)")
        ar = best(seglog_arrow, a.reps)
        print(f"  seglog.kafka read_arrow():  {n / ar / 1e6:6.2f} M records/s "
              f"({it / ar:.1f}x iter())")
        if a.spark:
            spark_side_by_side(root, d, n, a.reps)
    finally:
        shutil.rmtree(root)


def spark_side_by_side(root: str, kafka_dir: str, n: int, reps: int) -> None:
    import sys

    from pyspark.sql import SparkSession

    from seglog import Record, Topic
    from seglog import spark as sgs
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    topics = os.path.join(root, "topics")
    t = Topic.open(topics, "events", partitions=1, message_timestamp_before_max_ms=None,
                   message_timestamp_after_max_ms=None)
    for k in range(n // PER_BATCH):
        t.append_batch([Record(bytes([65 + i % 26]) * SIZE, None, TS + i // 10)
                        for i in range(PER_BATCH)], partition=0)
    t.close()
    spark = (SparkSession.builder.master(f"local[{os.cpu_count() or 2}]")
             .appName("bench_kafka").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    sgs.register(spark)
    sources = {
        "seglog topic": lambda: spark.read.format("seglog").option("subscribe", "events")
        .option("minPartitions", "2").load(topics),
        "Kafka log dir": lambda: spark.read.format("seglog")
        .option("kafka.logDirs", os.path.dirname(kafka_dir)).option("subscribe", "events")
        .option("minPartitions", "2").load(),
    }
    queries = {"count()": lambda df: df.count(),
               "sum(length(value))": lambda df: df.selectExpr("sum(length(value))").first()[0]}
    for q in queries.values():
        for make in sources.values():
            q(make())
    times: dict[tuple[str, str], list[float]] = {}
    answers: dict[str, set[object]] = {q: set() for q in queries}
    for _ in range(reps):
        for qn, q in queries.items():
            for sn, make in sources.items():
                t0 = time.perf_counter()
                answers[qn].add(q(make()))
                times.setdefault((qn, sn), []).append(time.perf_counter() - t0)
    for qn, got in answers.items():
        assert len(got) == 1, f"{qn}: the sources disagree: {got}"
    print(f"  Spark {spark.version}, local[{os.cpu_count() or 2}]:")
    for qn in queries:
        own = min(times[(qn, "seglog topic")])
        kd = min(times[(qn, "Kafka log dir")])
        print(f"    {qn:20s} seglog topic {n / own / 1e6:5.2f} M rows/s, Kafka log dir "
              f"{n / kd / 1e6:5.2f} M rows/s ({own / kd:.2f}x)")
    spark.stop()


if __name__ == "__main__":
    main()

"""Spark over a seglog topic: HTTP status codes per minute, in batch and streaming,
written to Parquet.

    .venv/bin/python examples/spark_pipeline.py                 # 200,000 events
    .venv/bin/python examples/spark_pipeline.py --events 50000 --dir /tmp/pipeline

1. A producer appends access-log events (examples/access_log.py, each with its
   own timestamp) to the topic "access" of 4 partitions under DIR/data.
2. Batch: ``spark.read.format("seglog")`` reads the whole topic straight from the
   segment files, parses each value's JSON, and counts the status codes per minute
   of event time into DIR/out/batch (Parquet).
3. Streaming: ``spark.readStream.format("seglog")`` runs the same aggregation as a
   windowed count with a watermark, to DIR/out/stream (Parquet, append mode), in
   two runs with ``Trigger.AvailableNow`` and one checkpoint: the first reads what
   is there; the producer appends more events; the second run reads only those.
   With ``groupId`` the query's progress shows in ``seglog.describe_group`` as a
   consumer group's lag.
4. The check: every minute the watermark has closed has the same counts in the
   stream's output as in a batch count over the whole topic.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, HERE)

import seglog  # noqa: E402
from access_log import access_log_lines  # noqa: E402

TOPIC, GROUP = "access", "status-per-minute"
EVENT = "status INT, method STRING, path STRING, bytes INT, ms INT"


def produce(root: str, events: list[tuple[int, bytes]]) -> None:
    """Append events (timestamp, JSON line) in batches of 500, one partition a batch."""
    with seglog.Topic.open(root, TOPIC, partitions=4) as topic:
        for i in range(0, len(events), 500):
            topic.append_batch([seglog.Record(line, timestamp=ts) for ts, line in events[i:i + 500]])


def per_minute(df: Any) -> Any:
    """The Kafka-schema rows -> (minute, status) with the event parsed from the value."""
    from pyspark.sql import functions as F
    return (df.select(F.col("timestamp"),
                      F.from_json(F.col("value").cast("string"), EVENT).alias("e"))
            .select("timestamp", "e.status"))


def batch(spark: Any, root: str, out: str) -> Any:
    from pyspark.sql import functions as F
    df = spark.read.format("seglog").option("subscribe", TOPIC).load(root)
    counts = (per_minute(df).groupBy(F.date_trunc("minute", "timestamp").alias("minute"), "status")
              .count())
    counts.write.mode("overwrite").parquet(out)
    return spark.read.parquet(out)


def stream_once(spark: Any, root: str, out: str, checkpoint: str) -> list[int]:
    """One Trigger.AvailableNow run; the rows each micro-batch read."""
    from pyspark.sql import functions as F
    df = (spark.readStream.format("seglog").option("subscribe", TOPIC)
          .option("startingOffsets", "earliest")     # a new query; a restart uses its checkpoint
          .option("maxOffsetsPerTrigger", 100_000)    # admission control: micro-batches of 100 k
          .option("groupId", GROUP)                   # progress and lag in describe_group
          .load(root))
    counts = (per_minute(df).withWatermark("timestamp", "1 minute")
              .groupBy(F.window("timestamp", "1 minute"), "status").count()
              .select(F.col("window.start").alias("minute"), "status", "count"))
    q = (counts.writeStream.format("parquet").outputMode("append").option("path", out)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination()
    return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]


def run(spark: Any, directory: str, n: int) -> dict[str, Any]:
    """The whole pipeline in ``directory`` with ``n`` events; returns what it found."""
    root = os.path.join(directory, "data")
    out = os.path.join(directory, "out")
    # from the start of a minute yesterday, ~2 ms apart (200,000 events: ~7 minutes)
    start_ms = (int(time.time() * 1000) - 86_400_000) // 60_000 * 60_000
    events = list(access_log_lines(n, start_ms=start_ms))
    first, rest = events[: n * 3 // 4], events[n * 3 // 4:]
    produce(root, first)
    from seglog.spark import register
    register(spark)

    t0 = time.perf_counter()
    result = batch(spark, root, os.path.join(out, "batch"))
    rows = result.collect()
    print(f"batch: {len(first):,} events -> {len(rows):,} (minute, status) counts in "
          f"{time.perf_counter() - t0:.1f} s, in {os.path.join(out, 'batch')}")
    totals: dict[Any, int] = {}
    for r in rows:
        totals[r.minute] = totals.get(r.minute, 0) + r["count"]
    busiest = max(totals, key=lambda m: totals[m])
    print(f"  the busiest minute, {busiest:%Y-%m-%d %H:%M} UTC: " + ", ".join(
        f"{r.status}: {r['count']:,}" for r in sorted(rows, key=lambda r: -r["count"])
        if r.minute == busiest))

    stream_out, ck = os.path.join(out, "stream"), os.path.join(directory, "checkpoint")
    t0 = time.perf_counter()
    batches1 = stream_once(spark, root, stream_out, ck)
    lag1 = {k: v["lag"] for k, v in seglog.describe_group(root, GROUP)["partitions"].items()}
    print(f"stream, run 1: micro-batches of {batches1} rows in {time.perf_counter() - t0:.1f} s; "
          f"group {GROUP!r} lag per partition {lag1}")
    produce(root, rest)
    lag_new = {k: v["lag"] for k, v in seglog.describe_group(root, GROUP)["partitions"].items()}
    print(f"producer appended {len(rest):,} more events; lag now {lag_new}")
    t0 = time.perf_counter()
    batches2 = stream_once(spark, root, stream_out, ck)
    lag2 = {k: v["lag"] for k, v in seglog.describe_group(root, GROUP)["partitions"].items()}
    print(f"stream, run 2 (restarted from its checkpoint): {batches2} rows, only the new events, "
          f"in {time.perf_counter() - t0:.1f} s; lag {lag2}")

    # every minute the watermark closed (1 minute behind the newest event) is final
    streamed = {(r.minute, r.status): r["count"] for r in spark.read.parquet(stream_out).collect()}
    whole = {(r.minute, r.status): r["count"]
             for r in batch(spark, root, os.path.join(out, "batch-all")).collect()}
    last = max((m for m, _ in streamed), default=None)
    closed = {k for k in whole if last is not None and k[0] <= last}
    same = bool(closed) and set(streamed) == closed and all(streamed[k] == whole[k] for k in closed)
    print(f"check: {len(streamed):,} streamed (minute, status) counts over "
          f"{len({m for m, _ in streamed})} closed minutes, "
          f"{'equal to' if same else 'DIFFERENT FROM'} a batch count of the whole topic")
    return {"batch_events": sum(totals.values()), "run1": batches1, "run2": batches2,
            "lag": lag2, "same": same}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--dir", default=None, help="work directory (default: a new temp dir, removed)")
    args = ap.parse_args()
    # the Python workers must be an interpreter that has seglog: this one
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").appName("seglog-spark-pipeline")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    directory = args.dir or tempfile.mkdtemp(prefix="spark_pipeline-")
    os.makedirs(directory, exist_ok=True)
    try:
        found = run(spark, directory, args.events)
        if not found["same"]:
            sys.exit("the streamed counts differ from the batch counts")
    finally:
        spark.stop()
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()

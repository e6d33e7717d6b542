"""A streaming query from topic "in" to topic "out" under ROOT, for the sink's kill
tests (test_spark_sink_kills.py).

    python sink_child.py ROOT CHECKPOINT run|finish
        run: micro-batches for ever (prints "started" once the query runs, then
             "batch <id> <ms>" as each micro-batch ends, with its duration);
        finish: Trigger.AvailableNow to the end of "in", in one micro-batch (prints
                "done").
"""

from __future__ import annotations

import os
import sys

os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.streaming import StreamingQueryListener  # noqa: E402

from seglog.spark import register  # noqa: E402

BATCH_ROWS = 2000


class Progress(StreamingQueryListener):
    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        p = event.progress
        if p.numInputRows:
            print(f"batch {p.batchId} {p.batchDuration}", flush=True)

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass


def main() -> None:
    root, ckpt, mode = sys.argv[1:4]
    spark = (SparkSession.builder.master("local[2]").appName("seglog-sink-kills")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    r = spark.readStream.format("seglog").option("subscribe", "in")
    if mode == "run":
        r = r.option("maxOffsetsPerTrigger", BATCH_ROWS)
    w = (r.option("startingOffsets", "earliest").load(root).select("key", "value")
         .writeStream.format("seglog").option("path", root).option("topic", "out")
         .option("partitions", 3).option("checkpointLocation", ckpt))
    if mode == "finish":
        q = w.trigger(availableNow=True).start()
        q.awaitTermination()
        if q.exception() is not None:
            raise SystemExit(f"the query failed: {q.exception()}")
        print("done", flush=True)
        return
    spark.streams.addListener(Progress())
    q = w.start()
    print("started", flush=True)
    q.awaitTermination()


if __name__ == "__main__":
    main()

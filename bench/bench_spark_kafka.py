"""Spark reading one Kafka topic two ways in one run: Spark's own Kafka source
(``spark-sql-kafka-0-10``) from a running broker, and ``format("seglog")`` with
``kafka.logDirs`` from the same broker's log dir, straight off disk.

    scripts/bench bench_spark_kafka.py               # 1,000,000 records of 200 bytes
    scripts/bench bench_spark_kafka.py --n 200000

Needs Java 17 and Maven (like scripts/kafka-fixtures): Kafka and the connector's jars
are fetched into ~/.cache/seglog-kafka. The connector is the newest Maven Central
serves for pyspark's Spark line. A kafka-python producer writes the records (uncompressed,
batches as it makes them), then both queries run against the idle broker:
``count()`` and ``sum(length(value))``, best of the repeats taken in turns.

Never run as a test: timings need a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import kafka_broker  # noqa: E402

CONNECTOR = "4.2.0"
POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>seglog</groupId><artifactId>spark-kafka</artifactId><version>1</version>
  <dependencies><dependency><groupId>org.apache.spark</groupId>
    <artifactId>spark-sql-kafka-0-10_2.13</artifactId><version>{v}</version>
  </dependency></dependencies>
</project>
"""


def connector_jars() -> list[str]:
    home = os.path.join(kafka_broker.CACHE, f"spark-kafka-{CONNECTOR}")
    lib = os.path.join(home, "lib")
    if not os.path.exists(os.path.join(home, ".fetched")):
        os.makedirs(home, exist_ok=True)
        with open(os.path.join(home, "pom.xml"), "w") as f:
            f.write(POM.format(v=CONNECTOR))
        subprocess.run(["mvn", "-q", "-B", "dependency:copy-dependencies",
                        f"-DoutputDirectory={lib}"], cwd=home, check=True, timeout=1800)
        open(os.path.join(home, ".fetched"), "w").close()
    want = ("spark-sql-kafka", "spark-token-provider-kafka", "kafka-clients", "commons-pool2")
    return sorted(os.path.join(lib, j) for j in os.listdir(lib) if j.startswith(want))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    jars = connector_jars()
    work = tempfile.mkdtemp(prefix="bench-spark-kafka-")
    logs = os.path.join(work, "logs")
    broker = kafka_broker.Broker(work, [logs])
    try:
        from kafka import KafkaProducer
        kafka_broker.create("events", 2)
        p = KafkaProducer(bootstrap_servers=kafka_broker.BOOT, linger_ms=20,
                          batch_size=64 * 1024, acks=1)
        t0 = time.perf_counter()
        for i in range(a.n):
            p.send("events", bytes([65 + i % 26]) * 200, partition=i % 2)
        p.close()
        print(f"{a.n:,} records of 200 bytes produced in {time.perf_counter() - t0:.0f} s, "
              f"2 partitions")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        from seglog import spark as sgs
        spark = (SparkSession.builder.master(f"local[{os.cpu_count() or 2}]")
                 .appName("bench_spark_kafka").config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.jars", ",".join(jars)).getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        sgs.register(spark)
        sources = {
            "Spark's Kafka source (broker)": lambda: spark.read.format("kafka")
            .option("kafka.bootstrap.servers", kafka_broker.BOOT).option("subscribe", "events")
            .option("startingOffsets", "earliest").option("endingOffsets", "latest").load(),
            "seglog, kafka.logDirs (files)": lambda: spark.read.format("seglog")
            .option("kafka.logDirs", logs).option("subscribe", "events").load(),
        }
        queries = {"count()": lambda df: df.count(),
                   "sum(length(value))": lambda df: df.selectExpr("sum(length(value))")
                   .first()[0]}
        for q in queries.values():
            for make in sources.values():
                q(make())
        times: dict[tuple[str, str], list[float]] = {}
        answers: dict[str, set[object]] = {q: set() for q in queries}
        for _ in range(a.reps):
            for qn, q in queries.items():
                for sn, make in sources.items():
                    t = time.perf_counter()
                    answers[qn].add(q(make()))
                    times.setdefault((qn, sn), []).append(time.perf_counter() - t)
        for qn, got in answers.items():
            assert len(got) == 1, f"{qn}: the sources disagree: {got}"
        print(f"Spark {spark.version}, connector {CONNECTOR}, local[{os.cpu_count() or 2}], "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, best of {a.reps}")
        for qn in queries:
            ks, ss = (min(times[(qn, s)]) for s in sources)
            print(f"  {qn:20s} Spark's Kafka source {a.n / ks / 1e6:5.2f} M rows/s, "
                  f"seglog over the log dir {a.n / ss / 1e6:5.2f} M rows/s ({ks / ss:.2f}x)")
        spark.stop()
    finally:
        broker.stop()
        import shutil
        shutil.rmtree(work)


if __name__ == "__main__":
    main()

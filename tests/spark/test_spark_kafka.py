"""The "seglog" Spark source over Apache Kafka's own log dirs (kafka.logDirs): every
row equals what a Kafka consumer read back from the broker (tests/data/kafka/), at
both isolation levels; the options' checks without Spark."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("google_crc32c")

from kafka_build import FIXTURES  # noqa: E402
from seglog import InvalidConfigError  # noqa: E402
from seglog.spark import _options  # noqa: E402

DIRS = ",".join(os.path.join(FIXTURES, d) for d in ("logs-a", "logs-b"))
EXPECTED = json.load(open(os.path.join(FIXTURES, "expected.json")))


# the Spark session is conftest.py's: one for the whole run (a module's own
# getOrCreate() would be that one, and stopping it would stop it for every later test)


def _rows(df) -> list[dict]:
    hx = (lambda b: None if b is None else bytes(b).hex())
    out = []
    for r in df.orderBy("topic", "partition", "offset").collect():
        d = {"topic": r.topic, "partition": r.partition, "offset": r.offset,
             "timestamp": int(r.timestamp.timestamp() * 1000), "key": hx(r.key),
             "value": hx(r.value)}
        if "headers" in r.asDict():
            d["headers"] = [[h.key, hx(h.value)] for h in (r.headers or [])]
        out.append(d)
    return out


def _want(topics: list[str], isolation: str, headers: bool) -> list[dict]:
    out = []
    for name in sorted(EXPECTED, key=lambda n: (n.rpartition("-")[0], int(n.rpartition("-")[2]))):
        t, _, p = name.rpartition("-")
        if t not in topics:
            continue
        for e in EXPECTED[name][isolation]:
            d = {"topic": t, "partition": int(p), "offset": e["offset"],
                 "timestamp": e["timestamp"], "key": e["key"], "value": e["value"]}
            if headers:
                d["headers"] = [[k, "" if v is None else v] for k, v in e["headers"]]
            out.append(d)
    return out


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_spark_reads_kafka_log_dirs_as_the_consumer(spark, isolation):
    topics = ["codecs", "txn", "compacted", "moved", "uniform"]
    df = (spark.read.format("seglog").option("kafka.logDirs", DIRS)
          .option("subscribe", ",".join(topics)).option("includeHeaders", "true")
          .option("kafka.isolation.level", isolation).option("minPartitions", "5").load())
    assert _rows(df) == _want(topics, isolation, True)


def test_spark_kafka_offsets_and_patterns(spark):
    df = (spark.read.format("seglog").option("kafka.logDirs", DIRS)
          .option("subscribePattern", "cod.*")
          .option("startingOffsets", json.dumps({"codecs": {"0": 100}}))
          .option("endingOffsets", json.dumps({"codecs": {"0": 250}})).load())
    want = [w for w in _want(["codecs"], "read_uncommitted", False) if 100 <= w["offset"] < 250]
    assert _rows(df) == want


def test_kafka_options_are_checked():
    with pytest.raises(InvalidConfigError):
        _options.parse_options({"kafka.logDirs": DIRS}, streaming=False)
    with pytest.raises(InvalidConfigError):
        _options.parse_options({"kafka.logDirs": DIRS, "subscribe": "codecs",
                                "kafka.isolation.level": "committed"}, streaming=False)
    with pytest.raises(InvalidConfigError):
        _options.parse_options({"kafka.isolation.level": "read_committed", "path": FIXTURES,
                                "subscribe": "x"}, streaming=False)
    o = _options.parse_options({"kafka.logDirs": DIRS, "subscribe": "txn"}, streaming=False)
    assert o.partitions(must_exist=True) == [("txn", 0), ("txn", 1)]
    assert o.directory(("txn", 0)).endswith(os.path.join("logs-b", "txn-0"))
    missing = _options.parse_options({"kafka.logDirs": DIRS, "subscribe": "nope"},
                                     streaming=False)
    with pytest.raises(InvalidConfigError):
        missing.partitions(must_exist=True)

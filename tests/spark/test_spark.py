"""seglog.spark: the "seglog" data source (batch and streaming) and the KafkaRDD
pattern, run by one local[2] Spark session for the module, plus the pure parts
(options, Kafka's range split and rate limit, the Arrow layout) without Spark."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

import seglog  # noqa: E402
from seglog import InvalidConfigError, Log, OffsetOutOfRangeError, Record, Topic  # noqa: E402
from seglog import spark as sgs  # noqa: E402
from seglog.consumer_group import committed_offsets  # noqa: E402
from seglog.spark import OffsetRange, commit, offset_ranges, rdd, split_ranges  # noqa: E402
from seglog.spark import _arrow, _options, _plan  # noqa: E402

NOW = int(time.time() * 1000)


def mixed_records(rnd: random.Random, n: int, ts0: int) -> list[Record]:
    """Keys (some null), values of every shape (empty, newlines, tombstones),
    headers on some, a timestamp each."""
    out = []
    for i in range(n):
        key = None if rnd.random() < 0.3 else os.urandom(rnd.randrange(0, 12))
        value = rnd.choice([None, b"", os.urandom(rnd.randrange(0, 300)) + b"\n"] + [b"v%d" % i] * 7)
        headers = [("h%d" % j, os.urandom(rnd.randrange(0, 5))) for j in range(rnd.randrange(0, 3))] \
            if rnd.random() < 0.3 else []
        out.append(Record(value, key=key, timestamp=ts0 + i * 7 + rnd.randrange(5), headers=headers))
    return out


def expected_rows(root: str, topic: str, n: int, with_headers: bool) -> list[tuple]:
    rows = []
    for p in range(n):
        with Log.open(os.path.join(root, f"{topic}-{p}"), readonly=True) as log:
            for m in log.iter():
                row = (m.key, m.value, topic, p, m.offset, m.timestamp * 1000, 0)
                rows.append(row + ((tuple(m.headers),) if with_headers else ()))
    return sorted(rows, key=lambda r: (r[2], r[3], r[4]))


def spark_rows(df, with_headers: bool) -> list[tuple]:
    cols = ["key", "value", "topic", "partition", "offset", "unix_micros(timestamp) AS ts",
            "timestampType"] + (["headers"] if with_headers else [])
    out = []
    for r in df.selectExpr(*cols).collect():
        row = (None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value),
               r.topic, r.partition, r.offset, r.ts, r.timestampType)
        if with_headers:
            row += (tuple((h.key, bytes(h.value)) for h in r.headers),)
        out.append(row)
    return sorted(out, key=lambda r: (r[2], r[3], r[4]))


@pytest.fixture
def mixed(tmp_path):
    """Three topics under one root: "ev" (3 partitions, plain), "zz" (1 partition,
    lz4) and "cc" (compacted: offsets with gaps), mixed records in batches and
    single appends."""
    root = str(tmp_path / "root")
    rnd = random.Random(12)
    with Topic.open(root, "ev", partitions=3, segment_bytes=1 << 14) as ev, \
            Topic.open(root, "zz", partitions=1, compression="lz4") as zz, \
            Topic.open(root, "cc", partitions=1, cleanup_policy="compact", segment_bytes=4096,
                       min_cleanable_dirty_ratio=0.01) as cc:
        for k in range(20):
            recs = mixed_records(rnd, rnd.randrange(1, 40), NOW - 3_600_000 + k * 1000)
            ev.append_batch(recs, partition=k % 3)
            zz.append_batch(recs)
            cc.append_batch([r._replace(key=b"k%d" % rnd.randrange(8)) for r in recs])
        for r in mixed_records(rnd, 10, NOW - 60_000):
            ev.append(r.value, key=r.key, timestamp=r.timestamp, headers=r.headers, partition=1)
        cc.partition(0).compact()
    with Log.open(os.path.join(root, "cc-0"), readonly=True) as log:
        offsets = [m.offset for m in log.iter()]
    assert len(offsets) < offsets[-1] + 1                    # compaction left gaps
    return root


# -- without Spark -----------------------------------------------------------------

def test_import_seglog_and_seglog_spark_import_neither_pyspark_nor_pyarrow():
    code = ("import sys, seglog, seglog.spark; from seglog.spark import offset_ranges, commit; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pyspark', 'pyarrow', 'numpy', 'pandas', 'py4j')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_arrow_layout_is_the_one_spark_expects_of_the_kafka_schema():
    from pyspark.sql.pandas.types import to_arrow_schema
    for headers in (False, True):
        want = to_arrow_schema(_arrow.spark_schema(headers), timezone="UTC")
        assert sgs.arrow_schema(headers).equals(want)
        assert [f.nullable for f in want] == [True] * len(want)


def test_read_yields_batches_spark_passes_through_untouched(mixed):
    """The fast path: every item read() yields is a RecordBatch of exactly Spark's
    Arrow schema, so pyspark's worker hands the very same objects to the JVM (no
    Python conversion per row)."""
    from pyspark.sql.worker.plan_data_source_read import records_to_arrow_batches
    for headers in ("false", "true"):
        ds = sgs.SeglogDataSource({"path": mixed, "subscribe": "ev,zz,cc", "includeheaders": headers})
        schema = ds.schema()
        reader = ds.reader(schema)
        parts = reader.partitions()
        ends = {(t, p): Log.open(os.path.join(mixed, f"{t}-{p}"), readonly=True).end_offset
                for t, p in [("cc", 0), ("ev", 0), ("ev", 1), ("ev", 2), ("zz", 0)]}
        assert [p.value for p in parts] == [OffsetRange(t, p, 0, e) for (t, p), e in ends.items()]
        for p in parts:
            batches = list(reader.read(p))
            assert batches and all(isinstance(b, pa.RecordBatch) for b in batches)
            passed = list(records_to_arrow_batches(iter(batches), 10_000, schema, ds))
            assert len(passed) == len(batches) and all(a is b for a, b in zip(passed, batches))


def test_split_ranges_is_kafkas_offset_range_calculator():
    r = lambda t, p, a, b: OffsetRange(t, p, a, b)  # noqa: E731
    # no minPartitions, or enough ranges: as they are, empty ones dropped
    assert split_ranges([r("t", 0, 1, 2), r("t", 1, 1, 2), r("t", 2, 1, 1)]) == \
        [r("t", 0, 1, 2), r("t", 1, 1, 2)]
    assert split_ranges([r("t", 0, 1, 5), r("t", 1, 1, 9)], 2) == [r("t", 0, 1, 5), r("t", 1, 1, 9)]
    # one range into equal parts, the remainder going to the last parts
    assert split_ranges([r("t", 0, 1, 17)], 4) == [r("t", 0, 1, 5), r("t", 0, 5, 9),
                                                  r("t", 0, 9, 13), r("t", 0, 13, 17)]
    assert split_ranges([r("t", 0, 0, 10)], 3) == [r("t", 0, 0, 3), r("t", 0, 3, 6), r("t", 0, 6, 10)]
    # skewed: the small range (a share rounding to 1 part) stays whole and leaves
    # the proportions; the big one gets the remaining partitions
    assert split_ranges([r("t", 0, 1, 5), r("t", 1, 1, 21)], 3) == \
        [r("t", 0, 1, 5), r("t", 1, 1, 11), r("t", 1, 11, 21)]
    assert split_ranges([r("a", 0, 0, 10), r("b", 0, 0, 100)], 5) == \
        [r("a", 0, 0, 10)] + [r("b", 0, i, i + 25) for i in range(0, 100, 25)]
    # maxRecordsPerPartition first, then minPartitions
    assert split_ranges([r("t", 0, 0, 10), r("t", 1, 0, 3)], None, 4) == \
        [r("t", 0, 0, 3), r("t", 0, 3, 6), r("t", 0, 6, 10), r("t", 1, 0, 3)]
    # every offset exactly once, whatever the split
    rnd = random.Random(3)
    for _ in range(200):
        ranges = [r("t", p, a, a + rnd.randrange(0, 1000)) for p, a in
                  enumerate(rnd.randrange(0, 50) for _ in range(rnd.randrange(1, 6)))]
        out = split_ranges(ranges, rnd.randrange(1, 20), rnd.choice([None, 7, 300]))
        assert sorted((x.partition, o) for x in out for o in range(x.fromOffset, x.untilOffset)) == \
            sorted((x.partition, o) for x in ranges for o in range(x.fromOffset, x.untilOffset))


def test_rate_limit_prorates_as_kafka_does():
    a, b, c = ("t", 0), ("t", 1), ("t", 2)
    # in proportion to what each has to read, rounded down ...
    assert sgs.rate_limit(10, {a: 0, b: 0}, {a: 30, b: 70}) == {a: 3, b: 7}
    assert sgs.rate_limit(7, {a: 0, b: 0}, {a: 13, b: 12}) == {a: 3, b: 3}
    # ... but a share below one is rounded up: a small partition is not starved
    assert sgs.rate_limit(10, {a: 0, b: 5}, {a: 1000, b: 6}) == {a: 9, b: 6}
    # nothing to read, or less than the limit: everything; never past the end
    assert sgs.rate_limit(10, {a: 4, b: 4}, {a: 4, b: 4}) == {a: 4, b: 4}
    assert sgs.rate_limit(100, {a: 0, b: 0, c: 9}, {a: 3, b: 4, c: 9}) == {a: 3, b: 4, c: 9}


def test_options_are_checked_with_kafkas_rules(mixed):
    ok = {"path": mixed, "subscribe": "ev"}
    parse = _options.parse_options
    o = parse(ok, streaming=False)
    assert (o.starting, o.ending, o.fail_on_data_loss, o.include_headers) == \
        ("earliest", "latest", True, False)
    assert parse(ok, streaming=True).starting == "latest"
    o = parse({**ok, "STARTINGOFFSETS": '{"ev": {"0": 3, "1": -2, "2": -1}}',
               "maxTriggerDelay": "2m", "failOnDataLoss": "False", "groupid": "g"}, True)
    assert o.starting == {("ev", 0): 3, ("ev", 1): -2, ("ev", 2): -1}
    assert (o.max_trigger_delay_ms, o.fail_on_data_loss, o.group_id) == (120_000, False, "g")
    assert parse({"path": mixed, "subscribePattern": "e.*"}, False).partitions(True) == \
        [("ev", 0), ("ev", 1), ("ev", 2)]
    assert parse({"path": mixed, "assign": '{"zz": [0], "ev": [2]}'}, False).partitions(True) == \
        [("ev", 2), ("zz", 0)]
    single = parse({"path": os.path.join(mixed, "zz-0")}, False)
    assert single.single and single.partitions(True) == [("zz-0", 0)]
    bad = [
        ({**ok, "kafka.bootstrap.servers": "x:9092"}, False, "unknown option"),
        ({"subscribe": "ev"}, False, "needs a path"),
        ({"path": mixed}, False, "not a seglog log directory"),
        ({**ok, "assign": '{"ev": [0]}'}, False, "only one of"),
        ({**ok, "subscribe": "ev,a/b"}, False, "invalid topic name"),
        ({**ok, "startingOffsets": "latest"}, False, "cannot start at latest"),
        ({**ok, "endingOffsets": "earliest"}, False, "cannot end at earliest"),
        ({**ok, "startingOffsets": '{"ev": {"0": -1}}'}, False, "cannot start at latest"),
        ({**ok, "endingOffsets": '{"ev": {"0": -2}}'}, False, "cannot end at earliest"),
        ({**ok, "startingOffsets": '{"ev": {"0": -3}}'}, False, "bad entry"),
        ({**ok, "startingOffsets": "[1]"}, False, "JSON like"),
        ({**ok, "endingOffsets": "latest"}, True, "for batch queries"),
        ({**ok, "minPartitions": "0"}, False, "positive integer"),
        ({**ok, "maxOffsetsPerTrigger": "x"}, True, "positive integer"),
        ({**ok, "failOnDataLoss": "yes"}, False, "true or false"),
        ({**ok, "maxTriggerDelay": "soon"}, True, "duration"),
        ({**ok, "startingTimestamp": "-5"}, False, ">= 0"),
        ({**ok, "startingOffsetsByTimestampStrategy": "maybe"}, False, "error or latest"),
        ({"path": mixed, "subscribePattern": "("}, False, "not a regular expression"),
        ({**ok, "groupId": "a b"}, False, "invalid group name"),
        ({"path": os.path.join(mixed, "zz-0"), "groupId": "g"}, True, "needs topics"),
        ({**ok, "groupId": "g"}, False, "a batch query commits nothing"),
    ]
    for options, streaming, words in bad:
        with pytest.raises(InvalidConfigError, match=words):
            parse(options, streaming)
    with pytest.raises(InvalidConfigError, match="does not exist"):
        parse({"path": mixed, "subscribe": "nope"}, False).partitions(must_exist=True)
    assert parse({"path": mixed, "subscribe": "nope"}, True).partitions(must_exist=False) == []


def test_a_range_whose_offsets_retention_deletes_before_the_read(tmp_path):
    """Planned, then deleted before read(): an error naming failOnDataLoss, or (false)
    the rest of the range from the new log start."""
    root = str(tmp_path)
    with Topic.open(root, "t", partitions=1, segment_bytes=4096, retention_bytes=1) as t:
        for i in range(100):
            t.append_batch([b"x" * 100 + b"%03d" % i])
        o = _options.parse_options({"path": root, "subscribe": "t"}, False)
        r = OffsetRange("t", 0, 10, 90)
        log = t.partition(0)
        assert log.enforce_retention()
        first = log.start_offset
        assert 10 < first < 90
        with pytest.raises(OffsetOutOfRangeError, match="failOnDataLoss=false"):
            list(sgs.read_range(o, r))
        o2 = _options.parse_options({"path": root, "subscribe": "t", "failOnDataLoss": "false"}, False)
        got = pa.Table.from_batches(list(sgs.read_range(o2, r)))
        assert got.column("offset").to_pylist() == list(range(first, 90))
        # planned after the deletion: the same two ways; a range wholly gone is dropped
        logs = _plan.Logs()
        with pytest.raises(OffsetOutOfRangeError, match=f"offsets 10 to {first - 1} of t-0"):
            _plan.plan(o, logs, {("t", 0): 10}, {("t", 0): 90})
        assert _plan.plan(o2, logs, {("t", 0): 10}, {("t", 0): 90}) == [OffsetRange("t", 0, first, 90)]
        assert _plan.plan(o2, logs, {("t", 0): 1}, {("t", 0): 5}) == []
        logs.close()


def test_stream_offsets_admission_control_and_available_now_without_spark(tmp_path):
    """The stream reader's planning calls, as Spark's engine makes them."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows
    root = str(tmp_path)
    with Topic.open(root, "ev", partitions=2) as t:
        t.append_batch([b"x"] * 30, partition=0)
        t.append_batch([b"y"] * 10, partition=1)
        ds = sgs.SeglogDataSource({"path": root, "subscribe": "ev", "startingoffsets": "earliest",
                                   "minoffsetspertrigger": "50", "maxtriggerdelay": "1h",
                                   "maxoffsetspertrigger": "20"})
        r = ds.streamReader(ds.schema())
        start = r.initialOffset()
        assert start == {"ev": {"0": 0, "1": 0}}
        assert r.getDefaultReadLimit() == ReadMaxRows(20)
        # the first trigger does not wait (as Kafka's); 20 prorated 30:10
        assert r.latestOffset(start, ReadMaxRows(20)) == {"ev": {"0": 15, "1": 5}}
        # then 40 available < minOffsetsPerTrigger within maxTriggerDelay: no batch
        assert r.latestOffset(start, ReadMaxRows(20)) == start
        # a limit from the engine replaces its own kind; the other bound stays (Kafka's
        # composite limit): 40 are enough for ReadMinRows(40), 20 is still the most
        assert r.latestOffset(start, ReadMinRows(40)) == {"ev": {"0": 15, "1": 5}}
        # ReadAllAvailable (e.g. Trigger.Once) ignores the options
        assert r.latestOffset(start, ReadAllAvailable()) == {"ev": {"0": 30, "1": 10}}
        assert r.reportLatestOffset() == {"ev": {"0": 30, "1": 10}}
        assert [p.value for p in r.partitions(start, {"ev": {"0": 15, "1": 5}})] == \
            [OffsetRange("ev", 0, 0, 15), OffsetRange("ev", 1, 0, 5)]
        assert r.partitions(start, start) == []
        # AvailableNow: the ends when it starts, whatever comes later; no waiting for
        # minOffsetsPerTrigger (it would wait for ever at the end)
        r.prepareForTriggerAvailableNow()
        t.append_batch([b"z"] * 20, partition=1)
        near = {"ev": {"0": 25, "1": 10}}
        assert r.latestOffset(near, ReadMaxRows(20)) == {"ev": {"0": 30, "1": 10}}
        assert r.latestOffset({"ev": {"0": 30, "1": 10}}, ReadMaxRows(20)) == \
            {"ev": {"0": 30, "1": 10}}
        # the reader goes to executors by pickle without its open logs
        import pickle
        again = pickle.loads(pickle.dumps(r))
        assert type(again) is type(r) and again.o == r.o
        r.stop()


def run_triggers(r, start, limit, most=200):
    """Spark's micro-batch loop over the reader's planning calls: plan the end,
    read the batch, go on from its end. The offsets each batch delivered."""
    batches = []
    for _ in range(most):
        end = r.latestOffset(start, limit)
        if end == start:
            break
        got = []
        for part in r.partitions(start, end):
            for b in r.read(part):
                got += list(zip(b.column("partition").to_pylist(), b.column("offset").to_pylist()))
        batches.append(got)
        start = end
    return start, batches


def test_a_stream_goes_on_from_the_new_log_start_at_once_after_retention(tmp_path, caplog):
    """failOnDataLoss=false with maxOffsetsPerTrigger: the first batch after
    retention deleted what the stream had not read starts at the new log start;
    no empty batches stepping through the deleted offsets, one warning."""
    from pyspark.sql.streaming.datasource import ReadMaxRows
    root = str(tmp_path)
    with Topic.open(root, "ev", partitions=2, segment_bytes=4096, retention_bytes=1) as t:
        t.append_batch([b"%04d" % i + b"." * 96 for i in range(20)], partition=0)
        t.append_batch([b"p1-%d" % i for i in range(6)], partition=1)
        ds = sgs.SeglogDataSource({"path": root, "subscribe": "ev", "startingoffsets": "earliest",
                                   "maxoffsetspertrigger": "10", "failondataloss": "false"})
        r = ds.streamReader(ds.schema())
        limit = r.getDefaultReadLimit()
        assert limit == ReadMaxRows(10)
        pos, batches = run_triggers(r, r.initialOffset(), limit)
        assert sorted(o for b in batches for o in b) == \
            [(0, i) for i in range(20)] + [(1, i) for i in range(6)]
        for i in range(20, 300):
            t.append(b"%04d" % i + b"." * 96, partition=0)
        t.append_batch([b"p1-%d" % i for i in range(6, 10)], partition=1)
        log = t.partition(0)
        assert log.enforce_retention()
        first = log.start_offset
        assert 60 < first < 290
        caplog.clear()
        with caplog.at_level("WARNING", logger="seglog"):
            pos, batches = run_triggers(r, pos, limit)
        assert all(batches), [len(b) for b in batches]           # no empty batch
        assert all(len(b) <= 10 for b in batches)
        assert sorted(o for b in batches for o in b) == \
            [(0, i) for i in range(first, 300)] + [(1, i) for i in range(6, 10)]
        assert len(batches) == -(-(300 - first + 4) // 10)
        lost = [m for m in caplog.messages if "were deleted" in m]
        assert len(lost) == 1 and f"offsets 20 to {first - 1} of ev-0" in lost[0]
        assert pos == {"ev": {"0": 300, "1": 10}}
        r.stop()


def test_min_offsets_per_trigger_counts_only_offsets_that_exist(tmp_path):
    from pyspark.sql.streaming.datasource import ReadMinRows
    root = str(tmp_path)
    with Topic.open(root, "ev", partitions=1, segment_bytes=4096, retention_bytes=1) as t:
        t.append_batch([b"x" * 100] * 5)
        ds = sgs.SeglogDataSource({"path": root, "subscribe": "ev", "startingoffsets": "earliest",
                                   "minoffsetspertrigger": "50", "maxtriggerdelay": "1h",
                                   "failondataloss": "false"})
        r = ds.streamReader(ds.schema())
        start = r.initialOffset()
        pos = r.latestOffset(start, ReadMinRows(50))     # the first trigger never waits
        assert pos == {"ev": {"0": 5}}
        for _ in range(200):
            t.append(b"x" * 100)
        log = t.partition(0)
        assert log.enforce_retention()
        assert log.end_offset - 5 >= 50 > log.end_offset - log.start_offset
        # 200 offsets were appended, but fewer than 50 of them are left: wait
        assert r.latestOffset(pos, ReadMinRows(50)) == pos
        for _ in range(60):
            t.append(b"x" * 100)
        assert r.latestOffset(pos, ReadMinRows(50)) == {"ev": {"0": log.end_offset}}
        r.stop()


# -- batch reads -------------------------------------------------------------------

def test_every_row_reads_back_byte_exact_with_keys_headers_and_timestamps(spark, mixed):
    for with_headers in (True, False):
        df = (spark.read.format("seglog").option("subscribe", "ev,zz,cc")
              .option("includeHeaders", str(with_headers).lower()).load(mixed))
        assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                              "timestampType"] + (["headers"] if with_headers else [])
        got = spark_rows(df, with_headers)
        want = sorted(expected_rows(mixed, "ev", 3, with_headers)
                      + expected_rows(mixed, "zz", 1, with_headers)
                      + expected_rows(mixed, "cc", 1, with_headers),
                      key=lambda r: (r[2], r[3], r[4]))
        assert len(got) == len(want) > 500
        assert got == want
    # one log directory: the topic is its name, the partition 0
    df = spark.read.format("seglog").load(os.path.join(mixed, "zz-0"))
    assert [r[:2] + r[3:] for r in spark_rows(df, False)] == \
        [r[:2] + r[3:] for r in expected_rows(mixed, "zz", 1, False)]


def test_starting_and_ending_offsets_timestamps_and_min_partitions(spark, mixed):
    ends = {p: Log.open(os.path.join(mixed, f"ev-{p}"), readonly=True).end_offset for p in range(3)}

    def offsets(**options):
        df = spark.read.format("seglog")
        if "assign" not in options:
            df = df.option("subscribe", "ev")
        for k, v in options.items():
            df = df.option(k, v)
        rows = df.load(mixed).select("partition", "offset").collect()
        return sorted((r.partition, r.offset) for r in rows)

    start = {"ev": {"0": 5, "1": -2, "2": 7}}
    end = {"ev": {"0": 9, "1": 3, "2": -1}}
    assert offsets(startingOffsets=json.dumps(start), endingOffsets=json.dumps(end)) == \
        [(0, o) for o in range(5, 9)] + [(1, o) for o in range(3)] + \
        [(2, o) for o in range(7, ends[2])]
    # by time, through the time index: the first offset at or after the timestamp
    log = Log.open(os.path.join(mixed, "ev-1"), readonly=True)
    stamps = [(m.offset, m.timestamp) for m in log.iter()]
    t0 = stamps[len(stamps) // 2][1]
    t1 = stamps[-5][1]
    want_from = min(o for o, ts in stamps if ts >= t0)
    want_to = min(o for o, ts in stamps if ts >= t1)
    got = offsets(assign='{"ev": [1]}', startingTimestamp=str(t0), endingTimestamp=str(t1))
    assert got == [(1, o) for o in range(want_from, want_to)]
    with pytest.raises(Exception, match="no message with a timestamp"):
        offsets(startingTimestamp=str(NOW + 3_600_000))
    assert offsets(startingTimestamp=str(NOW + 3_600_000),
                   startingOffsetsByTimestampStrategy="latest") == []
    with pytest.raises(Exception, match="must name every partition"):
        offsets(startingOffsets='{"ev": {"0": 1}}')
    with pytest.raises(Exception, match="unknown option"):
        offsets(**{"kafka.bootstrap.servers": "localhost:9092"})
    # minPartitions: Kafka's split, one Spark partition per range (about
    # minPartitions of them: Kafka rounds each share, here 2 + 2 + 2 of 7)
    df = spark.read.format("seglog").option("subscribe", "ev").option("minPartitions", 7).load(mixed)
    assert df.rdd.getNumPartitions() == len(split_ranges(
        [OffsetRange("ev", p, 0, ends[p]) for p in range(3)], 7)) > 3
    assert sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect()) == \
        [(p, o) for p in range(3) for o in range(ends[p])]
    assert spark.read.format("seglog").option("subscribe", "ev").load(mixed).rdd \
        .getNumPartitions() == 3


# -- streaming ---------------------------------------------------------------------

def test_a_stream_reads_what_is_appended_between_triggers_and_reports_its_lag(spark, tmp_path):
    root = str(tmp_path / "root")
    with Topic.open(root, "ev", partitions=2) as t:
        t.append_batch([b"a%d" % i for i in range(10)], partition=0)
        df = (spark.readStream.format("seglog").option("subscribe", "ev")
              .option("startingOffsets", "earliest").option("groupId", "dash").load(root))
        q = df.selectExpr("partition", "offset", "CAST(value AS STRING) AS v") \
            .writeStream.format("memory").queryName("appended").start()
        try:
            q.processAllAvailable()
            assert spark.sql("SELECT count(*) FROM appended").first()[0] == 10
            t.append_batch([b"b%d" % i for i in range(5)], partition=1)
            t.append_batch([b"c%d" % i for i in range(3)], partition=0)
            q.processAllAvailable()
            rows = spark.sql("SELECT partition, offset, v FROM appended").collect()
            assert sorted(tuple(r) for r in rows) == sorted(
                [(0, i, "a%d" % i) for i in range(10)] + [(0, 10 + i, "c%d" % i) for i in range(3)]
                + [(1, i, "b%d" % i) for i in range(5)])
            # the group's committed offsets follow the query: lag 0 once it is idle
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                parts = seglog.describe_group(root, "dash")["partitions"]
                if [parts[k]["lag"] for k in (("ev", 0), ("ev", 1))] == [0, 0]:
                    break
                time.sleep(0.1)
            assert {k: (v["committed"], v["lag"]) for k, v in parts.items()} == \
                {("ev", 0): (13, 0), ("ev", 1): (5, 0)}
        finally:
            q.stop()


def available_now(spark, root, ck, out, **options):
    """One Trigger.AvailableNow run to a Parquet sink; the rows of each micro-batch."""
    df = spark.readStream.format("seglog").option("subscribe", "ev")
    for k, v in options.items():
        df = df.option(k, v)
    q = (df.load(root).selectExpr("partition", "offset").writeStream.format("parquet")
         .option("path", out).option("checkpointLocation", ck).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert not q.isActive
    return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]


def test_a_restarted_stream_reads_only_new_data_in_limited_batches(spark, tmp_path):
    root, ck, out = (str(tmp_path / d) for d in ("root", "ck", "out"))
    with Topic.open(root, "ev", partitions=2) as t:
        t.append_batch([b"x"] * 13, partition=0)
        t.append_batch([b"y"] * 12, partition=1)
        # maxOffsetsPerTrigger 7, prorated: 3 + 3, 3 + 3, 3 + 3, then the rest
        assert available_now(spark, root, ck, out, startingOffsets="earliest",
                             maxOffsetsPerTrigger=7) == [6, 6, 6, 7]
        t.append_batch([b"z"] * 4, partition=1)
        # restarted from its checkpoint: only the 4 new messages (startingOffsets
        # applies to a new query only)
        assert available_now(spark, root, ck, out, startingOffsets="earliest") == [4]
        assert available_now(spark, root, ck, out, startingOffsets="earliest") == []
    got = sorted(tuple(r) for r in spark.read.parquet(out).collect())
    assert got == [(0, o) for o in range(13)] + [(1, o) for o in range(16)]


def test_retention_deleting_what_a_stream_needed_fails_it_or_skips_ahead(spark, tmp_path):
    root, ck, out = (str(tmp_path / d) for d in ("root", "ck", "out"))
    with Topic.open(root, "ev", partitions=1, segment_bytes=4096, retention_bytes=1) as t:
        t.append_batch([b"%04d" % i + b"." * 96 for i in range(20)])
        assert available_now(spark, root, ck, out, startingOffsets="earliest") == [20]
        for i in range(20, 200):
            t.append(b"%04d" % i + b"." * 96)
        log = t.partition(0)
        assert log.enforce_retention()
        first = log.start_offset
        assert 20 < first < 200
        with pytest.raises(Exception, match=r"offsets 20 to %d of ev-0 were deleted" % (first - 1)):
            available_now(spark, root, ck, out)
        assert available_now(spark, root, ck, out, failOnDataLoss="false") == [200 - first]
    got = sorted(r.offset for r in spark.read.parquet(out).collect())
    assert got == list(range(20)) + list(range(first, 200))


def test_a_rate_limited_stream_skips_what_retention_deleted_in_one_batch(spark, tmp_path):
    """maxOffsetsPerTrigger with failOnDataLoss=false: after retention deleted a
    prefix the stream had not read, the next micro-batch starts at the new log
    start: no empty micro-batches, and exactly the offsets still there are read."""
    root, ck, out = (str(tmp_path / d) for d in ("root", "ck", "out"))
    with Topic.open(root, "ev", partitions=1, segment_bytes=4096, retention_bytes=1) as t:
        t.append_batch([b"%04d" % i + b"." * 96 for i in range(20)])

        def run():
            df = (spark.readStream.format("seglog").option("subscribe", "ev")
                  .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 10)
                  .option("failOnDataLoss", "false").load(root))
            q = (df.selectExpr("partition", "offset").writeStream.format("parquet")
                 .option("path", out).option("checkpointLocation", ck)
                 .trigger(availableNow=True).start())
            q.awaitTermination(120)
            assert not q.isActive
            return [p["numInputRows"] for p in q.recentProgress]
        assert run() == [10, 10]
        for i in range(20, 300):
            t.append(b"%04d" % i + b"." * 96)
        log = t.partition(0)
        assert log.enforce_retention()
        first = log.start_offset
        assert 60 < first < 290
        rows = run()
        assert 0 not in rows and sum(rows) == 300 - first, rows
        assert len(rows) == -(-(300 - first) // 10)
    got = sorted(r.offset for r in spark.read.parquet(out).collect())
    assert got == list(range(20)) + list(range(first, 300))


# -- the KafkaRDD pattern -----------------------------------------------------------

def test_rdd_ranges_commit_only_after_the_jobs_output_succeeded(spark, tmp_path):
    sc = spark.sparkContext
    root = str(tmp_path / "root")
    with Topic.open(root, "ev", partitions=3) as t:
        t.append_batch([Record(b"v%d" % i, key=b"k%d" % i, headers=[("n", b"%d" % i)])
                        for i in range(30)])
        t.append_batch([b"w%d" % i for i in range(40)], partition=2)

        def job(out: str, fail: bool) -> None:
            # (nested: cloudpickle sends it by value, the workers cannot import tests)
            def render(m):
                if fail and m.value == b"w7":
                    raise RuntimeError("bad record")
                return "%s %d %d" % (m.value.decode(), m.partition, m.offset)

            ranges = offset_ranges(root, ["ev"], min_partitions=4, group="etl")
            rdd(sc, root, ranges).map(render).saveAsTextFile(out)   # the output first ...
            commit(root, "etl", ranges)                              # ... then the offsets

        with pytest.raises(Exception, match="bad record"):
            job(str(tmp_path / "out0"), fail=True)
        assert committed_offsets(root, "etl") == {}  # the failed job committed nothing
        ranges = offset_ranges(root, ["ev"], min_partitions=4, group="etl")
        assert len(ranges) >= 4
        msgs = rdd(sc, root, ranges).collect()
        want = [(tp, m) for tp in [("ev", p) for p in range(3)]
                for m in Log.open(os.path.join(root, f"ev-{tp[1]}"), readonly=True).iter()]
        assert sorted(msgs) == sorted(seglog.ConsumerMessage(tp + tuple(m)) for tp, m in want)
        assert {m.headers for m in msgs if m.key} == {(("n", b"%d" % i),) for i in range(30)}

        job(str(tmp_path / "out1"), fail=False)
        ends = t.end_offsets()
        assert committed_offsets(root, "etl") == {("ev", p): e for p, e in ends.items()}
        assert offset_ranges(root, ["ev"], group="etl") == []
        t.append_batch([b"new"], partition=1)
        assert offset_ranges(root, ["ev"], group="etl") == [OffsetRange("ev", 1, ends[1], ends[1] + 1)]
    assert seglog.describe_group(root, "etl")["partitions"][("ev", 1)]["lag"] == 1
    # a range retention deleted in part fails its task: a job reads ranges whole or not at all
    with Log.open(os.path.join(root, "ev-2"), segment_bytes=4096, retention_bytes=4096) as log:
        log.append_batch([b"z" * 200] * 100)
        assert log.enforce_retention()
        gone = OffsetRange("ev", 2, 0, log.end_offset)
    with pytest.raises(Exception, match=r"offsets 0 to \d+ of ev-2 were deleted \(retention\)"):
        rdd(sc, root, [gone]).collect()
    with pytest.raises(InvalidConfigError):
        offset_ranges(root, ["nope"])
    with pytest.raises(TypeError):
        offset_ranges(root, "ev")


# -- the example -------------------------------------------------------------------

def test_the_spark_pipeline_example_counts_the_same_in_batch_and_streaming(spark, tmp_path):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "examples"))
    try:
        import spark_pipeline
    finally:
        sys.path.pop(0)
    # 80,000 events ~2 ms apart: 160 s, so the watermark (1 minute) closes a minute
    found = spark_pipeline.run(spark, str(tmp_path), 80_000)
    assert found["same"] and found["batch_events"] == 60_000
    assert sum(found["run1"]) == 60_000 and found["run2"] == [20_000]
    assert set(found["lag"].values()) == {0}

"""The "seglog" sink: df.write and df.writeStream into seglog topics, exactly once.

Without Spark: the Arrow encoder against Log.encode, the options, the task side
(placement, checks, staging) and the driver side (manifest, publishing, finishing
a commit its driver died inside) on Arrow batches made here. With the module's
local[2] session: round trips of every column and both codecs, bad input, a task
failure, streams run again. The streaming query SIGKILLed at random instants is
test_spark_sink_kills.py."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")
np = pytest.importorskip("numpy")

from seglog import InvalidConfigError, Log, MessageTooLargeError, Record, Topic  # noqa: E402
from seglog.errors import SeglogError  # noqa: E402
from seglog.spark import _publish, _sink  # noqa: E402
from seglog.spark._encode import Rows, encode_rows  # noqa: E402
from seglog.log import encode_batches  # noqa: E402
from seglog.spark._publish import WriteDir, make_manifest, publish, sweep_jobs  # noqa: E402
from seglog.spark._sink_options import ColumnSpec, parse_sink_options  # noqa: E402
from seglog.spark._stage import Stager, StagedGroup, stage_task  # noqa: E402

from clock import SYNTHETIC_CLOCK  # noqa: E402

NOW = int(time.time() * 1000)
HTYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def seed_for(name: str) -> int:
    seed = int(os.environ.get("SEGLOG_SEED", "0")) or random.randrange(1 << 30)
    print(f"\n{name}: seed {seed} (rerun with SEGLOG_SEED={seed})")
    return seed


# -- the Arrow encoder ----------------------------------------------------------------------
def random_records(rnd: random.Random, n: int, limit: int) -> list[Record]:
    kmode = rnd.choice(["none", "some", "all"])
    tmode = rnd.choice(["same", "vary", "wide"])
    hmode = rnd.choice(["none", "some"])
    out = []
    while len(out) < n:
        v = rnd.choice([None, b"", os.urandom(rnd.randrange(0, 100)), b"x",
                        os.urandom(rnd.randrange(65530, 65540)) if rnd.random() < 0.05 else b"y"])
        k = (None if kmode == "none" or (kmode == "some" and rnd.random() < 0.5)
             else os.urandom(rnd.randrange(0, 9)))
        t = (NOW if tmode == "same" else NOW + rnd.randrange(0, 1000) if tmode == "vary"
             else rnd.randrange(0, 1 << 45))
        h = [] if hmode == "none" or rnd.random() < 0.5 else \
            [("h%d" % j, os.urandom(rnd.randrange(0, 5))) for j in range(rnd.randrange(0, 3))]
        size = (len(v) if v else 0) + (len(k) if k else 0) + sum(len(a) + len(b) + 8 for a, b in h)
        if size <= limit:
            out.append(Record(v, key=k, timestamp=t, headers=h))
    return out


def as_rows(recs: list[Record], with_keys: bool, with_headers: bool, pad: int = 0) -> Rows:
    """The records as the sink's Arrow columns, ``pad`` rows of other data around them
    (the arrays are slices, as the sink's are after placing rows)."""
    vals = [b"pad"] * pad + [r.value for r in recs] + [b"pad"] * pad
    keys = [b"k"] * pad + [r.key for r in recs] + [b"k"] * pad
    hdrs = [None] * pad + [[{"key": a, "value": b} for a, b in r.headers] for r in recs] + [None] * pad
    n = len(recs)
    return Rows(pa.array(vals, pa.binary()).slice(pad, n),
                pa.array(keys, pa.binary()).slice(pad, n) if with_keys else None,
                np.array([r.timestamp for r in recs], dtype=np.int64),
                pa.array(hdrs, HTYPE).slice(pad, n) if with_headers else None)


def test_the_arrow_encoder_makes_the_batches_log_encode_makes(tmp_path):
    """Byte for byte, cut at the same places: values of every shape (null, empty, over
    64 KiB: wide lengths), keys, headers, equal, varied and wide-ranging timestamps,
    both codecs, slices of larger arrays."""
    seed = seed_for("arrow encoder")
    rnd = random.Random(seed)
    for trial in range(150):
        limit = rnd.choice([300, 1000, 70000, 1 << 20])
        comp = rnd.choice([None, "lz4"])
        with Log.open(str(tmp_path / f"l{trial}"), max_message_bytes=limit, compression=comp,
                      **SYNTHETIC_CLOCK) as log:
            recs = random_records(rnd, rnd.randrange(1, 300), limit)
            want = [(b"".join(d) if isinstance(d, list) else d, n, ts)
                    for d, n, ts, _ in encode_batches(log, recs, NOW)]
            rows = as_rows(recs, any(r.key is not None for r in recs) or rnd.random() < 0.5,
                           any(r.headers for r in recs) or rnd.random() < 0.5, rnd.randrange(3))
            got = [(b"".join(parts), n, ts) for parts, n, ts in
                   encode_rows(rows, log.config, 1 if comp else 0, NOW, "t-0")]
            assert got == want, f"trial {trial}: {len(got)} batches, {len(want)} wanted"


def test_the_encoder_refuses_bad_rows_before_the_first_batch(tmp_path):
    with Log.open(str(tmp_path / "l"), max_message_bytes=100) as log:
        cfg = log.config
    big = Rows(pa.array([b"a", b"x" * 101], pa.binary()), None, NOW, None)
    with pytest.raises(MessageTooLargeError, match="t-1: a record of 101 bytes"):
        next(encode_rows(big, cfg, 0, NOW, "t-1"))
    keyed = Rows(pa.array([b"a" * 60], pa.binary()), pa.array([b"k" * 41], pa.binary()), NOW, None)
    with pytest.raises(MessageTooLargeError, match="101 bytes"):
        next(encode_rows(keyed, cfg, 0, NOW, "t-1"))
    early = Rows(pa.array([b"a"], pa.binary()), None, np.array([5], dtype=np.int64), None)
    with pytest.raises(ValueError, match="t-1: timestamp 5 is more than"):
        next(encode_rows(early, cfg, 0, NOW, "t-1"))
    hnull = Rows(pa.array([b"a"], pa.binary()), None, NOW,
                 pa.array([[{"key": "h", "value": None}]], HTYPE))
    with pytest.raises(ValueError, match="header key or value is null"):
        next(encode_rows(hnull, cfg, 0, NOW, "t-1"))


# -- options -----------------------------------------------------------------------------------
def test_options_are_checked_with_names_in_the_messages(tmp_path):
    root = str(tmp_path)
    o = parse_sink_options({"PATH": root, "Topic": "t", "partitions": "3",
                            "log.compression": "lz4", "log.retention_ms": "none",
                            "log.segment_bytes": "4096", "checkpointLocation": "/c"})
    assert (o.root, o.topic, o.partitions, o.checkpoint) == (root, "t", 3, "/c")
    assert dict(o.settings) == {"compression": "lz4", "retention_ms": None, "segment_bytes": 4096}
    for bad, match in [({}, "needs a path"),
                       ({"path": root, "kafka.bootstrap.servers": "h:9092"}, "unknown option"),
                       ({"path": root, "topic": "a/b"}, "invalid topic name"),
                       ({"path": root, "partitions": "0"}, "partitions must be an integer"),
                       ({"path": root, "log.compresion": "lz4"}, "did you mean log.compression"),
                       ({"path": root, "log.segment_bytes": "big"}, "log.segment_bytes must be int"),
                       ({"path": root, "log.compression": "zstd"}, "compression must be"),
                       ({"path": str(tmp_path / "f")}, "not a directory")]:
        if bad.get("path", "").endswith("f"):
            (tmp_path / "f").write_bytes(b"")
        with pytest.raises(InvalidConfigError, match=match):
            parse_sink_options(bad)


# -- the task side: placement, checks, staging ------------------------------------------------------
def batch(n: int, keys=None, partition=None, topic=None, values=None, stamps=None,
          headers=None):
    cols = {"value": pa.array(values if values is not None else [b"v%d" % i for i in range(n)],
                              pa.binary())}
    if keys is not None:
        cols["key"] = pa.array(keys, pa.binary())
    if partition is not None:
        cols["partition"] = pa.array(partition, pa.int32())
    if topic is not None:
        cols["topic"] = pa.array(topic, pa.string())
    if stamps is not None:
        cols["timestamp"] = pa.array(stamps, pa.timestamp("us", tz="UTC"))
    if headers is not None:
        cols["headers"] = pa.array(headers, HTYPE)
    return pa.RecordBatch.from_pydict(cols)


def spec(rb, topic_column=False) -> ColumnSpec:
    names = rb.schema.names
    return ColumnSpec(value="value", key="key" if "key" in names else None,
                      headers="headers" if "headers" in names else None,
                      partition="partition" if "partition" in names else None,
                      timestamp="timestamp" if "timestamp" in names else None,
                      topic="topic" if topic_column else None)


def staged_messages(wd: WriteDir, groups: list[tuple[str, StagedGroup]]) -> dict:
    """What the staged files hold: {(topic, p): [(value, key, ts, headers), ...]}."""
    out: dict = {}
    for d, g in groups:
        with _publish.staged_batches(os.path.join(wd.path, d, g.name), g) as batches:
            for view, n, _, _ in batches:
                from seglog import MessageSet
                for m in MessageSet(bytes(view)):
                    out.setdefault((g.topic, g.partition), []).append(
                        (m.value, m.key, m.timestamp, m.headers))
    return out


def stage(root: str, rbs, topic: str | None = "t", task: int = 0, batch_no: int = 0,
          topic_column=False, **opts):
    """What a task of micro-batch ``batch_no`` of query "q1" stages of ``rbs``."""
    o = parse_sink_options({"path": root, **({"topic": topic} if topic else {}), **opts})
    wd = WriteDir(root, "query", "q1")
    return wd, stage_task(o, spec(rbs[0], topic_column), wd, batch_no, task, iter(rbs))


def test_rows_go_where_topic_append_puts_them(tmp_path):
    """The partition column where given, else the key's partition (Topic.partition_for),
    else the task's sticky partition; a task's rows of a partition in one file."""
    root = str(tmp_path)
    Topic.open(root, "t", partitions=5).close()
    rnd = random.Random(3)
    keys = [None if rnd.random() < 0.3 else os.urandom(rnd.randrange(0, 6)) for _ in range(400)]
    part = [None if rnd.random() < 0.7 else rnd.randrange(5) for _ in range(400)]
    rbs = [batch(200, keys=keys[:200], partition=part[:200]),
           batch(200, keys=keys[200:], partition=part[200:], values=[b"w%d" % i for i in range(200)])]
    wd, groups = stage(root, rbs, task=7, batch_no=1)
    assert len({(g.topic, g.partition) for _, g in groups}) == len(groups)  # one file each
    got = staged_messages(wd, groups)
    values = [b"v%d" % i for i in range(200)] + [b"w%d" % i for i in range(200)]
    with Topic.open(root, "t") as t:
        want: dict = {}
        for v, k, p in zip(values, keys, part):
            where = p if p is not None else (t.partition_for(k) if k is not None else (7 + 1) % 5)
            want.setdefault(("t", where), []).append((v, k))
    assert {tp: [(v, k) for v, k, _, _ in ms] for tp, ms in got.items()} == want


def test_every_column_is_staged_as_written(tmp_path):
    root = str(tmp_path)
    Topic.open(root, "t", partitions=1, compression="lz4").close()
    stamps = [NOW * 1000 + 999, None, NOW * 1000 - 5_000_000]
    headers = [[{"key": "a", "value": b"1"}, {"key": "b", "value": b""}], None, []]
    rb = batch(3, keys=[b"k", None, b""], values=[b"x" * 10, None, b""], stamps=stamps,
               headers=headers)
    before = int(time.time() * 1000)
    wd, groups = stage(root, [rb])
    after = int(time.time() * 1000)
    (ms,) = staged_messages(wd, groups).values()
    assert [m[0] for m in ms] == [b"x" * 10, None, b""]
    assert [m[1] for m in ms] == [b"k", None, b""]
    # a row without a timestamp gets the time it is staged at (NOW is the module's
    # import time, minutes before this runs in a whole suite)
    assert ms[0][2] == NOW and ms[2][2] == NOW - 5000 and before <= ms[1][2] <= after
    assert [m[3] for m in ms] == [(("a", b"1"), ("b", b"")), (), ()]


def test_bad_rows_fail_the_task_and_leave_nothing(tmp_path):
    root = str(tmp_path)
    Topic.open(root, "t", partitions=2, max_message_bytes=100).close()
    cases = [
        ([batch(3, partition=[0, 2, None])], {}, InvalidConfigError, "partition is 2: topic 't' has partitions 0 to 1"),
        ([batch(3, partition=[0, -1, 1])], {}, InvalidConfigError, "partition is -1"),
        ([batch(2), batch(2, values=[b"a", b"x" * 101])], {}, MessageTooLargeError, "t-[01]: a record of 101 bytes"),
        ([batch(1, stamps=[5_000_000])], {}, ValueError, "timestamp 5000 is more than"),
        ([batch(2, topic=["t", None])], {"topic_column": True, "topic": None}, InvalidConfigError, "topic is null"),
        ([batch(2, topic=["t", "nope"])], {"topic_column": True, "topic": None}, InvalidConfigError, "'nope' does not exist"),
    ]
    for rbs, kw, err, match in cases:
        with pytest.raises(err, match=match):
            stage(root, rbs, **kw)
        stage_dir = os.path.join(root, "__spark", "queries", "q1", "stage", "0")
        assert not os.listdir(stage_dir), match      # the task removed what it staged
    with Topic.open(root, "t", readonly=True) as t:
        assert t.end_offsets() == {0: 0, 1: 0}


def test_a_task_part_too_large_for_one_atomic_append_is_refused(tmp_path):
    root = str(tmp_path)
    Topic.open(root, "t", partitions=1, segment_bytes=4096, max_message_bytes=1024).close()
    with pytest.raises(MessageTooLargeError, match="spread the rows over more tasks"):
        stage(root, [batch(100, values=[b"x" * 100] * 100)])


def test_topics_are_created_with_the_options_and_never_changed(tmp_path):
    root = str(tmp_path)
    rb = batch(4, topic=["a", "b", "a", "b"])
    with pytest.raises(InvalidConfigError, match="'a' does not exist .* give the option partitions"):
        stage(root, [rb], topic=None, topic_column=True)
    wd, groups = stage(root, [rb], topic=None, topic_column=True, partitions="3",
                       **{"log.compression": "lz4", "log.segment_bytes": "8192"})
    assert sorted((g.topic, g.records) for _, g in groups) == [("a", 2), ("b", 2)]
    with Topic.open(root, "a", readonly=True) as t:
        assert t.num_partitions == 3 and t.partition(2).config.compression == "lz4"
        assert t.partition(0).config.segment_bytes == 8192
    with pytest.raises(InvalidConfigError, match="exists with compression='lz4', not None"):
        stage(root, [rb], topic="a", **{"log.compression": "none"})


# -- the driver side: publishing exactly once ---------------------------------------------------------
def read_values(root: str, topic: str) -> dict[int, list[bytes]]:
    with Topic.open(root, topic, readonly=True) as t:
        return {p: [m.value for m in t.partition(p).iter()] for p in range(t.num_partitions)}


def test_a_commit_killed_at_any_group_is_finished_once_by_the_next(tmp_path, monkeypatch):
    """Commits that die after 0, 1, ... of their atomic appends (another writer
    appending meanwhile) are finished by the next commit of the query from their
    manifest, each group once; the batch run again publishes nothing more."""
    root = str(tmp_path)
    Topic.open(root, "t", partitions=3, max_message_bytes=300).close()
    other = Topic.open(root, "t", multi_writer=True)
    rnd = random.Random(4)
    groups_total = 0
    for cut in range(6):
        root_b = cut + 10
        rbs = [batch(60, keys=[os.urandom(4) for _ in range(60)],
                     values=[b"b%d.%d" % (root_b, i) for i in range(60)])]
        wd, groups = stage(root, rbs, task=0, batch_no=root_b)
        wd2, more = stage(root, [batch(30, values=[b"c%d.%d" % (root_b, i) for i in range(30)])],
                          task=1, batch_no=root_b)
        groups += more
        groups_total = len(groups)
        m = make_manifest(wd, root_b, groups, 10_000)
        with wd.locked(10):
            wd.write_manifest(m)
            calls = []
            real = _publish.append_encoded

            def dying(log, batches, atomic=False):
                if len(calls) == cut:
                    raise KeyboardInterrupt("killed")
                calls.append(1)
                other.append(b"other", partition=rnd.randrange(3))   # another writer
                return real(log, batches, atomic)
            monkeypatch.setattr(_publish, "append_encoded", dying)
            if cut < len(m.groups):
                with pytest.raises(KeyboardInterrupt):
                    publish(wd, m, resumed=False, timeout_ms=10_000)
            else:                        # killed after the last group, before finishing
                publish(wd, m, resumed=False, timeout_ms=10_000)
            monkeypatch.undo()
        # Spark runs the batch again: new staging, the same commit call
        _, again = stage(root, rbs, task=0, batch_no=root_b)
        writer = make_stream_writer(root)
        writer.commit([message("q1", root_b, again)], root_b)
        writer.commit([message("q1", root_b, again)], root_b)      # and once more
        assert wd.manifest() is None and wd.committed() == root_b
        values = [v for vs in read_values(root, "t").values() for v in vs if v != b"other"]
        assert sorted(values) == sorted(v for b in range(10, root_b + 1) for v in
                                         [b"b%d.%d" % (b, i) for i in range(60)]
                                         + [b"c%d.%d" % (b, i) for i in range(30)]), f"cut {cut}"
        assert not os.path.exists(wd.stage_dir(root_b))        # nothing staged left
    other.close()
    assert groups_total >= 4


def make_stream_writer(root: str, **opts):
    """The stream writer Spark is given, driven by hand (no session)."""
    o = parse_sink_options({"path": root, "topic": "t", **opts})
    return _sink.sink_classes()["SeglogStreamWriter"](o, ColumnSpec(value="value"), _Msg)


class _Msg:
    def __init__(self, write, batch, task, groups):
        self.write, self.batch, self.task, self.groups = write, batch, task, groups


def message(query: str, batch_no: int, groups) -> _Msg:
    return _Msg(("query", query), batch_no, 0, groups)


def test_batch_writes_whose_drivers_died_are_finished_or_removed_by_the_next(tmp_path):
    """A job that died inside its commit (manifest there, lock free) is finished; one
    that died before (its driver's JVM gone) and one that ended (no driver record:
    what a task that outlived its job left) are removed; one whose driver may live
    is left alone."""
    root = str(tmp_path)
    Topic.open(root, "t", partitions=2).close()
    o = parse_sink_options({"path": root, "topic": "t"})

    def job(name: str, rows: int) -> tuple[WriteDir, list]:
        wd = WriteDir(root, "job", name)
        _publish.start_job(wd)
        st = Stager(o, ColumnSpec(value="value"), wd.open_stage(0), 0, 0, wd.check)
        st.add(batch(rows))
        return wd, [(os.path.relpath(wd.stage_dir(0), wd.path), g) for g in st.finish()]
    died_committing, groups = job("committing", 5)
    died_committing.write_manifest(make_manifest(died_committing, 0, groups, 10_000))
    orphan, _ = job("orphan", 3)
    with open(os.path.join(orphan.path, _publish.DRIVER), "w") as f:
        json.dump({"host": socket.gethostname(), "boot": _publish.boot_id(), "pid": 1 << 22,
                   "start": 1}, f)
    ended, _ = job("ended", 1)
    os.remove(os.path.join(ended.path, _publish.DRIVER))
    alive, _ = job("running", 2)          # no JVM here: its driver cannot be proven gone
    sweep_jobs(root, 10_000)
    assert sorted(v for vs in read_values(root, "t").values() for v in vs) == \
        sorted(b"v%d" % i for i in range(5))
    assert os.listdir(os.path.join(root, "__spark", "jobs")) == ["running"]
    assert os.listdir(alive.stage_dir(0))
    # a task of an ended job makes nothing and keeps nothing
    with pytest.raises(SeglogError, match="has ended"):
        ended.open_stage(0)
    assert not os.path.exists(ended.path)
    st = Stager(o, ColumnSpec(value="value"), alive.open_stage(0), 1, 1, alive.check)
    st.add(batch(2))
    os.remove(os.path.join(alive.path, _publish.DRIVER))     # the job is aborted meanwhile
    with pytest.raises(SeglogError, match="has ended"):
        st.finish()


def make_batch_writer(root: str, **opts):
    """The batch writer Spark is given (a new job), driven by hand (no session)."""
    o = parse_sink_options({"path": root, "topic": "t", **opts})
    return _sink.sink_classes()["SeglogWriter"](o, ColumnSpec(value="value", partition="partition"),
                                                _Msg)


def job_messages(root: str, writer, tag: bytes, n: int = 40) -> list:
    """Two tasks of ``writer``'s job staging ``n`` rows each, spread over partitions
    0 and 1; the messages their ``write`` returns."""
    o = parse_sink_options({"path": root, "topic": "t"})
    wd = WriteDir(root, "job", writer.job)
    out = []
    for task in range(2):
        rb = batch(n, partition=[i % 2 for i in range(n)],
                   values=[tag + b"-%d.%d" % (task, i) for i in range(n)])
        groups = stage_task(o, spec(rb), wd, 0, task, iter([rb]))
        out.append(_Msg(("job", writer.job), 0, task, groups))
    return out


def lock_out_of_partition_1(monkeypatch) -> None:
    """The commit's appends to partition 1 fail as behind a writer holding its lock
    (partition 0's go in): a commit that fails after publishing part."""
    from seglog import LogLockedError
    real = _publish.append_encoded

    def locked_out_of_1(log, batches, atomic=False):
        if log.path.endswith("t-1"):
            raise LogLockedError("another writer held the append lock")
        return real(log, batches, atomic)
    monkeypatch.setattr(_publish, "append_encoded", locked_out_of_1)


def test_a_batch_commit_behind_a_stopped_writer_fails_and_leaves_nothing(tmp_path):
    """Another writer of a partition is stopped (SIGSTOP) inside an append, holding the
    append lock: the job's commit fails with ``LogLockedError`` after
    ``lockTimeoutMs`` having published nothing, and the job is over: nothing of it
    is visible, then or ever (the next write under the root publishes only its own
    rows), and nothing of it is left on disk."""
    from mw_child import stopped_values
    from mw_harness import gone, readline, spawn, wait_exit, wait_stopped
    from seglog import LogLockedError
    from seglog.topic import partition_dir
    root = str(tmp_path)
    Topic.open(root, "t", partitions=2).close()
    child = spawn("stop", partition_dir(root, "t", 1), "{}", stdout=subprocess.PIPE)
    try:
        assert readline(child, "its first append") == "0"
        wait_stopped(child.pid)
        writer = make_batch_writer(root, lockTimeoutMs=700)
        msgs = job_messages(root, writer, b"failed")
        with pytest.raises(LogLockedError):
            writer.commit(msgs)
        writer.abort(msgs)                       # Spark aborts a job whose commit failed
        assert read_values(root, "t")[0] == []
        assert not os.path.exists(WriteDir(root, "job", writer.job).path)
        os.kill(child.pid, signal.SIGCONT)
        assert readline(child, "its stopped call") == f"1 {1 + len(stopped_values())}"
        assert wait_exit(child, "the continued writer") == 0
    finally:
        gone(child)
    after = make_batch_writer(root)              # its open sweeps what jobs left
    after.commit(job_messages(root, after, b"after"))
    got = read_values(root, "t")
    assert sorted(got[0] + got[1]) == sorted(
        [b"before", *stopped_values()]
        + [b"after-%d.%d" % (t, i) for t in range(2) for i in range(40)])
    assert os.listdir(os.path.join(root, "__spark", "jobs")) == []


@pytest.mark.parametrize("failure", ["locked", "damaged", "manifest"])
def test_a_batch_commit_that_published_nothing_ends_the_job_durably(tmp_path, monkeypatch,
                                                                    failure):
    """A commit that fails having published nothing (every partition's append locked
    out; a damaged staging file in each partition; the manifest's directory fsync
    failing after its rename) ends the job: its manifest's removal is durable (after a
    power loss it is not back for a later sweep to publish), nothing of it is
    visible, and the next write publishes only its own rows."""
    from seglog import LogLockedError
    from seglog.errors import CorruptRecordError
    from seglog.testing import FaultyFS
    root = str(tmp_path)
    Topic.open(root, "t", partitions=2).close()
    writer = make_batch_writer(root)
    msgs = job_messages(root, writer, b"failed")
    wd = WriteDir(root, "job", writer.job)
    expected: type[BaseException] = LogLockedError
    if failure == "locked":
        def locked_out(log, batches, atomic=False):
            raise LogLockedError("another writer held the append lock")
        monkeypatch.setattr(_publish, "append_encoded", locked_out)
    elif failure == "damaged":
        for m in msgs:
            for d, g in m.groups:
                with open(os.path.join(wd.path, d, g.name), "r+b") as f:
                    f.seek(60)
                    f.write(b"\xff")
        expected = CorruptRecordError
    crash_states = []
    with FaultyFS(wd.path) as fs:
        # what a power loss could leave as the job's directory starts to go
        fs.on_event = lambda op, path: crash_states.append(fs.capture()) \
            if op == "unlink" and path.endswith(_publish.DRIVER) else None
        if failure == "manifest":
            fs.fail("fsync", nth=2)          # the tmp file's, then the directory's
            expected = OSError
        with pytest.raises(expected):
            writer.commit(msgs)
    monkeypatch.undo()
    assert len(crash_states) == 1 and _publish.MANIFEST not in crash_states[0].durable_names
    writer.abort(msgs)
    assert read_values(root, "t") == {0: [], 1: []}
    assert not os.path.exists(wd.path)
    after = make_batch_writer(root)
    after.commit(job_messages(root, after, b"after"))
    got = read_values(root, "t")
    assert sorted(got[0] + got[1]) == sorted(b"after-%d.%d" % (t, i)
                                             for t in range(2) for i in range(40))


def test_an_unfinished_commit_that_cannot_be_finished_names_itself_and_the_way_out(
        tmp_path, monkeypatch):
    """A job's commit failed after publishing part, and a staging file of the rest is
    damaged since: the next write's sweep cannot finish it, fails (nothing more
    published), and says which write and what to do; with that write moved away, the
    next write goes through."""
    from seglog import LogLockedError
    from seglog.errors import CorruptRecordError
    root = str(tmp_path / "root")
    Topic.open(root, "t", partitions=2).close()
    writer = make_batch_writer(root)
    msgs = job_messages(root, writer, b"part")
    lock_out_of_partition_1(monkeypatch)
    with pytest.raises(LogLockedError):
        writer.commit(msgs)
    monkeypatch.undo()
    wd = WriteDir(root, "job", writer.job)
    for m in msgs:
        for d, g in m.groups:
            if g.partition == 1:
                with open(os.path.join(wd.path, d, g.name), "r+b") as f:
                    f.seek(60)
                    f.write(b"\xff")
    before = read_values(root, "t")
    with pytest.raises(CorruptRecordError) as err:
        make_batch_writer(root)
    notes = " ".join(getattr(err.value, "__notes__", []))
    assert writer.job in notes and "move " + wd.path in notes
    assert read_values(root, "t") == before
    os.rename(wd.path, str(tmp_path / "moved-away"))
    after = make_batch_writer(root)
    after.commit(job_messages(root, after, b"after"))
    got = read_values(root, "t")
    assert sorted(got[0] + got[1]) == sorted(before[0] + [b"after-%d.%d" % (t, i)
                                                           for t in range(2) for i in range(40)])


def test_a_micro_batch_behind_a_stopped_writer_fails_then_appears_once_when_run_again(
        tmp_path):
    """A micro-batch's commit behind a writer stopped (SIGSTOP) holding a partition's
    append lock fails with ``LogLockedError`` having published nothing; Spark runs
    the micro-batch again once the query restarts (new staging files), and its rows
    appear once, the first attempt's manifest finished, nothing staged left."""
    from mw_child import stopped_values
    from mw_harness import gone, readline, spawn, wait_exit, wait_stopped
    from seglog import LogLockedError
    from seglog.topic import partition_dir
    root = str(tmp_path)
    Topic.open(root, "t", partitions=2).close()
    rows = batch(40, partition=[i % 2 for i in range(40)],
                 values=[b"m-%d" % i for i in range(40)])
    child = spawn("stop", partition_dir(root, "t", 1), "{}", stdout=subprocess.PIPE)
    try:
        assert readline(child, "its first append") == "0"
        wait_stopped(child.pid)
        wd, groups = stage(root, [rows], task=0, batch_no=0)
        with pytest.raises(LogLockedError):
            make_stream_writer(root, lockTimeoutMs=700).commit([message("q1", 0, groups)], 0)
        assert read_values(root, "t")[0] == [] and wd.committed() is None
        os.kill(child.pid, signal.SIGCONT)
        assert readline(child, "its stopped call") == f"1 {1 + len(stopped_values())}"
        assert wait_exit(child, "the continued writer") == 0
    finally:
        gone(child)
    _, again = stage(root, [rows], task=0, batch_no=0)        # the query restarted
    make_stream_writer(root).commit([message("q1", 0, again)], 0)
    got = read_values(root, "t")
    assert sorted(got[0] + got[1]) == sorted([b"before", *stopped_values()]
                                             + [b"m-%d" % i for i in range(40)])
    assert wd.manifest() is None and wd.committed() == 0
    assert not os.path.exists(wd.stage_dir(0))


def test_a_batch_commit_that_failed_after_publishing_part_is_finished_by_the_next_write(
        tmp_path, monkeypatch):
    """A commit that fails after one partition's groups went in (they are visible:
    they cannot be taken back) says so in its error, and the next write under the
    root publishes the rest: every row of the job once."""
    from seglog import LogLockedError
    root = str(tmp_path)
    Topic.open(root, "t", partitions=2).close()
    writer = make_batch_writer(root)
    msgs = job_messages(root, writer, b"part")
    lock_out_of_partition_1(monkeypatch)
    with pytest.raises(LogLockedError) as err:
        writer.commit(msgs)
    monkeypatch.undo()
    assert "do not run the job again" in " ".join(getattr(err.value, "__notes__", []))
    writer.abort(msgs)
    got = read_values(root, "t")                 # partition 0's rows (the even ones), once
    assert sorted(got[0]) == sorted(b"part-%d.%d" % (t, i) for t in range(2)
                                    for i in range(0, 40, 2)) and got[1] == []
    after = make_batch_writer(root)
    got = read_values(root, "t")
    assert sorted(got[0] + got[1]) == sorted(b"part-%d.%d" % (t, i)
                                             for t in range(2) for i in range(40))
    after.abort([])
    assert os.listdir(os.path.join(root, "__spark", "jobs")) == []


def test_a_task_and_the_commit_hand_their_pages_to_the_disk_as_they_write(
        tmp_path, monkeypatch):
    """Both of the sink's writes of a large task start their writeback as they go (the
    fsyncs after them then wait for the last pages): every whole page of the staging
    file but the last ``HAND_ON`` bytes, and of the group in its segment, advised once
    in order (``posix_fadvise(DONTNEED)``); the rows arrive whole."""
    if not hasattr(os, "posix_fadvise"):
        pytest.skip("no posix_fadvise")
    from seglog._runtime.files import HAND_ON
    calls = []
    real = os.posix_fadvise

    def advise(fd, offset, length, advice):
        calls.append((os.fstat(fd).st_ino, offset, length, advice))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", advise)
    root = str(tmp_path)
    Topic.open(root, "t", partitions=1).close()
    values = [os.urandom(2000) for _ in range(12_000)]      # 24 MB, one partition
    wd, groups = stage(root, [batch(6000, values=values[:6000]),
                              batch(6000, values=values[6000:])])
    (d, g), = groups
    staged = os.stat(os.path.join(wd.path, d, g.name)).st_ino
    publish(wd, make_manifest(wd, 0, groups, 10_000), resumed=False, timeout_ms=10_000)
    with Log.open(os.path.join(root, "t-0"), readonly=True) as log:
        segment = os.stat(log.segments[-1].path).st_ino
        assert [m.value for m in log.iter(0)] == values
        size = log.segments[-1].size
    page = os.sysconf("SC_PAGE_SIZE")
    for ino, length in ((staged, g.size), (segment, size)):
        mine = [(o, n, a) for i, o, n, a in calls if i == ino]
        assert mine and all(a == os.POSIX_FADV_DONTNEED and o % page == 0 and n % page == 0
                            for o, n, a in mine), mine
        assert all(a + n <= b for (a, n, _), (b, _, _) in zip(mine, mine[1:]))
        covered = sum(n for _, n, _ in mine)
        assert length - HAND_ON - 2 * page <= covered <= length


def test_a_damaged_staging_file_is_refused_before_anything_is_published(tmp_path):
    root = str(tmp_path)
    Topic.open(root, "t", partitions=1).close()
    wd, groups = stage(root, [batch(50)])
    (d, g), = groups
    path = os.path.join(wd.path, d, g.name)
    with open(path, "r+b") as f:
        f.seek(60)
        f.write(b"\xff")
    m = make_manifest(wd, 0, groups, 10_000)
    with pytest.raises(SeglogError, match="checksum mismatch in a staging file"):
        publish(wd, m, resumed=False, timeout_ms=10_000)
    assert read_values(root, "t") == {0: []}


# -- through Spark ---------------------------------------------------------------------------------
def source_rows(rnd: random.Random, n: int) -> list[tuple]:
    """(value, key, headers, partition, timestamp µs) rows of every shape; each row's
    first header is its id."""
    rows = []
    for i in range(n):
        value = rnd.choice([None, b"", os.urandom(rnd.randrange(1, 300)), b"v%d" % i])
        key = None if rnd.random() < 0.3 else os.urandom(rnd.randrange(0, 8))
        headers = [("id", b"%d" % i)] + [("h%d" % j, os.urandom(rnd.randrange(0, 4)))
                                          for j in range(rnd.randrange(0, 3))]
        part = rnd.randrange(3) if rnd.random() < 0.2 else None
        stamp = (None if rnd.random() < 0.2 else
                 (NOW - rnd.randrange(0, 10 ** 8)) * 1000 + rnd.randrange(1000))
        rows.append((value, key, headers, part, stamp))
    return rows


def dataframe(spark, rows, parts: int = 3):
    import datetime
    from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, StringType, StructField,
                                   StructType, TimestampType)
    schema = StructType([
        StructField("value", BinaryType()), StructField("key", BinaryType()),
        StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                     StructField("value", BinaryType())]))),
        StructField("partition", IntegerType()), StructField("timestamp", TimestampType()),
        StructField("ignored", StringType())])
    utc = datetime.timezone.utc
    epoch = datetime.datetime(1970, 1, 1, tzinfo=utc)
    data = [(v, k, h, p, None if t is None else epoch + datetime.timedelta(microseconds=t), "x")
            for v, k, h, p, t in rows]
    return spark.createDataFrame(data, schema).repartition(parts)


def read_back(spark, root: str, topic: str) -> dict[bytes, tuple]:
    """{row id: (value, key, other headers, partition, timestamp ms)} of a topic read
    through format("seglog"); AssertionError if an id is there twice."""
    df = (spark.read.format("seglog").option("subscribe", topic).option("includeHeaders", "true")
          .load(root).selectExpr("value", "key", "headers", "partition",
                                 "unix_millis(timestamp) AS ms"))
    out: dict[bytes, tuple] = {}
    for r in df.collect():
        hs = [(h.key, bytes(h.value)) for h in r.headers]
        assert hs[0][0] == "id" and hs[0][1] not in out, f"row {hs[0]} read twice"
        out[hs[0][1]] = (None if r.value is None else bytes(r.value),
                         None if r.key is None else bytes(r.key), tuple(hs[1:]), r.partition, r.ms)
    return out


def nothing_staged(root: str) -> bool:
    """No staging file or manifest under the root (a stream's committed record stays)."""
    return not [f for _, _, files in os.walk(os.path.join(root, "__spark")) for f in files
                if f not in (_publish.COMMITTED, _publish.LOCK)]


def check_round_trip(root: str, topic: str, rows, got: dict) -> None:
    assert set(got) == {b"%d" % i for i in range(len(rows))}, "rows lost or added"
    now = time.time() * 1000
    with Topic.open(root, topic, readonly=True) as t:
        for i, (v, k, h, p, ts) in enumerate(rows):
            value, key, headers, partition, ms = got[b"%d" % i]
            assert (value, key, headers) == (v, k, tuple(h[1:])), f"row {i}"
            where = p if p is not None else t.partition_for(k) if k is not None else partition
            assert partition == where, f"row {i}: in partition {partition}, not {where}"
            if ts is not None:
                assert ms == ts // 1000, f"row {i}: timestamp {ms}, not {ts // 1000}"
            else:                                   # stamped by the sink when staged
                assert abs(ms - now) < 3_600_000, f"row {i}: timestamp {ms}"


def test_every_column_round_trips_through_format_seglog_with_both_codecs(spark, tmp_path):
    seed = seed_for("sink round trip")
    rows = source_rows(random.Random(seed), 600)
    root = str(tmp_path / "root")
    df = dataframe(spark, rows)
    for topic, codec in (("plain", "none"), ("packed", "lz4")):
        (df.write.format("seglog").option("topic", topic).option("partitions", 3)
         .option("log.compression", codec).mode("append").save(root))
        check_round_trip(root, topic, rows, read_back(spark, root, topic))
        with Topic.open(root, topic, readonly=True) as t:
            assert t.partition(1).config.compression == (None if codec == "none" else "lz4")
    assert nothing_staged(root)


def spark_error(fn) -> str:
    """The message of what ``fn`` raised (Spark wraps a task's Python error)."""
    with pytest.raises(Exception) as e:
        fn()
    return str(e.value)


def test_bad_input_fails_with_a_clear_error_and_leaves_nothing(spark, tmp_path):
    """Refused on the driver (mode, columns, options) or by a task (a partition
    outside the topic, a value over max_message_bytes, a task failing after others
    staged their rows): the topic unchanged, nothing staged left."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType
    root = str(tmp_path / "root")
    Topic.open(root, "t", partitions=2, max_message_bytes=1000).close()
    df = spark.range(0, 400, 1, 4).selectExpr("CAST(id AS STRING) AS value")

    def save(frame, mode="append", **opts):
        w = frame.write.format("seglog").option("topic", "t").mode(mode)
        for k, v in opts.items():
            w = w.option(k, v)
        return lambda: w.save(root)
    msg = spark_error(save(df, "overwrite"))
    assert "a seglog topic is append-only" in msg and "mode(append)" in msg
    assert "needs a value column" in spark_error(save(df.selectExpr("value AS v")))
    assert "column value of a DataFrame written to seglog must be binary or string, not bigint" \
        in spark_error(save(spark.range(3).selectExpr("id AS value")))
    assert "column partition" in spark_error(save(df.selectExpr("value", "'x' AS partition")))
    assert "unknown option(s) of the seglog sink: kafka.bootstrap.servers" in \
        spark_error(save(df, **{"kafka.bootstrap.servers": "h:9092"}))
    assert "topic 'nope' does not exist" in spark_error(
        lambda: df.write.format("seglog").option("topic", "nope").mode("append").save(root))
    assert "partition is 2: topic 't' has partitions 0 to 1" in spark_error(
        save(df.selectExpr("value", "CAST(CAST(value AS INT) % 3 AS INT) AS partition")))
    assert "a record of 1001 bytes (key, value and headers) exceeds max_message_bytes=1000" in \
        spark_error(save(df.selectExpr("CASE WHEN value = '399' THEN repeat('x', 1001) "
                                       "ELSE value END AS value")))

    @F.udf(StringType())
    def fail_late(v):
        # (nested, as everything it calls: cloudpickle sends it by value)
        if v == "399":                  # the last row of the last task (task 3) ...
            def tasks_staged() -> set[str]:
                return {f.split(".")[1] for _, _, files in os.walk(os.path.join(root, "__spark"))
                        for f in files if f.endswith(".stage")}
            deadline = time.monotonic() + 120
            while len(tasks_staged() - {"3"}) < 3:
                if time.monotonic() > deadline:     # (a message the test does not take)
                    raise RuntimeError(f"only tasks {tasks_staged()} staged in 120 s")
                time.sleep(0.01)        # ... once the three others staged rows
            raise RuntimeError("injected task failure")
        return v
    assert "injected task failure" in spark_error(save(df.select(fail_late("value").alias("value"))))
    # tasks Spark had started before it aborted the job end by themselves
    deadline = time.monotonic() + 300
    while spark.sparkContext.statusTracker().getActiveStageIds():
        assert time.monotonic() < deadline, "tasks of the failed job still running"
        time.sleep(0.05)
    with Topic.open(root, "t", readonly=True) as t:
        assert t.end_offsets() == {0: 0, 1: 0}
    assert nothing_staged(root)
    sweep_jobs(root, 10_000)            # what the next write does first
    assert not os.listdir(os.path.join(root, "__spark", "jobs"))


def out_values(root: str, topic: str = "out") -> list[bytes]:
    return sorted(v for vs in read_values(root, topic).values() for v in vs)


def test_a_stream_writes_each_micro_batch_once_even_when_spark_runs_it_again(spark, tmp_path):
    """A stream from one topic to another, run to the end three times (new data
    between); then Spark's record of the last micro-batch is removed from the
    checkpoint (the driver died after the sink's commit, before Spark's), so Spark
    runs that micro-batch again: the sink publishes nothing twice."""
    root, ckpt = str(tmp_path / "root"), str(tmp_path / "ckpt")
    with Topic.open(root, "in", partitions=3) as t:
        t.append_batch([Record(b"a%d" % i, key=b"k%d" % (i % 11)) for i in range(300)])

    def run() -> None:
        q = (spark.readStream.format("seglog").option("subscribe", "in")
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 120)
             .load(root).select("key", "value")
             .writeStream.format("seglog").option("path", root).option("topic", "out")
             .option("partitions", 2).option("checkpointLocation", ckpt)
             .trigger(availableNow=True).start())
        assert q.awaitTermination(600), "the stream did not finish"
        assert q.exception() is None
    run()
    assert out_values(root) == sorted(b"a%d" % i for i in range(300))
    run()                                             # nothing new: nothing written
    assert out_values(root) == sorted(b"a%d" % i for i in range(300))
    with Topic.open(root, "in") as t:
        t.append_batch([Record(b"b%d" % i) for i in range(100)])
    run()
    want = sorted([b"a%d" % i for i in range(300)] + [b"b%d" % i for i in range(100)])
    assert out_values(root) == want
    commits = os.path.join(ckpt, "commits")
    last = max(int(n) for n in os.listdir(commits) if n.isdigit())
    for name in (str(last), f".{last}.crc"):           # the record and its checksum file
        os.remove(os.path.join(commits, name))
    (query,) = os.listdir(os.path.join(root, "__spark", "queries"))
    assert WriteDir(root, "query", query).committed() == last
    run()                                             # Spark runs batch `last` again
    assert os.path.exists(os.path.join(commits, str(last)))        # it did, and recorded it
    assert max(int(n) for n in os.listdir(os.path.join(ckpt, "offsets")) if n.isdigit()) == last
    assert out_values(root) == want
    with Topic.open(root, "out", readonly=True) as t:    # keyed rows where Topic puts them
        for p in range(2):
            for m in t.partition(p).iter():
                assert m.key is None or t.partition_for(m.key) == p
    assert nothing_staged(root)

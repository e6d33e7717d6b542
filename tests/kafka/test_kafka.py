"""seglog.kafka over a real Kafka broker's log dirs (tests/data/kafka/, written by
scripts/kafka-fixtures with Apache Kafka 4.1.1): what it reads equals, record by
record, what a Kafka consumer read back from the broker at both isolation levels;
Kafka's directories are never written; damage, torn tails, indexes that disagree,
replicas and moves, copy_to_log."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys

import pytest

from kafka_build import FIXTURES, as_dict, batch, row_dict
from seglog import Log, kafka
from seglog.errors import (CorruptRecordError, InvalidConfigError, NotALogError,
                           OffsetOutOfRangeError)

pytest.importorskip("google_crc32c")
pytest.importorskip("cramjam")

LOG_DIRS = [os.path.join(FIXTURES, "logs-a"), os.path.join(FIXTURES, "logs-b")]
EXPECTED = json.load(open(os.path.join(FIXTURES, "expected.json")))
LEGACY = json.load(open(os.path.join(FIXTURES, "legacy.json")))
ISOLATIONS = ("read_uncommitted", "read_committed")


def _dir_of(name: str) -> str:
    if name in LEGACY:
        return os.path.join(FIXTURES, "legacy", name)
    t, _, p = name.rpartition("-")
    return kafka.list_partitions(LOG_DIRS)[(t, int(p))]


ALL = sorted(EXPECTED) + sorted(LEGACY)


def _expected(name: str) -> dict:
    return EXPECTED.get(name) or LEGACY[name]


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("name", ALL)
def test_iter_equals_the_consumer(name, isolation):
    part = kafka.open_partition(_dir_of(name))
    exp = _expected(name)
    assert [as_dict(m) for m in part.iter(isolation=isolation)] == exp[isolation]
    assert part.start_offset == exp["log_start_offset"]
    assert part.end_offset == exp["log_end_offset"]


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("name", ALL)
def test_read_arrow_equals_the_consumer(name, isolation):
    part = kafka.open_partition(_dir_of(name))
    table = part.read_arrow(isolation=isolation)
    rows = [row_dict(r) for r in table.to_pylist()]
    exp = [dict(e, headers=[[k, "" if v is None else v] for k, v in e["headers"]])
           for e in _expected(name)[isolation]]
    assert rows == exp
    from seglog import arrow_schema
    assert table.schema == arrow_schema()


def test_every_case_the_broker_wrote_is_there():
    """The fixtures hold what the tests claim: every codec, several segments, holes,
    tombstones, headers, an open transaction, a moved partition, a recorded start."""
    codecs = kafka.open_partition(_dir_of("codecs-0"))
    assert codecs.stats()["segments"] >= 4
    recs = EXPECTED["codecs-0"]["read_uncommitted"]
    assert any(r["value"] is None for r in recs) and any(r["headers"] for r in recs)
    assert any(r["key"] is None for r in recs) and any(r["key"] for r in recs)
    offs = [r["offset"] for r in EXPECTED["compacted-0"]["read_uncommitted"]]
    assert offs[0] > EXPECTED["compacted-0"]["log_start_offset"] + 1000   # the cleaner's hole
    legacy = [r["offset"] for r in LEGACY["legacy1gzip-0"]["read_uncommitted"]]
    assert any(b - a > 1 for a, b in zip(legacy, legacy[1:]))
    txn = kafka.open_partition(_dir_of("txn-0"))
    assert txn.last_stable_offset < txn.end_offset
    assert EXPECTED["moved-0"]["log_start_offset"] == 120
    assert _dir_of("moved-0").startswith(LOG_DIRS[0])
    assert any(n.endswith("-delete") for n in os.listdir(LOG_DIRS[1]))


def test_read_committed_stops_at_the_first_open_transaction():
    part = kafka.open_partition(_dir_of("txn-0"))
    lso = part.last_stable_offset
    committed = list(part.iter(isolation="read_committed"))
    assert committed and committed[-1].offset < lso
    assert any(m.offset >= lso for m in part.iter())          # written, not committed
    assert not any(b"abort" in (m.value or b"") for m in committed)
    assert any(b"abort" in (m.value or b"") for m in part.iter())


@pytest.mark.parametrize("name", ["codecs-0", "compacted-0", "txn-1", "uniform-0",
                                  "legacy1gzip-0", "legacy0none-0"])
def test_ranges_and_seeks_equal_the_whole(name):
    """iter(start, end) from any offset (an index seek into any segment) is the slice."""
    part = kafka.open_partition(_dir_of(name))
    whole = list(part.iter())
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rnd = random.Random(seed)
    lo, hi = part.start_offset, part.end_offset
    for _ in range(25):
        a = rnd.randrange(lo, hi + 1)
        b = rnd.randrange(a, hi + 1)
        want = [m for m in whole if a <= m.offset < b]
        assert list(part.iter(a, b)) == want, (a, b)
        got = part.read_arrow(a, b).column("offset").to_pylist()
        assert got == [m.offset for m in want], (a, b)
    with pytest.raises(OffsetOutOfRangeError):
        part.iter(hi + 1)
    if lo:
        with pytest.raises(OffsetOutOfRangeError):
            part.iter(lo - 1)


def test_offset_for_time_is_the_first_record_at_or_after():
    for name in ("codecs-0", "appendtime-0", "uniform-0", "compacted-0"):
        part = kafka.open_partition(_dir_of(name))
        msgs = list(part.iter())
        stamps = sorted({m.timestamp for m in msgs})
        probes = [stamps[0] - 1, stamps[-1] + 1] + random.Random(7).sample(stamps, min(10, len(stamps)))
        for ts in probes:
            want = next((m.offset for m in msgs if m.timestamp >= ts), None)
            assert part.offset_for_time(ts) == want, (name, ts)


def test_list_partitions_reads_both_log_dirs_and_ignores_delete_and_future(tmp_path):
    parts = kafka.list_partitions(LOG_DIRS)
    assert {("codecs", 0), ("txn", 0), ("txn", 1), ("moved", 0)} <= set(parts)
    assert not any("-delete" in d or "-future" in d for d in parts.values())
    d = tmp_path / "dir"
    shutil.copytree(LOG_DIRS[1], d)
    shutil.copytree(os.path.join(LOG_DIRS[0], "uniform-0"), d / "uniform-0.abc-future")
    assert ("uniform", 0) not in kafka.list_partitions([str(d)])


def _epoch_file(path: str, epoch: int) -> None:
    with open(os.path.join(path, "leader-epoch-checkpoint"), "w") as f:
        f.write(f"0\n1\n{epoch} 0\n")


def test_a_partition_in_several_log_dirs_is_read_from_the_best_copy(tmp_path):
    src = _dir_of("uniform-0")
    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
        shutil.copytree(src, d / "uniform-0")
    # b: a replica that fell behind (its last segment cut), same epoch
    seg = sorted(p for p in os.listdir(b / "uniform-0") if p.endswith(".log"))[-1]
    with open(b / "uniform-0" / seg, "r+b") as f:
        f.truncate(os.path.getsize(b / "uniform-0" / seg) // 2)
    assert kafka.list_partitions([str(b), str(a)])[("uniform", 0)] == str(a / "uniform-0")
    # c: fewer records but a later leader epoch wins
    with open(c / "uniform-0" / seg, "r+b") as f:
        f.truncate(os.path.getsize(c / "uniform-0" / seg) // 3)
    epoch = kafka.open_partition(str(a / "uniform-0")).leader_epoch()
    _epoch_file(str(c / "uniform-0"), epoch + 1)
    assert kafka.list_partitions([str(a), str(b), str(c)])[("uniform", 0)] == str(c / "uniform-0")


def _snapshot(root: str) -> dict[str, tuple]:
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            digest = None
            if os.path.isfile(p):
                with open(p, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            out[p] = (digest, st.st_size, st.st_mode, st.st_mtime_ns, st.st_ctime_ns)
    return out


def _times(root: str) -> dict[str, tuple]:
    return {os.path.join(d, n): (os.lstat(os.path.join(d, n)).st_atime_ns,
                                 os.lstat(os.path.join(d, n)).st_mtime_ns,
                                 os.lstat(os.path.join(d, n)).st_ctime_ns)
            for d, ds, fs in os.walk(root) for n in ds + fs}


def test_nothing_in_a_kafka_directory_is_written(tmp_path):
    """Every file's bytes and times (access times too, where the kernel lets a
    reader leave them), and the set of files, are the same after every kind of read
    (API, Arrow, indexes rebuilt, copy_to_log, the CLI)."""
    root = tmp_path / "kafka"
    shutil.copytree(FIXTURES, root, copy_function=shutil.copy2)
    dirs = [str(root / "logs-a"), str(root / "logs-b")]
    os.remove(root / "logs-a" / "codecs-0" / "00000000000000000062.index")
    before = _snapshot(str(root))
    times = _times(str(root))
    for (t, p), d in kafka.list_partitions(dirs).items():
        part = kafka.open_partition(d)
        for iso in ISOLATIONS:
            list(part.iter(isolation=iso))
            part.read_arrow(isolation=iso)
        part.offset_for_time(0)
        repr(part), part._repr_html_()
    kafka.copy_to_log(kafka.open_partition(dirs[0] + "/compacted-0"),
                      str(tmp_path / "copy")).close()
    for cmd in (["dump", dirs[0] + "/codecs-0", "--print-data"], ["verify", dirs[0]],
                ["verify", dirs[1]], ["stats", dirs[1]]):
        subprocess.run([sys.executable, "-m", "seglog", *cmd], check=True,
                       capture_output=True, timeout=120)
    assert _times(str(root)) == times
    assert _snapshot(str(root)) == before


def _copy(tmp_path, name: str) -> str:
    d = str(tmp_path / name)
    shutil.copytree(_dir_of(name), d)
    return d


def _segs(d: str) -> list[str]:
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".log"))


def test_a_torn_active_tail_is_the_end(tmp_path):
    d = _copy(tmp_path, "codecs-0")
    whole = list(kafka.open_partition(d).iter())
    last = _segs(d)[-1]
    size = os.path.getsize(last)
    original = open(last, "rb").read()
    with open(last, "ab") as f:              # preallocated zeros after the data
        f.write(bytes(4096))
    assert list(kafka.open_partition(d).iter()) == whole
    for cut in (size - 1, size - 30, size - 61):
        with open(last, "r+b") as f:
            f.truncate(cut)
        got = list(kafka.open_partition(d).iter())
        assert got == whole[:len(got)] and len(got) < len(whole)
    with open(last, "wb") as f:
        f.write(original)


def test_damage_is_a_corrupt_record_error_naming_file_and_position(tmp_path):
    d = _copy(tmp_path, "codecs-0")
    first = _segs(d)[0]
    data = bytearray(open(first, "rb").read())
    pos = len(data) // 2
    data[pos] ^= 0xFF
    with open(first, "wb") as f:
        f.write(data)
    with pytest.raises(CorruptRecordError) as e:
        list(kafka.open_partition(d).iter())
    assert e.value.path == first and e.value.position is not None
    assert e.value.position <= pos
    with pytest.raises(CorruptRecordError):
        kafka.open_partition(d).read_arrow()
    # a sealed segment cut short is damage too (not the active one's torn tail)
    d2 = _copy(tmp_path, "uniform-0")
    shutil.copytree(_dir_of("codecs-0"), tmp_path / "codecs-2")
    segs = _segs(str(tmp_path / "codecs-2"))
    with open(segs[1], "r+b") as f:
        f.truncate(os.path.getsize(segs[1]) - 10)
    with pytest.raises(CorruptRecordError) as e2:
        list(kafka.open_partition(str(tmp_path / "codecs-2")).iter())
    assert e2.value.path == segs[1]
    assert list(kafka.open_partition(d2).iter())


def test_indexes_that_disagree_with_the_log_are_rebuilt_in_memory(tmp_path):
    d = _copy(tmp_path, "codecs-0")
    whole = list(kafka.open_partition(d).iter())
    for seg in _segs(d):
        stem = seg[:-4]
        with open(stem + ".index", "wb") as f:          # entries pointing nowhere useful
            f.write(b"".join((k).to_bytes(4, "big") + (k * 7 + 3).to_bytes(4, "big")
                             for k in range(1, 6)))
        with open(stem + ".timeindex", "wb") as f:
            f.write((10 ** 12).to_bytes(8, "big") + (3).to_bytes(4, "big"))
    part = kafka.open_partition(d)
    rnd = random.Random(3)
    for _ in range(20):
        a = rnd.randrange(0, len(whole))
        assert list(part.iter(whole[a].offset)) == whole[a:]
        ts = whole[a].timestamp
        assert part.offset_for_time(ts) == next(m.offset for m in whole if m.timestamp >= ts)
    for seg in _segs(d):
        os.remove(seg[:-4] + ".index")
        os.remove(seg[:-4] + ".timeindex")
    assert list(kafka.open_partition(d).iter(whole[100].offset)) == whole[100:]


def test_copy_to_log_keeps_offsets_and_holes(tmp_path):
    for name, iso in (("compacted-0", "read_uncommitted"), ("txn-0", "read_committed"),
                      ("codecs-0", "read_uncommitted"), ("legacy0gzip-0", "read_uncommitted")):
        part = kafka.open_partition(_dir_of(name))
        dest = str(tmp_path / name)
        log = kafka.copy_to_log(part, dest, isolation=iso)
        try:
            want = [(m.offset, m.timestamp, m.key, m.value,
                     tuple((k, v or b"") for k, v in m.headers))
                    for m in part.iter(isolation=iso)]
            got = [(m.offset, m.timestamp, m.key, m.value, tuple(m.headers))
                   for m in log.iter()]
            assert got == want
        finally:
            log.close()
    with pytest.raises(InvalidConfigError):
        kafka.copy_to_log(kafka.open_partition(_dir_of("txn-1")), str(tmp_path / "txn-0"))


def test_isolation_and_paths_are_checked(tmp_path):
    part = kafka.open_partition(_dir_of("txn-0"))
    with pytest.raises(InvalidConfigError):
        part.iter(isolation="committed")
    with pytest.raises(NotALogError):
        kafka.open_partition(str(tmp_path / "nope"))
    with pytest.raises(NotALogError):
        kafka.list_partitions([str(tmp_path / "nope")])


def test_reprs():
    part = kafka.open_partition(_dir_of("codecs-0"))
    assert "codecs-0" in repr(part) and "[0, 600)" in repr(part)
    html = part._repr_html_()
    assert "KafkaPartition" in html and "599" in html


def _writer(d: str, batches: int) -> None:
    """A broker-like writer: batches appended to the active segment in pieces (each
    write a part of a batch: a reader sees torn tails), rolling every 40 batches."""
    import time as _t
    rnd = random.Random(5)
    seg = None
    for k in range(batches):
        if k % 40 == 0:
            seg = os.path.join(d, "%020d.log" % (k * 10))
            open(seg, "wb").close()
        recs = [(1_700_000_000_000 + k, None, b"v%d.%d" % (k, j) * rnd.randrange(1, 30), [])
                for j in range(10)]
        data = batch(k * 10, recs, codec=rnd.choice(["none", "gzip", "lz4"]))
        with open(seg, "ab") as f:
            cut = rnd.randrange(1, len(data))
            f.write(data[:cut])
            f.flush()
            _t.sleep(0.0005)
            f.write(data[cut:])


def test_reading_beside_a_live_writer(tmp_path):
    """Every read while a writer appends (in pieces, rolling segments) is a prefix of
    the final records: a torn tail is the end, never damage."""
    d = tmp_path / "live-0"
    d.mkdir()
    here = os.path.dirname(os.path.abspath(__file__))     # this file; the helpers one up
    code = f"import sys; sys.path[:0] = [{here!r}, {os.path.dirname(here)!r}]; " \
           f"from test_kafka import _writer; _writer({str(d)!r}, 400)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    seen = []
    try:
        while proc.poll() is None:
            if any(n.endswith(".log") for n in os.listdir(d)):
                seen.append([m.offset for m in kafka.open_partition(str(d)).iter()])
    finally:
        assert proc.wait(timeout=120) == 0
    final = list(kafka.open_partition(str(d)).iter())
    assert [m.offset for m in final] == list(range(4000))
    for s in seen:
        assert s == list(range(len(s)))
    assert len(seen) > 3

"""Topics: layout, placement, batches split by partition, offsets, bad input."""

from __future__ import annotations

import os

import pytest
import xxhash

import seglog
from seglog import InvalidConfigError, Record, Topic


def test_layout_and_reopen(tmp_path):
    root = str(tmp_path)
    with Topic.open(root, "events", partitions=3) as t:
        assert t.num_partitions == 3
        assert sorted(n for n in os.listdir(root) if n.startswith("events-")) == \
            ["events-0", "events-1", "events-2"]
        t.append(b"x", partition=2)
    with Topic.open(root, "events") as t:           # the count is found on disk
        assert t.num_partitions == 3 and t.end_offsets() == {0: 0, 1: 0, 2: 1}
        assert isinstance(t.partition(2), seglog.Log)


def test_partition_count_rules(tmp_path):
    root = str(tmp_path)
    with pytest.raises(InvalidConfigError, match="does not exist"):
        Topic.open(root, "missing")
    Topic.open(root, "t", partitions=3).close()
    with pytest.raises(InvalidConfigError, match="3 partitions, not 2"):    # fewer: more grows
        Topic.open(root, "t", partitions=2)
    for bad in (0, -1, 1 << 20):
        with pytest.raises(InvalidConfigError):
            Topic.open(root, "u", partitions=bad)
    with pytest.raises(TypeError):
        Topic.open(root, "u", partitions="2")


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a b", "é", "x" * 201, "a\x00"])
def test_bad_topic_names_are_refused_before_anything_is_made(tmp_path, name):
    with pytest.raises(InvalidConfigError):
        Topic.open(str(tmp_path), name, partitions=1)
    assert os.listdir(tmp_path) == []


def test_name_must_be_a_str(tmp_path):
    with pytest.raises(TypeError):
        Topic.open(str(tmp_path), b"t", partitions=1)


def test_keyed_records_go_to_xxh64_of_the_key(tmp_path):
    with Topic.open(str(tmp_path), "t", partitions=7) as t:
        for i in range(200):
            key = b"user-%d" % i
            p, off = t.append(b"v", key=key)
            assert p == xxhash.xxh64_intdigest(key, 0) % 7
            assert t.partition(p).read(off).values()[0] == b"v"


def test_keyless_calls_are_sticky_per_call_and_rotate(tmp_path):
    with Topic.open(str(tmp_path), "t", partitions=3) as t:
        placed = [t.append(b"a")[0] for _ in range(6)]
        assert placed == [0, 1, 2, 0, 1, 2]
        got = t.append_batch([b"x", b"y", b"z"])
        assert list(got) == [0] and got[0] == range(2, 5)   # one partition for the call


def test_partition_override_and_its_errors(tmp_path):
    with Topic.open(str(tmp_path), "t", partitions=2) as t:
        assert t.append(b"a", key=b"k", partition=1)[0] == 1
        assert t.append_batch([Record(b"r", key=b"k")], partition=0) == {0: range(0, 1)}
        for bad in (2, -1):
            with pytest.raises(InvalidConfigError):
                t.append(b"a", partition=bad)
        with pytest.raises(TypeError):
            t.append(b"a", partition="0")


def test_append_batch_splits_by_key_and_validates_before_writing(tmp_path):
    with Topic.open(str(tmp_path), "t", partitions=4) as t:
        items = [Record(b"v%d" % i, key=b"k%d" % i) for i in range(40)] + [b"plain"]
        placed = t.append_batch(items)
        assert sum(len(r) for r in placed.values()) == 41
        for p, r in placed.items():
            values = [m.value for m in t.partition(p).iter(r.start, r.stop)]
            want = [it.value for it in items if isinstance(it, Record)
                    and xxhash.xxh64_intdigest(it.key, 0) % 4 == p]
            assert values[:len(want)] == want
        before = t.end_offsets()
        with pytest.raises(TypeError):
            t.append_batch([Record(b"ok", key=b"a"), Record(b"ok", key=b"b"), 42])
        with pytest.raises(TypeError):
            t.append_batch([Record(b"ok", key=b"a"), Record("str value", key=b"b")])
        assert t.end_offsets() == before          # nothing written anywhere


def test_offsets_flush_and_time(tmp_path):
    with Topic.open(str(tmp_path), "t", partitions=2) as t:
        t.append(b"a", partition=0, timestamp=1_700_000_000_000)
        t.append(b"b", partition=1, timestamp=1_700_000_000_500)
        assert t.start_offsets() == {0: 0, 1: 0}
        assert t.flush() == {0: 1, 1: 1}
        assert t.offsets_for_time(1_700_000_000_100) == {0: None, 1: 0}


def test_readonly_topic_reads_while_a_writer_writes(tmp_path):
    root = str(tmp_path)
    with Topic.open(root, "t", partitions=2) as w:
        w.append(b"a", partition=1)
        with Topic.open(root, "t", readonly=True) as r:
            assert r.end_offsets() == {0: 0, 1: 1}
            w.append(b"b", partition=1)
            assert r.end_offsets()[1] == 2
            with pytest.raises(seglog.ReadOnlyError):
                r.append(b"x", partition=0)
        with pytest.raises(seglog.LogLockedError):
            Topic.open(root, "t")
    with pytest.raises(InvalidConfigError):
        Topic.open(root, "other", readonly=True)


def test_closed_topic_refuses(tmp_path):
    t = Topic.open(str(tmp_path), "t", partitions=1)
    t.close()
    t.close()
    with pytest.raises(seglog.LogClosedError):
        t.append(b"a")


def test_unfinished_creation_is_finished_by_an_open_with_the_count(tmp_path):
    root = str(tmp_path)
    seglog.Log.open(os.path.join(root, "t-0")).close()     # a crash after one partition
    with pytest.raises(InvalidConfigError):
        Topic.open(root, "t")
    with Topic.open(root, "t", partitions=2) as t:
        assert t.num_partitions == 2

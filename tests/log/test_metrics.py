"""Log.metrics() and Topic.metrics(): every counter moves when its event happens."""

from __future__ import annotations

import os
import threading

import pytest

from seglog import CorruptRecordError, Log, Record, Topic
from seglog.testing import abandon

from clock import SYNTHETIC_CLOCK
from helpers import wait_for



def test_appends_flushes_rolls_and_fsync_latency(tmp_path):
    with Log.open(str(tmp_path / "l"), segment_bytes=4096, flush_ms=None, **SYNTHETIC_CLOCK) as log:
        m0 = log.metrics()
        assert m0["messages_appended"] == m0["batches_appended"] == m0["bytes_appended"] == 0
        for i in range(100):
            log.append(b"x" * 100)
        log.append_batch([b"y" * 50] * 20)
        log.append_batch([Record(b"z", key=b"k")] * 3)
        log.flush()
        log.flush()                                   # nothing new: no fsync
        m = log.metrics()
        assert m["messages_appended"] == 123 and m["batches_appended"] == 102
        assert m["bytes_appended"] == sum(s.size for s in log.segments)
        assert m["rolls"] == len(log.segments) - 1 >= 2
        assert m["flushes"] == 1 and m["fsync_latency"]["count"] == 1
        assert m["fsync_latency"]["buckets_ms"]["+Inf"] == 1 and m["fsync_latency"]["sum_seconds"] > 0
        assert m["recovery"] is None and m["corrupt_batches_seen"] == 0
    # reopened: counts start again, bytes from the reopened active segment on
    with Log.open(str(tmp_path / "l"), **SYNTHETIC_CLOCK) as log:
        log.append(b"again")
        m = log.metrics()
        assert m["messages_appended"] == 1 and m["bytes_appended"] == len(log.read(123).buffer())


def test_recovery_retention_compaction_and_corruption(tmp_path):
    path = str(tmp_path / "r")
    log = Log.open(path, segment_bytes=1024, flush_ms=None, **SYNTHETIC_CLOCK)
    for i in range(60):
        log.append(b"v" * 50, timestamp=1000 + i)
    log.flush()
    log.append_batch([b"torn"] * 5)
    last, end = log.segments[-1].path, log.segments[-1].size
    abandon(log)
    with open(os.path.join(path, f"{0:020d}.log"), "ab"):
        pass
    reserved = os.path.getsize(last) - end
    os.truncate(last, os.path.getsize(last) - 3)           # a preallocated file: zeros
    with Log.open(path, retention_ms=10, segment_bytes=1024, **SYNTHETIC_CLOCK) as log:
        m = log.metrics()
        assert m["recovery"]["segments_scanned"] >= 1
        # nothing torn: what recovery dropped was the writer's reservation, not data
        assert m["recovery"]["cut_bytes"] == m["recovery"]["cut_messages"] == 0
        assert m["recovery"]["reserved_bytes"] == reserved - 3
    log = Log.open(path, segment_bytes=1024, flush_ms=None, **SYNTHETIC_CLOCK)
    log.append_batch([b"torn"] * 5)
    last, end = log.segments[-1].path, log.segments[-1].size
    abandon(log)
    os.truncate(last, end - 3)                              # tear the last batch
    with Log.open(path, retention_ms=10, segment_bytes=1024, **SYNTHETIC_CLOCK) as log:
        m = log.metrics()
        assert m["recovery"]["cut_bytes"] > 0 and m["recovery"]["reserved_bytes"] == 0
        deleted = log.enforce_retention(now_ms=10_000)
        m = log.metrics()
        assert m["retention_runs"] == 1 and m["retention_deleted_segments"] == len(deleted) > 0
        assert m["retention_deleted_bytes"] > 0
    kv = str(tmp_path / "kv")
    with Log.open(kv, cleanup_policy="compact", segment_bytes=1024, **SYNTHETIC_CLOCK) as log:
        for i in range(300):
            log.append(b"v%d" % i, key=b"k%d" % (i % 3), timestamp=1000 + i)
        st = log.compact()
        m = log.metrics()
        assert m["compaction_runs"] == 1
        assert m["compaction_bytes_saved"] == st.bytes_before - st.bytes_after > 0
    bad = str(tmp_path / "bad")
    with Log.open(bad, **SYNTHETIC_CLOCK) as log:
        log.append_batch([b"q" * 100] * 10)
        log.append_batch([b"w" * 100] * 10)
    with open(os.path.join(bad, f"{0:020d}.log"), "r+b") as f:
        f.seek(1200)
        f.write(b"\xff")
    with Log.open(bad, readonly=True) as log:
        with pytest.raises(CorruptRecordError):
            list(log.iter())
        assert log.metrics()["corrupt_batches_seen"] == 1
        assert log.metrics()["messages_appended"] == 0


def test_wait_wakeups_and_topic_sums(tmp_path):
    with Log.open(str(tmp_path / "w"), **SYNTHETIC_CLOCK) as log:
        got = []
        started = threading.Event()
        t = threading.Thread(target=lambda: (started.set(),
                                             got.append(log.wait(0, timeout=10))))
        assert log.metrics()["waiting"] == 0
        t.start()
        assert started.wait(5)
        wait_for(lambda: log.metrics()["waiting"] == 1, 10, "the waiter to block")
        assert t.is_alive() and got == []           # nothing appended: still blocked
        log.append(b"wake")
        t.join(10)
        assert got == [True] and log.metrics()["wait_wakeups"] == 1
        assert log.metrics()["waiting"] == 0
        assert log.wait(0, timeout=0) and log.metrics()["wait_wakeups"] == 1   # no wait
    # a readonly reader's waiter polls the files: counted while it polls
    with Log.open(str(tmp_path / "w"), **SYNTHETIC_CLOCK) as log, \
            Log.open(str(tmp_path / "w"), readonly=True) as reader:
        got.clear()
        t = threading.Thread(target=lambda: got.append(reader.wait(1, timeout=10)))
        t.start()
        wait_for(lambda: reader.metrics()["waiting"] == 1, 10, "the reader's waiter to poll")
        assert log.metrics()["waiting"] == 0 and got == []
        log.append(b"more")
        t.join(10)
        assert got == [True] and reader.metrics()["waiting"] == 0
    with Topic.open(str(tmp_path / "t"), "t", partitions=3, **SYNTHETIC_CLOCK) as topic:
        for i in range(30):
            topic.append(b"m", key=b"%d" % i)
        m = topic.metrics()
        assert m["messages_appended"] == 30 and len(m["partitions"]) == 3
        assert m["batches_appended"] == sum(p["batches_appended"] for p in m["partitions"])


def test_waiting_counts_a_multi_writer_logs_blocked_wait(tmp_path):
    """One of several writers waits as a readonly reader does (polling the files):
    its blocked ``wait()`` is counted by its own ``metrics()``."""
    path = str(tmp_path / "mw")
    with Log.open(path, multi_writer=True, **SYNTHETIC_CLOCK) as a, \
            Log.open(path, multi_writer=True, **SYNTHETIC_CLOCK) as b:
        a.append(b"x")
        got: list[bool] = []
        t = threading.Thread(target=lambda: got.append(a.wait(1, timeout=10)))
        t.start()
        try:
            wait_for(lambda: a.metrics()["waiting"] == 1, 10, "the writer's waiter to count")
            assert got == [] and b.metrics()["waiting"] == 0
        finally:
            b.append(b"wake")
            t.join(10)
        assert got == [True] and a.metrics()["waiting"] == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_waiting_in_a_forked_child_counts_none_of_the_parents_threads(tmp_path):
    """A child forked while a thread of the parent polls in a readonly reader's
    ``wait()`` has no such thread: its copy of the reader counts no waiter."""
    path = str(tmp_path / "w")
    with Log.open(path, **SYNTHETIC_CLOCK) as log, \
            Log.open(path, readonly=True) as reader:
        got: list[bool] = []
        t = threading.Thread(target=lambda: got.append(reader.wait(0, timeout=30)))
        t.start()
        try:
            wait_for(lambda: reader.metrics()["waiting"] == 1, 10, "the reader's waiter to poll")
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    code = 0 if reader.metrics()["waiting"] == 0 else 2
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, \
                "the child's reader counts the parent's polling thread as waiting"
        finally:
            log.append(b"wake")
            t.join(10)
        assert got == [True] and reader.metrics()["waiting"] == 0

"""Consumer groups across a topic's life (docs/GROUPS.md, "Deleting a topic, and
making it again"): a topic deleted under its consumers leaves their assignment
without failing their loops, its committed offsets go with it, and a topic made
again under the same name is read from its start (``auto_offset_reset``), never
from an offset committed for the old one."""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
import traceback

import pytest

import seglog
from consumers import delete_topic
from helpers import wait_for
from seglog import Consumer, Topic, describe_group
from seglog.consumer_group import committed_offsets


def make(root: str, name: str, n: int, partitions: int = 1, tag: bytes = b"") -> None:
    with Topic.open(root, name, partitions=partitions) as t:
        for i in range(n):
            t.append(tag + b"%d" % i, partition=i % partitions)


def drain(c: Consumer, want: set, timeout: float = 20) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while not want <= {(m.topic, m.partition, m.offset) for m in got}:
        assert time.monotonic() < deadline, f"missing {sorted(want - {(m.topic, m.partition, m.offset) for m in got})[:5]}"
        got += c.poll(timeout_ms=50)
    return got


def test_a_new_member_reads_a_topic_made_again_from_its_start(tmp_path):
    """Committed 100 on the old topic; the new one holds 0..9: a new member read
    nothing (it started at the old committed offset, taken for "the end"), and so
    did every later member."""
    root = str(tmp_path)
    make(root, "ev", 100)
    with Consumer(root, "g", topics=["ev"], auto_commit_ms=None) as c:
        drain(c, {("ev", 0, o) for o in range(100)})
        c.commit()
    assert committed_offsets(root, "g") == {("ev", 0): 100}
    delete_topic(root, "ev")
    make(root, "ev", 10, tag=b"new ")
    assert committed_offsets(root, "g") == {}          # of the old log: not this one's
    assert describe_group(root, "g")["partitions"][("ev", 0)]["committed"] is None
    with Consumer(root, "g", topics=["ev"], auto_commit_ms=None) as c:
        got = drain(c, {("ev", 0, o) for o in range(10)})
        assert [m.value for m in got] == [b"new %d" % i for i in range(10)]
        c.commit()
    assert committed_offsets(root, "g") == {("ev", 0): 10}
    with Consumer(root, "g", topics=["ev"], auto_commit_ms=None) as c:     # a later member
        assert c.poll(timeout_ms=300) == [] and c.position("ev", 0) == 10


def test_a_committed_offset_past_the_end_is_out_of_range(tmp_path, caplog):
    """An offset committed past the log's end (a log made again from an older file
    without ids, or cut back) is out of range: ``auto_offset_reset`` places the
    member, as Kafka does, instead of taking it for the end."""
    root = str(tmp_path)
    make(root, "ev", 10)
    path = os.path.join(root, "__groups", "g", "offsets.json")
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:                # as a file from before ids says it
        f.write('{"version": 1, "offsets": {"ev/0": [100, 1]}}')
    for reset, start in (("earliest", 0), ("latest", 10)):
        with Consumer(root, "g", topics=["ev"], auto_commit_ms=None, auto_offset_reset=reset) as c:
            assert c.position("ev", 0) == start        # claimed as it joined
    assert "past the log's end" in caplog.text


def test_a_live_member_reads_a_topic_made_again_and_never_commits_the_old_position(tmp_path):
    root = str(tmp_path)
    make(root, "ev", 100)
    c = Consumer(root, "g", topics=["ev"], auto_commit_ms=5)
    try:
        drain(c, {("ev", 0, o) for o in range(100)})
        c.commit()
        delete_topic(root, "ev", record_first=False)
        make(root, "ev", 10, tag=b"new ")
        got = drain(c, {("ev", 0, o) for o in range(10)})
        assert [m.value for m in got if m.value.startswith(b"new")] == \
            [b"new %d" % i for i in range(10)]
        c.commit()
        assert committed_offsets(root, "g") == {("ev", 0): 10}
    finally:
        c.close()
    assert committed_offsets(root, "g") == {("ev", 0): 10}


@pytest.mark.parametrize("member", ["reading", "joining"])
def test_a_deletion_whose_record_comes_late_is_not_a_log_removed_alone(tmp_path, member):
    """Logs first, record second: the deleting process may stall between the two (a
    loaded machine: the groups torture met it) for many looks at the group, under a
    member reading the partitions or one joining (and claiming them) meanwhile.
    Polls go on, the partitions set aside (or not opened yet), and the topic made
    again is read; only a log gone for the session timeout while its record stays is
    an error (below, and test_groups.py's removed-alone test)."""
    root = str(tmp_path)
    make(root, "ev", 20, partitions=2)

    def remove_the_logs() -> None:
        for p in (0, 1):
            shutil.rmtree(os.path.join(root, f"ev-{p}"))
    if member == "joining":
        remove_the_logs()
    with Consumer(root, "g", topics=["ev"], auto_commit_ms=None) as c:
        if member == "reading":
            drain(c, {("ev", i % 2, i // 2) for i in range(20)})
            remove_the_logs()
        # the deleter stalls a second (ten looks) before it removes the record
        stalled = time.monotonic() + 1.0
        while time.monotonic() < stalled:
            assert c.poll(timeout_ms=20) == []
        os.remove(os.path.join(root, "__topics", "ev.json"))
        make(root, "ev", 6, partitions=2, tag=b"new ")
        got = drain(c, {("ev", i % 2, i // 2) for i in range(6)})
        assert sorted(m.value for m in got) == sorted(b"new %d" % i for i in range(6))


def test_a_claimed_log_that_stays_gone_while_its_record_stays_is_an_error(tmp_path):
    """A log removed alone, met by a claim: the poll raises once it stayed gone for
    the session timeout (as for an owned partition's: test_groups.py)."""
    root = str(tmp_path)
    make(root, "ev", 4, partitions=2)
    shutil.rmtree(os.path.join(root, "ev-1"))
    with Consumer(root, "g", topics=["ev"], auto_commit_ms=None,
                  session_timeout_ms=1000) as c:
        t0 = time.monotonic()
        with pytest.raises(seglog.LogClosedError):
            while time.monotonic() - t0 < 30:
                c.poll(timeout_ms=20)
        assert time.monotonic() - t0 >= 1.0


def test_a_deleted_topics_offsets_go_with_it_and_its_return_is_read_from_the_start(tmp_path):
    root = str(tmp_path)
    make(root, "a", 3)
    make(root, "b", 5)
    with Consumer(root, "g", topics=["a", "b"], member_id="m", auto_commit_ms=60_000) as c:
        drain(c, {("a", 0, o) for o in range(3)} | {("b", 0, o) for o in range(5)})
        c.commit()
        delete_topic(root, "b")
        wait_for(lambda: (c.poll(timeout_ms=20), ("b", 0) not in c.assignment())[-1], 10,
                 "b to leave the assignment")
        assert committed_offsets(root, "g") == {("a", 0): 3}
        make(root, "b", 2, tag=b"again ")
        got = drain(c, {("b", 0, 0), ("b", 0, 1)})
        assert [m.value for m in got] == [b"again 0", b"again 1"]
    assert committed_offsets(root, "g") == {("a", 0): 3, ("b", 0): 2}


@pytest.mark.parametrize("record_first", [True, False])
def test_deleting_a_subscribed_topic_never_fails_the_loop(tmp_path, record_first):
    """A pattern consumer's loop while one of its topics is deleted and made again
    five times (the record removed before or after the logs): it never raises (a
    poll read the vanished log before the group check saw the record go: 5,200
    LogClosedErrors over 5 deletions), every message of the steady topic arrives
    once, and so does every message of the last incarnation."""
    seed = int(os.environ.get("SEGLOG_SEED", random.randrange(2**32)))
    print(f"seed {seed} (rerun with SEGLOG_SEED={seed})")
    rnd = random.Random(seed)
    root = str(tmp_path)
    make(root, "t-steady", 0, partitions=2)
    make(root, "t-gone", 4, partitions=2, tag=b"0:")
    c = Consumer(root, "g", pattern=r"t-.*", auto_commit_ms=100)
    got: list = []
    errors: list = []

    def loop() -> None:
        try:
            for m in c:
                got.append(m)
        except BaseException:                 # noqa: BLE001 - the test's failure
            errors.append(traceback.format_exc())

    th = threading.Thread(target=loop)
    th.start()
    steady = Topic.open(root, "t-steady")
    try:
        n = 0
        for life in range(1, 6):
            for _ in range(20):
                steady.append(b"%d" % n, partition=n % 2)
                n += 1
            time.sleep(rnd.random() * 0.1)      # a random instant, not a synchronisation
            delete_topic(root, "t-gone", record_first=record_first)
            time.sleep(rnd.random() * 0.1)
            make(root, "t-gone", 4, partitions=2, tag=b"%d:" % life)
        last = {("t-gone", p, o) for p in range(2) for o in range(2)}
        want = {("t-steady", i % 2, i // 2) for i in range(n)} | last
        wait_for(lambda: errors or want <= {(m.topic, m.partition, m.offset) for m in got}
                 and {m.value for m in got if m.topic == "t-gone"} >= {b"5:%d" % i for i in range(4)},
                 30, "every message of the steady topic and of the last incarnation")
    finally:
        steady.close()
        c.close()
        th.join(10)
    assert not errors, errors
    steady_got = [(m.partition, m.offset) for m in got if m.topic == "t-steady"]
    assert sorted(steady_got) == sorted(set(steady_got))        # each once


def test_a_partition_whose_log_goes_while_it_is_claimed_is_claimed_again(tmp_path,
                                                                        monkeypatch):
    """The topic's directory goes between opening a claimed partition's log and
    reading its offsets (a deletion under way): nothing of the partition is taken,
    the consumer is made, and the next look claims it and reads every message."""
    from seglog import Log, LogClosedError
    root = str(tmp_path)
    make(root, "t", 3)
    real = Log.start_offset
    failed: list[bool] = []

    def start_offset(log: Log) -> int:
        if not failed:
            failed.append(True)
            raise LogClosedError(f"log directory {log.path} is gone")
        return real.fget(log)           # type: ignore[attr-defined]
    monkeypatch.setattr(Log, "start_offset", property(start_offset))
    c = Consumer(root, "g", topics=["t"], auto_offset_reset="earliest", auto_commit_ms=None)
    try:
        assert failed, "the claim never read the log's offsets"
        got = drain(c, {("t", 0, o) for o in range(3)})
        assert sorted(m.offset for m in got) == [0, 1, 2]
    finally:
        c.close()

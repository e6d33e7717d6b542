"""The consumer calls kafka-python users expect: commit(offsets), seek_to_beginning and
seek_to_end, pause/resume/paused, pattern subscription, key and value deserializers.
Where ownership matters the other members are real processes (tests/group_member.py),
and every wait has a deadline."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import seglog
from seglog import Consumer, InvalidConfigError, OffsetOutOfRangeError, Topic, describe_group
from consumers import owned
from helpers import fill, wait_for
from seglog.consumer_group import committed_offsets

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the shared helpers
MEMBER = os.path.join(TESTS, "group_member.py")
SESSION_MS = 1000


class Members:
    """Member processes of group "g" and their trace."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.trace = os.path.join(root, "trace.jsonl")
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, topic: str) -> None:
        self.procs[name] = subprocess.Popen(
            [sys.executable, MEMBER, self.root, "g", topic, name, self.trace, str(SESSION_MS)])

    def events(self, kind: str, name: str) -> list[list]:
        try:
            with open(self.trace) as f:
                lines = [json.loads(line) for line in f if line.endswith("\n")]
        except FileNotFoundError:
            return []
        return [e for e in lines if e[0] == kind and e[1] == name]

    def stop(self, name: str) -> None:
        p = self.procs.pop(name)
        p.terminate()                       # it closes: leaves the group at once
        p.wait(timeout=20)

    def stop_all(self) -> None:
        for name in list(self.procs):
            p = self.procs[name]
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            del self.procs[name]


def owners(root: str) -> dict[str, str | None]:
    """``"topic-p"`` -> its owner, as ``describe_group`` says."""
    return {f"{t}-{p}": v["owner"] for (t, p), v in describe_group(root, "g")["partitions"].items()}


def collect(c: Consumer, want: set, timeout: float = 10.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while not want <= {(m.partition, m.offset) for m in got}:
        missing = sorted(want - {(m.partition, m.offset) for m in got})
        assert time.monotonic() < deadline, f"{len(missing)} missing: {missing[:10]}..."
        got += c.poll(timeout_ms=50)
    return got


@pytest.fixture
def pair(tmp_path):
    """Topic ev (4 partitions, 10 messages each) in group g: member process "m0" owns
    ev-0 and ev-1 (range: members in name order) and has consumed and committed them;
    this process's consumer "z" owns ev-2 and ev-3 and has read nothing yet."""
    root = str(tmp_path)
    topic = Topic.open(root, "ev", partitions=4)
    members = Members(root)
    z = Consumer(root, "g", topics=["ev"], member_id="z", auto_commit_ms=None,
                 session_timeout_ms=SESSION_MS)
    try:
        members.start("m0", "ev")
        wait_for(lambda: (z.poll(0), owned(z) == {("ev", 2), ("ev", 3)}
                          and owners(root) == {"ev-0": "m0", "ev-1": "m0", "ev-2": "z",
                                               "ev-3": "z"})[-1], 20, "the split")
        # z polls (its heartbeat) while m0 consumes, paused so that it reads nothing
        z.pause(("ev", 2), ("ev", 3))
        fill(topic, 40)
        wait_for(lambda: (z.poll(0), committed_offsets(root, "g") == {("ev", 0): 10,
                                                                      ("ev", 1): 10})[-1],
                 20, "m0 to consume and commit its half")
        z.resume(("ev", 2), ("ev", 3))
        yield topic, z, members
    finally:
        members.stop_all()
        z.close()
        topic.close()


def offsets_file(root: str) -> bytes:
    with open(os.path.join(root, "__groups", "g", "offsets.json"), "rb") as f:
        return f.read()


# -- commit(offsets) ---------------------------------------------------------------------

def test_commit_offsets_commits_exactly_those_and_refuses_bad_ones_writing_nothing(pair):
    topic, z, members = pair
    root = topic.root
    before = offsets_file(root)
    assert committed_offsets(root, "g") == {("ev", 0): 10, ("ev", 1): 10}
    assert owners(root)["ev-0"] == "m0" and members.procs["m0"].poll() is None
    bad = [
        ({("ev", 0): 5}, InvalidConfigError),                  # owned by the live process m0
        ({("ev", 2): 3, ("ev", 0): 5}, InvalidConfigError),    # one good, one not owned
        ({("ev", 2): 3, ("ev", 7): 1}, InvalidConfigError),    # no such partition
        ({("ev", 2): 3, ("ev", 3): 11}, OffsetOutOfRangeError),  # past ev-3's end (10)
        ({("ev", 2): -1}, OffsetOutOfRangeError),
        ({("ev", 2): "3"}, TypeError),
        ({("ev", 2): True}, TypeError),
        ({("ev", 2): 3.0}, TypeError),
        ({("ev",): 3}, TypeError),
        ({"ev-2": 3}, TypeError),
        ({("ev", "2"): 3}, TypeError),
        ([(("ev", 2), 3)], TypeError),
    ]
    for offsets, err in bad:
        with pytest.raises(err):
            z.commit(offsets)
        assert offsets_file(root) == before, offsets
    # exact offsets of owned partitions, positions untouched
    assert z.position("ev", 2) == 0 and z.position("ev", 3) == 0
    z.commit({("ev", 2): 7, ("ev", 3): 10})
    assert committed_offsets(root, "g") == {("ev", 0): 10, ("ev", 1): 10, ("ev", 2): 7,
                                             ("ev", 3): 10}
    assert z.position("ev", 2) == 0 and z.position("ev", 3) == 0
    # a named offset may go back (kafka-python commits what it is given)
    z.commit({("ev", 3): 4})
    assert z.committed("ev", 3) == 4
    z.commit({})                                         # nothing named: nothing done
    assert committed_offsets(root, "g")[("ev", 3)] == 4
    # without the argument: today's commit of the positions
    got = collect(z, {(2, o) for o in range(10)} | {(3, o) for o in range(10)})
    assert {m.partition for m in got} == {2, 3}
    z.commit()
    assert committed_offsets(root, "g") == {("ev", p): 10 for p in range(4)}


def test_commit_offsets_refuses_an_offset_retention_deleted(tmp_path):
    root = str(tmp_path)
    with Topic.open(root, "ev", partitions=1, segment_bytes=1024, retention_bytes=1) as t:
        for i in range(200):
            t.append(b"v%05d" % i + b"." * 40)
        t.partition(0).enforce_retention()                 # sealed segments deleted
        start = t.partition(0).start_offset
        assert start > 0
        with Consumer(root, "g", topics=["ev"], auto_commit_ms=None) as c:
            c.poll(0)
            with pytest.raises(OffsetOutOfRangeError):
                c.commit({("ev", 0): start - 1})
            assert committed_offsets(root, "g") == {}
            c.commit({("ev", 0): start})
            assert committed_offsets(root, "g") == {("ev", 0): start}


# -- seek_to_beginning / seek_to_end ------------------------------------------------------

def test_seek_to_beginning_and_end_move_owned_partitions_only(pair):
    topic, z, members = pair
    mine = {(p, o) for p in (2, 3) for o in range(10)}
    first = collect(z, mine)
    assert {(m.partition, m.offset) for m in first} == mine      # nothing of m0's half
    assert z.poll(timeout_ms=100) == []
    # every owned partition, back to its log's start: delivered again
    z.seek_to_beginning()
    assert {p: z.position("ev", p) for p in (2, 3)} == {2: 0, 3: 0}
    again = collect(z, mine)
    assert sorted((m.partition, m.offset) for m in again) == sorted(mine)
    # one partition only
    z.seek_to_beginning(("ev", 3))
    assert {(m.partition, m.offset) for m in collect(z, {(3, o) for o in range(10)})} == \
        {(3, o) for o in range(10)}
    # to the end: only what is appended later
    z.seek_to_beginning()
    z.seek_to_end()
    assert {p: z.position("ev", p) for p in (2, 3)} == {2: 10, 3: 10}
    assert z.poll(timeout_ms=100) == []
    fill(topic, 4, 40)                                       # offsets 10 of each partition
    assert {(m.partition, m.offset) for m in collect(z, {(2, 10), (3, 10)})} == {(2, 10), (3, 10)}
    # a partition owned by the live process m0: refused, nothing moved
    z.seek_to_beginning(("ev", 2))
    for call in (z.seek_to_end, z.seek_to_beginning):
        with pytest.raises(InvalidConfigError, match="ev-0"):
            call(("ev", 2), ("ev", 0))
        assert z.position("ev", 2) == 0 and z.position("ev", 3) == 11
    for bad in ("ev", ("ev",), ("ev", "2"), ["ev", 2]):
        with pytest.raises(TypeError):
            z.seek_to_end(bad)
    assert z.position("ev", 2) == 0
    assert owners(topic.root)["ev-0"] == "m0" and members.procs["m0"].poll() is None


# -- pause / resume ------------------------------------------------------------------------

def test_a_paused_partition_stays_owned_delivers_nothing_and_the_member_is_not_expelled(pair):
    topic, z, members = pair
    gen = z.generation
    p2, p3 = ("ev", 2), ("ev", 3)
    # read ahead on ev-3: a poll of one message leaves the rest of its read in memory
    z.pause(p2)
    assert z.paused() == {p2} and isinstance(z.paused(), set)
    one = wait_for(lambda: z.poll(timeout_ms=50, max_records=1), 10, "one message")
    assert [(m.partition, m.offset) for m in one] == [(3, 0)]
    z.resume(p2)
    z.pause(p3)
    assert z.paused() == {p3}
    # polling for over a session timeout while ev-3 is paused: ev-2 delivers (also what
    # is appended meanwhile), ev-3 nothing, not even its read-ahead
    got = []
    t0 = time.monotonic()
    i = 40
    while time.monotonic() - t0 < 1.6 * SESSION_MS / 1000:
        if time.monotonic() - t0 > (i - 40) / 4 * 0.1:      # one message a partition each 0.1 s
            fill(topic, 4, i)
            i += 4
        got += z.poll(timeout_ms=100)
    got += collect(z, {(2, o) for o in range(10 + (i - 40) // 4)} -
                   {(m.partition, m.offset) for m in got})
    assert {m.partition for m in got} == {2}
    assert sorted(m.offset for m in got) == list(range(10 + (i - 40) // 4))
    assert z.position("ev", 3) == 1
    # still a member of the same generation, still owning both: not expelled
    assert z.generation == gen and owned(z) == {p2, p3} and z.assignment() == {p2, p3}
    d = describe_group(topic.root, "g")
    assert set(d["members"]) == {"m0", "z"} and d["members"]["z"]["status"] == "alive"
    assert owners(topic.root) == {"ev-0": "m0", "ev-1": "m0", "ev-2": "z", "ev-3": "z"}
    # everything paused: a poll waits its whole timeout, returns nothing, heartbeats
    z.pause(p2, p3)
    fill(topic, 4, i)
    i += 4
    t0 = time.monotonic()
    while time.monotonic() - t0 < 1.3 * SESSION_MS / 1000:
        start = time.monotonic()
        assert z.poll(timeout_ms=200) == []
        assert time.monotonic() - start >= 0.19
    member_file = os.path.join(topic.root, "__groups", "g", "members", "z")
    assert time.time() - os.stat(member_file).st_mtime < 0.5         # the heartbeat went on
    assert z.generation == gen and describe_group(topic.root, "g")["members"]["z"]["status"] == "alive"
    # resumed: ev-3 goes on right after the message it delivered, ev-2 where it was
    z.resume(p2, p3)
    assert z.paused() == set()
    n = (i - 40) // 4
    rest = collect(z, {(3, o) for o in range(1, 10 + n)} | {(2, 10 + n - 1)})
    assert sorted(m.offset for m in rest if m.partition == 3) == list(range(1, 10 + n))
    assert [m.offset for m in rest if m.partition == 2] == [10 + n - 1]
    # not owned: refused, nothing paused
    with pytest.raises(InvalidConfigError):
        z.pause(p2, ("ev", 0))
    with pytest.raises(InvalidConfigError):
        z.resume(("ev", 1))
    with pytest.raises(TypeError):
        z.pause("ev")
    z.pause()                                        # none given: nothing (kafka-python)
    assert z.paused() == set()


def test_a_paused_partition_lost_in_a_rebalance_is_no_longer_paused(pair):
    topic, z, members = pair
    z.pause(("ev", 2), ("ev", 3))
    gen = z.generation
    # a third member: range over m0, m1, z gives z only ev-3
    members.start("m1", "ev")
    wait_for(lambda: (z.poll(timeout_ms=20), owned(z) == {("ev", 3)}
                      and owners(topic.root).get("ev-2") == "m1")[-1], 20, "m1 to take ev-2")
    assert z.generation > gen
    assert z.paused() == {("ev", 3)}
    # m1 leaves: ev-2 comes back to z, unpaused; it delivers ev-2 from its committed
    # offset (m1's) while ev-3 stays paused
    wait_for(lambda: members.events("commit", "m1"), 20, "m1 to consume ev-2")
    members.stop("m1")
    wait_for(lambda: (z.poll(timeout_ms=20), owned(z) == {("ev", 2), ("ev", 3)})[-1],
             20, "z to own ev-2 again")
    assert z.paused() == {("ev", 3)}
    fill(topic, 4, 40)
    got = collect(z, {(2, 10)})
    assert {m.partition for m in got} == {2}


# -- pattern subscription ------------------------------------------------------------------

CREATE = """
import sys, seglog
root = sys.argv[1]
for name in sys.argv[2:]:
    with seglog.Topic.open(root, name, partitions=2) as t:
        for i in range(6):
            t.append(b"%s %d" % (name.encode(), i), partition=i % 2)
"""


def test_pattern_subscription_takes_topics_another_process_creates(tmp_path):
    root = str(tmp_path)
    with Topic.open(root, "clicks-a", partitions=2) as t:
        for i in range(4):
            t.append(b"a %d" % i, partition=i % 2)
    with Topic.open(root, "views", partitions=1) as t:
        t.append(b"v")
    members = Members(root)
    # this process: group g's explicit subscriber to clicks-b, which does not exist
    # yet, and group h's pattern subscriber
    # a's session is long: this test is about subscriptions, not expulsion, and a
    # loaded machine can keep this thread from polling for longer than SESSION_MS
    # (then p expels a and takes clicks-b-0 itself)
    a = Consumer(root, "g", topics=["clicks-b"], member_id="a", auto_commit_ms=None,
                 session_timeout_ms=30 * SESSION_MS)
    h = Consumer(root, "h", pattern=r"clicks-[a-z]+", auto_commit_ms=None)
    got_h: list = []
    got_a: list = []
    try:
        assert h.subscription() == {"clicks-a"} and h.topics == ["clicks-a"]
        members.start("p", r"re:clicks-[a-z]+")         # g's pattern member, a process
        wait_for(lambda: (got_a.extend(a.poll(0)), got_h.extend(h.poll(0)),
                          owners(root) == {"clicks-a-0": "p", "clicks-a-1": "p"})[-1],
                 20, "p to own clicks-a")
        with open(os.path.join(root, "__groups", "g", "members", "p")) as f:
            assert json.load(f)["pattern"] == r"clicks-[a-z]+"    # others read it there
        gen = a.generation
        # another process creates clicks-b (matches), clicks-b1 (only a prefix of it
        # matches: not subscribed, the whole name must match) and more-clicks-c
        # (a polls meanwhile: its heartbeat must not stop for a session on a loaded
        # machine, or p expels it and takes clicks-b-0 itself)
        creator = subprocess.Popen([sys.executable, "-c", CREATE, root, "clicks-b", "clicks-b1",
                                    "more-clicks-c"])
        wait_for(lambda: (got_a.extend(a.poll(0)), got_h.extend(h.poll(0)),
                          creator.poll() is not None)[-1], 60, "the topics to be created")
        assert creator.returncode == 0
        want_h = {("clicks-a", i % 2, i // 2) for i in range(4)} | \
            {("clicks-b", i % 2, i // 2) for i in range(6)}

        def settled() -> bool:
            got_a.extend(a.poll(0))
            got_h.extend(h.poll(timeout_ms=20))
            d = describe_group(root, "g")
            return (d["members"].get("p", {}).get("topics") == ["clicks-a", "clicks-b"]
                    and owners(root) == {"clicks-a-0": "p", "clicks-a-1": "p",
                                         "clicks-b-0": "a", "clicks-b-1": "p"}
                    and {(m.topic, m.partition, m.offset) for m in got_h} >= want_h)
        wait_for(settled, 20, "both groups to take clicks-b")
        assert h.subscription() == {"clicks-a", "clicks-b"}
        assert {(m.topic, m.partition, m.offset) for m in got_h} == want_h
        assert a.generation > gen and a.assignment() == {("clicks-b", 0)}
        assert describe_group(root, "h")["members"][h.member_id]["topics"] == \
            ["clicks-a", "clicks-b"]
        # the process member p delivers clicks-a and clicks-b-1; a delivers clicks-b-0
        got_a += collect(a, {(0, o) for o in range(3)} - {(m.partition, m.offset) for m in got_a})
        assert sorted((m.topic, m.partition, m.offset) for m in got_a) == \
            [("clicks-b", 0, o) for o in range(3)]
        wait_for(lambda: {("clicks-b", 1, o) for o in range(3)} <= {
            tuple(e[3:6]) for e in members.events("y", "p")}, 20,
            "p to deliver clicks-b-1")
        seen_p = {tuple(e[3:6]) for e in members.events("y", "p")}
        assert {x[0] for x in seen_p} == {"clicks-a", "clicks-b"}
    finally:
        members.stop_all()
        a.close()
        h.close()


def test_topics_or_pattern_exactly_one_and_a_good_regex(tmp_path):
    root = str(tmp_path)
    for kwargs, err in (({}, InvalidConfigError),
                        ({"topics": ["t"], "pattern": "t"}, InvalidConfigError),
                        ({"pattern": "("}, InvalidConfigError),
                        ({"pattern": "a" * 5000}, InvalidConfigError),
                        ({"pattern": 7}, TypeError),
                        ({"topics": ["t"], "key_deserializer": "utf-8"}, TypeError),
                        ({"topics": ["t"], "value_deserializer": 1}, TypeError)):
        with pytest.raises(err):
            Consumer(root, "g", **kwargs)
    assert not os.path.exists(os.path.join(root, "__groups", "g", "members")) or \
        os.listdir(os.path.join(root, "__groups", "g", "members")) == []
    with Consumer(root, "g", pattern="nothing-yet-.*") as c:
        assert c.subscription() == set() and c.poll(timeout_ms=50) == []


# -- deserializers ---------------------------------------------------------------------------

def test_deserializers_apply_to_keys_and_values_but_not_to_none(tmp_path):
    root = str(tmp_path)
    with Topic.open(root, "ev", partitions=1) as t:
        t.append(json.dumps({"n": 1}).encode(), key=b"k1")
        t.append(None, key=b"k2")                        # a tombstone
        t.append(json.dumps([2]).encode())               # no key
    with Consumer(root, "g", topics=["ev"], key_deserializer=bytes.decode,
                  value_deserializer=json.loads, auto_commit_ms=None) as c:
        got = collect(c, {(0, 0), (0, 1), (0, 2)})
    assert [(m.key, m.value) for m in got] == [("k1", {"n": 1}), ("k2", None), (None, [2])]
    assert got[0].offset == 0 and got[0].topic == "ev"


def test_a_deserializer_error_is_raised_and_the_position_stays_at_that_message(tmp_path):
    root = str(tmp_path)
    with Topic.open(root, "ev", partitions=2) as t:
        for i in range(6):
            t.append(json.dumps(i).encode(), partition=0)
            t.append(json.dumps(100 + i).encode(), partition=1)
        t.partition(0).append(b"{not json")              # ev-0 offset 6
        t.partition(0).append(b"7")
    calls = []

    def value(b: bytes):
        calls.append(b)
        return json.loads(b)

    with Consumer(root, "g", topics=["ev"], value_deserializer=value, auto_commit_ms=None) as c:
        got: list = []
        errors = []
        deadline = time.monotonic() + 10
        while len(errors) < 3:
            assert time.monotonic() < deadline
            try:
                got += c.poll(timeout_ms=20, max_records=4)
            except ValueError as e:
                errors.append(e)
                assert c.position("ev", 0) == 6
        # everything before the bad message, once each; and ev-1 entirely
        assert sorted((m.partition, m.offset) for m in got) == \
            [(0, o) for o in range(6)] + [(1, o) for o in range(6)]
        assert {m.value for m in got} == set(range(6)) | set(range(100, 106))
        assert "ev-0 offset 6" in "".join(getattr(errors[0], "__notes__", []))
        # each poll that reaches it calls the deserializer on it again
        assert calls.count(b"{not json") == 3
        # iteration raises it too
        with pytest.raises(ValueError):
            for _ in c:
                pass
        assert c.position("ev", 0) == 6
        c.commit()
        assert c.committed("ev", 0) == 6                 # never past what failed
        c.seek("ev", 0, 7)                                # skip it
        rest = collect(c, {(0, 7)})
        assert [(m.offset, m.value) for m in rest] == [(7, 7)]


def test_poll_refuses_max_records_below_one_with_a_value_error(tmp_path):
    """``poll(max_records=0)`` raised ``TypeError``: a bad value is a ``ValueError``."""
    root = str(tmp_path)
    with Topic.open(root, "ev", partitions=1) as t:
        t.append(b"x")
    with Consumer(root, "g", topics=["ev"], auto_commit_ms=None) as c:
        for bad in (0, -1):
            with pytest.raises(ValueError, match="max_records"):
                c.poll(timeout_ms=0, max_records=bad)
        for bad in (1.5, True, "1"):
            with pytest.raises(TypeError, match="max_records"):
                c.poll(timeout_ms=0, max_records=bad)
        assert [m.value for m in c.poll(timeout_ms=1000, max_records=1)] == [b"x"]


def test_seek_in_on_assign_works_as_with_kafka_python(tmp_path):
    """kafka-python's habit: the callback seeks the consumer it belongs to. It ran in
    the constructor, before the name was bound (and on partitions not claimed yet
    a seek refused): the first assignment is announced by the first poll, and a seek
    of a partition assigned but not yet handed over applies when it is."""
    root = str(tmp_path)
    with Topic.open(root, "ev", partitions=4) as t:
        fill(t, 40)                                     # 10 a partition
    seen: list = []

    def on_assign(tps):
        seen.append(tps)
        for t, p in sorted(tps):
            if p % 2 == 0:
                c.seek(t, p, 5)
            else:
                c.seek_to_end((t, p))

    c = Consumer(root, "g", topics=["ev"], member_id="a", auto_commit_ms=None, on_assign=on_assign)
    try:
        got = collect(c, {(0, o) for o in range(5, 10)} | {(2, o) for o in range(5, 10)})
        assert sorted((m.partition, m.offset) for m in got) == \
            [(p, o) for p in (0, 2) for o in range(5, 10)]
        assert seen == [{("ev", p) for p in range(4)}]
        c.commit()
        # b joins; its on_assign seeks partitions a still holds: they start there
        # once a hands them over (at a's next poll), not at a's commit (10)
        b_seen: list = []

        def b_assign(tps):
            b_seen.append(tps)
            b.seek_to_beginning(*tps)

        b = Consumer(root, "g", topics=["ev"], member_id="b", auto_commit_ms=None, on_assign=b_assign)
        try:
            got_b: list = []
            wait_for(lambda: (c.poll(timeout_ms=10), got_b.extend(b.poll(timeout_ms=10)),
                              {(m.partition, m.offset) for m in got_b}
                              >= {(p, o) for p in (2, 3) for o in range(10)})[-1],
                     20, "b to read 2 and 3 from their start")
            assert b_seen == [{("ev", 2), ("ev", 3)}]
        finally:
            b.close()
    finally:
        c.close()


# -- group administration through ``import seglog`` ----------------------------------------

def test_group_admin_calls_are_exported_from_seglog(tmp_path):
    import seglog.consumer_group as cg
    root = str(tmp_path)
    for name in ("list_groups", "committed_offsets", "commit_offsets", "describe_group"):
        assert name in seglog.__all__ and getattr(seglog, name) is getattr(cg, name)
    assert seglog.list_groups(root) == []
    with Topic.open(root, "ev", partitions=2) as t:
        t.append_batch([b"a", b"b", b"c"], partition=0)
        t.append_batch([b"d"], partition=1)
    assert seglog.committed_offsets(root, "batch") == {}        # no such group yet
    assert seglog.commit_offsets(root, "batch", {("ev", 0): 2, ("ev", 1): 1}) == \
        {("ev", 0): 2, ("ev", 1): 1}
    # committed offsets never move backwards
    assert seglog.commit_offsets(root, "batch", {("ev", 0): 1}) == {("ev", 0): 2}
    assert seglog.list_groups(root) == ["batch"]
    assert seglog.committed_offsets(root, "batch") == {("ev", 0): 2, ("ev", 1): 1}
    parts = seglog.describe_group(root, "batch")["partitions"]
    assert parts[("ev", 0)]["committed"] == 2 and parts[("ev", 1)]["committed"] == 1
    with pytest.raises(OffsetOutOfRangeError):
        seglog.commit_offsets(root, "batch", {("ev", 1): 5})      # past ev-1's end
    assert seglog.committed_offsets(root, "batch") == {("ev", 0): 2, ("ev", 1): 1}


def test_consumer_options_are_keyword_only_after_root_and_group(tmp_path):
    root = str(tmp_path)
    with Topic.open(root, "ev", partitions=1) as t:
        t.append(b"a")
    for positional in ((["ev"],), (["ev"], "latest")):
        with pytest.raises(TypeError, match="positional"):
            Consumer(root, "g", *positional)
    assert seglog.list_groups(root) == []          # refused before joining: nothing made
    with Consumer(root, group="g", topics=["ev"], auto_commit_ms=None) as c:
        assert [m.value for m in collect(c, {(0, 0)}, timeout=30.0)] == [b"a"]

"""Consumer groups: assignors, one process's consumers, and real member processes
(SIGKILL and SIGSTOP are real signals). The torture test's round count grows with
SEGLOG_TORTURE (scripts/torture); every randomized test prints its seed."""

from __future__ import annotations

import gc
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seglog
from seglog import CommitFailedError, Consumer, InvalidConfigError, Log, Topic, describe_group
from seglog.consumer_group import assign, commit_offsets, committed_offsets, list_groups
from seglog.testing import advance_group_clock
from consumers import delete_topic, owned
from helpers import fill, wait_for

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the shared helpers
MEMBER = os.path.join(TESTS, "group_member.py")
TORTURE = int(os.environ.get("SEGLOG_TORTURE", "1"))


def _seed() -> int:
    seed = int(os.environ.get("SEGLOG_SEED", random.randrange(2**32)))
    print(f"seed {seed} (rerun with SEGLOG_SEED={seed})")
    return seed


# -- assignors -----------------------------------------------------------------------

def test_range_is_the_kafka_papers_algorithm():
    # 7 partitions over 3 members: 3, 2, 2 contiguous partitions, members in order
    got = assign("range", {"a": ["t"], "b": ["t"], "c": ["t"]}, {"t": 7})
    assert got == {"a": [("t", 0), ("t", 1), ("t", 2)], "b": [("t", 3), ("t", 4)],
                   "c": [("t", 5), ("t", 6)]}


def test_roundrobin_deals_in_turn():
    got = assign("roundrobin", {"a": ["t", "u"], "b": ["t", "u"]}, {"t": 2, "u": 2})
    assert got == {"a": [("t", 0), ("u", 0)], "b": [("t", 1), ("u", 1)]}


def test_sticky_keeps_partitions_where_they_are():
    before = assign("sticky", {"a": ["t"], "b": ["t"], "c": ["t"]}, {"t": 9})
    after = assign("sticky", {"a": ["t"], "c": ["t"]}, {"t": 9}, before)
    for m in ("a", "c"):
        assert set(before[m]) <= set(after[m])        # nothing moved that had not to
    assert sorted(after["a"] + after["c"]) == [("t", p) for p in range(9)]


@given(st.sampled_from(["range", "roundrobin", "sticky"]),
       st.lists(st.sets(st.sampled_from(["t", "u", "v"]), min_size=1), min_size=1, max_size=6),
       st.fixed_dictionaries({"t": st.integers(1, 12), "u": st.integers(1, 5),
                              "v": st.integers(1, 3)}))
@settings(deadline=None, max_examples=200)
def test_every_partition_goes_to_exactly_one_subscribed_member(assignor, subs, counts):
    members = {f"m{i}": sorted(s) for i, s in enumerate(subs)}
    got = assign(assignor, members, counts)
    owners: dict = {}
    for m, tps in got.items():
        for tp in tps:
            assert tp not in owners and tp[0] in members[m]
            owners[tp] = m
    wanted = {(t, p) for t in counts for p in range(counts[t])
              if any(t in s for s in members.values())}
    assert set(owners) == wanted
    if assignor != "range" and len({tuple(s) for s in members.values()}) == 1:
        sizes = [len(v) for v in got.values()]
        assert max(sizes) - min(sizes) <= 1


# -- consumers in one process ------------------------------------------------------

@pytest.fixture
def topic(tmp_path):
    root = str(tmp_path)
    t = Topic.open(root, "ev", partitions=4)
    yield t
    t.close()


def drain(consumer, until, timeout=10.0):
    seen = []
    deadline = time.monotonic() + timeout
    while len(seen) < until and time.monotonic() < deadline:
        seen += consumer.poll(timeout_ms=50)
    return seen


def test_two_consumers_split_the_partitions_and_hand_over_on_close(topic):
    fill(topic, 400)
    a = Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=None, member_id="a")
    b = Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=None, member_id="b")
    wait_for(lambda: (a.poll(0), b.poll(0), a.generation == b.generation == 2
                      and len(owned(a)) == len(owned(b)) == 2)[-1], 5, "the split")
    assert a.assignment() | b.assignment() == {("ev", p) for p in range(4)}
    assert not a.assignment() & b.assignment()
    b.close()                               # leaves at once: no timeout to wait for
    t0 = time.monotonic()
    wait_for(lambda: (a.poll(0), len(owned(a)) == 4)[-1], 2, "a to own everything")
    assert time.monotonic() - t0 < 1.0
    a.close()


def test_commit_is_durable_and_the_next_owner_resumes_there(topic):
    fill(topic, 100)
    with Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=None) as c:
        got = drain(c, 60)
        c.commit()
        positions = {p: c.position("ev", p) for p in range(4)}
    with open(os.path.join(topic.root, "__groups", "g", "offsets.json")) as f:
        stored = json.load(f)["offsets"]
    assert {int(k.split("/")[1]): v[0] for k, v in stored.items()} == positions
    with Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=None) as c:
        rest = drain(c, 100 - len(got))
        assert {(m.partition, m.offset) for m in got} | {(m.partition, m.offset) for m in rest} \
            == {(i % 4, i // 4) for i in range(100)}
        for p in range(4):
            assert c.committed("ev", p) == positions[p]


def test_close_commits_with_auto_commit_and_latest_skips_history(topic):
    fill(topic, 40)
    with Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=60_000) as c:
        drain(c, 40)
    assert describe_group(topic.root, "g")["partitions"][("ev", 0)]["lag"] == 0
    with Consumer(topic.root, "h", topics=["ev"], auto_offset_reset="latest") as c:
        assert c.poll(timeout_ms=100) == []
        topic.append(b"new", partition=3)
        got = drain(c, 1)
        assert [(m.partition, m.value) for m in got] == [(3, b"new")]


def test_committed_offsets_do_not_move_back_unless_seeked(topic):
    fill(topic, 40)
    with Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=None) as c:
        drain(c, 40)
        c.commit()
        assert c.committed("ev", 0) == 10
        c.seek("ev", 0, 4)
        c.commit()
        assert c.committed("ev", 0) == 4                 # an explicit seek back
        assert [m.offset for m in drain(c, 6) if m.partition == 0] == [4, 5, 6, 7, 8, 9]
        with pytest.raises(seglog.OffsetOutOfRangeError):
            c.seek("ev", 0, 11)


def test_commit_offsets_without_a_member_never_goes_back_and_a_consumer_resumes_there(topic):
    fill(topic, 40)
    assert commit_offsets(topic.root, "spark", {("ev", 0): 7, ("ev", 1): 10}) == \
        {("ev", 0): 7, ("ev", 1): 10}
    # an older position is ignored: committed offsets never move backwards
    assert commit_offsets(topic.root, "spark", {("ev", 0): 3, ("ev", 2): 5}) == \
        {("ev", 0): 7, ("ev", 2): 5}
    parts = describe_group(topic.root, "spark")["partitions"]
    assert {k: (v["committed"], v["lag"]) for k, v in parts.items()} == {
        ("ev", 0): (7, 3), ("ev", 1): (10, 0), ("ev", 2): (5, 5), ("ev", 3): (None, None)}
    with Consumer(topic.root, "spark", topics=["ev"], auto_commit_ms=None) as c:
        got = drain(c, 3 + 5 + 10)
        assert sorted((m.partition, m.offset) for m in got if m.partition in (0, 2)) == \
            [(0, 7), (0, 8), (0, 9)] + [(2, o) for o in range(5, 10)]
        c.commit()
    # a commit by a member that is gone is not fenced out of commit_offsets either
    assert commit_offsets(topic.root, "spark", {("ev", 3): 10}) == {("ev", 3): 10}
    assert committed_offsets(topic.root, "spark") == {("ev", p): 10 for p in range(4)}
    assert committed_offsets(topic.root, "nobody") == {}
    for bad, err in (({("ev", 4): 1}, InvalidConfigError), ({("nope", 0): 1}, InvalidConfigError),
                     ({("ev", 0): -1}, InvalidConfigError), ({("ev", 0): 1.5}, TypeError),
                     ({"ev-0": 1}, TypeError)):
        with pytest.raises(err):
            commit_offsets(topic.root, "spark", bad)
    with pytest.raises(InvalidConfigError):
        commit_offsets(topic.root, "bad/name", {("ev", 0): 1})


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names fds through /proc")
def test_commit_on_a_full_disk_keeps_the_old_offsets_and_leaves_no_temp_file(topic, monkeypatch):
    fill(topic, 40)                  # ten messages in each partition
    assert commit_offsets(topic.root, "g", {("ev", 0): 3}) == {("ev", 0): 3}
    real = os.write

    def full(fd, data):
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith(".seglog-tmp."):
            raise OSError(28, "No space left on device")
        return real(fd, data)
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(seglog.StorageError, match="No space left"):
        commit_offsets(topic.root, "g", {("ev", 0): 9})
    monkeypatch.setattr(os, "write", real)
    # the temp file's space is given back at once (nothing else would remove it)
    left = [os.path.join(d, n) for d, _, names in os.walk(topic.root) for n in names
            if n.startswith(".seglog-tmp.")]
    assert not left
    assert committed_offsets(topic.root, "g") == {("ev", 0): 3}
    assert commit_offsets(topic.root, "g", {("ev", 0): 9}) == {("ev", 0): 9}


def test_small_polls_return_every_message_once_in_order_and_seek_drops_what_was_read(tmp_path):
    t = Topic.open(str(tmp_path), "one", partitions=1)
    for i in range(0, 1000, 50):
        t.append_batch([b"v%04d" % j for j in range(i, i + 50)])
    with Consumer(t.root, "g", topics=["one"], auto_commit_ms=None) as c:
        got = []
        for size in [1, 7, 50, 3, 500, 1000]:
            got += c.poll(timeout_ms=1000, max_records=size)
            assert c.position("one", 0) == got[-1].offset + 1
        assert [m.offset for m in got] == list(range(len(got)))
        assert [m.value for m in got] == [b"v%04d" % i for i in range(len(got))]
        c.seek("one", 0, 5)                     # read-ahead from before the seek is dropped
        assert [m.offset for m in c.poll(timeout_ms=1000, max_records=3)] == [5, 6, 7]
        c.seek("one", 0, 990)
        assert [m.offset for m in c.poll(timeout_ms=1000)] == list(range(990, 1000))
        assert c.poll(timeout_ms=0) == []
    t.close()


def test_consumer_message_is_a_tuple_with_named_fields(topic):
    import pickle
    topic.append(b"x" * 100, key=b"k", headers=[("h", b"1")], partition=2, timestamp=1_700_000_000_000)
    with Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=None) as c:
        (m,) = drain(c, 1)
    assert m == ("ev", 2, 0, 1_700_000_000_000, b"k", b"x" * 100, (("h", b"1"),))
    assert (m.topic, m.partition, m.offset, m.timestamp, m.key, m.headers) == \
        ("ev", 2, 0, 1_700_000_000_000, b"k", (("h", b"1"),))
    assert m._asdict()["value"] == b"x" * 100 and list(m._asdict()) == list(m._fields)
    assert pickle.loads(pickle.dumps(m)) == m and type(pickle.loads(pickle.dumps(m))) is type(m)
    assert "ConsumerMessage(topic='ev', partition=2, offset=0" in repr(m) and "100 bytes" in repr(m)


def test_a_consumer_steps_over_offsets_compaction_removed(tmp_path):
    t = Topic.open(str(tmp_path), "kv", partitions=1, segment_bytes=4096,
                   cleanup_policy="compact")
    for i in range(300):
        t.append(b"v%d" % i, key=b"k%d" % (i % 3))
    t.partition(0).compact()
    live = [m.offset for m in t.partition(0).iter()]
    assert len(live) < 300
    with Consumer(t.root, "g", topics=["kv"], auto_commit_ms=None) as c:
        got = drain(c, len(live))
        assert [m.offset for m in got] == live
        assert c.poll(timeout_ms=0) == [] and c.position("kv", 0) == 300
    t.close()


def test_an_expelled_member_cannot_commit_and_rejoins(topic, caplog):
    fill(topic, 40)
    a = Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=None, member_id="a",
                 session_timeout_ms=300)
    drain(a, 40)
    b = Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=None, member_id="b",
                 session_timeout_ms=300)
    advance_group_clock(0.1)                    # b's next poll looks at the group: it
    b.poll(0)                                   # sees a's heartbeat as it is now...
    advance_group_clock(0.5)                    # ...and unchanged past a's 300 ms
    wait_for(lambda: (b.poll(0), len(owned(b)) == 4)[-1], 3, "b to expel a")
    b.commit()
    committed = {p: b.committed("ev", p) for p in range(4)}
    with pytest.raises(CommitFailedError):
        a.commit()
    with caplog.at_level(logging.WARNING, logger="seglog"):
        wait_for(lambda: (a.poll(0), b.poll(0), a.generation == b.generation
                          and owned(a) and owned(b) and len(owned(a)) + len(owned(b)) == 4)[-1],
                 3, "a to rejoin")
    assert "expelled" in caplog.text
    assert {p: a.committed("ev", p) for p in range(4)} == committed
    a.close()
    b.close()


def test_retention_past_the_committed_offset_resumes_at_the_start(tmp_path, caplog):
    root = str(tmp_path)
    with Topic.open(root, "ev", partitions=1, segment_bytes=1024, retention_bytes=1,
                    retention_check_ms=None, file_delete_delay_ms=0) as t:
        for i in range(10):
            t.append(b"x" * 100)
        with Consumer(root, "g", topics=["ev"], auto_commit_ms=None) as c:
            drain(c, 2)
            c.seek("ev", 0, 1)
            c.commit()
        for i in range(40):
            t.append(b"y" * 100)
        t.partition(0).enforce_retention()
        start = t.partition(0).start_offset
        assert start > 1
        with caplog.at_level(logging.WARNING, logger="seglog"):
            with Consumer(root, "g", topics=["ev"], auto_commit_ms=None) as c:
                got = drain(c, 1)
                assert got[0].offset == start
        assert "deleted by retention" in caplog.text


@pytest.mark.parametrize("kwargs, exc", [
    ({"group": "a/b"}, InvalidConfigError), ({"group": 5}, TypeError),
    ({"topics": "ev"}, TypeError), ({"topics": []}, InvalidConfigError),
    ({"topics": ["../x"]}, InvalidConfigError),
    ({"auto_offset_reset": "middle"}, InvalidConfigError),
    ({"assignor": "random"}, InvalidConfigError),
    ({"session_timeout_ms": 0}, InvalidConfigError), ({"session_timeout_ms": 1.5}, TypeError),
    ({"auto_commit_ms": 0}, InvalidConfigError), ({"on_assign": 3}, TypeError),
    ({"member_id": "no spaces"}, InvalidConfigError), ({"member_id": ".join-x"}, InvalidConfigError),
    ({"lock_timeout_ms": -1}, InvalidConfigError), ({"lock_timeout_ms": 0.5}, TypeError),
])
def test_bad_input(topic, kwargs, exc):
    args = {"group": "g", "topics": ["ev"], **kwargs}
    with pytest.raises(exc):
        Consumer(topic.root, args.pop("group"), topics=args.pop("topics"), **args)


def test_closed_consumer_and_duplicate_member(topic):
    c = Consumer(topic.root, "g", topics=["ev"], member_id="one")
    with pytest.raises(InvalidConfigError, match="in use"):
        Consumer(topic.root, "g", topics=["ev"], member_id="one")
    c.close()
    c.close()
    for call in (lambda: c.poll(0), c.commit, lambda: c.position("ev", 0)):
        with pytest.raises(seglog.LogClosedError):
            call()
    with pytest.raises(InvalidConfigError):
        describe_group(topic.root, "nobody")


def test_an_idle_consumer_barely_uses_the_cpu(topic):
    """An established topic (its directories not changed in the last seconds: a
    reader re-lists a directory changed within its clock's granularity)."""
    past = time.time() - 10
    for p in range(topic.num_partitions):
        os.utime(os.path.join(topic.root, f"ev-{p}"), (past, past))
    code = ("import time, seglog, sys\n"
            "c = seglog.Consumer(sys.argv[1], 'idle', topics=['ev'])\n"
            "c.poll(timeout_ms=200)\n"
            "t0, w0 = time.process_time(), time.monotonic()\n"
            "c.poll(timeout_ms=2000)\n"
            "print((time.process_time() - t0) / (time.monotonic() - w0))\n")
    out = subprocess.run([sys.executable, "-c", code, topic.root], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) < 0.02


def test_a_poll_wakes_promptly_when_data_arrives(topic):
    with Consumer(topic.root, "g", topics=["ev"]) as c:
        c.poll(timeout_ms=0)
        timer = threading.Timer(0.3, lambda: topic.append(b"late", partition=1))
        timer.start()
        t0 = time.monotonic()
        got = c.poll(timeout_ms=5000)
        took = time.monotonic() - t0
        timer.join()
        assert [m.value for m in got] == [b"late"] and took < 0.3 + 0.15


# -- member processes ------------------------------------------------------------------

class Group:
    """Member processes of one group (``group_member.py``), their traces, and a
    sampler that reads the committed offsets file as often as it can and checks
    each value it sees against what the traces say was delivered by then."""

    def __init__(self, root: str, topics: str, session_ms: int = 1000) -> None:
        self.root, self.topics, self.session_ms = root, topics, session_ms
        self.procs: dict[str, subprocess.Popen] = {}
        self.trace = os.path.join(root, "trace.jsonl")
        open(self.trace, "a").close()
        self.n = 0
        self.hung: list[str] = []        # members that did not end within 20 s of SIGTERM
        self.samples: list[dict] = []
        # commits seen ahead of the deliveries traced before them (beyond the one
        # message a member may have received and not yet traced: see _check_sample)
        self.ahead: list[str] = []
        self._read = 0                   # how far the sampler has read the trace
        self._part = b""
        self._got: dict[int, set[int]] = {}      # per partition of ev, offsets delivered
        self._prefix: dict[int, int] = {}        # per partition, the first not delivered
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        path = os.path.join(self.root, "__groups", "g", "offsets.json")
        while not self._stop.is_set():
            try:
                with open(path) as f:
                    s = json.load(f)["offsets"]
            except (OSError, ValueError):
                s = None
            self._follow_trace()          # after the sample: every delivery before it
            if s is not None:
                self.samples.append(s)
                self._check_sample(s)
            time.sleep(0.01)

    def _follow_trace(self) -> None:
        with open(self.trace, "rb") as f:
            f.seek(self._read)
            data = f.read()
        self._read += len(data)
        lines = (self._part + data).split(b"\n")
        self._part = lines.pop()
        for line in lines:
            e = json.loads(line)
            if e[0] == "y" and e[3] == "ev":
                got = self._got.setdefault(e[4], set())
                got.add(e[5])
                n = self._prefix.get(e[4], 0)
                while n in got:
                    n += 1
                self._prefix[e[4]] = n

    def _check_sample(self, s: dict) -> None:
        """A committed offset of ev counts only delivered messages. A member that
        received a message may be closed (by a signal handler, another thread)
        before it traced it: one message of slack, never a batch."""
        for k, (off, *_) in s.items():
            topic, _, p = k.rpartition("/")
            if topic == "ev" and off > self._prefix.get(int(p), 0) + 1:
                self.ahead.append(f"{k} committed {off}, delivered below "
                                  f"{self._prefix.get(int(p), 0)}")

    def start(self, session_ms: int | None = None, mode: str = "poll", seed: int = 0) -> str:
        """A new member process (its own session timeout if given)."""
        name = f"m{self.n}"
        self.n += 1
        self.procs[name] = subprocess.Popen(
            [sys.executable, MEMBER, self.root, "g", self.topics, name, self.trace,
             str(self.session_ms if session_ms is None else session_ms), mode, "range",
             str(seed)])
        return name

    def events(self) -> list[list]:
        with open(self.trace) as f:
            return [json.loads(line) for line in f if line.endswith("\n")]

    def joined(self, name: str) -> bool:
        return any(e[0] == "join" and e[1] == name for e in self.events())

    def delivered(self, topic: str = "ev") -> set[tuple[int, int]]:
        return {(e[4], e[5]) for e in self.events() if e[0] == "y" and e[3] == topic}

    def values(self, topic: str) -> set[str]:
        return {e[6] for e in self.events() if e[0] == "y" and e[3] == topic}

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                    p.terminate()
                except ProcessLookupError:
                    pass
        for name, p in self.procs.items():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.hung.append(name)
                p.kill()
                p.wait()
        self._stop.set()
        self._sampler.join()

    def check(self) -> None:
        """Within a generation each partition was read by one member, and each
        message once (a member's offsets in a partition only go up, per life of
        a topic made again); committed offsets never went back (no member seeks)
        and never counted a message before it was delivered."""
        users: dict[tuple, set[str]] = {}
        last: dict[tuple, int] = {}
        again = []
        for e in self.events():
            if e[0] == "y":
                _, member, gen, topic, p, off, value = e[:7]
                users.setdefault((gen, topic, p), set()).add(member)
                life = (member, gen, topic, p, value.split(":")[0] if topic != "ev" else "")
                if off <= last.get(life, -1):
                    again.append((life, off))
                last[life] = off
        shared = {k: v for k, v in users.items() if len(v) > 1}
        assert not self.hung, f"members that did not end on SIGTERM: {self.hung}"
        assert not shared, f"partitions consumed by two members of one generation: {shared}"
        assert not again, f"messages delivered twice within a generation: {again[:5]}"
        assert not self.ahead, f"committed ahead of delivery: {self.ahead[:5]}"
        back: dict[str, int] = {}
        for s in self.samples:
            for k, (off, *_) in s.items():
                if k.startswith("ev/"):
                    assert off >= back.get(k, 0), \
                        f"committed offset of {k} went back: {back[k]} -> {off}"
                    back[k] = off


def settled(root: str, members: set[str]) -> bool:
    """The current generation has exactly ``members`` and each has claimed every
    partition it is assigned (the previous owners released them): from now on each
    consumes its own share, until a member joins, leaves or goes silent. A member
    that has not looked at the group since the generation changed still reads the
    partitions it claimed before; ``members`` alone does not say who reads what."""
    if "g" not in list_groups(root):
        return False                   # nobody has joined yet
    d = describe_group(root, "g")
    assigned = {(t, p): m for m, v in d["members"].items() for t, p in v["assignment"]}
    return set(d["members"]) == members and \
        {k: v["owner"] for k, v in d["partitions"].items()} == assigned


@pytest.fixture
def group_topic(tmp_path):
    root = str(tmp_path)
    t = Topic.open(root, "ev", partitions=6)
    yield t
    t.close()


def test_member_processes_split_disjointly_and_completely(group_topic):
    fill(group_topic, 3000)
    g = Group(group_topic.root, "ev")
    try:
        names = [g.start() for _ in range(3)]
        want = {(i % 6, i // 6) for i in range(3000)}
        wait_for(lambda: g.delivered() >= want, 30, "every message", step=0.1)
        d = wait_for(lambda: (lambda d: d if len(d["members"]) == 3 and all(
            v["owner"] for v in d["partitions"].values()) else None)(
            describe_group(group_topic.root, "g")), 10, "3 members owning all")
        owned = [tuple(tp) for m in d["members"].values() for tp in m["assignment"]]
        assert sorted(owned) == [("ev", p) for p in range(6)]      # disjoint, complete
        assert set(d["members"]) == set(names)
    finally:
        g.stop_all()
    g.check()


def test_sigkill_and_sigstop_members(group_topic):
    root = group_topic.root
    fill(group_topic, 600)
    g = Group(root, "ev", session_ms=1000)
    try:
        # the killed member's session timeout is past every wait below: the survivors
        # can only take over because its lock died with it
        a, b, c = g.start(session_ms=60_000), g.start(), g.start()
        # the first to join may consume everything before the others are members (or
        # before it has released their share): the kill below must hit a member that
        # owns partitions, and each survivor must own its share afterwards. 30 s: three
        # interpreters starting on a loaded machine, then a few looks at the group
        wait_for(lambda: settled(root, {a, b, c}), 30, "the three members to settle")
        want = {(i % 6, i // 6) for i in range(600)}
        wait_for(lambda: g.delivered() >= want, 30, "the first messages", step=0.05)
        # SIGKILL: the others own its partitions at their next looks and consume them
        os.kill(g.procs[a].pid, signal.SIGKILL)
        g.procs[a].wait()
        t0 = time.monotonic()
        # a few looks at the group (0.1 s apart): the new generation, the releases and
        # the claims. 10 s is far below a's session timeout: no silence detected it
        wait_for(lambda: settled(root, {b, c}), 10, "the survivors to own everything")
        print(f"failover after SIGKILL: {time.monotonic() - t0:.3f} s")
        fill(group_topic, 600, 600)
        n = 1200
        want = {(i % 6, i // 6) for i in range(n)}
        wait_for(lambda: g.delivered() >= want, 30, "messages after the kill", step=0.05)
        # SIGSTOP between a poll and its commit, past the session timeout: expelled;
        # after SIGCONT that commit fails and the member rejoins. b holds once it gets
        # a batch: one message per partition every 0.5 s (several of its polls) until
        # it does, since a rebalance in between (b silent for its session on a loaded
        # machine) may give the first ones to c, and then b would have none to get
        hold = f"{g.trace}.hold-{b}"
        open(hold, "w").close()
        deadline = time.monotonic() + 30
        held_at: list[int] = []
        while not held_at:
            assert time.monotonic() < deadline, "timed out after 30 s waiting for " \
                "the member to hold a batch"
            fill(group_topic, 6, n)
            n += 6
            round_end = time.monotonic() + 0.5
            while not held_at and time.monotonic() < round_end:
                held_at = [i for i, e in enumerate(g.events())
                           if e[0] == "holding" and e[1] == b]
                time.sleep(0.02)
        held = g.events()[held_at[0]]
        os.kill(g.procs[b].pid, signal.SIGSTOP)
        os.remove(hold)
        wait_for(lambda: list(describe_group(root, "g")["members"]) == [c],
                 10, "the stopped member to be expelled")
        fill(group_topic, 600, n)
        n += 600
        want = {(i % 6, i // 6) for i in range(n)}
        wait_for(lambda: g.delivered() >= want, 30, "messages while it is stopped", step=0.05)
        committed = {k: v["committed"] for k, v in
                     describe_group(root, "g")["partitions"].items()}
        os.kill(g.procs[b].pid, signal.SIGCONT)
        failed = wait_for(lambda: [e for e in g.events()[held_at[0]:]
                                   if e[0] == "commit_failed" and e[1] == b],
                          10, "the stale member's commit to fail")
        assert failed[0][2] == held[2]           # the generation it was stopped in
        wait_for(lambda: set(describe_group(root, "g")["members"]) == {b, c},
                 10, "the stopped member to rejoin")
        after = describe_group(root, "g")["partitions"]
        assert all(after[k]["committed"] >= v for k, v in committed.items()), \
            "the stale member's commit moved committed offsets back"
    finally:
        g.stop_all()
    g.check()


MODES = ["poll", "iter-signal", "iter-thread", "async-cancel", "async-signal", "callbacks"]


def _make_life(root: str, life: int) -> None:
    """Topic ``tmp``'s life ``life``: 2 partitions, messages "<life>:<i>"."""
    with Topic.open(root, "tmp", partitions=2) as t:
        for i in range(8):
            t.append(b"%d:%d" % (life, i), partition=i % 2)


def test_torture_kills_stops_joins_and_leaves(group_topic):
    """Random SIGKILLs, SIGSTOPs past the session timeout, joins, and shutdowns of
    every kind at random instants: SIGTERM to members that then close from a signal
    handler, from another thread, by cancelling their asyncio task and closing, or
    by leaving their poll loop, and members that close themselves from on_assign,
    on_revoke or a deserializer; all while ``ev`` is appended to and ``tmp`` is
    deleted and made again under them. Every message of ev is delivered, and every
    one of tmp's last life; nothing is committed ahead of what was delivered; within
    a generation each partition is read by one member, and each message once."""
    rnd = random.Random(_seed())
    rounds = 50 if TORTURE == 1 else 100 * TORTURE     # CI: 50; scripts/torture: 1,000
    root = group_topic.root
    life = 0
    _make_life(root, life)
    g = Group(root, "ev,tmp", session_ms=400)
    stop = threading.Event()
    written = [0]

    def producer() -> None:
        while not stop.is_set():
            fill(group_topic, 12, written[0])
            written[0] += 12
            time.sleep(0.01)

    th = threading.Thread(target=producer, daemon=True)
    stopped: dict[str, float] = {}
    modes: dict[str, str] = {}

    def start() -> None:
        mode = rnd.choice(MODES)
        modes[g.start(mode=mode, seed=rnd.randrange(2**32))] = mode

    def send(name: str, sig: int) -> None:
        # a member may have ended by itself (closed from a callback) since the
        # test looked: a signal then finds no process
        try:
            os.kill(g.procs[name].pid, sig)
        except ProcessLookupError:
            pass

    try:
        start()
        start()
        th.start()
        for _ in range(rounds):
            live = [n for n, p in g.procs.items() if p.poll() is None and n not in stopped]
            action = rnd.choice(["kill", "stop", "join", "leave", "wait", "recreate"])
            if action == "join" or len(live) < 2:
                start()
            elif action == "kill":
                send(rnd.choice(live), signal.SIGKILL)
            elif action == "stop":
                name = rnd.choice(live)
                send(name, signal.SIGSTOP)
                stopped[name] = time.monotonic() + rnd.uniform(0.1, 0.8)
            elif action == "leave":
                send(rnd.choice(live), signal.SIGTERM)
            elif action == "recreate":
                delete_topic(root, "tmp", record_first=rnd.random() < 0.5)
                life += 1
                _make_life(root, life)
            for name, until in list(stopped.items()):
                if time.monotonic() >= until:
                    send(name, signal.SIGCONT)
                    del stopped[name]
            time.sleep(rnd.uniform(0.02, 0.15))
        for name in list(stopped):
            send(name, signal.SIGCONT)
        stopped.clear()
        stop.set()
        th.join()
        g.start()                     # one member that stays, whatever the others did
        want = {(i % 6, i // 6) for i in range(written[0])}
        last = {f"{life}:{i}" for i in range(8)}
        wait_for(lambda: g.delivered() >= want and g.values("tmp") >= last, 60,
                 f"all {written[0]} messages of ev and tmp's life {life}", step=0.1)
    finally:
        stop.set()
        g.stop_all()
    kills = sum(1 for p in g.procs.values() if p.returncode == -signal.SIGKILL)
    ended = sum(1 for p in g.procs.values() if p.returncode == 0)
    print(f"torture: {rounds} rounds, {len(g.procs)} members "
          f"({', '.join(f'{m} {list(modes.values()).count(m)}' for m in MODES)}), "
          f"{kills} killed, {ended} closed themselves or on SIGTERM, tmp made {life + 1} "
          f"times, {written[0]} messages, all delivered, {len(g.samples)} commits sampled")
    g.check()
    # a SIGTERM while the interpreter starts (before the member's first line runs)
    # or ends (after it left: a second "leave") ends it as a kill would
    left = {e[1] for e in g.events() if e[0] == "left"}
    bad = {n: p.returncode for n, p in g.procs.items()
           if p.returncode not in (0, -signal.SIGKILL)
           and not (p.returncode == -signal.SIGTERM and (not g.joined(n) or n in left))}
    assert not bad, f"members that failed: {bad} (modes {[modes.get(n) for n in bad]})"


# -- the group protocol against a model ----------------------------------------------

from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule  # noqa: E402


class GroupMachine(RuleBasedStateMachine):
    """Members join, leave, crash (their lock dropped without leaving), consume and
    commit while the topic grows; after every step the group settles and must give
    each partition to exactly one live member, committed offsets never go back,
    and (at the end) every message was delivered."""

    PARTITIONS = 3

    def __init__(self) -> None:
        super().__init__()
        import tempfile
        self.dir = tempfile.mkdtemp()
        self.topic = Topic.open(self.dir, "ev", partitions=self.PARTITIONS)
        self.members: dict[str, Consumer] = {}
        self.n = 0
        self.written = 0
        self.delivered: set[tuple[int, int]] = set()
        self.committed: dict[int, int] = {}

    def _new(self) -> None:
        name = f"m{self.n}"
        self.n += 1
        self.members[name] = Consumer(self.dir, "g", topics=["ev"], auto_commit_ms=None,
                                      member_id=name, session_timeout_ms=60_000)

    def _settle(self) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            advance_group_clock(0.1)    # every member looks at the group at its poll
            for c in self.members.values():
                self._take(c.poll(timeout_ms=0))
            gens = {c.generation for c in self.members.values()}
            held = [tp for c in self.members.values() for tp in owned(c)]
            if len(gens) <= 1 and (not self.members or len(held) == self.PARTITIONS):
                return
        raise AssertionError("the group did not settle in 10 s")

    def _take(self, msgs) -> None:
        for m in msgs:
            assert m.value == b"m%06d" % (m.partition + self.PARTITIONS * m.offset)
            self.delivered.add((m.partition, m.offset))

    @rule()
    @precondition(lambda self: len(self.members) < 4)
    def join(self) -> None:
        self._new()
        self._settle()

    @rule(data=st.data())
    @precondition(lambda self: self.members)
    def leave(self, data) -> None:
        name = data.draw(st.sampled_from(sorted(self.members)))
        self.members.pop(name).close()
        self._settle()

    @rule(data=st.data())
    @precondition(lambda self: self.members)
    def crash(self, data) -> None:
        name = data.draw(st.sampled_from(sorted(self.members)))
        # dropped without close(): its lock goes, nothing committed, as with a killed
        # process (test_a_consumer_dropped_without_close_is_seen_gone_at_once)
        del self.members[name]
        gc.collect()
        self._settle()

    @rule(n=st.integers(1, 30))
    def append(self, n) -> None:
        fill(self.topic, n, self.written)
        self.written += n

    @rule(data=st.data())
    @precondition(lambda self: self.members)
    def consume_and_commit(self, data) -> None:
        c = self.members[data.draw(st.sampled_from(sorted(self.members)))]
        self._take(c.poll(timeout_ms=0, max_records=data.draw(st.integers(1, 50))))
        c.commit()

    @invariant()
    def one_owner_each(self) -> None:
        if not self.members:
            return
        held = [tp for c in self.members.values() for tp in owned(c)]
        assert sorted(held) == [("ev", p) for p in range(self.PARTITIONS)]
        state = describe_group(self.dir, "g")
        assert set(state["members"]) == set(self.members)
        for (_, p), v in state["partitions"].items():
            if v["committed"] is not None:
                assert v["committed"] >= self.committed.get(p, 0)
                self.committed[p] = v["committed"]

    def teardown(self) -> None:
        try:
            if self.members:
                want = {(i % self.PARTITIONS, i // self.PARTITIONS) for i in range(self.written)}
                deadline = time.monotonic() + 10
                while not want <= self.delivered and time.monotonic() < deadline:
                    for c in self.members.values():
                        self._take(c.poll(timeout_ms=0, max_records=500))
                assert want <= self.delivered
        finally:
            for c in self.members.values():
                c.close()
            self.topic.close()
            import shutil
            shutil.rmtree(self.dir, ignore_errors=True)


TestGroupProtocol = GroupMachine.TestCase
TestGroupProtocol.settings = settings(max_examples=20, stateful_step_count=12, deadline=None)


# -- failures, stalls, bad input -------------------------------------------------------

def _flip(path: str, needle: bytes) -> None:
    """Damage the batch that holds ``needle`` (its checksum then fails)."""
    with open(path, "r+b") as f:
        data = f.read()
        pos = data.index(needle)
        f.seek(pos)
        f.write(bytes([data[pos] ^ 0xFF]))


def _within(seconds: float, fn, what: str):
    """fn() in a thread: its result, or AssertionError if it has not returned within
    ``seconds`` (a call that hangs fails the test instead of hanging it)."""
    box: list = []

    def run() -> None:
        try:
            box.append((True, fn()))
        except BaseException as e:      # noqa: BLE001 - handed to the caller
            box.append((False, e))

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(seconds)
    assert box, f"{what} did not return within {seconds} s"
    ok, v = box[0]
    if not ok:
        raise v
    return v


def test_a_poll_that_fails_on_one_partition_loses_nothing_it_read(tmp_path):
    """Partition 1 is damaged at offset 2 while partition 0 keeps growing: a poll
    that reads 0 and then fails on 1 must deliver what it read (or move nothing)."""
    root = str(tmp_path)
    with Topic.open(root, "ev", partitions=2) as t:
        for i in range(5):
            t.append(b"A-value-%04d" % i, partition=0)
            t.append(b"B-value-%04d" % i, partition=1)
    _flip(os.path.join(root, "ev-1", "00000000000000000000.log"), b"B-value-0002")
    delivered: set[tuple[int, int]] = set()
    errors = []

    def poll(c) -> None:
        try:
            delivered.update((m.partition, m.offset) for m in c.poll(timeout_ms=20))
        except seglog.CorruptRecordError as e:
            errors.append(e)

    with Log.open(os.path.join(root, "ev-0")) as writer, \
            Consumer(root, "g", topics=["ev"], auto_commit_ms=60_000) as c:
        for i in range(5, 25):
            writer.append(b"A-value-%04d" % i)
            poll(c)
        want = {(0, o) for o in range(25)} | {(1, 0), (1, 1)}
        deadline = time.monotonic() + 5
        while not want <= delivered and time.monotonic() < deadline:
            poll(c)
        positions = {p: c.position("ev", p) for p in (0, 1)}
    # every message before the damage was delivered, and the error was raised
    assert delivered == want
    assert len(errors) >= 3 and "ev-1" in str(errors[0])
    assert positions == {0: 25, 1: 2}
    # close() committed no position past what was delivered
    assert committed_offsets(root, "g") == {("ev", 0): 25, ("ev", 1): 2}


def test_a_poll_interrupted_half_way_moves_no_position(topic, monkeypatch):
    fill(topic, 40)
    with Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=None) as c:
        drain(c, 0)
        c.poll(timeout_ms=0, max_records=1)     # claims, reads ahead
        before = {p: c.position("ev", p) for p in range(4)}
        calls = []
        real = seglog.Log.read

        def read(self, offset, max_bytes=1 << 20):
            calls.append(offset)
            if len(calls) == 2:
                raise KeyboardInterrupt          # not an Exception: nothing is returned
            return real(self, offset, max_bytes)

        monkeypatch.setattr(seglog.Log, "read", read)
        with pytest.raises(KeyboardInterrupt):
            c.poll(timeout_ms=0)
        monkeypatch.undo()
        assert {p: c.position("ev", p) for p in range(4)} == before
        rest = drain(c, 40 - 1)
        assert len(rest) == 39 and {(m.partition, m.offset) for m in rest} == \
            {(i % 4, i // 4) for i in range(40)} - {(0, 0)}


def test_leaving_an_iteration_early_gives_back_what_it_did_not_yield(topic):
    fill(topic, 400)
    seen = []
    with Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=60_000) as c:
        for m in c:                  # one poll returns all 400; the loop takes 7
            seen.append(m)
            if len(seen) == 7:
                c.commit()           # commits what was yielded, not the whole poll
                committed = {p: c.committed("ev", p) for p in range(4)}
                break
        got = {(m.partition, m.offset) for m in seen}
        ends = {p: len([o for q, o in got if q == p]) for p in range(4)}
        assert got == {(p, o) for p in range(4) for o in range(ends[p])}
        assert committed == ends
        assert {p: c.position("ev", p) for p in range(4)} == ends
        seen += c.poll(timeout_ms=1000, max_records=13)     # goes on right after them
        assert len(seen) == 20
    # close() committed what was delivered only: the next consumer gets the rest
    with Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=None) as c:
        rest = drain(c, 400 - 20)
    got = {(m.partition, m.offset) for m in seen}
    assert len(got) == 20 and not {(m.partition, m.offset) for m in rest} & got
    assert {(m.partition, m.offset) for m in rest} | got == {(i % 4, i // 4) for i in range(400)}


HOLDER = """
import fcntl, os, signal, sys, seglog
root = sys.argv[1]
c = seglog.Consumer(root, "g", topics=["ev"], member_id="holder", session_timeout_ms=1000,
                    auto_commit_ms=None)
print("joined", c.generation, flush=True)
sys.stdin.readline()
fd = os.open(os.path.join(root, "__groups", "g", "group.lock"), os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)         # as a member does while it changes the group
print("locked", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)   # ... and is stopped there
os.close(fd)
print("released", flush=True)
sys.stdin.readline()                   # then silent: no poll, no heartbeat
"""


@pytest.mark.parametrize("then", ["SIGCONT", "SIGKILL"])
def test_a_member_stopped_holding_the_group_lock_stalls_nobody(topic, then):
    root = topic.root
    fill(topic, 40)
    a = Consumer(root, "g", topics=["ev"], member_id="a", auto_commit_ms=None, lock_timeout_ms=300,
                 session_timeout_ms=1000)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, root], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        gen = int(_within(30, holder.stdout.readline, "the holder's join").split()[1])
        # a gives the holder its half (range: a has ev-0 and ev-1) before the stall
        wait_for(lambda: (a.poll(0), a.generation == gen and owned(a) == {("ev", 0), ("ev", 1)}
                          and [v["owner"] for v in describe_group(root, "g")["partitions"].values()]
                          == ["a", "a", None, None])[-1], 10, "a to adopt the holder's generation")
        a.commit()
        holder.stdin.write("lock\n")
        holder.stdin.flush()
        assert _within(30, holder.stdout.readline, "the holder's lock") == "locked\n"
        _, status = os.waitpid(holder.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status)
        offsets_file = os.path.join(root, "__groups", "g", "offsets.json")
        with open(offsets_file, "rb") as f:
            offsets_before = f.read()

        # a keeps consuming what it owns; each poll returns within its timeout, also
        # after the holder's session timeout, when a wants to expel it and cannot
        fill(topic, 40, 40)
        got = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.5 or len(got) < 20:
            start = time.monotonic()
            got += _within(10, lambda: a.poll(timeout_ms=200), "a poll")
            assert time.monotonic() - start < 2.0
            assert time.monotonic() - t0 < 20, "a did not deliver its partitions' messages"
        assert {(m.partition, m.offset) for m in got} == {(i % 4, i // 4) for i in range(40, 80)
                                                           if i % 4 in (0, 1)}
        # joins and commits fail within their bound, writing nothing
        for what, call in (("a join", lambda: Consumer(root, "g", topics=["ev"], member_id="late",
                                                       lock_timeout_ms=300)),
                           ("commit_offsets", lambda: commit_offsets(
                               root, "g", {("ev", 0): 1}, lock_timeout_ms=300)),
                           ("a commit", a.commit)):
            start = time.monotonic()
            with pytest.raises(seglog.GroupBusyError, match="group.lock"):
                _within(10, call, what)
            assert time.monotonic() - start < 5.0
        assert sorted(os.listdir(os.path.join(root, "__groups", "g", "members"))) == ["a", "holder"]
        with open(offsets_file, "rb") as f:
            assert f.read() == offsets_before

        # the holder resumes (and goes silent) or dies: the group proceeds, and the
        # holder is out by its own session timeout (or its death)
        os.kill(holder.pid, getattr(signal, then))
        if then == "SIGCONT":
            assert _within(30, holder.stdout.readline, "the holder's release") == "released\n"
        wait_for(lambda: (a.poll(timeout_ms=20), len(owned(a)) == 4)[-1], 10,
                 "a to take the holder's partitions")
        assert list(describe_group(root, "g")["members"]) == ["a"]
        with Consumer(root, "g", topics=["ev"], member_id="late", auto_commit_ms=None) as late:
            assert late.generation > gen
        assert commit_offsets(root, "g", {("ev", 3): 20}) == {("ev", 3): 20}
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
        holder.wait()
        a.close()


def test_commit_offsets_refuses_an_offset_outside_the_log(tmp_path):
    root = str(tmp_path)
    with Topic.open(root, "ev", partitions=2) as t:
        for i in range(5):
            t.append(b"x", partition=0)
    with Topic.open(root, "old", partitions=1, segment_bytes=1024, retention_bytes=1,
                    retention_check_ms=None, file_delete_delay_ms=0) as t:
        for i in range(40):
            t.append(b"y" * 100)
        t.partition(0).enforce_retention()
        start = t.partition(0).start_offset
    assert start > 1
    group_dir = os.path.join(root, "__groups", "g")
    for bad in ({("ev", 0): 1000}, {("ev", 0): 6}, {("ev", 1): 1}, {("old", 0): start - 1},
                {("ev", 0): 3, ("ev", 1): 1}):        # one bad offset: nothing written
        with pytest.raises(seglog.OffsetOutOfRangeError, match="outside"):
            commit_offsets(root, "g", bad)
        assert not os.path.exists(group_dir)
    # the ends are fine (the end: everything processed; the start: nothing)
    assert commit_offsets(root, "g", {("ev", 0): 5, ("ev", 1): 0, ("old", 0): start}) == \
        {("ev", 0): 5, ("ev", 1): 0, ("old", 0): start}
    with pytest.raises(seglog.OffsetOutOfRangeError):
        commit_offsets(root, "g", {("old", 0): 41})
    assert committed_offsets(root, "g") == {("ev", 0): 5, ("ev", 1): 0, ("old", 0): start}
    # a consumer then resumes where the offsets say, and sees what is appended next
    with Topic.open(root, "ev") as t:
        t.append(b"after", partition=1)
    with Consumer(root, "g", topics=["ev"], auto_commit_ms=None) as c:
        assert [(m.partition, m.offset, m.value) for m in drain(c, 1)] == [(1, 0, b"after")]


def test_the_rdd_commit_refuses_ranges_past_the_log_end(tmp_path):
    pytest.importorskip("pyspark")
    from seglog.spark import OffsetRange, commit
    root = str(tmp_path)
    with Topic.open(root, "ev", partitions=1) as t:
        for i in range(5):
            t.append(b"x")
    with pytest.raises(seglog.OffsetOutOfRangeError):
        commit(root, "etl", [OffsetRange("ev", 0, 0, 1000)])
    assert committed_offsets(root, "etl") == {}
    assert commit(root, "etl", [OffsetRange("ev", 0, 0, 5)]) == {("ev", 0): 5}


def test_a_streams_lag_report_below_the_log_start_does_not_fail_the_query(tmp_path, caplog):
    pytest.importorskip("pyspark")
    from seglog import spark as sgs
    from seglog.spark._options import parse_options
    root = str(tmp_path)
    with Topic.open(root, "old", partitions=1, segment_bytes=1024, retention_bytes=1,
                    retention_check_ms=None, file_delete_delay_ms=0) as t:
        for i in range(40):
            t.append(b"y" * 100)
        t.partition(0).enforce_retention()
        start = t.partition(0).start_offset
    reader = sgs.SeglogStreamReader(parse_options(
        {"path": root, "subscribe": "old", "groupId": "g", "failOnDataLoss": "false"}, True))
    with caplog.at_level(logging.WARNING, logger="seglog"):
        reader.commit({"old": {"0": 1}})         # retention went past what it reports
    assert "not told" in caplog.text and committed_offsets(root, "g") == {}
    reader.commit({"old": {"0": start + 1}})
    assert committed_offsets(root, "g") == {("old", 0): start + 1}
    reader.stop()


def test_a_consumer_dropped_without_close_is_seen_gone_at_once(topic):
    import gc
    a = Consumer(topic.root, "g", topics=["ev"], member_id="a", session_timeout_ms=30_000)
    b = Consumer(topic.root, "g", topics=["ev"], member_id="b", session_timeout_ms=30_000)
    try:
        wait_for(lambda: (a.poll(0), b.poll(0), len(owned(a)) == len(owned(b)) == 2)[-1], 10,
                 "the split")
        del a
        gc.collect()
        t0 = time.monotonic()
        wait_for(lambda: (b.poll(timeout_ms=20), len(owned(b)) == 4)[-1], 10,
                 "b to take the dropped member's partitions")
        assert time.monotonic() - t0 < 10
    finally:
        b.close()


def test_commit_offsets_of_nothing_makes_nothing(topic):
    assert commit_offsets(topic.root, "g", {}) == {}
    assert not os.path.exists(os.path.join(topic.root, "__groups"))


def test_each_member_is_judged_by_its_own_session_timeout(topic):
    """Nobody polls ``slow`` (60 s) and ``quick`` (1 s); ``watcher`` (200 ms) polls:
    it expels quick after quick's 1 s, not its own 200 ms, and never slow (an
    injected clock: no sleep)."""
    slow = Consumer(topic.root, "g", topics=["ev"], member_id="slow", session_timeout_ms=60_000)
    quick = Consumer(topic.root, "g", topics=["ev"], member_id="quick", session_timeout_ms=1000)
    watcher = Consumer(topic.root, "g", topics=["ev"], member_id="watcher", session_timeout_ms=200)
    try:
        wait_for(lambda: (watcher.poll(timeout_ms=20),
                          len(describe_group(topic.root, "g")["members"]) == 3)[-1],
                 10, "the three members")
        advance_group_clock(0.8)               # past the watcher's own 200 ms
        for _ in range(5):
            watcher.poll(timeout_ms=0)
        assert set(describe_group(topic.root, "g")["members"]) == {"slow", "quick", "watcher"}
        advance_group_clock(0.4)               # past quick's 1 s
        wait_for(lambda: (watcher.poll(timeout_ms=20),
                          "quick" not in describe_group(topic.root, "g")["members"])[-1],
                 10, "quick to be expelled")
        members = describe_group(topic.root, "g")["members"]
        assert set(members) == {"slow", "watcher"}
        assert {m: v["status"] for m, v in members.items()} == {"slow": "alive", "watcher": "alive"}
    finally:
        for c in (slow, quick, watcher):
            c.close()


FORKER = """
import os, sys, seglog
c = seglog.Consumer(sys.argv[1], "g", topics=["ev"], member_id="forker", session_timeout_ms=30_000)
pid = os.fork()
if pid == 0:                      # a helper process: it blocks, it never uses c
    os.read(0, 1)
    os._exit(0)
print(pid, flush=True)
while True:
    c.poll(timeout_ms=100)
"""


def test_a_forked_child_does_not_keep_a_killed_member_alive(topic):
    survivor = Consumer(topic.root, "g", topics=["ev"], member_id="survivor", session_timeout_ms=30_000)
    forker = subprocess.Popen([sys.executable, "-c", FORKER, topic.root], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = int(_within(30, forker.stdout.readline, "the member's fork"))
        # range: the forker has ev-0 and ev-1, the survivor ev-2 and ev-3
        wait_for(lambda: (survivor.poll(timeout_ms=20), owned(survivor) == {("ev", 2), ("ev", 3)}
                          and "forker" in describe_group(topic.root, "g")["members"])[-1],
                 20, "the forker to join")
        os.kill(forker.pid, signal.SIGKILL)
        forker.wait()
        t0 = time.monotonic()
        # its helper lives on, but the member is seen dead at once, not after 30 s
        wait_for(lambda: (survivor.poll(timeout_ms=20), len(owned(survivor)) == 4)[-1], 10,
                 "the survivor to take the killed member's partitions")
        assert time.monotonic() - t0 < 10
        os.kill(child, 0)                          # the helper is still there
    finally:
        if forker.poll() is None:
            forker.kill()
            forker.wait()
        forker.stdin.close()                      # the helper's read ends
        if child is not None:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        survivor.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_consumer_refuses_use_in_a_forked_child(topic):
    fill(topic, 8)
    with Consumer(topic.root, "g", topics=["ev"], member_id="parent", auto_commit_ms=None) as c:
        got = c.poll(timeout_ms=5000, max_records=4)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = 0
                for op in (lambda: c.poll(0), c.commit, lambda: c.position("ev", 0),
                           lambda: list(iter(c))):
                    try:
                        op()
                        code = 3
                    except seglog.SeglogError as e:
                        if "fork" not in str(e):
                            code = 2
                c.close()                        # touches nothing
                with c:
                    pass
            finally:
                os._exit(code)
        deadline = time.monotonic() + 30
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise AssertionError("the child did not finish in 30 s")
            time.sleep(0.01)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        # the parent's consumer is untouched: still the member, still consuming
        d = describe_group(topic.root, "g")
        assert d["members"]["parent"]["status"] == "alive"
        assert all(v["owner"] == "parent" for v in d["partitions"].values())
        got += drain(c, 8 - len(got))
        c.commit()
        assert len(got) == 8 and sum(c.committed("ev", p) for p in range(4)) == 8


def test_callbacks_describe_ownership_exactly_through_expel_and_rejoin(topic):
    """Every message a member delivers is from a partition its callbacks gave it
    at that moment, through an expulsion and a rejoin that gives the same
    partitions back; at every step the announced set is its assignment."""
    views: dict[str, set] = {"a": set(), "b": set()}
    calls: list = []

    def cbs(name):
        def on_assign(tps):
            assert not tps & views[name], f"{name} assigned what it had: {tps}"
            views[name] |= tps
            calls.append((name, "assign", sorted(tps)))

        def on_revoke(tps):
            assert tps <= views[name], f"{name} revoked what it did not have: {tps}"
            views[name] -= tps
            calls.append((name, "revoke", sorted(tps)))
        return {"on_assign": on_assign, "on_revoke": on_revoke}

    written = [0]

    def step(c, name):
        fill(topic, 4, written[0])
        written[0] += 4
        for m in c.poll(timeout_ms=10):
            assert (m.topic, m.partition) in views[name], \
                f"{name} delivered {m.topic}-{m.partition} outside {views[name]}: {calls}"
        assert views[name] == set(c.assignment()) >= owned(c)

    a = Consumer(topic.root, "g", topics=["ev"], member_id="a", session_timeout_ms=400,
                 auto_commit_ms=None, **cbs("a"))
    b = Consumer(topic.root, "g", topics=["ev"], member_id="b", session_timeout_ms=1500,
                 auto_commit_ms=None, **cbs("b"))
    try:
        wait_for(lambda: (step(a, "a"), step(b, "b"),
                          views["a"] == {("ev", 0), ("ev", 1)} and len(owned(a)) == 2)[-1],
                 10, "a and b to split the partitions")
        advance_group_clock(0.1)         # b's next poll looks at the group: it sees
        b.poll(timeout_ms=0)             # a's heartbeat as it is now...
        advance_group_clock(0.5)         # ...and unchanged past a's 400 ms
        wait_for(lambda: (step(b, "b"), len(owned(b)) == 4)[-1], 10, "b to expel a")
        # a finds itself expelled, loses everything, rejoins and gets 0 and 1 back
        wait_for(lambda: (step(a, "a"), step(b, "b"), len(owned(a)) == 2
                          and len(owned(b)) == 2)[-1], 10, "a to rejoin")
        expelled = calls.index(("a", "revoke", [("ev", 0), ("ev", 1)]))
        assert ("a", "assign", [("ev", 0), ("ev", 1)]) in calls[expelled:]
        assert views["a"] == {("ev", 0), ("ev", 1)} and views["b"] == {("ev", 2), ("ev", 3)}
    finally:
        a.close()
        b.close()
    assert views == {"a": set(), "b": set()}


def test_describe_group_does_not_show_a_killed_member_as_owner(group_topic):
    g = Group(group_topic.root, "ev", session_ms=30_000)
    try:
        m = g.start()
        wait_for(lambda: g.joined(m), 30, "the member to join")
        wait_for(lambda: (lambda d: m in d["members"] and all(
            v["owner"] == m for v in d["partitions"].values()))(
            describe_group(group_topic.root, "g")), 30, "the member to own everything")
        os.kill(g.procs[m].pid, signal.SIGKILL)
        g.procs[m].wait()
        d = describe_group(group_topic.root, "g")       # nobody else has looked yet
        assert all(v["owner"] is None for v in d["partitions"].values())
        assert d["members"][m]["status"] == "dead"
        assert os.path.exists(os.path.join(group_topic.root, "__groups", "g", "members", m))
    finally:
        g.stop_all()


def test_a_consumer_waits_for_a_topic_created_later(topic):
    # the topic may come later, the root may not: a mistyped root is an error
    with pytest.raises(InvalidConfigError, match="not a directory"):
        Consumer(os.path.join(topic.root, "typo"), "g", topics=["later"])
    assert not os.path.exists(os.path.join(topic.root, "typo"))
    fill(topic, 8)
    with Consumer(topic.root, "g", topics=["ev", "later"], auto_commit_ms=None) as c:
        got = drain(c, 8)
        assert {(m.topic, m.partition, m.offset) for m in got} == \
            {("ev", i % 4, i // 4) for i in range(8)}
        assert c.poll(timeout_ms=50) == []
        with Topic.open(topic.root, "later", partitions=3) as later:
            for i in range(30):
                later.append(b"l%d" % i, partition=i % 3)
            got = drain(c, 30)
        assert {(m.topic, m.partition, m.offset) for m in got} == \
            {("later", i % 3, i // 3) for i in range(30)}
        assert set(c.assignment()) == {("ev", p) for p in range(4)} | {("later", p) for p in range(3)}


_LEAF = st.none() | st.booleans() | st.integers(-3, 2**40) | st.floats(allow_nan=False) \
    | st.text(max_size=6) | st.sampled_from(["ev", "fz", "a", "range", "ev/0", "ev/1", ".."])
_KEYS = st.sampled_from(["version", "generation", "members", "assignment", "assignor",
                         "partitions", "owners", "offsets", "topics", "session_timeout_ms",
                         "ev/0", "ev/1", "ev/99", "zz/0", "ev", "a", "fz", "x/y", ""]) | st.text(max_size=4)
# JSON of every shape, biased towards the group files' own keys and values
_JSON = st.recursive(_LEAF, lambda ch: st.lists(ch, max_size=3) | st.dictionaries(_KEYS, ch, max_size=5),
                     max_leaves=14)
_FUZZED = {"fz": 0}


@pytest.fixture(scope="module")
def fuzz_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("fuzz"))
    with Topic.open(root, "ev", partitions=2) as t:
        for i in range(6):
            t.append(b"m%d" % i, partition=i % 2)
    return root


@given(st.sampled_from(["state.json", "owners.json", "offsets.json", "members/x",
                        "members/x (held)"]), _JSON)
@settings(deadline=None, max_examples=150)
def test_group_files_of_any_shape_give_seglog_errors_only(fuzz_root, which, doc):
    """Whatever valid JSON a group file holds, Consumer, describe_group,
    committed_offsets and ``seglog groups`` answer or raise a SeglogError (exit 1 for
    the command), and leave no descriptor or lock behind."""
    import io
    import shutil
    from seglog import cli
    _FUZZED["fz"] += 1
    group = f"f{_FUZZED['fz']}"
    gdir = os.path.join(fuzz_root, "__groups", group)
    os.makedirs(os.path.join(gdir, "members"))
    path = os.path.join(gdir, which.split()[0])
    with open(path, "w") as f:
        json.dump(doc, f)
    held = os.open(path, os.O_RDONLY) if "held" in which else -1
    if held >= 0:
        import fcntl
        fcntl.flock(held, fcntl.LOCK_EX)        # as a live member holds its file
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    try:
        for call in (lambda: describe_group(fuzz_root, group),
                     lambda: committed_offsets(fuzz_root, group)):
            try:
                call()
            except seglog.SeglogError:
                pass
        for args in (["groups", fuzz_root, group], ["groups", fuzz_root, group, "--json"]):
            assert cli.main(args, out=io.StringIO()) in (0, 1)
        try:
            c = Consumer(fuzz_root, group, topics=["ev"], member_id="fz", lock_timeout_ms=2000)
        except seglog.SeglogError:
            pass
        else:
            try:
                c.poll(timeout_ms=0)
                c.commit()
            except seglog.SeglogError:
                pass
            finally:
                try:
                    c.close()
                except seglog.SeglogError:
                    pass
        if fds is not None:
            assert len(os.listdir("/proc/self/fd")) == fds, "a descriptor was left open"
        assert not os.path.exists(os.path.join(gdir, "members", "fz"))
    finally:
        if held >= 0:
            os.close(held)
        shutil.rmtree(gdir)


def test_a_member_put_back_before_it_looked_does_not_read_on_from_its_old_positions(topic):
    """``a`` is expelled while silent; ``b`` takes and commits its partitions, then
    puts it back (its file is alive again) between a's heartbeat and its look at
    the state. a must start again from b's commits, not from where it stopped."""
    fill(topic, 40)
    a = Consumer(topic.root, "g", topics=["ev"], member_id="a", session_timeout_ms=400,
                 auto_commit_ms=None)
    b = Consumer(topic.root, "g", topics=["ev"], member_id="b", session_timeout_ms=1500,
                 auto_commit_ms=None)
    try:
        a_first: list = []
        got_b: list = []
        wait_for(lambda: (a_first.extend(a.poll(timeout_ms=10)), got_b.extend(b.poll(timeout_ms=10)),
                          {m.partition for m in a_first} == {0, 1})[-1], 10, "a and b to split")
        advance_group_clock(0.1)         # b's next poll looks at the group: it sees
        b.poll(timeout_ms=0)             # a's heartbeat as it is now...
        advance_group_clock(0.5)         # ...and unchanged past a's 400 ms
        wait_for(lambda: (got_b.extend(b.poll(timeout_ms=10)), len(owned(b)) == 4)[-1], 10,
                 "b to expel a")
        fill(topic, 8, 40)
        got_b += drain(b, 4)
        b.commit()
        by_b = {p: b.committed("ev", p) for p in (0, 1)}
        # a's next look begins with its heartbeat; b looks in between (sees a alive
        # again) and puts it back before a reads the state
        os.utime(os.path.join(topic.root, "__groups", "g", "members", "a"))
        wait_for(lambda: (b.poll(timeout_ms=10),
                          "a" in describe_group(topic.root, "g")["members"])[-1],
                 10, "b to put a back")
        got_a = []
        wait_for(lambda: (got_a.extend(a.poll(timeout_ms=10)), b.poll(timeout_ms=10),
                          len(owned(a)) == 2 and len(owned(b)) == 2)[-1], 10, "a to be back")
        got_a += drain(a, 1, timeout=1)
        again = {(m.partition, m.offset) for m in got_a} & {(m.partition, m.offset) for m in got_b}
        assert not again, f"a delivered again what b had committed: {sorted(again)[:5]}"
        assert all(m.offset >= by_b[m.partition] for m in got_a if m.partition in (0, 1))
    finally:
        a.close()
        b.close()


def test_iteration_raises_when_a_partitions_log_is_removed_instead_of_ending(tmp_path):
    # `for m in consumer` ends only when the consumer is closed; a partition's log
    # directory removed under it while its topic stays recorded (not a deletion:
    # test_group_topic_lifecycle.py) is an error the loop must raise a look later,
    # not a quiet end that looks like the end of the stream
    root = str(tmp_path)
    with Topic.open(root, "ev", partitions=2) as t:
        for i in range(10):
            t.append(b"m%d" % i, partition=i % 2)
    # raised once the log has stayed gone for the session timeout (the other half of a
    # deletion may come that late)
    c = Consumer(root, "g", topics=["ev"], auto_commit_ms=None, session_timeout_ms=1000)
    watchdog = threading.Timer(30, c.close)      # a loop that never raises ends here
    watchdog.start()
    seen = []
    try:
        with pytest.raises(seglog.LogClosedError, match="gone"):
            for m in c:
                seen.append(m)
                if len(seen) == 10:
                    shutil.rmtree(os.path.join(root, "ev-1"))
        assert not c.closed
    finally:
        watchdog.cancel()
        c.close()
    assert {(m.partition, m.offset) for m in seen} == {(i % 2, i // 2) for i in range(10)}


_SPECIAL_FILE_PROBE = r"""
import sys, seglog
from seglog import Consumer, describe_group
from seglog.consumer_group import commit_offsets, committed_offsets
root = sys.argv[1]
calls = {"describe_group": lambda: describe_group(root, "g"),
         "committed_offsets": lambda: committed_offsets(root, "g"),
         "commit_offsets": lambda: commit_offsets(root, "g", {("ev", 0): 1},
                                                  lock_timeout_ms=1000),
         "Consumer": lambda: Consumer(root, "g", topics=["ev"], member_id="late",
                                      lock_timeout_ms=1000).close()}
for name, call in calls.items():
    try:
        call()
        print(name, "ok", flush=True)
    except seglog.SeglogError as e:
        print(name, "SeglogError", e, flush=True)
"""


@pytest.mark.parametrize("which, kind", [
    ("state.json", "fifo"), ("offsets.json", "fifo"), ("owners.json", "fifo"),
    ("group.lock", "fifo"), ("members/zz", "fifo"), ("members/zz", "dir")])
def test_a_group_file_that_is_a_fifo_or_a_directory_is_refused_without_a_hang(tmp_path, which,
                                                                               kind):
    """A FIFO put where a group file belongs blocked the open for ever (with
    ``group.lock`` held by commit_offsets, freezing the group's joins and commits
    too), and a directory among the member files raised IsADirectoryError: each
    call answers, or names the file in a SeglogError, at once."""
    root = str(tmp_path)
    with Topic.open(root, "ev", partitions=2) as t:
        t.append(b"x", partition=0)
    with Consumer(root, "g", topics=["ev"], member_id="m1") as c:
        c.poll(timeout_ms=200)
        c.commit()
    path = os.path.join(root, "__groups", "g", which)
    if os.path.exists(path):
        os.remove(path)
    os.mkfifo(path) if kind == "fifo" else os.mkdir(path)
    p = subprocess.run([sys.executable, "-c", _SPECIAL_FILE_PROBE, root], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0, p.stderr           # no other exception
    lines = p.stdout.splitlines()
    assert [x.split()[0] for x in lines] == ["describe_group", "committed_offsets",
                                             "commit_offsets", "Consumer"]
    for line in lines:
        assert " ok" in line or ("not a regular file" in line and which in line), line
    assert "Consumer SeglogError" in p.stdout    # joining reads every group file


def test_a_partition_that_is_not_an_int_is_a_type_error(topic):
    # committed("ev", "0") answered None (nothing committed) and seek("ev", True, n)
    # moved partition 1: a partition is an int, as Topic.partition says
    fill(topic, 8)
    with Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=None) as c:
        drain(c, 8)
        c.commit()
        assert c.committed("ev", 1) == 2
        for bad in ("1", True, 1.0, None):
            for call in (lambda: c.committed("ev", bad), lambda: c.position("ev", bad),
                         lambda: c.seek("ev", bad, 0)):
                with pytest.raises(TypeError, match="partition must be an int"):
                    call()
        assert c.position("ev", 1) == 2 and c.committed("ev", 1) == 2


def test_a_deleted_topic_leaves_the_assignment(tmp_path):
    """A subscribed topic deleted (its record and its logs removed) starts a new
    generation without it, as one created later starts one with it: its partitions
    are revoked, and the member goes on with the others instead of failing every
    other poll on the vanished logs for ever."""
    root = str(tmp_path)
    for name in ("a", "b"):
        with Topic.open(root, name, partitions=1) as t:
            t.append(b"%s0" % name.encode())
    revoked: list = []
    with Consumer(root, "g", topics=["a", "b"], member_id="m", auto_commit_ms=None,
                  on_revoke=lambda tps: revoked.append(tps)) as c:
        assert {(m.topic, m.offset) for m in drain(c, 2)} == {("a", 0), ("b", 0)}
        generation = c.generation
        shutil.rmtree(os.path.join(root, "b-0"))
        os.remove(os.path.join(root, "__topics", "b.json"))

        def moved_on():
            try:
                c.poll(timeout_ms=20)
            except seglog.LogClosedError:     # b's log, until the group sees b gone
                pass
            return ("b", 0) not in c.assignment()
        wait_for(moved_on, 10, "the deleted topic to leave the assignment")
        assert revoked == [{("b", 0)}] and c.assignment() == {("a", 0)}
        assert c.generation > generation
        with Topic.open(root, "a") as t:
            t.append(b"a1")
        assert [(m.topic, m.offset) for m in drain(c, 1)] == [("a", 1)]   # no error now


# -- the edges an adversary found: clocks, assignors, leftovers, roots --------------------

def _members_dir(root: str) -> str:
    return os.path.join(root, "__groups", "g", "members")


def _b_sees_a_silent(b: Consumer, seconds: float) -> None:
    """b looks at the group now (it sees a's heartbeat as it is), then the group
    clock moves ``seconds`` on: a's heartbeat has stayed as b saw it that long."""
    advance_group_clock(0.1)
    b.poll(timeout_ms=0)
    advance_group_clock(seconds)


def test_a_stopped_member_is_expelled_after_the_wall_clock_steps_back(topic):
    """a stops polling; its last heartbeat was written an hour ahead of the clock
    the others read now (the wall clock stepped back since). Its age was negative,
    counted alive for ever, and its partitions read by nobody: staleness is an
    unchanged heartbeat over a's session timeout of the observer's own clock."""
    fill(topic, 8)
    a = Consumer(topic.root, "g", topics=["ev"], member_id="a", session_timeout_ms=300,
                 auto_commit_ms=None)
    b = Consumer(topic.root, "g", topics=["ev"], member_id="b", auto_commit_ms=None)
    try:
        wait_for(lambda: (a.poll(0), b.poll(0), len(owned(a)) == len(owned(b)) == 2)[-1], 10,
                 "the split")
        ahead = time.time() + 3600
        os.utime(os.path.join(_members_dir(topic.root), "a"), (ahead, ahead))
        _b_sees_a_silent(b, 0.5)
        wait_for(lambda: (b.poll(timeout_ms=20), len(owned(b)) == 4)[-1], 10, "b to expel a")
        assert set(describe_group(topic.root, "g")["members"]) == {"b"}
    finally:
        a.close()
        b.close()


def test_a_member_file_changed_in_place_is_read_again(topic):
    """Member files were parsed once per inode: a file with the same inode and
    other content (a member id reused where the file system recycles inode numbers,
    as ext4 does) was judged by the old content's session timeout for ever."""
    a = Consumer(topic.root, "g", topics=["ev"], member_id="a", session_timeout_ms=60_000,
                 auto_commit_ms=None)
    b = Consumer(topic.root, "g", topics=["ev"], member_id="b", auto_commit_ms=None)
    try:
        wait_for(lambda: (a.poll(0), b.poll(0), len(owned(a)) == len(owned(b)) == 2)[-1], 10,
                 "the split")
        with open(os.path.join(_members_dir(topic.root), "a"), "r+") as f:
            doc = json.load(f)
            doc["session_timeout_ms"] = 300
            f.seek(0)
            f.truncate()
            f.write(json.dumps(doc))
        _b_sees_a_silent(b, 0.5)
        wait_for(lambda: (b.poll(timeout_ms=20), len(owned(b)) == 4)[-1], 10,
                 "b to judge a by its new timeout")
    finally:
        a.close()
        b.close()


def test_a_member_asking_for_another_assignor_is_refused_and_leaves_nothing(topic):
    """Members passing different assignors were silently overruled by the group's."""
    a = Consumer(topic.root, "g", topics=["ev"], member_id="a", assignor="range")
    try:
        with pytest.raises(InvalidConfigError, match="assignor"):
            Consumer(topic.root, "g", topics=["ev"], member_id="b", assignor="roundrobin")
        assert os.listdir(_members_dir(topic.root)) == ["a"]
        d = describe_group(topic.root, "g")
        assert set(d["members"]) == {"a"} and d["assignor"] == "range"
    finally:
        a.close()
    # nobody left: the next member's assignor is the group's
    with Consumer(topic.root, "g", topics=["ev"], member_id="c", assignor="sticky"):
        assert describe_group(topic.root, "g")["assignor"] == "sticky"


def test_a_killed_joiners_half_made_member_file_is_removed(topic):
    """A joiner killed between writing its member file and renaming it into place
    left ``.join-<id>`` for ever."""
    with Consumer(topic.root, "g", topics=["ev"], member_id="a"):
        pass
    leftover = os.path.join(_members_dir(topic.root), ".join-killed")
    with open(leftover, "w") as f:
        f.write('{"topics": ["ev"]')
    with Consumer(topic.root, "g", topics=["ev"], member_id="b"):
        assert not os.path.exists(leftover)
        assert os.listdir(_members_dir(topic.root)) == ["b"]


def _tree(path: str) -> dict[str, tuple[bool, int, int]]:
    """Every file and directory under ``path``: (is a directory, size, mtime)."""
    out = {}
    for d, dirs, files in os.walk(path):
        for n in dirs + files:
            p = os.path.join(d, n)
            st_ = os.stat(p)
            out[os.path.relpath(p, path)] = (os.path.isdir(p), st_.st_size, st_.st_mtime_ns)
    return out


def test_a_consumer_on_someone_elses_directory_writes_nothing(tmp_path):
    """``Consumer(root)`` on a directory holding someone else's files made
    ``__groups/`` beside them: a root must be empty or already seglog's
    (``NotALogError``, nothing written), as ``Log.open`` refuses such a directory."""
    root = tmp_path / "photos"
    root.mkdir()
    (root / "cat.jpg").write_bytes(b"\xff\xd8 not a log")
    log_dir = tmp_path / "a-log"
    Log.open(str(log_dir)).close()
    for where in (root, log_dir):
        before = _tree(str(where))
        for call in (lambda: Consumer(where, "g", topics=["ev"], lock_timeout_ms=100),
                     lambda: Consumer(where, "g", pattern="ev.*", lock_timeout_ms=100),
                     lambda: describe_group(where, "g"),
                     lambda: commit_offsets(where, "g", {("ev", 0): 1}),
                     lambda: committed_offsets(where, "g")):
            with pytest.raises(seglog.NotALogError):
                call()
        assert _tree(str(where)) == before, f"something was written in {where}"
    # an empty directory is fine (topics may come later), and then it is seglog's
    empty = tmp_path / "empty"
    empty.mkdir()
    with Consumer(empty, "g", topics=["ev"]) as c:
        assert c.assignment() == frozenset()
    assert sorted(os.listdir(empty)) == ["__groups"]


def test_describe_group_writes_nothing(group_topic):
    fill(group_topic, 12)
    with Consumer(group_topic.root, "g", topics=["ev"], auto_commit_ms=None) as c:
        drain(c, 12)
        c.commit()
        before = _tree(group_topic.root)
        d = describe_group(group_topic.root, "g")
        assert _tree(group_topic.root) == before
    assert d["partitions"][("ev", 0)]["committed"] == 2


def test_describe_group_keys_partitions_as_commit_and_assignment_do(topic):
    """``describe_group(...)["partitions"]`` was keyed ``"ev-0"`` while ``commit()``,
    ``assignment()`` and the members' assignment use ``("ev", 0)``; the CLI's JSON
    keeps its strings."""
    fill(topic, 8)
    with Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=None) as c:
        drain(c, 8)
        c.commit({("ev", 0): 1})
        d = describe_group(topic.root, "g")
        assert set(d["partitions"]) == c.assignment() == {("ev", p) for p in range(4)}
        assert set(map(tuple, d["members"][c.member_id]["assignment"])) == c.assignment()
        assert d["partitions"][("ev", 0)]["committed"] == c.committed("ev", 0) == 1
        assert "ev-0" in d._repr_html_()
    p = subprocess.run([sys.executable, "-m", "seglog", "groups", topic.root, "g", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert set(json.loads(p.stdout)["partitions"]) == {f"ev-{p}" for p in range(4)}

"""Growing a topic: ``Topic.open`` with more partitions than recorded adds partitions
(Kafka's ``kafka-topics --alter --partitions``); fewer is refused. A growth killed at
each of its steps leaves the old topic or the new one; two processes growing at once
agree; a consumer group's member processes take the new partitions at the next
rebalance; readers see the new count when they reopen."""

from __future__ import annotations

import hashlib
import io
import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

import seglog
import seglog.cli
from seglog import InvalidConfigError, LogLockedError, Record, Topic, describe_group
from seglog.topic import partition_for_key, read_partition_count

from helpers import wait_for

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the shared helpers
MEMBER = os.path.join(TESTS, "group_member.py")
DEADLINE = 30.0          # seconds any one wait may take before the test fails


# -- helpers -----------------------------------------------------------------------------

def read_line(proc: subprocess.Popen, what: str) -> str:
    """The child's next stdout line, within DEADLINE (its stdout unbuffered)."""
    buf = b""
    end = time.monotonic() + DEADLINE
    while not buf.endswith(b"\n"):
        left = end - time.monotonic()
        if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
            raise AssertionError(f"waited {DEADLINE} s for {what}")
        chunk = os.read(proc.stdout.fileno(), 1)
        if not chunk:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise AssertionError(f"the child ended before {what}: {buf!r} {err}")
        buf += chunk
    return buf.decode().strip()


def gone(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def tree(root: str) -> dict[str, tuple]:
    """Every file and directory under ``root``: kind, size, mtime and a hash of the
    content (of a sparse file's data extents: a killed writer leaves its files at
    their reserved size)."""
    out: dict[str, tuple] = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            path = os.path.join(d, n)
            st = os.lstat(path)
            out[os.path.relpath(path, root)] = (st.st_mode, st.st_size, st.st_mtime_ns,
                                                _digest(path) if n in files else None)
    return out


def _digest(path: str) -> str:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    try:
        pos, size = 0, os.fstat(fd).st_size
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:          # ENXIO: only a hole is left
                break
            end = os.lseek(fd, start, os.SEEK_HOLE)
            h.update(b"%d:" % start + os.pread(fd, end - start, start))
            pos = end
    finally:
        os.close(fd)
    return h.hexdigest()


def contents(t: Topic) -> dict[int, list[tuple[int, bytes | None, bytes | None]]]:
    return {p: [(m.offset, m.key, m.value) for m in t.partition(p).iter()]
            for p in range(t.num_partitions)}


def partition_dirs(root: str, name: str = "t") -> set[str]:
    return {n for n in os.listdir(root) if n.rpartition("-")[0] == name}


def make_topic(root: str, n: int = 3, records: int = 60, **config) -> dict:
    with Topic.open(root, "t", partitions=n, **config) as t:
        t.append_batch([Record(b"v%d" % i, key=b"k%d" % i) for i in range(records)])
        return contents(t)


# -- growth in one process ---------------------------------------------------------------

def test_growth_adds_partitions_keeps_the_data_and_keys_records_by_the_new_count(tmp_path):
    root = str(tmp_path)
    before = make_topic(root, 3, segment_bytes=1 << 20, retention_ms=3_600_000)
    with Topic.open(root, "t", partitions=5) as t:
        assert t.num_partitions == 5 and read_partition_count(root, "t") == 5
        assert partition_dirs(root) == {f"t-{p}" for p in range(5)}
        got = contents(t)
        assert {p: got[p] for p in range(3)} == before          # old data intact
        assert got[3] == got[4] == []
        # the new partitions take the topic's settings (partition 0's)
        for p in (3, 4):
            cfg = t.partition(p).config
            assert (cfg.segment_bytes, cfg.retention_ms) == (1 << 20, 3_600_000)
        added: dict[int, list] = {p: [] for p in range(5)}
        for i in range(200):
            key = b"user-%d" % i
            p, off = t.append(b"x%d" % i, key=key)
            assert p == partition_for_key(key, 5)
            added[p].append((off, key, b"x%d" % i))
        assert all(added.values())                                # new ones used too
        placed = t.append_batch([Record(b"y", key=b"user-1")])
        p = partition_for_key(b"user-1", 5)
        assert list(placed) == [p]
        added[p].append((placed[p].start, b"user-1", b"y"))
    with Topic.open(root, "t") as t:                             # the count is on disk
        assert t.num_partitions == 5
        assert contents(t) == {p: before.get(p, []) + added[p] for p in range(5)}
    with Topic.open(root, "t", partitions=5) as t:              # the same count: no change
        assert t.num_partitions == 5


def test_fewer_partitions_or_a_readonly_growth_is_refused_and_changes_nothing(tmp_path):
    root = str(tmp_path)
    make_topic(root, 3)
    snap = tree(root)
    for kwargs in ({}, {"multi_writer": True}, {"readonly": True}):
        with pytest.raises(InvalidConfigError, match="has 3 partitions, not 2"):
            Topic.open(root, "t", partitions=2, **kwargs)
    with pytest.raises(InvalidConfigError, match="readonly open never grows"):
        Topic.open(root, "t", partitions=4, readonly=True)
    assert tree(root) == snap


def test_a_growth_while_another_writer_holds_the_topic_is_refused_and_creates_nothing(tmp_path):
    root = str(tmp_path)
    make_topic(root, 3)
    with Topic.open(root, "t") as w:
        with pytest.raises(LogLockedError):
            Topic.open(root, "t", partitions=5)
        with pytest.raises(LogLockedError):
            Topic.open(root, "t", partitions=5, multi_writer=True)
        assert partition_dirs(root) == {"t-0", "t-1", "t-2"}
        assert read_partition_count(root, "t") == 3 and w.num_partitions == 3


def test_a_directory_with_messages_where_a_new_partition_goes_is_refused(tmp_path):
    root = str(tmp_path)
    make_topic(root, 2)
    with seglog.Log.open(os.path.join(root, "t-3")) as other:    # someone else's log
        other.append(b"not the topic's")
    snap = tree(root)
    with pytest.raises(InvalidConfigError, match="holds messages"):
        Topic.open(root, "t", partitions=5)
    assert tree(root) == snap             # not even t-2 was made
    os.makedirs(os.path.join(root, "t-2"))
    with open(os.path.join(root, "t-2", "notes.txt"), "w") as f:
        f.write("mine")
    snap = tree(root)
    with pytest.raises(seglog.NotALogError):
        Topic.open(root, "t", partitions=3)
    assert tree(root) == snap


def test_a_readonly_topic_keeps_its_count_and_sees_the_new_one_when_reopened(tmp_path):
    root = str(tmp_path)
    make_topic(root, 2)
    with Topic.open(root, "t", readonly=True) as r:
        with Topic.open(root, "t", partitions=4) as w:
            w.append(b"new", partition=3)
        assert r.num_partitions == 2 and set(r.end_offsets()) == {0, 1}
    with Topic.open(root, "t", readonly=True) as r:
        assert r.num_partitions == 4
        assert [m.value for m in r.partition(3).iter()] == [b"new"]


# -- a growth killed at each of its steps -----------------------------------------------

# A child that grows topic "t" from OLD to NEW partitions, stopping at POINT: it says
# so on stdout and waits there (for ever) until the test SIGKILLs it. The points are
# met by wrapping what topic.py calls (in this child only).
GROWER = r"""
import os, sys
import seglog, seglog._storage.marker as marker, seglog.topic as T
root, point, old, new = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def stop():
    sys.stdout.write(point + "\n"); sys.stdout.flush()
    sys.stdin.read()              # killed here
    os._exit(3)

real_open, real_write, real_marker, real_rename = T.Log.open, T.atomic_write, marker.write, os.rename

class Shim:
    @staticmethod
    def open(path, **kw):
        p = int(path.rpartition("-")[2])
        writer = not kw.get("readonly")
        if point == "before-new" and writer and p == old:
            stop()
        log = real_open(path, **kw)
        if point == "one-new" and writer and p == old:
            stop()
        return log

def marker_write(directory, *a, **kw):
    real_marker(directory, *a, **kw)
    if point == "inside-new" and directory.endswith("-%d" % (old + 1)):
        stop()        # the partition's settings written, its segment not yet

def atomic_write(path, data):
    if point == "before-record":
        stop()
    real_write(path, data)
    if point == "recorded":
        stop()

def rename(src, dst, *a, **kw):
    if point == "temp-written" and dst.endswith(os.path.join("__topics", "t.json")):
        stop()
    return real_rename(src, dst, *a, **kw)

T.Log, T.atomic_write, marker.write, os.rename = Shim, atomic_write, marker_write, rename
seglog.Topic.open(root, "t", partitions=new)
print("finished", flush=True)
"""

# point -> (the recorded count after the kill, the new partitions' directories there)
CRASH_POINTS = {
    "before-new": (3, set()),
    "one-new": (3, {3}),
    "inside-new": (3, {3, 4}),
    "before-record": (3, {3, 4, 5}),
    "temp-written": (3, {3, 4, 5}),
    "recorded": (6, {3, 4, 5}),
}


def kill_growth_at(root: str, point: str, old: int, new: int) -> None:
    proc = subprocess.Popen([sys.executable, "-c", GROWER, root, point, str(old), str(new)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0)
    try:
        assert read_line(proc, f"the growth to reach {point}") == point
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=DEADLINE)
    finally:
        gone(proc)


@pytest.mark.parametrize("point", list(CRASH_POINTS))
def test_a_growth_killed_at_each_step_leaves_the_old_topic_or_the_new_one(tmp_path, point):
    root = str(tmp_path)
    before = make_topic(root, 3)
    kill_growth_at(root, point, 3, 6)
    count, extra = CRASH_POINTS[point]
    assert read_partition_count(root, "t") == count
    assert partition_dirs(root) == {f"t-{p}" for p in set(range(3)) | extra}

    # readers and writers that do not grow see the recorded topic, its data intact,
    # and leave a dead growth's directories as they are
    with Topic.open(root, "t", readonly=True) as r:
        assert r.num_partitions == count
        assert {p: contents(r)[p] for p in range(3)} == before
    leftovers = {n: s for n, s in tree(root).items() if n.split(os.sep)[0] in
                 {f"t-{p}" for p in range(count, 6)}}
    with Topic.open(root, "t") as t:
        assert t.num_partitions == count
        assert {p: contents(t)[p] for p in range(3)} == before
    assert {n: s for n, s in tree(root).items() if n in leftovers} == leftovers
    if count == 3:
        with pytest.raises(InvalidConfigError, match="readonly open never grows"):
            Topic.open(root, "t", partitions=6, readonly=True)
        # a smaller growth takes what it needs of the leftovers and leaves the rest
        with Topic.open(root, "t", partitions=4) as t:
            assert t.num_partitions == 4 and t.end_offsets()[3] == 0
        assert read_partition_count(root, "t") == 4
        assert {n: s for n, s in tree(root).items() if n in leftovers
                and not n.startswith("t-3")} == \
            {n: s for n, s in leftovers.items() if not n.startswith("t-3")}
    else:
        with pytest.raises(InvalidConfigError, match="has 6 partitions, not 4"):
            Topic.open(root, "t", partitions=4)

    # an open that asks for the count finishes the growth
    with Topic.open(root, "t", partitions=6) as t:
        assert t.num_partitions == 6 and read_partition_count(root, "t") == 6
        got = contents(t)
        assert {p: got[p] for p in range(3)} == before
        assert got[3] == got[4] == got[5] == []
        for i in range(60):
            key = b"after-%d" % i
            p, off = t.append(b"a", key=key)
            assert p == partition_for_key(key, 6)
            assert t.partition(p).read(off).values() == [b"a"]
    assert partition_dirs(root) == {f"t-{p}" for p in range(6)}
    with Topic.open(root, "t", readonly=True) as r:
        assert r.num_partitions == 6 and sum(r.end_offsets().values()) == 120


def test_a_growth_killed_inside_the_records_write_leaves_no_phantom_topic(tmp_path):
    root = str(tmp_path)
    make_topic(root, 3)
    kill_growth_at(root, "temp-written", 3, 6)
    out = io.StringIO()
    assert seglog.cli.main(["verify", root], out=out) == 0, out.getvalue()


# -- two processes growing at once -------------------------------------------------------

RACER = r"""
import json, os, sys
import seglog
root, fd, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print("waiting", flush=True)
os.read(fd, 1)                   # the barrier: EOF once the test closes its end
try:
    t = seglog.Topic.open(root, "t", partitions=n, multi_writer=True)
except seglog.InvalidConfigError as e:
    print(json.dumps({"refused": str(e)}), flush=True)
    sys.exit(0)
with t:
    key = b"racer-%d" % os.getpid()
    p, off = t.append(b"grown by %d" % os.getpid(), key=key)
    print(json.dumps({"partitions": t.num_partitions, "key": key.decode(), "placed": [p, off]}),
          flush=True)
"""


def race(root: str, counts: list[int]) -> list[dict]:
    r, w = os.pipe()
    procs = [subprocess.Popen([sys.executable, "-c", RACER, root, str(r), str(n)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(r,),
                              bufsize=0) for n in counts]
    os.close(r)
    try:
        for p in procs:
            assert read_line(p, "its barrier") == "waiting"
        os.close(w)                 # both go at once
        w = -1
        out = []
        for p in procs:
            stdout, err = p.communicate(timeout=DEADLINE)
            assert p.returncode == 0, err.decode()
            out.append(json.loads(stdout))
        return out
    finally:
        if w >= 0:
            os.close(w)
        for p in procs:
            gone(p)


def test_two_processes_growing_at_once_agree_and_an_open_writer_keeps_its_count(tmp_path):
    root = str(tmp_path)
    before = make_topic(root, 3)
    with Topic.open(root, "t", multi_writer=True) as mine:      # a writer open throughout
        results = race(root, [6, 6])
        assert [x["partitions"] for x in results] == [6, 6]
        assert read_partition_count(root, "t") == 6
        assert partition_dirs(root) == {f"t-{p}" for p in range(6)}
        # this process's Topic keeps 3 partitions (and places keys by 3) until reopened
        assert mine.num_partitions == 3
        assert mine.append(b"old view", key=b"racer-x")[0] == partition_for_key(b"racer-x", 3)
    with Topic.open(root, "t", readonly=True) as r:
        assert r.num_partitions == 6
        assert {p: contents(r)[p][:len(before[p])] for p in range(3)} == before
        for x in results:
            p, off = x["placed"]
            assert p == partition_for_key(x["key"].encode(), 6)
            assert r.partition(p).read(off).values()[0].startswith(b"grown by ")

    # growing to different counts at once: the larger count wins; the smaller growth
    # either came first (and was grown past) or came second and was refused as fewer
    results = race(root, [8, 7])
    assert read_partition_count(root, "t") == 8
    assert partition_dirs(root) == {f"t-{p}" for p in range(8)}
    assert results[0]["partitions"] == 8
    assert results[1].get("partitions") == 7 or \
        "has 8 partitions, not 7" in results[1]["refused"]


# -- a consumer group takes the new partitions -------------------------------------------

def test_member_processes_consume_the_new_partitions_after_a_growth(tmp_path):
    root = str(tmp_path / "root")
    trace = str(tmp_path / "trace.jsonl")
    with Topic.open(root, "ev", partitions=3) as t:
        for i in range(90):
            t.append(b"a%d" % i, key=b"k%d" % i)
        written = {(p, o) for p, end in t.end_offsets().items() for o in range(end)}

    def events() -> list[list]:
        try:
            with open(trace) as f:
                return [json.loads(line) for line in f if line.endswith("\n")]
        except FileNotFoundError:
            return []

    def delivered() -> set[tuple[int, int]]:
        return {(e[4], e[5]) for e in events() if e[0] == "y"}

    procs = [subprocess.Popen([sys.executable, MEMBER, root, "g", "ev", m, trace, "5000"])
             for m in ("m0", "m1")]
    try:
        wait_for(lambda: delivered() >= written, DEADLINE, "the first records")
        wait_for(lambda: len(describe_group(root, "g")["members"]) == 2, DEADLINE,
                 "both members in")
        gen_before = describe_group(root, "g")["generation"]
        with Topic.open(root, "ev", partitions=5) as t:
            for i in range(90, 290):
                t.append(b"b%d" % i, key=b"k%d" % i)
            t.append(b"c", partition=3)
            t.append(b"c", partition=4)
            ends = t.end_offsets()
        written = {(p, o) for p, end in ends.items() for o in range(end)}
        assert {p for p, _ in written} == set(range(5))
        wait_for(lambda: delivered() >= written, DEADLINE, "every record, the new partitions' too")

        def settled():
            d = describe_group(root, "g")
            parts = d["partitions"]
            return d if set(parts) == {("ev", p) for p in range(5)} and all(
                v["owner"] and v["committed"] == ends[p] for (_, p), v in parts.items()) else None
        d = wait_for(settled, DEADLINE, "all five partitions owned and committed to their ends")
        assert d["generation"] > gen_before
        owned = sorted(tuple(tp) for m in d["members"].values() for tp in m["assignment"])
        assert owned == [("ev", p) for p in range(5)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                gone(p)
    assert [p.returncode for p in procs] == [0, 0]
    assert delivered() == written                 # nothing lost, nothing made up
    users: dict[tuple[int, int], set[str]] = {}
    for e in events():
        if e[0] == "got":
            for p, _ in e[3]:
                users.setdefault((e[2], p), set()).add(e[1])
            if any(p >= 3 for p, _ in e[3]):
                assert e[2] > gen_before, "a new partition consumed before it was assigned"
    assert not {k: v for k, v in users.items() if len(v) > 1}, \
        "a partition consumed by two members of one generation"

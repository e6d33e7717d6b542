"""A streaming query writing a seglog topic (tests/sink_child.py, in a process group
of its own: driver, JVM, Python workers), SIGKILLed at random instants (inside
task writes, inside the sink's commit, between), then run again from its
checkpoint: the topic ends with every input row exactly once, a reader in another
process running all the while never sees a row twice, and nothing staged is left.

Few rounds here; SEGLOG_TORTURE=10 (scripts/torture) runs ten times as many."""

from __future__ import annotations

import collections
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("pyspark")

from seglog import Record, Topic  # noqa: E402
from seglog.spark import check_java  # noqa: E402
from seglog.spark._publish import COMMITTED, LOCK, MANIFEST, WriteDir  # noqa: E402

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the shared helpers
SCALE = int(os.environ.get("SEGLOG_TORTURE", "1"))

READER = r"""
import os, sys, time
from seglog import Log, Topic
root, stop = sys.argv[1], sys.argv[2]
seen, pos, checks = set(), {}, 0
while not os.path.exists(stop):
    try:
        t = Topic.open(root, "out", readonly=True)
    except Exception:
        time.sleep(0.05)          # not created yet
        continue
    with t:
        for p in range(t.num_partitions):
            log = t.partition(p)
            for m in log.iter(pos.get(p, 0)):
                if m.value in seen:
                    sys.exit(f"a reader saw {m.value[:20]!r} twice (partition {p}, offset {m.offset})")
                seen.add(m.value)
                pos[p] = m.offset + 1
    checks += 1
    time.sleep(0.01)
print(checks, len(seen))
"""


def seed_for(name: str) -> int:
    seed = int(os.environ.get("SEGLOG_SEED", "0")) or random.randrange(1 << 30)
    print(f"\n{name}: seed {seed} (rerun with SEGLOG_SEED={seed})")
    return seed


class Child:
    """The query process (tests/sink_child.py), in a process group of its own; its
    output lines read by a thread, so that waiting for one has a deadline."""

    def __init__(self, root: str, ckpt: str, mode: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(TESTS, "sink_child.py"), root, ckpt, mode],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, cwd=TESTS)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.err: list[bytes] = []
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.decode().strip())
        self.lines.put(None)

    def wait_for(self, want: str, timeout: float) -> str:
        """The first line the query prints that starts with ``want``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"the query said no {want!r} within {timeout} s:\n"
                                     f"{b''.join(self.err).decode()[-3000:]}") from None
            if line is None:
                raise AssertionError(f"the query process ended before saying {want!r}:\n"
                                     f"{b''.join(self.err).decode()[-3000:]}")
            if line.startswith(want):
                return line

    def kill(self) -> None:
        """SIGKILL the query's whole process group (driver, JVM, Python workers), and
        wait until none of it is left."""
        kill_group(self.proc)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the query's whole process group (driver, JVM, Python workers), and wait
    until none of it is left."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=120)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
    raise AssertionError("processes of the killed query outlived it")


def wait_for_manifest(root: str, timeout: float) -> None:
    """Until a commit of the query has written its manifest (it is publishing)."""
    top = os.path.join(root, "__spark", "queries")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for q in os.listdir(top) if os.path.isdir(top) else ():
            if os.path.exists(os.path.join(top, q, MANIFEST)):
                return
        time.sleep(0.001)
    raise AssertionError(f"no commit began within {timeout} s")


def committed(root: str) -> int | None:
    """The last micro-batch the sink published (None: none yet)."""
    top = os.path.join(root, "__spark", "queries")
    for q in os.listdir(top) if os.path.isdir(top) else ():
        return WriteDir(root, "query", q).committed()
    return None


def what_was_left(root: str) -> str:
    """What a kill left under the sink's directory: a commit in progress (its
    manifest), rows staged and not committed, or neither."""
    files = [f for _, _, fs in os.walk(os.path.join(root, "__spark")) for f in fs
             if f not in (COMMITTED, LOCK)]
    if MANIFEST in files:
        return "inside a commit"
    return "with rows staged" if files else "between"


def test_a_stream_killed_at_random_instants_writes_every_row_exactly_once(tmp_path):
    """Rows keep arriving in "in" (a writer in this process) and another writer
    (multi_writer) appends to "out" beside the sink; the query is killed at random
    instants of its micro-batches, round after round, then run to the end."""
    check_java()
    seed = seed_for("sink kills")
    rnd = random.Random(seed)
    root, ckpt = str(tmp_path / "root"), str(tmp_path / "ckpt")
    Topic.open(root, "in", partitions=3).close()
    Topic.open(root, "out", partitions=3).close()
    stop, done = str(tmp_path / "stop"), threading.Event()
    values: list[bytes] = []
    others: list[bytes] = []

    def feed() -> None:
        feeder = random.Random(seed + 1)
        with Topic.open(root, "in") as t, Topic.open(root, "out", multi_writer=True) as o:
            while not done.is_set():
                first = len(values)
                batch = [b"r%07d." % i + b"x" * feeder.randrange(100, 2000)
                         for i in range(first, first + 40)]
                t.append_batch([Record(v, key=b"k%d" % (i % 97) if i % 2 else None)
                                for i, v in enumerate(batch, first)])
                values.extend(batch)
                if feeder.random() < 0.2:
                    other = b"other%d" % len(others)
                    o.append(other, partition=feeder.randrange(3))
                    others.append(other)
                done.wait(0.2)
    feeding = threading.Thread(target=feed)
    reader = subprocess.Popen([sys.executable, "-c", READER, root, stop],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    left: collections.Counter[str] = collections.Counter()
    feeding.start()
    try:
        for r in range(2 * SCALE):
            q = Child(root, ckpt, "run")
            how = (2, 0, 1)[r % 3]          # in a commit first: CI runs two rounds
            try:
                q.wait_for("started", 300)
                q.wait_for("batch", 300)       # the first is slow: Python workers start
                if how == 0:                     # anywhere
                    time.sleep(rnd.uniform(0, 3.0))
                elif how == 1:                   # near the end of the next micro-batch
                    ms = int(q.wait_for("batch", 300).split()[2])
                    time.sleep(rnd.uniform(0.5, 1.2) * ms / 1000)
                else:                            # once a commit has written its manifest
                    wait_for_manifest(root, 60)
                    time.sleep(rnd.uniform(0, 0.003))
            finally:
                q.kill()
            state = what_was_left(root)
            left[state] += 1
            print(f"round {r}: killed {['anywhere', 'late in a micro-batch', 'in a commit'][how]}"
                  f", left {state}", flush=True)
        done.set()
        feeding.join()
        q = Child(root, ckpt, "finish")
        try:
            q.wait_for("done", 900)
            assert q.proc.wait(timeout=120) == 0
        finally:
            q.kill()
    finally:
        done.set()
        open(stop, "w").close()
        out, err = reader.communicate(timeout=300)
    assert reader.returncode == 0, err.decode()[-2000:]
    with Topic.open(root, "out", readonly=True) as t:
        got = collections.Counter(m.value for p in range(t.num_partitions)
                                  for m in t.partition(p).iter())
    want = collections.Counter(values + others)
    assert got == want, (f"missing {len(set(want) - set(got))}, "
                         f"doubled {sum(1 for c in got.values() if c > 1)}")
    files = [f for _, _, fs in os.walk(os.path.join(root, "__spark")) for f in fs
             if f not in (COMMITTED, LOCK)]
    assert not files, f"left staged: {files[:5]}"
    print(f"{2 * SCALE} kills ({dict(left)}), {len(values)} rows exactly once beside "
          f"{len(others)} of another writer; the reader (checks, rows) {out.decode().split()}")

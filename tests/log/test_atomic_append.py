"""``seglog.log.append_encoded(log, batches, atomic=True)``: several batches as one unit that
readers, recovery and a writer repairing after another's death see whole or not
at all (``ActiveSegment.append_group``), here by every state a kill can leave and by
writers SIGKILLed at random instants (with readers in other processes watching).

Scale the rounds with SEGLOG_TORTURE=10 (scripts/torture does)."""

from __future__ import annotations

import os
import random
import signal
import struct
import subprocess
import sys
import time
import traceback

import pytest

import seglog
from seglog import Log, MessageTooLargeError, Record, codec
from seglog.log import append_encoded, encode_batches
from seglog.testing import abandon

from clock import SYNTHETIC_CLOCK

SCALE = int(os.environ.get("SEGLOG_TORTURE", "1"))
HERE = os.path.dirname(os.path.abspath(__file__))
SMALL = {"segment_bytes": 16 << 10, "max_message_bytes": 1024, "index_interval_bytes": 256,
         **SYNTHETIC_CLOCK}


def seed_for(name: str) -> int:
    seed = int(os.environ.get("SEGLOG_SEED", "0")) or random.randrange(1 << 30)
    print(f"\n{name}: seed {seed} (rerun with SEGLOG_SEED={seed})")
    return seed


def group_records(g: int, count: int, rnd: random.Random) -> list[Record]:
    """Group ``g``'s ``count`` records: each value says its group, place and count,
    so any reader can tell a whole group from a part of one."""
    out = []
    for i in range(count):
        value = b"g%d.%d.%d." % (g, i, count) + bytes([97 + (g + i) % 26]) * rnd.randrange(0, 300)
        key = b"k%d" % (i % 5) if i % 3 == 0 else None
        headers = [("h", b"%d" % i)] if i % 4 == 0 else []
        out.append(Record(value, key=key, timestamp=1000 + g, headers=headers))
    return out


def _parse(value: bytes) -> tuple[int, int, int]:
    g, i, count, _ = value.split(b".", 3)
    return int(g[1:]), int(i), int(count)


def whole_groups(log: Log, start: int | None = None, end: int | None = None
                 ) -> list[tuple[int, int]]:
    """(group, count) of each group in the log (from ``start`` to ``end``), in order;
    AssertionError if a group is cut short, out of order or repeated."""
    out: list[tuple[int, int]] = []
    want = None
    for m in log.iter(start, end):
        if not m.value.startswith(b"g"):
            assert want is None, f"a plain record inside group {want}"
            continue
        g, i, count = _parse(m.value)
        if want is None:
            assert i == 0, f"group {g} starts at its record {i} (offset {m.offset})"
            want = (g, 0, count)
        assert (g, i, count) == want, f"expected {want}, found {(g, i, count)} at {m.offset}"
        want = (g, i + 1, count) if i + 1 < count else None
        if want is None:
            out.append((g, count))
    assert want is None, f"group {want[0]} cut short after {want[1]} of {want[2]} records"
    return out


def append_group(log: Log, g: int, count: int, rnd: random.Random) -> range:
    batches = encode_batches(log, group_records(g, count, rnd), 1000 + g)
    return append_encoded(log, batches, atomic=True)


# -- the unit itself ----------------------------------------------------------------------
@pytest.mark.parametrize("compression", [None, "lz4"])
def test_a_group_reads_back_whole_across_rolls(tmp_path, compression):
    rnd = random.Random(5)
    path = str(tmp_path / "log")
    with Log.open(path, compression=compression, **SMALL) as log:
        want = []
        for g in range(40):
            count = rnd.choice([1, 2, 5, 20, 60])
            r = append_group(log, g, count, rnd)
            assert len(r) == count and r.start == sum(c for _, c in want)
            want.append((g, count))
            if g % 7 == 0:
                log.append(b"plain")             # plain appends between groups
                want.append((None, 1))
        assert len(log.segments) > 3
        assert whole_groups(log) == [w for w in want if w[0] is not None]
        # lookups through the index entries the group made land where they should
        for off in rnd.sample(range(log.end_offset), 50):
            assert next(iter(log.read(off))).offset == off
    with Log.open(path, readonly=True) as log:
        assert whole_groups(log) == [w for w in want if w[0] is not None]
        segs = log.segments
        for seg, nxt in zip(segs, segs[1:]):     # no group spans two segments
            whole_groups(log, seg.base_offset, nxt.base_offset)


def test_a_group_goes_whole_into_the_next_segment(tmp_path):
    rnd = random.Random(6)
    with Log.open(str(tmp_path / "log"), **SMALL) as log:
        append_group(log, 0, 60, rnd)
        before = len(log.segments)
        left = (16 << 10) - log.segments[-1].size
        batches = encode_batches(log, group_records(1, 60, rnd), 1001)
        assert sum(b[3] for b in batches) > left     # does not fit what the segment has left
        r = append_encoded(log, batches, atomic=True)
        assert len(log.segments) == before + 1
        assert log.segments[-1].base_offset == r.start


def test_a_group_larger_than_segment_bytes_fills_one_segment(tmp_path):
    rnd = random.Random(7)
    opts = dict(SMALL, segment_bytes=4096)
    with Log.open(str(tmp_path / "log"), **opts) as log:
        append_group(log, 0, 3, rnd)
        for count in range(20, 60):
            batches = encode_batches(log, group_records(1, count, random.Random(count)), 1001)
            total = sum(b[3] for b in batches)
            if 4096 < total <= 4096 + 1024:
                break
        assert 4096 < total <= 4096 + 1024 and len(batches) > 3
        r = append_encoded(log, batches, atomic=True)
        seg = [s for s in log.segments if s.base_offset == r.start]
        assert seg and seg[0].size == total
        assert whole_groups(log) == [(0, 3), (1, count)]


def test_a_group_that_fits_no_segment_is_refused_and_writes_nothing(tmp_path):
    rnd = random.Random(8)
    opts = dict(SMALL, segment_bytes=4096)
    with Log.open(str(tmp_path / "log"), **opts) as log:
        append_group(log, 0, 3, rnd)
        batches = encode_batches(log, group_records(1, 200, rnd), 1001)
        with pytest.raises(MessageTooLargeError, match="does not fit one segment"):
            append_encoded(log, batches, atomic=True)
        assert log.end_offset == 3
        append_group(log, 2, 4, rnd)              # the log goes on
        assert whole_groups(log) == [(0, 3), (2, 4)]


# -- every state a kill inside the copy leaves ----------------------------------------------
def _states(total: int, sizes: list[int], rnd: random.Random) -> list[int]:
    """Bytes of the group copied when the writer died: around every batch boundary,
    inside the first header, and some at random (all of it: only the length store
    missing)."""
    cuts = {0, 1, 12, 20, 46, 47, 48, total - 1, total}
    at = 0
    for s in sizes:
        cuts |= {at - 1, at, at + 1, at + 13, at + 47}
        at += s
    cuts |= {rnd.randrange(total) for _ in range(20)}
    return sorted(c for c in cuts if 0 <= c <= total)


@pytest.mark.parametrize("open_as", ["writer", "reader", "multi_writer"])
def test_every_copy_state_a_kill_leaves_shows_none_of_the_group(tmp_path, open_as):
    rnd = random.Random(9)
    src = str(tmp_path / "src")
    with Log.open(src, **SMALL) as log:
        append_group(log, 0, 5, rnd)
        log.flush()
        before = log.end_offset
        seg = log.segments[-1]
        pos = seg.size
        batches = encode_batches(log, group_records(1, 30, rnd), 1001)
        sizes = [b[3] for b in batches]
        total = sum(sizes)
        assert len(sizes) > 3
        # the index entries of the group are made after its length store: a kill
        # before it leaves the indexes as they were
        indexes = {}
        for p in (seg.index_path, seg.timeindex_path):
            with open(p, "rb") as f:
                indexes[os.path.basename(p)] = f.read()
        append_encoded(log, batches, atomic=True)
        seg_name = os.path.basename(seg.path)
        abandon(log)
    with open(os.path.join(src, seg_name), "rb") as f:
        whole = f.read()
    group = bytearray(whole[pos:pos + total])
    assert struct.unpack_from("<I", group, 8)[0] == sizes[0] - 12
    claimed = bytearray(group)
    struct.pack_into("<I", claimed, 8, total - 12)
    for k in _states(total, sizes, rnd):
        path = str(tmp_path / f"k{k}")
        os.makedirs(path)
        for name in os.listdir(src):
            if name == ".clean-shutdown":
                continue
            with open(os.path.join(src, name), "rb") as f:
                data = f.read()
            data = indexes.get(name, data)
            if name == seg_name:
                data = bytearray(data)
                # the header goes in whole before anything else of the group
                state = claimed[:max(k, 47)] if k else b""
                data[pos:pos + total] = bytes(state) + bytes(total - len(state))
            with open(os.path.join(path, name), "wb") as f:
                f.write(data)
        where = f"{k} of {total} bytes copied"
        kw = {"readonly": True} if open_as == "reader" else \
            {"multi_writer": open_as == "multi_writer", **SMALL}
        with Log.open(path, **kw) as log:
            assert log.end_offset == before, where
            assert whole_groups(log) == [(0, 5)], where
            if open_as == "writer":               # recovery says it cut what was copied
                assert bool(log.recovery.cut_data_bytes) == bool(k), where
            if open_as != "reader":
                append_group(log, 2, 3, rnd)        # appends go on where the group was
                assert whole_groups(log) == [(0, 5), (2, 3)], where
    # the store done: the group is there, whole
    path = str(tmp_path / "done")
    os.makedirs(path)
    for name in os.listdir(src):
        with open(os.path.join(src, name), "rb") as f:
            data = f.read()
        with open(os.path.join(path, name), "wb") as f:
            f.write(data)
    with Log.open(path, **SMALL) as log:
        assert whole_groups(log) == [(0, 5), (1, 30)]


# -- SIGKILL at random instants, readers in other processes watching ---------------------------
# large segments (rolls are slow: kills should land in copies), old ones deleted
# between rounds (``enforce_retention``)
BIG = {"segment_bytes": 32 << 20, "max_message_bytes": 64 << 10, "index_interval_bytes": 4096,
       "retention_bytes": 64 << 20, "retention_check_ms": None, **SYNTHETIC_CLOCK}


def child(path: str, report_fd: int, seed: int, wid: int, multi: bool) -> None:
    """Append groups of up to 3 MiB for ever (a few, encoded once, appended again
    and again: the time goes to copying them in, where kills should land), plain
    appends between some; reports each acknowledged group's number in the pool as
    an int64 to ``report_fd`` (-1 first: ready)."""
    rnd = random.Random(seed)
    try:
        log = Log.open(path, multi_writer=multi, **BIG)
        pool = []
        for k, count in enumerate([1, 40, 400, 4000, 12000, 15000]):
            g = wid * 100 + k
            recs = [Record(b"g%d.%d.%d." % (g, i, count) + b"x" * 200) for i in range(count)]
            pool.append(encode_batches(log, recs, 1000))
        os.write(report_fd, struct.pack("<q", -1))          # encoded: kill from now on
        while True:
            k = rnd.randrange(len(pool))
            append_encoded(log, pool[k], atomic=True)
            os.write(report_fd, struct.pack("<q", k))
            if rnd.random() < 0.2:
                log.append(b"plain")
    except BaseException:
        traceback.print_exc()
        os._exit(3)


READER = r"""
import os, sys, time
sys.path[:0] = [sys.argv[2], os.path.dirname(sys.argv[2])]   # this test, the helpers
from seglog import Log
from test_atomic_append import whole_groups
path, stop, pos = sys.argv[1], time.monotonic() + float(sys.argv[3]), int(sys.argv[4])
checks = 0
with Log.open(path, readonly=True) as log:
    while time.monotonic() < stop:
        end = log.end_offset
        whole_groups(log, max(pos, log.start_offset), end)   # raises on a part of a group
        pos = end                             # a group boundary: it was whole
        checks += 1
print(checks)
"""


def _start(path: str, seed: int, wid: int, multi: bool) -> tuple[int, int]:
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        child(path, wfd, seed, wid, multi)
        os._exit(0)
    os.close(wfd)
    return pid, rfd


def _wait_ready(rfd: int, deadline: float) -> bytes:
    """The child's reports up to its "encoded" mark (-1), waiting for it."""
    data = b""
    while struct.pack("<q", -1) not in data:
        assert time.monotonic() < deadline, "the writer did not get ready in time"
        chunk = os.read(rfd, 8)
        assert chunk, "the writer died before it was ready"
        data += chunk
    return data


def _kill(pid: int, rfd: int, data: bytes) -> list[int]:
    """SIGKILL the child; the pool numbers of the groups it acknowledged, in order."""
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    while chunk := os.read(rfd, 65536):
        data += chunk
    os.close(rfd)
    return [k for (k,) in struct.iter_unpack("<q", data[:len(data) // 8 * 8]) if k >= 0]


@pytest.mark.parametrize("multi", [False, True], ids=["one_writer", "two_writers"])
def test_writers_killed_at_random_instants_leave_whole_groups(tmp_path, multi):
    """Writers appending groups are SIGKILLed at random instants (with two, one dies
    while the other goes on and repairs after it); a reader in another process checks
    all the while that it never sees a part of a group; the next open keeps every
    acknowledged group and no part of any."""
    seed = seed_for(f"atomic groups ({'two writers' if multi else 'one writer'})")
    rnd = random.Random(seed)
    path = str(tmp_path / "log")
    with Log.open(path, **BIG):
        pass
    rounds = 8 * SCALE
    groups = cut = checks = 0
    for r in range(rounds):
        with Log.open(path, readonly=True) as log:
            start = log.end_offset
        wids = [r * 2 + w + 1 for w in range(2 if multi else 1)]
        procs = [_start(path, seed + wid, wid, multi) for wid in wids]
        acked: dict[int, list[int]] = {}
        try:
            ready = [_wait_ready(rfd, time.monotonic() + 120) for _, rfd in procs]
            reader = subprocess.Popen([sys.executable, "-c", READER, path, HERE, "0.5",
                                       str(start)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for wid, (pid, rfd), data in zip(wids, procs, ready):
                time.sleep(rnd.uniform(0.01, 0.25))
                acked[wid] = _kill(pid, rfd, data)
        finally:
            for pid, _ in procs:                 # none outlives a failure
                try:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass
        out, err = reader.communicate(timeout=300)
        assert reader.returncode == 0, f"round {r}: a reader saw a part of a group:\n{err.decode()}"
        checks += int(out)
        # the next writer's open recovers from the files
        with Log.open(path, multi_writer=multi, **BIG) as log:
            seen = whole_groups(log, start)
            cut += bool(log.recovery is not None and log.recovery.cut_data_bytes)
            log.enforce_retention()
        for wid, sequence in acked.items():
            mine = [g % 100 for g, _ in seen if g // 100 == wid]
            # every acknowledged group, in order, and at most the one it was appending
            assert mine[:len(sequence)] == sequence and len(mine) - len(sequence) in (0, 1), \
                f"round {r}, writer {wid}: acknowledged {sequence[-5:]}, found {mine[-5:]}"
            groups += len(sequence)
    print(f"{rounds} rounds, {groups} groups acknowledged, none lost, {checks} reader "
          f"checks saw no part of a group, {cut} recoveries cut a group copied in part")

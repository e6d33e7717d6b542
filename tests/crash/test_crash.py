"""Crashes for real: SIGKILLed writers, simulated power loss, torn tails, bit flips,
I/O errors, damaged indexes, holes cut in the middle of the log. Every randomized
test prints its seed.

Scale the rounds with SEGLOG_TORTURE=10 (scripts/torture does).
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time

import pytest

import seglog
from seglog import CorruptRecordError, Log, Record, codec
from seglog.testing import FaultyFS, abandon

from clock import SYNTHETIC_CLOCK

# records here carry made-up timestamps near 0 ms

SCALE = int(os.environ.get("SEGLOG_TORTURE", "1"))


def seed_for(name: str) -> int:
    seed = int(os.environ.get("SEGLOG_SEED", "0")) or random.randrange(1 << 30)
    print(f"\n{name}: seed {seed} (rerun with SEGLOG_SEED={seed})")
    return seed


def value(i: int) -> bytes:
    return (b"%d:" % i) * (1 + i % 13)


def check_prefix(log: Log, at_least: int, where: str = "", start: int = 0) -> int:
    """The log holds offsets 0..end-1, each the value written there; end >= at_least.

    With ``start``, offsets below it are only sampled (they were checked before).
    """
    end = log.end_offset
    start = min(start, end)
    if start:
        for o in random.Random(end).sample(range(start), min(50, start)):
            m = next(iter(log.read(o)))
            assert (m.offset, m.value) == (o, value(o)), f"{where}: wrong message at {o}"
    got = [(m.offset, m.value) for m in log.iter(start)]
    assert [o for o, _ in got] == list(range(start, end)), f"{where}: offsets not contiguous"
    for o, v in got:
        assert v == value(o), f"{where}: wrong bytes at offset {o}"
    assert end >= at_least, f"{where}: lost acknowledged data: end {end} < {at_least}"
    return end


def append_some(log: Log, rnd: random.Random, i: int, p_single: float, max_batch: int,
                make=value) -> int:
    """One append or one append_batch of make(i), make(i + 1), ...; the next offset."""
    if rnd.random() < p_single:
        log.append(make(i))
        return i + 1
    k = rnd.randint(1, max_batch)
    log.append_batch([make(j) for j in range(i, i + k)])
    return i + k


# -- SIGKILL -------------------------------------------------------------------------
def child_writer(path: str, wfd: int, seed: int, make=value, max_batch: int = 8,
                 **config) -> None:
    """Append make(i) for ever, reporting each acknowledged end offset to ``wfd``."""
    rnd = random.Random(seed)
    try:
        log = Log.open(path, **{"segment_bytes": 4096, "max_message_bytes": 2048,
                                "flush_ms": rnd.choice([None, 5, 50]),
                                "index_interval_bytes": 256, **config}, **SYNTHETIC_CLOCK)
        i = log.end_offset
        while True:
            i = append_some(log, rnd, i, 0.5, max_batch, make)
            if rnd.random() < 0.05:
                log.flush()
            os.write(wfd, struct.pack("<q", i))   # acknowledged: every offset below i
    except BaseException:
        os._exit(3)


def test_sigkill_at_random_instants(tmp_path):
    seed = seed_for("sigkill")
    rnd = random.Random(seed)
    path = str(tmp_path / "log")
    rounds = 200 * SCALE
    acked = verified = 0
    for r in range(rounds):
        acked = max(acked, kill_at_random(lambda wfd: child_writer(path, wfd, seed + r),
                                          rnd.uniform(0.002, 0.08)))
        if r % 10 == 9 or r == rounds - 1:
            with Log.open(path, **SYNTHETIC_CLOCK) as log:        # the writer's recovery
                verified = check_prefix(log, acked, f"round {r}", verified)
        else:
            with Log.open(path, readonly=True) as log:
                verified = check_prefix(log, acked, f"round {r} (reader)", verified)
    with Log.open(path, **SYNTHETIC_CLOCK) as log:
        check_prefix(log, acked, "after all rounds")
    print(f"sigkill: {rounds} rounds, {acked} messages acknowledged, 0 lost")


def kill_at_random(child, after: float) -> int:
    """Fork; the child runs ``child(wfd)``, writing each acknowledged end offset as an
    int64 to ``wfd``; SIGKILL it ``after`` seconds in. The last offset it reported."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        child(wfd)
        os._exit(0)
    os.close(wfd)
    deadline = time.monotonic() + after
    buf = b""
    while time.monotonic() < deadline:
        chunk = os.read(rfd, 8192)
        if not chunk:
            break
        buf += chunk
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    buf += _drain(rfd)
    os.close(rfd)
    whole = len(buf) // 8 * 8
    return struct.unpack_from("<q", buf, whole - 8)[0] if whole else 0


def _drain(fd: int) -> bytes:
    out = b""
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return out
        out += chunk


# -- power loss ------------------------------------------------------------------------
def test_power_loss_states(tmp_path):
    seed = seed_for("power loss")
    checked = instants = 0
    for round_ in range(SCALE):        # independent workloads: the cost grows linearly
        c, i = _power_loss_round(str(tmp_path / f"r{round_}"), seed + round_)
        checked += c
        instants += i
    print(f"power loss: {checked} crash states from {instants} instants, 0 violations")
    assert checked >= 1000 * SCALE


def test_power_loss_states_with_batches_through_the_file(tmp_path, monkeypatch):
    """The same with every batch copied in through the file (``pwrite``), as batches
    of ``segment.THROUGH_FILE`` bytes or more are, not through the segment's map."""
    monkeypatch.setattr(seglog.segment, "THROUGH_FILE", 0)
    seed = seed_for("power loss, through the file")
    checked, instants = _power_loss_round(str(tmp_path / "r"), seed)
    print(f"power loss through the file: {checked} crash states from {instants} instants")
    assert checked >= 1000


def _power_loss_round(root: str, seed: int) -> tuple[int, int]:
    rnd = random.Random(seed)
    src = os.path.join(root, "src")
    states = []
    appended = 0
    cfg = dict(segment_bytes=2048, max_message_bytes=1024, flush_ms=None,
               index_interval_bytes=200, max_index_bytes=240)
    with FaultyFS(src) as fs:
        log = None

        def capture(op: str, path: str) -> None:
            if log is not None and rnd.random() < 0.5:
                states.append(fs.capture(flushed=log.flushed_offset, appended=appended, op=op))
        fs.on_event = capture
        log = Log.open(src, **cfg, **SYNTHETIC_CLOCK)
        for step in range(150):
            appended = append_some(log, rnd, appended, 0.6, 6)
            if rnd.random() < 0.2:
                log.flush()
            if rnd.random() < 0.03:
                log.close()
                log = Log.open(src, **cfg, **SYNTHETIC_CLOCK)
            if rnd.random() < 0.3:
                states.append(fs.capture(flushed=log.flushed_offset, appended=appended, op="-"))
        log.close()
        states.append(fs.capture(flushed=appended, appended=appended, op="closed"))
    checked = 0
    for i, st in enumerate(states):
        for mode in ("random", "random", "lose", "keep", "garble"):
            dest = os.path.join(root, f"crash-{i}-{mode}")
            st.materialize(dest, random.Random(seed * 7919 + i), mode)
            where = f"seed {seed} state {i} ({st.note['op']}, mode {mode}, flushed {st.note['flushed']})"
            try:
                with Log.open(dest, **SYNTHETIC_CLOCK) as log:
                    end = check_prefix(log, st.note["flushed"], where)
                    assert end <= st.note["appended"], f"{where}: invented messages"
            except seglog.SeglogError as e:
                raise AssertionError(f"{where}: the log did not open: {e}") from e
            shutil.rmtree(dest)
            checked += 1
    return checked, len(states)


# -- torn tails ----------------------------------------------------------------------
def _written_then_abandoned(path: str, durable: int, extra_batches: int) -> list[tuple[int, int]]:
    """Write ``durable`` flushed messages then a few unflushed batches; drop the writer.

    Returns the file positions (start, end) of the unflushed batches.
    """
    log = Log.open(path, flush_ms=None, segment_bytes=1 << 20, **SYNTHETIC_CLOCK)
    log.append_batch([value(i) for i in range(durable)])
    log.flush()
    spans = []
    for b in range(extra_batches):
        start = log.segments[-1].size
        n = log.end_offset
        log.append_batch([value(j) for j in range(n, n + 1 + b)])
        spans.append((start, log.segments[-1].size))
    abandon(log)
    return spans


def _reopen_and_check(path: str, durable: int, where: str) -> int:
    with Log.open(path, **SYNTHETIC_CLOCK) as log:
        return check_prefix(log, durable, where)


def test_torn_tail_at_every_byte(tmp_path):
    base = str(tmp_path / "base")
    spans = _written_then_abandoned(base, 20, 3)
    seg = os.path.join(base, f"{0:020d}.log")
    original = open(seg, "rb").read()
    tail_start = spans[0][0]
    end = spans[-1][1]
    cases = 0
    for cut in range(tail_start, end):
        work = str(tmp_path / f"cut{cut}")
        shutil.copytree(base, work)
        p = os.path.join(work, f"{0:020d}.log")
        with open(p, "r+b") as f:
            f.truncate(cut)
        got = _reopen_and_check(work, 20, f"cut at {cut}")
        whole = sum(1 for s, e in spans if e <= cut)
        assert got == 20 + sum(1 + b for b in range(whole))
        shutil.rmtree(work)
        cases += 1
    assert original == open(seg, "rb").read()
    print(f"torn tails: {cases} cut points")


@pytest.mark.parametrize("junk", ["zeros", "random", "stale-copy"])
def test_tail_followed_by_junk(tmp_path, junk):
    path = str(tmp_path / "log")
    spans = _written_then_abandoned(path, 30, 2)
    seg = os.path.join(path, f"{0:020d}.log")
    data = open(seg, "rb").read()
    end = spans[-1][1]
    rnd = random.Random(5)
    if junk == "zeros":
        extra = bytes(5000)
    elif junk == "random":
        extra = rnd.randbytes(5000)
    else:
        extra = data[spans[0][0]:spans[0][1]]    # an earlier batch again: wrong offsets
    with open(seg, "r+b") as f:
        f.seek(end)
        f.write(extra)
        f.truncate(end + len(extra))
    got = _reopen_and_check(path, 30, junk)
    assert got == 30 + 1 + 2


def test_bit_flips_in_durable_data_are_reported(tmp_path):
    seed = seed_for("bit flips")
    rnd = random.Random(seed)
    base = str(tmp_path / "base")
    log = Log.open(base, flush_ms=None, segment_bytes=64 << 10, max_message_bytes=4096,
                   **SYNTHETIC_CLOCK)
    log.append_batch([value(i) for i in range(200)])
    for i in range(200, 260):
        log.append(value(i))
    log.flush()
    abandon(log)                                   # unclean: the open scans
    seg = os.path.join(base, f"{0:020d}.log")
    size = _data_size(seg)
    flips = 60 * SCALE
    on_open = 0
    for n in range(flips):
        work = str(tmp_path / f"flip{n}")
        shutil.copytree(base, work)
        p = os.path.join(work, f"{0:020d}.log")
        pos = rnd.randrange(size)
        bit = 1 << rnd.randrange(8)
        with open(p, "r+b") as f:
            f.seek(pos)
            b = f.read(1)[0]
            f.seek(pos)
            f.write(bytes([b ^ bit]))
        # reported when the log opens (damage in the scanned tail) or, for the prefix
        # the open trusts, when that data is read: never returned as data
        try:
            with Log.open(work, **SYNTHETIC_CLOCK) as log:
                with pytest.raises(seglog.CorruptRecordError) as ei:
                    list(log.iter())
                on_open += 0
        except seglog.CorruptRecordError as e:
            ei = pytest.ExceptionInfo.from_exc_info((type(e), e, e.__traceback__))
            on_open += 1
        assert ei.value.path == p and ei.value.position is not None
        shutil.rmtree(work)
    print(f"bit flips: {flips} flips in flushed data, all reported ({on_open} when opening)")


def test_bit_flip_after_clean_close_is_reported_on_read(tmp_path):
    path = str(tmp_path / "log")
    with Log.open(path, **SYNTHETIC_CLOCK) as log:
        log.append_batch([value(i) for i in range(100)])
    seg = os.path.join(path, f"{0:020d}.log")
    with open(seg, "r+b") as f:
        f.seek(300)
        b = f.read(1)[0]
        f.seek(300)
        f.write(bytes([b ^ 4]))
    with Log.open(path, **SYNTHETIC_CLOCK) as log:                   # a clean open reads no data
        with pytest.raises(seglog.CorruptRecordError):
            list(log.iter())


def _data_size(path: str) -> int:
    end = 0
    data = open(path, "rb").read()
    while True:
        try:
            hdr = codec.read_header(data, end, len(data))
        except seglog.CorruptRecordError:
            return end                      # the preallocated zeros
        if hdr is None:
            return end
        end += hdr.size


def test_damage_followed_by_valid_data_is_corruption_in_the_same_boot(tmp_path):
    path = str(tmp_path / "log")
    spans = _written_then_abandoned(path, 10, 4)
    seg = os.path.join(path, f"{0:020d}.log")
    start, end = spans[1]
    with open(seg, "r+b") as f:
        f.seek(start + 30)
        f.write(b"\xff\xff")
    with pytest.raises(seglog.CorruptRecordError, match="followed by valid"):
        Log.open(path, **SYNTHETIC_CLOCK)


# -- I/O errors -------------------------------------------------------------------------
def _open_fds() -> set[tuple[int, str]]:
    """The process's descriptors and what they point at (a set: a leak and a
    close of someone else's descriptor both show)."""
    out = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            out.add((int(name), os.readlink(f"/proc/self/fd/{name}")))
        except OSError:
            pass      # the listing's own descriptor
    return out


@pytest.mark.parametrize("op", ["write", "fsync", "rename", "truncate", "fallocate", "unlink"])
@pytest.mark.parametrize("times", [1, None])
def test_io_error_loop(tmp_path, op, times):
    seed = seed_for(f"io error {op} {times}")
    rnd = random.Random(seed)
    path = str(tmp_path / "log")
    fds = _open_fds()
    acked = 0
    failures = 0
    with FaultyFS(path) as fs:
        log = Log.open(path, segment_bytes=2048, max_message_bytes=1024, flush_ms=None,
                       retention_ms=None, max_index_bytes=480, **SYNTHETIC_CLOCK)
        err = rnd.choice([errno.EIO, errno.ENOSPC])
        fs.fail(op, nth=rnd.randint(1, 6), errno=err, times=times)
        n = 0
        for step in range(300):
            try:
                if rnd.random() < 0.5:
                    log.append(value(n))
                    n += 1
                else:
                    r = log.append_batch([value(j) for j in range(n, n + 3)])
                    n = r.stop
                if rnd.random() < 0.2:
                    acked = log.flush()
                if rnd.random() < 0.05:
                    log.close()
                    log = Log.open(path, segment_bytes=2048, max_message_bytes=1024,
                                   flush_ms=None, retention_ms=None, max_index_bytes=480,
                                   **SYNTHETIC_CLOCK)
            except (seglog.StorageError, OSError) as e:
                failures += 1
                assert log.flushed_offset <= n
                durable = fs.capture(flushed=acked)
                if not log.closed:
                    with pytest.raises(seglog.StorageError):
                        log.append(b"refused")
                try:
                    log.close()
                except (seglog.SeglogError, OSError):
                    pass
                # what a power loss right now would leave holds every flushed offset
                dest = str(tmp_path / f"after{failures}")
                durable.materialize(dest, rnd, "lose")
                with Log.open(dest, **SYNTHETIC_CLOCK) as check:
                    check_prefix(check, acked, f"{op} failure {failures}")
                fs.clear_faults()
                try:
                    log = Log.open(path, segment_bytes=2048, max_message_bytes=1024,
                                   flush_ms=None, retention_ms=None, max_index_bytes=480,
                                   **SYNTHETIC_CLOCK)
                except (seglog.StorageError, OSError):
                    continue
                n = log.end_offset
                check_prefix(log, acked, f"reopen after {op} failure")
                if times is None:
                    fs.fail(op, nth=1, errno=errno.EIO, times=None)
        try:
            log.close()
        except (seglog.SeglogError, OSError):
            pass
        fs.clear_faults()
    # a single ENOSPC from fallocate is absorbed: the writer retries with just what the
    # append needs (a nearly full disk still takes small appends)
    absorbed = op == "fallocate" and err == errno.ENOSPC and times == 1
    assert failures >= 1 or absorbed, "the injected fault never fired"
    with Log.open(path, **SYNTHETIC_CLOCK) as log:
        check_prefix(log, acked, "final reopen")
    after = _open_fds()
    assert after == fds, f"leaked file descriptors: {sorted(after - fds)}, closed: {sorted(fds - after)}"


@pytest.mark.parametrize("times", [1, None])
def test_io_error_loop_with_batches_through_the_file(tmp_path, monkeypatch, times):
    """A failed ``pwrite`` of a batch (``segment.THROUGH_FILE``) poisons the log as any
    I/O error does; what was flushed stays."""
    monkeypatch.setattr(seglog.segment, "THROUGH_FILE", 0)
    test_io_error_loop(tmp_path, "write", times)


# -- damaged indexes ---------------------------------------------------------------
@pytest.mark.parametrize("damage", ["delete", "zero", "garbage", "truncate"])
def test_damaged_indexes_are_repaired(tmp_path, damage):
    path = str(tmp_path / "log")
    cfg = dict(segment_bytes=4096, index_interval_bytes=128)
    with Log.open(path, **cfg, **SYNTHETIC_CLOCK) as log:
        for i in range(400):
            log.append(value(i), timestamp=1000 + i)
    rnd = random.Random(11)
    for name in sorted(os.listdir(path)):
        if not name.endswith((".index", ".timeindex")):
            continue
        p = os.path.join(path, name)
        size = os.path.getsize(p)
        if damage == "delete":
            os.unlink(p)
        elif damage == "zero":
            open(p, "wb").write(bytes(size))
        elif damage == "garbage":
            open(p, "wb").write(rnd.randbytes(size or 24))
        else:
            with open(p, "r+b") as f:
                f.truncate(size // 2 + 1)
    with Log.open(path, **cfg, **SYNTHETIC_CLOCK) as log:
        assert [m.value for m in log.iter()] == [value(i) for i in range(400)]
        for o in range(0, 400, 37):
            assert log.read(o).first_offset == o
        assert log.offset_for_time(1000 + 250) == 250
        assert sum(s.index_repairs for s in log.segments) > 0
        log.append(value(400))
    with Log.open(path, readonly=True) as r:
        assert r.end_offset == 401


@pytest.mark.parametrize("where", ["disk", "memory"])
def test_rebuilt_index_too_small_for_its_entries_keeps_the_largest_timestamp(
        tmp_path, monkeypatch, where):
    """An index rebuilt under a smaller ``max_index_bytes`` than the segment was
    written with (on disk, or in memory when the disk is full) drops entries, never
    the time index's last one: the segment's largest timestamp, which retention and
    ``offset_for_time`` take from it."""
    import errno
    from seglog._storage import scan as _scan
    from seglog import codec
    path = str(tmp_path / "log")
    with Log.open(path, segment_bytes=4096, index_interval_bytes=64, flush_ms=None,
                  **SYNTHETIC_CLOCK) as log:
        for i in range(200):
            log.append(value(i % 10), timestamp=1000 + i)
        first = log.segments[0]
        newest = max(h.max_timestamp for _, h in first.batches())
        newest_offset = next(m.offset for m in log.iter() if m.timestamp == newest)
        with open(first.timeindex_path, "r+b") as f:
            f.truncate(13)                        # damaged: rebuilt at the next use
    if where == "memory":
        def full(*args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(_scan, "write_index_files", full)
    with Log.open(path, max_index_bytes=24, index_interval_bytes=64, **SYNTHETIC_CLOCK) as log:
        assert log.segments[0].max_timestamp == newest
        assert log.offset_for_time(newest) == newest_offset


@pytest.mark.parametrize("shutdown", ["clean", "crash"])
def test_segment_sealed_under_smaller_indexes_keeps_its_largest_timestamp(tmp_path, shutdown):
    """An active segment written with large indexes, reopened with a smaller
    ``max_index_bytes`` (its time index is then full) and sealed: the time index
    still ends with the segment's largest timestamp, so retention and
    ``offset_for_time`` see the segment's newest record after the next open."""
    from seglog import codec
    path = str(tmp_path / "log")
    log = Log.open(path, segment_bytes=1 << 20, index_interval_bytes=64, flush_ms=None,
                   **SYNTHETIC_CLOCK)
    for i in range(200):
        log.append(value(i % 10), timestamp=1000 + i)
    if shutdown == "crash":
        log.flush()
        abandon(log)
    else:
        log.close()
    cfg = dict(segment_bytes=1 << 20, max_index_bytes=24, index_interval_bytes=64)
    with Log.open(path, **cfg, **SYNTHETIC_CLOCK) as log:
        log.append(b"x", timestamp=5000)           # the index is full: a new segment
        assert [s.base_offset for s in log.segments] == [0, 200]
    with Log.open(path, **cfg, **SYNTHETIC_CLOCK) as log:
        first = log.segments[0]
        newest = max(h.max_timestamp for _, h in first.batches())
        assert newest == 1199 and first.max_timestamp == newest
        assert log.offset_for_time(1150) == 150
        assert log.offset_for_time(newest) == 199


def test_clean_reopen_reads_no_segment_data(tmp_path):
    path = str(tmp_path / "log")
    with Log.open(path, segment_bytes=1024, flush_ms=None, **SYNTHETIC_CLOCK) as log:
        for i in range(2000):
            log.append(value(i))
        assert len(log.segments) > 50
    fs = FaultyFS(path)
    reads = []
    real_pread = os.pread
    os.pread = lambda fd, n, off: reads.append(os.readlink(f"/proc/self/fd/{fd}")) or real_pread(fd, n, off)
    try:
        log = Log.open(path, segment_bytes=1024, flush_ms=None, **SYNTHETIC_CLOCK)
    finally:
        os.pread = real_pread
    assert not [r for r in reads if r.endswith(".log")]
    assert log.recovery is None
    log.close()
    del fs


def test_recovery_scans_only_the_unflushed_tail(tmp_path):
    path = str(tmp_path / "log")
    log = Log.open(path, segment_bytes=1 << 30, flush_ms=None, index_interval_bytes=4096,
                   **SYNTHETIC_CLOCK)
    log.append_batch([b"x" * 200 for _ in range(20000)])
    log.flush()
    log.append_batch([b"y" * 200 for _ in range(50)])
    abandon(log)
    with Log.open(path, index_interval_bytes=4096, **SYNTHETIC_CLOCK) as log:
        rep = log.recovery
        assert rep is not None and rep.segments_scanned == 1
        assert rep.scanned_bytes < 200_000          # the tail, not the 4 MB segment
        assert log.end_offset == 20050


def test_recovery_starts_at_the_last_index_entry_below_the_recovery_point(tmp_path):
    """Small batches: the scan starts at the last trusted index entry, so it reads
    about one index interval plus the unflushed tail, not the flushed segment."""
    path = str(tmp_path / "log")
    log = Log.open(path, flush_ms=None, index_interval_bytes=4096, **SYNTHETIC_CLOCK)
    for i in range(20000):
        log.append(b"%099d" % i)
    log.flush()
    for i in range(10):
        log.append(b"t" * 100)
    abandon(log)
    with Log.open(path, index_interval_bytes=4096, **SYNTHETIC_CLOCK) as log:
        rep = log.recovery
        assert rep is not None and rep.scanned_bytes < 4096 + 10 * 200
        assert log.end_offset == 20010
        assert [m.value for m in log.iter(19998)] == [b"%099d" % 19998, b"%099d" % 19999] + [b"t" * 100] * 10


# -- holes: a segment cut back at a batch boundary -----------------------------------
# A hole in the middle of the log is damage: CorruptRecordError, never a hang or a
# silent skip (holes compaction leaves are not holes: test_compaction.py).

TS0 = 1_700_000_000_000


def _deadline(fn, seconds: float = 20):
    """fn() in a thread; its result or exception, or a failure if it hangs."""
    out: list = []

    def run() -> None:
        try:
            out.append(("ok", fn()))
        except BaseException as e:   # noqa: BLE001 - handed to the caller
            out.append(("err", e))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "hung"
    kind, val = out[0]
    if kind == "err":
        raise val
    return val


def _build(path) -> Log:
    log = Log.open(path, segment_bytes=2048, index_interval_bytes=256, flush_ms=None)
    for i in range(0, 300, 3):
        log.append_batch([Record(b"v%03d" % j + b"." * 30, timestamp=TS0 + j)
                          for j in range(i, i + 3)])
    log.flush()
    assert len(log.segments) >= 4
    return log


def _boundaries(seg) -> list[tuple[int, int]]:
    """(position, base offset) of every batch after the first."""
    return [(p, h[0]) for p, h in seg.batches()][1:]


@pytest.mark.parametrize("which", [0, 1, 2])
def test_sealed_segment_cut_back_at_every_batch_boundary(tmp_path, which):
    path = tmp_path / "l"
    log = _build(path)
    seg = log.segments[which]
    cuts = _boundaries(seg)
    log.close()
    for pos, hole in cuts:
        d = tmp_path / f"cut{pos}"
        shutil.copytree(path, d)
        with open(d / os.path.basename(seg.path), "r+b") as f:
            f.truncate(pos)          # a batch boundary: every batch left is whole
        nxt = seg.next_offset
        for mode in ("writer", "reader"):
            w = Log.open(d) if mode == "writer" else Log.open(d, readonly=True)
            with pytest.raises(CorruptRecordError) as e:
                _deadline(lambda: sum(1 for _ in w.iter()))
            assert e.value.offset == hole and e.value.path.endswith(os.path.basename(seg.path))
            for o in (hole, (hole + nxt) // 2, nxt - 1):
                with pytest.raises(CorruptRecordError):
                    _deadline(lambda: list(w.read(o)))
            with pytest.raises(CorruptRecordError):
                _deadline(lambda: w.offset_for_time(TS0 + hole))
            # offsets before and after the hole still read
            assert next(iter(w.read(0))).offset == 0
            assert next(iter(w.read(nxt))).offset == nxt
            assert [m.offset for m in w.iter(nxt)] == list(range(nxt, 300))
            w.close()
        shutil.rmtree(d)


def test_a_writer_holding_a_segment_cut_back_sees_damage_not_a_spin(tmp_path):
    """The writer knows the segment's old size: a short read is damage, not a spin."""
    log = _build(tmp_path / "l")
    seg = log.segments[1]
    sum(1 for _ in log.iter())            # the writer has the file open, size known
    pos, hole = _boundaries(seg)[2]
    with open(seg.path, "r+b") as f:
        f.truncate(pos)
    with pytest.raises(CorruptRecordError):
        _deadline(lambda: sum(1 for _ in log.iter()))
    with pytest.raises(CorruptRecordError):
        _deadline(lambda: list(log.read(hole)))
    log.close()


_READER = r"""
import sys, seglog
r = seglog.Log.open(sys.argv[1], readonly=True)
try:
    sum(1 for _ in r.iter())
except seglog.CorruptRecordError as e:
    print("corrupt", e.offset)
else:
    print("no error")
"""


def test_a_reader_in_another_process_sees_a_hole_as_damage(tmp_path):
    log = _build(tmp_path / "l")
    seg = log.segments[1]
    pos, hole = _boundaries(seg)[1]
    log.close()
    with open(seg.path, "r+b") as f:
        f.truncate(pos)
    out = subprocess.run([sys.executable, "-c", _READER, str(tmp_path / "l")],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["corrupt", str(hole)], out.stderr


@pytest.mark.parametrize("bit", range(16, 32))
def test_first_batch_length_claiming_past_the_data_is_damage(tmp_path, bit):
    """A flipped high bit in a batch's length field makes it claim bytes past the
    segment's data: before, iter() then ended silently at offset 0."""
    path = tmp_path / "l"
    with Log.open(path, segment_bytes=64 << 10) as log:
        log.append_batch([b"v%d" % i for i in range(200)])
        for i in range(200, 260):
            log.append(b"w%d" % i)
        seg = log.segments[0].path
    with open(seg, "r+b") as f:
        f.seek(8)
        length = int.from_bytes(f.read(4), "little")
        f.seek(8)
        f.write((length ^ (1 << bit)).to_bytes(4, "little"))
    for ro in (False, True):
        with Log.open(path, readonly=ro) as log:
            with pytest.raises(CorruptRecordError) as e:
                _deadline(lambda: list(log.iter()))
            assert e.value.path == seg
            with pytest.raises(CorruptRecordError):
                _deadline(lambda: list(log.read(0)))

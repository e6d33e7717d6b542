"""A writer of a multi-writer log killed at the exact points that leave work half done:
inside an append (a torn batch, or whole batches never published) and inside a roll
(the segment cut back, the next one created, nothing published). The next writer
repairs before it appends; nothing acknowledged is lost, nothing torn stays, offsets
stay dense."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

import seglog
from seglog import repair

SEG = 1 << 14

# the child appends ``n`` acknowledged messages, then dies (SIGKILL, by itself) at the
# point the test names, inside its next call
CHILD = textwrap.dedent("""
    import os, signal, sys
    import seglog
    from seglog import segment
    path, point, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    log = seglog.Log.open(path, multi_writer=True, segment_bytes={seg})
    for i in range(n):
        log.append(b"child-%d" % i)
    die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    if point == "torn":
        real = segment.ActiveSegment.append
        def torn(self, data, *a, **k):
            # half the batch, as a kill inside the copy leaves it
            data = data if isinstance(data, bytes) else b"".join(data)
            real(self, data[:len(data) // 2] + bytes(8), *a, **k)
            die()
        segment.ActiveSegment.append = torn
        log.append_batch([b"torn-%d" % i for i in range(20)])
    elif point == "whole":
        real = segment.ActiveSegment.append
        calls = []
        def whole(self, data, *a, **k):
            calls.append(1)
            if len(calls) == 3:
                die()              # two whole batches written, never published
            return real(self, data, *a, **k)
        segment.ActiveSegment.append = whole
        log.append_batch([b"w" * 300] * 30)     # three batches of max_message_bytes
    elif point == "roll":
        segment.ActiveSegment.create = classmethod(lambda cls, *a, **k: die())
        while True:
            log.append(b"x" * 500)
    elif point.startswith("roll-created"):
        # "roll-created-2": its first roll is whole (published), the second dies
        rolls = [int(point[-1]) if point[-1].isdigit() else 1]
        real = segment.ActiveSegment.create.__func__
        def created(cls, *a, **k):
            seg = real(cls, *a, **k)
            rolls[0] -= 1
            if not rolls[0]:
                die()
            return seg
        segment.ActiveSegment.create = classmethod(created)
        while True:
            log.append(b"x" * 500)
""").format(seg=SEG)


def _die_at(path: str, point: str, n: int) -> None:
    p = subprocess.run([sys.executable, "-c", CHILD, path, point, str(n)], timeout=60)
    assert p.returncode == -signal.SIGKILL, p


def _check(path: str) -> list[bytes]:
    with seglog.Log.open(path, readonly=True) as r:
        msgs = list(r.iter())
        assert [m.offset for m in msgs] == list(range(r.start_offset, r.end_offset))
    report = repair.check(path)
    assert not report.problems, report.problems
    return [m.value for m in msgs]


@pytest.mark.parametrize("point", ["torn", "whole"])
def test_a_writer_killed_inside_an_append(tmp_path, point):
    path = str(tmp_path / "log")
    other = seglog.Log.open(path, multi_writer=True, segment_bytes=SEG,
                            max_message_bytes=4096)
    other.append(b"first")
    _die_at(path, point, 10)
    # the next append repairs first: after the last whole batch, a torn one erased
    off = other.append(b"after")
    values = _check(path)
    assert values[:11] == [b"first"] + [b"child-%d" % i for i in range(10)]
    assert values[-1] == b"after" and off == len(values) - 1
    if point == "torn":
        assert not any(v.startswith(b"torn") for v in values)
        assert len(values) == 12
    else:
        # the two whole batches it wrote before dying are kept (a reader may have
        # seen them), the third never started
        assert values[11:-1] == [b"w" * 300] * (len(values) - 12) and len(values) > 12
    other.close()
    with seglog.Log.open(path) as log:        # a clean close by the last writer
        assert log.recovery is None and [m.value for m in log.iter()] == values


@pytest.mark.parametrize("point", ["roll", "roll-created"])
def test_a_writer_killed_inside_a_roll(tmp_path, point):
    path = str(tmp_path / "log")
    other = seglog.Log.open(path, multi_writer=True, segment_bytes=SEG)
    other.append(b"first")
    _die_at(path, point, 3)
    n_before = len(_check(path))
    offs = [other.append(b"after-%d" % i) for i in range(100)]
    values = _check(path)
    assert offs == list(range(n_before, n_before + 100))
    assert values[-100:] == [b"after-%d" % i for i in range(100)]
    assert values[:4] == [b"first"] + [b"child-%d" % i for i in range(3)]
    assert len(other.segments) >= 2
    other.close()


def test_the_first_writer_after_all_died_recovers_from_the_files(tmp_path):
    path = str(tmp_path / "log")
    _die_at(path, "torn", 5)
    with seglog.Log.open(path, multi_writer=True) as log:
        assert log.recovery is not None          # it found .lock free: all had left
        assert [m.value for m in log.iter()] == [b"child-%d" % i for i in range(5)]
        assert log.append(b"next") == 5
    assert _check(path)[-1] == b"next"


def test_modes_exclude_each_other_and_joiners_keep_the_settings(tmp_path):
    path = str(tmp_path / "log")
    with seglog.Log.open(path, multi_writer=True, segment_bytes=SEG) as a:
        with pytest.raises(seglog.errors.LogLockedError):
            seglog.Log.open(path)
        with pytest.raises(seglog.errors.InvalidConfigError):
            seglog.Log.open(path, multi_writer=True, segment_bytes=2 * SEG)
        with seglog.Log.open(path, multi_writer=True, segment_bytes=SEG) as b:
            a.append(b"a")
            assert b.append(b"b") == 1 and b.end_offset == a.end_offset == 2
            b.flush()
            assert a.flushed_offset == 2
    with seglog.Log.open(path) as log:
        with pytest.raises(seglog.errors.LogLockedError):
            seglog.Log.open(path, multi_writer=True)
        assert [m.value for m in log.iter()] == [b"a", b"b"]
    for bad in ({"lock_timeout_ms": -1}, {"readonly": True, "multi_writer": True}):
        with pytest.raises(seglog.errors.InvalidConfigError):
            seglog.Log.open(path, multi_writer=True, **{k: v for k, v in bad.items()
                                                       if k != "multi_writer"})
    with pytest.raises(TypeError):
        seglog.Log.open(path, multi_writer="yes")


def test_a_roll_that_fails_after_its_seal_is_repaired_by_the_next_writer(tmp_path, monkeypatch):
    """The roller's new segment cannot be made (a full disk): it refuses writes from
    then on, and the next writer finishes the roll before appending, so nobody
    writes into the segment it had already cut back."""
    import errno
    from seglog import segment
    path = str(tmp_path / "log")
    a = seglog.Log.open(path, multi_writer=True, segment_bytes=4096)
    b = seglog.Log.open(path, multi_writer=True, segment_bytes=4096)
    real = segment.ActiveSegment.create.__func__

    def full(cls, *args, **kw):
        real(cls, *args, **kw)            # the files are made, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(segment.ActiveSegment, "create", classmethod(full))
    acked = []
    with pytest.raises(seglog.errors.StorageError):
        while True:
            acked.append((a.append(b"a" * 300), b"a" * 300))
    monkeypatch.undo()
    for i in range(40):
        acked.append((b.append(b"b%d" % i), b"b%d" % i))
    values = _check(path)
    assert [values[off] for off, _ in acked] == [v for _, v in acked]
    assert len(values) == len(acked)
    a.close()
    b.close()
    assert _check(path) == values


def test_a_held_lock_bounds_appends_and_never_blocks_reads(tmp_path):
    """Another writer holding the append lock (stopped, say): appends of every thread
    give up after lock_timeout_ms, together, not one after the other; reads answer
    from what this writer saw, at once or after a short look."""
    import threading
    import time
    path = str(tmp_path / "log")
    log = seglog.Log.open(path, multi_writer=True, lock_timeout_ms=500)
    log.append(b"before")
    fd = os.open(os.path.join(path, ".writers"), os.O_RDWR)
    import fcntl
    fcntl.flock(fd, fcntl.LOCK_EX)         # what a stopped writer inside an append holds
    try:
        t0 = time.monotonic()
        assert log.end_offset == 1 and len(log) == 1 and log.read(0).next_offset == 1
        assert log.wait(1, timeout=0.2) is False
        assert time.monotonic() - t0 < 1.5
        results: list[tuple[float, str]] = []

        def append() -> None:
            t = time.monotonic()
            try:
                log.append(b"x")
                results.append((time.monotonic() - t, "written"))
            except seglog.errors.LogLockedError:
                results.append((time.monotonic() - t, "LogLockedError"))
        threads = [threading.Thread(target=append) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert [r for _, r in results] == ["LogLockedError"] * 4, results
        assert all(0.45 <= dt < 1.5 for dt, _ in results), results
    finally:
        os.close(fd)
    assert log.append(b"after") == 1
    log.close()
    assert _check(path) == [b"before", b"after"]


@pytest.mark.parametrize("repairer", ["joining", "behind"])
def test_a_roll_finished_after_its_roller_died_leaves_what_readers_saw_sealed(tmp_path,
                                                                              repairer):
    """The roller died after cutting its segment back and creating the next one; a
    reader saw that segment sealed with a successor. The writer that repairs (one
    joining, or one whose view is older than that segment) finishes the roll: it never
    appends to the sealed segment, so the reader reads on without a false gap."""
    path = str(tmp_path / "log")
    other = seglog.Log.open(path, multi_writer=True, segment_bytes=SEG)
    other.append(b"first")
    # "behind": the child rolls once (published), then dies inside its second roll:
    # other's view names the first segment active, not the one cut back
    _die_at(path, "roll-created" if repairer == "joining" else "roll-created-2", 3)
    reader = seglog.Log.open(path, readonly=True)
    seen = [m.value for m in reader.iter()]
    segs = reader.segments
    assert len(segs) >= 2 and not segs[-1].size      # the new one, empty
    sealed_base, sealed_size = segs[-2].base_offset, segs[-2].size
    writer = (seglog.Log.open(path, multi_writer=True, segment_bytes=SEG)
              if repairer == "joining" else other)
    added = [b"after-%d" % i for i in range(3 * SEG // 100)]
    offs = [writer.append(v) for v in added]
    assert offs == list(range(len(seen), len(seen) + len(added)))
    # read on from where the reader was: the rest, no gap reported
    assert [m.value for m in reader.iter(len(seen))] == added
    on_disk = os.stat(segs[-2].path).st_size
    assert (segs[-2].base_offset, on_disk) == (sealed_base, sealed_size)
    reader.close()
    assert _check(path) == seen + added
    if writer is not other:
        writer.close()
    other.close()

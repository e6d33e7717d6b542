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
        real = segment.Segment.append
        def torn(self, data, *a, **k):
            # half the batch, as a kill inside the copy leaves it
            data = data if isinstance(data, bytes) else b"".join(data)
            real(self, data[:len(data) // 2] + bytes(8), *a, **k)
            die()
        segment.Segment.append = torn
        log.append_batch([b"torn-%d" % i for i in range(20)])
    elif point == "whole":
        real = segment.Segment.append
        calls = []
        def whole(self, data, *a, **k):
            calls.append(1)
            if len(calls) == 3:
                die()              # two whole batches written, never published
            return real(self, data, *a, **k)
        segment.Segment.append = whole
        log.append_batch([b"w" * 300] * 30)     # three batches of max_message_bytes
    elif point == "roll":
        segment.Segment.create = classmethod(lambda cls, *a, **k: die())
        while True:
            log.append(b"x" * 500)
    elif point == "roll-created":
        real = segment.Segment.create.__func__
        def created(cls, *a, **k):
            real(cls, *a, **k)
            die()
        segment.Segment.create = classmethod(created)
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

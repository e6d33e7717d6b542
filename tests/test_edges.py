"""Edges: empty readers, wait() timeouts, null values, buffers, header framing, and a
writer nobody references."""

from __future__ import annotations

import array
import asyncio
import ctypes
import fcntl
import gc
import logging
import math
import os
import time

import pytest

import seglog
from seglog import LogLockedError, MessageTooLargeError, Record


def test_readonly_reader_of_empty_directory(tmp_path):
    """A reader may start before the writer ever opened the directory."""
    path = tmp_path / "l"
    os.makedirs(path)
    r = seglog.Log.open(path, readonly=True)
    assert (r.start_offset, r.end_offset) == (0, 0)
    assert list(r.iter()) == []
    assert list(r.read(0)) == []
    assert r.offset_for_time(0) is None
    assert r.wait(0, timeout=0) is False
    with seglog.Log.open(path) as w:
        w.append(b"a")
        assert r.wait(0, timeout=10)
        assert [m.value for m in r.iter()] == [b"a"]
    r.close()


def test_readonly_reader_of_new_log_is_empty(tmp_path):
    path = tmp_path / "l"
    os.makedirs(path)
    with seglog.Log.open(path) as w:
        r = seglog.Log.open(path, readonly=True)
        assert list(r.iter()) == []
        assert list(r.read(0)) == []
        assert r.offset_for_time(0) is None
        assert r.wait(0, timeout=0) is False
        w.append(b"a")
        assert [m.value for m in r.iter()] == [b"a"]
        r.close()


def test_wait_timeouts(tmp_path):
    with seglog.Log.open(tmp_path / "l") as log:
        log.append(b"a")
        assert log.wait(0, timeout=math.inf) is True          # no OverflowError
        assert log.wait(5, timeout=0) is False
        t0 = time.monotonic()
        assert log.wait(5, timeout=0.05) is False
        assert time.monotonic() - t0 < 5
        with pytest.raises(ValueError):
            log.wait(5, timeout=math.nan)                     # never blocks for ever
        with pytest.raises(TypeError):
            log.wait(5, timeout="1")
        r = seglog.Log.open(tmp_path / "l", readonly=True)
        assert r.wait(0, timeout=math.inf) is True
        with pytest.raises(ValueError):
            r.wait(5, timeout=math.nan)
        r.close()


@pytest.mark.parametrize("mode", ["writer", "multi_writer", "readonly"])
def test_wait_refuses_negative_arguments_and_a_closed_log(tmp_path, mode):
    def both(offset, timeout):          # wait and wait_async: one contract
        yield lambda: log.wait(offset, timeout=timeout)
        yield lambda: asyncio.run(log.wait_async(offset, timeout=timeout))

    with seglog.Log.open(tmp_path / "l", multi_writer=mode == "multi_writer") as w:
        w.append(b"a")
        log = seglog.Log.open(tmp_path / "l", readonly=True) if mode == "readonly" else w
        for offset, timeout in ((-1, None), (-1, 0), (-5, 1), (0, -1), (5, -1), (5, -0.001),
                                (5, -math.inf), (-1, math.inf)):
            for call in both(offset, timeout):
                with pytest.raises(ValueError):
                    call()
        assert log.wait(0, timeout=0) is True and log.wait(1, timeout=0) is False
        assert asyncio.run(log.wait_async(1, timeout=0)) is False
        # closed: LogClosedError, even where the end passed the offset
        log.close()
        for offset, timeout in ((0, None), (0, 0), (5, 0), (0, math.inf)):
            for call in both(offset, timeout):
                with pytest.raises(seglog.LogClosedError):
                    call()


def _says_flush_did_not_happen(text: str) -> bool:
    return ("did not happen" in text and "written" in text and "not yet safe from power loss"
            in text and "nothing was written" not in text)


def test_a_flush_behind_a_stopped_writer_says_what_was_written(tmp_path, caplog):
    """Another writer stopped while holding the append lock: a flush (the caller's or
    the timed flusher's) cannot happen, and says so; the appends stay written."""
    path = tmp_path / "l"
    with seglog.Log.open(path, multi_writer=True, lock_timeout_ms=100, flush_ms=50) as log:
        # the stopped writer: the append lock (the .writers file's flock) taken and kept
        stopped = os.open(path / ".writers", os.O_RDWR)
        try:
            log.append(b"a")
            fcntl.flock(stopped, fcntl.LOCK_EX)
            with pytest.raises(LogLockedError) as e:
                log.flush()
            assert _says_flush_did_not_happen(str(e.value)), str(e.value)
            deadline = time.monotonic() + 60
            with caplog.at_level(logging.WARNING, logger="seglog"):
                while True:
                    # the flusher's next turns find the lock held; if it flushed just
                    # before it was taken, append again (the lock let go meanwhile)
                    fcntl.flock(stopped, fcntl.LOCK_UN)
                    log.append(b"b")
                    fcntl.flock(stopped, fcntl.LOCK_EX)
                    turn = time.monotonic() + 2
                    while time.monotonic() < min(turn, deadline) and not any(
                            "timed flush" in r.getMessage() for r in caplog.records):
                        time.sleep(0.01)
                    lines = [r.getMessage() for r in caplog.records if "timed flush" in r.getMessage()]
                    if lines or time.monotonic() >= deadline:
                        break
            assert lines and all(_says_flush_did_not_happen(x) for x in lines), lines
        finally:
            os.close(stopped)
        # the lock let go: the appends were there all along, and now flush
        assert [m.value for m in log.iter()][:2] == [b"a", b"b"]
        assert log.flush() == log.end_offset


def test_null_values_without_key_both_paths(tmp_path):
    with seglog.Log.open(tmp_path / "l") as log:
        a = log.append(None)
        b = log.append_batch([None, b"", Record(None)])
        assert [(m.offset, m.value) for m in log.iter()] == [
            (a, None), (b.start, None), (b.start + 1, b""), (b.start + 2, None)]


BUFFERS = [
    (ctypes.c_int32 * 3)(1, 2, 3),
    (ctypes.c_char * 3)(b"a", b"b", b"c"),
    array.array("i", [7, 8]),
    array.array("d", [1.5]),
    memoryview(b"abcdefgh").cast("i"),
    memoryview(bytearray(b"0123456789ab")).cast("B", (3, 4)),
    bytearray(b"ba"),
]


@pytest.mark.parametrize("i", range(len(BUFFERS)))
def test_buffers_keep_their_bytes(tmp_path, i):
    """A buffer's bytes are stored, whatever its len() counts (items, rows)."""
    buf = BUFFERS[i]
    raw = memoryview(buf).tobytes()
    with seglog.Log.open(tmp_path / "l") as log:
        o1 = log.append(buf)
        r2 = log.append_batch([buf, b"tail", buf])
        r3 = log.append_batch([Record(buf, key=buf)])
        got = {m.offset: (m.key, m.value) for m in log.iter()}
    assert got[o1] == (None, raw)
    assert [got[o][1] for o in r2] == [raw, b"tail", raw]
    assert got[r3.start] == (raw, raw)


def test_header_framing_counts_against_max_message_bytes(tmp_path):
    with seglog.Log.open(tmp_path / "l", segment_bytes=1024, max_message_bytes=4096) as log:
        headers = [("", b"")] * 600            # no bytes of their own, 8 of framing each
        with pytest.raises(MessageTooLargeError):
            log.append(b"v", headers=headers)
        with pytest.raises(MessageTooLargeError):
            log.append_batch([Record(b"v", headers=headers)])
        assert log.end_offset == 0
        ok = [("", b"")] * 400
        off = log.append(b"v", headers=ok)
        assert next(iter(log.read(off))).headers == tuple(ok)


def test_unreferenced_writer_releases_its_lock(tmp_path):
    path = tmp_path / "l"

    def use() -> None:
        log = seglog.Log.open(path, flush_ms=10, retention_check_ms=10)
        log.append(b"x")
        # the background threads have run: the timed flush and a retention check
        deadline = time.monotonic() + 10
        while not (log.flushed_offset == 1 and log.metrics()["retention_runs"] >= 1):
            assert time.monotonic() < deadline, "the background passes never ran"
            time.sleep(0.005)

    use()
    deadline = time.monotonic() + 10
    while True:
        gc.collect()
        try:
            with seglog.Log.open(path) as again:
                assert again.end_offset == 1
            break
        except LogLockedError:
            if time.monotonic() > deadline:
                raise AssertionError("an unreferenced writer kept the lock")
            time.sleep(0.05)


def test_jobs_of_unreferenced_writer_end(tmp_path):
    from seglog import _scheduler

    def use() -> None:
        log = seglog.Log.open(tmp_path / "l", flush_ms=10, retention_check_ms=10)
        log.append(b"x")

    before = (_scheduler.pending("flush"), _scheduler.pending("maintenance"))
    use()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        gc.collect()
        if (_scheduler.pending("flush"), _scheduler.pending("maintenance")) == before:
            break
        time.sleep(0.05)
    assert (_scheduler.pending("flush"), _scheduler.pending("maintenance")) == before


def test_one_flusher_and_one_maintenance_thread_for_many_logs(tmp_path):
    import threading
    first = seglog.Log.open(tmp_path / "first")     # the process's threads exist now
    first.append(b"x")
    before = threading.active_count()
    logs = [seglog.Log.open(tmp_path / f"p{i}", flush_ms=20, retention_check_ms=50)
            for i in range(64)]
    for i, log in enumerate(logs):
        log.append(b"%d" % i)
    assert threading.active_count() <= before + 2
    # and every log's timed flush still runs, within a deadline
    deadline = time.monotonic() + 10
    while any(log.flushed_offset < 1 for log in logs) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(log.flushed_offset == 1 for log in logs)
    for log in logs:
        log.close()
    first.close()


def test_active_segment_next_offset_follows_every_append(tmp_path):
    """append()'s fast path used to update only the segment's size: after 5 appends
    end_offset was 5 and the active segment's next_offset 2."""
    with seglog.Log.open(tmp_path / "l", index_interval_bytes=1 << 20) as log:
        for i in range(5):
            log.append(b"x")
            assert log.segments[-1].next_offset == log.end_offset == i + 1
        log.append_batch([b"a", b"b"])
        assert log.segments[-1].next_offset == log.end_offset == 7


def test_maintenance_on_readonly_is_refused_whatever_the_policy(tmp_path):
    with seglog.Log.open(tmp_path / "l", cleanup_policy="compact"):
        pass
    for policy in ("compact", "delete"):
        r = seglog.Log.open(tmp_path / "l", readonly=True, cleanup_policy=policy)
        with pytest.raises(seglog.ReadOnlyError):
            r.enforce_retention()
        with pytest.raises(seglog.ReadOnlyError):
            r.compact()
        r.close()


def test_background_maintenance_failure_is_logged_and_reported(tmp_path, monkeypatch, caplog):
    import seglog._log_maintenance
    log = seglog.Log.open(tmp_path / "l", retention_check_ms=10)

    def broken(*args):
        raise OSError(5, "injected")

    monkeypatch.setattr(seglog._log_maintenance, "expired_prefix", broken)
    deadline = time.monotonic() + 10
    while log._maint.background_error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "maintenance of" in caplog.text and "injected" in caplog.text
    monkeypatch.undo()
    with pytest.raises(seglog.StorageError, match="injected"):
        log.compact()
    log.close()


def test_exit_without_close_while_background_threads_work(tmp_path):
    """A process that exits with a writer open must exit (daemon threads are frozen
    at interpreter exit, maybe holding a lock close() needs) and lose nothing."""
    import subprocess
    import sys
    code = ("import sys, seglog\n"
            "log = seglog.Log.open(sys.argv[1], flush_ms=1, segment_bytes=4 << 20)\n"
            "n = log.end_offset\n"
            "for i in range(n, n + 4000):\n"
            "    log.append_batch([b'%d' % i + b'.' * 2000])\n"
            "print(log.end_offset)\n")            # and exit: no close()
    end = 0
    for _ in range(5):
        p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "l")],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        end = int(p.stdout)
    with seglog.Log.open(tmp_path / "l") as log:
        assert log.end_offset == end == 20_000
        assert [m.offset for m in log.iter()] == list(range(end))

"""Retention (delete policy) and crash safety of retention and compaction passes."""

from __future__ import annotations

import io as real_io
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import types

import pytest

import seglog
from seglog import Log, OffsetOutOfRangeError
from seglog._storage import segment_file as _segment_file
from seglog.testing import FaultyFS

from clock import SYNTHETIC_CLOCK
from helpers import wait_for

# records here carry made-up timestamps near 0 ms

DAY = 86_400_000


def append_dated(log: Log, n: int, ts0: int, step: int = 1, size: int = 100) -> None:
    """Append n messages whose value starts with their own offset, timestamps
    ``ts0 + i * step``."""
    for i in range(n):
        off = log.end_offset
        log.append(b"%06d" % off + b"x" * size, key=b"k%d" % (off % 50), timestamp=ts0 + i * step)


def test_empty_and_single_segment(logdir):
    with Log.open(logdir, retention_ms=1, **SYNTHETIC_CLOCK) as log:
        assert log.enforce_retention(now_ms=10**13) == []
        append_dated(log, 10, 1000)
        assert len(log.segments) == 1
        assert log.enforce_retention(now_ms=10**13) == []     # the active segment stays
        assert log.end_offset == 10


def test_time_retention_deletes_old_segments_oldest_first(logdir):
    with Log.open(logdir, segment_bytes=2048, retention_ms=1000, file_delete_delay_ms=0,
                  **SYNTHETIC_CLOCK) as log:
        append_dated(log, 100, 10_000, step=100)                        # ts 10_000 .. 19_900
        segs = log.segments
        assert len(segs) > 4
        cutoff = segs[2].max_timestamp + 1000 + 1              # the first three are due
        deleted = log.enforce_retention(now_ms=cutoff)
        assert deleted == [s.base_offset for s in segs[:3]]
        assert log.start_offset == segs[3].base_offset
        assert not os.path.exists(segs[0].path)
        with pytest.raises(seglog.OffsetOutOfRangeError):
            log.read(0)
        assert [m.offset for m in log.iter()][0] == log.start_offset
    with Log.open(logdir, retention_ms=1000,
                  **SYNTHETIC_CLOCK) as log:           # the start offset is durable
        assert log.start_offset == segs[3].base_offset


def test_all_expired_keeps_the_active_segment(logdir):
    with Log.open(logdir, segment_bytes=2048, retention_ms=10, file_delete_delay_ms=0,
                  **SYNTHETIC_CLOCK) as log:
        append_dated(log, 100, 1000)
        n = len(log.segments)
        assert len(log.enforce_retention(now_ms=10**12)) == n - 1
        assert len(log.segments) == 1 and log.end_offset == 100
        assert log.append(b"more") == 100


def test_clock_backwards_and_future_timestamps(logdir):
    with Log.open(logdir, segment_bytes=2048, retention_ms=1000, **SYNTHETIC_CLOCK) as log:
        append_dated(log, 60, 10**9 * 3)                                # timestamps in the "future"
        assert log.enforce_retention(now_ms=10**9) == []         # now before the data
        assert log.enforce_retention(now_ms=10**9 * 3 + 500) == []


def test_size_retention(logdir):
    with Log.open(logdir, segment_bytes=2048, retention_ms=None, retention_bytes=5000,
                  file_delete_delay_ms=0, **SYNTHETIC_CLOCK) as log:
        append_dated(log, 200, 1000)
        log.enforce_retention()
        total = sum(s.size for s in log.segments)
        assert total >= 5000 - 2048 and sum(s.size for s in log.segments[1:]) < 5000
        assert [m.offset for m in log.iter()] == list(range(log.start_offset, 200))


def test_delayed_delete_renames_aside_then_unlinks(logdir):
    with Log.open(logdir, segment_bytes=2048, retention_ms=1, file_delete_delay_ms=100,
                  **SYNTHETIC_CLOCK) as log:
        append_dated(log, 60, 1000)
        first = log.segments[0]
        assert log.enforce_retention(now_ms=10**12)
        aside = os.path.join(logdir, ".seglog-deleted." + os.path.basename(first.path))
        assert not os.path.exists(first.path) and os.path.exists(aside)
        time.sleep(0.15)
        log.enforce_retention(now_ms=10**12)                    # a later pass purges
        assert not os.path.exists(aside)


def test_background_maintenance_applies_retention(logdir):
    with Log.open(logdir, segment_bytes=2048, retention_ms=1, retention_check_ms=20,
                  file_delete_delay_ms=0, **SYNTHETIC_CLOCK) as log:
        append_dated(log, 100, 1000)
        wait_for(lambda: len(log.segments) <= 1, 10, "the background retention pass",
                 step=0.02)
        assert len(log.segments) == 1 and log.start_offset > 0


def test_crash_between_checkpoint_and_delete(logdir, monkeypatch):
    log = Log.open(logdir, segment_bytes=2048, retention_ms=1, file_delete_delay_ms=0,
                   **SYNTHETIC_CLOCK)
    append_dated(log, 60, 1000)
    keep = log.segments[-1].base_offset
    import seglog.retention
    monkeypatch.setattr(seglog.retention.DelayedDeletes, "delete",
                        lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        log.enforce_retention(now_ms=10**12)
    monkeypatch.undo()
    from seglog.testing import abandon
    abandon(log)
    with Log.open(logdir, segment_bytes=2048, **SYNTHETIC_CLOCK) as log:
        assert log.start_offset == keep
        assert [s.base_offset for s in log.segments] == [keep]   # leftovers removed
        assert [m.offset for m in log.iter()] == list(range(keep, 60))


def test_readers_survive_retention(logdir):
    with Log.open(logdir, segment_bytes=2048, retention_ms=1, file_delete_delay_ms=0,
                  **SYNTHETIC_CLOCK) as log:
        append_dated(log, 300, 1000)
        errors: list = []
        stop = threading.Event()

        def reader():
            while not stop.is_set():
                try:
                    start = log.start_offset
                    prev = None
                    for m in log.iter(start):
                        assert prev is None or m.offset == prev + 1
                        assert m.value.startswith(b"%06d" % m.offset)
                        prev = m.offset
                except seglog.OffsetOutOfRangeError:
                    pass
                except Exception as e:  # noqa: BLE001
                    errors.append(e)
        t = threading.Thread(target=reader)
        t.start()
        code = ("import seglog,sys\nr=seglog.Log.open(sys.argv[1],readonly=True)\n"
                "it=r.iter(); first=[next(it) for _ in range(5)]\n"
                "sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.readline()\n"
                "rest=[]\n"
                "try:\n    rest.extend(m for m in it if m.value.startswith(b'%06d' % m.offset))\n"
                "except seglog.OffsetOutOfRangeError:\n    rest.append(None)\n"
                "print(first[0].offset, len(first)+len(rest))\n")
        p = subprocess.Popen([sys.executable, "-c", code, logdir], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"  # type: ignore[union-attr]
        for i in range(5):
            append_dated(log, 30, 2000 + i * 100)
            log.enforce_retention(now_ms=10**12)
        out, _ = p.communicate("go\n", timeout=60)
        stop.set()
        t.join()
        assert not errors
        first, count = map(int, out.split())
        assert first == 0 and count >= 5


# -- crashes in the middle of a pass -------------------------------------------
def _crash_states_during(pass_fn, logdir: str, build, seed: int):
    with FaultyFS(logdir) as fs:
        log = build()
        states = []
        fs.on_event = lambda op, path: states.append(fs.capture(op=op, path=path))
        pass_fn(log)
        fs.on_event = None
        log.close()
    return states


def _recovered_logs(states, tmp_path, seed: int, cfg: dict):
    """Each crash state materialized three ways and opened: (index, mode, state, log)."""
    for i, st in enumerate(states):
        for mode in ("random", "lose", "keep"):
            dest = str(tmp_path / f"c{i}{mode}")
            st.materialize(dest, random.Random(seed + i), mode)
            with Log.open(dest, **cfg, **SYNTHETIC_CLOCK) as log:
                yield i, mode, st, log
            shutil.rmtree(dest)


def test_crash_at_every_step_of_retention(tmp_path):
    seed = random.randrange(1 << 30)
    print(f"\nretention crash: seed {seed}")
    src = str(tmp_path / "src")
    cfg = dict(segment_bytes=2048, retention_ms=1, file_delete_delay_ms=0, flush_ms=None,
               max_index_bytes=240, index_interval_bytes=200)

    def build():
        log = Log.open(src, **cfg, **SYNTHETIC_CLOCK)
        append_dated(log, 120, 1000)
        log.flush()
        return log
    states = _crash_states_during(lambda log: log.enforce_retention(now_ms=10**12), src, build, seed)
    assert len(states) > 5
    for i, mode, st, log in _recovered_logs(states, tmp_path, seed, cfg):
        offs = [m.offset for m in log.iter()]
        assert offs == list(range(log.start_offset, 120)), (i, mode, st.note)
        assert log.end_offset == 120


@pytest.mark.parametrize("keys", [12, 60])    # 60: the output is several merged groups
def test_crash_at_every_step_of_compaction(tmp_path, keys):
    seed = random.randrange(1 << 30)
    print(f"\ncompaction crash: seed {seed}")
    src = str(tmp_path / "src")
    cfg = dict(segment_bytes=2048, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0,
               flush_ms=None, max_index_bytes=240, index_interval_bytes=200)
    written = {}

    def build():
        log = Log.open(src, **cfg, **SYNTHETIC_CLOCK)
        for i in range(150):
            k = b"k%d" % (i % keys)
            v = b"%06d" % i
            written[i] = (k, v)
            log.append(v, key=k, timestamp=1000 + i)
        log.flush()
        return log
    passes = []
    states = _crash_states_during(lambda log: passes.append(log.compact()), src, build, seed)
    assert (len(passes[0].replaced) > 1) == (keys > 12)
    latest = {}
    for off, (k, v) in written.items():
        latest[k] = off
    assert len(states) > 5
    for i, mode, st, log in _recovered_logs(states, tmp_path, seed, cfg):
        got = {m.offset: (m.key, m.value) for m in log.iter()}
        assert all(written[o] == kv for o, kv in got.items()), (i, mode)
        assert set(latest.values()) <= set(got), (i, mode, st.note)   # no latest lost
        assert log.end_offset == 150


def test_readonly_reader_that_never_opened_a_deleted_segment(logdir):
    with Log.open(logdir, segment_bytes=2048, retention_ms=1, file_delete_delay_ms=0,
                  **SYNTHETIC_CLOCK) as log:
        append_dated(log, 200, 1000)
        r = Log.open(logdir, readonly=True)
        assert r.start_offset == 0
        log.enforce_retention(now_ms=10**12)
        with pytest.raises(seglog.OffsetOutOfRangeError):
            r.read(0)
        with pytest.raises(seglog.OffsetOutOfRangeError):
            list(r.iter(0))
        assert [m.offset for m in r.iter(r.start_offset)] == list(range(log.start_offset, 200))
        r.close()


# -- a segment deleted as a reader reopens it -----------------------------------------

def test_a_segment_retention_deletes_while_it_is_reopened_is_gone_not_vanished(
        tmp_path, monkeypatch):
    """An iteration holds a segment between two chunks while the log closes its idle
    files; retention deletes the segment just as the iteration opens its file again
    (after checking the segment was not retired, before the open: made here by
    running the pass at that instant). The iteration must say its offset was
    deleted by retention (``OffsetOutOfRangeError``), not that a file of the log
    vanished behind the writer's back (``CorruptRecordError``)."""
    path = str(tmp_path / "r")
    with Log.open(path, segment_bytes=2 << 20, flush_ms=None, file_delete_delay_ms=0,
                  retention_ms=None, retention_bytes=1) as log:
        for i in range(20000):
            log.append(b"%06d" % i + b"r" * 1000)
        segs = log.segments
        assert len(segs) >= 9
        it = log.iter(0)
        assert next(it).offset == 0            # one chunk of segment 0 read
        for seg in segs[1:9]:                   # segment 0's files closed as idle
            log.read(seg.base_offset, 100)
        first = segs[0].path
        fired = []

        def file_io(p, *a, **kw):
            if p == first and not fired:
                fired.append(p)
                log.enforce_retention()         # at this instant, in another thread
            return real_io.FileIO(p, *a, **kw)
        monkeypatch.setattr(_segment_file, "io", types.SimpleNamespace(FileIO=file_io))
        with pytest.raises(OffsetOutOfRangeError):
            for _ in it:
                pass
        assert fired and log.start_offset > 0


# -- maintenance refused on a reader, failing in the background ----------------------

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
    import seglog._log.maintenance
    log = seglog.Log.open(tmp_path / "l", retention_check_ms=10)

    def broken(*args):
        raise OSError(5, "injected")

    monkeypatch.setattr(seglog._log.maintenance, "expired_prefix", broken)
    # the background pass fails: it says so in the log records
    wait_for(lambda: "injected" in caplog.text, 10, "the background pass to fail", step=0.01)
    assert "maintenance of" in caplog.text
    monkeypatch.undo()
    with pytest.raises(seglog.StorageError, match="injected"):
        log.compact()
    log.close()

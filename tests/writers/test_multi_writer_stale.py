"""Several writers where one is stale (it has not appended since another writer's
retention or compaction changed the segment list) and another is stopped holding the
append lock (here: the test holds the `.writers` flock, as a SIGSTOPped writer inside
an append does). A stale writer never decides on its old view: retention, compaction,
flush and close either take the lock and look again or raise ``LogLockedError`` having
changed nothing; reads never need the lock and answer as a readonly reader does.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import pytest

import seglog
from seglog import Log, LogLockedError, OffsetOutOfRangeError, repair
from seglog.testing import FaultyFS, abandon

from helpers import wait_for
from mw_harness import DEADLINE

TIMEOUT_MS = 700
OPTS = dict(segment_bytes=1024, max_message_bytes=512, flush_ms=None, retention_check_ms=None,
            index_interval_bytes=256, lock_timeout_ms=TIMEOUT_MS)


@contextmanager
def stopped_writer(path: str) -> Iterator[Callable[[], None]]:
    """The append lock held as a stopped writer holds it; yields the release."""
    fd = os.open(os.path.join(path, ".writers"), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    held = [True]

    def release() -> None:
        if held[0]:
            held[0] = False
            fcntl.flock(fd, fcntl.LOCK_UN)
    try:
        yield release
    finally:
        release()
        os.close(fd)


def value(who: str, i: int) -> bytes:
    return b"%s-%d." % (who.encode(), i) + b"v" * 90


def readonly_view(path: str) -> list[tuple[int, bytes | None, bytes | None]]:
    with Log.open(path, readonly=True) as r:
        return [(m.offset, m.key, m.value) for m in r.iter()]


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = fn()
        except BaseException as e:      # the test inspects what it raised
            out["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def stale_pair(path: str, **extra: Any) -> tuple[Log, Log, int]:
    """Writers a and b; a fills many segments, b appends once after (its view has them
    all), then a's retention deletes most of them: b is stale. Returns the start
    offset retention left."""
    opts = {**OPTS, **extra}
    a = Log.open(path, multi_writer=True, **opts)
    b = Log.open(path, multi_writer=True, **opts)
    for i in range(300):
        a.append(value("a", i), key=b"k%d" % (i % 5))
    b.append(value("b", 0), key=b"k0")
    assert len(b.segments) > 20
    a.enforce_retention()
    start = a.start_offset
    assert start > 0
    return a, b, start


def bytes_held(path: str) -> int:
    with Log.open(path, readonly=True) as r:
        return sum(s.size for s in r.segments)


# -- 1. retention by a stale writer ---------------------------------------------------
def test_a_stale_writers_retention_behind_a_stopped_writer_deletes_nothing_not_due(tmp_path):
    path = str(tmp_path / "log")
    a, b, start = stale_pair(path, retention_bytes=4096)
    before = readonly_view(path)
    ckpt = os.path.join(path, "log-start-offset")

    def checkpoint() -> bytes:
        with open(ckpt, "rb") as f:
            return f.read()
    first = checkpoint()
    with stopped_writer(path) as release:
        t, out = in_thread(b.enforce_retention)
        # a writer deciding on its stale view moves the log start before it waits for
        # the lock; one that looks again under the lock gives up after lock_timeout_ms
        wait_for(lambda: checkpoint() != first or not t.is_alive(),
                 DEADLINE, "the stale writer's retention to decide or give up", step=0.002)
        release()
        t.join(DEADLINE)
    assert not t.is_alive()
    err = out.get("error")
    assert err is None or isinstance(err, LogLockedError), repr(err)
    if err is not None:
        assert checkpoint() == first, "a refused pass changed the log start"
    # whatever b did, only what was due went: nothing was due after a's pass
    assert b.enforce_retention() == []
    assert readonly_view(path) == before
    assert a.start_offset == b.start_offset == start
    assert bytes_held(path) >= 4096
    off = a.append(b"after-a")
    assert b.append(b"after-b") == off + 1
    with Log.open(path, multi_writer=True, **OPTS) as c:
        assert c.append(b"after-c") == off + 2
    a.close()
    b.close()
    assert not repair.check(path).problems


def test_retention_refused_for_a_held_lock_changes_nothing(tmp_path):
    path = str(tmp_path / "log")
    a, b, start = stale_pair(path, retention_bytes=4096)
    for i in range(100):
        a.append(value("a2", i))
    before = sorted(os.listdir(path))
    with stopped_writer(path):
        t0 = time.monotonic()
        with pytest.raises(LogLockedError):
            b.enforce_retention()
        assert time.monotonic() - t0 < TIMEOUT_MS / 1000 + 5
        assert sorted(os.listdir(path)) == before
    deleted = b.enforce_retention()
    assert deleted and all(x < b.start_offset for x in deleted)
    assert b.start_offset == a.start_offset > start
    a.close()
    b.close()


# -- 2. compaction by a stale writer ---------------------------------------------------
def test_a_stale_writers_compaction_never_reads_deleted_files_nor_poisons(tmp_path):
    path = str(tmp_path / "log")
    a, b, start = stale_pair(path, retention_bytes=4096, cleanup_policy="compact,delete",
                             min_cleanable_dirty_ratio=0.0)
    with stopped_writer(path):
        try:
            b.compact()
        except LogLockedError:
            pass
    # b is not poisoned: it appends, compacts, and reads what a readonly reader reads
    b.append(b"after", key=b"k1")
    st = b.compact()
    assert st.skipped is None
    assert [m.offset for m in b.iter()] == [o for o, _, _ in readonly_view(path)]
    a.append(b"after-a", key=b"k2")
    a.close()
    b.close()
    assert not repair.check(path).problems


# -- 3. and 4. a writer's reads behind a stopped writer ------------------------------
def test_a_stale_writer_reads_at_once_behind_a_stopped_writer(tmp_path):
    path = str(tmp_path / "log")
    a, b, start = stale_pair(path, retention_bytes=4096)
    expect = readonly_view(path)
    with stopped_writer(path):
        t0 = time.monotonic()
        with pytest.raises(OffsetOutOfRangeError):
            b.read(0)
        assert b.start_offset == start
        assert [(m.offset, m.key, m.value) for m in b.iter()] == expect
        assert b.read(start).next_offset > start
        assert len(b) == len(expect)
        assert b.stats()["messages"] == len(expect)
        took = time.monotonic() - t0
    assert took < 3.0, f"reads took {took:.1f} s behind the held lock"
    a.close()
    b.close()


def test_a_writers_iteration_over_many_segments_never_waits_for_the_lock(tmp_path):
    path = str(tmp_path / "log")
    a = Log.open(path, multi_writer=True, **OPTS)
    b = Log.open(path, multi_writer=True, **OPTS)
    for i in range(800):
        a.append(value("a", i))
    b.append(b"b")
    assert len(b.segments) >= 100
    expect = readonly_view(path)
    with stopped_writer(path):
        t0 = time.monotonic()
        got = [(m.offset, m.key, m.value) for m in b.iter()]
        took = time.monotonic() - t0
    assert got == expect
    assert took < 3.0, f"iter() over {len(b.segments)} segments took {took:.1f} s"
    a.close()
    b.close()


def test_a_writer_reads_what_others_appended_while_the_lock_is_held(tmp_path):
    """At least as well as a readonly reader: what another writer appended before the
    lock was taken is read at once."""
    path = str(tmp_path / "log")
    a = Log.open(path, multi_writer=True, **OPTS)
    b = Log.open(path, multi_writer=True, **OPTS)
    b.append(b"b0")
    for i in range(50):
        a.append(value("a", i))
    with stopped_writer(path):
        assert b.end_offset == 51
        assert [m.offset for m in b.iter()] == list(range(51))
        assert b.wait(50, timeout=0) is True
    a.close()
    b.close()


# -- 5. a writer that is not the last closes durably ----------------------------------
def test_a_writer_closing_beside_others_makes_its_appends_survive_power_loss(tmp_path):
    src = str(tmp_path / "src")
    cfg = {**OPTS, "segment_bytes": 64 << 10}
    with FaultyFS(src) as fs:
        a = Log.open(src, multi_writer=True, **cfg)
        b = Log.open(src, multi_writer=True, **cfg)
        b.append(b"b0")
        offs = [a.append(b"a%d" % i) for i in range(20)]
        a.close()
        state = fs.capture()
        abandon(b)
    dest = str(tmp_path / "after-power-loss")
    import random
    state.materialize(dest, random.Random(1), "lose")
    with Log.open(dest, readonly=True) as r:
        got = {m.offset: m.value for m in r.iter()}
    assert {o: got.get(o) for o in offs} == {o: b"a%d" % i for i, o in enumerate(offs)}


def test_a_closing_writer_makes_its_appends_durable_without_holding_the_others_up(tmp_path):
    # the fsync of everything a closing writer appended runs before it takes the
    # append lock: another writer appends while it runs (the close's fsync under the
    # lock then writes only what came since)
    src = str(tmp_path / "src")
    cfg = {**OPTS, "segment_bytes": 1 << 20, "max_message_bytes": 4096}
    with FaultyFS(src) as fs:
        a = Log.open(src, multi_writer=True, **cfg)
        b = Log.open(src, multi_writer=True, **{**cfg, "lock_timeout_ms": 50})
        b.append(b"b0")
        offs = [a.append(b"a%d" % i + b"." * 1000) for i in range(200)]
        seen: list[tuple[str, object]] = []

        def on_event(op: str, path: str) -> None:
            if op == "fsync" and path.endswith(".log") and not seen:
                seen.append(("busy", None))          # b's own events come back here
                try:
                    seen[0] = ("appended", b.append(b"during a's fsync"))
                except LogLockedError as e:
                    seen[0] = ("locked", e)
        fs.on_event = on_event
        a.close()
        fs.on_event = None
        state = fs.capture()
        abandon(b)
    assert seen and seen[0][0] == "appended", seen
    dest = str(tmp_path / "after-power-loss")
    import random
    state.materialize(dest, random.Random(1), "lose")
    with Log.open(dest, readonly=True) as r:
        got = {m.offset: m.value for m in r.iter()}
    assert {o: got.get(o) for o in offs} == {o: b"a%d" % i + b"." * 1000
                                             for i, o in enumerate(offs)}


# -- 7. compaction by a stale writer after another's -------------------------------
def test_a_writer_reads_its_compacted_segment_after_another_writer_compacted_it(tmp_path):
    path = str(tmp_path / "log")
    opts = {**OPTS, "cleanup_policy": "compact", "min_cleanable_dirty_ratio": 0.0}
    a = Log.open(path, multi_writer=True, **opts)
    b = Log.open(path, multi_writer=True, **opts)
    for i in range(160):
        a.append(value("a", i), key=b"k%d" % (i % 40))
    b.append(b"b", key=b"k0")          # b's view: every segment a wrote
    assert a.compact().replaced        # a holds the cleaned copies, b is stale
    swaps = (".seglog-swap.", ".seglog-cleaned.")
    with stopped_writer(path) as release:
        t, out = in_thread(b.compact)
        wait_for(lambda: any(n.startswith(swaps) for n in os.listdir(path))
                 or not t.is_alive(), DEADLINE, "b's pass to write or give up", step=0.002)
        release()
        t.join(DEADLINE)
    assert not t.is_alive()
    err = out.get("error")
    assert err is None or isinstance(err, LogLockedError), repr(err)
    b.compact()
    expect = readonly_view(path)
    for w in (a, b):
        assert [(m.offset, m.key, m.value) for m in w.iter()] == expect
        assert len(w) == len(expect)
        assert w.stats()["messages"] == len(expect)
    a.append(b"more", key=b"k1")
    b.close()
    a.close()
    assert not repair.check(path).problems


# -- 8. what a killed writer's retention left ------------------------------------------
def test_a_joining_writer_removes_what_a_killed_writers_retention_left(tmp_path):
    path = str(tmp_path / "log")
    opts = {**OPTS, "retention_bytes": 4096, "file_delete_delay_ms": 300}
    a = Log.open(path, multi_writer=True, **opts)
    b = Log.open(path, multi_writer=True, **opts)
    for i in range(200):
        a.append(value("a", i))
    deleted = a.enforce_retention()
    assert deleted
    abandon(a)         # killed before its delayed deletes ran
    aside = [n for n in os.listdir(path) if n.startswith(".seglog-deleted.")]
    assert aside
    # a kill inside a delete: the .log renamed aside, its indexes not yet
    first = min(deleted)
    stem = "%020d" % first
    for ext in (".index", ".timeindex"):
        src = os.path.join(path, ".seglog-deleted." + stem + ext)
        if os.path.exists(src):
            os.rename(src, os.path.join(path, stem + ext))
    wait_for(lambda: time.time() - max(os.stat(os.path.join(path, n)).st_ctime
                                       for n in os.listdir(path)
                                       if n.startswith(".seglog-deleted.")) > 0.35,
             DEADLINE, "the delete delay to pass", step=0.002)
    with Log.open(path, multi_writer=True, **opts) as c:    # b still has the log open
        names = os.listdir(path)
        assert not [n for n in names if n.startswith(".seglog-deleted.")]
        bases = {n[:20] for n in names if n.endswith(".log")}
        assert {n[:20] for n in names if n.endswith((".index", ".timeindex"))} <= bases
        c.append(b"c")
    b.close()
    assert not repair.check(path).problems


# -- 9. a close behind a stopped writer -------------------------------------------------
def test_a_close_that_times_out_leaves_the_log_open_and_working(tmp_path):
    path = str(tmp_path / "log")
    opts = {**OPTS, "flush_ms": 50}
    a = Log.open(path, multi_writer=True, **opts)
    b = Log.open(path, multi_writer=True, **opts)
    a.append(b"a0")
    with stopped_writer(path) as release:
        with pytest.raises(LogLockedError):
            a.close()
        assert not a.closed
        assert [m.value for m in a.iter()] == [b"a0"]
        release()
        assert a.append(b"a1") == 1
        # the timed flusher still runs
        wait_for(lambda: a.flushed_offset == 2, DEADLINE, "the timed flush", step=0.002)
    a.close()
    assert a.closed
    b.close()
    assert [v for _, _, v in readonly_view(path)] == [b"a0", b"a1"]


# -- 10. refused opens leave nothing behind ---------------------------------------------
def test_a_refused_multi_writer_open_leaves_no_writers_file(tmp_path):
    path = str(tmp_path / "log")
    with Log.open(path) as log:
        log.append(b"x")
        names = sorted(os.listdir(path))
        with pytest.raises(LogLockedError):
            Log.open(path, multi_writer=True)
        assert sorted(os.listdir(path)) == names
    names = sorted(os.listdir(path))
    marker = os.path.join(path, "seglog.json")
    import json
    with open(marker) as f:
        data = json.load(f)
    data["format"] = 1
    with open(marker, "w") as f:
        json.dump(data, f)
    with pytest.raises(seglog.SeglogError):
        Log.open(path, multi_writer=True)
    assert sorted(os.listdir(path)) == names


# -- 11. a durable producer never calls written records unwritten ---------------------
def test_a_durable_producers_future_is_never_failed_for_a_written_record(tmp_path):
    path = str(tmp_path / "log")
    log = Log.open(path, multi_writer=True, **OPTS)
    real_flush = log.flush
    held: list[Callable[[], None]] = []
    cm = stopped_writer(path)

    def flush_behind_a_stopped_writer() -> int:
        # a writer stops holding the lock right after this producer's append
        if not held:
            held.append(cm.__enter__())
        return real_flush()
    log.flush = flush_behind_a_stopped_writer      # type: ignore[method-assign]
    p = seglog.Producer(log, linger_ms=0, durable=True)
    fut = p.send(b"durable")
    try:
        wait_for(lambda: held, DEADLINE, "the producer's flush", step=0.002)
        try:
            got = fut.result(timeout=TIMEOUT_MS / 1000 + 5)
        except TimeoutError:
            got = None               # still pending: fine, it was written
        except seglog.SeglogError as e:
            assert "nothing was written" not in str(e)
            assert getattr(e, "offsets", None) == range(0, 1), repr(e)
            got = "failed with its offset"
    finally:
        cm.__exit__(None, None, None)
    log.flush = real_flush           # type: ignore[method-assign]
    p.flush(timeout=DEADLINE)
    if got is None:
        assert fut.result(timeout=0) == 0
    assert log.flushed_offset == 1
    p.close()
    log.close()
    assert [v for _, _, v in readonly_view(path)] == [b"durable"]


def test_a_durable_producers_records_made_durable_by_another_flush_resolve(tmp_path):
    path = str(tmp_path / "log")
    log = Log.open(path, multi_writer=True, **OPTS)
    real_flush = log.flush

    def flush_then_closed() -> int:
        real_flush()               # another thread's flush made them durable...
        log.close()                # ...then the log was closed under the producer
        return real_flush()
    log.flush = flush_then_closed  # type: ignore[method-assign]
    p = seglog.Producer(log, linger_ms=0, durable=True)
    assert p.send(b"x").result(timeout=DEADLINE) == 0
    p.close()


def test_a_writer_of_several_says_it_is_a_writer_while_it_reads_as_a_reader(tmp_path):
    path = str(tmp_path / "log")
    with Log.open(path, multi_writer=True, **OPTS) as a:
        a.append(b"x")
        assert a.stats()["readonly"] is False and not a.readonly
        assert "writer" in repr(a) and "(readonly)" not in a._repr_html_()
        assert [s.base_offset for s in a.segments] == [0]
        assert a.metrics()["messages_appended"] == 1
    with Log.open(path, readonly=True) as r:
        assert r.stats()["readonly"] is True


# -- a flush behind a stopped writer says what was written ----------------------------

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

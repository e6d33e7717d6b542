"""Many threads on one ``Log``: appends of single records and batches from every thread
at once, beside threads that flush, roll, run retention and compaction, and read.
Threads that find the append lock taken wait in line and the holder appends their
records (flat combining); whoever appends, each call is atomic (its records at
contiguous offsets), offsets are dense, each thread's calls keep their order, and
every call returns the offsets its records are at. Checked against a model built
from what each thread was told; seeds printed (rerun with SEGLOG_SEED=<seed>).
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
import traceback

import pytest

import seglog
from seglog import Log, LogLockedError, Record
from seglog.testing import at

from clock import SYNTHETIC_CLOCK

SCALE = int(os.environ.get("SEGLOG_TORTURE", "1"))
DEADLINE = float(os.environ.get("SEGLOG_DEADLINE", "120"))


def _seed(name: str) -> int:
    seed = int(os.environ.get("SEGLOG_SEED", "0")) or random.randrange(1 << 30)
    print(f"\n{name}: seed {seed} (rerun with SEGLOG_SEED={seed})")
    return seed


def _hung(threads: list[threading.Thread]) -> str:
    """Which threads are still alive, and where each stands (its stack)."""
    frames = sys._current_frames()
    out = []
    for th in threads:
        if th.is_alive() and th.ident in frames:
            out.append(f"thread {th.name} hung at:\n"
                       + "".join(traceback.format_stack(frames[th.ident])))
    return "\n".join(out) or "a thread hung"


def value(t: int, i: int, size: int) -> bytes:
    return b"t%d.%d." % (t, i) + b"x" * size


def _appender(log: Log, t: int, seed: int, calls: int, told: list, errors: list) -> None:
    """Thread ``t``'s calls: single appends (plain, keyed, with headers) and batches of
    1..30; ``told`` gets (first offset, the values) of each call, in order."""
    rnd = random.Random(f"{seed}-{t}")
    i = 0
    try:
        for _ in range(calls):
            kind = rnd.random()
            if kind < 0.5:
                v = value(t, i, rnd.choice([0, 10, 200, 900]))
                off = log.append(v)
                told.append((off, [v]))
                i += 1
            elif kind < 0.65:
                v = value(t, i, 50)
                off = log.append(v, key=b"k%d" % rnd.randrange(8), headers=[("t", b"%d" % t)])
                told.append((off, [v]))
                i += 1
            else:
                n = rnd.randint(1, 30)
                vs = [value(t, i + j, rnd.choice([0, 30, 300])) for j in range(n)]
                items = vs if rnd.random() < 0.5 else [Record(v, b"k%d" % (j % 5))
                                                       for j, v in enumerate(vs)]
                got = log.append_batch(items)
                assert len(got) == n
                told.append((got.start, vs))
                i += n
    except BaseException as e:          # the test fails on it
        errors.append((t, e, traceback.format_exc()))


def _check(path: str, told: dict[int, list], compacted: bool) -> None:
    """Every call's records at the offsets it was told, contiguous; each thread's in
    its order; offsets dense (but for compaction's holes); nothing else in the log."""
    with Log.open(path, readonly=True) as r:
        got = {m.offset: m.value for m in r.iter()}
        start, end = r.start_offset, r.end_offset
    expect: dict[int, bytes] = {}
    for t, calls in told.items():
        last = -1
        for first, vs in calls:
            assert first > last, f"thread {t}: a call at {first} after one at {last}"
            last = first + len(vs) - 1
            expect.update(zip(range(first, first + len(vs)), vs))
    assert sorted(expect) == list(range(len(expect))), "offsets given out not dense"
    assert end == len(expect)
    for off, v in got.items():
        assert expect.get(off) == v, f"offset {off}: {v[:20]!r}, not what was appended"
    if not compacted:
        assert sorted(got) == list(range(start, end)), "offsets not dense"
        assert all(o in got for o in expect if o >= start), "a told record is missing"


@pytest.mark.parametrize("mode", ["exclusive", "multi_writer"])
def test_many_threads_appending_beside_flushes_rolls_retention_and_compaction(tmp_path, mode):
    seed = _seed(f"threads ({mode})")
    for round_ in range(SCALE):
        _round(str(tmp_path / f"r{round_}"), seed + round_, mode)


def _round(path: str, seed: int, mode: str) -> None:
    rnd = random.Random(seed)
    compacted = rnd.random() < 0.5
    opts = dict(segment_bytes=16384, flush_ms=None, retention_check_ms=None,
                cleanup_policy="compact" if compacted else "delete",
                retention_bytes=None if compacted else 1 << 20,
                min_cleanable_dirty_ratio=0.0)
    log = Log.open(path, multi_writer=mode == "multi_writer", **opts)
    told: dict[int, list] = {t: [] for t in range(8)}
    errors: list = []
    stop = threading.Event()

    def keep(fn, name: str) -> None:
        while not stop.is_set():
            try:
                fn()
            except seglog.OffsetOutOfRangeError:
                pass            # retention passed a reader: it starts again
            except BaseException as e:
                errors.append((name, e, traceback.format_exc()))
                return

    nxt = [0]

    def read() -> None:
        # a consumer's reads: on from where the last pass ended (from the start again
        # once retention passed it), then a wait for more. A pass over the whole log
        # each time grew with the log (compaction keeps it all) and, never waiting,
        # held the interpreter lock against the appenders: one seed took 100-230 s
        last = nxt[0] - 1
        for m in log.iter(max(nxt[0], log.start_offset)):
            assert m.offset > last
            last = m.offset
        nxt[0] = last + 1
        log.wait(nxt[0], timeout=0.5)

    others = [threading.Thread(target=keep, args=(fn, name), name=name, daemon=True) for name, fn in (
        ("flush", log.flush), ("read", read),
        ("maintain", log.compact if compacted else log.enforce_retention))]
    appenders = [threading.Thread(target=_appender, name=f"appender {t}", daemon=True,
                                  args=(log, t, seed, 300, told[t], errors))
                 for t in range(8)]
    for th in others + appenders:
        th.start()
    for th in appenders:
        th.join(DEADLINE)
    stop.set()
    for th in others:
        th.join(DEADLINE)
    assert not any(th.is_alive() for th in others + appenders), _hung(others + appenders)
    assert not errors, "\n".join(e[2] for e in errors[:3])
    log.close()
    _check(path, told, compacted)


def test_appends_waiting_in_line_behind_a_stopped_writer_fail_together(tmp_path):
    """With several writers, a thread waiting for another process's lock holds this
    process's appends in line: when the lock does not come, they all fail as its
    call does (LogLockedError, nothing written), none waits twice as long."""
    import fcntl
    path = str(tmp_path / "log")
    log = Log.open(path, multi_writer=True, lock_timeout_ms=600, flush_ms=None)
    log.append(b"before")
    fd = os.open(os.path.join(path, ".writers"), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    results: list = []

    def one(i: int) -> None:
        t0 = time.monotonic()
        try:
            log.append(b"x%d" % i)
            results.append(("written", time.monotonic() - t0))
        except LogLockedError as e:
            results.append(("LogLockedError" if "nothing was written" in str(e) else str(e),
                            time.monotonic() - t0))
    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join(30)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    assert [r for r, _ in results] == ["LogLockedError"] * 6, results
    assert all(dt < 0.6 + 3.0 for _, dt in results), results
    assert log.append(b"after") == 1
    log.close()
    with Log.open(path, readonly=True) as r:
        assert [m.value for m in r.iter()] == [b"before", b"after"]


def test_a_close_beside_threads_in_line_refuses_them_cleanly(tmp_path):
    """Threads appending while another thread closes the log: each call either
    returns its offsets (and its records are there) or raises LogClosedError."""
    seed = _seed("close beside appenders")
    for round_ in range(5 * SCALE):
        path = str(tmp_path / f"r{round_}")
        log = Log.open(path, flush_ms=None, segment_bytes=4096)
        got: dict[int, list] = {t: [] for t in range(6)}
        bad: list = []

        def work(t: int) -> None:
            rnd = random.Random(f"{seed}-{round_}-{t}")
            for i in range(2000):
                v = value(t, i, rnd.choice([0, 100]))
                try:
                    got[t].append((log.append(v), [v]))
                except seglog.LogClosedError:
                    return
                except BaseException as e:
                    bad.append(e)
                    return
        threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
        for th in threads:
            th.start()
        # closed at a random instant: once some number of appends were acknowledged
        target = random.Random(seed + round_).randint(0, 3000)
        deadline = time.monotonic() + DEADLINE
        while sum(map(len, got.values())) < target and any(th.is_alive() for th in threads):
            assert time.monotonic() < deadline, "the appenders did not get going"
            threading.Event().wait(0.001)
        log.close()
        for th in threads:
            th.join(DEADLINE)
        assert not any(th.is_alive() for th in threads) and not bad, bad
        _check(path, got, compacted=False)



def test_an_append_whose_millisecond_passes_while_it_packs_the_cached_header(tmp_path):
    """``append()`` packs a one-record batch's checked fields once per millisecond and
    value length, in a cache the threads share. A thread that packs them for its
    millisecond while another thread has moved the cache to the next one must not
    leave its fields in the next one's cache: the next append of that length would
    be written with the old timestamp's checksum (a reader finds it corrupt). Made
    to happen exactly: the first pack (race point ``append.pack``) lets another
    thread append in a later millisecond before it stores what it packed."""
    log = Log.open(str(tmp_path / "log"), flush_ms=None, retention_check_ms=None,
                   **SYNTHETIC_CLOCK)
    t1 = 1_795_000_000_000
    other: list[int] = []
    hooked: list[bool] = []

    def another_thread_appends_5_ms_later() -> None:
        if not hooked:
            hooked.append(True)                    # once: the other thread packs too
            t = threading.Thread(target=lambda: other.append(
                log.append(b"y" * 10, timestamp=t1 + 5)))
            t.start()
            t.join(DEADLINE)
    with at("append.pack", another_thread_appends_5_ms_later):
        first = log.append(b"x" * 10, timestamp=t1)   # the other thread appends meanwhile
    assert hooked and other, "the append packed no header: the race was not forced"
    last = log.append(b"z" * 10, timestamp=t1 + 5)    # the same ms, the same length: cached
    log.close()
    with Log.open(str(tmp_path / "log"), readonly=True) as r:
        got = [(m.offset, m.value, m.timestamp) for m in r.iter()]   # checksums checked
    assert sorted(got) == sorted([(first, b"x" * 10, t1), (other[0], b"y" * 10, t1 + 5),
                                  (last, b"z" * 10, t1 + 5)])

"""Descriptor lifetime, threads sharing a log, readers across compaction and retention.

Every descriptor a log opens is closed by ``close()``, after any number of compaction
and retention passes; no descriptor is closed while another thread can still use it;
readers see exactly the writer's kept records after compaction or retention.
"""

from __future__ import annotations

import gc
import os
import random
import subprocess
import sys
import threading
import time

import pytest

import seglog
from seglog import LogClosedError, LogLockedError, OffsetOutOfRangeError, Record

from helpers import wait_for

SEED = int(os.environ.get("SEGLOG_SEED", "20261122"))


def _fds() -> dict[int, str]:
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            out[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            pass          # the listing's own descriptor, gone by now
    return out


def _fd_set() -> set[tuple[int, str]]:
    return set(_fds().items())


def _keyed(log: seglog.Log, rng: random.Random, n: int, keys: int) -> None:
    for _ in range(n // 50):
        log.append_batch([Record(b"v%d" % rng.randrange(1 << 30), b"k%d" % rng.randrange(keys))
                          for _ in range(50)])


def _compacting(path, segment_bytes: int) -> seglog.Log:
    """A writer that compacts whenever asked (no lag, no dirty ratio, no thread)."""
    return seglog.Log.open(path, segment_bytes=segment_bytes, cleanup_policy="compact",
                           min_cleanable_dirty_ratio=0.0, retention_check_ms=None)


def _kept(log: seglog.Log) -> set[tuple[int, bytes | None, bytes | None]]:
    return {(m.offset, m.key, m.value) for m in log.iter()}


@pytest.mark.parametrize("delay_ms", [0, 60_000])
def test_close_releases_every_descriptor_after_compaction_and_retention(tmp_path, delay_ms):
    print("seed", SEED)
    rng = random.Random(SEED)
    before = _fd_set()
    log = seglog.Log.open(tmp_path / "l", segment_bytes=4096, cleanup_policy="compact,delete",
                          retention_bytes=1000, min_cleanable_dirty_ratio=0.0,
                          file_delete_delay_ms=delay_ms, retention_check_ms=None)
    reader = seglog.Log.open(tmp_path / "l", readonly=True)
    for _ in range(6):
        _keyed(log, rng, 1000, 40)
        paused = log.iter()
        next(paused)                      # an iterator holding segments across the passes
        sum(1 for _ in reader.iter())     # the reader opens (and must drop) old segments
        log.read(log.start_offset)
        log.offset_for_time(0)
        log.compact()
        log.enforce_retention()
        try:
            list(paused)
        except OffsetOutOfRangeError:
            pass                          # retention passed it: its data is gone
        log.flush()
    assert log.segments[0].base_offset > 0, "retention ran"
    reader.close()
    log.close()
    after = _fd_set()
    assert after == before, f"leaked: {sorted(after - before)}; closed foreign: {sorted(before - after)}"


def test_replaced_segments_close_once_no_reader_holds_them(tmp_path):
    """Without close(): the descriptors of replaced segments do not pile up."""
    rng = random.Random(SEED)
    log = _compacting(tmp_path / "l", 4096)
    _keyed(log, rng, 1000, 20)
    log.compact()
    sum(1 for _ in log.iter())
    base = len(_fds())
    for _ in range(8):
        _keyed(log, rng, 1000, 20)
        log.compact()
        sum(1 for _ in log.iter())      # opens every current segment's file and indexes
    # each pass replaces the segments it read: their descriptors were closed, so the
    # count stays near that of the current segments (never 8 passes' worth)
    assert len(_fds()) <= base + 3 * (len(log.segments) + 2)
    log.close()


def test_iterator_paused_across_compaction_sees_kept_records(tmp_path):
    rng = random.Random(SEED)
    log = _compacting(tmp_path / "l", 4096)
    _keyed(log, rng, 3000, 30)
    before = _kept(log)
    it = log.iter()
    head = [next(it) for _ in range(10)]
    log.compact()
    kept = _kept(log)
    assert kept < before
    rest = [(m.offset, m.key, m.value) for m in it]
    # what it had read before the pass it may still yield; it skips no kept record,
    # invents none, repeats none
    offs = [r[0] for r in rest]
    assert offs == sorted(set(offs)) and offs[0] > head[-1].offset
    assert set(rest) <= before
    assert {r for r in kept if r[0] > head[-1].offset} <= set(rest)
    # an iterator started after the pass sees exactly the kept records
    assert [(m.offset, m.key, m.value) for m in log.iter()] == sorted(kept)
    log.close()


def test_readonly_reader_sees_exactly_kept_records_after_compaction(tmp_path):
    rng = random.Random(SEED)
    log = _compacting(tmp_path / "l", 4096)
    reader = seglog.Log.open(tmp_path / "l", readonly=True)
    for _ in range(4):
        _keyed(log, rng, 1500, 25)
        it = reader.iter()
        first = next(it)
        sum(1 for _ in reader.iter())          # binds every segment object
        log.compact()
        kept = _kept(log)
        assert _kept(reader) == kept
        rest = {(m.offset, m.key, m.value) for m in it}
        assert {r for r in kept if r[0] > first.offset} <= rest
        for off, key, value in sorted(kept)[::37]:
            m = next(iter(reader.read(off)))
            assert (m.offset, m.key, m.value) == (off, key, value)
        assert reader.offset_for_time(0) == min(kept)[0]
    reader.close()
    log.close()


def test_readonly_reader_after_retention_gets_offset_out_of_range(tmp_path):
    log = seglog.Log.open(tmp_path / "l", segment_bytes=2048, retention_bytes=8192,
                          file_delete_delay_ms=0, retention_check_ms=None)
    for i in range(400):
        log.append(b"x" * 40 + b"%d" % i)
    reader = seglog.Log.open(tmp_path / "l", readonly=True)
    it = reader.iter()
    next(it)
    start_before = reader.start_offset
    assert log.enforce_retention()
    with pytest.raises(OffsetOutOfRangeError):
        for _ in it:
            pass
    with pytest.raises(OffsetOutOfRangeError):
        reader.read(start_before)
    assert reader.offset_for_time(0) == log.start_offset
    assert [m.offset for m in reader.iter()] == list(range(log.start_offset, log.end_offset))
    reader.close()
    log.close()


_OTHER_READER = r"""
import sys, seglog
path = sys.argv[1]
r = seglog.Log.open(path, readonly=True)
it = r.iter()
next(it)
sys.stdout.write("ready\n"); sys.stdout.flush()
sys.stdin.readline()            # the writer compacts meanwhile
rest = sum(1 for _ in it)
for m in r.iter():
    sys.stdout.write(f"{m.offset} {m.key.hex()} {m.value.hex()}\n")
r.close()
"""


def test_reader_in_another_process_sees_kept_records_after_compaction(tmp_path):
    rng = random.Random(SEED)
    path = str(tmp_path / "l")
    log = _compacting(path, 4096)
    _keyed(log, rng, 3000, 30)
    log.flush()
    p = subprocess.Popen([sys.executable, "-c", _OTHER_READER, path], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "ready\n"
        log.compact()
        kept = _kept(log)
        out, err = p.communicate("go\n", timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    seen = set()
    for line in out.splitlines():
        off, k, v = line.split(" ")
        seen.add((int(off), bytes.fromhex(k), bytes.fromhex(v)))
    assert seen == kept
    log.close()


def test_close_waits_for_compaction_in_another_thread(tmp_path):
    rng = random.Random(SEED)
    log = _compacting(tmp_path / "l", 16384)
    _keyed(log, rng, 20000, 2000)
    errors: list[BaseException] = []
    started = threading.Event()

    def compact() -> None:
        started.set()
        try:
            log.compact()
        except LogClosedError:
            pass
        except BaseException as e:   # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=compact)
    t.start()
    assert started.wait(10)
    # close only once the compaction is under way: its first output file is there
    deadline = time.monotonic() + 30
    while not any(n.startswith(".seglog-cleaned.") for n in os.listdir(tmp_path / "l")):
        assert t.is_alive(), "the compaction ended before close() could overlap it"
        assert time.monotonic() < deadline, "the compaction never started writing"
    log.close()
    listing = sorted(os.listdir(tmp_path / "l"))
    t.join(30)
    assert not t.is_alive()
    assert not errors, errors
    time.sleep(0.2)     # not a synchronisation: a window in which nothing may happen
    assert sorted(os.listdir(tmp_path / "l")) == listing, "files changed after close() returned"
    with seglog.Log.open(tmp_path / "l") as again:
        assert again.recovery is None, "close() left a clean shutdown"


def test_threads_doing_everything_at_once(tmp_path):
    """append, batch, flush, read, iter, offset_for_time, compact, retention, close."""
    print("seed", SEED)
    log = seglog.Log.open(tmp_path / "l", segment_bytes=8192, cleanup_policy="compact,delete",
                          retention_bytes=200_000, min_cleanable_dirty_ratio=0.0,
                          file_delete_delay_ms=0, retention_check_ms=None, flush_ms=5)
    before_close = threading.Event()
    errors: list[tuple[str, BaseException]] = []
    closed = threading.Event()

    runs: dict[str, int] = {}

    def worker(name: str, seed: int, fn) -> None:
        rng = random.Random(seed)
        while not closed.is_set():
            try:
                fn(rng)
                runs[name] = runs.get(name, 0) + 1
            except LogClosedError:
                if not before_close.is_set():
                    errors.append((name, AssertionError("LogClosedError before close")))
                return
            except OffsetOutOfRangeError:
                pass          # retention passed the reader: allowed, it goes on
            except BaseException as e:   # noqa: BLE001 - every other error fails the test
                errors.append((name, e))
                return

    def append(rng):
        log.append(b"a%d" % rng.randrange(1000), key=b"k%d" % rng.randrange(100))

    def batch(rng):
        log.append_batch([Record(b"b", b"k%d" % rng.randrange(100)) for _ in range(20)])

    def read(rng):
        lo, hi = log.start_offset, log.end_offset
        ms = log.read(rng.randint(lo, hi))
        sum(1 for _ in ms)

    def iterate(rng):
        last = -1
        for m in log.iter(log.start_offset):
            assert m.offset > last
            last = m.offset

    def timed(rng):
        log.offset_for_time(rng.randrange(1 << 41))

    def write_to(rng):
        with open(os.devnull, "wb") as f:
            log.read(log.start_offset).write_to(f)

    jobs = [("append", append), ("batch", batch), ("flush", lambda r: log.flush()),
            ("read", read), ("iter", iterate), ("iter2", iterate), ("time", timed),
            ("write_to", write_to), ("compact", lambda r: log.compact()),
            ("retention", lambda r: log.enforce_retention())]
    threads = [threading.Thread(target=worker, args=(n, SEED + i, f), name=n)
               for i, (n, f) in enumerate(jobs)]
    for t in threads:
        t.start()
    # close once every job ran (each beside the others) and the log holds a thousand
    # messages
    deadline = time.monotonic() + 120
    try:
        while not (len(runs) == len(jobs) and log.end_offset > 1000):
            assert not errors, errors
            assert time.monotonic() < deadline, f"the jobs did not get going: {runs}"
            time.sleep(0.01)
    finally:
        # also when the wait failed: no thread may go on working the log under later tests
        before_close.set()
        log.close()
        closed.set()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors
    with seglog.Log.open(tmp_path / "l") as again:
        offs = [m.offset for m in again.iter()]
        assert offs == sorted(set(offs))
        assert again.end_offset > 1000


def test_close_is_not_held_off_by_threads_calling_in_a_loop(tmp_path):
    """Threads appending, flushing and compacting in loops, beside readers that keep
    the interpreter busy: close() waits for what is in flight, not for the loops to
    stop. Locks are not fair: a thread that lets go of one and calls again took it
    before the waiting close() was woken (on the code before, close waited past 30 s
    in three runs of four, and as long as the loops went on)."""
    log = seglog.Log.open(tmp_path / "l", flush_ms=None, segment_bytes=4096,
                          cleanup_policy="compact", min_cleanable_dirty_ratio=0.0,
                          retention_check_ms=None)
    errors: list[BaseException] = []

    def loop(fn) -> None:
        while True:
            try:
                fn()
            except LogClosedError:
                return
            except BaseException as e:   # noqa: BLE001 - every other error fails the test
                errors.append(e)
                return

    calls = [lambda: log.append(b"x" * 100, key=b"k"), log.flush, log.compact,
             lambda: sum(1 for _ in log.iter(log.start_offset))]
    threads = [threading.Thread(target=loop, args=(fn,), daemon=True)
               for fn in calls for _ in range(2)]
    for t in threads:
        t.start()
    wait_for(lambda: log.end_offset > 100, 60, "the appenders did not get going")
    closer = threading.Thread(target=log.close, daemon=True)
    began = time.monotonic()
    closer.start()
    closer.join(60)
    took = time.monotonic() - began
    print(f"close took {took:.2f} s")
    assert not closer.is_alive(), "close() was held off for 60 s by threads calling in a loop"
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads) and not errors, errors


def test_readonly_reader_through_many_compaction_and_retention_passes(tmp_path):
    """Readers that listed segments but did not open them, readers holding open
    segments, and readers in between, while the writer compacts and deletes."""
    print("seed", SEED)
    rng = random.Random(SEED)
    log = seglog.Log.open(tmp_path / "l", segment_bytes=3000, cleanup_policy="compact,delete",
                          retention_bytes=40_000, min_cleanable_dirty_ratio=0.0,
                          file_delete_delay_ms=0, retention_check_ms=None)
    readers = [seglog.Log.open(tmp_path / "l", readonly=True) for _ in range(3)]
    for rnd in range(30):
        _keyed(log, rng, rng.choice([100, 300, 600]), 15)
        r_listed, r_open, r_mixed = readers
        r_listed.start_offset                       # lists, opens nothing
        sum(1 for _ in r_open.iter())               # opens everything
        it = r_mixed.iter()
        next(it)
        if rng.random() < 0.5:
            log.compact()
        else:
            log.enforce_retention()
        kept = _kept(log)
        by_off = {r[0]: r for r in kept}
        for r in readers:
            assert r.offset_for_time(0) == min(by_off), f"round {rnd}"
            assert _kept(r) == kept, f"round {rnd}"
            for off in rng.sample(sorted(by_off), 5):
                m = next(iter(r.read(off)))
                assert (m.offset, m.key, m.value) == by_off[off], f"round {rnd}"
        offs = []
        try:
            offs = [m.offset for m in it]
        except OffsetOutOfRangeError:
            pass                  # retention passed the paused iterator
        assert offs == sorted(set(offs)), f"round {rnd}"
    for r in readers:
        r.close()
    log.close()


@pytest.mark.parametrize("op", ["retention", "compaction"])
def test_reader_listing_in_the_same_clock_tick_as_the_change(tmp_path, op):
    """A directory's mtime has a coarse clock (a few ms): a reader that listed it in
    the same tick as a retention or compaction pass must not trust its stale list."""
    rng = random.Random(SEED)
    log = seglog.Log.open(tmp_path / "l", segment_bytes=1500, cleanup_policy="compact,delete",
                          retention_bytes=6000, min_cleanable_dirty_ratio=0.0,
                          file_delete_delay_ms=0, retention_check_ms=None)
    reader = seglog.Log.open(tmp_path / "l", readonly=True)
    for rnd in range(40):
        _keyed(log, rng, 100, 10)
        reader.end_offset                     # list the directory...
        if op == "retention":                 # ...and change it within the same tick
            log.enforce_retention()
        else:
            log.compact()
        kept = _kept(log)
        assert reader.offset_for_time(0) == min(kept)[0], f"round {rnd}"
        assert _kept(reader) == kept, f"round {rnd}"
    reader.close()
    log.close()


def _same_mtime(path, st) -> None:
    """Put the directory's mtime back: what a change within one tick of a coarse
    file-system clock (1 s on HFS+, 2 s on FAT) looks like to a reader."""
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_reader_that_listed_but_did_not_open_survives_retention(tmp_path):
    path = tmp_path / "l"
    log = seglog.Log.open(path, segment_bytes=2048, retention_bytes=8192,
                          file_delete_delay_ms=0, retention_check_ms=None)
    for i in range(400):
        log.append(b"x" * 40 + b"%d" % i)
    reader = seglog.Log.open(path, readonly=True)     # lists the segments, opens none
    st = os.stat(path)
    assert log.enforce_retention()
    _same_mtime(path, st)
    assert reader.offset_for_time(0) == log.start_offset
    assert [m.offset for m in reader.iter()] == list(range(log.start_offset, log.end_offset))
    with pytest.raises(OffsetOutOfRangeError):
        reader.read(0)
    reader.close()
    log.close()


def test_reader_with_open_segments_sees_compaction_in_the_same_tick(tmp_path):
    rng = random.Random(SEED)
    path = tmp_path / "l"
    log = _compacting(path, 4096)
    _keyed(log, rng, 3000, 30)
    reader = seglog.Log.open(path, readonly=True)
    sum(1 for _ in reader.iter())          # every segment opened, sizes known
    st = os.stat(path)
    log.compact()
    _same_mtime(path, st)
    kept = _kept(log)
    by_off = {r[0]: r for r in kept}
    assert _kept(reader) == kept
    for off in sorted(by_off)[::11]:
        m = next(iter(reader.read(off)))
        assert (m.offset, m.key, m.value) == by_off[off]
    reader.close()
    log.close()


# -- a writer nobody references, a process that exits without close -----------------

def test_unreferenced_writer_releases_its_lock(tmp_path):
    path = tmp_path / "l"

    def use() -> None:
        log = seglog.Log.open(path, flush_ms=10, retention_check_ms=10)
        log.append(b"x")
        # the background threads have run: the timed flush and a retention check
        wait_for(lambda: log.flushed_offset == 1 and log.metrics()["retention_runs"] >= 1,
                 10, "the background passes", step=0.005)

    def reopened() -> bool:
        gc.collect()
        try:
            with seglog.Log.open(path) as again:
                assert again.end_offset == 1
        except LogLockedError:
            return False
        return True

    use()
    wait_for(reopened, 10, "an unreferenced writer to let go of the lock", step=0.05)


def test_jobs_of_unreferenced_writer_end(tmp_path):
    from seglog._runtime import scheduler as _scheduler

    def use() -> None:
        log = seglog.Log.open(tmp_path / "l", flush_ms=10, retention_check_ms=10)
        log.append(b"x")

    def pending() -> tuple[int, int]:
        gc.collect()
        return (_scheduler.pending("flush"), _scheduler.pending("maintenance"))

    before = pending()
    use()
    wait_for(lambda: pending() == before, 10, "the unreferenced writer's jobs to end", step=0.05)


def test_exit_without_close_while_background_threads_work(tmp_path):
    """A process that exits with a writer open must exit (daemon threads are frozen
    at interpreter exit, maybe holding a lock close() needs) and lose nothing."""
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


def test_a_loop_of_compactions_does_not_starve_retention(tmp_path):
    # a thread calling compact() in a loop let go of the maintenance lock and took it
    # again before a waiting enforce_retention() was woken, for minutes (a plain lock
    # is not fair): the lock is taken in turn, so retention waits one pass at most
    log = seglog.Log.open(tmp_path / "l", segment_bytes=4096, cleanup_policy="compact,delete",
                          retention_bytes=1 << 30, min_cleanable_dirty_ratio=0.0,
                          retention_check_ms=None, flush_ms=None, file_delete_delay_ms=0)
    for i in range(600):
        log.append(b"v%d" % i + b"." * 100, key=b"k%d" % (i % 50))
    stop = threading.Event()
    passes = [0]

    def loop() -> None:
        while not stop.is_set():
            log.compact()
            passes[0] += 1
    t = threading.Thread(target=loop)
    t.start()
    try:
        wait_for(lambda: passes[0] >= 2, 60, "the compactions did not get going")
        before = passes[0]
        log.enforce_retention()
        assert passes[0] - before <= 2, f"retention waited {passes[0] - before} passes"
    finally:
        stop.set()
        t.join(60)
        assert not t.is_alive()
        log.close()

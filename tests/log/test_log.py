"""The Log API, behaviour by behaviour."""

from __future__ import annotations

import array
import asyncio
import ctypes
import math
import os
import random
import threading
import time

import pytest

import seglog
from seglog import InvalidConfigError, Log, LogConfig, MessageTooLargeError, Record
from seglog.testing import abandon

from clock import SYNTHETIC_CLOCK
from helpers import wait_for

# records here carry made-up timestamps near 0 ms


def values(log: Log, start: int | None = None, end: int | None = None) -> list:
    return [m.value for m in log.iter(start, end)]


def test_open_creates_directory_and_context_manager_closes(logdir):
    with Log.open(logdir, **SYNTHETIC_CLOCK) as log:
        assert os.path.isdir(logdir)
        assert (log.start_offset, log.end_offset, log.flushed_offset) == (0, 0, 0)
        assert len(log.segments) == 1
    assert log.closed
    with pytest.raises(seglog.LogClosedError):
        log.append(b"x")
    log.close()  # idempotent


def test_append_returns_contiguous_offsets_and_reads_back(logdir):
    with Log.open(logdir, **SYNTHETIC_CLOCK) as log:
        assert [log.append(b"m%d" % i) for i in range(5)] == list(range(5))
        r = log.append_batch([b"a", b"b", Record(b"c", key=b"k")])
        assert r == range(5, 8)
        assert log.end_offset == 8
        assert values(log) == [b"m0", b"m1", b"m2", b"m3", b"m4", b"a", b"b", b"c"]
        assert [m.offset for m in log.iter()] == list(range(8))


def test_append_batch_empty_and_generators(logdir):
    with Log.open(logdir, **SYNTHETIC_CLOCK) as log:
        assert log.append_batch([]) == range(0, 0)
        assert log.append_batch(b"%d" % i for i in range(3)) == range(0, 3)
        assert values(log) == [b"0", b"1", b"2"]


def test_message_fields_round_trip(logdir):
    with Log.open(logdir, **SYNTHETIC_CLOCK) as log:
        log.append(b"v1", key=b"k1", timestamp=1234, headers=[("h", b"1"), ("h", b"2"), ("é", b"")])
        log.append(None, key=b"k1", timestamp=1235)           # tombstone
        log.append(b"", timestamp=1236)                        # empty, not None
        log.append(bytearray(b"ba"), key=memoryview(b"mk"))    # bytes-like inputs
        m0, m1, m2, m3 = log.iter()
        assert (m0.offset, m0.timestamp, m0.key, m0.value) == (0, 1234, b"k1", b"v1")
        assert m0.headers == (("h", b"1"), ("h", b"2"), ("é", b""))
        assert m1.value is None and m1.key == b"k1"
        assert m2.value == b"" and m2.key is None and m2.headers == ()
        assert m3.value == b"ba" and m3.key == b"mk" and type(m3.value) is bytes
        assert isinstance(m0, seglog.Message) and m0 == (0, 1234, b"k1", b"v1", m0.headers)
        assert "offset=0" in repr(m0)


def test_default_timestamp_is_now(logdir):
    with Log.open(logdir, **SYNTHETIC_CLOCK) as log:
        before = int(time.time() * 1000)
        log.append(b"x")
        log.append_batch([b"y", Record(b"z")])
        after = int(time.time() * 1000)
        assert all(before <= m.timestamp <= after + 1 for m in log.iter())


def test_read_contract(logdir):
    with Log.open(logdir, **SYNTHETIC_CLOCK) as log:
        log.append_batch([b"%03d" % i for i in range(100)])
        ms = log.read(0)
        assert isinstance(ms, seglog.MessageSet)
        assert len(ms) == 100 and ms.first_offset == 0 and ms.next_offset == 100
        # the batch holding offset 40 starts at 0: messages below 40 are skipped
        ms = log.read(40)
        assert [m.offset for m in ms] == list(range(40, 100)) and len(ms) == 60
        assert ms.values()[0] == b"040"
        # at end_offset: empty
        empty = log.read(100)
        assert len(empty) == 0 and list(empty) == [] and empty.next_offset == 100
        assert empty.first_offset is None and empty.size_in_bytes == 0
        with pytest.raises(seglog.OffsetOutOfRangeError):
            log.read(101)
        with pytest.raises(seglog.OffsetOutOfRangeError):
            log.read(-1)


def test_read_returns_at_least_one_whole_message_and_respects_max_bytes(logdir):
    with Log.open(logdir, **SYNTHETIC_CLOCK) as log:
        big = os.urandom(50_000)
        log.append(big)
        for i in range(20):
            log.append(b"x" * 100)
        ms = log.read(0, max_bytes=10)
        assert ms.values() == [big]
        ms = log.read(1, max_bytes=500)
        assert 1 <= len(ms) <= 4 and ms.first_offset == 1
        assert ms.size_in_bytes <= 500
        # paging with next_offset visits every message once
        seen, off = [], 0
        while off < log.end_offset:
            ms = log.read(off, max_bytes=700)
            seen.extend(m.offset for m in ms)
            off = ms.next_offset
        assert seen == list(range(21))


def test_iter_ranges_and_validation(logdir):
    with Log.open(logdir, segment_bytes=2048, **SYNTHETIC_CLOCK) as log:
        log.append_batch([b"%d" % i for i in range(300)])
        for i in range(300, 600):
            log.append(b"%d" % i)
        assert len(log.segments) > 3
        assert values(log, 250, 260) == [b"%d" % i for i in range(250, 260)]
        assert [m.offset for m in log.iter(590)] == list(range(590, 600))
        assert values(log, 600) == []
        assert values(log, 10, 10) == []
        with pytest.raises(seglog.OffsetOutOfRangeError):
            log.iter(601)
        with pytest.raises(TypeError):
            log.iter("0")  # type: ignore[arg-type]
        assert [m.offset for m in log] == list(range(600))


def test_iter_across_read_chunks_and_batches_larger_than_a_chunk(logdir):
    # iter() reads a segment 1 MiB at a time: batches straddle the chunk edges, and a
    # batch larger than a chunk takes the careful path
    rnd = random.Random(7)
    model = []
    with Log.open(logdir, max_message_bytes=4 << 20, **SYNTHETIC_CLOCK) as log:
        for i in range(60):
            if i % 20 == 19:
                batch = [rnd.randbytes(rnd.choice((1 << 20, 3 << 19)))]
            else:
                batch = [rnd.randbytes(rnd.randrange(1, 9000)) for _ in range(rnd.randrange(1, 40))]
            log.append_batch(batch)
            model.extend(batch)
        assert len(log.segments) == 1 and log.segments[0].size > 4 << 20
        for start in (0, 1, len(model) // 2, len(model) - 1, len(model)):
            got = [(m.offset, m.value) for m in log.iter(start)]
            assert got == list(enumerate(model))[start:]
        assert [m.value for m in log.iter(5, len(model) - 5)] == model[5:-5]
    with Log.open(logdir, readonly=True) as reader:
        assert [m.value for m in reader.iter()] == model


def test_roll_by_size_and_segment_names(logdir):
    with Log.open(logdir, segment_bytes=4096, **SYNTHETIC_CLOCK) as log:
        for i in range(200):
            log.append(os.urandom(100))
        segs = log.segments
        assert len(segs) > 3
        assert all(s.size <= 4096 for s in segs)
        for s in segs:
            assert os.path.basename(s.path) == f"{s.base_offset:020d}.log"
        assert [s.base_offset for s in segs] == sorted(s.base_offset for s in segs)
        # sealed segments are cut back to their data
        for s in segs[:-1]:
            assert os.path.getsize(s.path) == s.size
        assert [m.offset for m in log.iter()] == list(range(200))


def test_roll_by_time(logdir):
    with Log.open(logdir, segment_ms=1000, **SYNTHETIC_CLOCK) as log:
        log.append(b"a", timestamp=10_000)
        log.append(b"b", timestamp=10_500)
        assert len(log.segments) == 1
        log.append(b"c", timestamp=11_001)
        assert len(log.segments) == 2 and log.segments[-1].base_offset == 2


def test_roll_when_index_full(logdir):
    with Log.open(logdir, index_interval_bytes=64, max_index_bytes=24, **SYNTHETIC_CLOCK) as log:
        for i in range(40):
            log.append(os.urandom(50))
        assert len(log.segments) > 2
        assert [m.offset for m in log.iter()] == list(range(40))


def test_append_batch_cuts_large_input_into_batches(logdir):
    with Log.open(logdir, max_message_bytes=1000, segment_bytes=4096, **SYNTHETIC_CLOCK) as log:
        r = log.append_batch([os.urandom(300) for _ in range(50)])
        assert r == range(0, 50)
        assert len(log.segments) > 2
        assert [m.offset for m in log.iter()] == list(range(50))


def test_offset_for_time(logdir):
    with Log.open(logdir, segment_bytes=2048, index_interval_bytes=128, **SYNTHETIC_CLOCK) as log:
        assert log.offset_for_time(0) is None
        for i in range(500):
            log.append(b"e%d" % i, timestamp=1000 + 10 * i)
        assert log.offset_for_time(0) == 0
        assert log.offset_for_time(1000) == 0
        assert log.offset_for_time(1001) == 1
        assert log.offset_for_time(3000) == 200
        assert log.offset_for_time(1000 + 10 * 499) == 499
        assert log.offset_for_time(10**12) is None
        # timestamps that go backwards: the first offset whose timestamp is >= target
        log.append(b"late", timestamp=500)
        log.append(b"later", timestamp=10**6)
        assert log.offset_for_time(10**6) == 501


def test_offset_for_time_in_batches_with_per_record_timestamps(logdir):
    with Log.open(logdir, **SYNTHETIC_CLOCK) as log:
        log.append_batch([Record(b"a", timestamp=5), Record(b"b", timestamp=50),
                          Record(b"c", timestamp=20)])
        assert log.offset_for_time(6) == 1
        assert log.offset_for_time(21) == 1
        assert log.offset_for_time(51) is None


def test_flush_returns_durable_offset(logdir):
    with Log.open(logdir, flush_ms=None, **SYNTHETIC_CLOCK) as log:
        assert log.flush() == 0
        log.append_batch([b"a", b"b"])
        assert log.flushed_offset == 0
        assert log.flush() == 2 == log.flushed_offset


def test_flush_messages_policy(logdir, monkeypatch):
    with Log.open(logdir, flush_ms=None, flush_messages=3, **SYNTHETIC_CLOCK) as log:
        log.append(b"1")
        log.append(b"2")
        assert log.flushed_offset == 0
        log.append(b"3")
        assert log.flushed_offset == 3
        log.append_batch([b"4", b"5", b"6", b"7"])
        assert log.flushed_offset == 7


def test_flush_ms_is_honoured_when_the_writer_goes_idle(logdir):
    with Log.open(logdir, flush_ms=50, **SYNTHETIC_CLOCK) as log:
        log.append(b"x")
        wait_for(lambda: log.flushed_offset >= 1, 5, "the timed flush", step=0.01)
        assert log.flushed_offset == 1


def test_wait_wakes_on_append_and_times_out(logdir):
    with Log.open(logdir, **SYNTHETIC_CLOCK) as log:
        assert log.wait(0, timeout=0.01) is False
        got = []
        started, done = threading.Event(), threading.Event()

        def waiter():
            started.set()
            got.append(log.wait(0, timeout=10))
            done.set()
        t = threading.Thread(target=waiter)
        t.start()
        assert started.wait(5)
        # nothing appended: the waiter must still be blocked, with no result
        assert not done.wait(0.3) and t.is_alive() and got == []
        log.append(b"x")
        assert done.wait(5)
        t.join(5)
        assert got == [True]
        # it woke from waiting: one that reached wait() after the append never waits
        assert log.metrics()["wait_wakeups"] == 1
        assert log.wait(0) is True


def test_wait_raises_when_log_closes(logdir):
    log = Log.open(logdir, **SYNTHETIC_CLOCK)
    errors = []

    def waiter():
        try:
            log.wait(5, timeout=10)
        except seglog.LogClosedError as e:
            errors.append(e)
    t = threading.Thread(target=waiter)
    t.start()
    t.join(0.3)                         # nothing appended: the waiter is still blocked
    assert t.is_alive() and errors == []
    log.close()
    t.join(5)
    assert len(errors) == 1


def test_reopen_keeps_everything_and_continues_offsets(logdir):
    with Log.open(logdir, segment_bytes=2048, **SYNTHETIC_CLOCK) as log:
        log.append_batch([b"%d" % i for i in range(100)])
        log.append(b"k", key=b"key", headers=[("a", b"b")])
    with Log.open(logdir, segment_bytes=2048, **SYNTHETIC_CLOCK) as log:
        assert log.end_offset == 101
        assert log.append(b"next") == 101
        assert values(log)[:3] == [b"0", b"1", b"2"] and values(log)[-2:] == [b"k", b"next"]


def test_reopen_after_unclean_close_recovers(logdir):
    log = Log.open(logdir, segment_bytes=2048, **SYNTHETIC_CLOCK)
    log.append_batch([b"%d" % i for i in range(100)])
    log.append(b"tail")
    abandon(log)        # drop it on the floor: no close(), as a crash would
    with Log.open(logdir, segment_bytes=2048, **SYNTHETIC_CLOCK) as again:
        assert again.end_offset == 101
        assert values(again)[-1] == b"tail"


def test_readonly_reader_sees_writer_progress(logdir):
    with Log.open(logdir, segment_bytes=2048, **SYNTHETIC_CLOCK) as w:
        w.append_batch([b"a%d" % i for i in range(10)])
        r = Log.open(logdir, readonly=True)
        assert r.end_offset == 10 and values(r)[0] == b"a0"
        for i in range(200):
            w.append(b"b%d" % i)
        assert r.end_offset == 210
        assert values(r)[-1] == b"b199"
        assert len(r.segments) == len(w.segments)
        with pytest.raises(seglog.ReadOnlyError):
            r.append(b"no")
        with pytest.raises(seglog.ReadOnlyError):
            r.flush()
        r.close()


def test_threads_append_and_read_concurrently(logdir):
    with Log.open(logdir, segment_bytes=8192, **SYNTHETIC_CLOCK) as log:
        n_threads, per = 4, 300
        stop = threading.Event()
        bad: list = []

        def writer(t):
            for i in range(per):
                if i % 3:
                    log.append(b"t%d-%d" % (t, i))
                else:
                    log.append_batch([b"t%d-%d" % (t, i)])

        def reader():
            while not stop.is_set():
                end = log.end_offset
                offs = [m.offset for m in log.iter(0, end)]
                if offs != list(range(end)):
                    bad.append((end, len(offs)))
        readers = [threading.Thread(target=reader) for _ in range(2)]
        writers = [threading.Thread(target=writer, args=(t,)) for t in range(n_threads)]
        for t in readers + writers:
            t.start()
        for t in writers:
            t.join()
        stop.set()
        for t in readers:
            t.join()
        assert not bad
        got = values(log)
        assert len(got) == n_threads * per
        for t in range(n_threads):   # each thread's messages in its own order
            mine = [v for v in got if v.startswith(b"t%d-" % t)]
            assert mine == [b"t%d-%d" % (t, i) for i in range(per)]


def test_segments_are_public_objects(logdir):
    with Log.open(logdir, segment_bytes=2048, **SYNTHETIC_CLOCK) as log:
        for i in range(100):
            log.append(b"x" * 50, timestamp=1000 + i)
        seg = log.segments[0]
        assert isinstance(seg, seglog.Segment)
        assert seg.max_timestamp >= 1000 and seg.size > 0
        assert isinstance(seg.index, seglog.OffsetIndex)
        assert isinstance(seg.time_index, seglog.TimeIndex)
        ms = seg.read(seg.base_offset, 100)
        assert ms.first_offset == seg.base_offset
        assert "Segment" in repr(seg) and "seglog.Log" in repr(log)


def test_compression_lz4_round_trip(logdir):
    lines = [b'{"path":"/api/v1/items/%d","status":200}' % (i % 7) for i in range(1000)]
    with Log.open(logdir, compression="lz4", **SYNTHETIC_CLOCK) as log:
        log.append_batch(lines)
        log.append(b"single")
        log.append(b"keyed", key=b"k")
        assert values(log) == lines + [b"single", b"keyed"]
        assert sum(s.size for s in log.segments) < 0.5 * sum(map(len, lines))


# -- lz4 only where it pays ------------------------------------------------------------

def _access_lines(n: int, seed: int = 7) -> list[bytes]:
    """Access-log lines like examples/access_log.py's (about 180 bytes)."""
    rnd = random.Random(seed)
    paths = ["/", "/login", "/cart", "/api/v1/items/%d", "/api/v1/users/%d", "/static/app.%d.js"]
    out = []
    for _ in range(n):
        path = rnd.choice(paths).replace("%d", str(rnd.randint(1, 50_000)))
        out.append(('{"ip":"10.%d.%d.%d","method":"%s","path":"%s","status":%d,"bytes":%d,'
                    '"ms":%d,"ua":"%s","req":"%016x"}' % (
                        rnd.randint(0, 255), rnd.randint(0, 255), rnd.randint(1, 254),
                        rnd.choice(["GET"] * 8 + ["POST", "PUT"]), path,
                        rnd.choice([200] * 40 + [201, 304, 404, 500]), rnd.randint(0, 60_000),
                        rnd.randint(1, 900), rnd.choice(["Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0",
                                                          "curl/8.5.0", "python-requests/2.32.3"]),
                        rnd.getrandbits(64))).encode())
    return out


def _codecs(log: Log) -> list[tuple[int, int]]:
    """(record count, codec bits) of every batch, in order."""
    from seglog import codec
    return [(h.record_count, h.attributes & codec.CODEC_MASK)
            for s in log.segments for _, h in s.batches()]


@pytest.mark.parametrize("kind", ["random", "text"])
def test_lz4_appends_of_one_record_are_stored_as_without_compression(tmp_path, kind):
    """append() writes one-record batches, which lz4 never makes smaller: the files
    are byte for byte what the log without compression holds."""
    rnd = random.Random(3)
    msgs = ([rnd.randbytes(200) for _ in range(300)] if kind == "random"
            else _access_lines(300))
    files = {}
    for comp in (None, "lz4"):
        path = tmp_path / str(comp)
        with Log.open(path, compression=comp, segment_bytes=16 << 10, **SYNTHETIC_CLOCK) as log:
            for i, m in enumerate(msgs):
                log.append(m, timestamp=1000 + i)
            log.append(b"keyed", key=b"k", timestamp=2000)      # the careful path, one record
            log.append_batch([Record(msgs[0], timestamp=2001)])
            assert values(log) == msgs + [b"keyed", msgs[0]]
            assert {c for _, c in _codecs(log)} == {0}
            assert len(log.segments) > 2
        files[comp] = {n: (path / n).read_bytes() for n in os.listdir(path) if n.endswith(".log")}
    assert files["lz4"] == files[None]


def test_lz4_mixed_batches_in_one_segment(tmp_path):
    """Compressed and plain batches side by side: every read path gives them back."""
    lines = _access_lines(200)
    noise = [os.urandom(150) for _ in range(3)]
    with Log.open(tmp_path / "l", compression="lz4", **SYNTHETIC_CLOCK) as log:
        log.append_batch(lines[:50])                          # compressed
        log.append(lines[50])                                 # one record: plain
        log.append_batch([lines[51]])                         # one record: plain
        log.append_batch(noise)                               # nothing to gain: plain
        log.append_batch([Record(v, key=b"k%d" % i, headers=[("h", b"x")])
                          for i, v in enumerate(lines[52:100])])      # compressed
        log.append(b"tiny")
        log.append_batch(lines[100:102])                      # two lines: compressed
        want = lines[:52] + noise + lines[52:100] + [b"tiny"] + lines[100:102]
        assert _codecs(log) == [(50, 1), (1, 0), (1, 0), (3, 0), (48, 1), (1, 0), (2, 1)]
        assert len(log.segments) == 1
        from seglog import codec
        _, first = next(iter(log.segments[0].batches()))
        assert first.size <= 0.5 * sum(map(len, lines[:50]))
        assert values(log) == want
        for off in range(len(want)):
            assert next(iter(log.read(off))).value == want[off]
            assert [m.value for m in log.iter(off, off + 2)] == want[off:off + 2]
    for ro in (True, False):
        with Log.open(tmp_path / "l", readonly=ro) as log:
            assert values(log) == want


def test_lz4_on_disk_sizes(tmp_path):
    """append() of 200-byte messages: no more bytes than without compression;
    append_batch of 50 access-log lines: at most half."""
    rnd = random.Random(5)
    msgs = [rnd.randbytes(200) for _ in range(500)]
    lines = _access_lines(1000)

    def size(comp, write):
        path = tmp_path / f"{comp}-{write.__name__}"
        with Log.open(path, compression=comp, **SYNTHETIC_CLOCK) as log:
            write(log)
        return sum(os.path.getsize(path / n) for n in os.listdir(path) if n.endswith(".log"))

    def singles(log):
        for m in msgs:
            log.append(m)

    def fifties(log):
        for i in range(0, len(lines), 50):
            log.append_batch(lines[i:i + 50])
    assert size("lz4", singles) <= size(None, singles)
    assert size("lz4", fifties) <= 0.5 * size(None, fifties)


def test_a_config_built_directly_is_checked_as_open_checks_it(tmp_path):
    """``LogConfig`` validates in its constructor: the same typed error as ``Log.open``."""
    with pytest.raises(InvalidConfigError) as built:
        LogConfig(segment_bytes=-1)
    with pytest.raises(InvalidConfigError) as opened:
        Log.open(str(tmp_path / "log"), segment_bytes=-1)
    assert str(built.value) == str(opened.value)
    assert not (tmp_path / "log").exists()          # refused before anything was made
    with pytest.raises(InvalidConfigError):
        LogConfig(cleanup_policy="keep")
    assert LogConfig(segment_bytes=4096).segment_bytes == 4096


def test_an_iterator_keeps_its_unreferenced_log_open(logdir):
    """``Log.open(p).iter()``: nothing but the iterator references the Log, which the
    collector would close; the iterator keeps it alive to the end."""
    with Log.open(logdir, segment_bytes=1024, **SYNTHETIC_CLOCK) as w:
        w.append_batch([b"x" * 100] * 50)
    assert sum(1 for _ in Log.open(logdir, readonly=True).iter()) == 50
    assert sum(1 for _ in iter(Log.open(logdir, readonly=True))) == 50


# -- edges: empty readers, wait()'s arguments, null values, buffers, header framing ---

def test_a_readonly_reader_may_open_a_directory_no_writer_opened_yet(tmp_path):
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


def test_wait_takes_infinite_and_zero_timeouts_and_refuses_nan(tmp_path):
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


def test_active_segment_next_offset_follows_every_append(tmp_path):
    """append()'s fast path used to update only the segment's size: after 5 appends
    end_offset was 5 and the active segment's next_offset 2."""
    with seglog.Log.open(tmp_path / "l", index_interval_bytes=1 << 20) as log:
        for i in range(5):
            log.append(b"x")
            assert log.segments[-1].next_offset == log.end_offset == i + 1
        log.append_batch([b"a", b"b"])
        assert log.segments[-1].next_offset == log.end_offset == 7

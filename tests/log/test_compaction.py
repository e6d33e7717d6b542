"""Compaction: latest record per key, tombstones with a horizon, atomic swaps, holes."""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seglog
from seglog import Log, Record, cleaner, codec, repair
from seglog.testing import abandon

from clock import SYNTHETIC_CLOCK

# records here carry made-up timestamps near 0 ms

DAY = 86_400_000
CFG = dict(segment_bytes=2048, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0,
           flush_ms=None, index_interval_bytes=256)


def model_after(records: list[tuple[int, bytes | None, bytes | None]], active_base: int,
                now: int, horizon_passed: bool) -> list[tuple]:
    """Latest record per key below the active segment (tombstones unless expired),
    everything from the active segment on."""
    latest = {}
    for off, k, v in records:
        if off < active_base and k is not None:
            latest[k] = off
    out = []
    for off, k, v in records:
        if off >= active_base:
            out.append((off, k, v))
        elif k is not None and latest[k] == off and not (v is None and horizon_passed):
            out.append((off, k, v))
    return out


ops = st.lists(st.tuples(st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b"d", b"e"])),
                         st.one_of(st.none(), st.binary(min_size=1, max_size=120))),
               min_size=1, max_size=250)


@given(ops)
@settings(max_examples=40, deadline=None)
def test_compaction_matches_model(tmp_path_factory, entries):
    path = str(tmp_path_factory.mktemp("c") / "log")
    with Log.open(path, **CFG, **SYNTHETIC_CLOCK) as log:
        records = []
        for k, v in entries:
            off = log.append(v, key=k, timestamp=1000 + len(records))
            records.append((off, k, v))
        active_base = log.segments[-1].base_offset
        log.compact(now_ms=10_000)
        got = [(m.offset, m.key, m.value) for m in log.iter()]
        assert got == model_after(records, active_base, 10_000, False)
        assert log.end_offset == len(records)
        # offsets kept their values: reading any offset gives the next kept record
        for off, _, _ in records[::7]:
            ms = log.read(off)
            first = ms.first_offset
            assert first is None or first >= off
        # later, past the tombstones' horizon
        log.compact(now_ms=10_000 + 2 * DAY)
        assert [(m.offset, m.key, m.value) for m in log.iter()] == \
            model_after(records, active_base, 0, True)
    with Log.open(path, **CFG, **SYNTHETIC_CLOCK) as again:      # the result survives a reopen
        assert [(m.offset, m.key, m.value) for m in again.iter()] == \
            model_after(records, active_base, 0, True)


def append_keyed(log: Log, n: int, keys: int = 20, start_ts: int = 1000) -> list[tuple]:
    """Append n records ``v<i>`` over ``keys`` keys (``k<i % keys>``), timestamps from
    ``start_ts`` up; their (offset, key, value)."""
    recs = []
    for i in range(n):
        k = b"k%d" % (i % keys)
        off = log.append(b"v%d" % i, key=k, timestamp=start_ts + i)
        recs.append((off, k, b"v%d" % i))
    return recs


def test_policy_delete_does_not_compact(logdir):
    with Log.open(logdir, segment_bytes=2048, **SYNTHETIC_CLOCK) as log:
        append_keyed(log, 300)
        before = [m for m in log.iter()]
        stats = log.compact()
        assert stats.skipped and "cleanup_policy" in stats.skipped
        assert [m for m in log.iter()] == before


def test_keyless_records_dropped_and_active_untouched(logdir):
    with Log.open(logdir, **CFG, **SYNTHETIC_CLOCK) as log:
        for i in range(200):
            log.append(b"keyless %d" % i)
        log.append(b"keyed", key=b"k")
        active = log.segments[-1].base_offset
        log.compact()
        got = [m.offset for m in log.iter()]
        assert all(o >= active for o in got)
        assert got[-1] == 200


def test_dirty_ratio_and_lag_are_honoured(logdir):
    with Log.open(logdir, **{**CFG, "min_cleanable_dirty_ratio": 0.5,
                             "min_compaction_lag_ms": 5000}, **SYNTHETIC_CLOCK) as log:
        append_keyed(log, 400, keys=400, start_ts=100_000)
        # every segment is younger than the lag: nothing cleanable
        stats = log.compact(now_ms=100_500)
        assert stats.skipped
        stats = log.compact(now_ms=1_000_000)
        assert stats.skipped is None and stats.records_kept > 300   # distinct keys stay
        append_keyed(log, 60, keys=5, start_ts=1_000_000)   # a little new dirt: ratio below 0.5
        stats = log.compact(now_ms=2_000_000)
        assert stats.skipped and "ratio" in stats.skipped


def test_small_buffer_cleans_in_several_passes(logdir):
    with Log.open(logdir, **{**CFG, "cleaner_buffer_bytes": 1024}, **SYNTHETIC_CLOCK) as log:
        recs = []
        for i in range(600):
            k = b"key-%d" % i            # all distinct: the map fills quickly
            recs.append((log.append(b"v", key=k, timestamp=1000 + i), k))
        s1 = log.compact()
        assert s1.skipped is None and s1.dirty_end_offset < log.segments[-1].base_offset
        s2 = log.compact()
        assert s2.first_dirty_offset == s1.dirty_end_offset
        assert [m.offset for m in log.iter()] == [o for o, _ in recs]   # distinct keys: all kept


def test_offset_map_memory_and_semantics():
    m = cleaner.OffsetMap(10 << 20)
    for i in range(5000):
        assert m.put(b"k%d" % (i % 1000), i)
    assert m.size == 1000
    assert m.get(b"k7") == 4007 and m.get(b"absent") == -1
    assert m.put(b"k7", 5) and m.get(b"k7") == 4007   # never goes back
    assert m.memory_bytes / m.size <= 32
    small = cleaner.OffsetMap(24 * 10)
    results = [small.put(b"%d" % i, i) for i in range(20)]
    assert False in results and small.full


def test_reads_across_holes(logdir):
    with Log.open(logdir, **CFG, **SYNTHETIC_CLOCK) as log:
        recs = append_keyed(log, 400, keys=5)
        log.compact()
        kept = [m.offset for m in log.iter()]
        hole = next(o for o in range(400) if o not in kept)
        ms = log.read(hole)
        assert ms.first_offset > hole
        assert log.offset_for_time(1000) == kept[0]
        assert [m.offset for m in log.iter(hole)] == [o for o in kept if o >= hole]


def test_interrupted_swap_rolls_forward(logdir, monkeypatch):
    with Log.open(logdir, **CFG, **SYNTHETIC_CLOCK) as log:
        recs = append_keyed(log, 400, keys=200)       # kept data for more than one group
        active = log.segments[-1].base_offset
        real = cleaner.swap_in
        calls = []

        def crash_after_manifest(directory, base, end):
            calls.append(base)
            if len(calls) == 2:
                raise KeyboardInterrupt("simulated crash after the commit point")
            return real(directory, base, end)
        monkeypatch.setattr(cleaner, "swap_in", crash_after_manifest)
        with pytest.raises(KeyboardInterrupt):
            log.compact()
        monkeypatch.setattr(cleaner, "swap_in", real)
        abandon(log)                 # "crash": drop the writer without closing
    names = os.listdir(logdir)
    assert (any(n.startswith(".seglog-swap.") for n in names)
            and any(n.startswith(".seglog-cleaned.") for n in names))
    with Log.open(logdir, **CFG, **SYNTHETIC_CLOCK) as log:
        names = os.listdir(logdir)
        assert not any(n.startswith((".seglog-swap.", ".seglog-cleaned.")) for n in names)
        got = [(m.offset, m.key, m.value) for m in log.iter()]
        # every key's latest value is there; the rolled-forward group is compacted
        latest = {}
        for off, k, v in recs:
            latest[k] = (off, k, v)
        for r in latest.values():
            assert r in got
        assert [o for o, _, _ in got] == sorted({o for o, _, _ in got})
        assert all(o >= active or (o, k, v) in recs for o, k, v in got)


def test_uncommitted_cleaned_files_are_dropped(logdir):
    with Log.open(logdir, **CFG, **SYNTHETIC_CLOCK) as log:
        append_keyed(log, 300)
        before = [m for m in log.iter()]
        seg = log.segments[0]
    junk = os.path.join(os.path.dirname(seg.path), ".seglog-cleaned." + os.path.basename(seg.path))
    with open(junk, "wb") as f:
        f.write(b"partial")
    with Log.open(logdir, **CFG, **SYNTHETIC_CLOCK) as log:
        assert not os.path.exists(junk)
        assert [m for m in log.iter()] == before


def test_readonly_reader_during_compaction(logdir):
    with Log.open(logdir, **CFG, **SYNTHETIC_CLOCK) as log:
        recs = append_keyed(log, 500, keys=10)
        r = Log.open(logdir, readonly=True)
        it = r.iter()
        first = [next(it) for _ in range(50)]
        log.compact()
        rest = list(it)
        # old data where the reader already was, compacted data after: offsets ascend,
        # every message is the one written at its offset, no latest value is lost
        got = first + rest
        offs = [m.offset for m in got]
        assert offs == sorted(set(offs)) and offs[:50] == list(range(50))
        assert all((m.offset, m.key, m.value) == recs[m.offset] for m in got)
        latest = {k: o for o, k, _ in recs}
        assert set(latest.values()) <= set(offs)
        fresh = [m.offset for m in r.iter()]
        assert fresh == [m.offset for m in log.iter()]
        r.close()


def test_reader_thread_and_process_during_compaction(logdir):
    import subprocess
    import sys
    import threading
    with Log.open(logdir, **CFG, **SYNTHETIC_CLOCK) as log:
        recs = append_keyed(log, 600, keys=15)
        errors: list = []
        stop = threading.Event()

        def reader():
            while not stop.is_set():
                prev = -1
                for m in log.iter():
                    if m.offset <= prev or (m.offset, m.key, m.value) != recs[m.offset]:
                        errors.append(m)
                    prev = m.offset
        t = threading.Thread(target=reader)
        t.start()
        code = ("import seglog,sys\nr=seglog.Log.open(sys.argv[1],readonly=True)\n"
                "it=r.iter(); first=[next(it) for _ in range(20)]\n"
                "sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.readline()\n"
                "got=first+list(it)\n"
                "print(' '.join('%d:%s' % (m.offset, m.value.decode()) for m in got))\n")
        p = subprocess.Popen([sys.executable, "-c", code, logdir], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"  # type: ignore[union-attr]
        stats = log.compact()
        assert stats.skipped is None and stats.replaced
        out, _ = p.communicate("go\n", timeout=60)
        stop.set()
        t.join()
        assert not errors
        pairs = [tuple(x.split(":")) for x in out.split()]
        offs = [int(o) for o, _ in pairs]
        assert offs == sorted(set(offs))
        assert all(recs[int(o)][2] == v.encode() for o, v in pairs)
        latest = {k: o for o, k, _ in recs}
        assert set(latest.values()) <= set(offs)


def test_compaction_of_segments_with_compressed_and_plain_batches(logdir):
    """lz4 batches (of several records) beside plain one-record batches: the cleaner
    keeps the latest per key whatever the batch, and what it writes is compressed
    only where that pays (never a batch it cut down to one record)."""
    from seglog import codec
    cfg = dict(CFG, compression="lz4")
    text = b'{"path":"/api/v1/items","status":200,"user":%d,"note":"%s"}'
    with Log.open(logdir, **cfg, **SYNTHETIC_CLOCK) as log:
        records = []
        ts = 1000
        for round_ in range(12):
            # a batch of 20 records over 10 keys (compressed), then single appends
            batch = [seglog.Record(text % (i, b"r%d" % round_), key=b"k%d" % (i % 10),
                                   timestamp=ts) for i in range(20)]
            first = log.append_batch(batch).start
            records += [(first + i, r.key, r.value) for i, r in enumerate(batch)]
            for j in range(4):
                v = None if j == 3 and round_ % 3 == 0 else text % (j, b"single")
                off = log.append(v, key=b"k%d" % (10 + j), timestamp=ts)
                records.append((off, b"k%d" % (10 + j), v))
            ts += 1
        codecs = {(h.record_count > 1, h.attributes & codec.CODEC_MASK)
                  for s in log.segments for _, h in s.batches()}
        assert codecs == {(True, codec.CODEC_LZ4), (False, codec.CODEC_NONE)}
        assert len(log.segments) > 3
        active_base = log.segments[-1].base_offset
        log.compact(now_ms=10_000)
        got = [(m.offset, m.key, m.value) for m in log.iter()]
        assert got == model_after(records, active_base, 10_000, False)
        for seg in log.segments:
            for _, h in seg.batches():
                if h.record_count <= 1:
                    assert h.attributes & codec.CODEC_MASK == codec.CODEC_NONE
        cleaned = [h for s in log.segments[:-1] for _, h in s.batches() if h.record_count > 1]
        assert cleaned and all(h.attributes & codec.CODEC_LZ4 for h in cleaned)
    with Log.open(logdir, **cfg, **SYNTHETIC_CLOCK) as again:
        assert [(m.offset, m.key, m.value) for m in again.iter()] == \
            model_after(records, active_base, 10_000, False)


def sealed_sizes(log: Log) -> list[int]:
    return [s.size for s in log.segments[:-1]]


def latest_per_key(log: Log) -> dict:
    return {m.key: m.value for m in log.iter()}


def assert_grouped_by_output(log: Log, limit: int) -> None:
    """No two neighbouring sealed segments a merge would join: their sizes add up
    to more than one segment may hold."""
    sizes = sealed_sizes(log)
    pairs = list(zip(sizes, sizes[1:]))
    assert all(a + b > limit for a, b in pairs), (limit, sizes)


def test_compaction_leaves_no_trail_of_empty_segments(logdir):
    # 500 updates of 10 keys in 4 KiB segments: the sealed segments hold only
    # superseded values but the last's
    cfg = dict(CFG, segment_bytes=4096)
    with Log.open(logdir, **cfg, **SYNTHETIC_CLOCK) as log:
        for i in range(500):
            log.append(b"value-%04d" % i, key=b"key-%d" % (i % 10))
        assert len(log.segments) > 7
        before = latest_per_key(log)
        stats = log.compact()
        assert stats.skipped is None
        # what survives (10 records) fits in one segment: one sealed segment, not 7
        # empty ones and a small one
        assert len(log.segments) == 2, [(s.base_offset, s.size) for s in log.segments]
        assert log.segments[0].base_offset == 0 and stats.segments_after == 1
        assert sum(1 for _ in log.segments[0].batches()) <= 11
        assert latest_per_key(log) == before
        again = log.compact()
        assert again.skipped == "nothing dirty in the sealed segments"
        assert len(log.segments) == 2 and latest_per_key(log) == before
    with Log.open(logdir, **cfg, **SYNTHETIC_CLOCK) as log:
        assert latest_per_key(log) == before and len(log.segments) == 2


def test_each_pass_groups_by_output_as_the_log_grows(logdir):
    cfg = dict(CFG, segment_bytes=4096)
    with Log.open(logdir, **cfg, **SYNTHETIC_CLOCK) as log:
        for round_ in range(6):
            for i in range(300):
                log.append(b"r%d-%04d" % (round_, i), key=b"key-%d" % ((i * 7 + round_) % 40))
            before = latest_per_key(log)
            assert log.compact().skipped is None
            assert latest_per_key(log) == before
            assert_grouped_by_output(log, 4096)
            empties = [s.base_offset for s in log.segments[:-1]
                       if all(h.record_count == 0 for _, h in s.batches())]
            assert not empties


@given(st.integers(1, 600), st.integers(1, 40), st.integers(1, 700),
       st.sampled_from([0.0, 0.1]), st.sampled_from([1024, 1500, 2048, 4096, 8192]),
       st.sampled_from([None, "lz4"]), st.integers(0, 2**32))
@settings(max_examples=60, deadline=None)
def test_compaction_groups_by_output_and_keeps_every_latest_value(
        tmp_path_factory, n, keys, max_value, tombstones, segment_bytes, compression, seed):
    """``n`` random updates of ``keys`` keys (a ``tombstones`` share of deletes), then
    a pass: every key's latest value (tombstones too) as before, and no two
    neighbouring sealed segments whose sizes fit in one segment together. Outputs
    over a quarter of a segment go to their files before they are merged, smaller
    ones stay in memory: both kinds meet in one pass."""
    rnd = random.Random(seed)
    path = str(tmp_path_factory.mktemp("g") / "log")
    cfg = dict(CFG, segment_bytes=segment_bytes, compression=compression)
    with Log.open(path, **cfg, **SYNTHETIC_CLOCK) as log:
        for _ in range(n):
            k = rnd.randrange(keys)
            size = rnd.randint(1, max_value)
            v = (None if rnd.random() < tombstones
                 else b"%d:" % k + bytes(rnd.randrange(4) for _ in range(size)))
            log.append(v, key=b"key-%d" % k)
        before = latest_per_key(log)
        stats = log.compact()
        assert stats.skipped is None or len(log.segments) == 1
        assert latest_per_key(log) == before
        assert_grouped_by_output(log, segment_bytes)
    assert not [n for n in os.listdir(path) if n.startswith(".seglog-")]
    with Log.open(path, **cfg, **SYNTHETIC_CLOCK) as log:
        assert latest_per_key(log) == before


def test_failure_while_grouping_removes_the_new_files_and_loses_nothing(logdir):
    """The fourth output file of a pass cannot be made (after groups before it were
    committed): the outputs not committed are gone, the committed ones swapped in,
    nothing lost; the next pass groups the rest."""
    import errno
    from seglog.testing import FaultyFS
    with Log.open(logdir, **CFG, **SYNTHETIC_CLOCK) as log:
        recs = append_keyed(log, 600, keys=200)
        before = latest_per_key(log)
        outputs, commits = [], []

        def fail_the_fourth_output(op, path):
            name = os.path.basename(path)
            if op == "open" and name.startswith(".seglog-cleaned.") and name.endswith(".log"):
                outputs.append(name)
                if len(outputs) == 4:
                    raise OSError(errno.EIO, "Input/output error (injected)")
            elif op == "rename" and ".seglog-swap." in name:    # a group's manifest
                commits.append(name)
        with FaultyFS(logdir) as fs:
            fs.on_event = fail_the_fourth_output
            with pytest.raises(seglog.StorageError):
                log.compact()
        assert len(outputs) == 4 and commits, (outputs, commits)
        # outputs made but not committed are gone; committed groups are swapped in
        assert not [n for n in os.listdir(logdir) if n.startswith(".seglog-")]
        assert latest_per_key(log) == before
        assert all((m.offset, m.key, m.value) == recs[m.offset] for m in log.iter())
    with Log.open(logdir, **CFG, **SYNTHETIC_CLOCK) as log:
        assert latest_per_key(log) == before
        assert log.compact().skipped is None
        assert latest_per_key(log) == before
        assert_grouped_by_output(log, CFG["segment_bytes"])


def test_a_crash_at_any_step_of_a_pass_loses_nothing(tmp_path):
    """The process stops at the nth file operation of a pass (a sample of every
    step, merges of drained outputs among them): the next open finds every record
    it had, leaves no file of the pass behind, and a new pass completes."""
    import shutil
    from seglog.testing import FaultyFS, abandon

    class Crash(BaseException):
        pass

    src = str(tmp_path / "src")
    with Log.open(src, **CFG, **SYNTHETIC_CLOCK) as log:
        recs = append_keyed(log, 600, keys=200)
        before = latest_per_key(log)
    probe = str(tmp_path / "probe")
    shutil.copytree(src, probe)
    with Log.open(probe, **CFG, **SYNTHETIC_CLOCK) as log, FaultyFS(probe) as fs:
        log.compact()
        steps = fs.events
    assert steps > 20
    for nth in sorted({*range(1, steps, max(1, steps // 25)), steps - 1}):
        d = str(tmp_path / f"at{nth}")
        shutil.copytree(src, d)
        log = Log.open(d, **CFG, **SYNTHETIC_CLOCK)
        with FaultyFS(d) as fs:
            def crash(op, path, nth=nth, fs=fs):
                if fs.events == nth:
                    raise Crash(f"stopped before {op} {path}")
            fs.on_event = crash
            with pytest.raises(Crash):
                log.compact()
        abandon(log)
        with Log.open(d, **CFG, **SYNTHETIC_CLOCK) as log:
            assert not [n for n in os.listdir(d) if n.startswith(".seglog-")], nth
            assert latest_per_key(log) == before, nth
            assert all((m.offset, m.key, m.value) == recs[m.offset] for m in log.iter()), nth
            # the pass again, unless the stopped one had finished but its last step
            assert log.compact().skipped in (None, "nothing dirty in the sealed segments")
            assert latest_per_key(log) == before, nth
        shutil.rmtree(d)


def _end_with_a_gap(path: str, upto: int) -> None:
    """Close the log, then end its active segment with an empty batch holding the
    offsets up to ``upto - 1``: what compaction leaves of billions of updates."""
    with Log.open(path, **CFG, **SYNTHETIC_CLOCK) as log:
        seg, end = log.segments[-1].path, log.end_offset
    gap = seglog.codec.encode_batch(end, [], 1000, offset_deltas=[],
                                    last_offset_delta=upto - 1 - end)
    with open(seg, "r+b") as f:
        data = f.read().rstrip(b"\0")
        f.seek(len(data))
        f.write(gap)
        f.truncate(len(data) + len(gap))


def test_compaction_never_merges_past_the_index_relative_offsets(logdir):
    # two small sealed segments of 2**32 offsets each (rolled by the index's 32-bit
    # relative offsets): merged, their offsets would not fit one segment's index
    with Log.open(logdir, **CFG, **SYNTHETIC_CLOCK) as log:
        append_keyed(log, 5, keys=5)
    _end_with_a_gap(logdir, (1 << 32) - 4)
    with Log.open(logdir, **CFG, **SYNTHETIC_CLOCK) as log:
        append_keyed(log, 8, keys=5)
    _end_with_a_gap(logdir, (1 << 33) - 8)
    with Log.open(logdir, **CFG, **SYNTHETIC_CLOCK) as log:
        append_keyed(log, 8, keys=5)
        sealed = log.segments[:-1]
        assert len(sealed) == 2 and sum(s.size for s in sealed) < CFG["segment_bytes"]
        before = latest_per_key(log)
        stats = log.compact()
        assert stats.skipped is None
        assert [s.base_offset for s in log.segments[:-1]] == [0, (1 << 32) - 1]
        assert latest_per_key(log) == before
    with Log.open(logdir, **CFG, **SYNTHETIC_CLOCK) as log:
        assert latest_per_key(log) == before
        assert repair.check(logdir).ok


def test_compaction_merges_no_more_than_one_index_holds(logdir):
    # small indexes roll small segments; a merged one must still index every batch
    # the writer's rule would (a full index drops the entries past it)
    from seglog._storage import scan as _scan
    cfg = dict(CFG, segment_bytes=1 << 16, max_index_bytes=96, index_interval_bytes=64)
    with Log.open(logdir, **cfg, **SYNTHETIC_CLOCK) as log:
        append_keyed(log, 400, keys=400)        # distinct keys: compaction keeps everything
        assert len(log.segments) > 10
        before = latest_per_key(log)
        assert log.compact().skipped is None
        assert latest_per_key(log) == before
        assert len(log.segments) > 2
        for seg in log.segments[:-1]:
            rule = _scan.scan(seg, 0, seg.size, None, 64).index
            entries = os.path.getsize(seg.index_path) // 8
            assert entries == len(rule), (seg.base_offset, entries, len(rule))


def _fail_writes_to(monkeypatch, prefix: str, err: int) -> list[str]:
    """Make ``os.write`` to a file whose name starts with ``prefix`` fail with
    ``err`` (a full disk at that file) until the returned list (the names it
    failed on) gets ``None`` appended."""
    real = os.write
    failed: list[str | None] = []

    def write(fd, data):
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        if name.startswith(prefix) and None not in failed:
            failed.append(name)
            raise OSError(err, os.strerror(err))
        return real(fd, data)
    monkeypatch.setattr(os, "write", write)
    return failed


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names fds through /proc")
def test_full_disk_at_the_swap_manifest_removes_the_new_files(logdir, monkeypatch):
    import errno
    with Log.open(logdir, **CFG, **SYNTHETIC_CLOCK) as log:
        recs = append_keyed(log, 400, keys=150)
        before = latest_per_key(log)
        failed = _fail_writes_to(monkeypatch, ".seglog-tmp..seglog-swap.", errno.ENOSPC)
        with pytest.raises(seglog.StorageError) as e:
            log.compact()
        assert failed and e.value.errno == errno.ENOSPC
        failed.append(None)
        # the group's cleaned files (as large as a segment) and the manifest's temp
        # file are gone at once: the space is back while the disk is full
        assert not [n for n in os.listdir(logdir) if n.startswith(".seglog-")]
        assert latest_per_key(log) == before
    with Log.open(logdir, **CFG, **SYNTHETIC_CLOCK) as log:
        assert latest_per_key(log) == before
        assert all((m.offset, m.key, m.value) == recs[m.offset] for m in log.iter())
        assert log.compact().skipped is None and latest_per_key(log) == before


@pytest.mark.parametrize("fails", ["once", "always"])
def test_failed_sync_of_the_swap_manifest_takes_the_swap_back(logdir, monkeypatch, fails):
    """The manifest was renamed in but the directory's fsync failed: the swap is
    withdrawn (manifest removed, then the new files once that is durable). If the
    directory cannot be synced at all, the new files stay for the next open, which
    rolls the swap forward or drops them; either way nothing is lost."""
    from seglog._runtime import files as _files
    real = _files.fsync_dir
    failed = []

    def fsync_dir(path):
        manifest = any(n.startswith(".seglog-swap.") for n in os.listdir(path))
        if (manifest and not failed) or (failed and fails == "always"):
            failed.append(path)
            raise OSError(5, "Input/output error")
        return real(path)
    with Log.open(logdir, **CFG, **SYNTHETIC_CLOCK) as log:
        recs = append_keyed(log, 400, keys=150)
        before = latest_per_key(log)
        monkeypatch.setattr(_files, "fsync_dir", fsync_dir)
        monkeypatch.setattr(cleaner, "fsync_dir", fsync_dir)
        with pytest.raises(seglog.StorageError):
            log.compact()
        monkeypatch.setattr(_files, "fsync_dir", real)
        monkeypatch.setattr(cleaner, "fsync_dir", real)
        left = [n for n in os.listdir(logdir) if n.startswith(".seglog-")]
        if fails == "once":
            assert not left
        else:
            assert not [n for n in left if n.startswith(".seglog-swap.")]
            assert [n for n in left if n.startswith(".seglog-cleaned.")]
        assert latest_per_key(log) == before
        abandon(log)
    with Log.open(logdir, **CFG, **SYNTHETIC_CLOCK) as log:
        assert not [n for n in os.listdir(logdir) if n.startswith(".seglog-")]
        assert latest_per_key(log) == before
        assert all((m.offset, m.key, m.value) == recs[m.offset] for m in log.iter())


@pytest.mark.parametrize("max_index_bytes", [24, 36, 48])
def test_a_cleaned_segment_keeps_its_largest_timestamp_with_small_indexes(tmp_path,
                                                                           max_index_bytes):
    """A cleaned segment may make more index entries than its indexes hold (outputs
    merged, batches written anew). Its time index still ends with its largest
    timestamp, which a reopened log and a reader take as the segment's: else
    ``offset_for_time`` skips the segment and time retention deletes records
    younger than ``retention_ms``."""
    from seglog import codec
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rnd = random.Random(seed)
    path = str(tmp_path / "log")
    retention = 10_000
    cfg = dict(CFG, segment_bytes=4096, index_interval_bytes=64, max_index_bytes=max_index_bytes,
               cleanup_policy="compact,delete", retention_ms=retention)
    with Log.open(path, **cfg, **SYNTHETIC_CLOCK) as log:
        for i in range(150):
            log.append(b"v" * rnd.randint(1, 60), key=b"k%d" % rnd.randrange(120),
                       timestamp=1000 + i)
        assert log.compact(now_ms=1200).skipped is None
        kept = [(m.offset, m.timestamp) for m in log.iter()]
    r = Log.open(path, readonly=True)
    with Log.open(path, **cfg, **SYNTHETIC_CLOCK) as log:
        for view in (log, r):
            for seg in view.segments[:-1]:
                newest = max(h.max_timestamp for _, h in seg.batches())
                assert seg.max_timestamp == newest, (seg.base_offset, seg.max_timestamp, newest)
            for t in range(999, 1152):
                assert view.offset_for_time(t) == next((o for o, ts in kept if ts >= t), None), t
        # retention as of the first sealed segment's newest record: nothing goes yet
        first = log.segments[0]
        newest = max(h.max_timestamp for _, h in first.batches())
        log.enforce_retention(now_ms=newest + retention)
        assert [(m.offset, m.timestamp) for m in log.iter()] == kept
    r.close()


@pytest.mark.parametrize("max_index_bytes", [36, 48, 60])
def test_merged_segments_hold_every_index_entry_with_small_indexes(tmp_path, max_index_bytes):
    """With indexes of a few entries, outputs are merged only while the merged
    segment's offset and time indexes hold every entry the writer's rule makes
    (the time index also its largest timestamp)."""
    from seglog._storage import scan as _scan
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rnd = random.Random(seed)
    merged = 0
    for run in range(6):
        path = str(tmp_path / f"log{run}")
        cfg = dict(CFG, segment_bytes=4096, index_interval_bytes=rnd.choice([16, 40, 64]),
                   max_index_bytes=max_index_bytes)
        with Log.open(path, **cfg, **SYNTHETIC_CLOCK) as log:
            for i in range(300):
                log.append(b"v" * rnd.randint(1, 60), key=b"k%d" % rnd.randrange(60),
                           timestamp=1000 + i)
            bases = {s.base_offset for s in log.segments}
            stats = log.compact()
            for base, end in stats.replaced:
                if not any(base < b < end for b in bases):
                    continue          # one segment's output, not a merge
                merged += 1
                seg = next(s for s in log.segments if s.base_offset == base)
                rule = _scan.scan(seg, 0, seg.size, None, cfg["index_interval_bytes"])
                # the time index ends with the largest timestamp, once
                last = not rule.time_index or rule.time_index[-1][0] < rule.max_timestamp
                assert os.path.getsize(seg.index_path) // 8 == len(rule.index), (base, end)
                assert os.path.getsize(seg.timeindex_path) // 12 == \
                    len(rule.time_index) + last, (base, end)
    assert merged


@pytest.mark.parametrize("op", ["open", "write", "fsync", "rename", "unlink"])
def test_an_io_error_at_any_step_of_a_pass_leaves_no_new_files(tmp_path, monkeypatch, op):
    """The nth ``op`` of a pass fails, for every n: new files not committed by a
    manifest are gone at once (their space is back), committed ones are finished
    at the next open; every latest value is there, in the failed log and after."""
    import errno
    import shutil
    from seglog.testing import FaultyFS
    src = str(tmp_path / "src")
    with Log.open(src, **CFG, **SYNTHETIC_CLOCK) as log:
        # mostly distinct keys: outputs pass a quarter of a segment, so they go to their
        # files while the pass cleans, and merge from them: errors there are tested too
        recs = append_keyed(log, 300, keys=200)
        before = latest_per_key(log)
    for nth in range(1, 200):
        d = str(tmp_path / f"{op}{nth}")
        shutil.copytree(src, d)
        with Log.open(d, **CFG, **SYNTHETIC_CLOCK) as log:
            with FaultyFS(d) as fs:
                fs.fail(op, nth, errno.ENOSPC if op == "write" else errno.EIO)
                try:
                    log.compact()
                    failed = False
                except seglog.StorageError:
                    failed = True
            left = [n for n in os.listdir(d) if n.startswith(".seglog-")]
            if not any(n.startswith(".seglog-swap.") for n in left):
                assert not left, (nth, left)
            assert latest_per_key(log) == before, nth
        with Log.open(d, **CFG, **SYNTHETIC_CLOCK) as log:
            assert not [n for n in os.listdir(d) if n.startswith(".seglog-")], nth
            assert latest_per_key(log) == before, nth
            assert all((m.offset, m.key, m.value) == recs[m.offset] for m in log.iter())
        # no descriptor of the failed pass is left open (a failed fsync of a new index
        # file left its descriptor behind)
        held = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith(d + os.sep):
                held.append(target)
        assert not held, (nth, held)
        shutil.rmtree(d)
        if not failed:
            break
    assert not failed, "the pass never got past its failures"


def test_outputs_of_nothing_join_a_neighbour_with_the_smallest_indexes(logdir):
    # indexes of two time entries: a merged output of nothing has one batch (the
    # empty one) and needs no more, so it still joins its neighbour
    cfg = dict(CFG, segment_bytes=1024, max_index_bytes=24, index_interval_bytes=64)
    with Log.open(logdir, **cfg, **SYNTHETIC_CLOCK) as log:
        for i in range(500):
            log.append(b"value-%04d" % i, key=b"key-%d" % (i % 10))
        assert len(log.segments) > 100
        before = latest_per_key(log)
        assert log.compact().skipped is None
        assert latest_per_key(log) == before
        # 490 superseded records are one segment of one empty batch
        first = log.segments[0]
        assert [h.record_count for _, h in first.batches()] == [0]
        assert log.segments[1].base_offset == 488 and len(log.segments) < 10


# -- no holes: what compaction drops is covered --------------------------------------
# Holes compaction leaves are not holes: an empty batch covers them, and every sealed
# segment's batches end exactly where the next segment starts.

def _records(log: Log) -> set[tuple[int, bytes | None, bytes | None]]:
    return {(m.offset, m.key, m.value) for m in log.iter()}


def _check_contiguous(log: Log) -> None:
    """Every sealed segment's batches end exactly where the next segment starts."""
    segs = log.segments
    for seg, nxt in zip(segs, segs[1:]):
        last = None
        for _, hdr in seg.batches():
            last = hdr
        assert last is not None, f"sealed segment {seg.base_offset} is empty"
        assert last.last_offset + 1 == nxt.base_offset


def test_compaction_dropping_whole_batches_and_segments_is_not_a_hole(tmp_path):
    path = tmp_path / "l"
    log = Log.open(path, segment_bytes=1024, cleanup_policy="compact",
                   min_cleanable_dirty_ratio=0.0, retention_check_ms=None)
    # the same three keys over and over: most segments end up with nothing kept
    for i in range(60):
        log.append_batch([Record(b"%d" % i, key=b"k%d" % (j % 3)) for j in range(10)])
    log.append(b"last", key=b"k0")
    every = _records(log)
    active = log.segments[-1].base_offset
    log.compact()
    _check_contiguous(log)
    kept = _records(log)
    # sealed: the latest record of each key among sealed ones; active: untouched
    latest = {}
    for off, key, value in sorted(every):
        if off < active:
            latest[key] = (off, key, value)
    assert kept == set(latest.values()) | {r for r in every if r[0] >= active}
    # the kept records fit in one sealed segment, whose last batch covers the
    # offsets dropped up to the active segment
    assert len(log.segments) == 2
    reader = Log.open(path, readonly=True)
    assert _records(reader) == kept
    for off, key, value in kept:
        for lg in (log, reader):
            m = next(iter(lg.read(off)))
            assert (m.offset, m.key, m.value) == (off, key, value)
    # a read in a removed stretch goes on to the next kept record
    assert next(iter(log.read(0))).offset == min(kept)[0]
    reader.close()
    log.close()
    with Log.open(path) as again:
        assert _records(again) == kept


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 12), st.booleans()), min_size=1, max_size=300),
       st.integers(1, 20))
def test_compaction_output_is_contiguous(tmp_path_factory, ops, batch):
    path = tmp_path_factory.mktemp("c") / "l"
    with Log.open(path, segment_bytes=1024, cleanup_policy="compact",
                  min_cleanable_dirty_ratio=0.0, retention_check_ms=None) as log:
        written: list[tuple[int, bytes, bytes | None]] = []
        for i in range(0, len(ops), batch):
            part = ops[i:i + batch]
            recs = [Record(None if tomb else b"v%d" % (i + n), key=b"k%d" % k)
                    for n, (k, tomb) in enumerate(part)]
            r = log.append_batch(recs)
            written += [(off, rec.key, rec.value) for off, rec in zip(r, recs)]
        log.compact()
        log.compact()
        _check_contiguous(log)
        # compaction's map covers the sealed segments: the latest record of each key
        # among them is kept (tombstones too, for delete_retention_ms)
        sealed_end = log.segments[-1].base_offset
        latest = {k: (o, k, v) for o, k, v in written if o < sealed_end}
        got = {(m.offset, m.key, m.value) for m in log.iter() if m.offset < sealed_end}
        assert got == set(latest.values())

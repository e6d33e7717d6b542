"""Retention and compaction run by one writer of a multi-writer log while other writer
processes (tests/mw_child.py) append: nothing acknowledged is lost but what retention
was asked to delete, compaction keeps the latest record of every key, a reader reading
along sees one consistent log, and nobody writes into a deleted or replaced file.
Scaled by SEGLOG_TORTURE; seeds printed (rerun with SEGLOG_SEED=<seed>)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time

import pytest

import seglog
from seglog import Log, OffsetOutOfRangeError, repair

from mw_child import calls, record
from mw_harness import (gone, DEADLINE, SCALE, Reader, Writer, acked_offsets, expect_message,
                        readline, seed_for, spawn, wait_exit, wait_stopped)


def _maintained_while_others_append(tmp_path, seed: int, opts: dict, maintain) -> tuple[
        dict[int, Writer], Reader, list]:
    """Two writer processes append ``calls_each`` calls each while the test's writer
    runs ``maintain(log)`` over and over and appends calls of its own; returns the
    writers (all exited cleanly), the reader that read along, and what each
    ``maintain`` returned (the last one with everyone quiet)."""
    path = str(tmp_path / "log")
    reports = tmp_path / "reports"
    reports.mkdir()
    parent = Log.open(path, multi_writer=True, **opts)
    reader = Reader(path)
    writers = {0: Writer(0)}
    results = []
    calls_each = 60 * SCALE
    try:
        for wid in (1, 2):
            w = writers[wid] = Writer(wid, str(reports / f"w{wid}"))
            w.proc = spawn("write", path, wid, seed, w.report, json.dumps(opts), calls_each,
                           stderr=subprocess.PIPE)
        end = time.monotonic() + DEADLINE
        while any(w.proc.poll() is None for w in writers.values() if w.proc):
            assert time.monotonic() < end, "the writers did not finish"
            results.append(maintain(parent))
            w0 = writers[0]
            seq, n, _ = calls(seed, 0, w0.calls_made + 1)[-1]
            got = parent.append_batch([seglog.Record(*record(0, s)[:2], None, record(0, s)[2])
                                       for s in range(seq, seq + n)])
            w0.acked[w0.calls_made] = got.start
            w0.calls_made += 1
            reader.catch_up()
        for w in writers.values():
            if w.proc:
                _, err = w.proc.communicate(timeout=DEADLINE)
                assert w.proc.returncode == 0, err.decode()
        results.append(maintain(parent))
        reader.catch_up()
        parent.close()
    finally:
        for w in writers.values():
            if w.proc and w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()
    assert len(acked_offsets(seed, writers)) >= 2 * calls_each
    return writers, reader, results


def _segment_files(path: str) -> set[int]:
    return {int(n[:20]) for n in os.listdir(path) if n.endswith(".log") and n[:20].isdigit()}


def test_retention_by_one_writer_while_others_append(tmp_path):
    seed = seed_for("multi-writer retention")
    path = str(tmp_path / "log")
    opts = dict(segment_bytes=4096, retention_ms=60_000, retention_check_ms=None)
    later = int(time.time() * 1000) + 3_600_000      # every sealed segment has expired
    starts = []

    def retain(log: Log) -> list[int]:
        deleted = log.enforce_retention(now_ms=later)
        starts.append(log.start_offset)
        assert all(b < starts[-1] for b in deleted), "deleted past the new start"
        return deleted

    writers, reader, results = _maintained_while_others_append(tmp_path, seed, opts, retain)
    assert starts == sorted(starts), "the log start moved back"
    acked = acked_offsets(seed, writers)
    with Log.open(path, readonly=True) as r:
        start, end = r.start_offset, r.end_offset
        msgs = list(r.iter())
        for off in random.Random(seed).sample(range(start), min(20, start)):
            with pytest.raises(OffsetOutOfRangeError):
                r.read(off)
        bases = {s.base_offset for s in r.segments}
    assert start == starts[-1] > 0 and sum(map(len, results)) >= 2
    assert [m.offset for m in msgs] == list(range(start, end)), "offsets not dense"
    present = {expect_message(m): m.offset for m in msgs}
    assert present == {ws: off for ws, off in acked.items() if off >= start}
    assert end == max(acked.values()) + 1
    for off, ws in reader.seen.items():
        assert off < start or present[ws] == off, f"the reader saw {ws} at {off}"
    # nobody wrote into a deleted segment (it would be back, or its data lost above)
    assert _segment_files(path) == bases
    assert not repair.check(path).problems


def test_compaction_by_one_writer_while_others_append(tmp_path):
    seed = seed_for("multi-writer compaction")
    path = str(tmp_path / "log")
    opts = dict(segment_bytes=4096, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0,
                retention_check_ms=None)
    writers, reader, passes = _maintained_while_others_append(
        tmp_path, seed, opts, lambda log: log.compact())
    acked = acked_offsets(seed, writers)
    by_offset = {off: ws for ws, off in acked.items()}
    assert len(by_offset) == len(acked)
    key_of = {ws: record(*ws)[1] for ws in acked}
    with Log.open(path, readonly=True) as r:
        msgs = list(r.iter())
        active_base = r.segments[-1].base_offset
        end = r.end_offset
    offs = [m.offset for m in msgs]
    assert offs == sorted(set(offs)) and end == max(by_offset) + 1
    present = {}
    for m in msgs:
        ws = expect_message(m)
        assert by_offset.get(m.offset) == ws, f"{ws} at {m.offset}, acknowledged elsewhere"
        present[ws] = m.offset
    latest: dict[bytes, int] = {}
    for ws, off in acked.items():
        if key_of[ws] is not None:
            latest[key_of[ws]] = max(off, latest.get(key_of[ws], -1))
    for ws, off in acked.items():
        k = key_of[ws]
        if k is not None and latest[k] == off:
            assert ws in present, f"the latest record of {k!r} ({ws} at {off}) is gone"
        if ws not in present:
            assert off < active_base, f"{ws} at {off} removed from the active segment"
            assert k is None or latest[k] > off, f"{ws} removed, yet the latest of its key"
    assert any(p.records_kept < p.records_read for p in passes), "nothing was compacted"
    # after the last pass (everyone quiet; it may find the previous one cleaned all)
    # every sealed segment is cleaned, and the cleaned range holds each key once
    cleaned_to = max(p.dirty_end_offset for p in passes if p.skipped is None)
    assert cleaned_to == active_base, (cleaned_to, active_base, passes[-1])
    cleaned = [m for m in msgs if m.offset < cleaned_to]
    assert all(m.key is not None for m in cleaned)
    assert len({m.key for m in cleaned}) == len(cleaned), "a key twice in the cleaned range"
    for off, ws in reader.seen.items():
        assert by_offset[off] == ws, f"the reader saw {ws} at {off}"
    assert _segment_files(path) >= {active_base}
    assert not repair.check(path).problems


def test_compaction_swap_while_another_writer_rolls(tmp_path, monkeypatch):
    """The same in one process, made deterministic: the other writer rolls between the
    compaction's swap of files on disk and its swap of the segment list."""
    from seglog import cleaner
    path = str(tmp_path / "log")
    opts = dict(segment_bytes=1024, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    a = Log.open(path, multi_writer=True, **opts)
    b = Log.open(path, multi_writer=True, **opts)
    acked = {a.append(b"v%d" % i + b"x" * 50, key=b"k%d" % (i % 3)): (b"k%d" % (i % 3), i)
             for i in range(60)}
    real = cleaner.swap_in

    def swap_then_the_other_rolls(*args, **kw):
        real(*args, **kw)
        n = len(b.segments)
        while len(b.segments) == n:
            off = b.append(b"y%d" % len(acked), key=b"k9")
            acked[off] = (b"k9", len(acked))
    monkeypatch.setattr(cleaner, "swap_in", swap_then_the_other_rolls)
    stats = a.compact()
    monkeypatch.undo()
    assert stats.records_kept < stats.records_read
    acked[b.append(b"last", key=b"k0")] = (b"k0", -1)
    a.close()
    b.close()
    latest = {k: off for off, (k, _) in sorted(acked.items())}
    with Log.open(path, readonly=True) as r:
        got = {m.offset: m.key for m in r.iter()}
    assert set(latest.values()) <= set(got) <= set(acked)
    assert all(acked[off][0] == k for off, k in got.items())
    assert not repair.check(path).problems


@pytest.mark.parametrize("then", ["continued", "killed"])
def test_one_maintenance_pass_at_a_time_across_processes(tmp_path, then):
    """A writer process stopped inside its compaction pass: another writer's passes are
    skipped meanwhile (neither compaction nor retention touches the files under it),
    its appends and reads go on; once the first is continued (or killed: the next pass
    finishes its swap) compaction has kept the latest record of every key."""
    path = str(tmp_path / "log")
    opts = dict(segment_bytes=1024, cleanup_policy="compact,delete", min_cleanable_dirty_ratio=0.0,
                retention_check_ms=None, flush_ms=None)
    later = int(time.time() * 1000) + 30 * 86_400_000     # past retention_ms (7 days)
    parent = Log.open(path, multi_writer=True, lock_timeout_ms=2000, **opts)
    model = {}
    for i in range(200):
        k, v = b"k%d" % (i % 5), b"v%d." % i + b"x" * 40
        model[parent.append(v, key=k)] = (k, v)
    child = spawn("compact-stop", path, json.dumps(opts), stdout=subprocess.PIPE)
    try:
        wait_stopped(child.pid)
        skipped = parent.compact()
        assert skipped.skipped is not None and skipped.records_read == 0
        assert parent.enforce_retention(now_ms=later) == [] and parent.start_offset == 0
        t0 = time.monotonic()
        for i in range(200, 230):
            k, v = b"k%d" % (i % 5), b"v%d." % i + b"x" * 40
            model[parent.append(v, key=k)] = (k, v)
        assert time.monotonic() - t0 < 1.0, "appends waited for the maintenance pass"
        with Log.open(path, readonly=True) as r:
            assert {m.offset: (m.key, m.value) for m in r.iter()} == model
        if then == "continued":
            os.kill(child.pid, signal.SIGCONT)
            skipped_by_child, read, kept = json.loads(readline(child, "its compaction"))
            assert skipped_by_child is None and kept < read
            assert wait_exit(child, "the compacting writer") == 0
        else:
            os.kill(child.pid, signal.SIGKILL)
            assert wait_exit(child, "the compacting writer") == -signal.SIGKILL
        st = parent.compact()           # one pass at a time again: this one runs
        assert st.skipped != skipped.skipped, st
        k, v = b"k0", b"last"
        model[parent.append(v, key=k)] = (k, v)
    finally:
        gone(child)
    parent.close()
    with Log.open(path, readonly=True) as r:
        present = {m.offset: (m.key, m.value) for m in r.iter()}
        active = r.segments[-1].base_offset
    latest = {k: off for off, (k, _) in sorted(model.items())}
    assert set(latest.values()) <= set(present) <= set(model)
    assert all(present[o] == model[o] for o in present)
    for off in set(model) - set(present):
        assert off < active and latest[model[off][0]] > off
    assert len(present) < len(model), "nothing was compacted"
    assert not any(n.startswith(".seglog-") for n in os.listdir(path)), "a swap left over"
    assert not repair.check(path).problems

"""Several writer processes on one log (``multi_writer=True``), for real: writers killed
at random instants while others append, a writer stopped while it holds the append
lock, retention and compaction by one writer while others append, producers sharing a
topic, topics created by two processes at once, forks. The writer processes are
tests/mw_child.py; every value names its writer and sequence number, so whatever a
reader finds can be checked against what must be there.

Scale the rounds with SEGLOG_TORTURE=10 (scripts/torture does). Every randomised test
prints its seed (rerun with SEGLOG_SEED=<seed>).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time

import pytest

import seglog
from seglog import Log, LogLockedError, SeglogError, repair
from seglog.testing import abandon

from helpers import wait_for
from mw_child import calls, record, stopped_values
from mw_harness import (DEADLINE, gone, SCALE, Reader, Writer, check_whole_log, read_line,
                        readline, seed_for, spawn, wait_exit, wait_stopped)


# -- writers killed at random instants ----------------------------------------------
KILL_OPTIONS = {
    "plain": dict(segment_bytes=8192, index_interval_bytes=512),
    "lz4": dict(segment_bytes=16384, compression="lz4", max_message_bytes=2048),
}


@pytest.mark.parametrize("variant", sorted(KILL_OPTIONS))
def test_writers_killed_at_random_instants(tmp_path, variant):
    seed = seed_for(f"multi-writer kills ({variant})")
    # independent rounds: the cost grows linearly, each log stays small (a writer
    # keeps every segment's files open, as Kafka's does)
    for round_ in range(SCALE):
        _kill_round(tmp_path / f"r{round_}", seed + round_, variant)


def _kill_round(root, seed: int, variant: str) -> None:
    rnd = random.Random(seed)
    opts = KILL_OPTIONS[variant]
    path = str(root / "log")
    reports = root / "reports"
    reports.mkdir(parents=True)
    writers: dict[int, Writer] = {0: Writer(0)}
    parent = Log.open(path, multi_writer=True, **opts)
    reader = Reader(path)
    live: list[Writer] = []

    def start() -> None:
        w = Writer(len(writers), str(reports / f"w{len(writers)}"))
        max_calls = rnd.choice([0, 0, 0, rnd.randint(5, 40)])
        w.proc = spawn("write", path, w.wid, seed, w.report, json.dumps(opts), max_calls,
                       stderr=open(str(reports / f"w{w.wid}.err"), "wb"))
        writers[w.wid] = w
        live.append(w)

    def reap(w: Writer, kill: bool) -> None:
        """SIGKILL it, or SIGTERM: it finishes its call and closes."""
        assert w.proc is not None
        w.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        code = wait_exit(w.proc, f"writer {w.wid}")
        # SIGTERM before its handler was set (it had not opened the log yet) kills it
        w.killed = code == -signal.SIGKILL or (code == -signal.SIGTERM and not w.read_report())
        if not w.killed:
            # -SIGTERM with reports: it had made its last call and closed the log, and
            # was exiting (the interpreter restores the default handler as it shuts down)
            with open(str(reports / f"w{w.wid}.err")) as f:
                err = f.read()
            assert code in (0, -signal.SIGTERM) and not err, \
                f"writer {w.wid} failed ({code}): {err}"
        live.remove(w)

    def parent_call() -> None:
        w = writers[0]
        seq, n, single = calls(seed, 0, w.calls_made + 1)[-1]
        recs = [record(0, s) for s in range(seq, seq + n)]
        if single:
            first = parent.append(recs[0][0], key=recs[0][1], headers=recs[0][2])
        else:
            first = parent.append_batch([seglog.Record(v, k, None, h) for v, k, h in recs]).start
        w.acked[w.calls_made] = first
        w.calls_made += 1

    kills = 10
    killed_mid_run = 0
    try:
        for _ in range(3):
            start()
        for k in range(kills):
            if k == kills // 2:
                # everyone gone at once: the next writer recovers from the files
                for w in list(live):
                    reap(w, kill=True)
                abandon(parent)
                parent = Log.open(path, multi_writer=True, **opts)
                assert parent.recovery is not None, "the first writer after all died"
                for _ in range(3):
                    start()
            w = rnd.choice(live)
            target = rnd.randint(0, 12)
            wait_for(lambda: len(w.read_report()) >= target or w.proc.poll() is not None,
                     DEADLINE, f"writer {w.wid} to acknowledge {target} calls", step=0.002)
            spin = time.perf_counter() + rnd.random() * 0.003
            while time.perf_counter() < spin:
                pass
            reap(w, kill=True)
            killed_mid_run += bool(w.read_report())
            for x in list(live):
                if x.proc is not None and x.proc.poll() is not None:
                    reap(x, kill=False)
            while len(live) < 3:
                start()
            for _ in range(rnd.randint(0, 2)):
                parent_call()
            if rnd.random() < 0.3:
                # any writer's flush covers every writer's appends before it
                before = parent.end_offset
                flushed = parent.flush()
                assert flushed >= before and parent.flushed_offset >= flushed
            reader.catch_up()
        for w in list(live):
            reap(w, kill=rnd.random() < 0.7)
        parent_call()          # the next append after the kills: after the last whole batch
        reader.catch_up()
        end = parent.end_offset
        parent.close()         # the last writer: a clean close
    finally:
        for w in list(live):
            if w.proc is not None and w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()
        reader.close()
    at = check_whole_log(path, seed, writers, reader.seen)
    assert len(at) == end
    with Log.open(path, **opts) as log:     # the clean close left nothing to recover
        assert log.recovery is None and log.end_offset == end
    n_killed = sum(w.killed for w in writers.values())
    print(f"{variant} (seed {seed}): {len(writers) - 1} writer processes, {n_killed} killed "
          f"({killed_mid_run} after acknowledging), {end} messages, "
          f"{len(reader.seen)} seen by the reader during the run")
    assert n_killed >= kills and killed_mid_run >= kills // 2


# -- a writer stopped while it holds the append lock ----------------------------------
TIMEOUT_MS = 400
SLACK = 1.5            # seconds past the timeout a loaded CI machine may take


def _times_out(fn, what: str) -> None:
    t0 = time.monotonic()
    with pytest.raises(LogLockedError):
        fn()
    took = time.monotonic() - t0
    assert TIMEOUT_MS / 1000 <= took <= TIMEOUT_MS / 1000 + SLACK, f"{what}: {took:.3f} s"


@pytest.mark.parametrize("then", ["continued", "killed"])
def test_a_writer_stopped_inside_an_append_never_hangs_the_others(tmp_path, then):
    path = str(tmp_path / "log")
    opts = dict(max_message_bytes=1024, flush_ms=None)
    parent = Log.open(path, multi_writer=True, lock_timeout_ms=TIMEOUT_MS, **opts)
    assert parent.append(b"p0") == 0
    child = spawn("stop", path, json.dumps(opts), stdout=subprocess.PIPE)
    try:
        assert readline(child, "its first append") == "1"
        wait_stopped(child.pid)
        # it holds the append lock inside append_batch, its first batch copied in
        _times_out(lambda: parent.append(b"never"), "append")
        _times_out(lambda: parent.append_batch([b"never", b"never"]), "append_batch")
        _times_out(lambda: Log.open(path, multi_writer=True, lock_timeout_ms=TIMEOUT_MS,
                                    **opts), "a joining writer's open")
        with Log.open(path, readonly=True) as r:     # a reader is never blocked
            got = [m.value for m in r.iter()]
        assert got[:2] == [b"p0", b"before"] and b"never" not in got
        assert got[2:] == stopped_values()[:len(got) - 2]
        if then == "continued":
            os.kill(child.pid, signal.SIGCONT)
            assert readline(child, "its stopped call") == f"2 {2 + len(stopped_values())}"
            assert wait_exit(child, "the continued writer") == 0
            kept = stopped_values()
        else:
            os.kill(child.pid, signal.SIGKILL)
            assert wait_exit(child, "the killed writer") == -signal.SIGKILL
            kept = None
        t0 = time.monotonic()
        after = parent.append(b"after")
        assert time.monotonic() - t0 < TIMEOUT_MS / 1000, "the lock was free again"
    finally:
        gone(child)
    parent.close()
    with Log.open(path, readonly=True) as r:
        got = [m.value for m in r.iter()]
    assert not repair.check(path).problems
    assert got[:2] == [b"p0", b"before"] and got[-1] == b"after" and after == len(got) - 1
    if kept is None:
        # the whole batch it copied before it stopped is kept, nothing else of the call
        kept = got[2:-1]
        assert 1 <= len(kept) < len(stopped_values())
    assert got[2:-1] == kept == stopped_values()[:len(kept)]


@pytest.mark.parametrize("held", ["exclusive", "multi_writer"])
def test_the_modes_exclude_each_other_across_processes_at_once(tmp_path, held):
    path = str(tmp_path / "log")
    Log.open(path).close()
    child = spawn("hold", path, json.dumps({"multi_writer": held == "multi_writer"}),
                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert readline(child, "its open") == "ready"
        t0 = time.monotonic()
        with pytest.raises(LogLockedError):
            Log.open(path, multi_writer=held == "exclusive", lock_timeout_ms=5000)
        assert time.monotonic() - t0 < 1.0, "not at once: it waited for the lock timeout"
        if held == "multi_writer":
            # a joiner takes the stored settings; changing one while others write is refused
            with pytest.raises(seglog.InvalidConfigError):
                Log.open(path, multi_writer=True, segment_bytes=1 << 16)
            with Log.open(path, multi_writer=True) as log:     # the same mode joins
                assert log.append(b"joined") == 0
        child.stdin.close()
        assert wait_exit(child, "the holder") == 0
    finally:
        gone(child)
    # free once it left; the first writer may change the settings
    with Log.open(path, multi_writer=held == "exclusive", segment_bytes=1 << 16) as log:
        assert log.append(b"next") == (1 if held == "multi_writer" else 0)
        assert log.config.segment_bytes == 1 << 16


# -- forks ---------------------------------------------------------------------------
def _snapshot(path: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            out[name] = f.read()
    return out


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_gets_a_refusing_copy_of_a_multi_writer(tmp_path):
    path = str(tmp_path / "log")
    opts = dict(segment_bytes=4096, flush_ms=None)
    log = Log.open(path, multi_writer=True, lock_timeout_ms=2000, **opts)
    other = Log.open(path, multi_writer=True, lock_timeout_ms=2000, **opts)
    acked = {log.append(b"a%d" % i): b"a%d" % i for i in range(50)}
    acked.update({other.append(b"b%d" % i): b"b%d" % i for i in range(50)})
    log.flush()
    before = _snapshot(path)
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(to_child_w)
            os.close(to_parent_r)
            for op in (lambda: log.append(b"child"), lambda: other.append_batch([b"c"]),
                       log.flush, log.compact, other.enforce_retention, lambda: log.read(0)):
                try:
                    op()
                    code = 3                  # the child wrote or read through the copy
                except SeglogError as e:
                    if "fork" not in str(e):
                        code = 2              # not a clear error
            if code == 1:
                log.close()
                other.close()
                os.write(to_parent_w, b"closed\n")
                os.read(to_child_r, 1)
                # a worker opens the log itself: a writer of its own
                with Log.open(path, multi_writer=True, **opts) as mine:
                    off = mine.append(b"child-own")
                os.write(to_parent_w, b"%d\n" % off)
                code = 0
        except BaseException:   # noqa: BLE001 - the parent sees the exit code
            import traceback
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(to_child_r)
    os.close(to_parent_w)
    reply = os.fdopen(to_parent_r, "rb", buffering=0)
    try:
        line = read_line(reply, "the child's close")
        assert line == b"closed\n", f"the child failed before closing ({line!r})"
        assert _snapshot(path) == before, "the child's close changed files"
        # the parent goes on: the child holds no lock
        acked[log.append(b"a-after-fork")] = b"a-after-fork"
        os.write(to_child_w, b"g")
        child_off = int(read_line(reply, "the child's own append"))
        acked[child_off] = b"child-own"
        acked[other.append(b"b-after-child")] = b"b-after-child"
    finally:
        os.close(to_child_w)
        reply.close()
        _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert sorted(acked) == list(range(len(acked)))
    log.close()
    other.close()
    with Log.open(path, readonly=True) as r:
        assert {m.offset: m.value for m in r.iter()} == acked


# -- writers taking turns write what one writer would ---------------------------------
@pytest.mark.parametrize("compression", [None, "lz4"])
def test_writers_taking_turns_write_the_files_one_writer_would(tmp_path, compression):
    """A writer that takes the lock after another takes only the tail it published
    when only appends happened (size and next offset, or with them the index entries
    and timestamps an append moved): three writers taking turns at random, through
    appends, batches, keys, headers and rolls, leave the very bytes (batches, offset
    and time indexes) that one writer makes of the same calls."""
    seed = seed_for(f"writers taking turns ({compression})")
    rnd = random.Random(seed)
    opts = dict(segment_bytes=6000, index_interval_bytes=300, compression=compression,
                flush_ms=None)
    calls = []
    ts = 1_700_000_000_000
    for i in range(400):
        ts += rnd.choice([0, 0, 1, 3])
        if rnd.random() < 0.5:
            calls.append(("one", b"v%d" % i + bytes(rnd.randint(0, 120)), ts))
        else:
            n = rnd.choice([1, 2, 5, rnd.randint(1, 40)])
            recs = [seglog.Record(b"b%d-%d" % (i, j) * rnd.randint(1, 30),
                                  key=rnd.choice([None, b"k%d" % (j % 3)]),
                                  timestamp=ts + rnd.choice([0, 0, -2, 2]),
                                  headers=rnd.choice([(), (("h", b"x"),)]))
                    for j in range(n)]
            calls.append(("batch", recs, ts))
    alone = str(tmp_path / "alone")
    turns = str(tmp_path / "turns")
    with Log.open(alone, **opts) as log:
        for kind, what, t in calls:
            log.append(what, timestamp=t) if kind == "one" else log.append_batch(what)
    writers = [Log.open(turns, multi_writer=True, **opts) for _ in range(3)]
    try:
        for kind, what, t in calls:
            w = rnd.choice(writers)
            w.append(what, timestamp=t) if kind == "one" else w.append_batch(what)
            # each writer reads what all appended, at once
            assert w.end_offset == writers[0].end_offset
        report = repair.check(turns)
        assert report.ok, report.summary()
    finally:
        for w in writers:
            w.close()
    names = sorted(n for n in os.listdir(alone) if n.endswith((".log", ".index", ".timeindex")))
    assert names == sorted(n for n in os.listdir(turns)
                           if n.endswith((".log", ".index", ".timeindex")))
    assert len([n for n in names if n.endswith(".log")]) > 3, "the calls must roll"
    for name in names:
        with open(os.path.join(alone, name), "rb") as a, open(os.path.join(turns, name), "rb") as b:
            assert a.read() == b.read(), f"{name} differs (seed {seed})"

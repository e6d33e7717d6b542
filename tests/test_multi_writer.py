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
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import pytest

import seglog
from seglog import Log, LogLockedError, OffsetOutOfRangeError, SeglogError, repair
from seglog.testing import FaultyFS, abandon
from seglog.topic import partition_for_key

from mw_child import calls, parse, record, stopped_values

SCALE = int(os.environ.get("SEGLOG_TORTURE", "1"))
CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mw_child.py")
DEADLINE = 60.0        # seconds any one wait may take before the test fails


def seed_for(name: str) -> int:
    seed = int(os.environ.get("SEGLOG_SEED", "0")) or random.randrange(1 << 30)
    print(f"\n{name}: seed {seed} (rerun with SEGLOG_SEED={seed})")
    return seed


def spawn(*args: object, **kw: object) -> subprocess.Popen:
    # unbuffered pipes: a line waiting in a buffer would hide from ``read_line``'s select
    return subprocess.Popen([sys.executable, CHILD, *map(str, args)], bufsize=0, **kw)


def wait_exit(proc: subprocess.Popen, what: str) -> int:
    try:
        return proc.wait(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"{what} did not finish in {DEADLINE} s") from None


def wait_for(cond, what: str, deadline: float = DEADLINE) -> None:
    """Poll ``cond`` until true; fail after ``deadline`` seconds."""
    end = time.monotonic() + deadline
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"waited {deadline} s for {what}")
        time.sleep(0.002)


def read_line(f, what: str) -> bytes:
    """The next line from pipe ``f`` within the deadline (b"" at end of file)."""
    sel = selectors.DefaultSelector()
    sel.register(f, selectors.EVENT_READ)
    try:
        if not sel.select(DEADLINE):
            raise AssertionError(f"no line ({what}) in {DEADLINE} s")
    finally:
        sel.close()
    line: bytes = f.readline()
    return line


def readline(proc: subprocess.Popen, what: str) -> str:
    """The next line the child prints, within the deadline (its stdout is a pipe)."""
    line = read_line(proc.stdout, what)
    assert line, f"the child ended before {what} (exit {proc.wait()})"
    return line.decode().strip()


def expect_message(m: seglog.Message) -> tuple[int, int]:
    """The (writer, seq) a message claims, checked whole against ``record``."""
    wid, seq = parse(m.value)
    v, k, h = record(wid, seq)
    assert (m.value, m.key, tuple(m.headers)) == (v, k, h), f"message at {m.offset} garbled"
    return wid, seq


# -- the writers' record: what each acknowledged ----------------------------------------
@dataclass
class Writer:
    wid: int
    report: str | None = None              # the child's report file (None: the parent)
    proc: subprocess.Popen | None = None
    acked: dict[int, int] = field(default_factory=dict)    # call -> first offset
    killed: bool = False
    calls_made: int = 0                    # the parent's own

    def read_report(self) -> dict[int, int]:
        """The calls the child reported acknowledged (a last line cut short by a
        kill is no report)."""
        if self.report is None:
            return self.acked
        try:
            with open(self.report, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return {}
        out = {}
        for line in data.split(b"\n")[:-1]:
            call, _seq, _n, first = map(int, line.split())
            out[call] = first
        return out


def check_whole_log(path: str, seed: int, writers: dict[int, Writer],
                    seen: dict[int, tuple[int, int]]) -> dict[tuple[int, int], int]:
    """Everything the brief promises of the log's final content, from the files:
    offsets dense; every message whole and one of the writers'; none twice; each
    writer's calls in its order, each call at contiguous offsets, complete unless it
    was the call in flight when its writer was killed (then a prefix, its whole
    batches); every acknowledged call at its acknowledged offset; what a reader saw
    during the run still where it saw it; nothing damaged. Returns (wid, seq) -> offset."""
    with Log.open(path, readonly=True) as r:
        msgs = list(r.iter())
        start, end = r.start_offset, r.end_offset
    assert [m.offset for m in msgs] == list(range(start, end)), "offsets not dense"
    at: dict[tuple[int, int], int] = {}
    for m in msgs:
        ws = expect_message(m)
        assert ws not in at, f"{ws} twice: at {at[ws]} and {m.offset}"
        at[ws] = m.offset
    assert {w for w, _ in at} <= set(writers), "a message of no writer"
    for w in writers.values():
        acked = w.read_report()
        plan = calls(seed, w.wid, max([*acked, w.calls_made]) + 3)
        present = []
        for i, (seq, n, _single) in enumerate(plan):
            have = [s for s in range(seq, seq + n) if (w.wid, s) in at]
            if have:
                assert have == list(range(seq, seq + len(have))), \
                    f"writer {w.wid} call {i}: not a prefix {have}"
                offs = [at[(w.wid, s)] for s in have]
                assert offs == list(range(offs[0], offs[0] + len(offs))), \
                    f"writer {w.wid} call {i}: interleaved with others' {offs}"
                present.append((i, len(have) == n))
            if i in acked:
                assert len(have) == n, f"writer {w.wid}: acknowledged call {i} lost"
                assert at[(w.wid, seq)] == acked[i], \
                    f"writer {w.wid} call {i}: at {at[(w.wid, seq)]}, acknowledged at {acked[i]}"
        idx = [i for i, _ in present]
        assert idx == list(range(len(idx))), f"writer {w.wid}: calls missing {idx}"
        assert all(full for _, full in present[:-1]), f"writer {w.wid}: a partial call not last"
        if not w.killed:
            assert set(idx) == set(acked), f"writer {w.wid} (not killed): unacknowledged calls"
        else:
            # its last acknowledgement may be unreported, the call after it in flight
            assert len(idx) <= len(acked) + 2, f"writer {w.wid}: calls it never made"
        offs = [at[(w.wid, s)] for s in sorted(s for ww, s in at if ww == w.wid)]
        assert offs == sorted(offs), f"writer {w.wid}: its order not kept"
    for off, ws in seen.items():
        assert at.get(ws) == off, f"a reader saw {ws} at {off}; now at {at.get(ws)}"
    report = repair.check(path)
    assert not report.problems, report.problems
    cli = subprocess.run([sys.executable, "-m", "seglog", "verify", path],
                         capture_output=True, timeout=DEADLINE)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    return at


class Reader:
    """A readonly reader in the test's process, checking what it reads as it goes."""

    def __init__(self, path: str) -> None:
        self.log = Log.open(path, readonly=True)
        self.next = 0
        self.seen: dict[int, tuple[int, int]] = {}

    def catch_up(self) -> None:
        if self.next < self.log.start_offset:
            self.next = self.log.start_offset       # retention went past it
        try:
            for m in self.log.iter(self.next):
                assert m.offset >= self.next, f"offset {m.offset} after {self.next}"
                self.seen[m.offset] = expect_message(m)
                self.next = m.offset + 1
        except OffsetOutOfRangeError:
            assert self.log.start_offset > self.next, "out of range, yet not deleted"

    def close(self) -> None:
        self.log.close()


# -- 1. writers killed at random instants ----------------------------------------------
KILL_OPTIONS = {
    "plain": dict(segment_bytes=8192, index_interval_bytes=512),
    "lz4": dict(segment_bytes=16384, compression="lz4", max_message_bytes=2048),
}


@pytest.mark.parametrize("variant", sorted(KILL_OPTIONS))
def test_writers_killed_at_random_instants(tmp_path, variant):
    seed = seed_for(f"multi-writer kills ({variant})")
    rnd = random.Random(seed)
    opts = KILL_OPTIONS[variant]
    path = str(tmp_path / "log")
    reports = tmp_path / "reports"
    reports.mkdir()
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
        assert w.proc is not None
        if kill:
            w.proc.send_signal(signal.SIGKILL)
        code = wait_exit(w.proc, f"writer {w.wid}")
        w.killed = code == -signal.SIGKILL
        if not w.killed:
            with open(str(reports / f"w{w.wid}.err")) as f:
                assert code == 0, f"writer {w.wid} failed ({code}): {f.read()}"
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

    kills = 10 * SCALE
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
                     f"writer {w.wid} to acknowledge {target} calls")
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
    print(f"{variant}: {len(writers) - 1} writer processes, {n_killed} killed "
          f"({killed_mid_run} after acknowledging), {end} messages, "
          f"{len(reader.seen)} seen by the reader during the run")
    assert n_killed >= kills and killed_mid_run >= kills // 2


# -- 3. a writer stopped while it holds the append lock ----------------------------------
TIMEOUT_MS = 400
SLACK = 1.5            # seconds past the timeout a loaded CI machine may take


def _wait_stopped(pid: int) -> None:
    """Until the kernel reports ``pid`` stopped (it stops itself, holding the lock)."""
    end = time.monotonic() + DEADLINE
    while True:
        done, status = os.waitpid(pid, os.WNOHANG | os.WUNTRACED)
        if done:
            assert os.WIFSTOPPED(status), f"the writer ended instead of stopping ({status})"
            return
        assert time.monotonic() < end, f"the writer did not stop in {DEADLINE} s"
        time.sleep(0.002)


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
        _wait_stopped(child.pid)
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
        if child.poll() is None:
            child.kill()
            child.wait()
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
            with Log.open(path, multi_writer=True) as log:     # the same mode joins
                assert log.append(b"joined") == 0
        child.stdin.close()
        assert wait_exit(child, "the holder") == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    with Log.open(path, multi_writer=held == "exclusive") as log:   # free once it left
        assert log.append(b"next") == (1 if held == "multi_writer" else 0)


# -- 7. forks ---------------------------------------------------------------------------
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


# -- 4. retention and compaction by one writer while others append ----------------------
def acked_offsets(seed: int, writers: dict[int, Writer]) -> dict[tuple[int, int], int]:
    """(wid, seq) -> offset of every message of an acknowledged call."""
    out = {}
    for w in writers.values():
        acked = w.read_report()
        if not acked:
            continue
        plan = calls(seed, w.wid, max(acked) + 1)
        for i, first in acked.items():
            seq, n, _ = plan[i]
            out.update({(w.wid, seq + j): first + j for j in range(n)})
    return out


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
    # after the last pass (everyone quiet) the cleaned range holds each key once
    last = passes[-1]
    assert last.skipped is None, last.skipped
    cleaned = [m for m in msgs if m.offset < last.dirty_end_offset]
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


# -- 6. topics ----------------------------------------------------------------------------
def test_three_producer_processes_on_one_topic(tmp_path):
    seed = seed_for("multi-writer topic")
    root = str(tmp_path / "root")
    parts, n_calls = 4, 40 * SCALE
    procs = {wid: spawn("topic", root, "events", wid, seed, str(tmp_path / f"w{wid}"), parts,
                        n_calls, stderr=subprocess.PIPE) for wid in (1, 2, 3)}
    try:
        for wid, p in procs.items():
            _, err = p.communicate(timeout=DEADLINE)
            assert p.returncode == 0, err.decode()
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    where: dict[tuple[int, int], tuple[int, int]] = {}
    with seglog.Topic.open(root, "events", readonly=True) as t:
        assert t.num_partitions == parts
        for p in range(parts):
            log = t.partition(p)
            msgs = list(log.iter())
            assert [m.offset for m in msgs] == list(range(log.end_offset)), f"partition {p}"
            for m in msgs:
                ws = expect_message(m)
                assert ws not in where, f"{ws} twice"
                where[ws] = (p, m.offset)
                if m.key is not None:
                    assert p == partition_for_key(m.key, parts), f"{m.key!r} in partition {p}"
    expected = set()
    for wid in procs:
        plan = calls(seed, wid, n_calls)
        with open(tmp_path / f"w{wid}") as f:
            reports = [json.loads(line) for line in f]
        assert [r[0] for r in reports] == list(range(n_calls))
        for (call, seq0, placed), (seq, n, _) in zip(reports, plan):
            assert seq0 == seq
            seqs = list(range(seq, seq + n))
            expected.update((wid, s) for s in seqs)
            keyless = {where[(wid, s)][0] for s in seqs if record(wid, s)[1] is None}
            assert len(keyless) <= 1, f"call {call}: keyless records in {keyless}"
            for p, (first, count) in placed.items():
                mine = [s for s in seqs if where[(wid, s)][0] == int(p)]
                assert [where[(wid, s)] for s in mine] == [(int(p), first + i)
                                                          for i in range(count)], \
                    f"writer {wid} call {call}: not at the acknowledged offsets of {p}"
            assert sum(c for _, c in placed.values()) == n
    assert set(where) == expected


def test_two_processes_create_one_topic_at_once(tmp_path):
    root = str(tmp_path / "root")
    for round_ in range(3 * SCALE):
        name = f"t{round_}"
        r, w = os.pipe()
        procs = [spawn("create", root, name, 5, r, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, pass_fds=(r,)) for _ in range(2)]
        os.close(r)
        try:
            for p in procs:
                assert readline(p, "its barrier") == "waiting"
            os.close(w)           # the barrier opens for both at once
            w = -1
            results = []
            for p in procs:
                out, err = p.communicate(timeout=DEADLINE)
                assert p.returncode == 0, err.decode()
                results.append(json.loads(out))
        finally:
            if w >= 0:
                os.close(w)
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        assert [x["partitions"] for x in results] == [5, 5]
        dirs = {n for n in os.listdir(root) if n.startswith(name + "-")}
        assert dirs == {f"{name}-{p}" for p in range(5)}
        with seglog.Topic.open(root, name, readonly=True) as t:
            assert t.num_partitions == 5
            for x in results:
                p, off = x["placed"]
                assert next(iter(t.partition(p).read(off))).value.startswith(b"created by ")
            assert sum(t.end_offsets().values()) == 2

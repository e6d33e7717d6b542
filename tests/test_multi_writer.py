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
    return subprocess.Popen([sys.executable, CHILD, *map(str, args)], **kw)


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


def readline(proc: subprocess.Popen, what: str) -> str:
    """The next line the child prints, within the deadline (its stdout is a pipe)."""
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        if not sel.select(DEADLINE):
            raise AssertionError(f"no line from the child ({what}) in {DEADLINE} s")
    finally:
        sel.close()
    line = proc.stdout.readline()
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

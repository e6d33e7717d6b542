"""What the multi-writer tests share: starting tests/mw_child.py processes and waiting
for them (every wait has a deadline), the record of what each writer acknowledged, a
reader that checks what it reads as it goes, and the check of a whole log's content
against the writers' acknowledgements."""


from __future__ import annotations

import os
import random
import selectors
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import seglog
from seglog import Log, OffsetOutOfRangeError, repair

from mw_child import calls, parse, record

SCALE = int(os.environ.get("SEGLOG_TORTURE", "1"))
CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mw_child.py")
DEADLINE = 60.0        # seconds any one wait may take before the test fails


def seed_for(name: str) -> int:
    seed = int(os.environ.get("SEGLOG_SEED", "0")) or random.randrange(1 << 30)
    print(f"\n{name}: seed {seed} (rerun with SEGLOG_SEED={seed})")
    return seed


def spawn(*args: object, **kw: Any) -> subprocess.Popen:
    # unbuffered pipes: a line waiting in a buffer would hide from ``read_line``'s select
    return subprocess.Popen([sys.executable, CHILD, *map(str, args)], bufsize=0, **kw)


def wait_exit(proc: subprocess.Popen, what: str) -> int:
    try:
        return proc.wait(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"{what} did not finish in {DEADLINE} s") from None


def gone(proc: subprocess.Popen) -> None:
    """Make sure a child is gone (a test's cleanup, whatever failed before it)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def wait_stopped(pid: int) -> None:
    """Until the kernel reports ``pid`` stopped (it stops itself: SIGSTOP)."""
    end = time.monotonic() + DEADLINE
    while True:
        done, status = os.waitpid(pid, os.WNOHANG | os.WUNTRACED)
        if done:
            assert os.WIFSTOPPED(status), f"the writer ended instead of stopping ({status})"
            return
        assert time.monotonic() < end, f"the writer did not stop in {DEADLINE} s"
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
    """A readonly reader in the test's process, checking what it reads as it goes;
    values in ``others`` (a stopper process's, say) are passed over unchecked."""

    def __init__(self, path: str, others: frozenset[bytes] = frozenset()) -> None:
        self.log = Log.open(path, readonly=True)
        self.next = 0
        self.seen: dict[int, tuple[int, int]] = {}
        self.others = others

    def catch_up(self) -> None:
        """Read on to the log's end as it is now: writers append on meanwhile, and a
        reader that followed them could never finish (a round of scripts/torture
        did not: 10,800 segments of 8 KiB, each roll a relist of the directory)."""
        if self.next < self.log.start_offset:
            self.next = self.log.start_offset       # retention went past it
        end = self.log.end_offset
        try:
            for m in self.log.iter(self.next, max(end, self.next)):
                assert m.offset >= self.next, f"offset {m.offset} after {self.next}"
                if m.value not in self.others:
                    self.seen[m.offset] = expect_message(m)
                self.next = m.offset + 1
        except OffsetOutOfRangeError:
            assert self.log.start_offset > self.next, "out of range, yet not deleted"

    def close(self) -> None:
        self.log.close()


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

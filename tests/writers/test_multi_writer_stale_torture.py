"""The kill harness with stale and stopped writers: three writer processes append
(tests/mw_child.py) and are killed at random instants and replaced; a stopper process
appends and stops itself (SIGSTOP) holding the append lock inside a call, then is
continued or killed; meanwhile a stale writer in this process (it never appends, so
its view is always behind) runs retention, compaction, flushes, reads and closes
(reopening after), and a readonly reader reads along.

Checked: every call of the stale writer either does its work or raises
``LogLockedError`` within its ``lock_timeout_ms`` (plus slack), never anything else
(no false damage, no bare internal error); its reads equal the readonly reader's at
once, even behind the stopped writer; at the end every acknowledged message is at its
acknowledged offset unless retention deleted it (below the final start) or compaction
removed it (a later record of its key is there); offsets dense, nothing torn or
duplicated, the files clean. Scaled by SEGLOG_TORTURE; seeds printed (rerun with
SEGLOG_SEED=<seed>).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from itertools import islice

import pytest

import seglog
from seglog import Log, LogLockedError, OffsetOutOfRangeError, repair
from seglog.testing import abandon

from helpers import wait_for
from mw_child import parse, record, stopped_values
from mw_harness import (DEADLINE, SCALE, Reader, Writer, acked_offsets, gone, readline,
                        seed_for, spawn, wait_exit, wait_stopped)

STALE_TIMEOUT_MS = 300
SLACK = 3.0            # seconds past the timeout a loaded machine may take
VARIANTS = {
    "retention": dict(segment_bytes=8192, index_interval_bytes=512, retention_bytes=48 << 10,
                      retention_check_ms=None, flush_ms=None),
    "compaction": dict(segment_bytes=8192, index_interval_bytes=512,
                       cleanup_policy="compact,delete", retention_bytes=96 << 10,
                       min_cleanable_dirty_ratio=0.0, retention_check_ms=None, flush_ms=None),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_stale_and_stopped_writers_beside_writers_killed_at_random(tmp_path, variant):
    seed = seed_for(f"stale and stopped writers ({variant})")
    for round_ in range(SCALE):
        _round(tmp_path / f"r{round_}", seed + round_, variant)


def _round(root, seed: int, variant: str) -> None:
    rnd = random.Random(seed)
    opts = VARIANTS[variant]
    child_opts = {**opts, "lock_timeout_ms": 60_000}
    path = str(root / "log")
    reports = root / "reports"
    reports.mkdir(parents=True)
    Log.open(path, multi_writer=True, **child_opts).close()
    writers: dict[int, Writer] = {}
    live: list[Writer] = []
    stoppers: list[subprocess.Popen] = []
    stale = Log.open(path, multi_writer=True, lock_timeout_ms=STALE_TIMEOUT_MS, **opts)
    reader = Reader(path, frozenset(stopped_values()) | {b"before"})
    did: dict[str, int] = {}
    stopped_for: list[float] = []

    def start() -> None:
        w = Writer(len(writers) + 1, str(reports / f"w{len(writers) + 1}"))
        w.proc = spawn("write", path, w.wid, seed, w.report, json.dumps(child_opts), 0,
                       stderr=open(str(reports / f"w{w.wid}.err"), "wb"))
        writers[w.wid] = w
        live.append(w)

    def kill(w: Writer) -> None:
        assert w.proc is not None
        w.proc.send_signal(signal.SIGKILL)
        wait_exit(w.proc, f"writer {w.wid}")
        w.killed = True
        live.remove(w)

    def bounded(what: str, fn):
        """The stale writer's call: done, or LogLockedError in bound; nothing else."""
        t0 = time.monotonic()
        try:
            got = fn()
            did[what] = did.get(what, 0) + 1
            return got
        except LogLockedError:
            took = time.monotonic() - t0
            assert took <= STALE_TIMEOUT_MS / 1000 + SLACK, f"{what} waited {took:.1f} s"
            did[what + " refused"] = did.get(what + " refused", 0) + 1
            return None

    def reopen() -> bool:
        """The stale writer opens the log again (the open waits for the append lock, a
        bound that busy appenders may pass: then it is tried again later)."""
        nonlocal stale
        try:
            stale = Log.open(path, multi_writer=True, lock_timeout_ms=STALE_TIMEOUT_MS,
                             **opts)
        except LogLockedError:
            did["reopen refused"] = did.get("reopen refused", 0) + 1
            return False
        did["reopen"] = did.get("reopen", 0) + 1
        return True

    def stale_step(stopped: bool, op: str | None = None) -> None:
        if stale.closed:
            if not stopped:   # opening needs the lock: at the next step
                reopen()
            return
        if op is None:
            op = rnd.choice(["retention", "retention", "compact", "flush", "read", "read",
                             "close"])
        if op == "retention":
            bounded(op, stale.enforce_retention)
        elif op == "compact":
            if variant == "compaction":
                bounded(op, stale.compact)
        elif op == "flush":
            before = stale.flushed_offset
            got = bounded(op, stale.flush)
            assert got is None or got >= before
        elif op == "read":
            # at once, even behind a stopped writer, and as fresh as a readonly reader
            t0 = time.monotonic()
            with Log.open(path, readonly=True) as r:
                floor = r.end_offset
            for _ in range(3):
                try:
                    end = stale.end_offset
                    mine = [m.offset for m in islice(stale.iter(), 500)]
                    tail = [m.offset for m in stale.iter(max(stale.start_offset, end - 50))]
                    break
                except OffsetOutOfRangeError:
                    continue     # retention deleted what it was reading: read again
            assert time.monotonic() - t0 < SLACK, "a read waited"
            assert end >= floor, "a writer's read saw less than a reader opened before it"
            assert mine == sorted(set(mine)), "a stale writer's read: offsets out of order"
            if variant != "compaction":
                assert mine == list(range(mine[0], mine[0] + len(mine))) if mine else True
            assert tail and tail[-1] >= end - 1
            did["read"] = did.get("read", 0) + 1
        else:
            t0 = time.monotonic()
            try:
                stale.close()
                did["close"] = did.get("close", 0) + 1
            except LogLockedError:
                assert time.monotonic() - t0 <= STALE_TIMEOUT_MS / 1000 + SLACK
                assert not stale.closed, "a refused close closed the log"
                did["close refused"] = did.get("close refused", 0) + 1
                stale.end_offset              # still open and working

    try:
        for _ in range(3):
            start()
        for step in range(6):
            # a stopper: one call half done, the append lock held
            stopper = spawn("stop", path, json.dumps(child_opts), stdout=subprocess.PIPE)
            stoppers.append(stopper)
            readline(stopper, "its first append")
            wait_stopped(stopper.pid)
            t_stop = time.monotonic()
            # retention behind a stopped writer first (what lost data once), then
            # whatever comes: at least one retention per stop the stale writer is open for
            stale_step(stopped=True, op="retention")
            for _ in range(rnd.randint(0, 2)):
                stale_step(stopped=True)
            reader.catch_up()
            if rnd.random() < 0.5:
                os.kill(stopper.pid, signal.SIGCONT)
                readline(stopper, "its stopped call")
                assert wait_exit(stopper, "the continued stopper") == 0
            else:
                os.kill(stopper.pid, signal.SIGKILL)
                wait_exit(stopper, "the killed stopper")
            stopped_for.append(time.monotonic() - t_stop)
            # the appenders: one killed at a random instant, replaced
            w = rnd.choice(live)
            target = rnd.randint(1, 10)
            wait_for(lambda: len(w.read_report()) >= target or w.proc.poll() is not None,
                     DEADLINE, f"writer {w.wid} to acknowledge {target} calls", step=0.002)
            kill(w)
            start()
            for _ in range(rnd.randint(0, 2)):
                stale_step(stopped=False)
            reader.catch_up()
        for w in list(live):
            kill(w)
        if stale.closed:
            wait_for(reopen, DEADLINE, "the stale writer to open the log again", step=0.002)
        stale.enforce_retention()
        reader.catch_up()
        stale.close()
    finally:
        for w in list(live):
            gone(w.proc)
        for s in stoppers:
            gone(s)
        reader.close()
        if not stale.closed:
            abandon(stale)
    _check(path, seed, writers, reader.seen, variant)
    print(f"{variant} (seed {seed}): {len(writers)} writer processes killed, "
          f"{len(stoppers)} stops; the stale writer's calls: {dict(sorted(did.items()))}")
    assert did.get("retention", 0) + did.get("retention refused", 0) >= 3


def _check(path: str, seed: int, writers: dict[int, Writer], seen: dict[int, tuple[int, int]],
           variant: str) -> None:
    with Log.open(path, readonly=True) as r:
        msgs = list(r.iter())
        start, end = r.start_offset, r.end_offset
    offsets = [m.offset for m in msgs]
    if variant == "compaction":
        assert offsets == sorted(set(offsets)) and all(start <= o < end for o in offsets)
        assert offsets and offsets[-1] == end - 1, "the last record is never compacted away"
    else:
        assert offsets == list(range(start, end)), "offsets not dense"
    stops = set(stopped_values()) | {b"before"}
    at: dict[tuple[int, int], int] = {}
    keys_at: dict[bytes, list[int]] = {}
    for m in msgs:
        if m.value in stops:
            continue
        wid, seq = parse(m.value)
        v, k, h = record(wid, seq)
        assert (m.value, m.key, tuple(m.headers)) == (v, k, h), f"message at {m.offset} garbled"
        assert (wid, seq) not in at, f"{(wid, seq)} twice"
        at[(wid, seq)] = m.offset
        if k is not None:
            keys_at.setdefault(k, []).append(m.offset)
    for (wid, seq), off in acked_offsets(seed, writers).items():
        if off < start:
            continue                      # retention deleted it
        got = at.get((wid, seq))
        if got is None and variant == "compaction":
            # compaction keeps the latest record of each key, and no keyless one
            k = record(wid, seq)[1]
            assert k is None or any(o > off for o in keys_at.get(k, [])), \
                f"writer {wid}: acknowledged {(wid, seq)} lost"
            continue
        assert got == off, f"writer {wid}: {(wid, seq)} at {got}, acknowledged at {off}"
    for off, ws in seen.items():
        assert off < start or at.get(ws, off) == off, f"a reader saw {ws} at {off}"
    report = repair.check(path)
    assert not report.problems, report.problems

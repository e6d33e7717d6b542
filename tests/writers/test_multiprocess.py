"""Readers and writers in separate processes."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time

import seglog
from seglog import Log

WRITER = r"""
import os, sys, time, hashlib, seglog
path, n = sys.argv[1], int(sys.argv[2])
log = seglog.Log.open(path, segment_bytes=16384, flush_ms=None)
i = 0
while i < n:
    k = 1 + (i % 7)
    vals = [hashlib.sha256(b"%d" % j).digest() * (1 + j % 5) for j in range(i, min(n, i + k))]
    if len(vals) == 1:
        log.append(vals[0], key=b"%d" % i if i % 3 == 0 else None)
    else:
        log.append_batch(vals)
    i += len(vals)
    if i % 50 < 7:
        time.sleep(0.001)
log.close()
"""

READER = r"""
import sys, hashlib, seglog
path, n = sys.argv[1], int(sys.argv[2])
log = seglog.Log.open(path, readonly=True)
print("ready", flush=True)     # open and about to wait: the writer may start
nxt = 0
h = hashlib.sha256()
while nxt < n:
    if not log.wait(nxt, timeout=30):
        print("timeout at", nxt); sys.exit(3)
    for m in log.iter(nxt):
        if m.offset != nxt:
            print("gap", m.offset, nxt); sys.exit(4)
        want = hashlib.sha256(b"%d" % nxt).digest() * (1 + nxt % 5)
        if m.value != want:
            print("mismatch at", nxt); sys.exit(5)
        nxt += 1
        if nxt >= n:
            break
print("ok", nxt)
"""


def test_reader_process_tails_writer_process(logdir):
    n = 3000
    os.makedirs(logdir)
    Log.open(logdir).close()          # the directory exists before the reader starts
    reader = subprocess.Popen([sys.executable, "-c", READER, logdir, str(n)],
                              stdout=subprocess.PIPE, text=True)
    assert reader.stdout is not None
    assert reader.stdout.readline() == "ready\n"      # the reader tails from before the first append
    writer = subprocess.Popen([sys.executable, "-c", WRITER, logdir, str(n)])
    assert writer.wait(120) == 0
    out, _ = reader.communicate(timeout=120)
    assert reader.returncode == 0, out
    assert out.strip() == f"ok {n}"
    with Log.open(logdir, readonly=True) as log:
        assert log.end_offset == n and len(log.segments) > 5


KILLED = r"""
import sys, seglog
path = sys.argv[1]
log = seglog.Log.open(path, segment_bytes=8192, flush_ms=None)
i = log.end_offset
while True:
    if i % 2:
        log.append(b"v%d" % i)
        i += 1
    else:
        log.append_batch([b"v%d" % i, b"v%d" % (i + 1)])
        i += 2
    sys.stdout.write("%d\n" % i)   # acknowledged: every offset below i returned
    sys.stdout.flush()
"""


def test_sigkill_keeps_every_acknowledged_message(logdir):
    """R1 (a quick version; the torture test with hundreds of rounds is test_crash)."""
    acked = 0
    for round_ in range(5):
        p = subprocess.Popen([sys.executable, "-c", KILLED, logdir], stdout=subprocess.PIPE,
                             text=True)
        lines = 0
        for line in p.stdout:  # type: ignore[union-attr]
            acked = max(acked, int(line))
            lines += 1
            if lines > 200 + 37 * round_:
                break
        p.send_signal(signal.SIGKILL)
        p.wait()
        with Log.open(logdir, readonly=True) as r:
            got = [m for m in r.iter()]
        assert len(got) >= acked
        assert [m.offset for m in got] == list(range(len(got)))
        assert [m.value for m in got] == [b"v%d" % i for i in range(len(got))]
    with Log.open(logdir) as log:         # the writer's recovery agrees
        assert log.end_offset >= acked

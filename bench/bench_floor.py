"""How fast could any pure-Python log of this format be? The least work, timed beside the baselines.

    .venv/bin/python bench/bench_floor.py              # 1,000,000 messages of 200 bytes
    .venv/bin/python bench/bench_floor.py --n 200000   # quicker

Each "floor" below does only work that any implementation of docs/FORMAT.md under
seglog's durability rules (docs/DURABILITY.md) has to do, with the fastest C-level calls the standard library offers,
and leaves out everything else (indexes, rolling, checks of the input, error
handling). A floor is therefore an upper bound on what seglog can reach; its ratio
to the baseline, measured in the same run, is an upper bound on seglog's ratio.

* batch floor: per 50-message batch, join the values (the checksum is over
  contiguous bytes; XXH3 cannot be chained over 50 values), checksum them
  (FORMAT.md: XXH3-64 over the batch), take their lengths (the decoder needs
  them), pack a header and copy header and values into a mapped file whose pages
  were all faulted in before the clock started (the best a writer can hope for:
  someone else allocated its page cache). No lock, no checks, no index. Baseline:
  the raw os.write of the same pre-joined bytes.
* append floor: per message, a method call with append()'s signature, the default
  timestamp (time.time_ns), the checksum of the value, the lock that makes a Log safe
  to share between threads, one struct.pack_into of a header and one copy of the
  value into a mapped file (R1: readable and SIGKILL-safe on return) whose pages
  were all faulted in before the clock started. Baseline: the per-message framing
  write.
* iter floor: per batch, the checksum check; per message, its value as bytes and one
  Message object with named fields (the public API), and reading ``m.value``.
  Baseline: the per-message framing read.

Never run as a test: timings need a quiet machine.
"""

from __future__ import annotations

import argparse
import mmap
import os
import platform
import random
import shutil
import struct
import sys
import tempfile
import threading
import time
from io import BytesIO
from itertools import chain, repeat

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, HERE)

import seglog  # noqa: E402
from xxhash import xxh3_64_intdigest  # noqa: E402
from bench_log import BATCH, MSG, framing_read, framing_write, raw_write, timed  # noqa: E402
# the read path builds each Message from one 5-tuple with this (a C-level call)
from seglog._codec.records import make_message

_HDR = struct.Struct("<qIBQHIIqqH")   # a one-record batch header, as append() writes it
_MAGIC = seglog.codec.MAGIC


def batch_floor(path: str, batches: list[list[bytes]]) -> float:
    log = _FloorLog(path, sum(map(len, map(b"".join, batches))) + len(batches) * 200)

    def run() -> None:
        crc, join, pack, mm = xxh3_64_intdigest, b"".join, _HDR.pack_into, log.mm
        pos = off = 0
        for values in batches:
            body = join(values)
            c = crc(body)
            lens = list(map(len, values))
            n = len(lens)
            end = pos + _HDR.size + len(body)
            pack(mm, pos, off, end - pos - 12, _MAGIC, c, 0, n - 1, n, 0, 0, 0)
            mm[pos + _HDR.size:end] = body
            pos = end
            off += n
    try:
        return timed(run)
    finally:
        log.close()


class _FloorLog:
    """append() reduced to what R1 and thread safety need, writing into a mapped file."""

    def __init__(self, path: str, size: int) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(self.fd, size)
        self.mm = mmap.mmap(self.fd, size)
        os.posix_fallocate(self.fd, 0, size)
        self.mm[:] = bytes(size)          # every page faulted in, before the clock starts
        self.lock = threading.Lock()
        self.pos = 0
        self.end = 0

    def append(self, value: bytes, key: None = None, timestamp: int | None = None,
               headers: tuple = ()) -> int:
        n = len(value)
        ts = time.time_ns() // 1_000_000 if timestamp is None else timestamp
        crc = xxh3_64_intdigest(value)
        lock = self.lock
        lock.acquire()
        try:
            off = self.end
            pos = self.pos
            end = pos + _HDR.size + n
            _HDR.pack_into(self.mm, pos, off, _HDR.size - 12 + n, _MAGIC, crc, 0, 0, 1, ts, ts, n)
            self.mm[pos + _HDR.size:end] = value
            self.pos = end
            self.end = off + 1
        finally:
            lock.release()
        return off

    def close(self) -> None:
        self.mm.close()
        os.close(self.fd)


def append_floor(path: str, msgs: list[bytes]) -> float:
    log = _FloorLog(path, len(msgs) * (MSG + _HDR.size))

    def run() -> None:
        ap = log.append
        for m in msgs:
            ap(m)
    try:
        return timed(run)
    finally:
        log.close()


def iter_floor(chunks: list[bytes]) -> float:
    lens = [MSG] * BATCH

    def batch(i: int, chunk: bytes):
        xxh3_64_intdigest(chunk)
        return map(make_message, zip(range(i * BATCH, (i + 1) * BATCH), repeat(0), repeat(None),
                                map(BytesIO(chunk).read, lens), repeat(())))

    def run() -> None:
        for m in chain.from_iterable(map(batch, range(len(chunks)), chunks)):
            m.value
    return timed(run)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000, help="messages per run")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs per figure")
    args = ap.parse_args()
    n = args.n - args.n % BATCH
    rnd = random.Random(1)
    distinct = [rnd.randbytes(MSG) for _ in range(4096)]
    msgs = [distinct[i % 4096] for i in range(n)]
    batches = [msgs[i:i + BATCH] for i in range(0, n, BATCH)]
    chunks = [b"".join(b) for b in batches]
    root = tempfile.mkdtemp(prefix="seglog-floor-", dir=args.dir)
    P = lambda name: os.path.join(root, name)  # noqa: E731

    def best(fn) -> float:
        out = float("inf")
        for _ in range(args.repeat):
            for name in os.listdir(root):
                p = P(name)
                shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)
            out = min(out, fn())
        return out

    print(f"seglog {seglog.__version__} floors — {time.strftime('%Y-%m-%d %H:%M')}, "
          f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores, "
          f"{n:,} messages of {MSG} bytes, best of {args.repeat}")
    raw = best(lambda: raw_write(P("raw"), chunks))
    bfloor = best(lambda: batch_floor(P("bfloor"), batches))
    fw = best(lambda: framing_write(P("frame"), msgs))
    afloor = best(lambda: append_floor(P("afloor"), msgs))

    framing_write(P("frame"), msgs)

    def read_framing() -> None:
        for _ in framing_read(P("frame")):
            pass
    fr = min(timed(read_framing) for _ in range(args.repeat))
    ifloor = min(iter_floor(chunks) for _ in range(args.repeat))
    shutil.rmtree(root)

    rate = lambda t: n / t / 1e6  # noqa: E731
    rows = [
        ("append_batch(50) vs raw write", raw, bfloor, 0.8),
        ("append_batch(50) vs framing write", fw, bfloor, 2.0),
        ("append() vs framing write", fw, afloor, 0.7),
        ("iter() vs framing read", fr, ifloor, 2.5),
    ]
    print(f"\n  {'ratio':<36} {'baseline':>10} {'floor':>10} {'floor/base':>11} {'target':>7}")
    for name, base, floor, target in rows:
        print(f"  {name:<36} {rate(base):6.2f} M/s {rate(floor):6.2f} M/s "
              f"{base / floor:10.2f}x {target:6.1f}x  "
              f"{'reachable' if base / floor >= target else 'out of reach'}")
    print("\n  out of reach: no implementation of this format in CPython on this machine gets")
    print("  there; seglog's own ratios are printed by bench_log.py.")


if __name__ == "__main__":
    main()

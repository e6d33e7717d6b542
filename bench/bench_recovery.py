"""Recovery speed: scanning an unflushed tail, and clean reopen time against log size.

    .venv/bin/python bench/bench_recovery.py [--tail-mb 512]

1. A writer appends ``--tail-mb`` of 200-byte messages in batches of 50 without
   flushing and is dropped as if killed (``seglog.testing.abandon``); the next open
   scans and validates the whole tail (framing, CRC, offsets) with the page cache
   warm. Reported: GB/s of tail scanned.
2. Logs of 10, 100 and 1,000 segments are closed cleanly and reopened: median open
   time of 7 runs. A clean open reads no segment data, so the time should be flat.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

import seglog  # noqa: E402
from seglog.testing import abandon  # noqa: E402


def tail_scan(root: str, tail_mb: int) -> None:
    path = os.path.join(root, "tail")
    log = seglog.Log.open(path, flush_ms=None, segment_bytes=1 << 30)
    batch = [os.urandom(200) for _ in range(50)]
    target = tail_mb << 20
    while log.segments[-1].size < target:
        log.append_batch(batch)
    n = log.end_offset
    abandon(log)
    with open(os.path.join(path, f"{0:020d}.log"), "rb") as f:   # warm the page cache
        while f.read(1 << 24):
            pass
    t = time.perf_counter()
    log = seglog.Log.open(path, flush_ms=None, segment_bytes=1 << 30)
    secs = time.perf_counter() - t
    rep = log.recovery
    assert rep is not None and log.end_offset == n
    print(f"tail scan: {rep.scanned_bytes / 1e6:.0f} MB unflushed tail ({n:,} messages): "
          f"scan (framing, CRC, offsets, index entries) {rep.scan_seconds:.3f} s = "
          f"{rep.scanned_bytes / rep.scan_seconds / 1e9:.2f} GB/s; whole open {secs:.3f} s "
          f"(includes writing the indexes and fsyncing the {rep.scanned_bytes / 1e6:.0f} MB "
          f"that had never been flushed)")
    log.close()
    shutil.rmtree(path)


def reopen(root: str, segments: int, segment_bytes: int = 4096) -> tuple[float, int]:
    path = os.path.join(root, f"reopen-{segments}-{segment_bytes}")
    cfg = dict(segment_bytes=segment_bytes, flush_ms=None, max_index_bytes=segment_bytes)
    log = seglog.Log.open(path, **cfg)
    payload = [os.urandom(100) for _ in range(segment_bytes // 113)]
    while len(log.segments) < segments:
        log.append_batch(payload)
    log.close()
    times = []
    for _ in range(7):
        t = time.perf_counter()
        log = seglog.Log.open(path, **cfg)
        times.append(time.perf_counter() - t)
        assert log.recovery is None
        log.close()
    times.sort()
    size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    shutil.rmtree(path)
    return times[len(times) // 2], size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tail-mb", type=int, default=512)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="seglog-bench-", dir=args.dir)
    print(f"seglog {seglog.__version__} recovery benchmark — {time.strftime('%Y-%m-%d %H:%M')}, "
          f"{os.cpu_count()} cores")
    try:
        tail_scan(root, args.tail_mb)
        for n, sb in ((10, 4096), (100, 4096), (1000, 4096), (100, 64 << 10), (100, 1 << 20)):
            t, size = reopen(root, n, sb)
            print(f"clean reopen: {n:>5} segments of {sb >> 10:>5} KiB ({size / 1e6:6.1f} MB): "
                  f"median {t * 1000:6.1f} ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

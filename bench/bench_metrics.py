"""What metrics cost the append path: the one counter ``append()`` increments,
against the whole ``append()``, in the same run.

    .venv/bin/python bench/bench_metrics.py [--n 1000000]

The other counters live off the hot path (flush, roll, retention, compaction, wait,
read errors); messages and bytes appended are derived from offsets and segment sizes.
So the cost on ``append()`` is one attribute increment inside the lock: timed here as
the difference between a loop that increments the log's counter and the same loop
without it, beside the per-message time of ``append()`` of 200-byte values.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import seglog  # noqa: E402


def best(fn, repeat: int = 5) -> float:
    return min(fn() for _ in range(repeat))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    n = ap.parse_args().n
    d = tempfile.mkdtemp(prefix="seglog-metrics-")
    value = os.urandom(200)
    try:
        def appends() -> float:
            path = os.path.join(d, "l")
            shutil.rmtree(path, ignore_errors=True)
            with seglog.Log.open(path, flush_ms=None) as log:
                ap = log.append
                t = time.perf_counter()
                for _ in range(n):
                    ap(value)
                return (time.perf_counter() - t) / n
        per_append = best(appends, 3)
        with seglog.Log.open(os.path.join(d, "c"), flush_ms=None) as log:
            def with_counter() -> float:
                t = time.perf_counter()
                for _ in range(n):
                    log._batches_appended += 1
                return (time.perf_counter() - t) / n

            def without() -> float:
                t = time.perf_counter()
                for _ in range(n):
                    pass
                return (time.perf_counter() - t) / n
            per_inc = max(0.0, best(with_counter) - best(without))
            t = time.perf_counter()
            for _ in range(1000):
                snap = log.metrics()
            per_snap = (time.perf_counter() - t) / 1000
        print(f"{n:,} appends of 200 bytes: {per_append * 1e9:.0f} ns each; the counter "
              f"increment {per_inc * 1e9:.1f} ns = {100 * per_inc / per_append:.2f} % of an "
              f"append (target <= 3 %: {'ok' if per_inc / per_append <= 0.03 else 'MISSED'})")
        print(f"a metrics() snapshot ({len(snap)} keys): {per_snap * 1e6:.1f} µs")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()

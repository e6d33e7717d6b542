"""``seglog.Producer`` beside what 8 threads do without it, same data, same run.

    scripts/bench bench_producer.py              # 400,000 messages per figure
    scripts/bench bench_producer.py --n 100000   # quicker

Every workload writes 200-byte values (os.urandom) from 8 threads into one log, best
of 3, each run on a fresh log:

* (a) ``Producer.send()`` (defaults: ``linger_ms=5``, ``durable=False``), timed until
      ``flush()`` returned (every future resolved), beside the same 8 threads calling
      ``Log.append()`` on one shared ``Log``. Both: in the page cache, safe from a
      crash of the process.
* (b) ``Producer(durable=True).send()``, timed until ``flush()`` returned (every
      record fsynced), beside 8 threads calling ``append()`` on a log opened with
      ``flush_messages=1`` (each append fsyncs before it returns). Both: safe from
      power loss. The baseline writes ``n // 20`` messages (an fsync each is slow).

Prints msgs/s of each, the ratios and the targets (a) >= 3x, (b) >= 20x with
ok / MISSED. Run by hand on a quiet machine; never as a test.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import shutil
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..", "src")))

import seglog  # noqa: E402

MSG, THREADS, REPEAT = 200, 8, 3


def run_threads(work, n: int) -> None:
    per = n // THREADS
    threads = [threading.Thread(target=work, args=(per,)) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def producer_rate(root: str, n: int, value: bytes, durable: bool) -> float:
    path = tempfile.mkdtemp(dir=root)
    with seglog.Log.open(path, flush_ms=None) as log:
        gc.collect()
        t = time.perf_counter()
        with seglog.Producer(log, durable=durable) as producer:
            send = producer.send

            def work(k: int) -> None:
                for _ in range(k):
                    send(value)
            run_threads(work, n)
            producer.flush()
        seconds = time.perf_counter() - t
        assert log.end_offset == n // THREADS * THREADS
        if durable:
            assert log.flushed_offset == log.end_offset
    shutil.rmtree(path)
    return n // THREADS * THREADS / seconds


def append_rate(root: str, n: int, value: bytes, flush_messages: int | None) -> float:
    path = tempfile.mkdtemp(dir=root)
    with seglog.Log.open(path, flush_ms=None, flush_messages=flush_messages) as log:
        append = log.append

        def work(k: int) -> None:
            for _ in range(k):
                append(value)
        gc.collect()
        t = time.perf_counter()
        run_threads(work, n)
        seconds = time.perf_counter() - t
        assert log.end_offset == n // THREADS * THREADS
    shutil.rmtree(path)
    return n // THREADS * THREADS / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=400_000, help="messages per figure")
    ap.add_argument("--dir", default=None, help="where the logs go (default: a temp dir)")
    args = ap.parse_args()
    n = args.n
    value = os.urandom(MSG)
    root = tempfile.mkdtemp(prefix="bench_producer_", dir=args.dir)
    print(f"{n:,} messages of {MSG} bytes from {THREADS} threads, best of {REPEAT}; "
          f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    r: dict[str, float] = {}
    try:
        for _ in range(REPEAT):     # alternated: a noisy moment hurts both sides alike
            for name, fn in (
                    ("(a) Producer.send()", lambda: producer_rate(root, n, value, False)),
                    ("(a) Log.append(), shared Log", lambda: append_rate(root, n, value, None)),
                    ("(b) Producer(durable=True).send()",
                     lambda: producer_rate(root, n, value, True)),
                    ("(b) Log.append(), flush_messages=1",
                     lambda: append_rate(root, n // 20, value, 1))):
                r[name] = max(r.get(name, 0.0), fn())
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n  {'workload':<38} {'msgs/s':>12}")
    for k, v in r.items():
        print(f"  {k:<38} {v:12,.0f}")
    print()
    for label, a, b, target in (
            ("(a) send / append", "(a) Producer.send()", "(a) Log.append(), shared Log", 3),
            ("(b) durable send / append+fsync", "(b) Producer(durable=True).send()",
             "(b) Log.append(), flush_messages=1", 20)):
        ratio = r[a] / r[b]
        print(f"  {label:<38} {ratio:8.2f}x   target >= {target}x  "
              f"{'ok' if ratio >= target else 'MISSED'}")


if __name__ == "__main__":
    main()

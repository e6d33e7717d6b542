"""Retention and compaction: pass times, throughput and the offset map's memory.

    .venv/bin/python bench/bench_cleaner.py [--records 1000000 --keys 100000]

1. Compaction of a keyed workload (``--records`` records over ``--keys`` keys, ~100-byte
   values, 5 % tombstones): one pass; MB/s of segments read, records/s, and the
   offset map's bytes per distinct key (Kafka's map: 24 bytes an entry). The result
   is checked against the model "latest record per key below the active segment".
2. A retention pass over 10, 100 and 1,000 segments when nothing is due (median).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

import seglog  # noqa: E402


def compaction(root: str, records: int, keys: int) -> None:
    path = os.path.join(root, "compact")
    rnd = random.Random(42)
    cfg = dict(segment_bytes=16 << 20, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0,
               flush_ms=None, cleaner_buffer_bytes=64 << 20)
    log = seglog.Log.open(path, **cfg)
    written: list[tuple[int, bytes, bytes | None]] = []
    t = time.perf_counter()
    batch = []
    for i in range(records):
        k = b"user-%07d" % rnd.randrange(keys)
        v = None if rnd.random() < 0.05 else rnd.randbytes(100)
        batch.append(seglog.Record(v, key=k, timestamp=1_700_000_000_000 + i))
        if len(batch) == 1000:
            r = log.append_batch(batch)
            written.extend((off, rec.key, rec.value) for off, rec in zip(r, batch))
            batch = []
    if batch:
        r = log.append_batch(batch)
        written.extend((off, rec.key, rec.value) for off, rec in zip(r, batch))
    log.flush()
    write_s = time.perf_counter() - t
    active = log.segments[-1].base_offset
    size = sum(s.size for s in log.segments)
    print(f"workload: {records:,} records, {keys:,} keys, {size / 1e6:.0f} MB in "
          f"{len(log.segments)} segments (written in {write_s:.1f} s)")
    stats = log.compact(now_ms=1_800_000_000_000)
    assert stats.skipped is None, stats.skipped
    mb = stats.bytes_before / 1e6
    print(f"compaction: {stats.records_read:,} records, {mb:.0f} MB in {stats.seconds:.1f} s = "
          f"{mb / stats.seconds:.1f} MB/s, {stats.records_read / stats.seconds:,.0f} records/s; "
          f"kept {stats.records_kept:,}, {stats.bytes_after / 1e6:.1f} MB after")
    sealed = [s.size for s in log.segments[:-1]]
    print(f"sealed segments: {stats.segments_before} before, {len(sealed)} after "
          f"(smallest {min(sealed) / 1e6:.2f} MB, {sum(s < 1000 for s in sealed)} under 1 kB)")
    print(f"offset map: {stats.map_entries:,} distinct keys in {stats.map_bytes / 1e6:.2f} MB = "
          f"{stats.map_bytes / stats.map_entries:.1f} bytes per key (Kafka: 24 per entry)")
    # verify against the model: below the active segment, exactly the latest record
    # per key among the records below it (the map covers the sealed segments only)
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for off, k, v in written:
        if off < active:
            latest[k] = (off, v)
    want = sorted((off, k, v) for k, (off, v) in latest.items())
    got = [(m.offset, m.key, m.value) for m in log.iter(0, active)]
    assert got == want, "compacted log differs from the model"
    tail = [m.offset for m in log.iter(active)]
    assert tail == list(range(active, log.end_offset))
    print(f"verified: {len(got):,} records below the active segment equal the model; "
          f"the active segment is untouched")
    log.close()
    shutil.rmtree(path)


def retention(root: str, segments: int) -> float:
    path = os.path.join(root, f"ret-{segments}")
    cfg = dict(segment_bytes=4096, flush_ms=None, max_index_bytes=4096,
               retention_ms=7 * 86_400_000, retention_bytes=1 << 40)
    log = seglog.Log.open(path, **cfg)
    payload = [os.urandom(100) for _ in range(36)]
    while len(log.segments) < segments:
        log.append_batch(payload)
    log.close()
    log = seglog.Log.open(path, **cfg)
    times = []
    for _ in range(7):
        t = time.perf_counter()
        assert log.enforce_retention() == []
        times.append(time.perf_counter() - t)
    log.close()
    shutil.rmtree(path)
    times.sort()
    return times[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="seglog-bench-", dir=args.dir)
    print(f"seglog {seglog.__version__} cleaner benchmark — {time.strftime('%Y-%m-%d %H:%M')}")
    try:
        compaction(root, args.records, args.keys)
        for n in (10, 100, 1000):
            print(f"retention pass, nothing due: {n:>5} segments: "
                  f"median {retention(root, n) * 1000:.2f} ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

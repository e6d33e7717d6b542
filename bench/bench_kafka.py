"""seglog.kafka reading Kafka's own segment files, beside kafka-python's decoder of the
same bytes, in one run.

    scripts/bench bench_kafka.py               # 1,000,000 records
    scripts/bench bench_kafka.py --n 200000    # quicker

The data: uncompressed magic 2 batches of 50 records of 200 bytes, no key, no
headers (what a producer's batch of equal-sized records looks like), in one segment
file of a partition directory; built with kafka-python's record builder (one batch,
repeated at successive base offsets: the base offset lies outside the CRC).

* kafka-python: ``MemoryRecords`` over the same bytes, every record's offset,
  timestamp, key, value and headers read (kafka-python's consumer does this per
  fetched record); its CRC check is left out (in pure Python without the crc32c
  package it would dominate), so this is its decoding alone. seglog checks every
  batch's CRC32C.
* seglog iter(): ``KafkaPartition.iter()`` from the files, ``m.value`` read.
* seglog read_arrow(): ``KafkaPartition.read_arrow()``, one pyarrow Table.

Never run as a test: timings need a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from seglog import kafka

PER_BATCH = 50
SIZE = 200
TS = 1_750_000_000_000


def build(path: str, n: int) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i in range(PER_BATCH):
        b.append(i, TS + i // 10, None, bytes([65 + i % 26]) * SIZE, [])
    one = bytes(b.build())
    parts = []
    for k in range(n // PER_BATCH):
        parts.append((k * PER_BATCH).to_bytes(8, "big") + one[8:])
    data = b"".join(parts)
    os.makedirs(path)
    with open(os.path.join(path, "%020d.log" % 0), "wb") as f:
        f.write(data)
    return data


def best(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bench-kafka-")
    try:
        d = os.path.join(root, "events-0")
        data = build(d, a.n)
        n = len(data) // (len(data) // (a.n // PER_BATCH)) * PER_BATCH

        def kafka_python() -> None:
            mr = MemoryRecords(data)
            count = 0
            while True:
                batch = mr.next_batch()
                if batch is None:
                    break
                for r in batch:
                    r.offset, r.timestamp, r.key, r.value, r.headers
                    count += 1
            assert count == n

        part = kafka.open_partition(d)

        def seglog_iter() -> None:
            count = 0
            for m in part.iter():
                m.value
                count += 1
            assert count == n

        def seglog_arrow() -> None:
            assert part.read_arrow().num_rows == n

        print(f"{n:,} records of {SIZE} bytes in batches of {PER_BATCH}, uncompressed; "
              f"{platform.machine()} {platform.python_implementation()} "
              f"{platform.python_version()}, {os.cpu_count()} cpu(s), "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        base = best(kafka_python, a.reps)
        print(f"  kafka-python MemoryRecords: {n / base / 1e6:6.2f} M records/s")
        it = best(seglog_iter, a.reps)
        print(f"  seglog.kafka iter():        {n / it / 1e6:6.2f} M records/s "
              f"({base / it:.1f}x kafka-python)")
        ar = best(seglog_arrow, a.reps)
        print(f"  seglog.kafka read_arrow():  {n / ar / 1e6:6.2f} M records/s "
              f"({it / ar:.1f}x iter())")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()

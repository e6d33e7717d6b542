"""seglog quickstart: a million access-log events into a segmented log and back.

    scripts/demo                  # from a fresh clone: makes .venv, then runs this
    python examples/quickstart.py [--events N] [--dir DIR]

Writes JSON-ish access-log lines in batches, rolls segments, reads everything back
(verifying every byte), finds an offset by time, tails the log from a second reader,
and compares the size of the same data with lz4 batch compression.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import seglog  # noqa: E402
from access_log import access_log_lines  # noqa: E402


def write(path: str, events: list[tuple[int, bytes]], batch: int, **config) -> float:
    """Append the events in batches of ``batch``; return seconds taken."""
    t = time.perf_counter()
    with seglog.Log.open(path, **config) as log:
        for i in range(0, len(events), batch):
            chunk = events[i:i + batch]
            log.append_batch([seglog.Record(line, timestamp=ts) for ts, line in chunk])
        log.flush()
    return time.perf_counter() - t


def disk_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)
               if f.endswith(".log"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--dir", default="demo-data")
    ap.add_argument("--segment-mib", type=int, default=32, help="segment size (MiB)")
    args = ap.parse_args()
    root = os.path.abspath(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    plain_dir, lz4_dir = os.path.join(root, "access-log"), os.path.join(root, "access-log-lz4")

    print(f"seglog {seglog.__version__} quickstart: {args.events:,} access-log events -> {root}")
    # recent timestamps (ending a minute ago): the logs are inside the default 7-day
    # retention, so a writer opened on them later keeps them
    start_ms = int(time.time() * 1000) - 2 * args.events - 60_000
    events = list(access_log_lines(args.events, start_ms=start_ms))
    raw = sum(len(line) for _, line in events)
    print(f"  generated {args.events:,} events, {raw / 1e6:.1f} MB of JSON lines "
          f"(avg {raw / args.events:.0f} bytes), e.g.\n    {events[0][1].decode()}")

    seg_bytes = args.segment_mib << 20
    secs = write(plain_dir, events, 500, segment_bytes=seg_bytes)
    print(f"\nwrite  : {args.events / secs / 1e6:.2f} M events/s, {raw / secs / 1e6:.0f} MB/s "
          f"(append_batch of 500, then flush)")

    with seglog.Log.open(plain_dir, readonly=True) as log:
        segs = log.segments
        print(f"layout : {len(segs)} segments of up to {seg_bytes >> 20} MiB, offsets "
              f"[{log.start_offset}, {log.end_offset})")
        for s in segs[:3]:
            print(f"         {os.path.basename(s.path)}  {s.size / 1e6:6.1f} MB  "
                  f"index entries {len(s.index):,}")
        if len(segs) > 3:
            print(f"         ... {len(segs) - 3} more")

        t = time.perf_counter()
        n = 0
        for m, (ts, line) in zip(log.iter(), events):
            if m.value != line or m.timestamp != ts or m.offset != n:
                raise SystemExit(f"mismatch at offset {n}")
            n += 1
        secs = time.perf_counter() - t
        assert n == args.events
        print(f"read   : {n / secs / 1e6:.2f} M events/s, every event checked byte for byte")

        target = events[len(events) * 3 // 4][0]
        t = time.perf_counter()
        off = log.offset_for_time(target)
        ms = (time.perf_counter() - t) * 1000
        assert off is not None and log.read(off).first_offset == off
        first = next(iter(log.read(off)))
        print(f"time   : first event at or after ts={target} is offset {off:,} "
              f"(found in {ms:.2f} ms via the time index)\n         {first.value[:90].decode()}...")

        page = log.read(500_000 % max(1, log.end_offset), max_bytes=64 << 10)
        print(f"fetch  : read(offset, max_bytes=64 KiB) -> {len(page)} events in "
              f"{page.size_in_bytes:,} bytes of whole batches, next offset {page.next_offset:,}")

    # a second process would do the same: a readonly reader tails the writer
    with seglog.Log.open(plain_dir) as writer, seglog.Log.open(plain_dir, readonly=True) as reader:
        start = writer.end_offset
        writer.append(b'{"event":"deploy","version":"1.2.3"}')
        assert reader.wait(start, timeout=5)
        tail = next(reader.iter(start))
        print(f"tail   : a readonly reader saw offset {tail.offset:,} appear: {tail.value.decode()}")

    secs = write(lz4_dir, events, 500, segment_bytes=seg_bytes, compression="lz4")
    plain, packed = disk_bytes(plain_dir), disk_bytes(lz4_dir)
    print(f"\nlz4    : {plain / 1e6:.1f} MB -> {packed / 1e6:.1f} MB on disk "
          f"({packed / plain:.2f}x), written at {args.events / secs / 1e6:.2f} M events/s")
    with seglog.Log.open(lz4_dir, readonly=True) as log:
        t = time.perf_counter()
        same = sum(1 for m, (_, line) in zip(log.iter(), events) if m.value == line)
        secs = time.perf_counter() - t
        assert same == args.events
        print(f"         read back and checked at {same / secs / 1e6:.2f} M events/s")
    with seglog.Log.open(plain_dir, readonly=True) as log:
        segs = log.segments                 # the deploy event may have rolled one more
    print(f"\nsummary: {args.events:,} events (+1 deploy), {len(segs)} segments, "
          f"{plain / args.events - raw / args.events:.1f} bytes/event of framing, "
          f"lz4 keeps {packed / plain:.0%} of the bytes. Data left in {root}")


if __name__ == "__main__":
    main()

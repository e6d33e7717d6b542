"""A day of realistic data under one root, as an operator finds it: what the CLI and
notebook tests look at, and what ``scripts/screenshots`` renders.

    orders-0..5   a 6-partition topic of JSON orders (keys, headers, lz4), one day
    access        a plain log of access lines (no compression)
    users         a compacted log of user profiles, with tombstones
    clicks        a plain log with one flipped byte in a sealed segment (``damage``)
    __groups/     billing (a live member when ``live`` is given), audit (its member
                  killed: dead, two partitions never committed)

``build(root)`` returns the ``Day``: offsets and counts the tests compare with.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import seglog
from seglog import Log, Record, Topic

DAY_MS = 24 * 3600 * 1000
PARTITIONS = 6
# a member of "audit" that commits part of partitions 0..3 and is then killed
_AUDIT = r"""
import sys, seglog
c = seglog.Consumer(sys.argv[1], "audit", topics=["orders"], auto_commit_ms=None,
                    member_id="audit-worker-1-7f3c9e2a41d8", session_timeout_ms=600000)
got = 0
while got < 600:
    got += len(c.poll(timeout_ms=200, max_records=100))
c.commit({tp: min(c.position(*tp), 150) for tp in c.assignment() if tp[1] < 4})
print("ready", flush=True)
sys.stdin.readline()
"""


@dataclass
class Day:
    root: str
    t0: int                                   # the day's first millisecond
    orders_end: dict[int, int] = field(default_factory=dict)
    access_end: int = 0
    users_keys: int = 0                       # distinct keys left after compaction
    clicks_damage_offset: int = 0             # the first offset of the damaged batch
    clicks_end: int = 0                       # the log's end offset (past the damage)
    clicks_segment: str = ""                  # the damaged segment file
    consumer: seglog.Consumer | None = None   # billing's live member (``live=True``)

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None


def _order(rnd: random.Random, i: int) -> bytes:
    return json.dumps({"order": i, "customer": f"c-{rnd.randrange(400):03d}",
                       "items": rnd.randrange(1, 6), "total": round(rnd.uniform(3, 300), 2),
                       "currency": "EUR", "status": rnd.choice(["new", "paid", "shipped"])},
                      separators=(",", ":")).encode()


def _times(rnd: random.Random, t0: int, n: int) -> list[int]:
    """``n`` timestamps over the day, busier in the afternoon, ascending."""
    out = []
    for _ in range(n):
        hour = rnd.choices(range(24), weights=[1, 1, 1, 1, 1, 2, 3, 5, 7, 8, 8, 9, 10, 10,
                                               11, 12, 12, 11, 9, 7, 5, 3, 2, 1])[0]
        out.append(t0 + hour * 3_600_000 + rnd.randrange(3_600_000))
    return sorted(out)


def build(root: str, seed: int = 7, orders: int = 30_000, live: bool = False,
          t0: int | None = None) -> Day:
    """Fill ``root`` with the day (see the module's docstring); ``t0`` defaults to
    the start of yesterday (UTC), so the day is a day old."""
    rnd = random.Random(seed)
    if t0 is None:
        now = int(time.time() * 1000)
        t0 = now - now % DAY_MS - DAY_MS
    day = Day(root=root, t0=t0)
    with Topic.open(root, "orders", partitions=PARTITIONS, compression="lz4",
                    segment_bytes=256 << 10) as topic:
        times = _times(rnd, t0, orders)
        batch: list[Record] = []
        want = 1
        for i, ts in enumerate(times):
            key = b"c-%03d" % rnd.randrange(400)
            headers = [("trace-id", rnd.randbytes(8).hex().encode()),
                       ("source", rnd.choice([b"web", b"app", b"pos"]))]
            batch.append(Record(_order(rnd, i), key=key, headers=headers, timestamp=ts))
            if len(batch) >= want or i == len(times) - 1:
                topic.append_batch(batch)       # one request, or a producer's batch
                batch, want = [], rnd.choice([1, 1, 5, 50])
        day.orders_end = topic.end_offsets()
    with Log.open(os.path.join(root, "access"), segment_bytes=128 << 10) as log:
        for ts in _times(rnd, t0, 4000):
            line = (f'10.0.{rnd.randrange(256)}.{rnd.randrange(256)} "GET '
                    f'{rnd.choice(["/", "/login", "/cart", "/pay"])} HTTP/1.1" '
                    f'{rnd.choice([200] * 9 + [404, 500])} {rnd.randrange(200, 9000)}')
            log.append(line.encode(), timestamp=ts)
        day.access_end = log.end_offset
    with Log.open(os.path.join(root, "users"), cleanup_policy="compact",
                  segment_bytes=32 << 10, min_cleanable_dirty_ratio=0.0) as log:
        ts = _times(rnd, t0, 3000)
        for i in range(3000):
            k = b"user-%03d" % rnd.randrange(300)
            if i % 97 == 0:
                log.append(None, key=k, timestamp=ts[i])           # a tombstone
            else:
                log.append(json.dumps({"name": f"user {k.decode()}", "plan": rnd.choice(
                    ["free", "pro"]), "v": i}).encode(), key=k, timestamp=ts[i])
        log.compact()
        day.users_keys = len({m.key for m in log})
    clicks = os.path.join(root, "clicks")
    with Log.open(clicks, segment_bytes=24 << 10, compression="lz4") as log:
        ts = _times(rnd, t0, 12_000)
        for k in range(0, 12_000, 100):
            log.append_batch([Record(b'{"page":"/p/%d","ms":%d}' % (rnd.randrange(90),
                                                                    rnd.randrange(900)),
                                     timestamp=t) for t in ts[k:k + 100]])
        seg = log.segments[len(log.segments) // 2]
        day.clicks_segment, day.clicks_end = seg.path, log.end_offset
        first = seg.first_header()
        assert first is not None
        size = first.size
        day.clicks_damage_offset = seg.base_offset
    damage(day.clicks_segment, size // 2)         # inside the segment's first batch
    _groups(day, live)
    return day


def damage(path: str, pos: int) -> None:
    """Flip one byte of a file (a bit rot in the middle of a batch)."""
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x5A]))


def _groups(day: Day, live: bool) -> None:
    root = day.root
    p = subprocess.Popen([sys.executable, "-c", _AUDIT, root], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
    ends = day.orders_end
    seglog.consumer_group.commit_offsets(
        root, "billing", {("orders", q): max(0, ends[q] - (0 if q % 3 else 40 + 900 * q))
                          for q in range(PARTITIONS)})
    if live:
        # a session longer than the tests look at it: alive, not silent
        c = seglog.Consumer(root, "billing", topics=["orders"], auto_commit_ms=None,
                            member_id="billing-1", session_timeout_ms=3_600_000)
        deadline = time.monotonic() + 60
        while len(c.assignment()) < PARTITIONS and time.monotonic() < deadline:
            c.poll(timeout_ms=50, max_records=1)
        day.consumer = c

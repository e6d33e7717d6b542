"""Values shaped like batches: a log that mirrors another log's raw batches.

A torn last append must never make the log refuse to open, whatever the values hold:
recovery's "valid data follows the damage" search must not take a batch inside the
torn batch's own value for data written after it. Real damage followed by real later
batches is still refused (tests/crash/test_crash.py checks that rule).
"""

from __future__ import annotations

import os
import random
import shutil

from seglog import Log, MessageSet
from seglog.testing import abandon
from test_crash import child_writer, kill_at_random

SCALE = int(os.environ.get("SEGLOG_TORTURE", "1"))
TS = 1_700_000_000_000


def seed_for(name: str) -> int:
    seed = int(os.environ.get("SEGLOG_SEED", "0")) or random.randrange(1 << 30)
    print(f"\n{name}: seed {seed} (rerun with SEGLOG_SEED={seed})")
    return seed


def mirrored(i: int) -> bytes:
    """Another log's raw batches as a value (what ``MessageSet.buffer()`` of a read
    gives): their base offsets are far above the mirror's own offsets, so each would
    pass for a batch continuing the mirror."""
    out = []
    for b in range(2 + i % 3):
        recs = [b"inner %d.%d.%d" % (i, b, j) for j in range(1 + (i + b) % 5)]
        base = 1_000_000 + 100 * i + 10 * b
        out.append(bytes(MessageSet.from_records(recs, base_offset=base, timestamp=TS).buffer()))
    return b"".join(out)


def check(log: Log, at_least: int, where: str) -> int:
    got = [(m.offset, m.value) for m in log.iter()]
    assert [o for o, _ in got] == list(range(log.end_offset)), f"{where}: offsets"
    assert all(v == mirrored(o) for o, v in got), f"{where}: wrong value"
    assert log.end_offset >= at_least, f"{where}: lost acknowledged data"
    return log.end_offset


def test_torn_last_append_of_a_batch_shaped_value_at_every_cut(tmp_path):
    src = tmp_path / "src"
    # a small capacity: each cut copies the (preallocated) active segment
    with Log.open(src, flush_ms=None, segment_bytes=65536, max_message_bytes=8192) as log:
        for i in range(20):
            log.append(mirrored(i))
        log.flush()
        last = log.append(mirrored(20))
        seg = log.segments[-1]
        start = seg.find_position(last)[0]
        end = seg.size
        abandon(log)
    value = mirrored(20)
    vstart = end - len(value)
    assert vstart > start
    # the copy of the value stopped at `cut`: everything after it is still zeros
    cuts = sorted(set(range(vstart, end, 5)) | {vstart, end - 1, vstart + len(value) // 2})
    for cut in cuts:
        d = tmp_path / f"c{cut}"
        shutil.copytree(src, d)
        with open(d / os.path.basename(seg.path), "r+b") as f:
            f.seek(cut)
            f.write(bytes(end - cut))
        with Log.open(d, segment_bytes=65536, max_message_bytes=8192) as again:
            # must not refuse: a torn tail, and the same boot
            assert again.end_offset == 20, cut
            check(again, 20, f"cut at {cut}")
        with Log.open(d, readonly=True) as reader:
            assert check(reader, 20, f"reader, cut at {cut}") == 20
        shutil.rmtree(d)


def test_sigkill_while_mirroring_batches(tmp_path):
    seed = seed_for("mirror sigkill")
    rnd = random.Random(seed)
    path = str(tmp_path / "log")
    acked = 0
    rounds = 30 * SCALE
    for r in range(rounds):
        def child(wfd: int, r: int = r) -> None:
            child_writer(path, wfd, seed + r, mirrored, 4, segment_bytes=8192,
                         max_message_bytes=8192)

        acked = max(acked, kill_at_random(child, rnd.uniform(0.005, 0.08)))
        with Log.open(path) as log:          # never refuses
            check(log, acked, f"round {r}")
    print(f"mirror sigkill: {rounds} rounds, {acked} acknowledged, 0 lost, 0 refusals")

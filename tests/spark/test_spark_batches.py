"""The Spark source's Arrow batches without Spark: ranges of several topics and
partitions read one after another in one process (as a reused Python worker reads
its tasks' ranges) each come out with their own topic, partition and rows, whatever
the earlier ranges were (the constant columns are shared slices), equal to
``Log.iter`` of the range."""

from __future__ import annotations

import os
import random

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

from seglog import Log, Record, Topic  # noqa: E402
from seglog import spark as sgs  # noqa: E402
from seglog.spark import OffsetRange, _options  # noqa: E402

NOW = 1_700_000_000_000


def rows_of(batches: list, include_headers: bool) -> list[tuple]:
    out = []
    for b in batches:
        assert b.schema.equals(sgs.arrow_schema(include_headers))
        d = b.to_pydict()
        micros = b.column("timestamp").cast(pa.int64()).to_pylist()
        for i in range(b.num_rows):
            row = (d["key"][i], d["value"][i], d["topic"][i], d["partition"][i], d["offset"][i],
                   micros[i], d["timestampType"][i])
            if include_headers:
                row += (tuple((h["key"], h["value"]) for h in d["headers"][i]),)
            out.append(row)
    return out


def expected(root: str, r: OffsetRange, include_headers: bool) -> list[tuple]:
    with Log.open(os.path.join(root, f"{r.topic}-{r.partition}"), readonly=True) as log:
        return [(m.key, m.value, r.topic, r.partition, m.offset, m.timestamp * 1000, 0)
                + ((tuple(m.headers),) if include_headers else ())
                for m in log.iter(r.fromOffset, r.untilOffset)]


def test_ranges_of_several_topics_and_partitions_in_one_process(tmp_path):
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rnd = random.Random(seed)
    root = str(tmp_path)
    big = 70_000       # one batch of more rows than the shared constant arrays hold at first
    with Topic.open(root, "wide", partitions=2) as wide, \
            Topic.open(root, "a-much-longer-topic-name", partitions=3) as other:
        wide.append_batch([b"%d" % i for i in range(big)], partition=0)
        wide.append_batch([b"w%d" % i for i in range(30)], partition=1)
        for k in range(40):
            n = rnd.randrange(1, 60)
            recs = [Record(b"v%d-%d" % (k, i) if rnd.random() < 0.9 else None,
                           key=None if rnd.random() < 0.5 else b"k%d" % i,
                           timestamp=NOW + k * 1000 + i,
                           headers=[("h", b"%d" % i)] if rnd.random() < 0.2 else [])
                    for i in range(n)]
            other.append_batch(recs, partition=k % 3)
        ends = {(t, p): other.partition(p).end_offset if t != "wide" else wide.partition(p).end_offset
                for t, p in [("wide", 0), ("wide", 1), ("a-much-longer-topic-name", 0),
                             ("a-much-longer-topic-name", 1), ("a-much-longer-topic-name", 2)]}
    ranges = []
    for (t, p), end in ends.items():
        a = rnd.randrange(0, end // 3)
        b = rnd.randrange(a + 1, end + 1)          # often inside a batch and a chunk
        ranges += [OffsetRange(t, p, 0, end), OffsetRange(t, p, a, b)]
    rnd.shuffle(ranges)
    ranges.insert(0, OffsetRange("wide", 0, 0, big))     # the first of its topic: 70,000 rows
    for include_headers in (False, True):
        o = _options.parse_options({"path": root, "subscribe": "wide,a-much-longer-topic-name",
                                    "includeHeaders": str(include_headers).lower()}, False)
        for r in ranges:
            got = rows_of(list(sgs.read_range(o, r)), include_headers)
            assert got == expected(root, r, include_headers), r

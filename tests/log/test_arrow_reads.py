"""The columnar read path as users rely on it: ``Log.read_arrow()``,
``MessageSet.to_arrow()``, ``MessageSet.columns()`` and the Spark source's
``spark_batch`` give exactly the rows ``iter()`` gives (offset, timestamp in ms, key,
value, headers) for every kind of batch; the Arrow data they return stays valid and
unchanged whatever happens to the log afterwards (close, retention, compaction, new
appends and reads); a damaged batch is refused with ``CorruptRecordError``; bad
arguments get typed errors and empty reads the documented schema.

The equality and lifetime tests run once with the default binary columns and once
with ``views=True`` (key and value as ``binary_view`` over the read buffers), which
is skipped while ``read_arrow``/``to_arrow`` do not take that keyword.
"""

from __future__ import annotations

import gc
import mmap
import os
import random
import shutil
import struct
import tempfile
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog import (CorruptRecordError, Log, LogClosedError, MessageSet, OffsetOutOfRangeError,
                    Record, codec)
from seglog._codec import format as _format
from seglog._codec.columns import ARROW_FIELDS
from seglog.message import Columns, arrow_schema
from seglog.spark import arrow_schema as spark_schema, spark_batch

from clock import SYNTHETIC_CLOCK

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")                   # the Arrow builders need it
from seglog._codec.arrow_batches import arrow_columns

MiB = 1 << 20
_VIEWS_KNOWN: list[bool] = []


@pytest.fixture(params=[False, True], ids=["binary", "views"])
def views(request, tmp_path_factory) -> bool:
    """Both column layouts; ``views`` skipped (before a log is built) while
    ``read_arrow`` does not take the keyword."""
    if request.param and not _VIEWS_KNOWN:
        with Log.open(str(tmp_path_factory.mktemp("probe") / "log"), **SYNTHETIC_CLOCK) as log:
            log.append(b"probe")
            try:
                log.read_arrow(views=True)
                _VIEWS_KNOWN.append(True)
            except TypeError as e:
                if "views" not in str(e):
                    raise
    if request.param and not _VIEWS_KNOWN:
        pytest.skip("views not implemented yet")
    return bool(request.param)


# -- reading every way ---------------------------------------------------------------
def arrow(source: Log | MessageSet, views: bool, *args: Any) -> Any:
    """``source.read_arrow(*args)`` (a ``Log``) or ``source.to_arrow()`` (a
    ``MessageSet``); with ``views=True`` passed only when asked, and the test skipped
    while the keyword is unknown."""
    read = source.read_arrow if isinstance(source, Log) else source.to_arrow
    if not views:
        return read(*args)
    try:
        return read(*args, views=True)
    except TypeError as e:
        if "views" in str(e):
            pytest.skip("views not implemented yet")
        raise


def check_schema(schema: Any, views: bool) -> None:
    want = arrow_schema()
    if not views:
        assert schema == want
        return
    assert tuple(schema.names) == ARROW_FIELDS
    for name in ("offset", "timestamp", "headers"):
        assert schema.field(name) == want.field(name), name
    for name in ("key", "value"):
        assert schema.field(name).type == pa.binary_view(), name
        assert schema.field(name).nullable


def rows(t: Any, views: bool = False) -> list[tuple]:
    """A Table's or RecordBatch's messages as ``tuple(Message)``s, after checking its
    schema and that its arrays are well formed (offsets inside their buffers)."""
    check_schema(t.schema, views)
    t.validate(full=True)
    stamps = t.column("timestamp").cast(pa.int64()).to_pylist()      # exact milliseconds
    headers = [tuple((h["key"], h["value"]) for h in hs)
               for hs in t.column("headers").to_pylist()]
    return list(zip(t.column("offset").to_pylist(), stamps, t.column("key").to_pylist(),
                    t.column("value").to_pylist(), headers))


def column_rows(c: Columns) -> list[tuple]:
    """Messages rebuilt from ``Columns`` as their docstring defines them."""
    out, vpos, kpos = [], 0, 0
    vnull, knull = set(c.value_nulls), set(c.key_nulls)
    assert len(c.timestamps) == len(c.value_lengths) == len(c.offsets)
    for i, off in enumerate(c.offsets):
        n = c.value_lengths[i]
        value = None if i in vnull else bytes(c.values[vpos:vpos + n])
        assert i not in vnull or n == 0
        vpos += n
        key = None
        if c.key_lengths is not None:
            assert c.keys is not None
            k = c.key_lengths[i]
            key = None if i in knull else bytes(c.keys[kpos:kpos + k])
            kpos += k
        out.append((off, c.timestamps[i], key, value, c.headers[i] if c.headers else ()))
    assert vpos == len(c.values) and (c.keys is None or kpos == len(c.keys))
    return out


def spark_rows(c: Columns) -> list[tuple]:
    """The messages of ``spark_batch`` (with headers, and without: the same columns)."""
    b = spark_batch(c, "orders", 3, include_headers=True)
    assert b.schema == spark_schema(True)
    b.validate(full=True)
    plain = spark_batch(c, "orders", 3)
    assert plain.schema == spark_schema(False)
    plain.validate(full=True)
    for name in ("key", "value", "offset", "timestamp"):
        assert plain.column(name).to_pylist() == b.column(name).to_pylist(), name
    n = b.num_rows
    assert b.column("topic").to_pylist() == ["orders"] * n
    assert b.column("partition").to_pylist() == [3] * n
    assert b.column("timestampType").to_pylist() == [0] * n
    micros = b.column("timestamp").cast(pa.int64()).to_pylist()
    assert all(us % 1000 == 0 for us in micros)
    headers = [tuple((h["key"], h["value"]) for h in hs)
               for hs in b.column("headers").to_pylist()]
    return list(zip(b.column("offset").to_pylist(), [us // 1000 for us in micros],
                    b.column("key").to_pylist(), b.column("value").to_pylist(), headers))


def batches(log: Log) -> list[tuple[int, int, int, int, int]]:
    """(base offset, last offset, attributes, record count, bytes) of every batch."""
    out = []
    off = log.start_offset
    while off < log.end_offset:
        ms = log.read(off, 1 << 30)
        with ms.buffer() as buf:
            for _, h in codec.batches_in(buf, 0, len(buf)):
                out.append((h.base_offset, h.last_offset, h.attributes,
                            h.record_count, h.size))
        assert ms.next_offset > off
        off = ms.next_offset
    return out


def cut_points(log: Log) -> list[int]:
    """Offsets at and around every batch's edges (inside batches too), in order."""
    lo, hi = log.start_offset, log.end_offset
    cuts = {lo, hi}
    for base, last, *_ in batches(log):
        cuts.update((base, base + 1, last, last + 1, (base + last) // 2))
    return sorted(c for c in cuts if lo <= c <= hi)


def check_reads(log: Log, views: bool, rnd: random.Random, ranges: int = 40) -> list[tuple]:
    """Every columnar read of ``log`` equals ``iter()`` over the same offsets."""
    everything = [tuple(m) for m in log.iter()]
    assert everything
    assert rows(arrow(log, views), views) == everything
    cuts = cut_points(log)
    pairs = list(zip(cuts, cuts[1:])) + list(zip(cuts, cuts[2:]))
    pairs += [tuple(sorted(rnd.sample(cuts, 2))) for _ in range(ranges)]
    rnd.shuffle(pairs)
    for a, b in pairs[:ranges]:
        want = [r for r in everything if a <= r[0] < b]
        assert rows(arrow(log, views, a, b), views) == want, (a, b)
        assert [tuple(m) for m in log.iter(a, b)] == want, (a, b)
    for a in rnd.sample(cuts[:-1], min(len(cuts) - 1, 12)):
        for max_bytes in (1, 4096, MiB):
            ms = log.read(a, max_bytes)
            want = [r for r in everything if a <= r[0] < ms.next_offset]
            # (in a compacted log a set may hold only messages below ``a``: empty)
            assert ms.next_offset > a and [tuple(m) for m in ms] == want, (a, max_bytes)
            assert rows(arrow(ms, views), views) == want, (a, max_bytes)
            if not views:
                assert column_rows(ms.columns()) == want, (a, max_bytes)
                assert spark_rows(ms.columns()) == want, (a, max_bytes)
    with Log.open(log.path, readonly=True) as reader:
        assert rows(arrow(reader, views), views) == everything
    return everything


# -- the kinds of batch --------------------------------------------------------------
# a writer preallocates segment_bytes + max_message_bytes per segment: small logs
# roll faster with a smaller bound
SMALL = dict(max_message_bytes=1 << 17, **SYNTHETIC_CLOCK)

def text(i: int, n: int) -> bytes:
    """``n`` bytes that lz4 compresses and that differ with ``i``."""
    return (b"%d-" % i * (n // 2 + 2))[:n]


def build_plain(path: str, rnd: random.Random) -> Log:
    log = Log.open(path, segment_bytes=1 << 14, **SMALL)
    for _ in range(30):
        log.append_batch([rnd.randbytes(rnd.randrange(0, 300))
                          for _ in range(rnd.randrange(2, 40))])
    return log


def build_wide(path: str, rnd: random.Random) -> Log:
    log = Log.open(path, segment_bytes=1 << 18, max_message_bytes=1 << 18, **SYNTHETIC_CLOCK)
    for i in range(6):
        big = rnd.randbytes(65_536 + rnd.randrange(0, 20_000))
        log.append_batch([b"", b"s" * i, big, rnd.randbytes(13)])
        log.append_batch([Record(big, key=b"k%d" % i), Record(None, key=b"k"),
                          Record(b"", key=rnd.randbytes(70_000) if i % 2 else None)])
        log.append(rnd.randbytes(66_000))
        log.append_batch([rnd.randbytes(20) for _ in range(10)])
    return log


def build_lz4(path: str, rnd: random.Random) -> Log:
    log = Log.open(path, segment_bytes=1 << 14, compression="lz4", **SMALL)
    for i in range(30):
        n = rnd.randrange(2, 40)
        shape = i % 5
        if shape == 0:
            log.append_batch([text(j, rnd.randrange(0, 200)) for j in range(n)])
        elif shape == 1:                          # keys, some None; tombstones
            log.append_batch([Record(None if j % 4 == 0 else text(j, 50),
                                     key=None if j % 3 == 0 else text(j % 5, 8))
                              for j in range(n)])
        elif shape == 2:                          # headers, per-record timestamps
            log.append_batch([Record(text(j, 30), timestamp=1000 + 7 * j,
                                     headers=[("h", text(j, 5))] if j % 2 else ())
                              for j in range(n)])
        elif shape == 3:                          # wide lengths, compressed
            log.append_batch([text(j, 70_000 if j == 0 else 10) for j in range(n)])
        else:                                     # one record: never compressed
            log.append(text(i, 40))
    return log


def build_keys(path: str, rnd: random.Random) -> Log:
    log = Log.open(path, segment_bytes=1 << 14, **SMALL)
    for i in range(30):
        n = rnd.randrange(1, 30)
        shape = i % 4
        if shape == 0:                            # every record keyed
            log.append_batch([Record(rnd.randbytes(rnd.randrange(0, 40)),
                                     key=rnd.randbytes(rnd.randrange(0, 20)))
                              for _ in range(n)])
        elif shape == 1:                          # no keys at all
            log.append_batch([rnd.randbytes(rnd.randrange(0, 40)) for _ in range(n)])
        elif shape == 2:                          # keys None inside a keyed batch
            log.append_batch([Record(rnd.randbytes(10),
                                     key=None if rnd.random() < 0.5 else b"key%d" % j)
                              for j in range(n)] + [Record(b"k", key=b"")])
        else:
            log.append(rnd.randbytes(9), key=b"single")
    return log


def build_headers(path: str, rnd: random.Random) -> Log:
    log = Log.open(path, segment_bytes=1 << 14, **SMALL)
    for i in range(30):
        n = rnd.randrange(1, 20)
        log.append_batch([Record(rnd.randbytes(rnd.randrange(0, 30)),
                                 key=b"k" if i % 3 == 0 else None,
                                 headers=[("trace", rnd.randbytes(8)), ("ключ", b""),
                                          ("trace", b"again")][:j % 4])
                          for j in range(n)])
        if i % 5 == 0:
            log.append_batch([b"no headers here"] * n)
            log.append(b"one", headers=[("h", b"v")])
    return log


def build_tombstones(path: str, rnd: random.Random) -> Log:
    log = Log.open(path, segment_bytes=1 << 14, **SMALL)
    for i in range(30):
        n = rnd.randrange(1, 25)
        shape = i % 4
        if shape == 0:                            # tombstones among values
            log.append_batch([Record(None if rnd.random() < 0.4 else rnd.randbytes(20),
                                     key=b"k%d" % rnd.randrange(9)) for _ in range(n)])
        elif shape == 1:                          # a batch of tombstones only
            log.append_batch([Record(None, key=b"k%d" % j) for j in range(n)])
        elif shape == 2:                          # null values without keys, and b""
            log.append_batch([Record(None) if j % 2 else b"" for j in range(n)])
        else:
            log.append(None, key=b"gone")
            log.append(None)
    return log


def build_value_sizes(path: str, rnd: random.Random) -> Log:
    """Values and keys of 0, 1..12 (inline in a view) and 13+ bytes, mixed."""
    log = Log.open(path, segment_bytes=1 << 14, **SMALL)
    sizes = [0, 1, 2, 3, 4, 7, 8, 11, 12, 13, 14, 15, 16, 17, 31, 32, 33, 100, 255, 256]
    for i in range(20):
        order = sizes[:]
        rnd.shuffle(order)
        log.append_batch([rnd.randbytes(n) for n in order])
        log.append_batch([Record(rnd.randbytes(n), key=rnd.randbytes(order[j]))
                          for j, n in enumerate(reversed(order))])
        log.append(rnd.randbytes(sizes[i]))
        log.append_batch([rnd.randbytes(12)] * 5 + [rnd.randbytes(13)] * 5)
    return log


def build_one_record(path: str, rnd: random.Random) -> Log:
    log = Log.open(path, segment_bytes=1 << 13, **SMALL)
    for i in range(300):
        shape = i % 10
        if shape < 6:                             # the hot path: short, keyless
            log.append(rnd.randbytes(rnd.randrange(0, 60)))
        elif shape == 6:
            log.append(rnd.randbytes(20), key=b"k%d" % i)
        elif shape == 7:
            log.append(rnd.randbytes(20), timestamp=5000 + i)
        elif shape == 8:
            log.append(None, key=b"k")
        else:
            log.append_batch([rnd.randbytes(30)])    # a one-record batch
    return log


def build_timestamps(path: str, rnd: random.Random) -> Log:
    log = Log.open(path, segment_bytes=1 << 14, **SMALL)
    for i in range(30):
        n = rnd.randrange(1, 30)
        shape = i % 4
        if shape == 0:                            # close together, not in order
            base = rnd.randrange(10**6, 10**12)
            log.append_batch([Record(b"t%d" % j, timestamp=base + rnd.randrange(-50, 50))
                              for j in range(n)])
        elif shape == 1:                          # far apart: wide deltas
            log.append_batch([Record(b"w%d" % j, timestamp=rnd.choice([0, 1, 10**13]))
                              for j in range(n)])
        elif shape == 2:                          # some given, some now
            log.append_batch([Record(b"m", timestamp=None if j % 2 else 123_456)
                              for j in range(n)])
        else:
            log.append(b"one", timestamp=rnd.randrange(0, 10**13))
            log.append_batch([b"same time"] * n)
    return log


def build_max_message(path: str, rnd: random.Random) -> Log:
    """Batches of up to ``max_message_bytes`` (3 MiB: larger than a read's chunk)."""
    log = Log.open(path, max_message_bytes=3 * MiB, segment_bytes=8 * MiB, **SYNTHETIC_CLOCK)
    log.append(rnd.randbytes(3 * MiB - 4096))
    log.append_batch([rnd.randbytes(100_000) for _ in range(60)])     # cut into batches
    log.append_batch([Record(rnd.randbytes(250_000), key=b"k%d" % j,
                             headers=[("n", b"%d" % j)]) for j in range(12)])
    log.append_batch([rnd.randbytes(20) for _ in range(100)])
    log.append_batch([rnd.randbytes(1_000_000) for _ in range(12)])   # a 16 MiB read
    return log


COMPACT = dict(segment_bytes=2048, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0,
               index_interval_bytes=256, max_message_bytes=1 << 17, **SYNTHETIC_CLOCK)


def fill_compacted(log: Log, rnd: random.Random, value: Any) -> None:
    for i in range(60):
        n = rnd.randrange(1, 12)
        if i % 4 == 3:
            log.append(value(i, rnd.randrange(0, 40)), key=b"k%d" % rnd.randrange(15),
                       timestamp=1000 + i)
        else:
            log.append_batch([Record(None if rnd.random() < 0.15 else value(j, rnd.randrange(0, 40)),
                                     key=None if rnd.random() < 0.1 else b"k%d" % rnd.randrange(15),
                                     timestamp=1000 + i,
                                     headers=[("h", b"%d" % j)] if j % 3 == 0 else ())
                              for j in range(n)])
    log.compact(now_ms=10_000)


def build_compacted(path: str, rnd: random.Random) -> Log:
    log = Log.open(path, **COMPACT)
    fill_compacted(log, rnd, lambda i, n: rnd.randbytes(n))
    return log


def build_compacted_lz4(path: str, rnd: random.Random) -> Log:
    log = Log.open(path, compression="lz4", **COMPACT)
    fill_compacted(log, rnd, text)
    return log


def _has(bit: int) -> Any:
    return lambda bs: any(b[2] & bit for b in bs)


def _gaps(bs: list[tuple[int, int, int, int, int]]) -> bool:
    return any(b[2] & codec.F_OFFSETS for b in bs)


# each kind: its log, and what its batches must show so that it tests what it says
KINDS = {
    "plain": (build_plain, lambda bs: any(b[2] == 0 and b[3] > 1 for b in bs)),
    "wide": (build_wide, _has(codec.F_WIDE)),
    "lz4": (build_lz4, lambda bs: sum(b[2] & codec.CODEC_MASK == codec.CODEC_LZ4
                                      and b[2] & codec.F_WIDE != 0 for b in bs) > 0
            and sum(b[2] & codec.CODEC_MASK == codec.CODEC_LZ4
                    and b[2] & codec.F_KEYS != 0 for b in bs) > 0),
    "keys": (build_keys, lambda bs: _has(codec.F_KEYS)(bs)
             and any(not b[2] & codec.F_KEYS for b in bs)),
    "headers": (build_headers, _has(codec.F_HEADERS)),
    "tombstones": (build_tombstones, _has(codec.F_NULL_VALUES)),
    "value_sizes": (build_value_sizes, lambda bs: any(b[3] == 20 for b in bs)),
    "one_record": (build_one_record, lambda bs: sum(b[3] == 1 for b in bs) >= 250),
    "timestamps": (build_timestamps, lambda bs: _has(codec.F_TIMESTAMPS)(bs)
                   and _has(codec.F_WIDE_TS)(bs)),
    "max_message": (build_max_message, lambda bs: any(b[4] > 2 * MiB for b in bs)),
    "compacted": (build_compacted, _gaps),
    "compacted_lz4": (build_compacted_lz4, lambda bs: _gaps(bs) and any(
        b[2] & codec.CODEC_MASK == codec.CODEC_LZ4 for b in bs)),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_read_equals_iteration(tmp_path, kind, views):
    seed = random.randrange(2**32)
    print(f"kind {kind} seed {seed}")
    build, shows = KINDS[kind]
    rnd = random.Random(seed)
    with build(str(tmp_path / kind), rnd) as log:
        assert shows(batches(log)), f"the {kind} log lacks the batches it is named for"
        everything = check_reads(log, views, rnd)
        if kind.startswith("compacted"):
            offsets = [r[0] for r in everything]
            assert offsets != list(range(offsets[0], offsets[0] + len(offsets)))   # holes


# -- mixed batches, generated ----------------------------------------------------------
_record = st.tuples(
    st.one_of(st.none(), st.binary(max_size=14), st.binary(min_size=13, max_size=60)),
    st.one_of(st.none(), st.just(b""), st.sampled_from([b"a", b"b", b"c"]),
              st.binary(min_size=1, max_size=20)),
    st.one_of(st.none(), st.integers(0, 10**13)),
    st.lists(st.tuples(st.sampled_from(["h", "trace", "ü"]), st.binary(max_size=16)),
             max_size=2))
_op = st.tuples(st.sampled_from(["batch", "append", "plain"]), st.booleans(),
                st.lists(_record, min_size=1, max_size=25), st.integers(0, 7))
_logs = st.tuples(st.lists(_op, min_size=1, max_size=10), st.booleans())


def test_mixed_batches_read_as_iterated(views):
    """Logs of generated batches of every kind (lz4 and not, in one log), compacted or
    not: whole reads, sub-ranges and read sets equal iteration."""

    @given(_logs, st.randoms(use_true_random=False))
    @settings(max_examples=15, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    def check(spec, rnd):
        ops, compact = spec
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "log")
            # segments of 8 KiB: a few rolls (each costs fsyncs), some sealed segments
            opts = dict(COMPACT, segment_bytes=8192) if compact else \
                dict(segment_bytes=8192, **SMALL)
            lz4 = None
            log = None
            try:
                for mode, compress, recs, wide in ops:
                    if log is None or compress != lz4:
                        if log is not None:
                            log.close()
                        lz4 = compress
                        log = Log.open(path, compression="lz4" if lz4 else None, **opts)
                    if wide == 0:
                        recs = recs + [(b"W" * 70_000, b"wk", None, [])]
                    if mode == "plain":
                        log.append_batch([v if v is not None else b"" for v, *_ in recs])
                    elif mode == "append":
                        for v, k, ts, h in recs:
                            log.append(v, key=k, timestamp=ts, headers=h)
                    else:
                        log.append_batch([Record(v, key=k, timestamp=ts, headers=h)
                                          for v, k, ts, h in recs])
                assert log is not None
                if compact:
                    log.compact(now_ms=10**13 + 1)
                check_reads(log, views, rnd, ranges=10)
            finally:
                if log is not None:
                    log.close()

    check()


# -- lifetime: what a read returned stays valid ----------------------------------------
def fill_for_lifetime(log: Log, rnd: random.Random, rounds: int = 12) -> None:
    """Short values (inline in a view) and longer ones, keys, tombstones, headers,
    one-record batches and a wide value, with timestamps near 0 (old for retention)."""
    for i in range(rounds):
        ts = 1000 + i
        log.append_batch([Record(text(rnd.randrange(99), rnd.randrange(0, 12)), timestamp=ts)
                          for _ in range(10)])
        log.append_batch([Record(None if j % 5 == 0 else text(j + i, rnd.randrange(13, 200)),
                                 key=None if j % 4 == 0 else b"key-%d" % (j % 6), timestamp=ts,
                                 headers=[("n", b"%d" % j)] if j % 3 == 0 else ())
                          for j in range(12)])
        log.append(rnd.randbytes(rnd.randrange(0, 30)), timestamp=ts)
        if i % 4 == 0:
            log.append_batch([Record(rnd.randbytes(70_000), key=b"wide", timestamp=ts),
                              Record(b"after wide", timestamp=ts)])


def churn() -> list[bytes]:
    """Fresh allocations of many sizes holding a pattern: memory freed under an Arrow
    array would now hold it (kept alive while the arrays are compared)."""
    return [bytes([0xA5]) * n for n in (16, 64, 512, 4096, 65_536, 1 << 20) for _ in range(12)]


class Held:
    """Arrow data read from a log (tables, a read set's batch, slices, columns) and a
    copy of its contents taken at once."""

    def __init__(self, log: Log, views: bool) -> None:
        lo, hi = log.start_offset, log.end_offset
        mid = (lo + hi) // 2
        table = arrow(log, views)
        assert rows(table, views) == [tuple(m) for m in log.iter()]
        batch = arrow(log.read(mid, MiB), views)
        assert batch.num_rows > 0
        self.items: dict[str, Any] = {
            "table": table, "range": arrow(log, views, lo + 3, mid + 7), "set": batch,
            "slice": table.slice(5, table.num_rows - 10), "values": table.column("value"),
            "keys": table.column("key"), "set values": batch.column("value"),
            "headers": table.column("headers")}
        self.want = {name: x.to_pylist() for name, x in self.items.items()}
        self.offsets = set(table.column("offset").to_pylist())

    def only_columns(self) -> None:
        """Drop the tables: the buffers stay held only by slices and columns."""
        for name in ("table", "range", "set"):
            del self.items[name], self.want[name]
        gc.collect()

    def check(self) -> None:
        gc.collect()
        junk = churn()
        for name, x in self.items.items():
            x.validate(full=True)
            assert x.to_pylist() == self.want[name], name
        del junk


LIFETIME = dict(segment_bytes=1 << 15, max_message_bytes=1 << 17, file_delete_delay_ms=0,
                **SYNTHETIC_CLOCK)
COMPRESSION = [pytest.param(None, id="plain"), pytest.param("lz4", id="lz4")]


def _seeded() -> random.Random:
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    return random.Random(seed)


@pytest.mark.parametrize("compression", COMPRESSION)
@pytest.mark.parametrize("tables", [True, False], ids=["tables", "columns only"])
def test_arrow_data_outlives_the_log(tmp_path, views, compression, tables):
    rnd = _seeded()
    path = str(tmp_path / "log")
    log = Log.open(path, compression=compression, **LIFETIME)
    fill_for_lifetime(log, rnd)
    held = Held(log, views)
    if not tables:
        held.only_columns()
    held.check()
    log.close()
    del log
    held.check()
    shutil.rmtree(path)                       # the files themselves gone
    held.check()


@pytest.mark.parametrize("compression", COMPRESSION)
@pytest.mark.parametrize("by", ["retention_ms", "retention_bytes"])
def test_arrow_data_outlives_retention_deleting_its_segments(tmp_path, views, compression, by):
    rnd = _seeded()
    bound = dict(retention_ms=1000) if by == "retention_ms" else \
        dict(retention_ms=None, retention_bytes=20_000)
    with Log.open(str(tmp_path / "log"), compression=compression, **bound, **LIFETIME) as log:
        fill_for_lifetime(log, rnd)
        held, columns = Held(log, views), Held(log, views)
        columns.only_columns()
        names = {os.path.basename(s.path) for s in log.segments}
        deleted = log.enforce_retention(now_ms=10**9)
        assert deleted and log.start_offset > min(held.offsets)
        gone = names - set(os.listdir(log.path))
        assert {"%020d.log" % base for base in deleted} <= gone
        held.check()
        columns.check()
        # new data where the old was: appends, rolls, reads of other offsets
        fill_for_lifetime(log, rnd)
        assert rows(arrow(log, views), views) == [tuple(m) for m in log.iter()]
        log.enforce_retention(now_ms=10**9)
        held.check()
        columns.check()


@pytest.mark.parametrize("compression", COMPRESSION)
def test_arrow_data_outlives_compaction_replacing_its_segments(tmp_path, views, compression):
    rnd = _seeded()
    with Log.open(str(tmp_path / "log"), compression=compression, cleanup_policy="compact",
                  min_cleanable_dirty_ratio=0.0, **LIFETIME) as log:
        fill_for_lifetime(log, rnd)
        held, columns = Held(log, views), Held(log, views)
        columns.only_columns()
        before = [tuple(m) for m in log.iter()]
        files = {s.path: os.stat(s.path).st_ino for s in log.segments[:-1]}
        log.compact(now_ms=10_000)
        after = [tuple(m) for m in log.iter()]
        assert len(after) < len(before)                       # records went
        replaced = {p for p, ino in files.items()
                    if not os.path.exists(p) or os.stat(p).st_ino != ino}
        assert replaced
        held.check()
        columns.check()
        fill_for_lifetime(log, rnd)
        log.compact(now_ms=10**13)                           # past the tombstones' horizon
        assert rows(arrow(log, views), views) == [tuple(m) for m in log.iter()]
        held.check()
        columns.check()


@pytest.mark.parametrize("compression", COMPRESSION)
def test_arrow_data_outlives_later_appends_and_reads(tmp_path, views, compression):
    rnd = _seeded()
    with Log.open(str(tmp_path / "log"), compression=compression, **LIFETIME) as log:
        fill_for_lifetime(log, rnd, rounds=4)
        held = Held(log, views)                  # the active segment's data among it
        for _ in range(3):
            fill_for_lifetime(log, rnd, rounds=4)
            for a in cut_points(log)[::7]:
                arrow(log, views, a, min(a + 50, log.end_offset))
                arrow(log.read(a, 4096), views)
                log.read(a, MiB).columns()
            held.check()
        held.only_columns()
        fill_for_lifetime(log, rnd, rounds=4)
        held.check()


# -- damage: a flipped byte is refused, never read --------------------------------------
def _damage_records(kind: str, i: int) -> list[Any]:
    mark = b"MARK%03d-" % i
    if kind == "plain":
        return [mark + b"p" * 40 for _ in range(5)]
    if kind == "keyed":
        return [Record(mark + b"k" * 30, key=b"key%d" % j, headers=[("h", b"v")] if j % 2 else ())
                for j in range(4)] + [Record(None, key=b"gone")]
    if kind == "lz4":
        return [mark + text(j, 200) for j in range(5)]
    return [mark + random.Random(i).randbytes(70_000), b"small"]            # wide


DAMAGE_KINDS = ["plain", "keyed", "lz4", "wide"]


@pytest.fixture(scope="module")
def damage_sources(tmp_path_factory) -> dict[str, tuple[str, dict[str, Any]]]:
    """Per kind of batch, a cleanly closed log of two or more segments and, for the
    first (sealed) segment and the last (active) one, the file and the batch in
    the middle of it: (position, size, base offset, last offset)."""
    out = {}
    for kind in DAMAGE_KINDS:
        compression = "lz4" if kind == "lz4" else None
        one = MessageSet.from_records(_damage_records(kind, 0), compression=compression)
        path = str(tmp_path_factory.mktemp("damage") / kind)
        targets = {}
        with Log.open(path, compression=compression,
                      segment_bytes=max(1024, one.size_in_bytes * 8),
                      max_message_bytes=1 << 17, **SYNTHETIC_CLOCK) as log:
            i = 0
            while len(log.segments) < 2:               # a sealed one, then 5 batches more
                log.append_batch(_damage_records(kind, i))
                i += 1
            for i in range(i, i + 5):
                log.append_batch(_damage_records(kind, i))
            segs = log.segments
            assert len(segs) >= 2
            for where, seg in (("sealed", segs[0]), ("active", segs[-1])):
                with open(seg.path, "rb") as f:
                    raw = f.read(seg.size)
                found = [(pos, h.size, h.base_offset, h.last_offset,
                          h.attributes) for pos, h in codec.batches_in(raw, 0, len(raw))]
                assert len(found) >= 3, (kind, where, len(found))
                target = found[len(found) // 2]
                if kind == "lz4":
                    assert target[4] & codec.CODEC_MASK == codec.CODEC_LZ4
                targets[where] = (os.path.basename(seg.path), target)
        out[kind] = (path, targets)
    return out


def _flip(raw: bytearray, kind: str, target: tuple, flip: str) -> None:
    pos, size = target[0], target[1]
    if flip == "value":
        if kind == "lz4":                        # the values are compressed: mid-body
            at = pos + codec.HEADER_SIZE + (size - codec.HEADER_SIZE) // 2
        else:
            at = raw.index(b"MARK", pos + codec.HEADER_SIZE, pos + size) + 12
        raw[at] ^= 0x01
    elif flip == "length low byte":
        raw[pos + 8] ^= 0x01                     # batch_length: little-endian uint32 at 8
    elif flip == "length high byte":
        raw[pos + 11] ^= 0x40
    else:                                        # magic, at 12
        raw[pos + 12] ^= 0xFF


@pytest.mark.parametrize("flip", ["value", "length low byte", "length high byte", "magic"])
@pytest.mark.parametrize("where", ["sealed", "active"])
@pytest.mark.parametrize("kind", DAMAGE_KINDS)
def test_a_flipped_byte_is_refused_with_where_it_is(tmp_path, damage_sources, views, kind,
                                                    where, flip):
    """read_arrow over the damaged batch, and to_arrow / columns of a read set holding
    it, raise CorruptRecordError naming the segment file and a position at that
    batch, for the writer and for a readonly reader; what lies before it reads."""
    source, targets = damage_sources[kind]
    name, target = targets[where]
    pos, size, base, last, _ = target
    path = str(tmp_path / "copy")
    shutil.copytree(source, path)
    seg_path = os.path.join(path, name)
    with open(seg_path, "r+b") as f:
        raw = bytearray(f.read())
        _flip(raw, kind, target, flip)
        f.seek(0)
        f.write(raw)

    def refused(read: Any) -> None:
        with pytest.raises(CorruptRecordError) as ei:
            read()
        e = ei.value
        assert e.path == seg_path and f"file {seg_path}" in str(e)
        assert e.position is not None and f"position {e.position}" in str(e)
        if flip.startswith("length"):            # found at the batch or where it now ends
            assert pos <= e.position <= pos + size + 1, (e.position, pos, size)
        else:
            assert e.position == pos

    for readonly in (False, True):
        with Log.open(path, readonly=readonly, **({} if readonly else SYNTHETIC_CLOCK)) as log:
            lo = log.start_offset
            refused(lambda: arrow(log, views, max(lo, base - 2), last + 3))
            refused(lambda: arrow(log, views, base, last + 1))
            refused(lambda: arrow(log.read(base, MiB), views))
            refused(lambda: log.read(base, MiB).columns())
            refused(lambda: list(log.iter()))          # as iterating does
            refused(lambda: arrow(log, views))
            # before the damage, read_arrow does what iter does: the same messages, or
            # (a header whose framing is broken, met as the walk reaches it) the same error
            try:
                good = [tuple(m) for m in log.iter(lo, base)]
            except CorruptRecordError:
                assert flip == "magic"
                refused(lambda: arrow(log, views, lo, base))
            else:
                assert [m[0] for m in good] == list(range(lo, base))
                assert rows(arrow(log, views, lo, base), views) == good


def test_a_readonly_reader_reading_to_the_end_is_told_of_damage_in_the_live_segment(
        tmp_path, damage_sources):
    source, targets = damage_sources["plain"]
    name, target = targets["active"]
    path = str(tmp_path / "copy")
    shutil.copytree(source, path)
    with open(os.path.join(path, name), "r+b") as f:
        raw = bytearray(f.read())
        _flip(raw, "plain", target, "value")
        f.seek(0)
        f.write(raw)
    with Log.open(path, readonly=True) as log:
        with pytest.raises(CorruptRecordError):
            log.read(log.end_offset)                   # what read() says at the end
        with pytest.raises(CorruptRecordError):
            list(log.iter())
        with pytest.raises(CorruptRecordError):
            log.read_arrow()
        with pytest.raises(CorruptRecordError):
            log.to_pandas()


# -- bad arguments, empty reads --------------------------------------------------------
def test_bad_offsets_and_types_are_refused(tmp_path, views):
    with Log.open(str(tmp_path / "log"), segment_bytes=1024, retention_ms=1000,
                  file_delete_delay_ms=0, **SYNTHETIC_CLOCK) as log:
        for i in range(40):
            log.append_batch([Record(b"v%d" % i * 10, timestamp=1000 + i)] * 3)
        assert log.enforce_retention(now_ms=10**9)
        lo, hi = log.start_offset, log.end_offset
        assert 0 < lo < hi
        everything = [tuple(m) for m in log.iter()]
        for start in (lo - 1, 0, -1, hi + 1, 10**18):
            with pytest.raises(OffsetOutOfRangeError):
                arrow(log, views, start)
            with pytest.raises(OffsetOutOfRangeError):
                arrow(log, views, start, hi)
        for start in ("0", b"0", 1.0, float(lo), True, [lo], object()):
            with pytest.raises(TypeError):
                arrow(log, views, start)
        for end in ("9", 2.5, float(hi), False, [hi]):
            with pytest.raises(TypeError):
                arrow(log, views, lo, end)
        # an end past the log or before the start: what iter gives
        assert rows(arrow(log, views, lo, hi + 100), views) == everything
        assert rows(arrow(log, views, lo + 5, lo + 2), views) == [] == list(log.iter(lo + 5, lo + 2))
        assert [tuple(m) for m in log] == everything               # nothing was changed
    with pytest.raises(LogClosedError):
        arrow(log, views)
    with pytest.raises(LogClosedError):
        log.read(lo)


def _empty(t: Any, views: bool) -> None:
    assert t.num_rows == 0
    check_schema(t.schema, views)
    t.validate(full=True)
    assert rows(t, views) == []


def test_empty_logs_and_ranges_give_no_rows_and_the_schema(tmp_path, views):
    with Log.open(str(tmp_path / "empty"), **SYNTHETIC_CLOCK) as log:
        _empty(arrow(log, views), views)
        _empty(arrow(log, views, 0, 0), views)
        _empty(arrow(log, views, 0), views)
        ms = log.read(0)
        _empty(arrow(ms, views), views)
        assert column_rows(ms.columns()) == [] and spark_rows(ms.columns()) == []
    _empty(arrow(MessageSet(b""), views), views)
    _empty(arrow(MessageSet.from_records([], base_offset=7), views), views)
    with Log.open(str(tmp_path / "holes"), **COMPACT) as log:
        fill_compacted(log, random.Random(1), lambda i, n: b"%d" % i * n)
        everything = [tuple(m) for m in log.iter()]
        end = log.end_offset
        _empty(arrow(log, views, end), views)
        _empty(arrow(log.read(end), views), views)
        kept = {r[0] for r in everything}
        holes = [o for o in range(log.start_offset, end) if o not in kept]
        assert holes
        for o in holes[:: max(1, len(holes) // 20)]:
            _empty(arrow(log, views, o, o + 1), views)          # a range inside a hole
            _empty(arrow(log, views, o, o), views)
        for o in sorted(kept)[::10]:
            _empty(arrow(log, views, o, o), views)


# -- iter_arrow: the same read as a stream ---------------------------------------------
def test_iter_arrow_streams_what_read_arrow_reads_in_bounded_batches(tmp_path, views):
    import pyarrow as pa
    rnd = random.Random(23)
    print("seed 23")
    with Log.open(str(tmp_path / "log"), **SYNTHETIC_CLOCK) as log:
        for i in range(110):                  # some 11 MB of 200-byte values
            log.append_batch([rnd.randbytes(200) for _ in range(500)])
        log.append_batch([b"k"] * 3)          # a short batch after them
        want = [tuple(m) for m in log.iter()]
        for lo, hi in ((None, None), (7, None), (12_345, 40_001), (log.end_offset,) * 2):
            stream = log.iter_arrow(lo, hi, views=views) if views else log.iter_arrow(lo, hi)
            got = list(stream)
            # one record batch per 4 MiB read at most: the stream never holds the range
            assert all(b.nbytes < 6 << 20 for b in got)
            table = pa.Table.from_batches(got, schema=arrow(log, views, 0, 0).schema)
            assert table.equals(arrow(log, views, *((lo, hi) if hi is not None else
                                                    (lo,) if lo is not None else ())))
            first = lo or 0
            assert rows(table, views) == want[first:hi]
        assert len(list(log.iter_arrow())) > 2
        # the arguments are checked at the call, before the first batch is asked for
        with pytest.raises(TypeError):
            log.iter_arrow("0")
        with pytest.raises(OffsetOutOfRangeError):
            log.iter_arrow(log.end_offset + 1)


# -- past 2 GiB: Arrow's 32-bit offsets ------------------------------------------------
# ``binary_view`` views carry a 32-bit position in their buffer and ``binary`` arrays
# 32-bit offsets, so values that start past 2 GiB in the buffer read, or that add up to
# more than 2 GiB in one set, must still come back whole, as ``iter()`` gives them, in
# valid arrays (``large_binary`` where the values pass 2 GiB), never as an Arrow error
# or as views pointing outside their buffer (a read there is a segfault). The large
# sets are made of lz4 batches of zeros built by hand (a few KB on disk that
# decompress to a GiB), so that the test costs decompression only.

GiB = 1 << 30
_TAIL = b"tail!"        # an lz4 block ends with at least five literal bytes


def _zeros_lz4_batch(base: int, zeros: int) -> bytes:
    """A two-record lz4 batch (F_WIDE lengths): a value of ``zeros`` zero bytes, then
    ``_TAIL``. The lz4 block is one literal run and one long match, written by hand:
    compressing a GiB would cost seconds."""
    lens = struct.pack("<II", zeros, len(_TAIL))
    literal = lens + bytes(64)
    rest = zeros - 64 - 4 - 15          # the match's length past its token and 15
    block = (bytes([0xFF, len(literal) - 15]) + literal + struct.pack("<H", 64)
             + b"\xff" * (rest // 255) + bytes([rest % 255])
             + bytes([len(_TAIL) << 4]) + _TAIL)
    usize = len(lens) + zeros + len(_TAIL)
    checked = struct.pack("<HIIqq", codec.CODEC_LZ4 | codec.F_WIDE, 1, 2, 7, 7) \
        + struct.pack("<I", usize) + block
    # batch_length counts the bytes after itself: magic and checksum, then the rest
    head = struct.pack("<qIBQ", base, _format.CHECKSUM_FROM - _format.LENGTH_END + len(checked),
                       codec.MAGIC, codec.CHECKSUM(checked))
    return head + checked


def _lengths(values) -> list[int]:
    """The value lengths of a value column (no nulls), without making a GiB of bytes."""
    if values.type == pa.binary_view():
        # a view's first 4 bytes are the value's length
        import numpy as np
        views = np.frombuffer(values.buffers()[1], dtype="<i4").reshape(-1, 4)
        return views[values.offset:values.offset + len(values), 0].tolist()
    return pa.compute.binary_length(values).to_pylist()


def _enough_memory() -> bool:
    """The sets past 2 GiB need about 8 GiB of memory at their peak."""
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemAvailable"].split()[0]) > 10 << 20        # kB
    except (OSError, KeyError, ValueError):
        return False


big = pytest.mark.skipif(not _enough_memory(), reason="needs about 8 GiB of free memory")


def test_the_hand_made_batch_decodes_as_iteration_does():
    batch = _zeros_lz4_batch(3, 1000)
    assert [(m.offset, m.value) for m in MessageSet(batch)] == [(3, bytes(1000)), (4, _TAIL)]


@pytest.mark.parametrize("views", [False, True])
def test_values_starting_past_2_gib_in_the_buffer_read_whole(views):
    # a pyarrow.Buffer (as read_arrow's reads are) whose batches start past 2 GiB:
    # a view's position in it does not fit the view's 32 bits
    batch = codec.encode_batch(5, [b"a" * 20, b"short", b"", b"b" * 30], 9)
    at = 2 * GiB + 64
    mm = mmap.mmap(-1, at + len(batch))      # zero pages, none written but the batch
    mm[at:at + len(batch)] = batch
    cols, done = arrow_columns(pa.py_buffer(mm), at, len(mm), views=views)
    for a in cols.arrow_arrays():
        a.validate(full=True)                # before any value is read
    assert cols.values.to_pylist() == [b"a" * 20, b"short", b"", b"b" * 30]
    assert cols.offsets.to_pylist() == [5, 6, 7, 8]
    assert tuple(done) == (len(mm), 9)


@big
def test_a_set_of_more_than_2_gib_of_values_in_runs_split_by_plain_batches():
    # lz4 batches are read by the general walk, the plain batch between them by the
    # numpy road: two pieces of binary columns whose values add up past 2 GiB
    # (binary_view pieces join whatever their size; one run takes seconds)
    views = False
    n = GiB + (GiB >> 4)
    data = b"".join((_zeros_lz4_batch(0, n), codec.encode_batch(2, [b"plain"], 7),
                     _zeros_lz4_batch(3, n)))
    rb = MessageSet(data, max_uncompressed=2 * GiB).to_arrow(views=views)
    rb.validate()
    assert rb.column("offset").to_pylist() == [0, 1, 2, 3, 4]
    assert _lengths(rb.column("value")) == [n, 5, 5, n, 5]
    assert rb.column("value")[2].as_py() == b"plain"
    assert rb.column("value")[4].as_py() == _TAIL


@big
def test_a_run_of_batches_with_more_than_2_gib_of_values_asked_as_views():
    # adjacent lz4 batches: one piece of columns past 2 GiB (large_binary), which
    # views=True must not squeeze into a binary_view of one buffer (without views
    # it is one large_binary piece: that worked)
    views = True
    n = GiB + (GiB >> 4)
    data = _zeros_lz4_batch(0, n) + _zeros_lz4_batch(2, n)
    rb = MessageSet(data, max_uncompressed=2 * GiB).to_arrow(views=views)
    rb.validate()
    assert rb.column("offset").to_pylist() == [0, 1, 2, 3]
    assert _lengths(rb.column("value")) == [n, 5, n, 5]
    assert rb.schema.field("value").type == pa.large_binary()

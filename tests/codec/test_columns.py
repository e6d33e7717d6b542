"""Columnar reads: MessageSet.columns(), to_arrow() and Log.read_arrow() give exactly
what iterating gives, for every kind of batch (plain, keys with nulls, tombstones,
headers, per-record timestamps, lz4, compacted gaps), clipped to the range asked."""

from __future__ import annotations

import os
import random
import sys

import pytest

import seglog
from seglog._codec import format as _format
from seglog import CorruptRecordError, Log, MessageSet, OffsetOutOfRangeError, Record, codec

from helpers import header, put_header

from clock import SYNTHETIC_CLOCK

pa = pytest.importorskip("pyarrow")



def from_columns(c: seglog.Columns) -> list[tuple]:
    """Messages rebuilt from columns, the slow obvious way."""
    out, vpos, kpos = [], 0, 0
    vnull, knull = set(c.value_nulls), set(c.key_nulls)
    for i, off in enumerate(c.offsets):
        n = c.value_lengths[i]
        value = None if i in vnull else c.values[vpos:vpos + n]
        vpos += n
        key = None
        if c.key_lengths is not None:
            k = c.key_lengths[i]
            key = None if i in knull else c.keys[kpos:kpos + k]
            kpos += k
        out.append((off, c.timestamps[i], key, value, c.headers[i] if c.headers else ()))
    assert vpos == len(c.values) and (c.keys is None or kpos == len(c.keys))
    return out


def from_arrow(t) -> list[tuple]:
    stamps = t.column("timestamp").cast(pa.int64()).to_pylist()      # exact milliseconds
    return [(r["offset"], ts, r["key"], r["value"],
             tuple((h["key"], h["value"]) for h in r["headers"]))
            for r, ts in zip(t.to_pylist(), stamps)]


def mixed_log(path: str, seed: int, compact: bool = False) -> Log:
    rnd = random.Random(seed)
    log = Log.open(path, segment_bytes=1 << 14,
                   cleanup_policy="compact" if compact else "delete",
                   compression=None, **SYNTHETIC_CLOCK)
    for _ in range(150):
        kind = rnd.randrange(6)
        n = rnd.randrange(1, 30)
        if kind == 0:                                    # plain
            log.append_batch([os.urandom(rnd.randrange(0, 300)) for _ in range(n)])
        elif kind == 1:                                  # keys, some null; tombstones
            log.append_batch([Record(None if rnd.random() < 0.2 else os.urandom(20),
                                     key=b"k%d" % rnd.randrange(20))
                              if rnd.random() < 0.7 else Record(b"v", key=None)
                              for _ in range(n)])
        elif kind == 2:                                  # headers
            log.append_batch([Record(b"h%d" % i, headers=[("a", b"1"), ("b", os.urandom(3))]
                                     if i % 2 else ()) for i in range(n)])
        elif kind == 3:                                  # per-record timestamps
            log.append_batch([Record(b"t", timestamp=rnd.randrange(1, 10**6)) for _ in range(n)])
        elif kind == 4:                                  # one message per call
            for _ in range(n):
                log.append(os.urandom(rnd.randrange(1, 100)))
        else:                                            # wide lengths
            log.append_batch([os.urandom(70_000)] + [b"x"] * (n - 1))
    if compact:
        log.compact()
    return log


@pytest.mark.parametrize("compact", [False, True])
def test_columns_and_arrow_equal_iteration_for_every_kind_of_batch(tmp_path, compact):
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    with mixed_log(str(tmp_path / "l"), seed, compact) as log:
        everything = [tuple(m) for m in log.iter()]
        assert from_arrow(log.read_arrow()) == everything
        rnd = random.Random(seed)
        for _ in range(20):
            a = rnd.randrange(log.start_offset, log.end_offset)
            b = rnd.randrange(a, log.end_offset + 1)
            want = [m for m in everything if a <= m[0] < b]
            assert from_arrow(log.read_arrow(a, b)) == want, (a, b)
            ms = log.read(a, rnd.choice([1, 500, 1 << 20]))
            assert from_columns(ms.columns()) == [tuple(m) for m in ms]
            assert from_arrow(pa.Table.from_batches([ms.to_arrow()])) == [tuple(m) for m in ms]


def test_plain_batches_need_no_object_per_message(tmp_path):
    with Log.open(str(tmp_path / "l"), **SYNTHETIC_CLOCK) as log:
        for i in range(20):
            log.append_batch([b"%05d" % j for j in range(i * 50, i * 50 + 50)])
        c = log.read(0, 1 << 20).columns()
        assert c.offsets == range(0, 1000)           # a range, not a list of ints
        assert c.value_lengths.typecode == "H" and set(c.value_lengths) == {5}
        assert c.values == b"".join(b"%05d" % j for j in range(1000))
        assert c.timestamps.typecode == "q" and list(c.timestamps) == [m.timestamp for m in log.iter()]
        assert c.keys is None and c.headers is None and c.value_nulls == []
        t = log.read_arrow(120, 130)
        assert t.column("offset").to_pylist() == list(range(120, 130))
        assert t.column("value").to_pylist() == [b"%05d" % j for j in range(120, 130)]
        assert t.schema == seglog.arrow_schema()


def test_lz4_batches_read_as_columns(tmp_path):
    with Log.open(str(tmp_path / "l"), compression="lz4", **SYNTHETIC_CLOCK) as log:
        log.append_batch([b"abc" * 100] * 50)
        log.append_batch([Record(b"x" * 300, key=b"k")] * 50)
        everything = [tuple(m) for m in log.iter()]
        assert from_arrow(log.read_arrow()) == everything
        assert from_arrow(log.read_arrow(10, 60)) == everything[10:60]


def test_empty_ranges_and_bad_input(tmp_path):
    with Log.open(str(tmp_path / "l"), **SYNTHETIC_CLOCK) as log:
        assert log.read_arrow().num_rows == 0
        log.append_batch([b"a", b"b"])
        assert log.read_arrow(2).num_rows == 0 and log.read_arrow(1, 1).num_rows == 0
        with pytest.raises(OffsetOutOfRangeError):
            log.read_arrow(3)
        with pytest.raises(TypeError):
            log.read_arrow("0")
        assert MessageSet(b"").columns().offsets == range(0)


def test_a_damaged_batch_is_refused(tmp_path):
    with Log.open(str(tmp_path / "l"), flush_ms=None, **SYNTHETIC_CLOCK) as log:
        log.append_batch([b"v" * 100] * 10)
        data = bytearray(log.read(0).buffer())
    data[100] ^= 1
    with pytest.raises(CorruptRecordError):
        MessageSet(bytes(data)).columns()


def test_without_pyarrow_the_error_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with Log.open(str(tmp_path / "l"), **SYNTHETIC_CLOCK) as log:
        log.append(b"a")
        with pytest.raises(ImportError, match=r"seglog\[spark\]"):
            log.read_arrow()
        assert log.read(0).columns().values == b"a"      # columns need no pyarrow


def _plain_batch_with_bad_lengths(overrun: bool) -> bytes:
    """A plain batch with a good checksum whose record lengths do not fit it: a length
    array longer than the batch (``overrun``) or lengths that do not add up."""
    b = bytearray(codec.encode_batch(0, [b"aa", b"bb"], 1000))
    hdr = header(b)
    if overrun:
        hdr = hdr._replace(record_count=100, last_offset_delta=99)
    else:
        b[codec.HEADER_SIZE + 2] = 3                       # the second length: 2 -> 3
    put_header(b, 0, hdr)
    put_header(b, 0, hdr._replace(checksum=codec.CHECKSUM(bytes(b[_format.CHECKSUM_FROM:]))))
    return bytes(b)


@pytest.mark.parametrize("overrun, as_messages", [
    (True, "length array runs past the batch"), (False, "record lengths do not add up")])
def test_a_plain_batch_whose_lengths_do_not_fit_is_refused_with_its_reason(overrun,
                                                                           as_messages):
    """Iteration says which way a plain batch's lengths fail; columns say it as every
    undecodable batch is said."""
    ms = MessageSet(_plain_batch_with_bad_lengths(overrun))
    with pytest.raises(CorruptRecordError) as ei:
        list(ms)
    assert (ei.value.message, ei.value.position, ei.value.offset) == (as_messages, 0, 0)
    for read in (ms.columns, ms.to_arrow):
        with pytest.raises(CorruptRecordError) as ei:
            read()
        assert ei.value.message == "undecodable batch: record lengths do not add up"
        assert (ei.value.position, ei.value.offset) == (0, 0)

"""``arrow_columns`` (the numpy-built columnar read) against the general walk it
stands in for: for any buffer of batches, of every kind, whole or cut short,
damaged or not, and any offset range, both give the same rows and the same end,
or the same error at the same place. Pure functions over bytes, fuzzed."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog import codec
from seglog._codec import decode as _decode
from seglog.errors import CorruptRecordError
from seglog.message import Columns

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")
from seglog._codec.arrow_batches import arrow_columns


def reference(data: bytes, start: int, end: int, lo: int, hi: int | None, **kw):
    """What the general walk makes of the buffer: rows and where it ended."""
    walk = _decode.iter_column_parts(data, start, end, lo, hi, **kw)
    parts = []
    while True:
        try:
            parts.append(next(walk))
        except StopIteration as stop:
            done = stop.value
            break
    cols = Columns.from_parts(parts)
    return rows(*cols.arrow_arrays(), cols.headers), done


def rows(offsets, stamps, keys, values, headers) -> list[tuple]:
    n = len(offsets)
    return list(zip(offsets.to_pylist(), stamps.to_pylist(), keys.to_pylist(),
                    values.to_pylist(), headers if headers is not None else [()] * n))


def outcome(fn):
    try:
        return fn()
    except CorruptRecordError as e:
        return ("error", e.message, e.position, e.offset)


def fast(data, start, end, lo, hi, views, **kw):
    cols, done = arrow_columns(data, start, end, lo, hi, views=views, **kw)
    got = rows(*cols.arrow_arrays(), cols.headers)
    assert all(a.type in (pa.binary_view(),) if views else a.type != pa.binary_view()
               for a in (cols.keys, cols.values))
    return got, done


def values_of(draw, n: int, big: bool) -> list[bytes | None]:
    sizes = st.one_of(st.integers(0, 14), st.integers(180, 220), st.just(70000)) if big \
        else st.one_of(st.integers(0, 14), st.integers(180, 220))
    return [draw(st.binary(min_size=s, max_size=s)) for s in draw(
        st.lists(sizes, min_size=n, max_size=n))]


@st.composite
def buffers(draw):
    """Batches of every kind with offsets that follow each other (holes only where
    a compacted batch says so), then maybe cut short or damaged."""
    out = []
    offset = draw(st.integers(0, 2**40))
    first = offset
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["plain", "plain", "plain", "one", "keys", "lz4",
                                     "headers", "stamps", "nulls", "gap", "wide"]))
        n = 1 if kind == "one" else draw(st.integers(1, 12))
        ts = draw(st.integers(0, 2**41))
        values = values_of(draw, n, kind == "wide")
        if kind in ("plain", "one", "wide"):
            batch = codec.encode_batch(offset, values, ts)
        elif kind == "keys":
            batch = codec.encode_batch(offset, values, ts, keys=[b"k%d" % i if i % 3 else None
                                                                for i in range(n)])
        elif kind == "lz4":
            batch = codec.encode_batch(offset, [b"x" * 40 + v for v in values], ts,
                                       codec=codec.CODEC_LZ4)
        elif kind == "headers":
            batch = codec.encode_batch(offset, values, ts,
                                       headers=[[(b"h", b"%d" % i)] for i in range(n)])
        elif kind == "stamps":
            batch = codec.encode_batch(offset, values, [ts + i for i in range(n)])
        elif kind == "nulls":
            batch = codec.encode_batch(offset, [None if i % 2 else v for i, v in
                                                enumerate(values)], ts,
                                       keys=[b"k"] * n)
        else:   # a compacted batch: its first records removed, holes between the rest
            skip = draw(st.integers(1, 3))
            deltas = [skip + 2 * i for i in range(n)]
            batch = codec.encode_batch(offset, values, ts, keys=[b"k"] * n,
                                       offset_deltas=deltas, last_offset_delta=deltas[-1])
            offset += deltas[-1] + 1
            out.append(batch)
            continue
        offset += n
        out.append(batch)
    data = bytearray(b"".join(out))
    if draw(st.booleans()) and len(data) > 1:
        # damage: one flipped byte anywhere
        i = draw(st.integers(0, len(data) - 1))
        data[i] ^= 1 << draw(st.integers(0, 7))
    end = len(data)
    if draw(st.booleans()):
        end = draw(st.integers(0, len(data)))        # cut short: a chunk of a file
    lo = draw(st.integers(first - 2, offset + 2))
    hi = draw(st.one_of(st.none(), st.integers(lo, offset + 3)))
    return bytes(data), end, lo, hi, first


@given(buffers(), st.booleans(), st.booleans(), st.booleans())
@settings(max_examples=int(os.environ.get("SEGLOG_FUZZ", "400")), deadline=None)
def test_the_columnar_read_answers_as_the_general_walk(buf, views, partial, expect_known):
    data, end, lo, hi, first = buf
    kw = dict(partial=partial, expect=first if expect_known else None)
    want = outcome(lambda: reference(data, 0, end, lo, hi, **kw))
    got = outcome(lambda: fast(data, 0, end, lo, hi, views, **kw))
    assert got == want


@pytest.mark.parametrize("views", [False, True])
def test_a_long_run_of_plain_batches_with_a_range_cut_inside_batches(views):
    data = b"".join(codec.encode_batch(100 + 50 * i, [b"%05d" % j * (j % 40) for j in
                                                      range(50)], 7 + i) for i in range(40))
    for lo, hi in ((100, None), (125, 1075), (149, 150), (2099, 2100), (2100, None)):
        want = reference(data, 0, len(data), lo, hi)
        got = fast(data, 0, len(data), lo, hi, views)
        assert got == want and len(got[0]) == max(0, min(hi or 2100, 2100) - lo)


@pytest.mark.parametrize("views", [False, True])
def test_views_point_into_the_buffer_and_short_values_sit_inside_them(views):
    values = [b"", b"a", b"twelve bytes", b"thirteen byte", b"v" * 200]
    data = codec.encode_batch(0, values, 1)
    cols, _ = arrow_columns(data, 0, len(data), views=views)
    assert cols.values.to_pylist() == values
    if views:
        # the data buffer of the view array is the buffer read: nothing was copied
        assert cols.values.buffers()[2].address == pa.py_buffer(data).address

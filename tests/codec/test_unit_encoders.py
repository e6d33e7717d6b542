"""The write path's fast encoders produce exactly the bytes of ``codec.encode_batch``.

``encode_batch`` is the reference encoder (the one docs/FORMAT.md describes). The
write path has faster ones for its common cases: ``encode_values_parts`` (keyless
records sharing a timestamp; ``append_batch``'s fast path, the base offset stamped
by ``ActiveSegment.append``) and ``Log.append``'s one-record path
(``ActiveSegment.append_one``), which packs the header straight into the segment's map. Each must agree with the reference byte for
byte, in the short (16-bit lengths) and the wide (``F_WIDE``) layout, with and
without lz4; the end-to-end tests compare the segment files themselves.
"""

from __future__ import annotations

import os
import random
import tempfile

import struct

import lz4.block
from hypothesis import example, given, settings
from hypothesis import strategies as st

from seglog import Log, codec
from seglog._codec import encode as _encode
from seglog.segment import ActiveSegment, ActiveSettings, Segment

from helpers import header

SHORT_MAX = 0xFFFE            # the longest value with a 16-bit length (0xFFFF means null)
I64 = st.integers(-(2**63), 2**63 - 1)
BASES = st.integers(0, 2**62)


def _make(n: int, seed: int, kind: str) -> bytes:
    """``n`` bytes from a seed: random (lz4 cannot shrink them), one repeated byte
    (lz4 shrinks them a lot) or a mix."""
    rnd = random.Random(seed)
    if kind == "random":
        return rnd.randbytes(n)
    if kind == "repeat":
        return bytes([seed & 0xFF]) * n
    chunk = rnd.randbytes(64)
    return (chunk * (n // 64 + 1))[:n]


# hypothesis cannot draw 64 KiB of bytes one by one: big values come from a seed
big_values = st.builds(
    _make,
    st.one_of(st.sampled_from([SHORT_MAX - 1, SHORT_MAX, 0xFFFF, 0x10000, 0x10001]),
              st.integers(0xFFF0, 70_000)),
    st.integers(0, 2**32),
    st.sampled_from(["random", "repeat", "mixed"]))
small_values = st.one_of(
    st.binary(max_size=300),
    st.builds(_make, st.integers(0, 3000), st.integers(0, 2**32),
              st.sampled_from(["random", "repeat", "mixed"])))
values_st = st.one_of(small_values, small_values, small_values, big_values)
CODECS = st.sampled_from([codec.CODEC_NONE, codec.CODEC_LZ4])


# -- ActiveSegment.append_one ----------------------------------------------------------------

_TAIL_1H = struct.Struct("<HIIqqH")


@given(st.lists(st.tuples(st.one_of(st.binary(max_size=300), st.builds(
    _make, st.integers(0, SHORT_MAX), st.integers(0, 2**32), st.sampled_from(["random", "mixed"]))),
    I64), min_size=1, max_size=8), BASES)
@example([(b"", 0), (b"x" * SHORT_MAX, 2**63 - 1), (b"y", -(2**63))], 2**62)
@settings(deadline=None, max_examples=60)
def test_append_one_writes_what_encode_batch_makes(records, base):
    """The one-record path as Log.append calls it (the checksum of the tail and the
    value), against the reference, read back from the segment's file."""
    with tempfile.TemporaryDirectory() as d:
        seg = ActiveSegment.create(d, base, ActiveSettings(1 << 24, 1 << 23, None, 4096, 1 << 16))
        try:
            off = base
            for value, ts in records:
                body = _TAIL_1H.pack(0, 0, 1, ts, ts, len(value)) + value
                size = codec.HEADER_SIZE + 2 + len(value)
                pos = seg.append_one(off, ts, codec.CHECKSUM(body), body)
                assert seg.next_offset == off + 1 and seg.size == pos + size
                assert seg.segment.pread(size, pos) == codec.encode_batch(off, [value], ts)
                off += 1
        finally:
            seg.close()


# -- encode_values / encode_values_parts ------------------------------------------------

def _parts_batch(base: int, values: list[bytes], ts: int, c: int) -> bytes:
    """What append_batch's fast path writes: the parts joined, base offset stamped."""
    body = b"".join(values)
    lens = list(map(len, values))
    size, parts = _encode.encode_values_parts(body, lens, ts, c)
    data = b"".join(parts)
    assert size == len(data)
    assert data[:8] == bytes(8)         # left at 0 for ActiveSegment.append to stamp
    return base.to_bytes(8, "little", signed=True) + data[8:]


def _check_values(base: int, values: list[bytes], ts: int, c: int) -> None:
    want = codec.encode_batch(base, values, ts, codec=c)
    assert _parts_batch(base, values, ts, c) == want


value_lists = st.one_of(
    st.lists(small_values, min_size=1, max_size=40),
    st.lists(values_st, min_size=1, max_size=4))


@given(BASES, value_lists, I64, CODECS)
@settings(deadline=None, max_examples=150)
def test_encode_values_is_encode_batch(base, values, ts, c):
    _check_values(base, values, ts, c)


def test_encode_values_explicit_cases():
    seeds = [0, 1]
    cases = [
        [b""],
        [b""] * 5,
        [b"a"],
        [b"a" * 10_000] * 3,                           # compresses
        [os.urandom(100)],                             # lz4 does not pay
        [b"q" * SHORT_MAX],                            # longest short value
        [b"q" * 0xFFFF],                               # shortest wide value
        [b"q" * 0x10000, b""],
        [b"", b"r" * 0xFFFF, b"s"],
        [b"t" * 40_000, b"u" * 40_000],                # body past 0xFFFF, every value short
        [_make(70_000, s, "random") for s in seeds],   # wide, incompressible
        [_make(70_000, s, "mixed") for s in seeds],    # wide, compressible
        [bytes([i]) * 300 for i in range(256)],        # many records
    ]
    for values in cases:
        for c in (codec.CODEC_NONE, codec.CODEC_LZ4):
            for base, ts in ((0, 0), (2**62, 2**63 - 1), (12345, -(2**63)), (1, 1_700_000_000_000)):
                _check_values(base, values, ts, c)


def test_lz4_compresses_only_when_it_pays():
    """Both encoders take the same branch of the lz4 decision, every way: a batch of
    one record is never compressed, however well it would compress."""
    for values, compressed in (([b"a" * 5_000] * 2, True), ([os.urandom(500)] * 2, True),
                               ([os.urandom(1000), os.urandom(1000)], False),
                               ([b"a" * 10_000], False), ([os.urandom(1000)], False)):
        data = _parts_batch(0, values, 5, codec.CODEC_LZ4)
        assert bool(header(data).attributes & codec.CODEC_LZ4) is compressed
        assert data == codec.encode_batch(0, values, 5, codec=codec.CODEC_LZ4)


def test_lz4_decision_at_its_margin():
    """lz4 pays only when it saves more than the 4 bytes of the size it must store:
    sweep inputs across that margin (random bytes then a growing run, which lz4
    shrinks a byte at a time), in the short and the wide layout."""
    # (lz4's gain jumps past 4 and 5 for some random heads: these ones hit the margin)
    for prefix, runs, wide in ((50, range(40), False), (100, range(40), False),
                               (1000, range(40), False), (0x10000, range(300, 330), True)):
        head = random.Random(prefix).randbytes(prefix)
        gains = set()
        width = 4 if wide else 2
        for run in runs:
            value = head + b"a" * run
            records = b"".join(len(v).to_bytes(width, "little") for v in (b"", value)) + value
            gains.add(len(records) - len(lz4.block.compress(records, store_size=False)))
            _check_values(prefix, [value], 1_700_000_000_000, codec.CODEC_LZ4)
            _check_values(prefix, [b"", value], 1_700_000_000_000, codec.CODEC_LZ4)
        assert {4, 5} <= gains      # the sweep crossed the margin (two records: tried)


# -- end to end: the bytes in the segment files ----------------------------------------

_OPTIONS = dict(message_timestamp_before_max_ms=None, message_timestamp_after_max_ms=None,
                retention_ms=None, retention_check_ms=None, flush_ms=None)

# one operation: ("one", value, timestamp or None) is Log.append,
# ("many", [values]) is Log.append_batch
e2e_values = st.one_of(small_values, small_values, small_values, small_values, big_values)
e2e_stamps = st.one_of(st.none(), st.integers(0, 2**63 - 1),
                       st.integers(1_600_000_000_000, 1_900_000_000_000))
# runs of tiny appends, few lengths and few timestamps: the inline path caches the
# checksummed tail of its header per (timestamp, length)
tiny_appends = st.lists(
    st.tuples(st.just("one"), st.binary(max_size=2),
              st.sampled_from([None, 0, 1, 1_700_000_000_000, 2**63 - 1])),
    min_size=1, max_size=6)
e2e_ops = st.lists(
    st.one_of(
        st.tuples(st.just("one"), e2e_values, e2e_stamps).map(lambda op: [op]),
        tiny_appends,
        st.tuples(st.just("many"), st.lists(e2e_values, min_size=1, max_size=6)).map(lambda op: [op]),
        st.tuples(st.just("many"), st.lists(st.binary(max_size=40), min_size=1, max_size=50))
        .map(lambda op: [op])),
    min_size=1, max_size=6).map(lambda runs: [op for run in runs for op in run])


def _segment_bases(path: str) -> list[int]:
    bases = []
    for name in os.listdir(path):
        stem, ext = os.path.splitext(name)
        if ext == ".log" and len(stem) == 20 and stem.isdigit():
            bases.append(int(stem))
    return sorted(bases)


def _read_segment(path: str, base: int, limit: int = -1) -> bytes:
    with open(os.path.join(path, f"{base:020d}.log"), "rb") as f:
        return f.read(limit)


def _run_e2e(ops, compression) -> None:
    c = codec.CODEC_LZ4 if compression == "lz4" else codec.CODEC_NONE
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "log")
        log = Log.open(path, compression=compression, **_OPTIONS)
        try:
            batches = []                    # (base offset, values)
            for op in ops:
                if op[0] == "one":
                    _, value, ts = op
                    off = log.append(value, timestamp=ts)
                    batches.append((off, [value]))
                else:
                    r = log.append_batch(op[1])
                    assert len(r) == len(op[1])
                    batches.append((r.start, op[1]))
            stamps = {m.offset: m.timestamp for m in log.iter()}
            want = {}                       # base offset -> expected batch bytes
            for base, values in batches:
                ts = stamps[base]
                assert all(stamps[base + i] == ts for i in range(len(values)))
                want[base] = codec.encode_batch(base, values, ts, codec=c)
            for (base, values), op in zip(batches, ops):
                if op[0] == "one" and op[2] is not None:
                    assert stamps[base] == op[2]
                # the read path's view of the segment's map
                got = bytes(log.read(base, max_bytes=1).buffer()[:len(want[base])])
                assert got == want[base]
            # the files as written so far: the active one is preallocated (sparse)
            # past its data, so read just past the batches
            expected = _expected_files(_segment_bases(path), want)
            for seg_base, data in expected.items():
                got = _read_segment(path, seg_base, len(data) + 4096)
                assert got[:len(data)] == data
                assert not any(got[len(data):])
        finally:
            log.close()
        # closed: every file is cut back to its batches
        bases = _segment_bases(path)
        assert {b: _read_segment(path, b) for b in bases} == _expected_files(bases, want)


def _expected_files(bases: list[int], want: dict[int, bytes]) -> dict[int, bytes]:
    """The batches of ``want`` concatenated per segment (a batch lives in the last
    segment whose base offset is at or below its own)."""
    out: dict[int, list[bytes]] = {b: [] for b in bases}
    for base in sorted(want):
        seg = max(b for b in bases if b <= base)
        out[seg].append(want[base])
    return {b: b"".join(parts) for b, parts in out.items()}


@given(e2e_ops)
@settings(deadline=None, max_examples=30)
def test_log_writes_encode_batch_bytes(ops):
    _run_e2e(ops, None)


@given(e2e_ops)
@settings(deadline=None, max_examples=30)
def test_log_writes_encode_batch_bytes_lz4(ops):
    _run_e2e(ops, "lz4")


def test_log_explicit_cases():
    big = [_make(70_000, 3, "random"), _make(0xFFFF, 4, "mixed")]
    ops = [("one", b"", 0), ("one", b"x" * SHORT_MAX, 1_700_000_000_000),
           ("one", b"y" * 0xFFFF, 1_700_000_000_001), ("one", big[0], None),
           ("many", [b""]), ("many", big), ("many", [b"z" * 100] * 300),
           ("many", [os.urandom(50) for _ in range(20)]), ("one", b"last", 2**63 - 1)]
    for compression in (None, "lz4"):
        _run_e2e(ops, compression)

"""The batch codec is pure: bytes in, bytes out. Round trips, edge cases, and fuzzing."""

from __future__ import annotations

import os
import struct
import zlib

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog import codec
from seglog._codec import decode as _decode, encode as _encode, format as _format
from seglog.errors import CorruptRecordError

from helpers import header, put_header


def decode_all(data: bytes, **kw) -> list[tuple]:
    out = []
    for it in codec.iter_messages(data, 0, len(data), **kw):
        out.extend(it)
    return out


def walk_chunk(data: bytes, pos: int, end: int, expect: int) -> tuple[list[tuple], _decode.WalkEnd]:
    """The messages of the whole batches in a chunk, and where the walk ended."""
    out: list[tuple] = []
    walk = codec.iter_messages(data, pos, end, expect=expect, partial=True)
    while True:
        try:
            out.extend(next(walk))
        except StopIteration as stop:
            return out, stop.value


maybe_bytes = st.one_of(st.none(), st.binary(max_size=64))
headers_st = st.lists(st.tuples(st.text(max_size=8), st.binary(max_size=16)), max_size=3)


@st.composite
def batches(draw):
    n = draw(st.integers(1, 30))
    values = draw(st.lists(maybe_bytes, min_size=n, max_size=n))
    keys = draw(st.one_of(st.none(), st.lists(maybe_bytes, min_size=n, max_size=n)))
    if draw(st.booleans()):
        stamps = draw(st.integers(0, 2**40))
    else:
        stamps = draw(st.lists(st.integers(0, 2**62), min_size=n, max_size=n))
    headers = draw(st.one_of(st.none(), st.lists(headers_st, min_size=n, max_size=n)))
    base = draw(st.integers(0, 2**50))
    lz4 = draw(st.booleans())
    return base, values, keys, stamps, headers, lz4


@given(batches())
@settings(max_examples=300, deadline=None)
def test_round_trip(batch):
    base, values, keys, stamps, headers, lz4 = batch
    enc_headers = None if headers is None else [[(k.encode(), v) for k, v in h] for h in headers]
    data = codec.encode_batch(base, values, stamps, keys, enc_headers,
                              codec.CODEC_LZ4 if lz4 else codec.CODEC_NONE)
    msgs = decode_all(data)
    n = len(values)
    assert [m[0] for m in msgs] == list(range(base, base + n))
    assert [m[3] for m in msgs] == values
    assert [m[2] for m in msgs] == (keys if keys is not None else [None] * n)
    assert [m[1] for m in msgs] == (stamps if isinstance(stamps, list) else [stamps] * n)
    want_h = [tuple(h) for h in headers] if headers is not None else [()] * n
    assert [m[4] for m in msgs] == want_h


def test_none_and_empty_are_different():
    data = codec.encode_batch(0, [None, b"", b"x"], 5, [b"k", None, b""])
    msgs = decode_all(data)
    assert [m[3] for m in msgs] == [None, b"", b"x"]
    assert [m[2] for m in msgs] == [b"k", None, b""]


def test_plain_batch_overhead_is_small():
    values = [os.urandom(200) for _ in range(50)]
    data = codec.encode_batch(0, values, 1234)
    overhead = (len(data) - 200 * 50) / 50
    assert overhead < 3.0  # 47-byte header + 2-byte length per record
    size, parts = _encode.encode_values_parts(b"".join(values), [200] * 50, 1234)
    assert b"".join(parts) == data and size == len(data)


def test_wide_values_and_timestamps():
    big = os.urandom(0x10000)
    data = codec.encode_batch(3, [big, b"s"], [0, 2**62])
    hdr = header(data)
    assert hdr.attributes & codec.F_WIDE and hdr.attributes & codec.F_WIDE_TS
    assert [(m[1], m[3]) for m in decode_all(data)] == [(0, big), (2**62, b"s")]


def test_value_of_0xffff_bytes_is_not_mistaken_for_null():
    v = b"a" * 0xFFFF
    assert decode_all(codec.encode_batch(0, [v], 1))[0][3] == v


def test_compacted_batch_with_offset_holes():
    data = codec.encode_batch(100, [b"a", b"b"], 1, offset_deltas=[2, 7], last_offset_delta=9)
    hdr = header(data)
    assert hdr.last_offset == 109
    assert [m[0] for m in decode_all(data)] == [102, 107]
    assert [m[0] for m in decode_all(data, min_offset=103)] == [107]
    assert [m[0] for m in decode_all(data, max_offset=107)] == [102]


def test_min_and_max_offset_filter():
    data = codec.encode_batch(10, [bytes([i]) for i in range(10)], 1)
    assert [m[0] for m in decode_all(data, min_offset=13, max_offset=16)] == [13, 14, 15]
    assert decode_all(data, min_offset=25) == []


def test_lz4_compresses_repetitive_data_and_skips_incompressible():
    lines = [b'{"path": "/api/v1/items", "status": 200, "n": %d}' % i for i in range(50)]
    packed = codec.encode_batch(0, lines, 1, codec=codec.CODEC_LZ4)
    assert header(packed).attributes & codec.CODEC_MASK == codec.CODEC_LZ4
    assert len(packed) < 0.5 * sum(map(len, lines))
    noise = [os.urandom(100) for _ in range(5)]
    raw = codec.encode_batch(0, noise, 1, codec=codec.CODEC_LZ4)
    assert header(raw).attributes & codec.CODEC_MASK == codec.CODEC_NONE
    assert [m[3] for m in decode_all(raw)] == noise


def _rechecksum(data: bytearray) -> bytes:
    struct.pack_into("<Q", data, 13, codec.CHECKSUM(bytes(data[_format.CHECKSUM_FROM:])))
    return bytes(data)


def test_decompression_bomb_is_refused():
    lines = [b"x" * 1000] * 10
    data = bytearray(codec.encode_batch(0, lines, 1, codec=codec.CODEC_LZ4))
    # claim a huge uncompressed size (with a valid checksum, as a forger would)
    struct.pack_into("<I", data, codec.HEADER_SIZE, 2**31)
    with pytest.raises(CorruptRecordError, match="uncompressed size"):
        decode_all(_rechecksum(data))
    with pytest.raises(CorruptRecordError):
        decode_all(codec.encode_batch(0, lines, 1, codec=codec.CODEC_LZ4), max_uncompressed=100)


def test_checksum_mismatch_and_bad_framing():
    data = bytearray(codec.encode_batch(0, [b"hello", b"world"], 1))
    data[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="checksum mismatch"):
        decode_all(bytes(data))
    with pytest.raises(CorruptRecordError, match="framing"):
        decode_all(bytes(64))
    with pytest.raises(CorruptRecordError):
        decode_all(codec.encode_batch(0, [b"a"], 1)[:-1])


def test_lengths_that_do_not_add_up_are_corrupt():
    data = bytearray(codec.encode_batch(0, [b"abc", b"de"], 1))
    struct.pack_into("<H", data, codec.HEADER_SIZE, 4)   # first length 3 -> 4
    with pytest.raises(CorruptRecordError, match="add up"):
        decode_all(_rechecksum(data))


def test_read_header_partial_and_framing():
    data = codec.encode_batch(5, [b"abc"], 1)
    assert codec.read_header(data, 0, len(data)) is not None
    assert codec.read_header(data, 0, len(data) - 1) is None
    assert codec.read_header(data, 0, 10) is None
    with pytest.raises(CorruptRecordError):
        codec.read_header(bytes(100), 0, 100)


def test_a_header_alone():
    """Without ``end`` a header is read from a buffer that may hold only it;
    ``sane_header`` says None where ``read_header`` raises."""
    data = codec.encode_batch(5, [b"abc"], 1)
    head = data[:codec.HEADER_SIZE]
    assert codec.read_header(head, 0) == codec.read_header(data, 0, len(data))
    assert _format.sane_header(head) == codec.read_header(data, 0, len(data))
    assert codec.read_header(head[:-1], 0) is None and _format.sane_header(head[:-1]) is None
    assert _format.sane_header(bytes(100)) is None
    with pytest.raises(CorruptRecordError):
        codec.read_header(bytes(100), 0)


def test_offsets_continue_exactly_or_above_in_a_compacted_batch():
    assert _format.continues(10, 10, 0) and _format.continues(10, 10, codec.F_OFFSETS)
    assert not _format.continues(10, 11, 0) and _format.continues(10, 11, codec.F_OFFSETS)
    assert not _format.continues(10, 9, 0) and not _format.continues(10, 9, codec.F_OFFSETS)


def test_delete_horizon():
    plain = codec.encode_batch(5, [b"abc"], 1)
    assert codec.delete_horizon(plain, 0, codec.read_header(plain, 0)) is None
    data = b"xy" + codec.encode_batch(5, [None], 1, keys=[b"k"], offset_deltas=[0],
                                      delete_horizon=1234567)
    assert codec.delete_horizon(data, 2, codec.read_header(data, 2)) == 1234567


@given(st.binary(min_size=0, max_size=400), st.integers(0, 2**32 - 1))
@settings(max_examples=400, deadline=None)
def test_fuzz_decoding_garbage_raises_only_corrupt_record(junk, seed):
    # a valid checksum over garbage, so decoding goes past it
    for attrs in (0, seed & 0x7FF):
        body = struct.pack("<HIIqq", attrs, seed % 7, seed % 9, 1, 1) + junk
        data = bytearray(struct.pack("<qIBQ", 0, 9 + len(body), codec.MAGIC, 0) + body)
        try:
            msgs = decode_all(_rechecksum(data))
        except CorruptRecordError:
            continue
        assert all(len(m) == 5 for m in msgs)


@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_fuzz_flipped_bytes_never_decode_silently(payload):
    data = bytearray(codec.encode_batch(0, [payload, b"tail"], 1))
    for i in range(_format.CHECKSUM_FROM, len(data), max(1, len(data) // 16)):
        bad = bytearray(data)
        bad[i] ^= 0x10
        with pytest.raises(CorruptRecordError):
            decode_all(bytes(bad))


@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_fuzz_flipped_bytes_of_one_record_batches_never_decode_silently(payload):
    # Log.append's batches, which the reader decodes on a path of their own
    data = codec.encode_batch(7, [payload], 1) + codec.encode_batch(8, [b"next"], 1)
    for i in range(_format.CHECKSUM_FROM, len(data), max(1, len(data) // 24)):
        bad = bytearray(data)
        bad[i] ^= 0x10
        with pytest.raises(CorruptRecordError):
            decode_all(bytes(bad), expect=7)


def _shapes() -> dict[str, bytes]:
    rnd = __import__("random").Random(11)
    lines = [b"GET /api/v1/items/%d HTTP/1.1 200 %d" % (i, rnd.randrange(9999)) for i in range(50)]
    return {
        "one record (Log.append)": codec.encode_batch(5, [rnd.randbytes(200)], 1_700_000_000_000),
        "one long record": codec.encode_batch(5, [rnd.randbytes(1500)], 1_700_000_000_000),
        "50 values": codec.encode_batch(5, [rnd.randbytes(200) for _ in range(50)], 3),
        "keys, headers, timestamps, nulls": codec.encode_batch(
            5, [b"v1", None, b"v3"], [10, 20, 30], keys=[b"k1", b"k2", None],
            headers=[[(b"h", b"x")], [], [(b"a", b"bc"), (b"d", b"")]]),
        "lz4": codec.encode_batch(5, lines, 3, codec=codec.CODEC_LZ4),
        "compacted, horizon": codec.encode_batch(5, [b"a", b"b"], 3, keys=[b"k", b"l"],
                                                 offset_deltas=[0, 4], last_offset_delta=6,
                                                 delete_horizon=99),
        "empty compacted": codec.encode_batch(5, [], 3, offset_deltas=[], last_offset_delta=2),
    }


@pytest.mark.parametrize("shape", list(_shapes()))
def test_every_single_bit_flip_is_detected(shape):
    """Every bit of a batch, one at a time: a flip inside the checksummed bytes (or of
    the checksum) fails the checksum itself, not a later plausibility check; a flip
    of the base offset, length or magic fails framing or continuity."""
    data = _shapes()[shape]
    hdr = header(data)
    assert hdr.magic == codec.MAGIC == 2
    assert codec.checksum_ok(data, 0, hdr)
    assert hdr.checksum == xxh3_64(data[_format.CHECKSUM_FROM:])
    decode_all(data, expect=5)
    bad = bytearray(data)
    for i in range(len(data)):
        for bit in range(8):
            bad[i] ^= 1 << bit
            flipped = bytes(bad)
            if i >= _format.CHECKSUM_FROM - 8:      # the checksum and what it covers
                assert not codec.checksum_ok(flipped, 0, header(flipped)), (i, bit)
            if (i < 8 and hdr.attributes & codec.F_OFFSETS
                    and header(flipped).base_offset > 5):
                # a compacted batch may start anywhere above its predecessor's end: a
                # larger base offset is found by the segment's coverage check instead
                assert decode_all(flipped, expect=5) or not hdr.record_count
            else:
                with pytest.raises(CorruptRecordError):
                    decode_all(flipped, expect=5)
            bad[i] ^= 1 << bit


def xxh3_64(data: bytes) -> int:
    """FORMAT.md's definition, from the xxhash package directly."""
    import xxhash
    return xxhash.xxh3_64_intdigest(data)


def _as_format_1(batch: bytes) -> bytes:
    """The batch as format 1 wrote it: magic 1, a 4-byte CRC-32 (zlib's) of the rest."""
    base = header(batch).base_offset
    rest = batch[_format.CHECKSUM_FROM:]
    return struct.pack("<qIBI", base, 5 + len(rest), 1, zlib.crc32(rest)) + rest


@pytest.mark.parametrize("values", [[b"a"], [b"a", b"b"]])
def test_format_1_batch_is_refused_naming_its_format(values):
    old = _as_format_1(codec.encode_batch(0, values, 1))
    new = codec.encode_batch(0, values, 1)
    assert old[17:] == new[_format.CHECKSUM_FROM:] and len(old) == len(new) - 4
    clear = r"format 1 .*this seglog reads format 2 only"
    with pytest.raises(CorruptRecordError, match=clear):
        decode_all(old)
    with pytest.raises(CorruptRecordError, match=clear):      # a file's chunk, too
        decode_all(old, partial=True)
    with pytest.raises(CorruptRecordError, match=clear):      # after a format-2 batch
        decode_all(codec.encode_batch(0, [b"x"], 1) + _as_format_1(codec.encode_batch(1, values, 1)))
    with pytest.raises(CorruptRecordError, match=clear):
        codec.read_header(old, 0, len(old))
    with pytest.raises(CorruptRecordError, match=clear):
        list(codec.batches_in(old, 0, len(old)))


# -- runs of one-record batches (Log.append's), read on a path of their own ---------------

def _log_like(shapes: list[str], base: int = 0, ts: int = 1_700_000_000_000) -> tuple[bytes, list[tuple]]:
    """Batches in a row as a log holds them, and the messages they hold. Shapes:
    "one" (Log.append's), "empty" (a one-record batch of b""), "long" (one record
    of 1200 bytes or more, read without a copy of its batch), "many" (3 plain
    records), "keyed" (one record with a key), "wide" (one 64 KiB value), "lz4"
    (compressed), "gap" (a compacted batch starting 2 past the end, holes inside)."""
    parts, msgs = [], []
    off = base
    for i, shape in enumerate(shapes):
        t = ts + i // 2
        if shape in ("one", "empty", "long", "wide"):
            v = {"one": b"v%d" % off, "empty": b"", "long": b"%d," % off * 600,
                 "wide": bytes([i % 256]) * 0x10000}[shape][:0x10000]
            parts.append(codec.encode_batch(off, [v], t))
            msgs.append((off, t, None, v, ()))
            off += 1
        elif shape in ("many", "lz4"):
            vs = [b"m%d-%d" % (off, j) * 20 for j in range(3)]
            parts.append(codec.encode_batch(off, vs, t, codec=codec.CODEC_LZ4 if shape == "lz4" else 0))
            msgs += [(off + j, t, None, v, ()) for j, v in enumerate(vs)]
            off += 3
        elif shape == "keyed":
            parts.append(codec.encode_batch(off, [b"kv"], t, keys=[b"k"]))
            msgs.append((off, t, b"k", b"kv", ()))
            off += 1
        elif shape == "gap":
            start = off + 2
            parts.append(codec.encode_batch(start, [b"g1", b"g2"], t, offset_deltas=[0, 2],
                                            last_offset_delta=3))
            msgs += [(start, t, None, b"g1", ()), (start + 2, t, None, b"g2", ())]
            off = start + 4
    return b"".join(parts), msgs


_SHAPES = st.lists(st.sampled_from(["one"] * 6 + ["empty", "long", "many", "keyed", "wide", "lz4",
                                                  "gap"]),
                   min_size=1, max_size=25)


@given(_SHAPES, st.integers(0, 40), st.one_of(st.none(), st.integers(0, 60)),
       st.booleans(), st.booleans())
@settings(max_examples=300, deadline=None)
def test_runs_of_one_record_batches_read_as_the_reference(shapes, lo, hi, know_start, as_view):
    """Every bound, with and without ``expect``, from bytes and from a buffer that is
    not bytes: the messages of batch-by-batch decoding, in order."""
    data, msgs = _log_like(shapes, base=3)
    want = [m for m in msgs if m[0] >= lo and (hi is None or m[0] < hi)]
    buf = memoryview(data) if as_view else data
    got = decode_all(buf, min_offset=lo, max_offset=hi, expect=3 if know_start else None)
    assert got == want
    assert all(type(m[3]) is bytes for m in got)
    lead = decode_all(data, min_offset=lo, max_offset=hi, lead=("t", 7))
    assert lead == [("t", 7) + m for m in want]


@given(_SHAPES, st.lists(st.integers(1, 400), min_size=1, max_size=8))
@settings(max_examples=300, deadline=None)
def test_runs_read_in_chunks_with_progress(shapes, sizes):
    """The chunked file walk's protocol: a chunk that ends inside a batch (or its
    header) stops quietly, and the ``WalkEnd`` it returns says where the next chunk
    starts and which offset it must start at; a chunk with no whole batch ends
    where it started."""
    data, msgs = _log_like(shapes, base=10)
    got, pos, expect, k = [], 0, 10, 0
    while pos < len(data):
        end = min(len(data), pos + sizes[k % len(sizes)])
        k += 1
        some, done = walk_chunk(data, pos, end, expect)
        if done.position == pos:
            assert done == (pos, expect) and not some
            end = pos + header(data, pos).size   # read it whole
            some, done = walk_chunk(data, pos, end, expect)
        got += some
        assert pos < done.position <= end
        hdr = None
        for q, hdr in codec.batches_in(data, pos, done.position):
            pass
        assert hdr is not None and q + hdr.size == done.position
        assert done.next_offset == hdr.last_offset + 1
        pos, expect = done
    assert got == msgs


def _simple_damage(batch: bytes, damage: str, base: int) -> bytearray | None:
    """``batch`` with a flipped checksum byte, a base offset one too far ("gap") or a
    bad magic byte; None for any other damage (the test makes it)."""
    bad = bytearray(batch)
    if damage == "checksum":
        bad[-1] ^= 0x20
    elif damage == "gap":
        bad[:8] = struct.pack("<q", base + 1)
    elif damage == "magic":
        bad[12] = 3
    else:
        return None
    return bad


def _until_refused(data: bytes) -> tuple[list[tuple], Any]:
    """The messages iter_messages yields from ``data`` before it raises, and the error."""
    got: list[tuple] = []
    with pytest.raises(CorruptRecordError) as ei:
        for it in codec.iter_messages(data, 0, len(data), expect=0):
            got.extend(it)
    return got, ei


@pytest.mark.parametrize("at", [0, 1, 4, 7])
@pytest.mark.parametrize("damage", ["checksum", "gap", "overlap", "magic", "value length",
                                    "offset span"])
def test_damage_inside_a_run_is_raised_after_the_messages_before_it(at, damage):
    parts = [codec.encode_batch(i, [b"value %d" % i], 100 + i) for i in range(8)]
    bad = _simple_damage(parts[at], damage, at) or bytearray(parts[at])
    if damage == "overlap":
        bad[:8] = struct.pack("<q", at - 1)
    elif damage == "value length":      # under a valid checksum, as a forger would
        struct.pack_into("<H", bad, codec.HEADER_SIZE, len(b"value 0") + 1)
        bad = bytearray(_rechecksum(bad))
    elif damage == "offset span":       # one record claiming three offsets, likewise
        struct.pack_into("<I", bad, _format.CHECKSUM_FROM + 2, 2)
        bad = bytearray(_rechecksum(bad))
    data = b"".join(parts[:at]) + bytes(bad) + b"".join(parts[at + 1:])
    got, ei = _until_refused(data)
    assert [m[0] for m in got] == list(range(at))
    assert ei.value.position == sum(map(len, parts[:at]))
    if at == 0 and damage in ("gap", "overlap"):
        return          # without expect, any first offset is fine; with it, not
    with pytest.raises(CorruptRecordError):
        decode_all(data)


@pytest.mark.parametrize("at", [0, 1, 3, 5])
@pytest.mark.parametrize("damage, message", [
    ("checksum", "checksum mismatch"),
    ("gap", "batch starts at offset {base_plus_1}, expected {base}"),
    ("lengths", "record lengths do not add up"),
    ("overrun", "length array runs past the batch"),
    ("offset span", "undecodable batch: record count does not match offset span"),
    ("magic", None)])
def test_damage_among_plain_batches_is_raised_after_the_messages_before_it(at, damage, message):
    """Plain batches of several records (``append_batch``'s), one-record batches between
    some of them: every check with its own error, at the damaged batch's position,
    after the messages of the batches before it and none of its own."""
    parts, msgs, off = [], [], 0
    for i in range(6):
        vs = [b"b%d-%d" % (i, j) * (1 + j) for j in range(3)] if i % 3 != 2 else [b"one %d" % i]
        parts.append(codec.encode_batch(off, vs, 1000 + i))
        msgs.append([(off + j, 1000 + i, None, v, ()) for j, v in enumerate(vs)])
        off += len(vs)
    base = msgs[at][0][0]
    bad = _simple_damage(parts[at], damage, base)
    if bad is None:      # under a valid checksum, as a forger would
        bad = bytearray(parts[at])
        hdr = header(bad)
        if damage == "lengths":
            bad[codec.HEADER_SIZE] += 1
        elif damage == "overrun":
            hdr = hdr._replace(record_count=100, last_offset_delta=99)
        else:
            hdr = hdr._replace(last_offset_delta=hdr.last_offset_delta + 2)
        put_header(bad, 0, hdr)
        bad = bytearray(_rechecksum(bad))
    data = b"".join(parts[:at]) + bytes(bad) + b"".join(parts[at + 1:])
    got, ei = _until_refused(data)
    assert got == [m for batch in msgs[:at] for m in batch]
    # the offset the damaged batch's header claims
    claimed = base + 1 if damage == "gap" else base
    assert (ei.value.position, ei.value.offset) == (sum(map(len, parts[:at])), claimed)
    if message is not None:
        assert ei.value.message == message.format(base=base, base_plus_1=base + 1)


def _framing_walk(data: bytes, start: int, end: int) -> tuple[int, int] | str:
    """What ``batches_in`` says of ``data[start:end]``: where its whole batches stop and
    where the last starts, or the error it raises."""
    pos, last = start, -1
    try:
        for p, hdr in codec.batches_in(data, start, end):
            last, pos = p, p + hdr.size
    except CorruptRecordError as e:
        return f"{e.message} at {e.position}"
    return pos, last


# bytes of a header whose change the framing check sees: the base offset's sign, the
# length's low and high bytes, the magic, the attributes' high byte (unknown bits)
_FRAMING_BYTES = [7, 8, 11, 16, 22]


@given(_SHAPES, st.integers(0, 2000), st.integers(0, 24), st.sampled_from(_FRAMING_BYTES + [30]),
       st.integers(0, 7), st.sampled_from([b"", b"\0" * 12 + b"\1", b"junk" * 20]))
@settings(max_examples=500, deadline=None)
def test_whole_batches_walks_as_batches_in(shapes, cut, which, field, bit, tail):
    """``Log.read``'s walk to its last batch (``_codec.format.whole_batches``, which makes no
    header) stops, and fails, exactly where ``batches_in`` does: whole batches, a cut
    one, a framing byte of one batch changed, a format-1 batch's start or junk after."""
    data, _ = _log_like(shapes)
    starts = [p for p, _ in codec.batches_in(data, 0, len(data))]
    data = bytearray(data + tail)
    data[starts[which % len(starts)] + field] ^= 1 << bit
    data = bytes(data)
    end = max(0, len(data) - cut)
    want = _framing_walk(data, 0, end)
    try:
        got: tuple[int, int] | str = _format.whole_batches(data, 0, end)
    except CorruptRecordError as e:
        got = f"{e.message} at {e.position}"
    assert got == want

"""seglog.kafka's batch decoding as pure functions over bytes (``_wire``, ``_uniform``):
fuzzed with hypothesis, it raises nothing but ``CorruptRecordError`` on any bytes; the
uniform fast path gives exactly what the general decoder gives."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_build import batch
from seglog.errors import CorruptRecordError
from seglog.kafka import _uniform, _wire
from seglog.kafka._reads import message_iters

pytest.importorskip("google_crc32c")
pytest.importorskip("cramjam")

TS = 1_700_000_000_000
SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _decode_all(data: bytes, check: bool) -> list:
    """Everything a reader does with a buffer: frame, header, checksum, decode (both
    paths); what it decoded, or CorruptRecordError."""
    out = []
    i, n = 0, len(data)
    while i < n:
        size = _wire.batch_size(data, i, n)
        if size is None or i + size > n:
            break
        info = _wire.header(data, i, size)
        if check:
            _wire.check(data, info)
        out.append(_wire.decode(data, info))
        if info.magic == 2:
            for it in message_iters(iter([(data, info, "buf", 0)]), 0, 1 << 62, tuple):
                out.append(list(it))
        i += size
    return out


records = st.lists(st.tuples(st.integers(0, 10_000), st.none() | st.binary(max_size=40),
                             st.none() | st.binary(max_size=300),
                             st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=8)),
                                      max_size=2)), min_size=1, max_size=80)


@SETTINGS
@given(st.binary(max_size=400))
def test_random_bytes_raise_only_corrupt_record_error(data):
    try:
        _decode_all(data, check=False)
    except CorruptRecordError:
        pass


@SETTINGS
@given(records, st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]),
       st.data())
def test_damaged_batches_raise_only_corrupt_record_error(recs, codec, data):
    """A valid batch with bytes changed (the checksum not checked, so the decoder
    itself sees the damage) or cut short."""
    raw = bytearray(batch(5, [(TS + t, k, v, h) for t, k, v, h in recs], codec=codec))
    for _ in range(data.draw(st.integers(1, 6))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    for buf in (bytes(raw), bytes(raw[:cut])):
        try:
            _decode_all(buf, check=False)
        except CorruptRecordError:
            pass


@SETTINGS
@given(st.integers(1, 200), st.integers(0, 300), st.none() | st.integers(0, 20),
       st.lists(st.integers(0, 63), min_size=1, max_size=200), st.booleans())
def test_the_uniform_path_equals_the_general_decoder(n, vlen, klen, deltas, null_values):
    recs = [(TS + deltas[i % len(deltas)],
             None if klen is None else bytes([i % 256]) * klen,
             None if null_values else bytes([(i * 7) % 256]) * vlen, [])
            for i in range(n)]
    raw = batch(1000, recs)
    info = _wire.header(raw, 0, len(raw))
    _wire.check(raw, info)
    general = _wire.decode(raw, info)
    runs = _uniform.runs(raw, _wire.V2_HEADER_SIZE, len(raw), info.records)
    assert runs is not None                  # this shape is the fast path's
    fast = [m for it in message_iters(iter([(raw, info, "buf", 0)]), 0, 1 << 62, tuple)
            for m in it]
    assert fast == list(zip(*general))
    assert [m[0] for m in fast] == list(range(1000, 1000 + n))


@SETTINGS
@given(records, st.sampled_from(["none", "gzip", "zstd"]),
       st.lists(st.integers(0, 3), min_size=80, max_size=80))
def test_decoding_equals_the_encoder(recs, codec, gaps):
    """Whatever the shape (holes in the offsets too), records come back as written."""
    offsets, o = [], 0
    for k in range(len(recs)):
        offsets.append(o)
        o += 1 + gaps[k]
    raw = batch(77, [(TS + t, k, v, h) for t, k, v, h in recs], codec=codec, offsets=offsets)
    got = [m for part in _decode_all(raw, check=True)[1:] for m in part]
    want = [(77 + off, TS + t, k, v, tuple((hk, hv) for hk, hv in h))
            for off, (t, k, v, h) in zip(offsets, recs)]
    assert got == want


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(1, 90), st.integers(0, 40),
                          st.sampled_from([0, 1, 5, 100, 200]),
                          st.sampled_from([None, 0, 3])), min_size=1, max_size=12),
       st.sampled_from(["none", "none", "gzip"]))
def test_arrow_equals_iter_over_batches_of_mixed_shapes(tmp_path_factory, shapes, codec):
    """Chunks of uniform batches (gathered by numpy), of batches that only look uniform
    at their first record (a wide timestamp delta, a different length later: numpy's
    check refuses, the batch path decodes), and compressed ones, read alike."""
    from seglog import kafka
    d = tmp_path_factory.mktemp("p") / "t-0"
    d.mkdir()
    out, base = [], 0
    for n, vlen, tsd, klen in shapes:
        recs = [(TS + (tsd if i == n // 2 else 0),
                 None if klen is None else b"k" * klen,
                 b"v" * (vlen + (1 if i == n - 1 and vlen == 40 else 0)), []) for i in range(n)]
        out.append(batch(base, recs, codec=codec))
        base += n
    (d / ("%020d.log" % 0)).write_bytes(b"".join(out))
    part = kafka.open_partition(str(d))
    msgs = list(part.iter())
    assert [m.offset for m in msgs] == list(range(base))
    rows = part.read_arrow().to_pylist()
    assert [(r["offset"], int(r["timestamp"].timestamp() * 1000), r["key"], r["value"])
            for r in rows] == [(m.offset, m.timestamp, m.key, m.value) for m in msgs]


def test_a_layout_guessed_from_an_earlier_chunk_is_checked(tmp_path):
    """Batches of the same size and count but another record layout (a 1-byte key and
    a value a byte shorter, in place of no key) in a later chunk: the layout guessed
    from the earlier chunk is refused by the check of its structural bytes, and the
    batches read as they are."""
    from seglog.kafka import _arrow, _reads
    from seglog.kafka._segments import list_segments
    d = tmp_path / "t-0"
    d.mkdir()
    plain = batch(0, [(TS, None, b"a" * 200, [])] * 50)
    keyed = batch(50, [(TS, b"k", b"b" * 199, [])] * 50)
    assert len(plain) == len(keyed)
    (d / ("%020d.log" % 0)).write_bytes(plain + keyed)
    segs = list_segments(str(d))
    tables = list(_arrow.record_batches(_reads.walk(segs, 0, 100, None, len(plain)), 0, 100))
    assert len(tables) == 2
    rows = [r for t in tables for r in t.to_pylist()]
    assert [r["key"] for r in rows] == [None] * 50 + [b"k"] * 50
    assert [r["value"] for r in rows] == [b"a" * 200] * 50 + [b"b" * 199] * 50

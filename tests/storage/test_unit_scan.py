"""Unit tests of the one batch walker (``_storage.scan.walk``), the checking scan
(``_storage.scan.scan``) and the in-buffer walk (``codec.batches_in``) over hand-built files."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings, strategies as st

from seglog._storage import scan as _scan
from seglog import codec
from seglog._codec import format as _format
from seglog._storage.scan import Damage
from seglog.errors import CorruptRecordError
from seglog.segment import Segment

from helpers import header, put_header


def _batches(n: int, base: int = 0, size: int = 10, per: int = 2, ts: int = 100) -> list[bytes]:
    out = []
    off = base
    for i in range(n):
        out.append(codec.encode_batch(off, [bytes([65 + i % 26]) * size] * per, ts + i))
        off += per
    return out


def _positions(batches: list[bytes]) -> list[int]:
    pos, out = 0, []
    for b in batches:
        out.append(pos)
        pos += len(b)
    return out


class _File:
    def __init__(self, path: str, data: bytes) -> None:
        with open(path, "wb") as f:
            f.write(data)
        self.fd = os.open(path, os.O_RDONLY)
        self.size = len(data)

    def walk(self, start: int = 0, end: int | None = None, **kw):
        # walk yields headers as HEADER unpacks them: by their fields here
        return [(p + filepos, _format.as_header(hdr)) for _, p, filepos, hdr in
                _scan.walk(self.fd, start, self.size if end is None else end, **kw)]


@pytest.fixture
def mkfile(tmp_path):
    opened = []

    def make(data: bytes, name: str = "f.log") -> _File:
        f = _File(str(tmp_path / name), data)
        opened.append(f.fd)
        return f
    yield make
    for fd in opened:
        os.close(fd)


def _expected(batches: list[bytes]) -> list[tuple[int, int]]:
    return [(p, header(b).base_offset) for p, b in zip(_positions(batches), batches)]


def _summary(walked):
    return [(p, h[0]) for p, h in walked]


# -- chunk boundaries -----------------------------------------------------------------

@pytest.mark.parametrize("chunk_batches", [1, 2, 3, 5, 100])
def test_walk_chunk_exact_multiples_of_the_batch_size(mkfile, chunk_batches):
    bs = _batches(12)
    size = len(bs[0])
    assert all(len(b) == size for b in bs)
    f = mkfile(b"".join(bs))
    assert _summary(f.walk(chunk=size * chunk_batches, expect=0, check=True)) == _expected(bs)


H = codec.HEADER_SIZE
B = H + 2 * (2 + 17)                   # a batch of two 17-byte values


@pytest.mark.parametrize("chunk", [H, H + 1, 60, B - 1, B + 1, 97, 1000])
def test_walk_chunk_not_aligned_with_batches(mkfile, chunk):
    bs = _batches(9, size=17)
    assert len(bs[0]) == B
    f = mkfile(b"".join(bs))
    assert _summary(f.walk(chunk=chunk, expect=0, check=True)) == _expected(bs)


@pytest.mark.parametrize("chunk", [1, H - 1])
def test_walk_chunk_smaller_than_a_header(mkfile, chunk):
    bs = _batches(3, size=17)
    f = mkfile(b"".join(bs))
    assert _summary(f.walk(chunk=chunk, expect=0)) == _expected(bs)


def test_walk_batch_larger_than_chunk_is_read_whole(mkfile):
    bs = [codec.encode_batch(0, [b"s"], 1), codec.encode_batch(1, [b"B" * 5000], 2),
          codec.encode_batch(2, [b"t"], 3)]
    f = mkfile(b"".join(bs))
    got = list(_scan.walk(f.fd, 0, f.size, expect=0, check=True, chunk=256))
    assert [(p + fp, _format.as_header(h).base_offset) for _, p, fp, h in got] == _expected(bs)
    buf, p, _, hdr = got[1]
    assert buf[p:p + _format.as_header(hdr).size] == bs[1]     # the whole batch in one buffer
    assert codec.checksum_ok(buf, p, hdr)


def test_walk_from_a_middle_batch_and_to_a_middle_end(mkfile):
    bs = _batches(6)
    pos = _positions(bs)
    f = mkfile(b"".join(bs))
    assert _summary(f.walk(pos[2], pos[5], expect=4, chunk=50)) == _expected(bs)[2:5]
    assert f.walk(pos[3], pos[3]) == []


# -- each Damage.reason -----------------------------------------------------------------

def _damage(f: _File, **kw) -> Damage:
    with pytest.raises(Damage) as ei:
        f.walk(**kw)
    return ei.value


@pytest.mark.parametrize("chunk", [1 << 20, 50])
def test_damage_short_file_ends_before_end(mkfile, chunk):
    bs = _batches(3)
    f = mkfile(b"".join(bs))
    d = _damage(f, end=f.size + 100, chunk=chunk)
    assert d.reason == "short"
    assert d.position == f.size
    assert isinstance(d, CorruptRecordError)


@pytest.mark.parametrize("cut", [5, 30, 50])        # inside the header, inside the records
def test_damage_partial_batch_runs_past_end(mkfile, cut):
    bs = _batches(3)
    pos = _positions(bs)
    f = mkfile(b"".join(bs))
    d = _damage(f, end=pos[2] + cut)
    assert d.reason == "partial"
    assert d.position == pos[2]


def test_damage_zeros(mkfile):
    bs = _batches(2)
    f = mkfile(b"".join(bs) + bytes(200))
    d = _damage(f)
    assert d.reason == "zeros"
    assert d.position == len(bs[0]) + len(bs[1])


def test_damage_framing_bad_magic(mkfile):
    bs = _batches(3)
    data = bytearray(b"".join(bs))
    data[len(bs[0]) + 12] = 7              # magic of the second batch
    f = mkfile(bytes(data))
    d = _damage(f)
    assert d.reason == "framing"
    assert d.position == len(bs[0])


def test_damage_framing_bad_timestamps_only_when_checking(mkfile):
    good = codec.encode_batch(0, [b"a"], 100)
    hdr = header(good)
    hdr = hdr._replace(max_timestamp=50)    # max timestamp below the base timestamp
    body = _format.HEADER.pack(*hdr)[_format.CHECKSUM_FROM:] + good[codec.HEADER_SIZE:]
    hdr = hdr._replace(checksum=codec.CHECKSUM(body))   # right: only the timestamps are wrong
    bad = _format.HEADER.pack(*hdr) + good[codec.HEADER_SIZE:]
    f = mkfile(bad)
    assert len(f.walk()) == 1
    d = _damage(f, check=True)
    assert d.reason == "framing"


def test_damage_checksum_only_when_checking(mkfile):
    bs = _batches(4)
    pos = _positions(bs)
    data = bytearray(b"".join(bs))
    data[pos[2] + codec.HEADER_SIZE + 6] ^= 1      # a value byte of the third batch
    f = mkfile(bytes(data))
    assert _summary(f.walk(check=False)) == _expected(bs)     # check=False: no checksum check
    d = _damage(f, check=True)
    assert d.reason == "checksum"
    assert (d.position, d.offset) == (pos[2], 4)


def test_damage_offsets_first_batch_not_at_expect(mkfile):
    f = mkfile(b"".join(_batches(2, base=10)))
    assert _damage(f, expect=11).reason == "offsets"
    assert _damage(f, expect=9).reason == "offsets"
    assert len(f.walk(expect=10)) == 2
    assert len(f.walk()) == 2               # no expect: the first batch sets it


def test_damage_offsets_gap_or_overlap_between_batches(mkfile):
    a = codec.encode_batch(0, [b"a", b"b"], 1)
    gap = codec.encode_batch(5, [b"c"], 2)
    overlap = codec.encode_batch(1, [b"c"], 2)
    for second in (gap, overlap):
        f = mkfile(a + second, name=f"f{id(second)}.log")
        d = _damage(f)
        assert d.reason == "offsets"
        assert (d.position, d.offset) == (len(a), header(second).base_offset)


def test_compacted_batch_may_start_above_but_not_below(mkfile):
    a = codec.encode_batch(0, [b"a", b"b"], 1)
    above = codec.encode_batch(10, [b"c", b"d"], 2, offset_deltas=[0, 3])
    assert header(above).attributes & codec.F_OFFSETS
    f = mkfile(a + above + codec.encode_batch(14, [b"e"], 3))
    assert _summary(f.walk(expect=0, check=True)) == [(0, 0), (len(a), 10),
                                                     (len(a) + len(above), 14)]
    below = codec.encode_batch(1, [b"c", b"d"], 2, offset_deltas=[0, 3])
    g = mkfile(a + below, name="g.log")
    assert _damage(g).reason == "offsets"


# -- scan ---------------------------------------------------------------------------------

def _seg(tmp_path, data: bytes, base: int = 0) -> Segment:
    d = tmp_path / "segs"
    d.mkdir(exist_ok=True)
    with open(d / f"{base:020d}.log", "wb") as f:
        f.write(data)
    return Segment(str(d), base)


@pytest.mark.parametrize("damage, stop", [
    ("none", "end"), ("torn", "partial"), ("short", "partial"), ("zeros", "zeros"),
    ("magic", "framing"), ("checksum", "checksum"), ("offsets", "offsets")])
def test_scan_stops_with_reason_and_end(tmp_path, damage, stop):
    bs = _batches(5, base=50)
    pos = _positions(bs)
    data = bytearray(b"".join(bs))
    end = len(data)
    good = 5
    if damage == "torn":
        data = data[:pos[4] + 20]
        end = len(data)
        good = 4
    elif damage == "short":
        end = len(data) + 10           # the caller thinks the file is longer
    elif damage == "zeros":
        data += bytes(100)
        end = len(data)
    elif damage == "magic":
        data[pos[3] + 12] = 0xEE
        good = 3
    elif damage == "checksum":
        data[pos[3] + codec.HEADER_SIZE + 5] ^= 0x10
        good = 3
    elif damage == "offsets":
        data[pos[3]:pos[4]] = codec.encode_batch(99, [b"D" * 10] * 2, 103)
        good = 3
    seg = _seg(tmp_path, bytes(data), base=50)
    try:
        res = _scan.scan(seg, 0, end, 50)
        assert res.stop == stop
        assert res.end == (pos[good] if good < 5 else pos[4] + len(bs[4]))
        assert res.next_offset == 50 + 2 * good
        assert res.batches == good
        assert res.max_timestamp == 100 + good - 1
    finally:
        seg.close()


def test_scan_never_raises_and_first_batch_sets_offset(tmp_path):
    seg = _seg(tmp_path, bytes([codec.MAGIC + 1]) * 500, base=3)     # garbage: no magic
    try:
        res = _scan.scan(seg, 0, 500, None)
        assert (res.stop, res.end, res.next_offset, res.batches) == ("framing", 0, 3, 0)
    finally:
        seg.close()


def test_scan_index_entries_follow_the_interval(tmp_path):
    bs = _batches(30, size=30)
    seg = _seg(tmp_path, b"".join(bs))
    try:
        res = _scan.scan(seg, 0, seg.size, 0, interval=250)
        bsz = len(bs[0])
        # entries at the first batch at least 250 past the last entry (0 first)
        step = -(-250 // bsz) * bsz
        assert res.index == [(2 * (p // bsz), p) for p in range(step, seg.size, step)]
        # no interval: no entries
        assert _scan.scan(seg, 0, seg.size, 0).index == []
    finally:
        seg.close()


# -- codec.batches_in ---------------------------------------------------------------------

def test_batches_in_stops_quietly_at_a_partial_batch():
    bs = _batches(4)
    data = b"".join(bs)
    pos = _positions(bs)
    for cut in (pos[3] + 1, pos[3] + codec.HEADER_SIZE, len(data) - 1):
        assert [p for p, _ in codec.batches_in(data, 0, cut)] == pos[:3]
        # a buffer that ends inside the header (short read, end = what was asked for)
        if cut < pos[3] + codec.HEADER_SIZE:
            assert [p for p, _ in codec.batches_in(data[:cut], 0, len(data))] == pos[:3]
    assert [p for p, _ in codec.batches_in(data, 0, len(data))] == pos


def test_batches_in_buffer_shorter_than_end_yields_no_cut_batch():
    bs = _batches(4)
    data = b"".join(bs)
    short = data[:len(data) - 1]           # the last batch's whole header, records cut
    assert [p for p, _ in codec.batches_in(short, 0, len(data))] == _positions(bs)[:3]


def test_batches_in_raises_on_bad_framing():
    bs = _batches(3)
    data = bytearray(b"".join(bs))
    data[len(bs[0]) + 8:len(bs[0]) + 12] = (3).to_bytes(4, "little")   # length below a header
    walked = []
    with pytest.raises(CorruptRecordError) as ei:
        for p, _ in codec.batches_in(bytes(data), 0, len(data)):
            walked.append(p)
    assert walked == [0]
    assert ei.value.position == len(bs[0])
    with pytest.raises(CorruptRecordError):
        list(codec.batches_in(bytes(300), 0, 300))          # zeros


# -- property: walk yields exactly the batches ------------------------------------------

@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return str(tmp_path_factory.mktemp("walk") / "w.log")


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 400)), min_size=0, max_size=25),
       chunk=st.integers(codec.HEADER_SIZE, 3000), check=st.booleans())
def test_walk_yields_exactly_the_batches(scratch, sizes, chunk, check):
    bs = []
    off = 0
    for i, (n, vlen) in enumerate(sizes):
        bs.append(codec.encode_batch(off, [bytes([i % 256]) * vlen] * n, i))
        off += n
    data = b"".join(bs)
    with open(scratch, "wb") as f:
        f.write(data)
    fd = os.open(scratch, os.O_RDONLY)
    try:
        got = [(fp + p, hdr, bytes(buf[p:p + _format.as_header(hdr).size]))
               for buf, p, fp, hdr in _scan.walk(fd, 0, len(data), expect=0, check=check,
                                                 chunk=chunk)]
    finally:
        os.close(fd)
    assert [(p, _format.as_header(h).base_offset, raw) for p, h, raw in got] == [
        (p, header(b).base_offset, b) for p, b in zip(_positions(bs), bs)]


def test_survey_counts_what_lies_past_a_bad_batch(mkfile):
    """Past a bad batch: the good batches that continue the log (not a stale copy of
    an earlier one, not batches inside the bad batch's own claimed bytes), their
    messages, and where the data ends before the zeros a writer reserved."""
    good = _batches(6, per=3)
    pos = _positions(good)
    bad = bytearray(good[2])
    bad[40] ^= 0xFF                                      # checksum fails, framing holds
    data = b"".join(good[:2]) + bytes(bad) + good[3] + good[0] + good[4] + bytes(5000)
    f = mkfile(data)
    sv = _scan.survey(f.fd, pos[2], f.size, 6)
    assert sv.head_messages is None and sv.first == pos[3]
    assert (sv.batches, sv.messages, sv.end_offset) == (2, 6, 15)   # batches 3 and 4
    assert sv.data_end == f.size - 5000 and sv.good_messages == 6
    first = _scan.survey(f.fd, pos[2], f.size, 6, first_only=True)
    assert first.first == pos[3] and first.batches == 0
    whole = _scan.survey(f.fd, pos[1], f.size, 3)               # a good head counts
    assert whole.head_messages == 3 and whole.head_base == 3 and whole.head_span == 3
    assert _scan.zeros_to(f.fd, f.size - 5000, f.size)
    assert not _scan.zeros_to(f.fd, f.size - 5001, f.size)


def _with_unknown_attribute(batch: bytes, bit: int = 1 << 11) -> bytes:
    """``batch`` as a newer seglog might write it: an attribute bit this version does not
    know, and a checksum that matches."""
    hdr = header(batch)
    hdr = hdr._replace(attributes=hdr.attributes | bit)
    b = bytearray(batch)
    put_header(b, 0, hdr)
    put_header(b, 0, hdr._replace(checksum=codec.CHECKSUM(bytes(b[_format.CHECKSUM_FROM:]))))
    return bytes(b)


def test_survey_counts_batches_with_attribute_bits_it_does_not_know(mkfile):
    """Survey looks for batches by framing (magic, length) and checksum only: a whole
    batch a newer seglog wrote is data past the damage, at the head or after it."""
    good = _batches(4, per=2)
    pos = _positions(good)
    newer = [_with_unknown_attribute(b) for b in good]
    bad = bytearray(good[1])
    bad[40] ^= 0xFF
    f = mkfile(good[0] + bytes(bad) + newer[2] + newer[3])
    sv = _scan.survey(f.fd, pos[1], f.size, 2)
    assert (sv.first, sv.batches, sv.messages, sv.end_offset) == (pos[2], 2, 4, 8)
    assert sv.data_end == f.size
    head = _scan.survey(f.fd, pos[2], f.size, 4)
    assert (head.head_messages, head.head_base, head.head_span) == (2, 4, 2)
    assert (head.first, head.batches) == (pos[3], 1)

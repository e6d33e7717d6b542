"""Unit tests of ``Segment`` and ``ActiveSegment`` used directly (no ``Log``): the
writer's append paths and bookkeeping, the index rule (the writer's and the scan's must agree), sealing,
reopening, and reads of damaged files."""

from __future__ import annotations

import contextlib
import os

import pytest
from hypothesis import given, strategies as st

from seglog._storage import scan as _scan
from seglog import codec
from seglog._codec import format as _format
from seglog.errors import CorruptRecordError
from seglog.segment import ActiveSegment, ActiveSettings, LogSegments, Segment, WriterState

CAP = 1 << 20
MAX_IX = 1 << 16


def settings(interval: int, segment_bytes: int = CAP // 2) -> ActiveSettings:
    """An active segment mapped to CAP, rolling past ``segment_bytes``."""
    return ActiveSettings(CAP, segment_bytes, None, interval, MAX_IX)


@pytest.fixture
def segdir(tmp_path):
    d = tmp_path / "seg"
    d.mkdir()
    return str(d)


def _one_args(offset: int, ts: int, value: bytes) -> tuple[int, int, int, bytes]:
    """What ``Log.append`` computes for ``ActiveSegment.append_one`` (log.py's hot path)."""
    body = _format.ONE_TAIL.pack(0, 0, 1, ts, ts, len(value)) + value
    return offset, ts, codec.CHECKSUM(body), body


def _append_batch(w: ActiveSegment, values: list[bytes], ts: int) -> bytes:
    base = w.next_offset
    data = codec.encode_batch(0, values, ts)
    w.append(data, base, base + len(values), ts)
    return data


def _messages(seg: Segment, offset: int, max_bytes: int = 1 << 20):
    return [(m.offset, m.timestamp, m.value) for m in seg.read(offset, max_bytes)]


def test_append_tracks_size_next_offset_and_max_timestamp(segdir):
    w = ActiveSegment.create(segdir, 100, settings(4096))
    seg = w.segment
    try:
        assert (seg.size, seg.next_offset, seg.max_timestamp) == (0, 100, -1)
        expect_size = 0
        d = _append_batch(w, [b"a", b"bb", b"ccc"], 50)
        expect_size += len(d)
        assert (seg.size, seg.next_offset, seg.max_timestamp) == (expect_size, 103, 50)
        d = _append_batch(w, [b"d"], 40)            # an older timestamp: max stays
        expect_size += len(d)
        assert (seg.size, seg.next_offset, seg.max_timestamp) == (expect_size, 104, 50)
        d = _append_batch(w, [b"e", b"f"], 70)
        expect_size += len(d)
        assert (seg.size, seg.next_offset, seg.max_timestamp) == (expect_size, 106, 70)
        assert w.first_timestamp == 50
        assert [(p, h[0], h[6]) for p, h in seg.batches()] == [
            (0, 100, 3), (next(seg.batches())[1].size, 103, 1),
            (expect_size - len(d), 104, 2)]
    finally:
        w.close()


def test_append_one_updates_next_offset_on_every_path(segdir):
    """Regression: the one-record fast path (no index entry, no new max timestamp)
    once left ``next_offset`` stale."""
    w = ActiveSegment.create(segdir, 0, settings(1 << 30))   # no index entries at all
    seg = w.segment
    try:
        size = 0
        for off in range(20):
            ts = 1000 if off else 1000     # same timestamp: the fast path after the first
            args = _one_args(off, ts, b"v%d" % off)
            pos = w.append_one(*args)
            assert pos == size
            size += _format.ONE_PREFIX.size + len(args[3])
            assert seg.size == size
            assert seg.next_offset == off + 1, f"stale next_offset after offset {off}"
        assert seg.max_timestamp == 1000
        assert _messages(seg, 0) == [(o, 1000, b"v%d" % o) for o in range(20)]
    finally:
        w.close()


def test_append_one_writes_what_encode_batch_makes(segdir):
    w = ActiveSegment.create(segdir, 7, settings(4096))
    seg = w.segment
    try:
        w.append_one(*_one_args(7, 5, b"hello"))
        w.append_one(*_one_args(8, 9, b""))
        w.append_one(*_one_args(9, 3, b"x" * 300))
        want = (codec.encode_batch(7, [b"hello"], 5) + codec.encode_batch(8, [b""], 9)
                + codec.encode_batch(9, [b"x" * 300], 3))
        assert seg.pread(seg.size, 0) == want
        assert (seg.next_offset, seg.max_timestamp) == (10, 9)
        # every batch's checksum is right (the caller computed it outside the segment)
        ms = seg.read(7, 1 << 20)
        ms.validate()
        assert [m.value for m in ms] == [b"hello", b"", b"x" * 300]
    finally:
        w.close()


def test_mixed_append_paths_read_back(segdir):
    w = ActiveSegment.create(segdir, 0, settings(256))
    seg = w.segment
    expected = []
    try:
        off = 0
        for i in range(60):
            if i % 3 == 0:
                vals = [b"b%d-%d" % (i, j) for j in range(4)]
                _append_batch(w, vals, 10 + i)
                expected += [(off + j, 10 + i, v) for j, v in enumerate(vals)]
                off += 4
            else:
                w.append_one(*_one_args(off, 10 + i, b"one%d" % i))
                expected.append((off, 10 + i, b"one%d" % i))
                off += 1
            assert seg.next_offset == off
        assert _messages(seg, 0) == expected
        # from any offset: the messages from there on
        for start in (1, 5, 37, off - 1):
            assert _messages(seg, start) == [m for m in expected if m[0] >= start]
        # past the end: nothing
        assert _messages(seg, off) == []
    finally:
        w.close()


def test_find_position_lands_on_the_batch_holding_the_offset(segdir):
    w = ActiveSegment.create(segdir, 1000, settings(128))
    seg = w.segment
    try:
        starts = []
        for i in range(40):
            starts.append((seg.size, seg.next_offset))
            _append_batch(w, [b"x" * 20] * 3, i)
        assert len(seg.index) > 3          # lookups go through index entries
        for pos, base in starts:
            for off in range(base, base + 3):
                p, hdr = seg.find_position(off)
                assert (p, hdr.base_offset) == (pos, base)
        end = seg.size
        assert seg.find_position(seg.next_offset) == (end, None)
        # below the base offset: the first batch
        assert seg.find_position(0)[0] == 0
    finally:
        w.close()


def test_read_at_respects_max_bytes_but_returns_one_whole_batch(segdir):
    w = ActiveSegment.create(segdir, 0, settings(4096))
    seg = w.segment
    try:
        big = _append_batch(w, [b"y" * 5000], 1)
        small = _append_batch(w, [b"s"], 2)
        ms = seg.read_at(0, 0, 10, seg.size)                  # far below one batch
        assert [m.value for m in ms] == [b"y" * 5000]
        assert ms.next_offset == 1
        ms = seg.read_at(0, 0, len(big) + len(small), seg.size)
        assert [m.offset for m in ms] == [0, 1]
        ms = seg.read_at(len(big), 1, 1 << 20, seg.size, expect=1)
        assert [(m.offset, m.value) for m in ms] == [(1, b"s")]
    finally:
        w.close()


@pytest.mark.parametrize("interval", [1, 100, 1000, 4096])
def test_writer_index_equals_scan_index(segdir, interval):
    """The writer's index rule (``ActiveSegment._appended``) and the scan's
    (``ScanResult.add``) must make the same offset and time index entries."""
    w = ActiveSegment.create(segdir, 500, settings(interval))
    seg = w.segment
    try:
        off = 500
        for i in range(120):
            ts = (i * 7919) % 500                              # up and down
            if i % 2:
                w.append_one(*_one_args(off, ts, b"v" * (i % 50)))
                off += 1
            else:
                n = 1 + i % 5
                _append_batch(w, [b"w" * (i % 90)] * n, ts)
                off += n
        writer_ix = [(seg.base_offset + r, p) for r, p in seg.index.entries()]
        writer_tix = [(t, seg.base_offset + r) for t, r in seg.time_index.entries()]
        res = _scan.scan(seg, 0, seg.size, None, interval)
        assert res.stop == "end" and res.end == seg.size and res.next_offset == off
        assert res.index == writer_ix
        assert res.time_index == writer_tix
        assert res.max_timestamp == seg.max_timestamp
        if interval <= 100:
            assert len(writer_ix) > 10
        # entries every interval: each at least `interval` past the previous
        positions = [0] + [p for _, p in writer_ix]
        assert all(b - a >= interval for a, b in zip(positions, positions[1:]))
    finally:
        w.close()


def test_index_entries_every_interval_bytes(segdir):
    """With equal-sized batches, an entry lands on the first batch at least an
    interval past the last one."""
    w = ActiveSegment.create(segdir, 0, settings(1000))
    seg = w.segment
    try:
        data = b""
        for i in range(50):
            data = _append_batch(w, [b"z" * 100], i)
        bs = len(data)
        step = -(-1000 // bs) * bs             # the first batch start >= 1000 past
        want = [(p // bs, p) for p in range(step, seg.size, step)]
        assert [(r, p) for r, p in seg.index.entries()] == want
    finally:
        w.close()


def test_seal_cuts_file_back_and_reopen_reads_the_same(segdir):
    w = ActiveSegment.create(segdir, 42, settings(200))
    seg = w.segment
    for i in range(30):
        _append_batch(w, [b"m%d" % i, b"n%d" % i], 100 + i)
    size, nxt, mts = seg.size, seg.next_offset, seg.max_timestamp
    before = _messages(seg, 42)
    ix_entries = seg.index.entries()
    # reserved ahead while active: the file as long as the reservation, not its capacity
    assert size < os.path.getsize(seg.path) <= min(CAP, size + (8 << 20))
    w.seal()
    assert not seg.is_active
    assert os.path.getsize(seg.path) == size
    assert os.path.getsize(seg.index_path) == 8 * len(ix_entries)
    # the sealed time index ends with the segment's largest timestamp
    assert seg.time_index.last_entry() == (mts, nxt - 2)
    seg.close()

    again = Segment(segdir, 42, next_offset=nxt)
    try:
        assert again.size == size
        assert again.max_timestamp == mts
        assert again.index.entries() == ix_entries
        assert again.index_repairs == 0
        assert _messages(again, 42) == before
        assert _messages(again, 60) == [m for m in before if m[0] >= 60]
    finally:
        again.close()


def _sealed(segdir: str, n: int = 10) -> tuple[int, list[int]]:
    w = ActiveSegment.create(segdir, 0, settings(4096))
    seg = w.segment
    positions = []
    for i in range(n):
        positions.append(seg.size)
        _append_batch(w, [b"value-%d" % i] * 3, i)
    size = seg.size
    w.close()
    return size, positions


def _flip(path: str, pos: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0xFF]))


def test_corrupt_record_byte_fails_crc_on_read_with_path(segdir):
    size, positions = _sealed(segdir)
    _flip(os.path.join(segdir, f"{0:020d}.log"), positions[4] + codec.HEADER_SIZE + 3)
    seg = Segment(segdir, 0)
    try:
        # framing is intact: batches() walks through (no checksum check there)
        assert len(list(seg.batches())) == 10
        # messages before the damage read fine
        assert [m.offset for m in seg.read(0, positions[4])] == list(range(12))
        with pytest.raises(CorruptRecordError) as ei:
            list(seg.read(12, 1 << 20))
        assert ei.value.path == seg.path
        assert ei.value.position == positions[4]
    finally:
        seg.close()


def test_corrupt_framing_raises_from_batches_and_read_with_path(segdir):
    size, positions = _sealed(segdir)
    _flip(os.path.join(segdir, f"{0:020d}.log"), positions[6] + 12)     # the magic byte
    seg = Segment(segdir, 0)
    try:
        with pytest.raises(CorruptRecordError) as ei:
            list(seg.batches())
        assert ei.value.path == seg.path
        assert ei.value.position == positions[6]
        with pytest.raises(CorruptRecordError) as ei:
            list(seg.read_at(positions[5], 15, 1 << 20, size))
        assert ei.value.path == seg.path
        assert ei.value.position == positions[6]
    finally:
        seg.close()


def test_truncated_file_is_reported_not_misread(segdir):
    size, positions = _sealed(segdir)
    path = os.path.join(segdir, f"{0:020d}.log")
    os.truncate(path, positions[8] + 20)
    seg = Segment(segdir, 0, size=size)     # believes the old size
    try:
        with pytest.raises(CorruptRecordError) as ei:
            list(seg.batches())
        assert ei.value.path == path
    finally:
        seg.close()


# -- the writer's state --------------------------------------------------------------
def test_writer_state_saves_compares_and_reloads_into_a_fresh_segment(segdir):
    w = ActiveSegment.create(segdir, 0, settings(128))
    seg = w.segment
    try:
        empty = w.writer_state()
        assert empty == WriterState(0, 0, 0, 0, 0, 128, -1, 0, -1)
        for i in range(40):
            w.append_one(*_one_args(i, 1000 + i, b"v%03d" % i))
        state = w.writer_state()
        assert state != empty and state.size == seg.size and state.next_offset == 40
        assert state.index_entries > 0 and state.max_timestamp == 1039
        assert state.max_ts_offset == 39 and state.first_timestamp == 1000
        assert state == w.writer_state()                # plain values: compared by ==
    finally:
        seg.abandon()                                      # as a killed writer leaves it
    again = ActiveSegment(Segment(segdir, 0, max_index_bytes=MAX_IX, owner=True,
                                  index_interval_bytes=128), state, settings(128))
    try:
        assert again.writer_state() == state
        for i in range(40, 50):                            # both go on alike
            again.append_one(*_one_args(i, 1000 + i, b"v%03d" % i))
        assert [m.offset for m in again.segment.read(0, 1 << 20)] == list(range(50))
        later = again.writer_state()
        assert later.next_offset == 50 and later != state
        again.reload(state)                                # back to the saved tail
        assert again.writer_state() == state
    finally:
        again.close()


def test_writer_state_follows_appends_and_rolls(segdir):
    w = ActiveSegment.create(segdir, 0, settings(64, segment_bytes=1024))
    seg = w.segment
    states = [w.writer_state()]
    off = 0
    while True:
        pos = w.append_one(*_one_args(off, 500, b"x" * 100))
        if pos < 0:
            break                                          # past segment_bytes: roll
        off += 1
        states.append(w.writer_state())
    assert len(set(states)) == len(states) and states[-1].size <= 1024 + 200
    assert w.writer_state() == states[-1]               # a refused append changes nothing
    w.seal()
    sealed_state = w.writer_state()
    assert sealed_state.size == states[-1].size and sealed_state.next_offset == off
    seg.close()
    new = ActiveSegment.create(segdir, off, settings(64))
    try:
        assert new.writer_state() == WriterState(off, 0, off, 0, 0, 64, -1, off, -1)
        assert new.append_one(*_one_args(off, 600, b"y")) == 0
        assert new.writer_state().next_offset == off + 1
    finally:
        new.close()


class _Seg:
    """A stand-in with the one field the list's lookups read."""

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset

    def __repr__(self) -> str:
        return f"_Seg({self.base_offset})"


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=12, unique=True),
       st.integers(-5, 10_100), st.integers(0, 12), st.integers(1, 4))
def test_the_segment_list_finds_drops_and_swaps_as_a_list_scan_would(bases, offset, i, n):
    """LogSegments' bisections agree with a plain scan of the list: the segment
    holding an offset, the prefix retention drops, compaction's swap (refused when
    the list no longer holds the segments so, or they reach the active one)."""
    segs = [_Seg(b) for b in sorted(bases)]
    lst = LogSegments(segs)
    below = [k for k, s in enumerate(segs) if s.base_offset <= offset]
    assert lst.holding(offset) == (below[-1] if below else -1)
    kept, gone = lst.split_through(offset)
    assert isinstance(kept, LogSegments)
    assert list(gone) == [s for s in segs if s.base_offset <= offset]
    assert list(kept) == [s for s in segs if s.base_offset > offset]
    new = _Seg(-1)
    assert lst.added(new) == (*segs, new) and lst == tuple(segs)    # values, unchanged
    i = min(i, len(segs) - 1)
    taken = [s.base_offset for s in segs[i:i + n]]
    swapped = lst.replaced(taken, new)
    if i + len(taken) < len(segs) and len(taken) == n:
        assert swapped is not None
        assert swapped[0] == (*segs[:i], new, *segs[i + n:])
        assert swapped[1] == tuple(segs[i:i + n])
    else:
        assert swapped is None                                # the active one, or short
    assert lst.replaced([-7], new) is None                   # a base offset it never held
    if len(taken) > 1:
        assert lst.replaced(taken[::-1], new) is None        # not as they were


class _TimedSeg(_Seg):
    """A stand-in whose largest timestamp may be read only inside a read in flight."""

    def __init__(self, base_offset: int, size: int, max_timestamp: int,
                 held: list[int]) -> None:
        super().__init__(base_offset)
        self.size, self._ts, self._held = size, max_timestamp, held

    @property
    def max_timestamp(self) -> int:
        assert self._held, "a segment measured outside a read in flight"
        return self._ts


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-1, 50)), max_size=10),
       st.integers(0, 52))
def test_the_segment_list_finds_by_time_inside_a_read_each(sizes_and_times, ts):
    """Lookup by time: the non-empty segments whose largest timestamp reaches ``ts``,
    in order, with their places; each looked at inside its own read in flight."""
    held: list[int] = []
    segs = [_TimedSeg(10 * k, size, t, held) for k, (size, t) in enumerate(sizes_and_times)]

    @contextlib.contextmanager
    def reading():
        held.append(1)
        yield
        held.pop()
    got = []
    for j, seg in LogSegments(segs).reaching(ts, reading):
        assert not held                           # the caller reads it in its own read
        got.append((j, seg))
    held.append(1)
    assert got == [(j, s) for j, s in enumerate(segs) if s.size and s.max_timestamp >= ts]

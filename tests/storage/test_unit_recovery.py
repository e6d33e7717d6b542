"""Unit tests of the loader (``recovery.load_for_writer``) on directories built by
hand, and of the index rules it relies on (``index.entries_valid``,
``index.next_entry_position``)."""

from __future__ import annotations

import json
import os

import pytest

from seglog._runtime import files as _files
from seglog import codec, recovery
from seglog._codec import format as _format
from seglog.errors import CorruptRecordError
from seglog.index import TimeIndex, entries_valid, next_entry_position
from seglog.segment import ActiveSegment, ActiveSettings, Segment

from helpers import header, put_header

CAP = 1 << 20
INTERVAL = 256
MAX_IX = 1 << 16
SETTINGS = ActiveSettings(CAP, CAP // 2, None, INTERVAL, MAX_IX)


def _name(d: str, base: int, ext: str = ".log") -> str:
    return os.path.join(d, f"{base:020d}{ext}")


def _write_segment(d: str, base: int, nbatches: int, per: int = 2, ts0: int = 100
                   ) -> list[int]:
    """A ``.log`` file of ``nbatches`` batches of ``per`` records; their positions."""
    positions, pos, data = [], 0, []
    for i in range(nbatches):
        b = codec.encode_batch(base + i * per, [b"r%d-%d" % (i, j) for j in range(per)],
                               ts0 + i)
        positions.append(pos)
        pos += len(b)
        data.append(b)
    with open(_name(d, base), "wb") as f:
        f.write(b"".join(data))
    positions.append(pos)           # the end
    return positions


def _load(d: str) -> recovery.Loaded:
    return recovery.load_for_writer(d, SETTINGS)


def _close(loaded: recovery.Loaded) -> None:
    loaded.active.close()               # sealed, as a writer's close does
    for s in loaded.segments:
        s.close()


def _offsets(seg: Segment, start: int) -> list[int]:
    return [m.offset for m in seg.read(start, 1 << 20)]


@pytest.fixture
def d(tmp_path):
    p = tmp_path / "log"
    p.mkdir()
    return str(p)


def test_empty_directory_creates_the_first_segment(d):
    loaded = _load(d)
    try:
        assert (loaded.start_offset, loaded.end_offset, loaded.recovery_point) == (0, 0, 0)
        [seg] = loaded.segments
        assert seg.is_active and seg.base_offset == 0 and seg.size == 0
        assert os.path.exists(_name(d, 0)) and os.path.exists(_name(d, 0, ".index"))
    finally:
        _close(loaded)


def test_empty_directory_starts_at_the_start_checkpoint(d):
    _files.write_checkpoint(d, _files.LOG_START, 77)
    loaded = _load(d)
    try:
        assert (loaded.start_offset, loaded.end_offset) == (77, 77)
        assert loaded.segments[0].base_offset == 77
    finally:
        _close(loaded)


def test_intact_segments_load_whole_and_indexes_are_rebuilt(d):
    _write_segment(d, 0, 10)
    pos = _write_segment(d, 20, 30)
    loaded = _load(d)
    try:
        assert [s.base_offset for s in loaded.segments] == [0, 20]
        assert (loaded.start_offset, loaded.end_offset) == (0, 80)
        active = loaded.segments[-1]
        assert active.is_active and active.size == pos[-1] and active.next_offset == 80
        assert loaded.report is not None and loaded.report.truncated == []
        assert loaded.report.deleted_segments == []
        # the rebuilt index follows the writer's rule
        assert active.index.entries()
        assert _offsets(active, 41) == list(range(41, 80))
        # the recovery point is checkpointed at the end
        assert _files.read_checkpoint(d, _files.RECOVERY_POINT) == 80
    finally:
        _close(loaded)


@pytest.mark.parametrize("torn", [5, 30, 60])     # inside the header, inside the records
def test_torn_tail_is_cut(d, torn):
    pos = _write_segment(d, 0, 6)
    with open(_name(d, 0), "ab") as f:
        f.write(codec.encode_batch(12, [b"lost" * 10], 200)[:torn])
    file_size = pos[-1] + torn
    loaded = _load(d)
    try:
        assert loaded.end_offset == 12
        [seg] = loaded.segments
        assert seg.size == pos[-1] and seg.next_offset == 12
        assert loaded.report.truncated == [(_name(d, 0), pos[-1], torn, "partial")]
        assert _offsets(seg, 0) == list(range(12))
        # the next append goes right after the last whole batch
        b = codec.encode_batch(0, [b"new"], 300)
        loaded.active.append(b, 12, 13, 300)
        assert _offsets(seg, 12) == [12]
    finally:
        _close(loaded)
    assert file_size > pos[-1]


def test_torn_tail_in_last_segment_keeps_earlier_segments(d):
    pos0 = _write_segment(d, 0, 5)
    pos1 = _write_segment(d, 10, 5)
    with open(_name(d, 10), "r+b") as f:
        f.truncate(pos1[3] + 10)                 # batch 4 torn, batch 5 gone
    loaded = _load(d)
    try:
        assert [s.base_offset for s in loaded.segments] == [0, 10]
        assert loaded.segments[0].size == pos0[-1]
        assert loaded.end_offset == 16
        assert loaded.report.truncated == [(_name(d, 10), pos1[3], 10, "partial")]
    finally:
        _close(loaded)


def test_damage_in_an_earlier_segment_is_never_a_torn_tail(d):
    """Only the last segment is scanned at open, and no segment is ever deleted by
    recovery: every segment with a successor was sealed and fsynced before the
    successor was created, so the recovery point is always in the last one (even
    with the checkpoint lost). Damage at the end of an earlier segment (which a
    crash cannot leave) is corruption, reported by the read that meets it."""
    pos0 = _write_segment(d, 0, 5)
    _write_segment(d, 10, 5)
    with open(_name(d, 0), "ab") as f:
        f.write(b"\xff" * 40)                   # garbage after segment 0's batches
    loaded = _load(d)
    try:
        assert [s.base_offset for s in loaded.segments] == [0, 10]
        assert loaded.report.segments_scanned == 1 and loaded.report.deleted_segments == []
        assert loaded.report.truncated == [] and loaded.end_offset == 20
        assert loaded.segments[0].size == pos0[-1] + 40
        with pytest.raises(CorruptRecordError):
            list(loaded.segments[0].batches())   # the walk a read takes past the data
        assert _offsets(loaded.segments[1], 10) == list(range(10, 20))
    finally:
        _close(loaded)


def test_zero_filled_tail_is_cut(d):
    """A crash after the file was extended (preallocation) leaves zeros after the data."""
    pos = _write_segment(d, 0, 4)
    with open(_name(d, 0), "ab") as f:
        f.write(bytes(4096))
    loaded = _load(d)
    try:
        assert loaded.end_offset == 8
        assert loaded.report.truncated == [(_name(d, 0), pos[-1], 4096, "zeros")]
    finally:
        _close(loaded)


def test_damage_below_the_recovery_point_raises(d):
    pos = _write_segment(d, 0, 8)                 # offsets 0..15
    with open(_name(d, 0), "r+b") as f:
        f.seek(pos[2] + codec.HEADER_SIZE + 4)     # a record byte of the batch at offset 4
        f.write(b"\xff")
    _files.write_checkpoint(d, _files.RECOVERY_POINT, 10)
    with pytest.raises(CorruptRecordError) as ei:
        _load(d)
    assert ei.value.path == _name(d, 0)
    assert ei.value.position == pos[2]
    # nothing was cut: the data is left for a human to look at
    assert os.path.getsize(_name(d, 0)) == pos[-1]


def test_damage_above_the_recovery_point_after_a_restart_is_a_torn_tail(d):
    pos = _write_segment(d, 0, 8)
    with open(_name(d, 0), "r+b") as f:
        f.seek(pos[5] + codec.HEADER_SIZE + 4)
        f.write(b"\xff")
    _files.write_checkpoint(d, _files.RECOVERY_POINT, 4)
    # no writer-session file: the machine may have restarted since the last writer
    loaded = _load(d)
    try:
        assert loaded.end_offset == 10
        assert loaded.report.truncated == [(_name(d, 0), pos[5], pos[-1] - pos[5], "checksum")]
    finally:
        _close(loaded)


@pytest.mark.skipif(recovery.boot_id() is None, reason="no boot id on this system")
def test_damage_followed_by_valid_batches_in_the_same_boot_raises(d):
    pos = _write_segment(d, 0, 8)
    with open(_name(d, 0), "r+b") as f:
        f.seek(pos[5] + codec.HEADER_SIZE + 4)
        f.write(b"\xff")
    recovery.write_session(d)                     # the last writer ran in this boot
    with pytest.raises(CorruptRecordError) as ei:
        _load(d)
    assert ei.value.path == _name(d, 0)
    assert os.path.getsize(_name(d, 0)) == pos[-1]



@pytest.mark.skipif(recovery.boot_id() is None, reason="no boot id on this system")
def test_damage_followed_by_batches_of_a_newer_format_in_the_same_boot_raises(d):
    """Whole batches past the damage count as data even with an attribute bit this
    version does not know (a newer seglog wrote them): refuse, never cut them."""
    pos = _write_segment(d, 0, 8)
    with open(_name(d, 0), "r+b") as f:
        data = bytearray(f.read())
        for i in (6, 7):
            hdr = header(data, pos[i])
            hdr = hdr._replace(attributes=hdr.attributes | 1 << 11)
            put_header(data, pos[i], hdr)
            hdr = hdr._replace(checksum=codec.CHECKSUM(bytes(data[pos[i] + _format.CHECKSUM_FROM:
                                                               pos[i + 1]])))
            put_header(data, pos[i], hdr)
        data[pos[5] + codec.HEADER_SIZE + 4] ^= 0xFF
        f.seek(0)
        f.write(data)
    recovery.write_session(d)                     # the last writer ran in this boot
    with pytest.raises(CorruptRecordError, match="followed by valid batches") as ei:
        _load(d)
    assert ei.value.path == _name(d, 0)
    assert os.path.getsize(_name(d, 0)) == pos[-1]

def test_segments_wholly_below_the_start_checkpoint_are_deleted(d):
    _write_segment(d, 0, 5)
    _write_segment(d, 10, 5)
    _write_segment(d, 20, 5)
    _files.write_checkpoint(d, _files.LOG_START, 12)
    loaded = _load(d)
    try:
        assert [s.base_offset for s in loaded.segments] == [10, 20]
        assert loaded.start_offset == 12
        assert not os.path.exists(_name(d, 0))
        assert os.path.exists(_name(d, 10))
    finally:
        _close(loaded)


def _clean_shutdown_dir(d: str) -> tuple[Segment, int, list[int]]:
    """A segment written by a writer and sealed, then a clean-shutdown marker."""
    w = ActiveSegment.create(d, 0, SETTINGS)
    seg = w.segment
    positions = []
    for i in range(20):
        positions.append(seg.size)
        w.append(codec.encode_batch(0, [b"v%d" % i] * 2, 100 + i), 2 * i, 2 * i + 2, 100 + i)
    recovery.write_marker(d, w, w.next_offset)         # as Log.close does, before the seal
    marker = recovery.read_marker(d)
    w.close()
    marker["active_size"] = os.path.getsize(seg.path)  # the sealed size
    with open(os.path.join(d, recovery.CLEAN_MARKER), "w") as f:
        json.dump(marker, f)
    return seg, 40, positions


@pytest.mark.parametrize("marker", [True, False])
def test_clean_shutdown_marker_skips_the_scan(d, marker):
    seg, end, positions = _clean_shutdown_dir(d)
    # damage the scan would find: proof that the clean open reads no data
    with open(seg.path, "r+b") as f:
        f.seek(positions[3] + codec.HEADER_SIZE + 2)
        f.write(b"\xee")
    if not marker:
        # the control: without the marker the same directory is scanned and cut
        os.unlink(os.path.join(d, recovery.CLEAN_MARKER))
        loaded = _load(d)
        try:
            assert loaded.end_offset == 6
            [(path, at, _, why)] = loaded.report.truncated
            assert (path, at, why) == (seg.path, positions[3], "checksum")
        finally:
            _close(loaded)
        return
    loaded = _load(d)
    try:
        assert loaded.report is None
        assert (loaded.end_offset, loaded.recovery_point) == (40, 40)
        assert loaded.segments[-1].is_active
        assert loaded.segments[-1].max_timestamp == 119
        assert not os.path.exists(os.path.join(d, recovery.CLEAN_MARKER))   # used once
    finally:
        _close(loaded)


def test_clean_shutdown_marker_not_matching_the_file_is_ignored(d):
    seg, end, positions = _clean_shutdown_dir(d)
    with open(seg.path, "ab") as f:
        f.write(b"\x00" * 10)                         # the file is not what the marker says
    loaded = _load(d)
    try:
        assert loaded.report is not None              # scanned
        assert loaded.end_offset == 40
        assert loaded.report.truncated == [(seg.path, positions[-1] + len(
            codec.encode_batch(0, [b"v19"] * 2, 119)), 10, "partial")]
        assert not os.path.exists(os.path.join(d, recovery.CLEAN_MARKER))
    finally:
        _close(loaded)


def test_reopen_after_recovery_reads_the_same(d):
    _write_segment(d, 0, 50)
    loaded = _load(d)
    before = _offsets(loaded.segments[-1], 0)
    last = loaded.segments[-1]
    loaded.active.close()                  # sealed: its time index ends at its largest
    tix = TimeIndex(last.timeindex_path, 0)
    assert tix.last_entry() == (149, 98)
    tix.release()
    for s in loaded.segments[:-1]:
        s.close()
    again = _load(d)
    try:
        assert again.end_offset == 100
        assert _offsets(again.segments[-1], 0) == before == list(range(100))
    finally:
        _close(again)


# -- index rules --------------------------------------------------------------------------

def test_next_entry_position():
    assert next_entry_position(0, 4096) == 4096
    assert next_entry_position(1000, 100) == 1100
    assert next_entry_position(5, 1) == 6


@pytest.mark.parametrize("rel, pos, stamps, size, ok", [
    ([], [], [], 0, True),
    ([1, 5, 9], [100, 200, 300], [10, 20], 400, True),
    ([1], [399], [], 400, True),
    ([1], [400], [], 400, False),             # points at the end of the data
    ([1], [0], [], 400, False),               # the start needs no entry
    ([1, 1], [100, 200], [], 400, False),     # offsets not strictly ascending
    ([2, 1], [100, 200], [], 400, False),
    ([1, 2], [200, 200], [], 400, False),     # positions not strictly ascending
    ([1, 2], [200, 100], [], 400, False),
    ([], [], [5, 5], 0, False),               # timestamps not strictly ascending
    ([], [], [6, 5], 0, False),
    ([], [], [-1, 5, 7], 0, True),
])
def test_entries_valid(rel, pos, stamps, size, ok):
    assert entries_valid(rel, pos, stamps, size) is ok

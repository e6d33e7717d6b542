"""OffsetIndex and TimeIndex: sparse, mapped, floor lookups, trim, live (pread) reading."""

from __future__ import annotations

import os

import pytest

from seglog import OffsetIndex, TimeIndex
from seglog.index import entries_valid, offset_arrays


def _valid(ix: OffsetIndex) -> bool:
    """The check a segment applies to its index (``index.entries_valid``)."""
    rel, pos = offset_arrays(ix.raw_entries())
    return entries_valid(rel, pos, (), 1 << 62)


def test_offset_index_floor_lookup(tmp_path):
    p = str(tmp_path / "a.index")
    ix = OffsetIndex(p, 1000, 4096, writable=True, entries=0)
    assert ix.lookup(1500) == (1000, 0)
    for i in range(1, 50):
        ix.append(1000 + 10 * i, 100 * i)
    assert ix.lookup(1000) == (1000, 0)
    assert ix.lookup(1009) == (1000, 0)
    assert ix.lookup(1010) == (1010, 100)
    assert ix.lookup(1255) == (1250, 2500)
    assert ix.lookup(10**9) == (1490, 4900)
    assert ix.last_entry() == (1490, 4900)
    assert len(ix) == 49 and _valid(ix)


def test_index_is_preallocated_then_trimmed(tmp_path):
    p = str(tmp_path / "a.index")
    ix = OffsetIndex(p, 0, 800, writable=True, entries=0)
    assert os.path.getsize(p) == 800
    for i in range(1, 11):
        ix.append(i, i * 10)
    ix.trim()
    assert os.path.getsize(p) == 80
    assert ix.lookup(5) == (5, 50)   # still readable after the trim
    ix.close()
    again = OffsetIndex(p, 0)
    assert len(again) == 10 and again.lookup(7) == (7, 70)
    assert [e for e in again.entries()][:2] == [(1, 10), (2, 20)]


def test_index_full(tmp_path):
    ix = OffsetIndex(str(tmp_path / "f.index"), 0, 24, writable=True, entries=0)
    for i in range(1, 4):
        ix.append(i, i)
    assert ix.is_full
    with pytest.raises(ValueError):
        ix.append(9, 9)


def test_read_only_index_refuses_writes(tmp_path):
    p = str(tmp_path / "r.index")
    w = OffsetIndex(p, 0, 80, writable=True, entries=0)
    w.append(1, 8)
    w.close()
    r = OffsetIndex(p, 0)
    with pytest.raises(ValueError):
        r.append(2, 16)


def test_live_index_reads_with_pread_and_stops_at_zero_slots(tmp_path):
    p = str(tmp_path / "l.index")
    w = OffsetIndex(p, 100, 8000, writable=True, entries=0)
    for i in range(1, 6):
        w.append(100 + i, i * 64)
    live = OffsetIndex(p, 100, 8000, live=True)
    assert live.lookup(103) == (103, 192)
    assert live.lookup(10**6) == (105, 320)
    assert live.last_entry() == (105, 320)
    w.append(106, 6 * 64)          # the writer goes on; the reader sees it
    assert live.lookup(10**6) == (106, 384)
    w.trim()                        # the writer trims: pread just reads less, no SIGBUS
    assert live.lookup(10**6) == (106, 384)


def test_empty_index_file(tmp_path):
    p = str(tmp_path / "e.index")
    open(p, "wb").close()
    ix = OffsetIndex(p, 5)
    assert len(ix) == 0 and ix.lookup(9) == (5, 0) and ix.last_entry() == (5, 0)


def test_time_index(tmp_path):
    p = str(tmp_path / "t.timeindex")
    ix = TimeIndex(p, 50, 1200, writable=True, entries=0)
    assert ix.lookup(10) is None and ix.last_entry() is None
    ix.append(1000, 55)
    ix.append(900, 60)       # not above the last timestamp: ignored
    ix.append(2000, 70)
    assert len(ix) == 2
    assert ix.lookup(999) is None
    assert ix.lookup(1000) == (1000, 55)
    assert ix.lookup(1999) == (1000, 55)
    assert ix.lookup(5000) == (2000, 70)
    assert ix.last_entry() == (2000, 70)
    ix.close()
    assert TimeIndex(p, 50).last_entry() == (2000, 70)


def test_entry_check_detects_disorder(tmp_path):
    p = str(tmp_path / "bad.index")
    ix = OffsetIndex(p, 0, 80, writable=True, entries=0)
    ix.append(5, 50)
    ix.append(3, 60)  # offsets out of order: an index a bug or damage could leave
    assert not _valid(ix)

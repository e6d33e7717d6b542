"""Unit tests of the delete policy (``retention.expired_prefix``, pure) and its
mechanics (``DelayedDeletes``, ``remove_leftovers``), without a ``Log``."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import pytest
from hypothesis import given, settings, strategies as st

from seglog._runtime import files as _files
from seglog.retention import DelayedDeletes, expired_prefix, remove_leftovers


@dataclass
class Seg:
    size: int
    max_timestamp: int


def segs(*pairs: tuple[int, int]) -> list[Seg]:
    return [Seg(s, t) for s, t in pairs]


# -- expired_prefix -------------------------------------------------------------------

def test_empty_and_single_segment_never_expire():
    assert expired_prefix([], 10_000, 1, 1) == 0
    # the last (active) segment is never deleted, however old or large
    assert expired_prefix(segs((10**9, 0)), 10**12, 1, 0) == 0


def test_no_limits_nothing_expires():
    assert expired_prefix(segs((100, 0), (100, 0), (100, 0)), 10**12, None, None) == 0


def test_by_time():
    s = segs((10, 100), (10, 200), (10, 300), (10, 400))
    assert expired_prefix(s, 1000, 1000, None) == 0           # nothing older than 1000 ms
    assert expired_prefix(s, 1150, 1000, None) == 1           # 1150 - 100 > 1000
    assert expired_prefix(s, 1200, 1000, None) == 1           # exactly the limit: kept
    assert expired_prefix(s, 1201, 1000, None) == 2
    assert expired_prefix(s, 10**9, 1000, None) == 3          # never the last


def test_by_size():
    s = segs((100, 0), (100, 0), (100, 0), (100, 0))          # 400 bytes
    assert expired_prefix(s, 0, None, 400) == 0
    assert expired_prefix(s, 0, None, 300) == 1               # 300 left: still >= 300
    assert expired_prefix(s, 0, None, 250) == 1               # removing 2 leaves 200 < 250
    assert expired_prefix(s, 0, None, 200) == 2
    assert expired_prefix(s, 0, None, 1) == 3                 # never the last
    assert expired_prefix(s, 0, None, 0) == 3


def test_by_size_uneven_segments():
    s = segs((500, 0), (10, 0), (10, 0), (10, 0))             # 530 bytes
    assert expired_prefix(s, 0, None, 30) == 1                # the big one goes first
    assert expired_prefix(s, 0, None, 31) == 0                # without it only 30 left


def test_either_limit_expires_a_segment():
    s = segs((100, 100), (100, 5000), (100, 5000), (100, 5000))
    # the first is old; the second is young but the log is over its size limit
    assert expired_prefix(s, 5000, 1000, 200) == 2
    assert expired_prefix(s, 5000, 1000, None) == 1
    assert expired_prefix(s, 5000, None, 200) == 2
    assert expired_prefix(s, 5000, 1000, 10**6) == 1


def test_only_a_prefix_a_young_segment_stops_it():
    s = segs((10, 100), (10, 9000), (10, 100), (10, 100))      # an old one after a young one
    assert expired_prefix(s, 10_000, 1000, None) == 1


def test_clock_going_backwards_expires_nothing_by_time():
    s = segs((10, 5000), (10, 6000), (10, 7000))
    assert expired_prefix(s, 100, 1000, None) == 0            # now before every timestamp
    assert expired_prefix(s, -10**9, 0, None) == 0


def test_segment_without_timestamps():
    # -1: no timestamp. Such a segment is as old as can be
    s = segs((10, -1), (10, 100))
    assert expired_prefix(s, 100, 50, None) == 1


def _naive(segments: list[Seg], now: int, rms: int | None, rbytes: int | None) -> int:
    n = 0
    while n < len(segments) - 1:
        seg = segments[n]
        rest = sum(s.size for s in segments[n + 1:])
        old = rms is not None and now - seg.max_timestamp > rms
        big = rbytes is not None and rest >= rbytes
        if not (old or big):
            break
        n += 1
    return n


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(-1, 10_000)), max_size=12),
       st.integers(-1000, 20_000), st.none() | st.integers(0, 12_000),
       st.none() | st.integers(0, 8000))
def test_expired_prefix_matches_naive_model(pairs, now, rms, rbytes):
    s = [Seg(a, b) for a, b in pairs]
    n = expired_prefix(s, now, rms, rbytes)
    assert n == _naive(s, now, rms, rbytes)
    assert 0 <= n <= max(0, len(s) - 1)
    if rms is None and rbytes is not None and n:
        # by size alone, deleting never takes the log below the limit
        assert sum(x.size for x in s[n:]) >= rbytes


# -- DelayedDeletes -------------------------------------------------------------------

@dataclass
class Files:
    path: str
    index_path: str
    timeindex_path: str


def _segment_files(d: str, base: int) -> Files:
    stem = os.path.join(d, f"{base:020d}")
    f = Files(stem + ".log", stem + ".index", stem + ".timeindex")
    for p in (f.path, f.index_path, f.timeindex_path):
        with open(p, "wb") as fh:
            fh.write(b"x")
    return f


def test_delay_zero_removes_at_once(tmp_path):
    d = str(tmp_path)
    a, b = _segment_files(d, 0), _segment_files(d, 10)
    dd = DelayedDeletes(d)
    dd.delete([a], 0)
    assert sorted(os.listdir(d)) == sorted(os.path.basename(p) for p in
                                           (b.path, b.index_path, b.timeindex_path))
    assert len(dd) == 0
    assert dd.purge(everything=True) == 0


def test_delay_renames_aside_then_purge_removes_only_due(tmp_path):
    d = str(tmp_path)
    a, b = _segment_files(d, 0), _segment_files(d, 10)
    dd = DelayedDeletes(d)
    dd.delete([a], 1)                      # due almost at once
    dd.delete([b], 3_600_000)              # due in an hour
    names = set(os.listdir(d))
    assert names == {_files.DELETED + os.path.basename(p) for f in (a, b)
                     for p in (f.path, f.index_path, f.timeindex_path)}
    assert all(n.startswith(".seglog-deleted.") for n in names)
    assert len(dd) == 2
    time.sleep(0.01)                       # a's 1 ms delay passes: time is what is tested
    assert dd.purge() == 1
    assert set(os.listdir(d)) == {_files.DELETED + os.path.basename(p)
                                  for p in (b.path, b.index_path, b.timeindex_path)}
    assert dd.purge() == 0                 # b is not due yet
    assert len(dd) == 1
    assert dd.purge(everything=True) == 1
    assert os.listdir(d) == []
    assert len(dd) == 0


def test_delayed_delete_of_missing_files_is_not_an_error(tmp_path):
    d = str(tmp_path)
    a = _segment_files(d, 0)
    os.unlink(a.timeindex_path)
    dd = DelayedDeletes(d)
    dd.delete([a], 60_000)
    assert sorted(os.listdir(d)) == sorted(_files.DELETED + os.path.basename(p)
                                           for p in (a.path, a.index_path))
    assert dd.purge(everything=True) == 1
    assert os.listdir(d) == []


def test_renamed_aside_files_are_leftovers_for_the_next_writer(tmp_path):
    d = str(tmp_path)
    a = _segment_files(d, 5)
    DelayedDeletes(d).delete([a], 60_000)      # the process dies before the purge
    remove_leftovers(d)
    assert os.listdir(d) == []


# -- remove_leftovers -----------------------------------------------------------------

Z = "0" * 20
LEFTOVERS = [
    f".seglog-tmp.{Z}.log", f".seglog-tmp.{Z}.index", f".seglog-tmp.{Z}.timeindex",
    f".seglog-deleted.{Z}.log", f".seglog-deleted.{'0' * 19}2.index",
    f".seglog-cleaned.{Z}.timeindex", f".seglog-swap.{'0' * 19}7",
    ".seglog-tmp.recovery-point", ".seglog-tmp.log-start-offset", ".seglog-tmp.writer-session",
    f".seglog-deleted.{9223372036854775807:020d}.log",          # the largest base offset
]
FOREIGN = [
    "notes.txt", f"{Z}.log", f"{Z}.index", f"{Z}.timeindex", "seglog.json", ".lock",
    ".seglog-deleted.123.log",              # not 20 digits
    f".seglog-deleted.{Z}.txt",             # not a segment suffix
    f".seglog-deleted.{Z}.log.bak",
    f".seglog-deleted.{'9' * 20}.log",      # above 2**63 - 1: not a base seglog gives
    f".seglog-swap.{'9' * 20}",
    ".seglog-swap.abc", ".seglog-tmp.", ".seglog-tmp.with space", ".seglog-other",
    f"x.seglog-deleted.{Z}.log", f".SEGLOG-deleted.{Z}.log", f".seglog-deleted{Z}.log",
]


def test_remove_leftovers_removes_exactly_seglogs_names(tmp_path):
    d = str(tmp_path)
    for name in LEFTOVERS + FOREIGN:
        with open(os.path.join(d, name), "wb") as f:
            f.write(b"keep?")
    remove_leftovers(d)
    assert sorted(os.listdir(d)) == sorted(FOREIGN)
    remove_leftovers(d)                    # nothing left to remove: no change, no error
    assert sorted(os.listdir(d)) == sorted(FOREIGN)


@pytest.mark.parametrize("name", LEFTOVERS)
def test_is_leftover_accepts(name):
    assert _files.is_leftover(name)


@pytest.mark.parametrize("name", FOREIGN)
def test_is_leftover_rejects(name):
    assert not _files.is_leftover(name)

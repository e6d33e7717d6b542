"""The writer's role of a segment (``ActiveSegment``) where it can fail half made: its
map made and one index opened when the next cannot be (no descriptor left: EMFILE;
a full disk). Whatever it opened is closed with it, as the segment's own files are:
a process near its descriptor limit must not lose one more at every failed roll or
open."""

from __future__ import annotations

import errno
import os

import pytest

import seglog
from seglog import segment
from seglog.segment import ActiveSegment, ActiveSettings, Segment, WriterState

from helpers import fds_into

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"),
                                reason="names descriptors through /proc")

SETTINGS = ActiveSettings(1 << 20, 1 << 19, None, 256, 1 << 16)


def _refuse_writable(real):
    """``real``, except that a writable one cannot be opened (the process is out of
    descriptors)."""
    def refused(path, *a, writable=False, **k):
        if writable:
            raise OSError(errno.EMFILE, "Too many open files", path)
        return real(path, *a, writable=writable, **k)
    return refused


class _TimeIndexSwitch:
    """Whether the writer's time index can be opened (``allow`` / ``refuse``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._mp = monkeypatch
        self._real = segment.TimeIndex

    def refuse(self) -> None:
        self._mp.setattr(segment, "TimeIndex", _refuse_writable(self._real))

    def allow(self) -> None:
        self._mp.setattr(segment, "TimeIndex", self._real)


@pytest.fixture
def no_time_index(monkeypatch):
    """The writer's time index cannot be opened, until ``allow()``."""
    switch = _TimeIndexSwitch(monkeypatch)
    switch.refuse()
    return switch


def test_a_new_segment_whose_time_index_cannot_open_leaves_nothing_open(tmp_path,
                                                                      no_time_index):
    d = str(tmp_path)
    with pytest.raises(OSError) as e:
        ActiveSegment.create(d, 0, SETTINGS)
    assert e.value.errno == errno.EMFILE
    assert fds_into(d) == []


def test_taking_a_segment_whose_time_index_cannot_open_leaves_nothing_open(tmp_path,
                                                                         no_time_index):
    d = str(tmp_path)
    no_time_index.allow()
    w = ActiveSegment.create(d, 0, SETTINGS)
    state = w.writer_state()
    w.close()
    assert fds_into(d) == []
    no_time_index.refuse()
    seg = Segment(d, 0, max_index_bytes=SETTINGS.max_index_bytes, owner=True,
                  index_interval_bytes=SETTINGS.index_interval_bytes)
    with pytest.raises(OSError):
        ActiveSegment(seg, state, SETTINGS)
    seg.close()                          # what its holder closes (the loader's list)
    assert not seg.is_active
    assert fds_into(d) == []


def test_a_roll_that_cannot_open_the_new_time_index_leaks_no_descriptor(tmp_path,
                                                                       no_time_index):
    path = str(tmp_path / "log")
    no_time_index.allow()
    log = seglog.Log.open(path, segment_bytes=4096, flush_ms=None)
    acked = {off: b"v" * 100 for off in log.append_batch([b"v" * 100] * 10)}
    no_time_index.refuse()
    with pytest.raises(seglog.StorageError):
        for i in range(200):                 # far past segment_bytes: it rolls
            acked[log.append(b"x%d" % i)] = b"x%d" % i
    no_time_index.allow()
    try:
        log.close()
    except (seglog.SeglogError, OSError):
        pass
    assert fds_into(path) == []
    with seglog.Log.open(path, flush_ms=None) as again:      # and it writes on
        assert {m.offset: m.value for m in again.iter()} == acked
        again.append(b"after")
    assert fds_into(path) == []


def test_an_open_that_cannot_open_the_time_index_leaks_no_descriptor(tmp_path,
                                                                    no_time_index):
    path = str(tmp_path / "log")
    no_time_index.allow()
    with seglog.Log.open(path, flush_ms=None) as log:
        log.append_batch([b"v" * 100] * 10)
    no_time_index.refuse()
    with pytest.raises((seglog.StorageError, OSError)):
        seglog.Log.open(path, flush_ms=None)
    assert fds_into(path) == []


def test_a_state_the_map_cannot_take_closes_what_was_opened(tmp_path, monkeypatch):
    """A failure after both indexes opened (here: taking the state): the map and the
    indexes are closed, nothing stays mapped."""
    d = str(tmp_path)
    w = ActiveSegment.create(d, 0, SETTINGS)
    state = w.writer_state()
    w.close()

    def broken(self, st):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(ActiveSegment, "reload", broken)
    seg = Segment(d, 0, max_index_bytes=SETTINGS.max_index_bytes, owner=True,
                  index_interval_bytes=SETTINGS.index_interval_bytes)
    with pytest.raises(OSError):
        ActiveSegment(seg, WriterState(*state), SETTINGS)
    seg.close()
    assert fds_into(d) == []
    with open("/proc/self/maps") as f:
        assert d not in f.read()


def test_following_a_roll_whose_segment_cannot_be_taken_leaks_no_descriptor(
        tmp_path, no_time_index):
    """Another writer rolled; this one cannot take the new active segment (its time
    index cannot open): the append fails, nothing stays open of what it tried, and
    its next append, once it can, follows and writes on."""
    path = str(tmp_path / "log")
    no_time_index.allow()
    a = seglog.Log.open(path, multi_writer=True, segment_bytes=4096, flush_ms=None)
    b = seglog.Log.open(path, multi_writer=True, segment_bytes=4096, flush_ms=None)
    try:
        acked = {a.append(b"a0"): b"a0"}
        for i in range(60):                  # b rolls past a's active segment
            acked[b.append(b"b" * 100)] = b"b" * 100
        before = fds_into(path)
        no_time_index.refuse()
        for _ in range(3):
            with pytest.raises(seglog.StorageError):
                a.append(b"refused")
            assert fds_into(path) == before
        no_time_index.allow()
        acked[a.append(b"a1")] = b"a1"
        assert {m.offset: m.value for m in a.iter()} == acked
    finally:
        a.close()
        b.close()
    assert fds_into(path) == []

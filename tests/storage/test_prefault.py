"""The prefaulter thread: it faults in reserved pages ahead of the writer, never
touches a mapping that is gone, and keeps no log object alive."""

from __future__ import annotations

import gc
import os
import threading
import weakref

import pytest

from seglog import Log
from seglog.log import append_encoded, encode_batches
from seglog.segment import THROUGH_FILE
from seglog._runtime import prefault as _prefault

from helpers import wait_for

# Seen from outside, as an operator would: a segment file's length is what is reserved
# (blocks are reserved by extending it), and the process's resident pages of its
# mapping (/proc/self/smaps) are what the thread faulted in.


def _reserved(path: str) -> int:
    return os.path.getsize(path)


def _resident(path: str) -> int | None:
    """Bytes of this process's mappings of ``path`` in memory (None: not mapped)."""
    real, rss, mapped, current = os.path.realpath(path), 0, False, False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split(None, 5)
            if "-" in fields[0] and not fields[0].endswith(":"):    # a mapping's header
                current = len(fields) == 6 and fields[5].rstrip("\n") == real
                mapped |= current
            elif current and fields[0] == "Rss:":
                rss += int(fields[1]) * 1024
    return rss if mapped else None


def _faulted_in(path: str) -> bool:
    return (_resident(path) or 0) >= _reserved(path)

pytestmark = pytest.mark.skipif(_prefault.get() is None,
                                reason="no ctypes madvise or MADV_POPULATE_WRITE here")


def test_reserved_pages_are_faulted_in_ahead_of_the_writer(logdir):
    with Log.open(logdir, flush_ms=None) as log:
        log.append_batch([b"x" * 1000] * 10)
        seg = log.segments[-1]
        # blocks are reserved a chunk past the data (small at first: the chunk grows
        # with the segment), and the thread faults them in
        assert seg.size + (32 << 10) <= _reserved(seg.path) <= 128 << 10
        assert wait_for(lambda: _faulted_in(seg.path), 5.0, "the reserved pages faulted in")
        # the writer reserves again before it reaches the reserved end, so the thread
        # stays ahead: after every append, reserved room is left past the data
        for _ in range(800):
            log.append_batch([os.urandom(100)] * 50)
            assert _reserved(seg.path) > seg.size
        # 4 MB in, the chunks have grown: the writer keeps half of one ahead
        assert _reserved(seg.path) - seg.size >= 2 << 20
        assert wait_for(lambda: _faulted_in(seg.path), 5.0, "the reserved pages faulted in")


@pytest.mark.parametrize("atomic", [True, False])
def test_large_batches_go_in_through_the_file_and_their_pages_are_never_faulted_in(
        logdir, atomic):
    """Batches of ``THROUGH_FILE`` bytes and more (a Producer's rounds) and atomic
    groups (a Spark commit's) are written through the file, not copied into the map
    page by page; the pages they filled are not faulted in afterwards, the reserved
    pages past them are, and appends through the map go on after them."""
    with Log.open(logdir, flush_ms=None, max_message_bytes=256 << 10) as log:
        log.append(b"first")
        seg = log.segments[-1]
        values = [os.urandom(1000) for _ in range(4000)]
        batches = encode_batches(log, values, 1)
        assert len(batches) > 10 and min(b[3] for b in batches[:-1]) >= THROUGH_FILE
        r = append_encoded(log, batches, atomic=atomic)
        group_end = seg.size
        assert group_end > 4_000_000
        log.append(b"after")                    # through the map, reserving further
        assert wait_for(lambda: _reserved(seg.path) - seg.size >= 1 << 20, 5.0,
                        "room reserved past the group")
        page = os.sysconf("SC_PAGE_SIZE")
        assert wait_for(lambda: (_resident(seg.path) or 0)
                        >= _reserved(seg.path) - group_end - page, 5.0,
                        "the reserved pages past the group faulted in")
        # the group's own pages: in the page cache, never in this process's map
        assert (_resident(seg.path) or 0) < _reserved(seg.path) - group_end + (1 << 20)
        assert [m.value for m in log.iter(r.start, r.stop)] == values
        assert [m.value for m in log.iter(r.stop)] == [b"after"]
    with Log.open(logdir, readonly=True) as reader:
        assert [m.value for m in reader.iter(1, r.stop)] == values


def test_rolling_and_closing_while_the_thread_works(logdir):
    # many small segments: unmapping races with faulting-in; nothing may crash (R8)
    # and every message reads back
    vals = [os.urandom(200) for _ in range(64)]
    # a map left open by a roll is closed by the collector sooner or later: without it,
    # such a map is still there to be seen
    gc.disable()
    try:
        with Log.open(logdir, segment_bytes=256 << 10, flush_ms=None) as log:
            for i in range(3000):
                log.append_batch(vals[i % 7:i % 7 + 20])
            n = log.end_offset
            assert len(log.segments) > 40
            # a sealed segment is no longer mapped at all (its map closed by the roll)
            assert [s.path for s in log.segments[:-1] if _resident(s.path) is not None] == []
            assert not any(s.is_active for s in log.segments[:-1])
            assert _resident(log.segments[-1].path) is not None
    finally:
        gc.enable()
    with Log.open(logdir, readonly=True) as reader:
        assert sum(1 for _ in reader.iter()) == n


def test_a_closed_map_is_never_faulted_in(tmp_path):
    """Unmapping clears the address under the map lock: a request still queued
    then does nothing."""
    from seglog._storage.writable_map import WritableMap
    with open(tmp_path / "f", "wb+") as f:
        wmap = WritableMap(f.fileno(), 0, 1 << 20, lambda end: None)
        wmap.grow(4096)
        assert wait_for(lambda: wmap.populated >= wmap.reserved, 5.0,
                        "the reserved pages faulted in") and wmap.address
        wmap.close()
        assert wmap.mm is None and wmap.address == 0
        wmap.reserved += 4096
        wmap.prefault(_prefault.get())
        assert wmap.populated < wmap.reserved


def test_the_thread_keeps_no_log_objects_alive(logdir):
    log = Log.open(logdir, flush_ms=None)
    log.append_batch([b"y" * 5000] * 100)
    seg_ref = weakref.ref(log.segments[-1])
    log_ref = weakref.ref(log)
    log.close()
    del log
    # give the thread time to finish any queued work, then nothing may hold them
    assert wait_for(lambda: (gc.collect(), seg_ref() is None and log_ref() is None)[1], 5.0,
                    "the segment and log collected")


def test_one_thread_per_process(logdir, tmp_path):
    logs = [Log.open(str(tmp_path / f"l{i}"), flush_ms=None) for i in range(4)]
    try:
        for lg in logs:
            lg.append_batch([b"z" * 3000] * 10)
        names = [t.name for t in threading.enumerate()]
        assert names.count("seglog-prefault") == 1
    finally:
        for lg in logs:
            lg.close()


def test_a_forked_child_starts_its_own_thread(tmp_path):
    parent = Log.open(str(tmp_path / "parent"), flush_ms=None)
    parent.append_batch([b"p" * 3000] * 10)
    assert _prefault.get() is not None
    pid = os.fork()
    if pid == 0:     # the child: a log of its own, faulted in by a thread of its own
        code = 1
        try:
            with Log.open(str(tmp_path / "child"), flush_ms=None) as child:
                child.append_batch([b"c" * 3000] * 10)
                seg = child.segments[-1]
                ok = wait_for(lambda: _faulted_in(seg.path), 5.0,
                              "the reserved pages faulted in")
                names = [t.name for t in threading.enumerate()]
                code = 0 if ok and names.count("seglog-prefault") == 1 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    parent.close()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0

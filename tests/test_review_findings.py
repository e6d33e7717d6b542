"""Behaviours an adversarial review of bounded descriptors, the consumer's asyncio
and topic growth found missing, each pinned by the test that showed it: a file
whose inode number another file took, a stalled ``sendfile``, a ``Segment``
walked while its descriptor is closed as idle, async waits beyond the worker
pool, maintenance passes and a reader's looks over hundreds of segments under a
small descriptor limit, a segment retention deletes as a reader reopens it.
Every wait has a deadline."""

from __future__ import annotations

import asyncio
import fcntl
import os
import subprocess
import sys
import termios
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from seglog import Log, codec
from seglog import _aio


def _fds_on(path: str) -> int:
    """Descriptors of this process open on ``path``."""
    n = 0
    for f in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{f}") == path:
                n += 1
        except OSError:
            pass                # the listing's own descriptor, closed since
    return n


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_reader_tells_a_new_file_that_took_its_closed_files_inode_number(tmp_path):
    """A readonly reader closes an idle segment's file and remembers its inode
    number; compaction replaces the file, and the old inode is freed. ext4 hands a
    freed inode number to the next file it creates, so a later compaction's output
    can sit at the path under the very number the reader remembers (made here
    directly: the compacted file's bytes under the old inode). The reader must see
    a new file there, not read it as the old one (whose size and offsets it
    cached): it reads the compacted log, never a false corruption."""
    path = str(tmp_path / "c")
    with Log.open(path, segment_bytes=4 << 10, cleanup_policy="compact", flush_ms=None) as log:
        for i in range(600):
            log.append(b"v%d-" % i + b"p" * 100, key=b"k%d" % (i % 7))
        with Log.open(path, readonly=True) as reader:
            everything = [(m.offset, m.key, m.value) for m in reader.iter()]
            first = reader.segments[0].path
            assert _fds_on(first) == 0          # both closed it: idle
            old_inode = os.stat(first).st_ino
            keep = first + ".keep"               # the old inode, for its number only
            os.link(first, keep)
            assert log.compact().skipped is None
            assert os.stat(first).st_ino != old_inode
            with open(first, "rb") as f:
                compacted = f.read()
            with open(keep, "r+b") as f:         # a new file under the old number
                f.truncate(0)
                f.write(compacted)
            os.rename(keep, first)
            assert os.stat(first).st_ino == old_inode
            got = [(m.offset, m.key, m.value) for m in reader.iter()]
            latest = {k: (o, v) for o, k, v in everything}
            assert {k: (o, v) for o, k, v in got} == latest
            offsets = [o for o, _, _ in got]
            assert offsets == sorted(set(offsets)) and set(got) <= set(everything)


def _pipe_fill(fd: int) -> int:
    buf = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return int.from_bytes(buf, "little")


def test_a_stalled_sendfile_blocks_no_reader(tmp_path):
    """``MessageSet.write_to`` a pipe nobody drains blocks inside ``sendfile`` on
    an old segment's file. Other threads then read enough other segments that the
    log closes its idle files, the oldest first (that one): they must not wait for
    the stalled send (the writer's roll would wait there too, holding the append
    lock)."""
    path = str(tmp_path / "s")
    with Log.open(path, segment_bytes=128 << 10, flush_ms=None) as log:
        for i in range(1200):
            log.append(b"%06d" % i + b"s" * 1000)
    with Log.open(path, flush_ms=None) as log:
        segs = log.segments
        assert len(segs) >= 9
        ms = log.read(0, 1 << 20)               # segment 0's batches: > a pipe's 64 KiB
        assert ms.size_in_bytes > 100 << 10
        r, w = os.pipe()
        sent: list[int] = []
        sender = threading.Thread(target=lambda: sent.append(ms.write_to(w)))
        sender.start()
        try:
            deadline = time.monotonic() + 10
            while _pipe_fill(r) < 16 << 10:      # the sender is inside sendfile, stalled
                assert time.monotonic() < deadline, "the sender never started"
                time.sleep(0.001)
            done = threading.Event()
            errors: list[BaseException] = []

            def read_others() -> None:
                try:
                    for seg in segs[1:9]:
                        assert log.read(seg.base_offset, 100).first_offset == seg.base_offset
                except BaseException as e:      # reported below
                    errors.append(e)
                done.set()

            reader = threading.Thread(target=read_others)
            reader.start()
            blocked = not done.wait(10)
        finally:
            got = bytearray()
            while len(got) < ms.size_in_bytes:  # drain: the sender finishes
                got += os.read(r, 1 << 16)
            sender.join(10)
            reader.join(10)
            os.close(r)
            os.close(w)
        assert not blocked, "reads waited for a stalled sendfile on another segment"
        assert not errors, errors
        assert sent == [ms.size_in_bytes]
        with open(segs[0].path, "rb") as f:
            assert bytes(got) == f.read(ms.size_in_bytes)     # what the set holds


def test_walking_a_segment_survives_its_file_closed_as_idle(tmp_path):
    """A tool walks the batches of ``log.segments[0]`` and, between two batches,
    reads other segments through the log, which closes the idle files of the
    oldest-opened segments (the walked one) and opens others (one may take the
    closed descriptor's number). The walk must go on in its own segment's file:
    every batch it yields is one of that segment, in order."""
    path = str(tmp_path / "w")
    with Log.open(path, segment_bytes=200 << 10, flush_ms=None) as log:
        for i in range(2000):
            log.append(b"%06d" % i + b"b" * 1000)
    with Log.open(path, flush_ms=None) as log:
        segs = log.segments
        assert len(segs) >= 9
        first = segs[0]
        walk = first.batches()
        bases = [next(walk)[1][codec.H_BASE]]
        for seg in segs[1:9]:                   # opens 8 others: the first is closed
            log.read(seg.base_offset, 100)
        bases += [hdr[codec.H_BASE] for _, hdr in walk]
        assert bases == list(range(first.base_offset, segs[1].base_offset))


def test_wait_async_is_served_while_every_worker_waits_on_another_log(tmp_path, monkeypatch):
    """Each log's async waiters are served by a worker of a bounded pool (128
    threads; two here). Logs awaited and idle must not hold every worker for as
    long as they stay idle: a wait on a log that grows returns."""
    monkeypatch.setattr(_aio, "_pool", ThreadPoolExecutor(2, thread_name_prefix="review"))
    logs = [Log.open(str(tmp_path / f"l{i}"), flush_ms=None) for i in range(3)]
    try:
        async def main() -> bool:
            idle = [asyncio.create_task(lg.wait_async(0)) for lg in logs[:2]]
            await asyncio.sleep(0.05)            # their workers run, both waiting
            busy = asyncio.create_task(logs[2].wait_async(0))
            await asyncio.sleep(0.05)
            logs[2].append(b"grown")
            try:
                return await asyncio.wait_for(busy, 5)
            finally:
                for t in idle:
                    t.cancel()
                await asyncio.gather(*idle, return_exceptions=True)

        assert asyncio.run(main()) is True
    finally:
        for lg in logs:
            lg.close()
        _aio.pool().shutdown(wait=True)


MAINTENANCE_CHILD = textwrap.dedent("""
    import resource, sys, time, seglog
    path, what = sys.argv[1:]
    old = int(time.time() * 1000) - 10 * 86400_000
    opts = dict(segment_bytes=1024, flush_ms=None, retention_ms=None, cleanup_policy="compact")
    with seglog.Log.open(path, **opts) as log:      # 120 segments
        for i in range(120):
            log.append_batch([seglog.Record(b"m%d-%d" % (i, j) + b"q" * 200, key=b"k%d" % i,
                                            timestamp=old + i) for j in range(3)])
        n = len(log.segments)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    if what == "compact":
        with seglog.Log.open(path, **opts) as log:
            st = log.compact()
            latest = {m.key: m.value for m in log.iter()}
            assert latest == {b"k%d" % i: b"m%d-2" % i + b"q" * 200 for i in range(120)}
            print(n, st.segments_before, len(log.segments), len(latest))
    else:
        opts.update(retention_ms=86400_000, cleanup_policy="delete")
        with seglog.Log.open(path, **opts) as log:
            print(n, len(log.enforce_retention()), len(log.segments), len(log))
""")


@pytest.mark.parametrize("what", ["compact", "retention"])
def test_a_maintenance_pass_over_hundreds_of_segments_holds_few_descriptors(tmp_path, what):
    """RLIMIT_NOFILE 64: a compaction pass over 120 sealed segments, and a retention
    pass over 120 expired ones of a reopened log (their largest timestamps read from
    their files), each counted as one read in flight for the whole pass, kept every
    file it touched open (three descriptors a segment): EMFILE, and the log
    poisoned. Counted segment by segment, the log closes idle files between them."""
    p = subprocess.run([sys.executable, "-c", MAINTENANCE_CHILD, str(tmp_path / "log"), what],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    n, done, left, messages = map(int, p.stdout.split())
    assert n >= 120
    if what == "compact":
        # every sealed segment cleaned, the latest record of every key kept (checked
        # by the child), in fewer segments
        assert done == n - 1 and left < n / 2 and messages == 120, p.stdout
    else:
        assert done == n - 1 and left == 1 and messages == 3, p.stdout


LOOK_CHILD = textwrap.dedent("""
    import resource, sys, time, seglog
    path = sys.argv[1]
    t0 = int(time.time() * 1000) - 3600_000
    with seglog.Log.open(path, segment_bytes=1024, flush_ms=None,
                         cleanup_policy="compact") as log:      # 120 segments
        for i in range(120):
            log.append_batch([seglog.Record(b"m%d-" % i + b"q" * 200, key=b"k%d" % i,
                                            timestamp=t0 + i)] * 3)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    with seglog.Log.open(path, readonly=True) as reader:
        st = reader.stats()
        html = reader._repr_html_()
        print(st["segments"], st["messages"], st["newest_timestamp"] - t0,
              reader.offset_for_time(t0 + 119), "seglog.Log" in html)
""")


def test_a_readers_stats_and_time_lookup_over_hundreds_of_segments_hold_few_descriptors(
        tmp_path):
    """RLIMIT_NOFILE 64, a reader of a log of 120 segments it never read: ``stats()``
    (and the notebook view) measure every segment, ``offset_for_time`` of a late
    timestamp looks at every segment's time index. Each was one read in flight for
    all segments, so every file it opened stayed open: EMFILE (a bare OSError)."""
    p = subprocess.run([sys.executable, "-c", LOOK_CHILD, str(tmp_path / "log")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["120", "360", "119", "357", "True"], p.stdout


def test_a_segment_retention_deletes_while_it_is_reopened_is_gone_not_vanished(
        tmp_path, monkeypatch):
    """An iteration holds a segment between two chunks while the log closes its idle
    files; retention deletes the segment just as the iteration opens its file again
    (after checking the segment was not retired, before the open: made here by
    running the pass at that instant). The iteration must say its offset was
    deleted by retention (``OffsetOutOfRangeError``), not that a file of the log
    vanished behind the writer's back (``CorruptRecordError``)."""
    import io as real_io
    import types
    from seglog import OffsetOutOfRangeError, _segment_file
    path = str(tmp_path / "r")
    with Log.open(path, segment_bytes=2 << 20, flush_ms=None, file_delete_delay_ms=0,
                  retention_ms=None, retention_bytes=1) as log:
        for i in range(20000):
            log.append(b"%06d" % i + b"r" * 1000)
        segs = log.segments
        assert len(segs) >= 9
        it = log.iter(0)
        assert next(it).offset == 0            # one chunk of segment 0 read
        for seg in segs[1:9]:                   # segment 0's files closed as idle
            log.read(seg.base_offset, 100)
        first = segs[0].path
        fired = []

        def file_io(p, *a, **kw):
            if p == first and not fired:
                fired.append(p)
                log.enforce_retention()         # at this instant, in another thread
            return real_io.FileIO(p, *a, **kw)
        monkeypatch.setattr(_segment_file, "io", types.SimpleNamespace(FileIO=file_io))
        with pytest.raises(OffsetOutOfRangeError):
            for _ in it:
                pass
        assert fired and log.start_offset > 0

"""Readers of another writer's active segment, caught in the middle of its writes.

Found by running the tailing test of test_multiprocess.py hundreds of times on a
loaded machine: a reader could take a batch whose base offset the writer had not
stamped yet, or loop forever scanning a file its writer was cutting back.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from seglog import Log, LogClosedError, codec, recovery
from seglog._log import live as _live
from seglog._codec import format as _format
from seglog.retention import DelayedDeletes
from seglog.segment import Segment
from seglog.testing import abandon

from helpers import header

from kills import kill_inside_compaction_swap


def test_reader_does_not_take_a_batch_whose_offset_is_not_stamped_yet(logdir):
    writer = Log.open(logdir, segment_bytes=1024, flush_ms=None)
    try:
        writer.append_batch([b"a" * 500, b"b" * 500])      # offsets 0, 1
        writer.append_batch([b"c" * 500, b"d" * 500])      # rolls: offsets 2, 3
        active = writer.segments[-1]
        assert active.base_offset == 2
        # the writer copies a batch in, then stamps its base offset: catch it between
        fd = os.open(active.path, os.O_RDWR)
        try:
            stamped = os.pread(fd, 8, 0)
            os.pwrite(fd, bytes(8), 0)
            reader = Log.open(logdir, readonly=True)
            assert reader.end_offset == 2                   # not 0 + 2: nothing taken yet
            assert [m.offset for m in reader.iter()] == [0, 1]
            os.pwrite(fd, stamped, 0)                       # the stamp lands
        finally:
            os.close(fd)
        assert reader.wait(3, timeout=5)
        assert [(m.offset, m.value[:1]) for m in reader.iter()] == [
            (0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
        reader.close()
    finally:
        writer.close()


def test_looking_for_a_continuing_batch_in_a_file_cut_back_meanwhile(logdir):
    with Log.open(logdir, flush_ms=None) as log:
        log.append_batch([b"x" * 500] * 4)
        seg = log.segments[-1]
        size = seg.size
    reader = Log.open(logdir, readonly=True)
    seg = reader.segments[-1]
    # the reader's idea of the file's size is from before the writer cut it back
    done = []
    t = threading.Thread(target=lambda: done.append(
        recovery.continuing_batch_after(seg, 1, size + (4 << 20), 10**9)), daemon=True)
    t.start()
    t.join(10)
    assert done == [None], "the scan did not end"
    reader.close()


def test_a_reader_holding_a_segment_compaction_replaced_reads_it_by_its_own_index(logdir):
    """A reader that opened a segment's .log before a compaction swap and loads its
    indexes after it gets the new file's indexes by path: it must not walk its old
    file from their positions (it rebuilds the index from the file it holds)."""
    from seglog import Record
    with Log.open(logdir, cleanup_policy="compact", segment_bytes=64 << 10,
                  index_interval_bytes=256) as w:
        for i in range(600):          # most records superseded: the cleaned file shrinks
            w.append_batch([Record(b"v%d-%s" % (i, b"x" * (i % 50)), key=b"k%d" % (i % 7)),
                            Record(b"u%d" % i, key=b"only-%d" % i)])
        w.append(b"tail", key=b"t")   # the next segment: segment 0 is sealed
        while len(w.segments) < 2:
            w.append_batch([Record(b"y" * 500, key=b"k%d" % (i % 7)) for i in range(50)])
        expected = {m.offset: m.value for m in w.iter(0, 1200)}
        with Log.open(logdir, readonly=True) as r:
            held = r.segments[0]
            assert held.size                       # its .log is open; indexes not loaded
            w.compact()
            assert os.path.getsize(held.path) < held.size, "compaction did not rewrite it"
            for offset in sorted(expected)[::37]:
                _, pos = held.index.lookup(offset)
                got = {}
                for p, hdr in held.batches(pos):
                    for m in held.read_at(p, offset, 1 << 20, held.size):
                        got.setdefault(m.offset, m.value)
                    if len(got) > 3:
                        break
                first = min(got)
                assert first == offset and got[first] == expected[offset]


def test_reader_of_a_log_whose_writer_died_inside_a_compaction_swap(logdir, monkeypatch):
    """The writer was killed after a swap's commit point and after renaming the new
    segment in, before deleting the segments it replaces. A reader sees the log the
    next writer's open leaves (those segments are not the log any more): stats,
    len and the messages agree with that writer (its stats counted 12 segments and
    their bytes, where the log holds 2)."""
    with Log.open(logdir, cleanup_policy="compact", segment_bytes=1024,
                  min_cleanable_dirty_ratio=0.0) as log:
        for i in range(200):
            log.append(b"v%d" % i, key=b"k%d" % (i % 7))
        name = kill_inside_compaction_swap(log, monkeypatch)
    os.rename(os.path.join(logdir, ".seglog-cleaned." + name + ".log"),
              os.path.join(logdir, name + ".log"))        # the swap's first step
    with Log.open(logdir, readonly=True) as r:
        seen = (r.stats(), len(r), [(m.offset, m.value) for m in r.iter()])
    with Log.open(logdir) as w:                            # finishes the swap
        want = (w.stats(), len(w), [(m.offset, m.value) for m in w.iter()])
    for k in ("start_offset", "end_offset", "messages", "segments", "bytes"):
        assert seen[0][k] == want[0][k], k
    assert seen[1:] == want[1:] and want[1] == 14


def test_reader_of_a_log_whose_writer_died_inside_a_retention_pass(logdir, monkeypatch):
    """The writer was killed after retention checkpointed the new log start, before
    it removed the segments below it. A reader sees the log the next writer's open
    leaves: its stats counted the expired segments (their bytes and their oldest
    timestamp) where the log and verify hold 2 segments."""
    old = int(time.time() * 1000) - 2 * 10**9
    with Log.open(logdir, segment_bytes=1024, retention_ms=10**9,
                  retention_check_ms=None) as log:
        for i in range(50):
            log.append(b"x" * 60, timestamp=old if i < 40 else None)

        def killed(self, *args):
            raise KeyboardInterrupt("killed after the log start checkpoint")
        # the files of the expired segments are removed (renamed aside) last
        monkeypatch.setattr(DelayedDeletes, "delete", killed)
        with pytest.raises(KeyboardInterrupt):
            log.enforce_retention()
        monkeypatch.undo()
        abandon(log)
    with Log.open(logdir, readonly=True) as r:
        seen = (r.stats(), len(r), [m.offset for m in r.iter()])
    with Log.open(logdir) as w:                    # removes what retention left
        want = (w.stats(), len(w), [m.offset for m in w.iter()])
    assert seen[0] == {**want[0], "readonly": True}
    assert seen[1:] == want[1:] and want[2] == list(range(40, 50))


def test_an_index_entry_is_trusted_where_a_batch_frames_whatever_its_attribute_bits(tmp_path):
    """A reader checks that a batch with the entry's base offset starts where the entry
    points (magic, length, base offset): a batch a newer seglog wrote, with an attribute
    bit this version does not know, starts there too."""
    first = codec.encode_batch(0, [b"a", b"b"], 100)
    hdr = header(codec.encode_batch(2, [b"c"], 101))
    hdr = hdr._replace(attributes=hdr.attributes | 1 << 11)
    with open(tmp_path / f"{0:020d}.log", "wb") as f:
        f.write(first + _format.HEADER.pack(*hdr) + bytes(3))
    seg = Segment(str(tmp_path), 0)
    try:
        assert _live.batch_starts_at(seg, len(first), 2)
        assert not _live.batch_starts_at(seg, len(first), 3)
        assert not _live.batch_starts_at(seg, 1, 2)
    finally:
        seg.close()


def _refresh_failing_at(monkeypatch, nth: int) -> list[bool]:
    """Make a readonly reader's ``nth`` refresh raise ``FileNotFoundError`` (as its
    listing does when files go three times in a row while it lists); the others
    refresh. Returns each refresh's ``force``, in order."""
    real = _live.LiveLog.refresh
    calls: list[bool] = []

    def refresh(self: _live.LiveLog, force: bool = False) -> None:
        calls.append(force)
        if len(calls) == nth:
            raise FileNotFoundError(2, "a segment file went while the reader listed")
        real(self, force)
    monkeypatch.setattr(_live.LiveLog, "refresh", refresh)
    return calls


def test_a_failed_refresh_inside_len_reaches_the_caller_untried_again(logdir, monkeypatch):
    """len() of a compacted log counts through iter(), which refreshes; its error
    is the caller's, as before the read path had one retry loop: only retention
    moving the start is counted again (no forced re-listing, no second count)."""
    with Log.open(logdir, cleanup_policy="compact", flush_ms=None) as w:
        for k, v in ((b"1", b"a"), (b"2", b"b"), (b"3", b"c")):
            w.append(v, key=k)
    with Log.open(logdir, readonly=True) as reader:
        assert len(reader) == 3
        calls = _refresh_failing_at(monkeypatch, 2)   # 1: len's own, 2: iter()'s
        with pytest.raises(FileNotFoundError):
            len(reader)
        assert calls == [False, False]


def test_a_failed_refresh_inside_to_pandas_reaches_the_caller_untried_again(logdir,
                                                                            monkeypatch):
    """to_pandas looks again only when retention moved the start past what it read;
    a refresh's error is the caller's (no forced re-listing, no second try)."""
    pytest.importorskip("pandas")
    with Log.open(logdir, flush_ms=None) as w:
        w.append_batch([b"a", b"b", b"c"])
    with Log.open(logdir, readonly=True) as reader:
        assert list(reader.to_pandas()["value"]) == [b"a", b"b", b"c"]
        for start in (None, 1):
            monkeypatch.undo()
            calls = _refresh_failing_at(monkeypatch, 1)
            with pytest.raises(FileNotFoundError):
                reader.to_pandas(start=start)
            assert calls == [False]


def test_a_log_made_again_under_the_same_name_is_gone_for_its_old_reader(tmp_path):
    """A readonly reader follows its log, not its path: deleted and made again under
    the same name (a topic made again), the directory holds another log, whose
    offsets start again; the reader raises ``LogClosedError`` as for a deleted log,
    never reads the new log's messages as the next ones of the old."""
    import shutil
    path = str(tmp_path / "l")
    with Log.open(path) as w:
        w.append_batch([b"old-%d" % i for i in range(5)])
    r = Log.open(path, readonly=True)
    try:
        assert [m.value for m in r.iter()] == [b"old-%d" % i for i in range(5)]
        shutil.rmtree(path)
        with Log.open(path) as w:
            w.append_batch([b"new-%d" % i for i in range(8)])
        with pytest.raises(LogClosedError, match="gone"):
            r.read(5)
        with pytest.raises(LogClosedError, match="gone"):
            r.end_offset
    finally:
        r.close()
    with Log.open(path, readonly=True) as again:      # a new reader reads the new log
        assert [m.value for m in again.iter()] == [b"new-%d" % i for i in range(8)]

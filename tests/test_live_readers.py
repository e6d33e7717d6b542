"""Readers of another writer's active segment, caught in the middle of its writes.

Found by running the tailing test of test_multiprocess.py hundreds of times on a
loaded machine: a reader could take a batch whose base offset the writer had not
stamped yet, or loop forever scanning a file its writer was cutting back.
"""

from __future__ import annotations

import os
import threading

from seglog import Log, recovery


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

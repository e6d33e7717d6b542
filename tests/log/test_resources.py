"""What an open log costs: descriptors bounded however many segments it has and
however much of it is read, disk reserved in proportion to what it holds."""

import fcntl
import os
import subprocess
import sys
import termios
import textwrap
import threading

import pytest

import seglog
from seglog import Log, Record, Topic, codec

from helpers import wait_for

FD_DIR = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"


def open_fds() -> int:
    return len(os.listdir(FD_DIR))


def allocated(path: str) -> int:
    """Bytes of disk blocks the files under ``path`` hold (sparse holes excluded)."""
    total = 0
    for d, _, names in os.walk(path):
        for n in names:
            total += os.stat(os.path.join(d, n)).st_blocks * 512
    return total


def test_a_small_topic_reserves_little_disk_and_few_descriptors(tmp_path):
    """32 partitions, 100 small messages, open for writing: under 40 MiB of disk
    (each active segment reserves a chunk that grows with it), seven descriptors a
    partition (the lock file, the active segment and its map, two indexes and theirs)."""
    before = open_fds()
    with Topic.open(tmp_path, "clicks", partitions=32, flush_ms=None) as topic:
        for i in range(100):
            topic.append(b"click %d" % i, key=b"user-%d" % (i % 17))
        topic.flush()
        used = allocated(str(tmp_path))
        fds = open_fds() - before
        assert used < 40 << 20, used
        assert used < 4 << 20, f"{used} bytes: more than a small chunk per partition"
        assert fds <= 7 * 32 + 4, fds
        assert sum(len(topic.partition(p)) for p in range(32)) == 100
    assert open_fds() <= before


def test_reservation_grows_with_the_segment(tmp_path):
    """The first batches reserve a small chunk; a growing segment reserves more at a
    time, as much again as it has (up to 8 MiB): few reserving calls when busy."""
    with Log.open(tmp_path / "log", flush_ms=None) as log:
        log.append(b"x" * 100)
        small = allocated(str(tmp_path / "log"))
        assert small <= 256 << 10, small
        for _ in range(400):
            log.append_batch([b"y" * 1000] * 50)          # 20 MB
        grown = allocated(str(tmp_path / "log"))
        data = log.segments[-1].size
        assert data < grown <= data + (8 << 20) + (1 << 20), (data, grown)


def test_a_writer_of_many_segments_holds_few_descriptors(tmp_path):
    """Hundreds of rolls: the sealed segments' files close once idle; reading the
    whole log, at random from several threads, with retention and compaction going
    on, never holds more than a few segments open."""
    path = tmp_path / "many"
    before = open_fds()
    with Log.open(path, segment_bytes=2048, flush_ms=None, cleanup_policy="compact,delete",
                  retention_bytes=None) as log:
        recs = []
        for i in range(1500):
            batch = [Record(b"value-%d-%d-" % (i, j) + b"z" * (i % 300), key=b"k%d" % (i % 50))
                     for j in range(1 + i % 5)]
            log.append_batch(batch)
            recs += batch
        n_segs = len(log.segments)
        assert n_segs > 300
        after_writing = open_fds() - before
        assert after_writing <= 30, (n_segs, after_writing)
        start, end = log.start_offset, log.end_offset
        assert sum(1 for _ in log.iter()) == end - start
        errors: list[BaseException] = []

        def reader(seed: int) -> None:
            import random
            rnd = random.Random(seed)
            try:
                for _ in range(300):
                    off = rnd.randrange(log.start_offset, log.end_offset)
                    ms = log.read(off, 4096)
                    assert ms and ms.next_offset > off
            except BaseException as e:      # reported below
                errors.append(e)

        threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        log.compact()
        for t in threads:
            t.join(timeout=120)
            assert not t.is_alive()
        assert not errors, errors
        assert open_fds() - before <= 30
        # compaction kept the latest value of every key, at its offset
        latest = {}
        for off, r in enumerate(recs):
            latest[r.key] = (off, r.value)
        got = {m.key: (m.offset, m.value) for m in log.iter()}
        assert got == latest
    assert open_fds() <= before


CHILD = textwrap.dedent("""
    import resource, sys, seglog
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    path = sys.argv[1]
    with seglog.Log.open(path, segment_bytes=1024, flush_ms=None) as log:
        for i in range(600):
            log.append_batch([b"m%d-" % i + b"q" * 200] * 3)
        n = len(log.segments)
        got = sum(1 for _ in log.iter())
    with seglog.Log.open(path, readonly=True) as reader:
        again = sum(1 for _ in reader.iter())
    print(n, got, again)
""")


def test_a_log_of_thousands_of_segments_under_a_small_descriptor_limit(tmp_path):
    """RLIMIT_NOFILE 64: a writer rolls 600 segments, reads all of it, and a reader
    reopens and reads it all (each sealed segment held 5 descriptors before)."""
    p = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "log")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    n, got, again = map(int, p.stdout.split())
    assert n >= 600 and got == again == 1800, p.stdout


def _numbered_log(path: str, segment_bytes: int, n: int, pad: bytes) -> None:
    """A log of ``n`` 1006-byte records whose values start with their number."""
    with Log.open(path, segment_bytes=segment_bytes, flush_ms=None) as log:
        for i in range(n):
            log.append(b"%06d" % i + pad * 1000)


def _seven_keys_log(path: str) -> Log:
    """A compacted-policy writer of 600 records over seven keys, in 4 KiB segments."""
    log = Log.open(path, segment_bytes=4 << 10, cleanup_policy="compact", flush_ms=None)
    for i in range(600):
        log.append(b"v%d-" % i + b"p" * 100, key=b"k%d" % (i % 7))
    return log


def _check_compacted_read(reader: Log, everything: list) -> None:
    """``reader`` reads the compacted log, never a mix: the latest record of every
    key of ``everything`` (what it read before), in offset order, each as written."""
    got = [(m.offset, m.key, m.value) for m in reader.iter()]
    latest = {k: (o, v) for o, k, v in everything}
    assert {k: (o, v) for o, k, v in got} == latest
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets))
    assert set(got) <= set(everything)


def test_a_reader_reopening_a_closed_segment_notices_compaction_replaced_it(tmp_path):
    """A readonly reader's idle segments are closed; when the writer (another
    process) compacts them meanwhile, the reader's reopen finds another file at the
    path and re-lists: it reads the compacted log, never a mix."""
    path = str(tmp_path / "c")
    with _seven_keys_log(path) as log:
        with Log.open(path, readonly=True) as reader:
            everything = [(m.offset, m.key, m.value) for m in reader.iter()]
            assert len(everything) == 600
            assert log.compact().skipped is None
            # the reader's idle segments were closed: reopening one finds the
            # compacted file at its path, and the reader re-lists
            _check_compacted_read(reader, everything)


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
    with _seven_keys_log(path) as log:
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
            _check_compacted_read(reader, everything)


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
    _numbered_log(path, 128 << 10, 1200, b"s")
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
            # the sender is inside sendfile, stalled
            wait_for(lambda: _pipe_fill(r) >= 16 << 10, 10, "the sender to start", step=0.001)
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
    _numbered_log(path, 200 << 10, 2000, b"b")
    with Log.open(path, flush_ms=None) as log:
        segs = log.segments
        assert len(segs) >= 9
        first = segs[0]
        walk = first.batches()
        bases = [next(walk)[1].base_offset]
        for seg in segs[1:9]:                   # opens 8 others: the first is closed
            log.read(seg.base_offset, 100)
        bases += [hdr.base_offset for _, hdr in walk]
        assert bases == list(range(first.base_offset, segs[1].base_offset))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_reads_through_its_copy_of_a_reader(tmp_path):
    """The child's copy of a reader closes idle segments with its own lock."""
    with Log.open(tmp_path / "f", segment_bytes=4 << 10, flush_ms=None) as log:
        for i in range(300):
            log.append(b"x%d" % i + b"y" * 200)
        with Log.open(tmp_path / "f", readonly=True) as reader:
            assert sum(1 for _ in reader.iter()) == 300
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    vals = [m.value for m in reader.iter()]
                    code = 0 if vals == [b"x%d" % i + b"y" * 200 for i in range(300)] else 2
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0


def test_the_active_segments_file_is_as_long_as_its_reservation(tmp_path):
    """The default segment_bytes is 1 GiB; the active segment's file is as long as what
    its writer reserved (data and a chunk of zeros), never a gigabyte of zeros in
    ``ls`` (copies that ignore holes move what ``ls`` says), for one writer and for
    several; sealed segments hold exactly their data."""
    root = tmp_path / "t"
    with Topic.open(root, "events", partitions=4, flush_ms=None) as topic:
        for i in range(40):
            topic.append(b"event %d" % i, key=b"k%d" % i)
        lengths = [os.path.getsize(topic.partition(p).segments[-1].path) for p in range(4)]
        assert max(lengths) <= 256 << 10, lengths
    log_path = str(tmp_path / "log")
    with Log.open(log_path, flush_ms=None, segment_bytes=4 << 20) as log:
        for _ in range(120):
            log.append_batch([b"y" * 1000] * 50)     # 6 MB: rolls once
        assert len(log.segments) >= 2
        for seg in log.segments[:-1]:
            assert os.path.getsize(seg.path) == seg.size
        active = log.segments[-1]
        length = os.path.getsize(active.path)
        assert active.size <= length <= active.size + (8 << 20), (active.size, length)
    a = Log.open(log_path, multi_writer=True, flush_ms=None)
    b = Log.open(log_path, multi_writer=True, flush_ms=None)
    try:
        for i in range(2000):
            (a if i % 2 else b).append(b"z" * 500)
        data = Log.open(log_path, readonly=True)
        try:
            active = data.segments[-1]
            length = os.path.getsize(active.path)
            assert active.size <= length <= active.size + (8 << 20) + (1 << 20)
        finally:
            data.close()
    finally:
        a.close()
        b.close()


# -- a pass or a look over hundreds of segments under a small descriptor limit ------

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


# -- threads: one flusher and one maintenance thread however many logs --------------

def test_one_flusher_and_one_maintenance_thread_for_many_logs(tmp_path):
    first = seglog.Log.open(tmp_path / "first")     # the process's threads exist now
    first.append(b"x")
    before = threading.active_count()
    logs = [seglog.Log.open(tmp_path / f"p{i}", flush_ms=20, retention_check_ms=50)
            for i in range(64)]
    for i, log in enumerate(logs):
        log.append(b"%d" % i)
    assert threading.active_count() <= before + 2
    # and every log's timed flush still runs, within a deadline
    wait_for(lambda: all(log.flushed_offset >= 1 for log in logs), 10,
             "every log's timed flush", step=0.01)
    assert all(log.flushed_offset == 1 for log in logs)
    for log in logs:
        log.close()
    first.close()

"""Long writes that an fsync follows (a Spark task's staging file, a commit's atomic
group) hand their pages to the disk as they go (``posix_fadvise(POSIX_FADV_DONTNEED)``
on pages just written starts their writeback), so that the fsync waits for the
last few: only whole pages just written, each once, in order; nothing a reader
sees changes. Other appends are left to the kernel."""

from __future__ import annotations

import errno
import mmap
import os

import pytest

from seglog import Log
from seglog._runtime.files import HAND_ON, hand_on
from seglog.log import append_encoded, encode_batches

pytestmark = pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise")
PAGE = mmap.PAGESIZE


@pytest.fixture
def advised(monkeypatch):
    """Every ``posix_fadvise`` call made, as (inode, offset, length, advice), passed on
    to the real one."""
    calls: list[tuple[int, int, int, int]] = []
    real = os.posix_fadvise

    def advise(fd: int, offset: int, length: int, advice: int) -> None:
        calls.append((os.fstat(fd).st_ino, offset, length, advice))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", advise)
    return calls


def test_hand_on_advises_the_whole_pages_of_a_run_once_it_is_long(tmp_path, advised):
    path = tmp_path / "f"
    data = os.urandom(3 * HAND_ON)
    with open(path, "wb") as f:
        f.write(data)
        fd = f.fileno()
        ino = os.fstat(fd).st_ino
        assert hand_on(fd, 100, 100 + HAND_ON - 1) == 100 and advised == []
        end = 100 + HAND_ON + 5000
        mark = hand_on(fd, 100, end)
        assert mark == end - end % PAGE
        # the first page is partly before the run (another writer's bytes): left alone
        assert advised == [(ino, PAGE, mark - PAGE, os.POSIX_FADV_DONTNEED)]
        assert hand_on(fd, mark, mark + HAND_ON) == mark + HAND_ON
        assert advised[-1][1:3] == (mark, HAND_ON)
    assert path.read_bytes() == data


def _runs_cover(calls, ino, runs):
    """The advised ranges of file ``ino``: page-aligned, ascending, each inside one of
    ``runs`` (byte ranges written through the file); returns the bytes covered."""
    mine = [(o, n) for i, o, n, a in calls if i == ino]
    assert all(a == os.POSIX_FADV_DONTNEED for i, _, _, a in calls if i == ino)
    assert all(o % PAGE == 0 and n % PAGE == 0 and n > 0 for o, n in mine), mine
    assert all(a + n <= b for (a, n), (b, _) in zip(mine, mine[1:])), "each page once, in order"
    for o, n in mine:
        assert any(lo <= o and o + n <= hi for lo, hi in runs), (o, n, runs)
    return sum(n for _, n in mine)


def test_an_atomic_group_hands_its_pages_on_as_it_is_written(logdir, advised):
    """A Spark commit's atomic group (an fsync follows it): all but its last
    ``HAND_ON`` bytes are handed on while it goes in, each page once, in order, none
    outside it (an append through the map just before it shares its first page);
    every record reads back, in this process and in a new reader."""
    with Log.open(logdir, flush_ms=None, max_message_bytes=256 << 10) as log:
        log.append(b"first")
        seg = log.segments[-1]
        ino = os.stat(seg.path).st_ino
        values = [os.urandom(1000) for _ in range(20_000)]
        runs, ranges = [], []
        for part in (values[:10_000], values[10_000:]):
            start = seg.size
            ranges.append(append_encoded(log, encode_batches(log, part, 1), atomic=True))
            runs.append((start, seg.size))
            log.append(b"between")                 # through the map
        covered = _runs_cover(advised, ino, runs)
        assert covered >= sum(hi - lo for lo, hi in runs) - 2 * (HAND_ON + 2 * PAGE)
        got = [m.value for r in ranges for m in log.iter(r.start, r.stop)]
        assert got == values
        log.flush()
    with Log.open(logdir, readonly=True) as reader:
        assert [m.value for m in reader.iter(ranges[0].start, ranges[0].stop)] == values[:10_000]
        assert [m.value for m in reader.iter(ranges[1].stop)] == [b"between"]


def test_appends_outside_a_group_are_never_advised(logdir, advised):
    """Batches appended one by one, through the map or (``THROUGH_FILE`` bytes and
    more: a Producer's rounds) through the file, are left to the kernel and to the
    fsync, if any: no advice at all."""
    with Log.open(logdir, flush_ms=None, max_message_bytes=256 << 10) as log:
        vals = [os.urandom(200) for _ in range(100)]
        for _ in range(600):                      # 12 MB in 20 KB batches
            log.append_batch(vals)
        big = [os.urandom(1000) for _ in range(12_000)]
        r = append_encoded(log, encode_batches(log, big, 1))     # 12 MB, 256 KB batches
        ino = os.stat(log.segments[-1].path).st_ino
        assert [c for c in advised if c[0] == ino] == []
        assert [m.value for m in log.iter(r.start)] == big


def test_a_refused_advice_changes_nothing(logdir, monkeypatch):
    """The advice is a hint: a file system that refuses it (an ``OSError``) fails no
    append; the group goes in whole and the fsync after it does all the work."""
    refused = []

    def refuse(fd: int, offset: int, length: int, advice: int) -> None:
        refused.append(offset)
        raise OSError(errno.EINVAL, "refused")

    monkeypatch.setattr(os, "posix_fadvise", refuse)
    with Log.open(logdir, flush_ms=None, max_message_bytes=256 << 10) as log:
        values = [os.urandom(1000) for _ in range(20_000)]
        r = append_encoded(log, encode_batches(log, values, 1), atomic=True)
        log.flush()
        assert refused and [m.value for m in log.iter(r.start)] == values
    with Log.open(logdir, readonly=True) as reader:
        assert [m.value for m in reader.iter(0)] == values

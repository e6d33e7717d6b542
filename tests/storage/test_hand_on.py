"""Long runs of writes through the file hand their pages to the disk as they go
(``posix_fadvise(POSIX_FADV_DONTNEED)`` on pages just written starts their
writeback), so that the fsync after them waits for the last few: only whole pages
this writer just wrote through the file, each once, in order; nothing a reader sees
changes."""

from __future__ import annotations

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


@pytest.mark.parametrize("atomic", [True, False])
def test_large_batches_hand_their_pages_on_as_they_are_written(logdir, advised, atomic):
    """A Spark commit's atomic group, a Producer's large rounds: all but the last
    ``HAND_ON`` bytes of the run are handed on while it is written; a small append
    (through the map) between two runs starts a new run, and its page is never
    advised; every record reads back, in this process and in a new reader."""
    with Log.open(logdir, flush_ms=None, max_message_bytes=256 << 10) as log:
        log.append(b"first")
        seg = log.segments[-1]
        ino = os.stat(seg.path).st_ino
        values = [os.urandom(1000) for _ in range(20_000)]
        runs, ranges = [], []
        for part in (values[:10_000], values[10_000:]):
            start = seg.size
            ranges.append(append_encoded(log, encode_batches(log, part, 1), atomic=atomic))
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


def test_small_appends_are_never_advised(logdir, advised):
    """Appends through the map (batches under ``THROUGH_FILE``) are left to the
    kernel and the fsync: no advice at all."""
    with Log.open(logdir, flush_ms=None) as log:
        vals = [os.urandom(200) for _ in range(100)]
        for _ in range(600):                      # 12 MB in 20 KB batches
            log.append_batch(vals)
        ino = os.stat(log.segments[-1].path).st_ino
        assert [c for c in advised if c[0] == ino] == []

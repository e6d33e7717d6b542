"""A full disk is a StorageError, never a SIGBUS; nothing acknowledged is lost.

Runs writers in child processes on a small tmpfs (a real full disk): a SIGBUS kills
the child and fails the test instead of pytest. Skipped where mounting is not
permitted.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

import seglog
from seglog import Log
from seglog.testing import FaultyFS, platform_fallbacks

SEED = int(os.environ.get("SEGLOG_SEED", "20261122"))


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({r.stderr.strip() or r.returncode}): "
                    f"needs root or CAP_SYS_ADMIN")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(disk) -> str:
    """Fill what is left of ``disk`` with one file; its path."""
    filler = os.path.join(disk, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def value(i: int) -> bytes:
    return b"%d:" % i * (1 + i % 37)


_WRITER = textwrap.dedent(r"""
    import contextlib, os, random, sys
    import seglog
    from seglog.testing import platform_fallbacks
    sys.path.insert(0, sys.argv[3])
    from test_diskfull import value
    path, seed = sys.argv[1], int(sys.argv[2])
    if sys.argv[4] == "fallback":     # what macOS gets, for the rest of the process
        contextlib.ExitStack().enter_context(platform_fallbacks())
    rng = random.Random(seed)
    out = os.fdopen(1, "w", buffering=1)
    log = seglog.Log.open(path, segment_bytes=rng.choice([64 << 10, 256 << 10]),
                          index_interval_bytes=rng.choice([64, 512]), max_index_bytes=1 << 16,
                          max_message_bytes=8192, flush_ms=None)
    i = log.end_offset
    errors = 0
    while errors < 5:
        try:
            if rng.random() < 0.5:
                log.append(value(i))
                i += 1
            else:
                r = log.append_batch([value(j) for j in range(i, i + rng.randint(1, 20))])
                i = r.stop
            if rng.random() < 0.1:
                log.flush()
            out.write(f"ack {i}\n")
        except seglog.StorageError as e:
            errors += 1
            out.write(f"error {type(e).__name__}\n")
    try:
        log.close()
        out.write("closed\n")
    except seglog.StorageError:
        out.write("close failed\n")
""")


def _run_writer(path, seed: int, mode: str) -> tuple[int, list[str]]:
    """Run the writer to the full disk; (acknowledged end, its output lines)."""
    here = os.path.dirname(os.path.abspath(__file__))
    p = subprocess.run([sys.executable, "-c", _WRITER, str(path), str(seed), here, mode],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode >= 0, f"writer killed by signal {-p.returncode} ({signal.Signals(-p.returncode).name})"
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split("\n")
    acked = max([int(x.split()[1]) for x in lines if x.startswith("ack ")], default=0)
    return acked, lines


def _check(log: Log, acked: int) -> None:
    got = [(m.offset, m.value) for m in log.iter()]
    assert [o for o, _ in got] == list(range(len(got)))
    assert len(got) >= acked, f"lost acknowledged data: {len(got)} < {acked}"
    assert all(v == value(o) for o, v in got)


@pytest.mark.parametrize("mode", ["native", "fallback"])
def test_filling_the_disk_is_a_storage_error_and_loses_nothing(small_disk, mode):
    for r in range(6):
        seed = SEED + r
        print("seed", seed)
        rng = random.Random(seed)
        # a filler of random size, so the disk fills at a different step each round
        filler = small_disk / "filler"
        with open(filler, "wb") as f:
            f.write(b"\0" * rng.randrange(64 << 10, 1 << 20))
        path = small_disk / f"log{r}"
        acked, lines = _run_writer(path, seed, mode)
        assert any(x.startswith("error StorageError") for x in lines), "the disk never filled"
        # every write after the first failure is refused (the log poisons itself)
        first = next(k for k, x in enumerate(lines) if x.startswith("error"))
        assert not any(x.startswith("ack") for x in lines[first:])
        with Log.open(path, readonly=True) as reader:          # works on the full disk
            _check(reader, acked)
        os.unlink(filler)
        with Log.open(path) as log:                             # space freed: recovers
            _check(log, acked)
            log.append(value(log.end_offset))
        shutil.rmtree(path)


_KILLED = textwrap.dedent(r"""
    import os, signal, sys
    import seglog
    sys.path.insert(0, sys.argv[2])
    from test_diskfull import value
    log = seglog.Log.open(sys.argv[1], segment_bytes=256 << 10, index_interval_bytes=64,
                          flush_ms=None)
    for i in range(0, 3000, 10):
        log.append_batch([value(j) for j in range(i, i + 10)])
    print("ack 3000", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_recovery_on_a_full_disk(small_disk):
    """Recovery rebuilds indexes; on a full disk that is a StorageError, not SIGBUS."""
    path = small_disk / "log"
    here = os.path.dirname(os.path.abspath(__file__))
    p = subprocess.run([sys.executable, "-c", _KILLED, str(path), here], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == -signal.SIGKILL and "ack 3000" in p.stdout, p.stderr
    # fill what is left, then open in a child (a SIGBUS must not take pytest down)
    filler = _fill(small_disk)
    opener = ("import sys, seglog\n"
              "try:\n    seglog.Log.open(sys.argv[1]).close()\n    print('opened')\n"
              "except seglog.StorageError as e:\n    print('storage error')\n")
    q = subprocess.run([sys.executable, "-c", opener, str(path)], capture_output=True,
                       text=True, timeout=60)
    assert q.returncode == 0, f"open on a full disk died: {q.returncode} {q.stderr}"
    assert q.stdout.strip() in ("opened", "storage error")
    with Log.open(path, readonly=True) as reader:
        _check(reader, 3000)
    os.unlink(filler)
    with Log.open(path) as log:
        _check(log, 3000)


def test_platform_fallbacks_round_trip(tmp_path):
    """The fallbacks macOS takes, exercised here: data and indexes round-trip."""
    with platform_fallbacks(), \
            Log.open(tmp_path / "l", segment_bytes=64 << 10, index_interval_bytes=128) as log:
        for i in range(0, 3000, 50):
            log.append_batch([value(j) for j in range(i, i + 50)])
        for i in range(3000, 3500):
            log.append(value(i))
        assert len(log.segments) > 3
    with Log.open(tmp_path / "l") as log:
        _check(log, 3500)
        assert next(iter(log.read(2999))).value == value(2999)


def test_platform_fallbacks_reserve_blocks_without_fallocate(tmp_path):
    """Under ``platform_fallbacks`` no ``posix_fallocate`` is made: one that would fail
    fails nothing; outside it, the same failure is the append's ``StorageError``."""
    path = tmp_path / "l"
    path.mkdir()
    with FaultyFS(str(path)) as fs:
        fs.fail("fallocate", nth=1, times=None)
        with platform_fallbacks(), Log.open(path, segment_bytes=64 << 10) as log:
            for i in range(0, 2000, 50):
                log.append_batch([value(j) for j in range(i, i + 50)])
            assert len(log.segments) >= 3          # blocks reserved for three files
        with Log.open(path, segment_bytes=64 << 10) as log:
            with pytest.raises(seglog.StorageError):
                for i in range(2000, 4000, 50):
                    log.append_batch([value(j) for j in range(i, i + 50)])
    with Log.open(path) as log:
        _check(log, 2000)


def test_storage_error_keeps_the_errno(small_disk):
    import errno
    path = small_disk / "log"
    filler = _fill(small_disk)
    os.truncate(filler, os.path.getsize(filler) - (256 << 10))   # room to create the log
    code = ("import errno, sys, seglog\n"
            "log = seglog.Log.open(sys.argv[1], segment_bytes=1 << 20, flush_ms=None)\n"
            "try:\n"
            "    while True:\n"
            "        log.append(b'x' * 4000)\n"
            "except seglog.StorageError as e:\n"
            "    print(errno.errorcode.get(e.errno))\n")
    p = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == errno.errorcode[errno.ENOSPC]

"""Behaviours an adversarial review of bounded descriptors, the consumer's asyncio
and topic growth found missing, each pinned by the test that showed it: a file
whose inode number another file took, a stalled ``sendfile``, a ``Segment``
walked while its descriptor is closed as idle, async waits beyond the worker
pool. Every wait has a deadline."""

from __future__ import annotations

import asyncio
import fcntl
import os
import termios
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

"""Helpers any test module may share: waiting for an event with a deadline, and filling
a topic with numbered messages. Helpers of one subsystem live beside its tests
(consumers.py for the consumer groups, mw_harness.py for several writers)."""

from __future__ import annotations

import os
import time
from typing import Any, Callable

from seglog import Topic
from seglog._codec import format as _format
from seglog.codec import BatchHeader


def wait_for(cond: Callable[[], Any], timeout: float, what: str, step: float = 0.02) -> Any:
    """``cond()``'s first true value, polled every ``step`` s; AssertionError naming
    ``what`` when it is still false after ``timeout`` s (checked once more at the
    deadline, so a slow machine that got there in time is not failed)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


def fill(topic: Topic, n: int, start: int = 0) -> None:
    """Messages ``m<i>`` for i in [start, start + n), message i in partition
    i % partitions (so it is at offset i // partitions there)."""
    for i in range(start, start + n):
        topic.append(b"m%06d" % i, partition=i % topic.num_partitions)


def header(data: Any, pos: int = 0) -> BatchHeader:
    """The batch header at ``pos`` by its fields, whatever its bytes say (the codec's
    ``read_header`` refuses impossible framing): for tests that make bad batches."""
    return BatchHeader._make(_format.HEADER.unpack_from(data, pos))


def put_header(buf: Any, pos: int, hdr: BatchHeader) -> None:
    """Write ``hdr`` at ``pos`` of ``buf`` (a bytearray)."""
    _format.HEADER.pack_into(buf, pos, *hdr)


def fds_into(directory: str) -> list[str]:
    """Names of the files under ``directory`` this process has a descriptor open on
    (Linux: ``/proc/self/fd``)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue                         # the listing's own descriptor, closed
        if target.startswith(directory + os.sep):
            out.append(os.path.basename(target))
    return sorted(out)

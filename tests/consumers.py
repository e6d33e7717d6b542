"""Helpers shared by the consumer-group tests (test_groups.py, test_consumer_api.py,
test_async.py, test_group_shutdown.py): what a consumer owns, seen through its public
API, and waiting for a condition with a deadline."""

from __future__ import annotations

import os
import shutil
import time

from seglog import Consumer, InvalidConfigError, Topic


def owned(c: Consumer) -> set[tuple[str, int]]:
    """The partitions ``c`` has claimed (reads now): those of its assignment with a
    position (one assigned but not yet handed over by its previous owner has none)."""
    out = set()
    for tp in c.assignment():
        try:
            c.position(*tp)
        except InvalidConfigError:
            continue
        out.add(tp)
    return out


def wait_for(cond, timeout: float, what: str, step: float = 0.02):
    """``cond()``'s first true value, polled every ``step`` s; AssertionError after
    ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def fill(topic: Topic, n: int, start: int = 0) -> None:
    """Messages ``m<i>`` for i in [start, start + n), message i in partition
    i % partitions (so it is at offset i // partitions there)."""
    for i in range(start, start + n):
        topic.append(b"m%06d" % i, partition=i % topic.num_partitions)


def delete_topic(root: str, name: str, record_first: bool = True) -> None:
    """Delete a topic as docs/GROUPS.md says: its record and its partitions' logs
    (its writers closed), in either order."""
    record = os.path.join(root, "__topics", f"{name}.json")
    logs = [os.path.join(root, d) for d in os.listdir(root)
            if d.rpartition("-")[0] == name and d.rpartition("-")[2].isdigit()]
    if record_first:
        os.remove(record)
    for d in logs:
        shutil.rmtree(d)
    if not record_first:
        os.remove(record)

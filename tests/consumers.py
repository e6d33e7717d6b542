"""Helpers shared by the consumer-group tests (test_groups.py, test_consumer_api.py,
test_consumer_shutdown.py, test_group_topic_lifecycle.py): what a consumer owns, seen
through its public API, and deleting a topic. Waiting and filling: helpers.py."""

from __future__ import annotations

import os
import shutil

from seglog import Consumer, InvalidConfigError


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

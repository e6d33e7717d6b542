"""Finding partitions in a broker's log dirs: directory names, the checkpoint files a
broker keeps beside them (``log-start-offset-checkpoint`` in the log dir,
``leader-epoch-checkpoint`` in the partition's), and which copy of a partition found
in several log dirs is the one to read.

A partition's directory is ``<topic>-<partition>``; a move or a delete in progress
leaves ``<topic>-<partition>.<id>-future`` / ``-delete`` (``-stray`` in KRaft), which
are ignored. Read-only: files are read, never written.
"""

from __future__ import annotations

import os
import re

from ..errors import NotALogError
from ._segments import SEGMENT_NAME, list_segments, read_file

_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")


def parse_name(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a partition directory's name, None for any other name
    (a ``-delete``, ``-future`` or ``-stray`` directory among them)."""
    m = _PARTITION_DIR.match(name)
    if m is None:
        return None
    return m.group(1), int(m.group(2))


def _checkpoint_lines(path: str) -> list[list[str]]:
    """The entries of a broker checkpoint file (a version line, a count line, then one
    entry a line); [] when missing or not of that shape."""
    try:
        text = read_file(path).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    lines = text.splitlines()
    if len(lines) < 2 or not lines[1].strip().isdigit():
        return []
    count = int(lines[1])
    entries = [ln.split() for ln in lines[2:2 + count]]
    return entries if len(entries) == count else []


def recorded_start(log_dir: str, topic: str, partition: int) -> int | None:
    """The log start offset the broker recorded for the partition in its log dir's
    ``log-start-offset-checkpoint``, if any."""
    for e in _checkpoint_lines(os.path.join(log_dir, "log-start-offset-checkpoint")):
        if len(e) == 3 and e[0] == topic and e[1] == str(partition) and e[2].isdigit():
            return int(e[2])
    return None


def leader_epoch(partition_dir: str) -> int:
    """The last leader epoch in the partition's ``leader-epoch-checkpoint`` (-1: none)."""
    epochs = [int(e[0]) for e in _checkpoint_lines(
        os.path.join(partition_dir, "leader-epoch-checkpoint"))
        if len(e) == 2 and e[0].lstrip("-").isdigit()]
    return max(epochs, default=-1)


def _end(partition_dir: str) -> int:
    segs = list_segments(partition_dir)
    return segs[-1].end_offset() if segs else -1


def candidates(log_dirs: list[str]) -> dict[tuple[str, int], list[str]]:
    """Every partition directory under the log dirs, by (topic, partition)."""
    found: dict[tuple[str, int], list[str]] = {}
    for d in log_dirs:
        if not os.path.isdir(d):
            raise NotALogError(f"{d}: no such log dir")
        for name in sorted(os.listdir(d)):
            tp = parse_name(name)
            path = os.path.join(d, name)
            if tp is None or not os.path.isdir(path):
                continue
            if not any(SEGMENT_NAME.match(n) for n in os.listdir(path)) and \
                    not os.path.exists(os.path.join(path, "partition.metadata")):
                continue            # not a partition: no segment, no partition metadata
            found.setdefault(tp, []).append(path)
    return found


def best_copy(paths: list[str]) -> str:
    """The copy to read: the highest leader epoch, then the highest end offset (a
    replica that fell behind, or the old copy of a move, loses), then the first given."""
    if len(paths) == 1:
        return paths[0]
    ranked = sorted(enumerate(paths),
                    key=lambda kp: (leader_epoch(kp[1]), _end(kp[1]), -kp[0]))
    return ranked[-1][1]


def list_partitions(log_dirs: list[str]) -> dict[tuple[str, int], str]:
    """{(topic, partition): the directory to read}, sorted by topic and partition."""
    found = candidates(log_dirs)
    return {tp: best_copy(found[tp]) for tp in sorted(found)}

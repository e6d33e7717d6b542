"""What a path given to the ``seglog`` command is: a log, a root of topics and its
partitions, or neither (``NotALogError`` with a message that says which)."""

from __future__ import annotations

import os

from . import repair
from ._files import MARKER, list_topics
from .consumer_group import GROUPS_DIR
from .errors import NotALogError
from .topic import read_partition_count


# -- what a path is --------------------------------------------------------------------
def is_log(path: str) -> bool:
    """``path`` holds a log (its marker file)."""
    return os.path.isfile(os.path.join(path, MARKER))


def not_a_log(path: str) -> str:
    """Why ``path`` is not a log, for a message."""
    if not os.path.isdir(path):
        return no_dir(path)
    return f"{path} is not a seglog log (no {MARKER})"


def no_dir(path: str) -> str:
    """Why ``path`` is no directory: missing, or something else (a file) is there."""
    if os.path.lexists(path):
        return f"{path} is not a directory: give a log directory or a root of topics"
    return f"{path}: no such directory"


def require_log(path: str) -> None:
    if not is_log(path):
        raise NotALogError(not_a_log(path))


def partitions(root: str, topic: str | None = None) -> list[tuple[str, int, str]]:
    """(topic, partition, log directory) under a topic root, in order. A partition
    the topic records but whose directory is missing is listed too: callers say so."""
    if not os.path.isdir(root):
        raise NotALogError(no_dir(root))
    out: list[tuple[str, int, str]] = []
    names = sorted(os.listdir(root))
    topics = set(list_topics(root))
    for n in names:
        t, _, num = n.rpartition("-")
        if t and num.isdigit() and is_log(os.path.join(root, n)):
            topics.add(t)
    for t in sorted(topics):
        if topic is not None and t != topic:
            continue
        count = read_partition_count(root, t)
        ps = range(count) if count else sorted(
            int(n.rpartition("-")[2]) for n in names
            if n.rpartition("-")[0] == t and n.rpartition("-")[2].isdigit())
        for p in ps:
            out.append((t, p, os.path.join(root, f"{t}-{p}")))
    if not out:
        raise NotALogError(f"{root} is neither a seglog log (no {MARKER}) nor a root of "
                           f"topics" + (f" holding {topic!r}" if topic else ""))
    return out


def logs_at(path: str) -> list[tuple[str, str]]:
    """(name, log directory) for a log or every partition under a root."""
    if is_log(path):
        return [(os.path.basename(os.path.abspath(path)), path)]
    return [(f"{t}-{p}", d) for t, p, d in partitions(path)]


def dir_bytes(path: str) -> int:
    """The segment files' sizes (a progress total; files may vanish meanwhile)."""
    total = 0
    for _, p in repair.segment_paths(path):
        try:
            total += os.path.getsize(p)
        except FileNotFoundError:
            pass
    return total


def total_bytes(logs: list[tuple[str, str]]) -> int:
    return sum(dir_bytes(d) for _, d in logs if is_log(d))


def missing_report(d: str) -> repair.CheckReport:
    """A partition the topic records whose log is not there: damage."""
    return repair.CheckReport(path=d, problems=[repair.Problem(
        d, None, None, "missing", f"the topic has this partition, but {not_a_log(d)}")])


def require_root(root: str) -> None:
    """``root`` is a root of topics: a directory (not a log) holding topics or groups."""
    if is_log(root):
        raise NotALogError(f"{root} is a log directory, not a root of topics: give the "
                           f"directory that holds the topics")
    if not os.path.isdir(root):
        raise NotALogError(f"{root} is not a directory: give a root of topics")
    if not os.path.isdir(os.path.join(root, GROUPS_DIR)):
        partitions(root)          # NotALogError unless it holds topics

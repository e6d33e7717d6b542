"""What a path given to the ``seglog`` command is: a log, a root of topics (its
partitions, and the plain logs beside them), or neither (``NotALogError`` with a
message that says which).

``find_logs`` is the one place that decides what a directory under a root is
(``kind_of``); a new kind of log directory is a new answer there and a reader for
it in the commands, nothing else."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .. import repair
from .._runtime.files import MARKER, TOPICS_DIR, list_topics
from ..consumer_group import GROUPS_DIR
from ..errors import NotALogError
from ..topic import read_partition_count


# -- what a path is --------------------------------------------------------------------
def is_log(path: str) -> bool:
    """``path`` holds a log (its marker file)."""
    return os.path.isfile(os.path.join(path, MARKER))


def kind_of(path: str) -> str | None:
    """The kind of log directory ``path`` is (``"seglog"``), None if none."""
    if is_log(path):
        return "seglog"
    return None


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
    out = _partitions(root, sorted(os.listdir(root)), topic)
    if not out:
        raise NotALogError(f"{root} is neither a seglog log (no {MARKER}) nor a root of "
                           f"topics" + (f" holding {topic!r}" if topic else ""))
    return out


def _partitions(root: str, names: list[str], topic: str | None = None
                ) -> list[tuple[str, int, str]]:
    out: list[tuple[str, int, str]] = []
    topics = set(list_topics(root))
    for n in names:
        t, _, num = n.rpartition("-")
        if t and num.isdigit() and t not in topics and is_log(os.path.join(root, n)):
            # a log named like a partition of a topic that has no record: one only
            # if its neighbours make a topic of it (name-0, name-1, ...)
            if num == "0" or f"{t}-0" in names:
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
    return out


@dataclass
class Target:
    """One log a command reads: its name (``orders-3``, or a plain log's directory
    name), directory, kind (``kind_of``) and, for a partition, topic and number;
    ``missing``: a partition the topic records whose directory is not a log."""

    name: str
    path: str
    kind: str | None
    topic: str | None = None
    partition: int | None = None

    @property
    def missing(self) -> bool:
        return self.kind is None


@dataclass
class Found:
    """What ``find_logs`` found: the logs, and the entries of a root it left out,
    each with why."""

    targets: list[Target] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def find_logs(path: str) -> Found:
    """The logs at ``path``: the log itself, or under a root every topic's partitions
    (a recorded partition without its log is listed as missing) and every other
    log directory beside them; the root's other entries are listed as skipped.
    ``NotALogError`` if ``path`` is no directory, or a directory holding none."""
    k = kind_of(path)
    if k is not None:
        return Found([Target(os.path.basename(os.path.abspath(path)), path, k)])
    if not os.path.isdir(path):
        raise NotALogError(no_dir(path))
    names = sorted(os.listdir(path))
    found = Found()
    taken = set()
    for t, p, d in _partitions(path, names):
        found.targets.append(Target(f"{t}-{p}", d, kind_of(d), t, p))
        taken.add(os.path.basename(d))
    for n in names:
        if n in taken or n in (TOPICS_DIR, GROUPS_DIR) or n.startswith("."):
            continue
        d = os.path.join(path, n)
        k = kind_of(d)
        if k is not None:
            found.targets.append(Target(n, d, k))
        elif os.path.isdir(d):
            found.skipped.append((n, f"a directory without {MARKER}: not a log"))
        else:
            found.skipped.append((n, "not a directory"))
    if not found.targets:
        raise NotALogError(f"{path} is neither a seglog log (no {MARKER}) nor a directory "
                           f"of logs or topics")
    found.targets.sort(key=lambda x: (x.topic is None, x.topic or x.name, x.partition or 0))
    return found


def logs_at(path: str) -> list[tuple[str, str]]:
    """(name, log directory) for a log or every log under a root."""
    return [(t.name, t.path) for t in find_logs(path).targets]


def total_bytes(targets: list[Target]) -> int:
    """Bytes of data in the logs (a progress total, without reserved zeros)."""
    total = 0
    for t in targets:
        if not t.missing:
            try:
                total += repair.data_bytes(t.path)
            except (NotALogError, OSError):
                pass          # said by the command that reads it
    return total


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

"""Delete policy: which whole segments expire by age (``retention_ms``) and total size
(``retention_bytes``), and the mechanics of deleting them.

Deletion is in two steps, as in Kafka: a deleted segment's files are renamed aside
(``.seglog-deleted.<name>``) at once and unlinked ``file_delete_delay_ms`` later, by
the process's maintenance thread, the next pass, or ``close()``; a writer that opens
the log removes leftovers. Readers that already hold a segment keep reading it
either way (they hold open descriptors); the delay serves readers that listed the
directory but have not opened the files yet.

This module knows segments only through the ``_Expirable`` shape (size, largest
timestamp, file paths); the log decides when to apply it and swaps its segment
list itself.
"""

from __future__ import annotations

import os
import time
from typing import Protocol, Sequence

from ._runtime.files import (DELETED, SEGMENT_SUFFIXES, fsync_dir, is_leftover, list_segments,
                             remove, segment_base, segment_path)


class _Expirable(Protocol):
    @property
    def size(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...


class _Deletable(Protocol):
    path: str
    index_path: str
    timeindex_path: str


def expired_prefix(segments: Sequence[_Expirable], now_ms: int, retention_ms: int | None,
                   retention_bytes: int | None) -> int:
    """How many of the oldest sealed segments are due for deletion (pure).

    A segment is due when its largest timestamp is more than ``retention_ms`` old,
    or while the log without it still holds at least ``retention_bytes``. Only a
    prefix of the segments is deleted, and never the last (active) one.
    """
    total = sum(s.size for s in segments) if retention_bytes is not None else 0
    n = 0
    for seg in segments[:-1]:
        by_time = retention_ms is not None and now_ms - seg.max_timestamp > retention_ms
        by_size = retention_bytes is not None and total - seg.size >= retention_bytes
        if not (by_time or by_size):
            break
        total -= seg.size
        n += 1
    return n


class DelayedDeletes:
    """Files of deleted segments, renamed aside and waiting for their delay to pass.

    Not thread-safe: the log calls it under its maintenance lock.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._due: list[tuple[float, list[str]]] = []

    def __len__(self) -> int:
        return len(self._due)

    def delete(self, segments: Sequence[_Deletable], delay_ms: int) -> None:
        """Remove the segments' files: at once (``delay_ms`` 0), or renamed aside now
        and unlinked by ``purge`` once ``delay_ms`` has passed. The directory is
        fsynced before this returns."""
        for seg in segments:
            paths = (seg.path, seg.index_path, seg.timeindex_path)
            if not delay_ms:
                for p in paths:
                    remove(p)
                continue
            names = []
            for p in paths:
                aside = os.path.join(os.path.dirname(p), DELETED + os.path.basename(p))
                try:
                    os.rename(p, aside)
                    names.append(aside)
                except FileNotFoundError:
                    pass
            self._due.append((time.monotonic() + delay_ms / 1000.0, names))
        fsync_dir(self.directory)

    def purge(self, everything: bool = False) -> int:
        """Unlink renamed-aside files whose delay has passed (all with ``everything``);
        return how many segments' files went."""
        now = time.monotonic()
        due = [e for e in self._due if everything or e[0] <= now]
        if not due:
            return 0
        self._due = [e for e in self._due if e not in due]
        for _, names in due:
            for name in names:
                remove(name)
        fsync_dir(self.directory)
        return len(due)


def remove_leftovers(directory: str) -> None:
    """At a writer's open: seglog's own leftovers (files renamed aside by retention,
    temp files of checkpoints and indexes, cleaned files no swap committed) are gone
    for good. Only names of seglog's exact forms are removed."""
    gone = False
    for name in os.listdir(directory):
        if is_leftover(name):
            gone = remove(os.path.join(directory, name)) or gone
    if gone:
        fsync_dir(directory)


def remove_orphans(directory: str, start: int, active_base: int, delay_ms: int) -> None:
    """What writers killed or stopped for good left behind, while other writers go on
    (a joining writer's open, every retention pass; the first writer's open removes
    all leftovers with ``remove_leftovers``). Each is provably seglog's and nobody's:
    files renamed aside by retention whose delay has passed (a rename sets the
    file's change time, so any process can tell); index files whose ``.log`` is gone,
    below the active segment (a delete cut short: a segment being made has its
    ``.log`` first); segments wholly below the log ``start`` (a retention pass that
    checkpointed the start and died before its delete), renamed aside as retention
    renames them, for the next pass to remove past the delay."""
    names = os.listdir(directory)
    changed = False
    now = time.time()
    for name in names:
        if name.startswith(DELETED) and is_leftover(name):
            path = os.path.join(directory, name)
            try:
                changed_at = os.stat(path).st_ctime
            except FileNotFoundError:
                continue
            if now - changed_at >= delay_ms / 1000.0:
                changed = remove(path) or changed
    bases = list_segments(directory, names)
    have_log = set(bases)
    for name in names:
        base = segment_base(name)
        if (base is not None and not name.endswith(".log") and base not in have_log
                and base < active_base):
            changed = remove(os.path.join(directory, name)) or changed
    for base, nxt in zip(bases, bases[1:]):
        if nxt > start or base >= active_base:
            break
        for ext in SEGMENT_SUFFIXES:
            path = segment_path(directory, base, ext)
            try:
                os.rename(path, os.path.join(directory, DELETED + os.path.basename(path)))
                changed = True
            except FileNotFoundError:
                pass
    if changed:
        fsync_dir(directory)

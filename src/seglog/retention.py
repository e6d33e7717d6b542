"""Delete policy: whole segments by age (``retention_ms``) and total size (``retention_bytes``).

Deletion is in two steps, as in Kafka: a deleted segment's files are renamed aside
(``.seglog-deleted.<name>``) at once and unlinked ``file_delete_delay_ms`` later, by the log's
maintenance thread, the next pass, or ``close()``; a writer that opens the log
removes leftovers. Readers that already hold a segment keep reading it either way
(they hold open descriptors); the delay serves readers that listed the directory
but have not opened the files yet.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from ._fs import DELETED, LOG_START, fsync_dir, is_leftover, remove, write_checkpoint

if TYPE_CHECKING:
    from .log import Log
    from .segment import Segment


def expired_prefix(segments: tuple["Segment", ...], now_ms: int, retention_ms: int | None,
                   retention_bytes: int | None) -> int:
    """How many of the oldest sealed segments are due for deletion.

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


def enforce(log: "Log", now_ms: int) -> list[int]:
    """Apply the delete policy to ``log``; return the deleted segments' base offsets.

    The new log start offset is checkpointed (durably) before any file is removed,
    so a crash in between leaves segments below the start offset, which the next
    pass deletes, and never a start offset pointing at deleted data.
    """
    cfg = log.config
    if not cfg.deletes:
        return []
    with log._maintenance:
        log._check_writable()
        purge_due(log)
        segs = log._segs
        n = expired_prefix(segs, now_ms, cfg.retention_ms, cfg.retention_bytes)
        if not n:
            return []
        doomed = segs[:n]
        new_start = segs[n].base_offset
        write_checkpoint(log.path, LOG_START, new_start)
        with log._lock:   # appends only add segments at the end: the prefix is ours
            log._start = max(log._start, new_start)
            log._set_segments(log._segs[n:])
        # readers of this process re-find their place; the files close once no read is
        # in flight (readers in other processes are what the delay is for)
        log._retire(doomed, "deleted by retention")
        delay = cfg.file_delete_delay_ms
        for seg in doomed:
            if delay:
                schedule_delete(log, seg, delay)
            else:
                seg.delete()
        fsync_dir(log.path)
    return [s.base_offset for s in doomed]


def schedule_delete(log: "Log", seg: "Segment", delay_ms: int) -> None:
    """Rename the segment's files aside now; unlink them after ``delay_ms``."""
    names = []
    for p in (seg.path, seg.index_path, seg.timeindex_path):
        aside = os.path.join(os.path.dirname(p), DELETED + os.path.basename(p))
        try:
            os.rename(p, aside)
            names.append(aside)
        except FileNotFoundError:
            pass
    log._pending_deletes.append((time.monotonic() + delay_ms / 1000.0, names))


def purge_due(log: "Log", everything: bool = False) -> int:
    """Unlink renamed-aside files whose delay has passed (all with ``everything``)."""
    now = time.monotonic()
    due = [(t, names) for t, names in log._pending_deletes if everything or t <= now]
    if not due:
        return 0
    log._pending_deletes[:] = [e for e in log._pending_deletes if e not in due]
    for _, names in due:
        for name in names:
            remove(name)
    fsync_dir(log.path)
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

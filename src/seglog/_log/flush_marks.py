"""What of a writer's log survives power loss, and when the next append must flush.

``FlushMarks`` belongs to one ``LocalLog`` and changes only through its methods: an
fsync reached an offset (``reached``), a roll sealed everything before a new base
offset (``sealed_through``), another writer fsynced and checkpointed (``followed``),
the clean shutdown (``closed_clean``). The recovery-point checkpoint is written here,
under the innermost lock (a flush and a roll both get here), and only ever moves up.
"""

from __future__ import annotations

import threading

from .._runtime.files import RECOVERY_POINT, write_checkpoint
from .._codec.format import NEVER


class FlushMarks:
    """``flushed``: every offset below it was fsynced; the checkpoint says so up to
    the last ``checkpoint``; an append at or past ``flush_at`` flushes (every
    ``flush_messages`` messages; never if None)."""

    __slots__ = ("_path", "_every", "_flushed", "_checkpointed", "_flush_at", "_lock")

    def __init__(self, path: str, flushed: int, checkpointed: int, every: int | None) -> None:
        self._path = path
        self._every = every
        self._flushed = flushed
        self._checkpointed = checkpointed
        self._flush_at = NEVER
        self._lock = threading.Lock()
        self._moved()

    @property
    def flushed(self) -> int:
        return self._flushed

    @property
    def flush_at(self) -> int:
        return self._flush_at

    def _moved(self) -> None:
        if self._every is not None:
            self._flush_at = self._flushed + self._every - 1

    def checkpoint(self, offset: int) -> None:
        """Durably record that every offset below ``offset`` was fsynced (monotonic:
        a lower offset writes nothing)."""
        with self._lock:
            if offset <= self._checkpointed:
                return
            write_checkpoint(self._path, RECOVERY_POINT, offset)
            self._checkpointed = offset

    def reached(self, target: int) -> bool:
        """An fsync covered every offset below ``target``: checkpointed, then the
        flushed offset moves; True if it moved."""
        self.checkpoint(target)
        if target <= self._flushed:
            return False
        self._flushed = target
        self._moved()
        return True

    def sealed_through(self, end: int) -> None:
        """A roll fsynced the sealed segment: everything below ``end`` is flushed (the
        roller checkpoints it once the new segment is published)."""
        if self._flushed < end:
            self._flushed = end
            self._moved()

    def followed(self, flushed: int) -> None:
        """Another writer fsynced up to ``flushed`` and checkpointed it."""
        self._checkpointed = max(self._checkpointed, flushed)
        if flushed > self._flushed:
            self._flushed = flushed
            self._moved()

    def closed_clean(self, end: int) -> None:
        """The clean shutdown sealed everything below ``end``: checkpointed as it is,
        whatever was checkpointed before."""
        with self._lock:
            write_checkpoint(self._path, RECOVERY_POINT, end)
            self._checkpointed = end
        self._flushed = end

    def after_fork(self) -> None:
        """A forked child's copy: a new lock (a parent thread may have held it)."""
        self._lock = threading.Lock()

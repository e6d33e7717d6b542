"""``SegmentFile``: a segment's ``.log`` descriptor as one ``Segment`` object holds it.

Opened read-only on first use (or read-write when the segment becomes the writer's
active one), closed once, and refused with ``SegmentGoneError`` once the log retired
the segment (deleted by retention, replaced by compaction, closed with its log): a
reader holding the object then re-finds its place through the log.
"""

from __future__ import annotations

import io
import os
import threading
from typing import Callable

from .._runtime.files import fsync_file
from ..errors import OffsetOutOfRangeError

Stamp = tuple[int, int, int, int]
_UNKNOWN: Stamp = (-1, -1, -1, -1)


def _stamp(st: os.stat_result) -> Stamp:
    # a file made under a freed inode number (ext4 gives one to the next file it
    # creates) differs from the old one in its size or the time its bytes were
    # written; not in the change time, which a hard link or chmod moves too
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class SegmentGoneError(OffsetOutOfRangeError):
    """The segment was deleted by retention, replaced by compaction or closed with its
    log; its files are no longer this object's. Read through the ``Log``, which
    finds the current segment."""


class SegmentFile:
    """One segment's ``.log`` descriptor. ``lock`` guards lazy opens and the final
    close (two threads opening at once must not both open: one descriptor would be
    closed under the other); the segment's lazy index loads take it too. ``gone``
    says why the file is no longer this object's (None while it is)."""

    def __init__(self, path: str, what: str) -> None:
        self.path = path
        self.what = what                # "segment <base> of <directory>", for errors
        self.fio: io.FileIO | None = None
        self.lock = threading.RLock()
        self.gone: str | None = None
        # the file first opened (device, inode): a reopen after ``close`` must find
        # the same file at the path, not one compaction renamed in since
        self.identity: tuple[int, int] | None = None
        # the file as it was when ``close`` let go of it: once no descriptor holds
        # the inode, its number may be given to another file, so a reopen (or a
        # re-listing) compares this, not the number alone
        self.closed_as: Stamp | None = None
        # called (holding ``lock``) after each lazy open: its log counts open files
        self.on_open: Callable[[], None] | None = None

    @staticmethod
    def create(log_path: str, *others: str) -> None:
        """Create a new segment's empty files: the ``.log`` must not exist yet, the
        others (its indexes) are emptied if they do."""
        os.close(os.open(log_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644))
        for p in others:
            os.close(os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644))

    def check_present(self) -> None:
        """``SegmentGoneError`` once the segment is retired."""
        if self.gone is not None:
            raise SegmentGoneError(f"{self.what} was {self.gone}")

    def get(self) -> io.FileIO:
        """The descriptor, opened read-only on first use and again after ``close``
        (``SegmentGoneError`` if another file took the path meanwhile)."""
        f = self.fio
        if f is None:
            with self.lock:
                self.check_present()
                if self.fio is None:
                    try:
                        f = io.FileIO(self.path, "r")
                    except FileNotFoundError:
                        # retired since the check (retention renames or removes the
                        # files after retiring it): gone, not vanished
                        self.check_present()
                        raise
                    self.fio = self._checked(f)
                    self.opened()
                f = self.fio
        return f

    def inode(self) -> int:
        """The inode of the file this object reads (opened now if it never was)."""
        if self.identity is None:
            self.get()
        assert self.identity is not None
        return self.identity[1]

    def watch(self, on_open: Callable[[], None]) -> None:
        """Call ``on_open()`` (holding ``lock``) after each lazy open; the first watcher
        stays."""
        if self.on_open is None:
            self.on_open = on_open

    def opened(self) -> None:
        """Files of the segment were opened on use: tell ``on_open``."""
        if self.on_open is not None:
            self.on_open()

    def at_path(self) -> bool:
        """Is the file at the path the one this object read (True if it never opened
        it; False if the path is gone)?"""
        if self.identity is None:
            return True
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        if (st.st_dev, st.st_ino) != self.identity:
            return False
        if self.fio is not None:
            return True         # held open: nothing else can have its inode number
        return self.closed_as is not None and _stamp(st) == self.closed_as

    def _checked(self, f: io.FileIO) -> io.FileIO:
        st = os.fstat(f.fileno())
        identity = st.st_dev, st.st_ino
        if self.identity is None:
            self.identity = identity
        elif identity != self.identity or (self.closed_as is not None
                                           and _stamp(st) != self.closed_as):
            f.close()
            self.retire("replaced on disk (by compaction) while its files were closed")
            self.check_present()
        self.closed_as = None
        return f

    def open_for_writing(self) -> io.FileIO:
        """Reopen read-write for the writer (it may have been opened read-only to
        check the indexes)."""
        if self.fio is not None:
            self.fio.close()
        self.fio = self._checked(io.FileIO(self.path, "r+"))
        return self.fio

    def fsync(self) -> None:
        """fsync the file if this object has it open."""
        if self.fio is not None:
            fsync_file(self.fio.fileno())

    def sendfile(self, out: int, pos: int, count: int) -> int:
        """``os.sendfile`` from the file; the descriptor cannot be closed (and its
        number reused) meanwhile."""
        with self.lock:
            return os.sendfile(out, self.get().fileno(), pos, count)

    def close(self) -> None:
        """Close the descriptor (the caller holds ``lock``); a later use reopens it
        (the same file) unless the segment is retired."""
        f = self.fio
        if f is not None:
            try:
                self.closed_as = _stamp(os.fstat(f.fileno()))
            except OSError:
                self.closed_as = _UNKNOWN   # a reopen takes it for another file
            self.fio = None
            f.close()

    def retire(self, why: str) -> None:
        """From now on uses raise ``SegmentGoneError`` naming ``why``."""
        if self.gone is None:
            self.gone = why

    def reset_lock(self) -> None:
        """In a forked child: a new lock (another thread of the parent may have held
        it at the fork)."""
        self.lock = threading.RLock()

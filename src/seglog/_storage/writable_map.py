"""``WritableMap``: the active segment's file mapped read-write, and the disk blocks
reserved ahead of its write position.

The file is mapped whole to its capacity, but its length follows its reservation, as
Kafka's log file follows its data: blocks are reserved with ``posix_fallocate``
ahead of the writer (which extends the file to them), so that a full disk is an
``OSError`` on a system call, never a SIGBUS on a page fault, and nothing past the
file's end is ever touched; copies and backups of a log move its data and a chunk
of reserved zeros, not a gigabyte. The reserved pages are faulted in ahead (by the
process's prefaulter thread when it can work, else here).
The segment holds one while it is active and does the copies into ``mm`` itself;
the map lock keeps the prefaulter's work and unmapping apart (rule R8).
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from typing import TYPE_CHECKING, Callable, Sequence

from .._runtime import platform as _platform, prefault as _prefault
from .._runtime.files import hand_on

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

# blocks are reserved in chunks that grow with the segment: as much again as it has
# reserved, from 64 KiB up to 8 MiB, so a small log reserves little disk and a busy
# one makes few reserving calls
_MIN_CHUNK = 64 << 10
_ALLOC_CHUNK = 8 << 20
_ZEROS = bytes(1 << 16)
# with a prefaulter thread, reserve the next chunk this far (half a chunk at most)
# before the reserved end, so that the thread faults pages in while the writer still
# has some to fill
_LEAD = 4 << 20
_POPULATE: int | None = _prefault.POPULATE


def _disable_populate() -> None:
    global _POPULATE
    _POPULATE = None


def _map_whole(fd: int, capacity: int, length: int) -> mmap.mmap:
    """Map ``capacity`` bytes of the file ``fd`` of ``length`` bytes. CPython maps no
    further than a file's end, so a shorter file is extended (sparse) for the mapping
    and cut back to ``length`` at once: the pages past its end are never touched (the
    writer reserves, which extends the file, before writing). The caller holds the
    append lock: nobody reserves (extends the file) in between."""
    if length >= capacity:
        return mmap.mmap(fd, capacity)
    os.ftruncate(fd, capacity)
    try:
        return mmap.mmap(fd, capacity)
    finally:
        os.ftruncate(fd, length)


class WritableMap:
    """The writable map of file ``fd`` (mapped to ``capacity``, at least ``size``; the
    file is as long as what was reserved) with data up to ``size``. ``reserve_more(end)`` is called when blocks up to
    ``end`` have just been reserved, before any byte below it is written: the
    segment reserves index room for them there."""

    __slots__ = ("mm", "capacity", "reserved", "populated", "address", "lock",
                 "_fd", "_reserve_more")

    def __init__(self, fd: int, size: int, capacity: int,
                 reserve_more: Callable[[int], None]) -> None:
        self._fd = fd
        self._reserve_more = reserve_more
        self.capacity = max(capacity, size)
        length = os.fstat(fd).st_size
        if length < size:
            os.ftruncate(fd, size)      # never shorter than its data
            length = size
        # blocks are reserved up to ``reserved`` and pages faulted in (or written
        # through the file: ``write``) up to ``populated``
        self.reserved = size
        self.populated = size - size % mmap.PAGESIZE
        self.address = 0
        self.lock = threading.Lock()   # the prefaulter works only while mapped
        self.mm: mmap.mmap | None = _map_whole(fd, self.capacity, length)

    def grow(self, end: int, populate: bool = True) -> int:
        """Reserve disk blocks up to ``end`` and a chunk beyond (as much again as is
        reserved, 64 KiB to 8 MiB), and fault the pages in; returns the end below
        which appends need not call again. Without ``populate`` (the bytes up to
        ``end`` are about to go in through ``write``) those pages count as faulted
        in, so that the thread leaves them alone, and ``end`` is returned: the next
        append through the map calls again, and the pages past it are faulted in
        then.

        Reserving first makes a full disk an OSError here rather than a SIGBUS in a
        later page fault. Faulting pages in ahead in bulk costs a fraction of a
        page fault per 4 KiB while copying (about 9x faster writes on a VM); the
        process's prefaulter thread does it on another core when it can, else it
        is done here.
        """
        if end > self.capacity:
            raise OSError(errno.EFBIG, f"a batch ending at {end} does not fit the segment's "
                                       f"capacity {self.capacity}")
        if not populate:
            top = end - end % mmap.PAGESIZE
            if top > self.populated:
                with self.lock:         # after the thread's work in progress, if any
                    self.populated = max(self.populated, top)
        reserved = self.reserved
        chunk = min(_ALLOC_CHUNK, max(_MIN_CHUNK, reserved))
        lead = min(_LEAD, chunk >> 1)
        if end > reserved or reserved - end < lead:
            new_end = min(self.capacity, max(end, reserved + chunk))
            if new_end > reserved:
                try:
                    _platform.reserve(self._fd, reserved, new_end - reserved)
                except OSError as e:
                    if e.errno not in _platform.NO_SPACE or new_end <= end:
                        raise
                    # a nearly full disk: just what this append needs
                    new_end = end
                    _platform.reserve(self._fd, reserved, new_end - reserved)
                self._reserve_more(new_end)
                self.reserved = reserved = new_end
        if not populate:
            return end
        mm = self.mm
        # the platform's answer is read here, not copied: a test may take the fallbacks
        if mm is None or _POPULATE is None or _platform.POPULATE is None:
            return reserved
        pf = _prefault.get()
        if pf is not None:
            if self.populated < reserved:
                if not self.address:
                    self.address = _prefault.address_of(mm)
                pf.request(self)
            # come back a lead before the reserved end, to keep the thread ahead
            lead = min(_LEAD, min(_ALLOC_CHUNK, max(_MIN_CHUNK, reserved)) >> 1)
            return reserved if reserved >= self.capacity else max(end, reserved - lead)
        page = self.populated - self.populated % mmap.PAGESIZE
        try:
            mm.madvise(_POPULATE, page, reserved - page)
            self.populated = reserved
        except OSError:
            _disable_populate()
        return reserved

    def write(self, pos: int, parts: Sequence[ReadableBuffer]) -> None:
        """Write ``parts`` one after another from ``pos`` through the file, not the map
        (the same page cache, so readers of either see the same bytes): a large copy
        takes one system call per part instead of a page fault per 4 KiB, runs
        without the interpreter lock and takes several times less time (an atomic
        group, a batch of ``segment.THROUGH_FILE`` bytes or more). The blocks were
        reserved and the pages claimed (``grow`` without ``populate``)."""
        fd = self._fd
        for part in parts:
            with memoryview(part) as view:
                done, size = 0, len(view)
                while done < size:      # a short write: the rest, or the error
                    done += os.pwrite(fd, view[done:], pos + done)
            pos += size

    def hand_on(self, start: int, end: int) -> int:
        """Start the writeback of ``[start, end)``, bytes just written through the file,
        once they are ``HAND_ON`` or more (``_runtime.files.hand_on``): returns where
        the bytes not yet handed on start."""
        return hand_on(self._fd, start, end)

    def zero(self, start: int, end: int) -> None:
        """Zero ``[start, end)`` (within the file: past its end nothing was written, and
        touching the map there would fault), writing only pages not zero."""
        mm = self.mm
        assert mm is not None
        end = min(end, self.capacity, os.fstat(self._fd).st_size)
        while start < end:
            stop = min(end, start + len(_ZEROS))
            if mm[start:stop] != _ZEROS[:stop - start]:
                mm[start:stop] = _ZEROS[:stop - start]
            start = stop

    def prefault(self, prefaulter: _prefault.Prefaulter) -> None:
        """Fault in the reserved pages not yet faulted in (the prefaulter thread)."""
        with self.lock:
            lo, hi = self.populated, self.reserved
            if self.mm is None or hi <= lo or not self.address:
                return
            lo -= lo % mmap.PAGESIZE
            if prefaulter.populate(self.address + lo, hi - lo):
                self.populated = max(self.populated, hi)

    def close(self) -> None:
        """Unmap, once the prefaulter is not using the mapping."""
        with self.lock:
            if self.mm is not None:
                self.mm.close()
                self.mm = None
            self.address = 0

    def reset_lock(self) -> None:
        """In a forked child: a new lock (a thread of the parent may have held it)."""
        self.lock = threading.Lock()

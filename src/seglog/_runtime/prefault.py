"""Faulting in a writer's pages ahead of it, on another core.

Before an append can copy bytes into the active segment's mapping, the kernel must
give every new 4 KiB page a page-cache page and map it writable. Done in the
writer (``mmap.madvise(MADV_POPULATE_WRITE)``, which holds the GIL) that is about a
fifth of the cost of ``append_batch``. Here one daemon thread per process does it
instead, through ``ctypes`` (which releases the GIL), so it overlaps with the
writer's encoding and CRCs.

The thread only touches pages that the segment's allocation has already reserved with
``posix_fallocate`` (so it can never meet a full disk), and it holds the segment's
map lock while it works, so the mapping cannot be unmapped under it (rule R8). It
changes no data: if it is late or missing, the writer's copies take the page faults
themselves.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import mmap
import os
import threading
from typing import Callable, Protocol

from . import platform as _platform

# MADV_POPULATE_WRITE (Linux 5.14+): fault pages in writable, in bulk; None elsewhere
POPULATE: int | None = _platform.POPULATE


class Prefaultable(Protocol):
    """A writable map whose reserved pages the thread faults in
    (``_storage.writable_map.WritableMap``, which sits above this module)."""

    def prefault(self, prefaulter: Prefaulter) -> None: ...


class Prefaulter:
    """A daemon thread that runs ``wmap.prefault(self)`` for queued writable maps."""

    def __init__(self, madvise: Callable[..., int]) -> None:
        self.madvise = madvise
        self._queue: collections.deque[Prefaultable] = collections.deque()
        self._wake = threading.Event()
        self.disabled = False
        self._thread = threading.Thread(target=self._run, name="seglog-prefault", daemon=True)
        self._thread.start()

    def request(self, wmap: Prefaultable) -> None:
        self._queue.append(wmap)
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            while self._queue:
                # no reference to a map outlives the call: the thread must not keep
                # a closed log's objects (and any file they hold) alive
                self._work(self._queue.popleft())

    def _work(self, wmap: Prefaultable) -> None:
        try:
            wmap.prefault(self)
        except Exception:   # noqa: BLE001 - only a hint failed: the writer's copies fault instead
            return

    def populate(self, address: int, length: int) -> bool:
        """Fault in [address, address + length) writable; False if the kernel refused."""
        if self.madvise(address, length, POPULATE) == 0:
            return True
        if ctypes.get_errno() == errno.EINVAL:   # a kernel without MADV_POPULATE_WRITE
            self.disabled = True
        return False


_lock = threading.Lock()
_instance: Prefaulter | None = None
_unavailable = False


def _forget_in_child() -> None:
    # a forked child has no copy of the thread: it starts its own on first use
    global _instance, _lock
    _instance = None
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def get() -> Prefaulter | None:
    """The process's prefaulter, started on first use; None where it cannot work."""
    global _instance, _unavailable
    inst = _instance
    if inst is not None:
        return None if inst.disabled else inst
    if _unavailable or POPULATE is None:
        return None
    with _lock:
        if _instance is None and not _unavailable:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                madvise = libc.madvise
                madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                madvise.restype = ctypes.c_int
            except (OSError, AttributeError):
                _unavailable = True
                return None
            _instance = Prefaulter(madvise)
    return get()


def address_of(mm: mmap.mmap) -> int:
    """The address of a writable mapping (the buffer export is released at once)."""
    view = ctypes.c_char.from_buffer(mm)
    try:
        return ctypes.addressof(view)
    finally:
        del view

"""What seglog needs from the operating system, and the fallbacks, in one place.

Supported: Linux (every feature) and macOS (no ``posix_fallocate``: blocks are
reserved by writing zeros; no ``MADV_POPULATE_WRITE``: the writer's copies fault
pages in themselves; the boot id comes from ``sysctl kern.bootsessionuuid``).
Elsewhere (Windows: no ``fcntl.flock``, no fork) importing seglog raises
``ImportError``.
"""

from __future__ import annotations

import errno
import os
import time
import sys

if os.name != "posix":
    raise ImportError(f"seglog supports Linux and macOS (POSIX file locks and shared "
                      f"mappings); this platform is {sys.platform!r}")

import fcntl  # noqa: E402  (after the platform check: ImportError names the reason)

LINUX = sys.platform.startswith("linux")
MACOS = sys.platform == "darwin"
flock = fcntl.flock
LOCK_EX_NB = fcntl.LOCK_EX | fcntl.LOCK_NB
LOCK_EX = fcntl.LOCK_EX
LOCK_SH_NB = fcntl.LOCK_SH | fcntl.LOCK_NB
_POLL_FIRST, _POLL_MAX = 0.00002, 0.002


def lock_within(fd: int, timeout: float) -> bool:
    """``flock(fd, LOCK_EX)`` waiting at most ``timeout`` seconds; False if it did not
    come. ``flock`` cannot wait with a deadline, so a held lock is polled, backing off
    from 20 us to 2 ms (a holder that is stopped or killed never hangs the caller)."""
    try:
        flock(fd, LOCK_EX_NB)
        return True
    except BlockingIOError:
        pass
    deadline = time.monotonic() + timeout
    delay = _POLL_FIRST
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(delay, left))
        delay = min(delay * 2, _POLL_MAX)
        try:
            flock(fd, LOCK_EX_NB)
            return True
        except BlockingIOError:
            continue
LOCK_UN = fcntl.LOCK_UN

_ZEROS = bytes(1 << 20)


def _reserve_by_writing(fd: int, offset: int, length: int) -> None:
    """Reserve blocks by writing zeros (where ``posix_fallocate`` is missing). Only
    for ranges past the data: what is there already must be zeros."""
    end = offset + length
    while offset < end:
        n = os.pwrite(fd, _ZEROS[:min(len(_ZEROS), end - offset)], offset)
        offset += n


def _reserve_fallocate(fd: int, offset: int, length: int) -> None:
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as e:
        # a file system without fallocate support (EOPNOTSUPP/EINVAL): write zeros;
        # ENOSPC and the like are real answers
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, getattr(errno, "ENOTSUP", -1)):
            raise
        _reserve_by_writing(fd, offset, length)


# reserve(fd, offset, length): disk blocks for [offset, offset + length), so that a
# later write through a mapping cannot fault (SIGBUS) on a full disk
reserve = _reserve_fallocate if hasattr(os, "posix_fallocate") else _reserve_by_writing

# MADV_POPULATE_WRITE is Linux's (5.14+); the number means something else elsewhere
POPULATE: int | None = getattr(__import__("mmap"), "MADV_POPULATE_WRITE", 23) if LINUX else None
_NATIVE = (reserve, POPULATE)


def use_fallbacks(on: bool) -> None:
    """Take (``on``) or stop taking the paths of a platform without ``posix_fallocate``
    and ``MADV_POPULATE_WRITE`` (macOS): blocks reserved by writing zeros, pages not
    faulted in ahead. For ``seglog.testing.platform_fallbacks``; the whole process."""
    global reserve, POPULATE
    reserve, POPULATE = (_reserve_by_writing, None) if on else _NATIVE


def boot_id() -> str | None:
    """This boot's id (changes when the machine restarts), None if unknown."""
    if LINUX:
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                return f.read().strip() or None
        except OSError:
            return None
    if MACOS:
        try:
            import ctypes
            libc = ctypes.CDLL(None)
            size = ctypes.c_size_t(64)
            buf = ctypes.create_string_buffer(64)
            if libc.sysctlbyname(b"kern.bootsessionuuid", buf, ctypes.byref(size), None, 0) == 0:
                return buf.value.decode() or None
        except (OSError, AttributeError, ValueError):
            return None
    return None


def fsync(fd: int) -> None:
    """Make a file's (or directory's) data durable. On macOS ``fsync`` leaves it in
    the drive's cache: ``F_FULLFSYNC`` asks the drive to write it out."""
    if MACOS and hasattr(fcntl, "F_FULLFSYNC"):
        try:
            fcntl.fcntl(fd, fcntl.F_FULLFSYNC)
        except OSError:
            os.fsync(fd)   # a file system without F_FULLFSYNC: the plain one
        return
    os.fsync(fd)


# errors that mean "no space", where a smaller reservation may still succeed
NO_SPACE = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))

"""File-system primitives with the fsyncs durability needs (rules R2-R4)."""

from __future__ import annotations

import os


def fsync_file(fd: int) -> None:
    os.fsync(fd)


def fsync_dir(path: str) -> None:
    """Make the directory's entries (creates, renames, deletes) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename, fsync directory (R3)."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def remove(path: str) -> bool:
    """Unlink ``path`` if it exists; True if it did. The caller fsyncs the directory."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False

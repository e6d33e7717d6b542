"""Opening a log's directory: a readonly reader's listing, and a writer's first steps
(refuse what is not a log before creating anything, take the directory's flock,
settle the stored settings, load and recover the segments). ``Log.open`` builds
its ``Log`` over what these return.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

from . import _marker, _platform, recovery
from ._files import LOCK_FILE, list_dir, make_dirs, path_error, require_dir
from .config import LogConfig
from .errors import LogLockedError, SeglogError, StorageError
from .local_log import LocalLog, active_capacity


def open_reader(path: str, options: dict[str, Any]) -> LocalLog:
    """A readonly reader's segments, listed: settings stored in the marker with
    ``options`` applied for this reader only."""
    require_dir(path, "log", create=False)
    marker = None
    if _marker.ownership(path, list_dir(path)) == "marked":
        marker = _marker.read(path)
    cfg = (_marker.stored_config(marker, options, strict=False) if marker is not None
           else LogConfig.from_kwargs(options))
    local = LocalLog(path, cfg, True)
    try:
        local.refresh(force=True)
    except BaseException as e:
        with local.lock:
            local.close()
        if isinstance(e, OSError) and not isinstance(e, SeglogError):
            raise path_error(e, f"reading {path} failed") from e
        raise
    return local


class DirLock:
    """The directory's ``flock`` (``<path>/.lock``): taken by a writer's open before
    anything else, released by its close (or the process's end)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd      # -1: not held (a reader's, or released)

    def release(self) -> None:
        """Close the descriptor, which releases the flock; then nothing."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def drop_copy(self) -> None:
        """In a forked child: close this process's copy of the descriptor, which
        never releases the parent's flock (a child never holds it)."""
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = -1


def open_writer(path: str, options: dict[str, Any]) -> tuple[LocalLog, DirLock, recovery.Loaded]:
    """A writer's segments, loaded and recovered, under the directory's flock: the
    ``LocalLog``, the lock and what the loader found."""
    lock_fd, cfg = _lock_and_configure(path, options)
    try:
        loaded = recovery.load_for_writer(path, active_capacity(cfg), cfg.index_interval_bytes,
                                          cfg.max_index_bytes)
    except BaseException as e:
        os.close(lock_fd)
        if isinstance(e, OSError) and not isinstance(e, SeglogError):
            # a full disk or an I/O error while recovering: nothing was lost, and
            # a readonly open still works; retry once the cause is fixed
            raise storage_error(e, f"opening {path} failed: {e}") from e
        raise
    return (LocalLog(path, cfg, False, loaded.segments, loaded.start_offset, loaded.end_offset,
                     loaded.recovery_point), DirLock(lock_fd), loaded)


def _lock_and_configure(path: str, options: dict[str, Any]) -> tuple[int, LogConfig]:
    """A writer's first steps: refuse a file or a foreign directory before creating
    anything, take the directory's flock, settle the settings; (lock fd, config)."""
    if require_dir(path, "log", create=True):
        _marker.ownership(path, list_dir(path))
    else:
        make_dirs(path)
    try:
        lock_fd = os.open(os.path.join(path, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise path_error(e, f"cannot open the lock file of {path}") from e
    try:
        _platform.flock(lock_fd, _platform.LOCK_EX_NB)
    except BlockingIOError:
        os.close(lock_fd)
        raise LogLockedError(f"another writer holds {path}") from None
    try:
        return lock_fd, _writer_config(path, options)
    except BaseException:
        os.close(lock_fd)
        raise


def _writer_config(path: str, options: dict[str, Any]) -> LogConfig:
    """The writer's settings (lock held): stored ones with ``options`` applied; the
    marker is written when the log is new or a setting changed."""
    state = _marker.ownership(path, list_dir(path))
    marker = _marker.read(path) if state == "marked" else None
    if marker is not None:
        cfg = _marker.stored_config(marker, options, strict=True)
        if asdict(cfg) == marker["config"]:
            return cfg
    else:
        cfg = LogConfig.from_kwargs(options)
    try:
        _marker.write(path, cfg, marker)
    except OSError as e:
        raise storage_error(e, f"writing the settings of {path} failed: {e}") from e
    return cfg


def storage_error(cause: BaseException, message: str) -> StorageError:
    """A StorageError that keeps its cause's errno (``e.errno == errno.ENOSPC``)."""
    code = getattr(cause, "errno", None)
    return StorageError(code, message) if code is not None else StorageError(message)

"""Opening a log's directory: a readonly reader's listing, and a writer's first steps
(refuse what is not a log before creating anything, take the directory's flock,
settle the stored settings, load and recover the segments). ``Log.open`` builds
its ``Log`` over what these return.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

from .._storage import marker as _marker
from .._runtime import platform as _platform
from .._shared import writers as _writers
from .. import recovery
from .._runtime.files import LOCK_FILE, list_dir, make_dirs, path_error, require_dir
from .metrics import Metrics
from ..config import LogConfig
from ..errors import InvalidConfigError, LogLockedError, SeglogError, storage_error
from .live import LiveLog
from .local_log import LocalLog
from ..retention import remove_orphans
from ..segment import ActiveSettings


def check_open_options(readonly: bool, multi_writer: bool, lock_timeout_ms: int) -> None:
    """``Log.open``'s own options: ``TypeError`` or ``InvalidConfigError``."""
    for name, v in (("readonly", readonly), ("multi_writer", multi_writer)):
        if not isinstance(v, bool):
            raise TypeError(f"{name} must be a bool, not {type(v).__name__}")
    if isinstance(lock_timeout_ms, bool) or not isinstance(lock_timeout_ms, int):
        raise TypeError(f"lock_timeout_ms must be an int, not {type(lock_timeout_ms).__name__}")
    if not 0 <= lock_timeout_ms <= 86_400_000:
        raise InvalidConfigError(f"lock_timeout_ms must be 0 to 86400000, not {lock_timeout_ms}")
    if readonly and multi_writer:
        raise InvalidConfigError("readonly and multi_writer exclude each other")


def open_reader(path: str, options: dict[str, Any], metrics: Metrics | None = None
                ) -> LiveLog:
    """A readonly reader's segments, listed: settings stored in the marker with
    ``options`` applied for this reader only (``metrics``: counters it shares with a
    writer of the same ``Log``)."""
    require_dir(path, "log", create=False)
    marker = None
    if _marker.ownership(path, list_dir(path)) == "marked":
        marker = _marker.read(path)
    cfg = (_marker.stored_config(marker, options, strict=False) if marker is not None
           else LogConfig.from_kwargs(options))
    ident = marker.get("id") if marker is not None else None
    local = LiveLog(path, cfg, metrics, ident if isinstance(ident, str) else None)
    try:
        local.refresh(force=True)
    except BaseException as e:
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

    def alone(self) -> bool:
        """True if no other process holds the lock (this one holding it exclusively
        now; one of several writers holds it shared, and on False has let go of it,
        as a failed conversion of a flock does: it is closing)."""
        try:
            _platform.flock(self._fd, _platform.LOCK_EX_NB)
            return True
        except BlockingIOError:
            return False

    def release(self) -> None:
        """Release the flock, then close the descriptor. Released explicitly: a flock
        belongs to the open file, and a process forked meanwhile holds a copy of the
        descriptor until its after-fork handler closes it (a child the scheduler has
        not run yet), so a close alone would leave the lock held by the copy."""
        if self._fd >= 0:
            try:
                _platform.flock(self._fd, _platform.LOCK_UN)
            finally:
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
        _writers.invalidate(path)
        loaded = recovery.load_for_writer(path, ActiveSettings.of(cfg))
    except BaseException as e:
        os.close(lock_fd)
        if isinstance(e, OSError) and not isinstance(e, SeglogError):
            # a full disk or an I/O error while recovering: nothing was lost, and
            # a readonly open still works; retry once the cause is fixed
            raise storage_error(e, f"opening {path} failed: {e}") from e
        raise
    return (LocalLog(path, cfg, loaded.segments, loaded.start_offset, loaded.end_offset,
                     loaded.recovery_point, active=loaded.active), DirLock(lock_fd), loaded)


def open_shared(path: str, options: dict[str, Any], timeout_ms: int
                ) -> tuple[LocalLog, DirLock, recovery.Loaded | None]:
    """One of several writers (``multi_writer=True``): the mode lock taken shared, then,
    under the writers' append lock (openers one at a time), either recovery from the
    files (the first writer of a log all writers had left: it finds the mode lock
    free) or the header's view of the log the others write. A joining writer removes
    what writers killed before left on disk (``retention.remove_orphans``). (the
    LocalLog, the mode lock, what the loader found or None)."""
    lock_fd = _open_lock_file(path)
    try:
        # refusals before the writers' file is made: a log of another format, a
        # foreign directory, an exclusive writer holding the log
        _writer_config(path, options, write=False)
        if _try_flock(lock_fd, _platform.LOCK_SH_NB):
            _platform.flock(lock_fd, _platform.LOCK_UN)
        elif not _writers.exists(path):
            # held exclusively, and no multi-writer ever made the writers' file (the
            # first one makes it before it takes the mode lock to recover): an
            # exclusive writer holds the log
            raise LogLockedError(f"a writer without multi_writer=True holds {path}")
        w = _writers.WritersFile(path, timeout_ms)
    except BaseException as e:
        os.close(lock_fd)
        if isinstance(e, OSError) and not isinstance(e, SeglogError):
            raise path_error(e, f"cannot open the writers' file of {path}") from e
        raise
    local: LocalLog | None = None
    try:
        w.lock(what="the log was not opened")
        try:
            first = _try_flock(lock_fd, _platform.LOCK_EX_NB)
            if not first and not _try_flock(lock_fd, _platform.LOCK_SH_NB):
                raise LogLockedError(f"a writer without multi_writer=True holds {path}")
            foreign = None if first else w.foreign()
            if foreign is not None:
                raise LogLockedError(
                    f"writers of another seglog version (header layout "
                    f"{foreign.decode('ascii', 'replace')}, this one {_writers.MAGIC.decode()}) "
                    f"have {path} open; it opens with multi_writer=True when they closed it")
            loaded = None
            if first or not w.live():
                cfg = _writer_config(path, options)
                loaded = recovery.load_for_writer(path, ActiveSettings.of(cfg))
                local = LocalLog(path, cfg, loaded.segments, loaded.start_offset,
                                 loaded.end_offset, loaded.recovery_point,
                                 active=loaded.active, writers=w)
            else:
                cfg = _joining_config(path, options)
                local = LocalLog(path, cfg, writers=w)
            local.attach(loaded is not None)
            if loaded is None:
                remove_orphans(path, local.start, local.active_base, cfg.file_delete_delay_ms)
            if first and not _try_flock(lock_fd, _platform.LOCK_SH_NB):
                raise LogLockedError(f"a writer without multi_writer=True took {path}")
        finally:
            if not w.closed:
                w.unlock()
    except BaseException as e:
        if local is not None:
            local.abandon()
        w.close()
        os.close(lock_fd)
        if isinstance(e, OSError) and not isinstance(e, SeglogError):
            raise storage_error(e, f"opening {path} failed: {e}") from e
        raise
    return local, DirLock(lock_fd), loaded


def _try_flock(fd: int, how: int) -> bool:
    try:
        _platform.flock(fd, how)
        return True
    except BlockingIOError:
        return False


def _joining_config(path: str, options: dict[str, Any]) -> LogConfig:
    """A writer joining others: the stored settings, which options may not change."""
    marker = _marker.read(path)
    if marker is None:
        raise InvalidConfigError(f"{path} has writers but no stored settings")
    cfg = _marker.stored_config(marker, options, strict=True)
    if asdict(cfg) != marker["config"]:
        changed = sorted(k for k, v in asdict(cfg).items() if marker["config"].get(k) != v)
        raise InvalidConfigError(
            f"other writers have {path} open with its stored settings; "
            f"{', '.join(changed)} may change only when all writers have closed it")
    return cfg


def _open_lock_file(path: str) -> int:
    """Refuse a file or a foreign directory before creating anything; the lock
    file's descriptor."""
    if require_dir(path, "log", create=True):
        _marker.ownership(path, list_dir(path))
    else:
        make_dirs(path)
    try:
        return os.open(os.path.join(path, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise path_error(e, f"cannot open the lock file of {path}") from e


def _lock_and_configure(path: str, options: dict[str, Any]) -> tuple[int, LogConfig]:
    """A writer's first steps: refuse a file or a foreign directory before creating
    anything, take the directory's flock, settle the settings; (lock fd, config)."""
    lock_fd = _open_lock_file(path)
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


def _writer_config(path: str, options: dict[str, Any], write: bool = True) -> LogConfig:
    """The writer's settings (lock held): stored ones with ``options`` applied; the
    marker is written when the log is new or a setting changed (unless not
    ``write``: then only the refusals, ``NotALogError`` or an old format's error)."""
    state = _marker.ownership(path, list_dir(path))
    marker = _marker.read(path) if state == "marked" else None
    if marker is not None:
        cfg = _marker.stored_config(marker, options, strict=True)
        if asdict(cfg) == marker["config"] or not write:
            return cfg
    else:
        cfg = LogConfig.from_kwargs(options)
        if not write:
            return cfg
    try:
        _marker.write(path, cfg, marker)
    except OSError as e:
        raise storage_error(e, f"writing the settings of {path} failed: {e}") from e
    return cfg

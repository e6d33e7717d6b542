"""``Log``: the policy over a directory of segments.

Offsets, rolling, the flush policy, locking, readers in other processes. The
mechanism (bytes in files) is in ``segment``, ``index`` and ``codec``.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
import weakref
import zlib
from struct import Struct
from bisect import bisect_right
from operator import attrgetter
from itertools import chain
from contextlib import contextmanager
from dataclasses import asdict, fields
from functools import partial
from typing import Any, Callable, Iterable, Iterator, Sequence

from . import _marker, _platform, _scheduler, codec, recovery
from ._files import LOCK_FILE
from .config import LogConfig
from .errors import (CorruptRecordError, LogClosedError, LogLockedError, MessageTooLargeError,
                     OffsetOutOfRangeError, ReadOnlyError, SeglogError, StorageError)
from .message import (_HEADER_FRAMING, Headers, Message, MessageSet, Record, _check_ts,
                      prepare_batch)
from .cleaner import CompactionStats, compact
from .retention import DelayedDeletes, expired_prefix
from ._files import LOG_START, write_checkpoint
from .segment import Segment, SegmentGoneError


_log = logging.getLogger("seglog")
_BASE = attrgetter("base_offset")
_MAX_DELTA = (1 << 32) - 2
# per-record bookkeeping bytes counted against max_message_bytes when cutting batches
_RECORD_OVERHEAD = 24
_RACY_NS = 3_000_000_000  # a directory listing this close to its mtime is not trusted
_RELOCATIONS = 64         # a reader re-finds its place at most this often per step
_ITER_CHUNK = 1 << 20
_NEVER = 1 << 63
_ONE = Struct("<qIBIHIIqqH")   # a whole batch header plus the length of its one short value
_ONE_SIZE = _ONE.size
_TAIL_1H = Struct("<HIIqqH")
_crc32 = zlib.crc32
_time_ns = time.time_ns


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Log:
    """An append-only log of messages with contiguous offsets, in one directory.

    Open with ``Log.open``. One writer per directory (``LogLockedError`` for a
    second); any number of ``readonly=True`` readers in any process. Safe to share
    between threads; readers never block the writer.

    Durability: when ``append`` returns, the message is readable by every reader and
    survives a crash of this process. When ``flush`` returns, everything appended
    before survives power loss. ``flush_ms`` (default 1000) and ``flush_messages``
    bound how much un-flushed data a power loss can take.
    """

    def __init__(self, path: str, config: LogConfig, readonly: bool) -> None:
        self.path = path
        self.config = config
        self.readonly = readonly
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        # retention and compaction, one at a time, never holding the append lock long
        self._maintenance = threading.RLock()
        self._deletes = DelayedDeletes(path)
        self._cond = threading.Condition(threading.Lock())
        self._waiters = 0
        self._closed = False
        self._failed: BaseException | None = None
        self._segs: tuple[Segment, ...] = ()
        self._start = 0
        self._end = 0
        self._flushed = 0
        self._checkpointed = -1
        self._ckpt_lock = threading.Lock()
        self._lock_fd = -1
        self._jobs: list[_scheduler.Job] = []
        self._compress = codec.CODEC_LZ4 if config.compression == "lz4" else codec.CODEC_NONE
        self._max_msg = config.max_message_bytes
        self._capacity = config.segment_bytes + config.max_message_bytes + 65536
        self._dir_mtime = 0
        self._listed_at = 0
        self.recovery: recovery.RecoveryReport | None = None   # set by an unclean open
        self._ok = not readonly   # False once closed or failed: one test on the hot path
        self._fast = self._compress == codec.CODEC_NONE
        self._fast_max = min(self._max_msg, 0xFFFE)
        self._crc_ts = -1
        self._crc_cache: dict[int, int] = {}
        self._roll_size = self._roll_ts = self._roll_off = _NEVER
        self._flush_at = _NEVER if config.flush_messages is None else config.flush_messages - 1
        # reads in flight (every pread, index lookup and fsync of a segment happens inside
        # one): a retired segment's descriptors close only when none is, so no number
        # is closed (and reused by another open) under a reader
        self._rlock = threading.Lock()
        self._idle = threading.Condition(self._rlock)
        self._inflight = 0
        self._graveyard: list[Callable[[], None]] = []
        self._refresh_lock = threading.Lock()
        self._closing = False
        self._pid = os.getpid()
        self._forked_from: int | None = None
        self._background_error: BaseException | None = None

    # -- opening and closing ------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike[str], readonly: bool = False, **config: Any) -> "Log":
        """Open (and for a writer, create) the log in directory ``path``.

        A writer takes an exclusive ``flock`` on ``<path>/.lock``
        (``LogLockedError`` at once if held) and recovers from a crash. A
        ``readonly`` reader takes no lock and never writes. Unknown or
        out-of-range options raise ``InvalidConfigError``.

        Settings: a log stores them (``seglog.json``). Opened without options it
        keeps them; options given to a writer override them and are saved; options
        given to a reader apply to that reader only. ``log.config`` is the result.
        A directory that holds files but no marker was not created by seglog:
        ``NotALogError``, and nothing in it is changed.
        """
        LogConfig.from_kwargs(config)      # bad options: an error before anything is made
        path = os.path.abspath(os.fspath(path))
        if readonly:
            if not os.path.isdir(path):
                raise FileNotFoundError(f"no log directory at {path}")
            marker = None
            if _marker.ownership(path, os.listdir(path)) == "marked":
                marker = _marker.read(path)
            cfg = (_marker.stored_config(marker, config, strict=False) if marker is not None
                   else LogConfig.from_kwargs(config))
            log = cls(path, cfg, True)
            try:
                log._refresh(force=True)
            except BaseException:
                log.close()
                raise
            _READERS.add(log)
            return log
        if os.path.isdir(path):
            _marker.ownership(path, os.listdir(path))   # refuse before creating anything
        os.makedirs(path, exist_ok=True)
        lock_fd = os.open(os.path.join(path, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _platform.flock(lock_fd, _platform.LOCK_EX_NB)
        except BlockingIOError:
            os.close(lock_fd)
            raise LogLockedError(f"another writer holds {path}") from None
        try:
            cfg = _writer_config(path, config)
        except BaseException:
            os.close(lock_fd)
            raise
        log = cls(path, cfg, False)
        log._lock_fd = lock_fd
        try:
            loaded = recovery.load_for_writer(path, log._capacity, cfg.index_interval_bytes,
                                              cfg.max_index_bytes)
        except BaseException as e:
            os.close(log._lock_fd)
            log._lock_fd = -1          # never closed again by __del__ (the number is reused)
            log._closed = True
            if isinstance(e, OSError) and not isinstance(e, SeglogError):
                # a full disk or an I/O error while recovering: nothing was lost, and
                # a readonly open still works; retry once the cause is fixed
                raise _storage_error(e, f"opening {path} failed: {e}") from e
            raise
        log._set_segments(loaded.segments)
        log._start = loaded.start_offset
        log._end = loaded.end_offset
        log._flushed = loaded.end_offset
        log._checkpointed = loaded.recovery_point
        log.recovery = loaded.report
        log._update_flush_at()
        log._watch(loaded.segments[-1])
        log._set_roll_limits(loaded.segments[-1])
        # one flusher and one maintenance thread per process serve every log; their
        # jobs hold the log weakly: a writer nobody references is closed (and its lock
        # released) by the garbage collector, not kept alive by a thread
        if cfg.flush_ms is not None:
            log._jobs.append(_scheduler.schedule("flush", log, cfg.flush_ms / 1000.0,
                                                 _timed_flush))
        if cfg.retention_check_ms is not None:
            log._jobs.append(_scheduler.schedule("maintenance", log,
                                                 cfg.retention_check_ms / 1000.0, _maintain))
        _WRITERS.add(log)
        return log

    def __enter__(self) -> "Log":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Flush, seal the active segment, mark a clean shutdown, release the lock.

        Idempotent. Waits for a running compaction or retention pass and for reads in
        flight in other threads; those threads' next read raises ``LogClosedError``,
        as do pending ``wait`` calls. Every descriptor the log opened is closed. In a
        process forked from the writer's, ``close`` touches no file.
        """
        if self._closed:
            return
        for job in self._jobs:
            job.cancel()
        # a compact() or enforce_retention() in another thread (or the maintenance
        # thread's pass) finishes first
        with self._maintenance:
            self._close()

    def _close(self) -> None:
        with self._rlock:
            if self._closed:
                return
            self._closing = True
            while self._inflight:
                self._idle.wait()
        if len(self._deletes):
            try:
                self._deletes.purge(everything=True)
            except OSError:
                # the next writer removes them at open
                pass
        with self._flush_lock, self._lock:
            if self._closed:
                return
            self._closed = True
            self._ok = False
            try:
                if not self.readonly and self._failed is None:
                    active = self._segs[-1]
                    active.seal()
                    recovery.write_checkpoint(self.path, recovery.RECOVERY_POINT, self._end)
                    recovery.write_marker(self.path, active, self._end)
                    self._flushed = self._end
            except OSError as e:
                # no clean-shutdown marker: the next open recovers what reached the disk
                self._failed = e
                raise _storage_error(e, f"closing {self.path} failed: {e}") from e
            finally:
                for seg in self._segs:
                    try:
                        seg.close(seal=False)    # sealed above, unless it failed
                    except OSError:
                        pass
                for close in self._graveyard:
                    close()
                self._graveyard.clear()
                if self._lock_fd >= 0:
                    os.close(self._lock_fd)  # releases the flock
                    self._lock_fd = -1
        with self._cond:
            self._cond.notify_all()

    def __del__(self) -> None:
        if sys.is_finalizing():
            # the interpreter is exiting: daemon threads (the prefaulter, the flusher)
            # are frozen wherever they stood, possibly holding a lock close() needs.
            # Leave it as a killed process would: the data is in the page cache, the
            # lock goes with the process, and the next open recovers.
            return
        if (getattr(self, "_lock_fd", -1) >= 0 or getattr(self, "readonly", False)) \
                and not getattr(self, "_closed", True):
            try:
                self.close()
            except Exception:
                pass

    def _after_fork(self) -> None:
        """In a forked child: this object belongs to the parent process.

        A writer's lock, segment and checkpoints are the parent's: the child's copy
        refuses every operation (``close`` is a no-op) and drops its copy of the lock
        descriptor (the parent keeps the lock; a child never holds it). Locks are made
        anew: another thread of the parent may have held one at the fork.
        """
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._maintenance = threading.RLock()
        self._ckpt_lock = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        self._rlock = threading.Lock()
        self._idle = threading.Condition(self._rlock)
        self._inflight = 0
        self._waiters = 0
        for seg in self._segs:
            seg._open_lock = threading.RLock()
            seg._map_lock = threading.Lock()
        if self.readonly:
            return
        self._forked_from = self._pid
        self._pid = os.getpid()
        self._closed = True
        self._ok = False
        if self._lock_fd >= 0:
            try:
                os.close(self._lock_fd)   # closing a copy never releases the parent's flock
            except OSError:
                pass
            self._lock_fd = -1

    def _closed_error(self) -> SeglogError:
        if self._forked_from is not None:
            return SeglogError(
                f"log {self.path} was opened by process {self._forked_from}; this process "
                f"({self._pid}) is a fork of it and may not use the writer: open the log "
                f"again here (readonly=True to read while the parent writes)")
        return LogClosedError(f"log {self.path} is closed")

    # -- reads in flight and retired segments --------------------------------------
    def _enter(self) -> None:
        with self._rlock:
            if self._closing or self._closed:
                raise self._closed_error()
            self._inflight += 1

    def _leave(self) -> None:
        with self._rlock:
            self._inflight -= 1
            if not self._inflight:
                if self._graveyard:
                    for close in self._graveyard:
                        close()
                    self._graveyard.clear()
                self._idle.notify_all()

    def _dispose(self, close: Callable[[], None]) -> None:
        """Run ``close`` (which closes descriptors) once no read is in flight."""
        with self._rlock:
            if self._inflight:
                self._graveyard.append(close)
            else:
                close()

    def _retire(self, segs: Iterable[Segment], why: str) -> None:
        """Segments that left the list (retention, compaction, a reader's re-listing):
        readers that meet them re-find their place; their files close once no read
        is in flight."""
        for seg in segs:
            if seg._gone is None:
                seg._gone = why     # before the close: a reader between steps re-finds
            self._dispose(partial(seg._retire, why))

    # -- state ----------------------------------------------------------------------
    @property
    def start_offset(self) -> int:
        """The first offset still in the log."""
        if self.readonly:
            self._refresh()
        return self._start

    @property
    def end_offset(self) -> int:
        """The next offset to assign (one past the last message)."""
        if self.readonly:
            self._refresh()
        return self._end

    @property
    def flushed_offset(self) -> int:
        """Every offset below this survives power loss."""
        return self._flushed

    @property
    def segments(self) -> tuple[Segment, ...]:
        """The segments, oldest first; the last one is active."""
        if self.readonly:
            self._refresh()
        return self._segs

    @property
    def closed(self) -> bool:
        return self._closed

    def _set_segments(self, segs: Sequence[Segment]) -> None:
        self._segs = tuple(segs)

    def _check_writable(self) -> None:
        if self._closed:
            raise self._closed_error()
        if self.readonly:
            raise ReadOnlyError(f"log {self.path} was opened readonly")
        if self._failed is not None:
            raise _storage_error(self._failed, f"log {self.path} refuses writes after an I/O "
                                 f"error: {self._failed}; reopen it") from self._failed

    def _fail(self, e: BaseException) -> StorageError:
        self._failed = e
        self._ok = False
        return _storage_error(e, f"write to {self.path} failed: {e}")

    # -- appending ------------------------------------------------------------------
    def append(self, value: bytes | None, key: bytes | None = None, timestamp: int | None = None,
               headers: Headers = ()) -> int:
        """Append one message; return its offset.

        On return it is readable by all readers and survives a crash of this
        process (R1); ``flush`` makes it survive power loss. ``value=None`` with a
        key is a tombstone. Bad input raises TypeError, ValueError or
        MessageTooLargeError and writes nothing.
        """
        if type(value) is bytes and key is None and not headers and self._fast:
            # the hot path: one short keyless record, written straight into the map
            n = len(value)
            if timestamp is None:
                ts = _time_ns() // 1_000_000
            else:
                ts = _check_ts(timestamp)
                self._check_window(ts, ts, _time_ns() // 1_000_000)
            if n <= self._fast_max:
                if ts != self._crc_ts:
                    self._crc_ts = ts
                    self._crc_cache = {}
                tail_crc = self._crc_cache.get(n)
                if tail_crc is None:
                    tail_crc = self._crc_cache[n] = _crc32(_TAIL_1H.pack(0, 0, 1, ts, ts, n))
                crc = _crc32(value, tail_crc)
                size = _ONE_SIZE + n
                lock = self._lock
                # acquire/release, not `with`: a third of the cost on this path
                lock.acquire()
                try:
                    if not self._ok:
                        self._check_writable()
                    off = self._end
                    seg = self._segs[-1]
                    pos = seg._size
                    end = pos + size
                    if end > self._roll_size or ts > self._roll_ts or off > self._roll_off:
                        seg = self._roll(seg, size, ts)
                        pos = seg._size
                        end = pos + size
                    mm = seg._mm
                    try:
                        if end > seg._alloc_end:
                            seg.allocate(end)
                        _ONE.pack_into(mm, pos, off, size - 12, 1, crc, 0, 0, 1, ts, ts, n)
                        mm[pos + _ONE_SIZE:end] = value
                    except OSError as e:
                        raise self._fail(e) from e
                    if pos >= seg._next_index_pos or ts > seg._max_ts or not pos:
                        seg.appended(pos, end, off, off + 1, ts)
                        if not pos:
                            self._set_roll_limits(seg)
                    else:
                        seg._size = end
                        seg.next_offset = off + 1
                    self._end = off + 1
                finally:
                    lock.release()
                if self._waiters:
                    self._notify()
                if off >= self._flush_at:
                    self.flush()
                return off
            if n > self._max_msg:
                raise MessageTooLargeError(
                    f"record of {n} bytes exceeds max_message_bytes={self._max_msg}")
        return self.append_batch((Record(value, key, timestamp, headers),)).start

    def append_batch(self, items: Iterable[bytes | Record]) -> range:
        """Append many messages; return the range of their contiguous offsets.

        ``items`` are bytes or ``Record``. All items are validated before anything
        is written; a rejected call writes nothing. Large inputs are cut into
        batches of at most ``max_message_bytes``; each batch is atomic on recovery.
        """
        items = items if isinstance(items, (list, tuple)) else list(items)
        if not items:
            with self._lock:
                self._check_writable()
                return range(self._end, self._end)
        now = _time_ns() // 1_000_000
        batches = None
        try:
            # bytes-like values only (Records, str, None make join raise): the join is
            # the type check and the batch body at once
            body = b"".join(items)  # type: ignore[arg-type]
        except TypeError:
            body = None
        # the whole batch within max_message_bytes: so is every value in it
        if body is not None and len(body) + _RECORD_OVERHEAD * len(items) <= self._max_msg:
            lens = list(map(len, items))
            # len() is the byte size of bytes only (a memoryview, array or ctypes array
            # counts items): other buffers take the careful path
            if sum(lens) == len(body) and list(map(type, items)).count(bytes) == len(lens):
                size, parts = codec.encode_values_parts(body, lens, now, self._compress)
                batches = [(parts, len(items), now, size)]
        if batches is None:
            values, keys, stamps, headers = prepare_batch(items, now, self._max_msg)
            if type(stamps) is int:
                self._check_window(stamps, stamps, now)
            else:
                self._check_window(min(stamps), max(stamps), now)   # type: ignore[arg-type]
            batches = self._encode(values, keys, stamps, headers)
        lock = self._lock
        lock.acquire()
        try:
            if not self._ok:
                self._check_writable()
            first = off = self._end
            for data, n, max_ts, size in batches:
                seg = self._segs[-1]
                if (seg._size + size > self._roll_size or max_ts > self._roll_ts  # type: ignore[operator]
                        or off + n - 1 > self._roll_off):
                    seg = self._roll(seg, size, max_ts)
                fresh = not seg._size
                try:
                    seg.append(data, off, off + n, max_ts, size)
                except OSError as e:
                    raise self._fail(e) from e
                if fresh:
                    self._set_roll_limits(seg)
                off += n
                self._end = off
        finally:
            lock.release()
        if self._waiters:
            self._notify()
        if off - 1 >= self._flush_at:
            self.flush()
        return range(first, off)

    def _check_window(self, lo: int, hi: int, now: int) -> None:
        """Record timestamps ``lo``..``hi`` within the configured window around ``now``."""
        before = self.config.message_timestamp_before_max_ms
        after = self.config.message_timestamp_after_max_ms
        if before is not None and lo < now - before:
            raise ValueError(
                f"timestamp {lo} is more than message_timestamp_before_max_ms={before} before "
                f"now ({now}); timestamps are milliseconds since the epoch (seconds given?)")
        if after is not None and hi > now + after:
            raise ValueError(
                f"timestamp {hi} is more than message_timestamp_after_max_ms={after} after "
                f"now ({now}); timestamps are milliseconds since the epoch")

    def _encode(self, values: list[bytes | None], keys: list[bytes | None] | None,
                stamps: int | list[int], headers: list | None) -> list[tuple[Any, int, int, int]]:
        """Encode into batches of at most max_message_bytes: (bytes, count, max_ts, size)."""
        n = len(values)
        cuts = [0]
        sizes = [len(v) if v else 0 for v in values] if None in values else list(map(len, values))  # type: ignore[arg-type]
        if keys is not None or headers is not None:
            for i in range(n):
                if keys is not None and keys[i]:
                    sizes[i] += len(keys[i])  # type: ignore[arg-type]
                if headers is not None:
                    sizes[i] += sum(len(a) + len(b) + _HEADER_FRAMING for a, b in headers[i])
        limit = self._max_msg
        if sum(sizes) + _RECORD_OVERHEAD * n > limit:
            acc = 0
            for i, s in enumerate(sizes):
                s += _RECORD_OVERHEAD
                if acc and acc + s > limit:
                    cuts.append(i)
                    acc = 0
                acc += s
        cuts.append(n)
        out = []
        for a, b in zip(cuts, cuts[1:]):
            ts = stamps if isinstance(stamps, int) else stamps[a:b]
            data = codec.encode_batch(0, values[a:b], ts, keys[a:b] if keys is not None else None,
                                      headers[a:b] if headers is not None else None, self._compress)
            out.append((data, b - a, ts if isinstance(ts, int) else max(ts), len(data)))
        return out

    def _watch(self, seg: Segment) -> None:
        """Roll at the next append once the segment's index is full."""
        ref = weakref.ref(self)     # no cycle: an unreferenced writer is freed at once

        def full() -> None:
            log = ref()
            if log is not None:
                log._roll_size = 0
        seg.on_index_full = full  # type: ignore[method-assign]

    def _set_roll_limits(self, seg: Segment) -> None:
        """Precompute when the active segment must roll, so appends compare three ints.

        Kafka's conditions: the next batch would pass ``segment_bytes``; its
        timestamp is ``segment_ms`` past the segment's first; an offset would not fit
        the index's 32-bit relative offset; an index is full. An empty segment never
        rolls.
        """
        if not seg._size:
            self._roll_size = self._roll_ts = self._roll_off = _NEVER
            return
        self._roll_size = 0 if seg.index_full else self.config.segment_bytes
        ms = self.config.segment_ms
        self._roll_ts = (seg.first_timestamp + ms if ms is not None and seg.first_timestamp is not None
                         else _NEVER)
        self._roll_off = seg.base_offset + _MAX_DELTA

    def _roll(self, old: Segment, nbytes: int, ts: int) -> Segment:
        """Seal the active segment and start a new one at the end offset (lock held)."""
        if not old.size:
            return old
        old.next_offset = self._end
        try:
            old.seal()
            new = Segment.create(self.path, self._end, self._capacity,
                                 self.config.index_interval_bytes, self.config.max_index_bytes)
        except OSError as e:
            raise self._fail(e) from e
        self._set_segments(self._segs + (new,))
        self._watch(new)
        self._set_roll_limits(new)
        # the sealed segment was fsynced: everything before the new base is durable
        if self._flushed < self._end:
            self._flushed = self._end
            self._update_flush_at()
        self._write_recovery_point(self._end)
        return new

    # -- flushing -----------------------------------------------------------------
    def flush(self) -> int:
        """fsync what was appended; return the offset below which all survives power loss."""
        with self._flush_lock:
            with self._lock:
                self._check_writable()
                target = self._end
                seg = self._segs[-1]
            if target > self._flushed:
                # in flight: a compaction that retires this (rolled meanwhile) segment
                # must not close its descriptors under the fsync
                self._enter()
                try:
                    seg.fsync_with_indexes()
                except (OSError, ValueError) as e:
                    raise self._fail(e) from e
                finally:
                    self._leave()
                # the checkpoint is what lets recovery tell flushed data (whose damage
                # is corruption) from a torn tail: it moves with every flush (R6)
                self._write_recovery_point(target)
                self._flushed = max(self._flushed, target)
                self._update_flush_at()
            return self._flushed

    def _update_flush_at(self) -> None:
        every = self.config.flush_messages
        if every is not None:
            self._flush_at = self._flushed + every - 1

    def _write_recovery_point(self, offset: int) -> None:
        """Durably record that every offset below ``offset`` was fsynced (monotonic)."""
        with self._ckpt_lock:       # innermost lock: flush and roll both get here
            if offset <= self._checkpointed:
                return
            try:
                recovery.write_checkpoint(self.path, recovery.RECOVERY_POINT, offset)
            except OSError as e:
                raise self._fail(e) from e
            self._checkpointed = offset

    # -- reading ----------------------------------------------------------------
    def _check_readable(self) -> None:
        if self._closed:
            raise self._closed_error()

    def _locate(self, offset: int) -> tuple[tuple[Segment, ...], int]:
        segs = self._segs
        return segs, max(0, bisect_right(segs, offset, key=_BASE) - 1)

    def _look_again(self, offset: int, err: Exception) -> None:
        """A segment left the list (retired), or vanished before this reader opened
        it (retention or compaction in the writer's process): find the current list.
        Raises ``OffsetOutOfRangeError`` if ``offset`` was deleted meanwhile."""
        if self.readonly:
            self._refresh(force=True)
        elif not isinstance(err, SegmentGoneError):
            # the writer's own list is always current: a file went away behind its back
            raise CorruptRecordError(f"a segment file of {self.path} vanished: {err}") from err
        if offset < self._start:
            raise OffsetOutOfRangeError(
                f"offset {offset} was deleted (log start is now {self._start})") from None

    def read(self, offset: int, max_bytes: int = 1 << 20) -> MessageSet:
        """Whole batches holding messages from ``offset`` on, up to about ``max_bytes``.

        ``OffsetOutOfRangeError`` unless ``start_offset <= offset <= end_offset``;
        ``offset == end_offset`` gives an empty set. At least one whole message is
        returned when one exists, however large.
        """
        self._check_readable()
        if type(offset) is not int or type(max_bytes) is not int:
            if not isinstance(offset, int) or isinstance(offset, bool):
                raise TypeError("offset must be an int")
            if not isinstance(max_bytes, int) or isinstance(max_bytes, bool):
                raise TypeError("max_bytes must be an int")
        if max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        self._enter()
        try:
            for _ in range(_RELOCATIONS):
                if self.readonly:
                    self._refresh()
                start, end = self._start, self._end
                if not start <= offset <= end:
                    raise OffsetOutOfRangeError(f"offset {offset} is outside [{start}, {end}]")
                if offset == end:
                    self._raise_corruption()
                    return MessageSet(b"", min_offset=offset, next_offset=offset)
                try:
                    return self._read_from(offset, max_bytes, end)
                except (SegmentGoneError, FileNotFoundError) as e:
                    self._look_again(offset, e)
            raise self._unsettled()
        finally:
            self._leave()

    def _unsettled(self) -> SeglogError:
        return SeglogError(f"the segments of {self.path} changed {_RELOCATIONS} times "
                           f"under one read; try again")

    def _read_from(self, offset: int, max_bytes: int, end: int) -> MessageSet:
        segs, i = self._locate(offset)
        for j in range(i, len(segs)):
            seg = segs[j]
            ms = seg.read(max(offset, seg.base_offset), max_bytes)
            if ms:
                return ms
            if j + 1 < len(segs):
                # nothing at or after offset here: the next segment must start there
                _check_covers(seg, ms.next_offset, segs[j + 1].base_offset, seg.size)
        return MessageSet(b"", min_offset=offset, next_offset=end)

    def iter(self, start: int | None = None, end: int | None = None) -> Iterator[Message]:
        """Messages with ``start <= offset < end``, in order.

        ``start`` defaults to ``start_offset``; ``end`` to the end of the log as the
        iteration reaches it (it does not wait for more: see ``wait``). Compaction
        and retention may run meanwhile: the iterator goes on in the current
        segments (``OffsetOutOfRangeError`` if retention deleted its next offset).
        """
        self._check_readable()
        if self.readonly:
            self._refresh()
        lo = self._start if start is None else start
        if not isinstance(lo, int) or isinstance(lo, bool):
            raise TypeError("start must be an int")
        if end is not None and (not isinstance(end, int) or isinstance(end, bool)):
            raise TypeError("end must be an int or None")
        if not self._start <= lo <= self._end:
            raise OffsetOutOfRangeError(f"offset {lo} is outside [{self._start}, {self._end}]")
        return chain.from_iterable(self._batch_iters(lo, end))

    def __iter__(self) -> Iterator[Message]:
        return self.iter()

    def _batch_iters(self, offset: int, end: int | None) -> Iterator[Iterator[Message]]:
        # [segment, position, base offset of the batch there (None: unknown)]; files
        # are touched only inside _iter_step, never while messages are being yielded
        st: list[Any] = [None, 0, None]
        careful = False
        while True:
            if end is not None and offset >= end:
                return
            self._enter()
            try:
                step = self._iter_step(st, offset, end, careful)
            finally:
                self._leave()
            careful = False
            if step is None:
                return
            seg, pos = st[0], st[1]
            if type(step) is bytes:
                # decode the chunk's whole batches straight from the buffer
                progress = [0, 0]
                try:
                    yield from codec.iter_batches(step, 0, len(step), offset, end,
                                                  message_type=Message, expect=st[2],
                                                  progress=progress)
                except CorruptRecordError as e:
                    raise e.at(seg.path, pos + (e.position or 0), e.offset) from None
                if progress[0]:
                    st[1] = pos + progress[0]
                    st[2] = progress[1]
                    offset = max(offset, progress[1])
                else:
                    # a batch larger than the chunk, a short read or damage
                    careful = True
                continue
            yield from step._batch_iters()
            st[1] = pos + step.size_in_bytes
            offset = max(offset, step.next_offset)
            if step._last_next is not None:
                st[2] = step._last_next

    def _iter_step(self, st: list[Any], offset: int, end: int | None,
                   careful: bool) -> bytes | MessageSet | None:
        """The next chunk of the current segment (bytes), or a MessageSet read
        carefully, or None at the end of the log. Moves ``st`` to the next segment
        when the current one is done; re-finds ``offset`` after the segment list
        changed (compaction, retention, a reader's re-listing)."""
        for _ in range(_RELOCATIONS):
            try:
                seg = st[0]
                if seg is None or seg._gone is not None:
                    if offset < self._start:
                        raise OffsetOutOfRangeError(
                            f"offset {offset} was deleted by retention while iterating "
                            f"(log start is now {self._start})")
                    segs, i = self._locate(offset)
                    if not segs:
                        return None
                    seg = segs[i]
                    pos, hdr = seg.find_position(offset)
                    st[:] = [seg, pos, hdr[0] if hdr is not None else None]
                while True:
                    pos = st[1]
                    seg_end = seg.size
                    if pos >= seg_end and self.readonly:
                        self._refresh()
                        if seg._gone is not None:
                            raise SegmentGoneError("re-listed")
                        seg_end = seg.size
                    if pos < seg_end:
                        break
                    if offset < self._start:
                        raise OffsetOutOfRangeError(
                            f"offset {offset} was deleted by retention while iterating "
                            f"(log start is now {self._start})")
                    segs = self._segs
                    k = bisect_right(segs, seg.base_offset, key=_BASE)
                    if k >= len(segs):
                        self._raise_corruption()
                        return None
                    _check_covers(seg, st[2] if st[2] is not None else offset,
                                  segs[k].base_offset, seg_end)
                    seg = segs[k]
                    st[:] = [seg, 0, seg.base_offset]
                if not careful:
                    buf = seg.pread(min(_ITER_CHUNK, seg_end - pos), pos)
                    if len(buf) >= _ITER_CHUNK or pos + len(buf) >= seg_end:
                        return buf
                return seg.read_at(pos, offset, _ITER_CHUNK, seg_end, end, st[2])
            except (SegmentGoneError, FileNotFoundError) as e:
                self._look_again(offset, e)
                st[0] = None
        raise self._unsettled()

    def offset_for_time(self, timestamp: int) -> int | None:
        """The first offset whose message timestamp is >= ``timestamp``, or None."""
        self._check_readable()
        ts = _check_ts(timestamp)
        self._enter()
        try:
            for _ in range(_RELOCATIONS):
                if self.readonly:
                    self._refresh()
                try:
                    return self._offset_for_time(ts)
                except (SegmentGoneError, FileNotFoundError) as e:
                    try:
                        self._look_again(self._start, e)
                    except OffsetOutOfRangeError:
                        pass
            raise self._unsettled()
        finally:
            self._leave()

    def _offset_for_time(self, ts: int) -> int | None:
        lo = self._start
        segs = self._segs
        for j, seg in enumerate(segs):
            if seg.max_timestamp < ts or not seg.size:
                continue
            entry = seg.time_index.lookup(ts)
            ix_off, pos = seg.index.lookup(entry[1]) if entry is not None else (seg.base_offset, 0)
            end = seg.size
            covered = ix_off
            for p, hdr in seg.batches(pos, end):
                covered = codec.last_offset(hdr) + 1
                if hdr[8] < ts or covered <= lo:
                    continue
                ms = seg.read_at(p, lo, 1, end)
                for m in ms:
                    if m[1] >= ts:
                        if j and segs[j - 1].base_offset >= lo:
                            # the answer may have been in records missing from the end
                            # of the segment before (timestamps mostly ascend)
                            prev = segs[j - 1]
                            _check_covers(prev, _end_offset(prev), seg.base_offset, prev.size)
                        return m[0]
            if j + 1 < len(segs):
                # walked to the end of a segment whose records reach ts: it must end
                # where the next begins, or the answer may be in what is missing
                _check_covers(seg, covered, segs[j + 1].base_offset, end)
        return None

    def wait(self, offset: int, timeout: float | None = None) -> bool:
        """Block until ``end_offset > offset``; True if so, False on timeout.

        ``timeout`` in seconds: None or ``math.inf`` waits for ever, 0 or less looks
        once; NaN is a ``ValueError``. Readers in other processes poll the files
        (sub-millisecond at first, backing off to 20 ms). Raises ``LogClosedError``
        if the log is closed.
        """
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise TypeError(f"timeout must be a number of seconds or None, not {timeout!r}")
            if math.isnan(timeout):
                raise ValueError("timeout must be a number of seconds or None, not NaN")
            if math.isinf(timeout):
                timeout = None
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        if self.readonly:
            delay = 0.0005
            while True:
                self._check_readable()
                if self.end_offset > offset:
                    return True
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                time.sleep(delay if left is None else min(delay, left))
                delay = min(delay * 2, 0.02)
        with self._cond:
            self._waiters += 1
            try:
                while self._end <= offset:
                    self._check_readable()
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._cond.wait(None if left is None else min(left, threading.TIMEOUT_MAX))
                return True
            finally:
                self._waiters -= 1

    def _raise_corruption(self) -> None:
        """A reader at the visible end: raise damage found there, if any."""
        if self.readonly and self._segs and self._segs[-1].corruption is not None:
            raise self._segs[-1].corruption

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # -- readers in other processes --------------------------------------------
    def _refresh(self, force: bool = False) -> None:
        """Pick up new data and new or deleted segments written by another process."""
        if self._closed:
            return
        with self._refresh_lock:
            self._refresh_locked(force)

    def _refresh_locked(self, force: bool) -> None:
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except FileNotFoundError:
            raise LogClosedError(f"log directory {self.path} is gone") from None
        segs = self._segs
        # an unchanged mtime proves nothing while the listing is within the clock's
        # granularity of it (coarse on some file systems: 1 s on HFS+, 2 s on FAT):
        # a change in the same tick leaves the same mtime, so look again
        if (force or mtime != self._dir_mtime or not segs
                or self._listed_at - mtime < _RACY_NS):
            self._dir_mtime = mtime
            self._listed_at = time.time_ns()
            bases = recovery.list_segments(self.path)
            known = {s.base_offset: s for s in segs}
            new = []
            for b in bases:
                s = known.get(b)
                if s is not None and s._gone is not None:
                    s = None
                if s is not None and s._file is not None and not s._live:
                    try:
                        if os.stat(s.path).st_ino != s.inode:
                            s = None        # compaction replaced it
                    except FileNotFoundError:
                        s = None
                if s is None:
                    s = Segment(self.path, b, max_index_bytes=self.config.max_index_bytes)
                new.append(s)
            for s in new[:-1]:
                if s._live:
                    # it has a successor now, so its writer sealed it: finish it as a file
                    recovery.refresh_live(s)
                    s._live = False
                    self._retire_indexes(s)
            if new and new[-1] is not (segs[-1] if segs else None):
                new[-1] = _live_segment(new[-1], self.config.max_index_bytes)
            kept = set(map(id, new))
            self._set_segments(new)
            self._retire([s for s in segs if id(s) not in kept],
                         "replaced by compaction or deleted by retention")
            start = recovery.read_checkpoint(self.path, recovery.LOG_START)
            self._start = max(start or 0, new[0].base_offset if new else 0)
        if self._segs:
            last = self._segs[-1]
            try:
                recovery.refresh_live(last)
            except FileNotFoundError:
                return
            self._end = last.next_offset if last.next_offset is not None else last.base_offset

    def _retire_indexes(self, seg: Segment) -> None:
        """A live segment became a file: its live indexes close once no read uses them."""
        with seg._open_lock:
            old = [ix for ix in (seg._index, seg._timeindex) if ix is not None]
            seg._index = seg._timeindex = None
        for ix in old:
            self._dispose(ix.close)

    # -- retention ---------------------------------------------------------------
    def enforce_retention(self, now_ms: int | None = None) -> list[int]:
        """Delete whole segments past ``retention_ms`` or ``retention_bytes``.

        Oldest first, never the active segment; the new log start offset is
        checkpointed before any file is removed. Returns the deleted base offsets.
        ``ReadOnlyError`` on a readonly log (whatever the policy); an I/O error is a
        ``StorageError`` and poisons the log, as a failed append does. A failure of
        the background pass is logged and raised by the next call of this method
        or of ``compact``.
        """
        self._check_writable()
        self._raise_background_error()
        return self._enforce(_now_ms() if now_ms is None else _check_ts(now_ms))

    def _enforce(self, now_ms: int) -> list[int]:
        """The delete policy (Kafka's ``deleteOldSegments``): the new log start offset
        is checkpointed durably before any file is removed, so a crash in between
        leaves segments below the start offset, which the next open deletes, and
        never a start offset pointing at deleted data."""
        cfg = self.config
        if not cfg.deletes:
            return []
        with self._maintenance, self._poisoning():
            self._check_writable()
            self._deletes.purge()
            segs = self._segs
            n = expired_prefix(segs, now_ms, cfg.retention_ms, cfg.retention_bytes)
            if not n:
                return []
            doomed = segs[:n]
            new_start = segs[n].base_offset
            write_checkpoint(self.path, LOG_START, new_start)
            with self._lock:   # appends only add segments at the end: the prefix is ours
                self._start = max(self._start, new_start)
                self._set_segments(self._segs[n:])
            # readers of this process re-find their place; the files close once no read
            # is in flight (readers in other processes are what the delay is for)
            self._retire(doomed, "deleted by retention")
            self._deletes.delete(doomed, cfg.file_delete_delay_ms)
        return [s.base_offset for s in doomed]

    @contextmanager
    def _poisoning(self) -> Iterator[None]:
        """An I/O error inside poisons the log, as a failed append does."""
        try:
            yield
        except OSError as e:
            if isinstance(e, SeglogError):
                raise
            raise self._fail(e) from e

    def _replace_segments(self, old: list[Segment], new: Segment) -> None:
        """Swap compaction's ``new`` segment in for the consecutive ``old`` ones
        (Kafka's ``replaceSegments``); the files were swapped on disk already."""
        with self._lock:
            cur = self._segs
            i = next(k for k, s in enumerate(cur) if s is old[0])
            self._set_segments(cur[:i] + (new,) + cur[i + len(old):])
        self._retire(old, "replaced by compaction")

    def compact(self, now_ms: int | None = None) -> CompactionStats:
        """One compaction pass (cleanup_policy "compact"): keep the latest record per key.

        Only sealed segments are rewritten; offsets never change; appends and reads
        go on meanwhile. Returns ``CompactionStats`` (``skipped`` says why a pass did
        nothing). See ``seglog.cleaner``.
        """
        self._check_writable()
        self._raise_background_error()
        return self._compact(None if now_ms is None else _check_ts(now_ms))

    def _compact(self, now_ms: int | None) -> CompactionStats:
        with self._maintenance, self._poisoning():
            self._check_writable()
            return compact(self.path, self._segs[:-1], self._start, self.config,
                           self._replace_segments, now_ms)

    def _raise_background_error(self) -> None:
        e = self._background_error
        if e is not None:
            self._background_error = None
            raise _storage_error(e, f"the background maintenance of {self.path} failed: {e}") from e

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("readonly" if self.readonly else "writer")
        # the settings that differ from the defaults (all of them: log.config)
        changed = " ".join(f"{f.name}={getattr(self.config, f.name)!r}"
                           for f in fields(self.config)
                           if getattr(self.config, f.name) != f.default)
        return (f"<seglog.Log {self.path} [{self._start}, {self._end}) "
                f"{len(self._segs)} segment(s) {state}{' ' + changed if changed else ''}>")


def _writer_config(path: str, options: dict[str, Any]) -> LogConfig:
    """The writer's settings (lock held): stored ones with ``options`` applied; the
    marker is written when the log is new or a setting changed."""
    state = _marker.ownership(path, os.listdir(path))
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
        raise _storage_error(e, f"writing the settings of {path} failed: {e}") from e
    return cfg


def _live_segment(seg: Segment, max_index_bytes: int) -> Segment:
    """A reader's view of another process's active segment, sized by scanning.

    The scan starts at the last offset-index entry, so opening a reader does not
    read the whole segment.
    """
    live = Segment(seg.directory, seg.base_offset, size=0, next_offset=seg.base_offset,
                   max_index_bytes=max_index_bytes, live=True)
    try:
        off, pos = live.index.lookup(1 << 62)
        last_ts = live.time_index.last_entry()
        # the writer may be halfway through writing that entry (struct writes it field
        # by field): trust it only if a batch with that base offset starts there
        if pos and not _batch_starts_at(live, pos, off):
            off, pos, last_ts = seg.base_offset, 0, None
    except FileNotFoundError:
        off, pos, last_ts = seg.base_offset, 0, None
    live._size = pos
    live.next_offset = off
    live._max_ts = last_ts[0] if last_ts is not None else -1
    return live


def _batch_starts_at(seg: Segment, pos: int, base_offset: int) -> bool:
    """True if a batch header with ``base_offset`` and sane framing is at ``pos``."""
    buf = os.pread(seg.fileno(), codec.HEADER_SIZE, pos)
    if len(buf) < codec.HEADER_SIZE:
        return False
    hdr = codec.HEADER.unpack_from(buf)
    return hdr[0] == base_offset and hdr[2] == codec.MAGIC and hdr[1] >= codec.MIN_BATCH_LENGTH


_WRITERS: "weakref.WeakSet[Log]" = weakref.WeakSet()
_READERS: "weakref.WeakSet[Log]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for log in list(_WRITERS) + list(_READERS):
        log._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _timed_flush(log: Log) -> None:
    """The process's flusher thread, every ``flush_ms`` of a writer."""
    if log._end > log._flushed and log._failed is None and not log._closing:
        try:
            log.flush()
        except SeglogError as e:
            if not log._closed and not log._closing:
                _log.warning("seglog: timed flush of %s failed: %s", log.path, e)


def _maintain(log: Log) -> None:
    """The process's maintenance thread, every ``retention_check_ms`` of a writer:
    retention, compaction and delayed deletes, beside appends (the append lock is
    taken only to swap the segment list)."""
    if log._failed is not None or log._closing or log._closed:
        return
    try:
        with log._maintenance:
            log._check_writable()
            if log.config.deletes:
                log._enforce(_now_ms())
            if log.config.compacted:
                log._compact(None)
            log._deletes.purge()
    except (SeglogError, OSError) as e:
        if not log._closed and not log._closing:
            _log.warning("seglog: maintenance of %s failed: %s", log.path, e)
            log._background_error = e
def _end_offset(seg: Segment) -> int:
    """One past the last offset of a sealed segment's last batch (a short walk from
    its last offset-index entry)."""
    off, pos = seg.index.last_entry()
    end = off
    for _, hdr in seg.batches(pos, seg.size, off):
        end = codec.last_offset(hdr) + 1
    return end


def _check_covers(seg: Segment, covered: int, next_base: int, position: int) -> None:
    """A sealed segment's batches end where the next segment begins (compaction
    leaves an empty batch over offsets it removed at the end): else offsets are
    missing from the middle of the log, which is damage, never a silent skip."""
    if covered < next_base:
        raise CorruptRecordError(
            f"offsets {covered} to {next_base - 1} are missing: the segment ends early "
            f"(cut back?) before the next segment starts", seg.path, position, covered)


def _storage_error(cause: BaseException, message: str) -> StorageError:
    """A StorageError that keeps its cause's errno (``e.errno == errno.ENOSPC``)."""
    code = getattr(cause, "errno", None)
    return StorageError(code, message) if code is not None else StorageError(message)

"""``Log``: the public face of a log (Kafka's ``UnifiedLog``).

Lifecycle (open, recovery, close, forks), validation and the append hot path, the
flush policy and the recovery point, poisoning after an I/O error, tailing
(``wait``), and the maintenance entry points with their policy (which segments
retention deletes, when compaction runs). A ``Log`` holds a ``LocalLog`` (the
segment list, rolling, the lifetime of segments); its read methods are
``_log.reads``'s over that; bytes in files are ``segment``, ``index`` and
``codec``. docs/DESIGN.md has the layers and the lock order.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import weakref
from dataclasses import fields
# Any: Log.open's **options and what append takes: user values
from typing import Any, Iterable, Iterator, Sequence

from ._codec import format as _format
from ._log import reads as _log_reads, wait as _log_wait
from ._views import notebook as _notebook
from ._runtime import points as _points
from ._runtime import scheduler as _scheduler
from . import recovery, repair
from .cleaner import CompactionStats
from .config import LogConfig, open_options
from .errors import (MessageTooLargeError, ReadOnlyError, SeglogError, StorageError,
                     storage_error)
from ._log.append_line import Batches
from ._runtime.files import abs_dir
from ._log.batching import check_window, encode
from ._log.opening import DirLock, check_open_options, open_reader, open_shared, open_writer
from ._log.maintenance import Maintenance
from ._log.live import LiveLog
from ._log.metrics import Metrics
from ._log.local_log import LocalLog
from ._codec.records import check_timestamp
from .message import Headers, Message, MessageSet, Record
from .segment import LogSegments, Segment
_log = logging.getLogger("seglog")
_TAIL_1H = _format.ONE_TAIL
_checksum = _format.CHECKSUM
_time_ns = time.time_ns


def _now_ms() -> int:
    return time.time_ns() // 1_000_000



class Log:
    """An append-only log of messages with contiguous offsets, in one directory.

    Open with ``Log.open``. One writer per directory (``LogLockedError`` for a
    second), or several in any processes with ``multi_writer=True``; any number of
    ``readonly=True`` readers in any process. Safe to share between threads.

    Durability: when ``append`` returns, the message is readable by every reader and
    survives a crash of this process. When ``flush`` returns, everything appended
    before survives power loss. ``flush_ms`` (default 1000) and ``flush_messages``
    bound how much un-flushed data a power loss can take.
    """

    def __init__(self, view: LocalLog | LiveLog, writer: LocalLog | None = None,
                 dir_lock: DirLock | None = None,
                 report: recovery.RecoveryReport | None = None) -> None:
        """Built by ``open``: reads go through ``view``; writes through ``writer`` (None:
        a readonly reader), which holds ``dir_lock`` (the directory's flock;
        ``report``: what recovery did). An exclusive writer reads its own list (``view``
        is ``writer``); one of several reads as a readonly reader does (a
        ``LiveLog``), never waiting for the append lock."""
        self._view = view
        self._local = writer
        self.path, self.config = view.path, view.config
        config = view.config
        self.readonly = writer is None
        self._flush_lock = threading.Lock()
        # held by close() throughout: a flush, compaction or retention call that comes
        # meanwhile waits for its outcome (see _after_close)
        self._closing = threading.Lock()
        self._maint = (None if writer is None else
                       Maintenance(writer, shared=view is not writer))
        self._flush_every = config.flush_messages
        self._dir_lock = dir_lock if dir_lock is not None else DirLock(-1)
        self._jobs: list[_scheduler.Job] = []
        self._compress = _format.CODEC_LZ4 if config.compression == "lz4" else _format.CODEC_NONE
        self._max_msg = config.max_message_bytes
        self.recovery = report      # what an unclean open recovered (None: clean, a reader)
        self._fast_max = min(self._max_msg, 0xFFFE)
        # the packed checksummed tail of a one-record batch's header, by value length,
        # for the current millisecond (the hot path then packs nothing to checksum)
        # the one-record batch's checked fields before the value, by value length, for
        # one timestamp: (ts, {length: bytes}), replaced whole when the ms moves, so a
        # thread reads a timestamp and its tails together (two fields could pair one
        # thread's timestamp with another's tails: a batch whose checksum fails)
        self._tails: tuple[int, dict[int, bytes]] = (-1, {})

    # -- opening and closing ------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike[str], readonly: bool = False,
             multi_writer: bool = False, lock_timeout_ms: int = 10_000,
             config: LogConfig | None = None, **options: Any) -> "Log":
        """Open (and for a writer, create) the log in directory ``path``.

        A writer takes an exclusive ``flock`` on ``<path>/.lock``
        (``LogLockedError`` at once if held) and recovers from a crash. With
        ``multi_writer=True`` any number of processes write it (the lock taken
        shared; the first recovers): each append waits at most ``lock_timeout_ms``
        for the others (then ``LogLockedError``, nothing written), and a joining
        writer takes the stored settings (DESIGN.md, "Several writers"). A
        ``readonly`` reader takes no lock and never writes. Unknown or
        out-of-range options raise ``InvalidConfigError``.

        Settings: a log stores them (``seglog.json``). Opened without options it
        keeps them; options given to a writer override them and are saved; options
        given to a reader apply to that reader only. ``log.config`` is the result.
        ``config=LogConfig(...)`` gives every setting at once (as if each were given
        by name, so it overrides every stored one); options beside it are an
        ``InvalidConfigError`` naming them, a ``config`` that is not a ``LogConfig`` a
        ``TypeError``.

        A directory that holds files but no marker was not created by seglog:
        ``NotALogError``, and nothing in it is changed. So is a ``path`` that is a
        file, a symbolic link to nothing or a path through a file, and, for a
        reader, nothing at all (a writer makes the directory and missing parents);
        a path the process may not read or write is a ``StorageError``; ``""`` a ``ValueError``.
        """
        # bad options: an error before anything is made
        settings = open_options(config, options)
        check_open_options(readonly, multi_writer, lock_timeout_ms)
        path = abs_dir(path, "log")     # "" would be the current directory: ValueError
        if readonly:
            log = cls(open_reader(path, settings))
            _READERS.add(log)
            return log
        view: LocalLog | LiveLog
        if multi_writer:
            local, dir_lock, loaded = open_shared(path, settings, lock_timeout_ms)
            try:
                view = open_reader(path, {}, local.metrics)
            except BaseException:
                local.abandon()
                dir_lock.release()
                raise
        else:
            local, dir_lock, loaded = open_writer(path, settings)
            view = local
        log = cls(view, local, dir_lock, loaded.report if loaded is not None else None)
        cfg = local.config
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
        as do pending ``wait`` calls. Appends, flushes and passes that other threads
        start meanwhile wait for its outcome (then ``LogClosedError``). Every
        descriptor the log opened is closed. In a process forked from the writer's,
        ``close`` touches no file. One of several
        writers that is not the last fsyncs what was appended before it lets go;
        ``LogLockedError`` if another writer held the append lock for
        ``lock_timeout_ms``: the log is then still open and working (close it again).
        """
        local, maint = self._local, self._maint
        if local is None or maint is None:
            self._close_view()
            return
        if local.closed:
            return
        # a compact() or enforce_retention() in another thread (or the maintenance
        # thread's pass) finishes first; one called meanwhile waits for the outcome
        with self._closing, maint.lock:
            self._close(local)
        for job in self._jobs:
            job.cancel()

    def _close(self, local: LocalLog) -> None:
        with self._flush_lock:
            if local.closed:
                return
            clean = not self.readonly and local.failed is None
            try:
                if clean and self._view is not local:
                    # one of several writers fsyncs its appends as it closes: the bulk
                    # of it here, outside the append lock (the others go on appending),
                    # so that the close's fsync under the lock writes only what came
                    # since. A lock held past lock_timeout_ms: the close's error, with
                    # nothing changed
                    local.flush("the log is still open")
                local.close(clean, self._dir_lock)
            except OSError as e:
                # no clean-shutdown marker: the next open recovers what reached the disk
                local.poison(e)
                raise storage_error(e, f"closing {self.path} failed: {e}") from e
            finally:
                if local.closed:
                    self._close_view()
        if self._maint is not None:
            self._maint.purge_all()

    def __del__(self) -> None:
        if sys.is_finalizing():
            return   # threads frozen anywhere, maybe holding a lock: left as if killed
        if "_view" in self.__dict__ and not self.closed:
            try:
                self.close()
            except Exception:
                pass

    def _close_view(self) -> None:
        """Close the reader's list this log reads through, when it is not the writer's
        own (a readonly reader's, one of several writers')."""
        view = self._view
        if isinstance(view, LiveLog):
            view.close()

    def _after_fork(self) -> None:
        """In a forked child: a writer's lock, segment and checkpoints are the parent's;
        the child's copy refuses every operation (``close`` is a no-op) and drops its
        copy of the lock descriptor (closing it never releases the parent's flock)."""
        self._flush_lock = threading.Lock()   # a thread of the parent may have held it
        self._closing = threading.Lock()
        self._view.after_fork()
        if self._local is None or self._maint is None:
            return
        self._local.after_fork()
        self._maint.after_fork()
        if self._view is not self._local:
            self._close_view()                # its copies of descriptors: the parent's live
            self._view = self._local          # the writer's copy: refuses every call
        self._dir_lock.drop_copy()

    # -- state ----------------------------------------------------------------------
    @property
    def flushed_offset(self) -> int:
        """Every offset below this survives power loss."""
        return (self._view if self._local is None else self._local).flushed_offset

    @property
    def closed(self) -> bool:
        """True once closed (``close()``, garbage collection, a fork's copy of a writer)."""
        return (self._view if self._local is None else self._local).closed

    def _check_writable(self) -> None:
        """Raise what an append would raise now: ``LogClosedError``, ``ReadOnlyError``,
        or ``StorageError`` after an I/O error poisoned the log."""
        self._writer()

    def _writer(self) -> LocalLog:
        """The writer, if this log may write now; else what an append would raise."""
        local = self._local
        if local is None:
            self._view.check_readable()
            raise ReadOnlyError(f"log {self.path} was opened readonly")
        local.check_writable()
        return local

    def _fail(self, e: BaseException) -> StorageError:
        """An I/O error of a write poisons the log (the policy: refuse every later
        write until reopened)."""
        if self._local is not None:
            self._local.poison(e)
        return storage_error(e, f"write to {self.path} failed: {e}")

    # -- appending ------------------------------------------------------------------
    def append(self, value: bytes | None, key: bytes | None = None, timestamp: int | None = None,
               headers: Headers = ()) -> int:
        """Append one message; return its offset.

        On return it is readable by all readers and survives a crash of this
        process (rule R1 of docs/DURABILITY.md); ``flush`` makes it survive power
        loss. ``value=None`` with a key is a tombstone. Bad input raises TypeError,
        ValueError or MessageTooLargeError and writes nothing.
        """
        if type(value) is bytes and key is None and not headers:
            # the hot path: one short keyless record, written straight into the map (with
            # compression="lz4" too: a one-record batch is never compressed)
            n = len(value)
            if timestamp is None:
                ts = _time_ns() // 1_000_000
            else:
                ts = check_timestamp(timestamp)
                check_window(self.config, ts, ts, _time_ns() // 1_000_000)
            if n <= self._fast_max:
                cached = self._tails
                if cached[0] != ts:
                    cached = self._tails = (ts, {})
                tail = cached[1].get(n)
                if tail is None:
                    tail = _TAIL_1H.pack(0, 0, 1, ts, ts, n)
                    _points.reach("append.pack")
                    cached[1][n] = tail
                # XXH3 cannot continue from a cached state as CRC-32 could: one call over
                # the joined bytes is the fastest way for short values (measured)
                body = tail + value
                local = self._local
                if local is None:
                    local = self._writer()
                try:
                    off = local.append_one(ts, _checksum(body), body)
                except StorageError:
                    raise           # refused after an earlier failure, or following failed
                except OSError as e:
                    raise self._fail(e) from e
                if self._flush_every is not None and off >= local.flush_at:
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
            end = self._writer().next_offset()
            return range(end, end)
        return append_encoded(self, encode(items, _time_ns() // 1_000_000, self.config,
                                           self._compress))

    # -- flushing -----------------------------------------------------------------
    def flush(self) -> int:
        """fsync what was appended; return the offset below which all survives power loss.

        With several writers, what every writer appended (they share the active
        segment's file); ``LogLockedError`` if another writer held the append lock for
        ``lock_timeout_ms`` (nothing was flushed; what was appended is written)."""
        self._after_close()
        with self._flush_lock:
            local = self._writer()
            try:
                return local.flush()
            except StorageError:
                raise
            except (OSError, ValueError) as e:
                raise self._fail(e) from e

    # -- reading (the read path is _log.reads's, over the LocalLog) -----------------
    @property
    def start_offset(self) -> int:
        """The first offset still in the log."""
        return self._view.start_offset

    @property
    def end_offset(self) -> int:
        """The next offset to assign (one past the last message)."""
        return self._view.end_offset

    @property
    def segments(self) -> LogSegments:
        """The segments, oldest first; the last one is active."""
        return self._view.segments

    def read(self, offset: int, max_bytes: int = 1 << 20) -> MessageSet:
        """Whole batches holding messages from ``offset`` on, up to about ``max_bytes``.

        ``OffsetOutOfRangeError`` unless ``start_offset <= offset <= end_offset``;
        ``offset == end_offset`` gives an empty set. At least one whole batch is
        returned when one exists, however large: in a compacted log whose hole runs
        to a segment's end, its messages may all lie below ``offset`` (read on from
        ``next_offset``, as ``iter()`` does).
        """
        return _log_reads.read(self._view, offset, max_bytes)

    def read_arrow(self, start: int | None = None, end: int | None = None, *,
                   views: bool = False) -> Any:
        """``iter_arrow``'s batches as one ``pyarrow.Table``, its arguments as there."""
        return _log_reads.read_arrow(self._view, start, end, views)

    def iter_arrow(self, start: int | None = None, end: int | None = None, *,
                   views: bool = False) -> Iterator[Any]:
        """Messages with ``start <= offset < end`` as ``pyarrow.RecordBatch``es of
        ``arrow_schema()``, one per 4 MiB read, built with numpy, each batch
        checksummed first. Keys and values are ``binary`` (copied once, in C), or
        with ``views=True`` ``binary_view`` arrays into the bytes read (no copy; not
        every pyarrow kernel takes view types). ``start`` defaults to
        ``start_offset``, ``end`` to ``end_offset`` when called; ``OffsetOutOfRangeError``
        if ``start`` is outside the log or retention deletes what is being read.
        Needs pyarrow and numpy (the ``spark`` extra)."""
        return _log_reads.iter_arrow(self._view, start, end, views)

    def iter(self, start: int | None = None, end: int | None = None) -> Iterator[Message]:
        """Messages with ``start <= offset < end``, in order. ``start`` defaults to
        ``start_offset``; ``end`` to the end of the log as the iteration reaches it (it
        does not wait for more: see ``wait``). Compaction and retention may run
        meanwhile: the iterator goes on in the current segments
        (``OffsetOutOfRangeError`` if retention deleted its next offset)."""
        return _log_reads.iterate(self._view, start, end, self)

    def __iter__(self) -> Iterator[Message]:
        return _log_reads.iterate(self._view, None, None, self)

    def offset_for_time(self, timestamp: int) -> int | None:
        """The first offset whose message timestamp is >= ``timestamp``, or None."""
        return _log_reads.offset_for_time(self._view, timestamp)

    def __len__(self) -> int:
        """Messages between ``start_offset`` and ``end_offset``: the offsets in between,
        or after compaction (which leaves gaps) the records, counted from the batches."""
        return _log_reads.count(self._view)

    def stats(self) -> dict[str, Any]:
        """A snapshot as a plain dict: offsets, messages (``len``), segments, bytes
        (of stored batches, not a writer's preallocated space), the oldest and newest
        record timestamps (ms; None when empty). Reads batch headers only; a reader
        beside a writer that deletes or replaces segments looks again."""
        return _log_reads.stats(self._view, self.readonly)

    def to_pandas(self, start: int | None = None, end: int | None = None, *,
                  since: object = None, until: object = None, decode: str | None = None) -> Any:
        """Messages as a ``pandas.DataFrame`` (columns offset, timestamp as UTC
        datetimes, key, value, headers; ``decode="utf-8"``: keys and values as ``str``),
        from offset ``start`` to ``end`` and with timestamps in ``[since, until)``
        (datetimes, ISO 8601 strings or ms; naive means UTC). Built from
        ``read_arrow``; needs pandas and pyarrow (the ``spark`` extra). Without
        ``start``, retention deleting the first messages meanwhile (a writer in another
        process) makes it read again from the new start."""
        return _log_reads.to_pandas(self._view, start, end, since=since, until=until,
                                    decode=decode)

    def verify(self) -> repair.CheckReport:
        """Read and check every batch and index entry of the log, as ``seglog verify``
        does: a ``CheckReport`` that says what was read, and at damage where it is,
        what is at stake and what to do next (a notebook shows it as a table; ``str()``
        is the command's text). Reads only and takes no lock, beside any writer; the
        log's notebook views then say when it was verified and what was found.
        ``LogClosedError`` if the log is closed."""
        return repair.verify(self)

    def _repr_html_(self) -> str:
        return _log_reads.repr_html(self._view, self.readonly)

    def wait(self, offset: int, timeout: float | None = None) -> bool:
        """Block until ``end_offset > offset``: True, or False after ``timeout`` s (None or
        ``math.inf``: for ever; 0: look once; < 0 or NaN, or ``offset`` < 0: ``ValueError``;
        closed: ``LogClosedError``). Readers in other processes poll (0.5 ms up to 20 ms)."""
        return _log_wait.wait(self._view, offset, timeout)

    async def wait_async(self, offset: int, timeout: float | None = None) -> bool:
        """``wait`` for asyncio: awaits without blocking the event loop (docs/DESIGN.md)."""
        return await _log_wait.wait_async(self._view, offset, timeout)

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
        maint = self._maintenance()
        return maint.enforce(_now_ms() if now_ms is None else check_timestamp(now_ms),
                             self._check_writable, self._fail)

    def compact(self, now_ms: int | None = None) -> CompactionStats:
        """One compaction pass (cleanup_policy "compact"): keep the latest record per key.

        Only sealed segments are rewritten; offsets never change; appends and reads
        go on meanwhile. Returns ``CompactionStats`` (``skipped`` says why a pass did
        nothing). See ``seglog.cleaner``.
        """
        maint = self._maintenance()
        return maint.compact(None if now_ms is None else check_timestamp(now_ms),
                             self._check_writable, self._fail)

    def _after_close(self) -> None:
        """If a close is under way, wait for its outcome (then the caller finds the log
        closed, or open still if the close failed). Locks are not fair: a thread
        calling flush(), compact() or enforce_retention() in a loop takes their locks
        again before a waiting close() is woken, which held close() for seconds."""
        if self._closing.locked():
            with self._closing:
                pass

    def _maintenance(self) -> Maintenance:
        """The writer's maintenance, after raising what an append would, then (once) a
        failure of the background pass."""
        self._after_close()
        self._writer()
        maint = self._maint
        assert maint is not None
        maint.raise_background_error()
        return maint

    def metrics(self) -> dict[str, Any]:
        """Counters since this ``Log`` was opened, as a plain dict: messages, batches
        and bytes appended; flushes and the fsync latency histogram (cumulative
        buckets in ms, as Prometheus has them); rolls; what recovery at open
        scanned and cut; corrupt batches seen by reads; retention runs and what they
        deleted; compaction runs and the bytes they saved; wake-ups of ``wait``,
        and its callers blocked now (``waiting``: a ``wait_async`` worker is one).
        Cheap to keep on: appends add one integer increment."""
        local, view = self._local, self._view
        return _notebook.Metrics(_metrics(view.metrics,
                                          (0, 0, 0) if local is None else local.appended(),
                                          self.recovery,
                                          # one of several writers waits as a reader
                                          # does, polling through its view
                                          view.metrics.pollers
                                          + (0 if local is None else local.waiters)))

    def __repr__(self) -> str:
        state = "closed" if self.closed else "readonly" if self.readonly else "writer"
        return _describe(self._view, state)


# -- the seams of Topic, Producer, the Spark sink and seglog.testing -------------------
# Functions of this module, not methods: a user's Log shows none of them (nor does the
# API reference), while the modules that build on a Log call them by a public name.
def encode_batches(log: Log, items: Sequence[Any], now: int,
                   lengths: list[int] | None = None) -> Batches:
    """Every input check of ``log.append_batch(items)`` (``now``: the writer's clock in
    ms) and its batches, encoded for ``append_encoded``; writes nothing (a topic
    encodes every partition's part before writing any). ``lengths``: the items'
    lengths, when the caller knows each is exactly ``bytes``."""
    return encode(items, now, log.config, log._compress, lengths)


def append_encoded(log: Log, batches: Batches, atomic: bool = False) -> range:
    """Append what ``encode_batches`` returned to ``log``, atomically per batch; the
    range of offsets.

    ``atomic``: all the batches as one unit, which readers and recovery see whole or
    not at all (``ActiveSegment.append_group``). They must fit one segment: more than
    ``segment_bytes`` + ``max_message_bytes`` in all is a ``MessageTooLargeError``,
    and nothing is written."""
    if atomic:
        total = sum(b[3] for b in batches)
        limit = log.config.segment_bytes + log.config.max_message_bytes
        if total > limit:
            raise MessageTooLargeError(
                f"an atomic append of {total} bytes does not fit one segment "
                f"(segment_bytes + max_message_bytes = {limit})")
    local = log._local
    if local is None:
        local = log._writer()
    try:
        got = local.append_encoded(batches, atomic)
    except StorageError:
        raise
    except OSError as e:
        raise log._fail(e) from e
    if log._flush_every is not None and got.stop - 1 >= local.flush_at:
        log.flush()
    return got


def check_writable(log: Log) -> None:
    """Raise what an append to ``log`` would raise now: ``LogClosedError``,
    ``ReadOnlyError``, or ``StorageError`` after an I/O error poisoned the log."""
    log._writer()


def abandon(log: Log) -> None:
    """Drop ``log``'s writer as a killed process would (``seglog.testing.abandon``,
    for crash tests): no flush, no seal, no marker; the lock is released."""
    for job in log._jobs:
        job.cancel()
    with log._flush_lock:
        if log._local is not None:
            log._local.abandon()
        log._dir_lock.release()
        if log._view is not log._local:
            log._close_view()


_WRITERS: "weakref.WeakSet[Log]" = weakref.WeakSet()
_READERS: "weakref.WeakSet[Log]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for log in list(_WRITERS) + list(_READERS):
        log._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _timed_flush(log: Log) -> None:
    """The process's flusher thread, every ``flush_ms`` of a writer."""
    local = log._local
    if local is None:
        return
    if local.end > local.flushed_offset and local.failed is None and not local.closing:
        try:
            log.flush()
        except SeglogError as e:
            if not local.closed and not local.closing:
                _log.warning("seglog: timed flush of %s failed: %s", log.path, e)


def _maintain(log: Log) -> None:
    """The process's maintenance thread, every ``retention_check_ms`` of a writer."""
    local, maint = log._local, log._maint
    if local is None or maint is None or local.failed is not None or local.closing \
            or local.closed:
        return
    maint.run(_now_ms(), log._check_writable, log._fail)


def _metrics(metrics: Metrics, appended: tuple[int, int, int],
             rec: recovery.RecoveryReport | None, waiting: int) -> dict[str, Any]:
    """``Log.metrics()``: the append counters, what recovery did, the log's counters,
    the ``wait`` callers blocked now."""
    messages, nbytes, batches = appended
    out: dict[str, Any] = {
        "waiting": waiting,
        "messages_appended": messages, "batches_appended": batches, "bytes_appended": nbytes,
        "recovery": None if rec is None else {
            "segments_scanned": rec.segments_scanned, "scanned_bytes": rec.scanned_bytes,
            "cut_bytes": rec.cut_data_bytes, "cut_messages": rec.cut_messages,
            "reserved_bytes": rec.reserved_bytes,
            "deleted_segments": len(rec.deleted_segments)}}
    out.update(metrics.snapshot())
    return out


def _describe(local: LocalLog | LiveLog, state: str) -> str:
    """``repr(log)``: path, offsets, segments, state and the settings that differ from
    the defaults (all of them: ``log.config``)."""
    cfg = local.config
    changed = " ".join(f"{f.name}={getattr(cfg, f.name)!r}" for f in fields(cfg)
                       if getattr(cfg, f.name) != f.default)
    return (f"<seglog.Log {local.path} [{local.start}, {local.end}) "
            f"{len(local.segs)} segment(s) {state}{' ' + changed if changed else ''}>")

"""``Producer``: Kafka's asynchronous batching producer, in-process.

``send()`` validates a record, queues it and returns a ``concurrent.futures.Future``;
one background thread per producer writes what accumulated, one batch per
partition, when ``linger_ms`` has passed since the oldest waiting record or when
``batch_size`` bytes wait. Each write is one encoded batch appended atomically
(``log.encode_batches`` cuts, ``log.append_encoded`` appends one batch per call): a failed
write fails exactly its records' futures. A durable producer has a second thread
that fsyncs what the writer appended (every round waiting then, together) and
resolves it, while the writer goes on appending. docs/PRODUCER.md has the contract.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
import time
import weakref
from bisect import bisect_right
from concurrent.futures import Future
from itertools import accumulate, compress, repeat
from operator import add
# Any: user values and keys, their serializers, and Futures of them
from typing import Any, Callable, Iterable, Sequence

from ._runtime.future import FutureRound, finish_all
from .errors import (InvalidConfigError, LogLockedError, MessageTooLargeError,
                     NotDurableError, ProducerClosedError, ProducerTimeoutError, ReadOnlyError,
                     StorageError)
from .log import Log, append_encoded, encode_batches
from ._codec.records import prepare_batch
from .message import Headers, Record
from .topic import Topic

# bytes counted per record when cutting plain values into chunks, above what the
# encoder counts: a chunk then always encodes as one batch by the single-join path
_CUT_OVERHEAD = 32
_FOREVER = float("inf")
# written records: the futures of each batch, the batch's offsets, and where the
# futures are in their round (None: they are finished one by one)
_Written = list[tuple[list[Future[Any]], range, tuple[FutureRound, int] | None]]
# a round the writer appended, for a durable producer's syncer: the records taken
# through it (a count), its bytes (in the buffer until made durable), and what it
# wrote, by partition
_Round = tuple[int, int, list[tuple[int, _Written]]]
# a durable producer whose fsync failed (another writer held the lock, say) tries
# again this often while records wait to be made durable
_RETRY_S = 0.05


def _time_ms() -> int:
    return time.time_ns() // 1_000_000


def _option(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < low:
        raise InvalidConfigError(f"{name} must be at least {low}, not {value}")
    return value


def _deadline(timeout: float | None) -> float:
    if timeout is None:
        return _FOREVER
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout != timeout:
        raise TypeError("timeout must be a number of seconds or None")
    return time.monotonic() + max(0.0, timeout)


class _Part:
    """What waits for one partition: items (bytes or Record), their futures (of one
    round: started and resolved a batch at a time), bytes (those ``send`` queued the
    common way are counted in by the next send that takes the full way: the
    producer's ``_fast_part``)."""

    __slots__ = ("items", "futures", "round", "nbytes", "plain")

    def __init__(self, tag: int | None) -> None:
        self.items: list[bytes | Record] = []
        self.futures: list[Future[Any]] = []
        self.round = FutureRound(tag)
        self.nbytes = 0
        self.plain = True       # every item is bytes: the writer's C-level cut applies


class Producer:
    """Kafka's asynchronous producer over a ``Log`` or a ``Topic`` (the target).

    ``send()`` (any thread) validates and queues a record and returns a
    ``concurrent.futures.Future`` of its offset (a ``Log``) or ``(partition,
    offset)`` (a ``Topic``). A background thread writes what accumulated when
    ``linger_ms`` has passed since the oldest waiting record, or at once when
    ``batch_size`` bytes wait: per partition, in batches of at most the log's
    ``max_message_bytes``, each appended atomically.

    Durability of a resolved future: ``durable=False``, the record is in the log,
    readable and safe from a crash of this process (as after ``Log.append``);
    ``durable=True``, it is also fsynced (the log's ``flushed_offset`` is past it):
    safe from power loss. Records of many threads are fsynced together.

    Ordering: records one thread sends to one partition are written in the order
    sent. Keyed records on a ``Topic`` go where ``Topic.append`` puts them; keyless
    ones stick to one partition per accumulated batch (Kafka's sticky partitioner).

    Errors: bad input is refused by ``send()`` itself and nothing is queued. A
    write that fails (closed log, ``StorageError``, ``LogLockedError``...) fails
    exactly its records' futures with that exception; the other writes go on; a
    future never fails for a record that was written. With ``durable=True``, written
    records whose fsync failed wait (``flush`` waits for them too) while the
    producer tries again; those a flush of the log covered meanwhile resolve; what is still
    not durable when the producer closes fails with ``NotDurableError``, which
    carries the records' offsets.

    ``max_buffer_bytes`` bounds the queued record bytes: ``send()`` on a full
    buffer waits up to ``max_block_ms``, then raises ``ProducerTimeoutError``.
    The producer never closes its target; close the producer first.

    asyncio: ``await asyncio.wrap_future(producer.send(...))`` awaits a record
    without blocking the event loop; cancelling it cancels the record if the
    writer has not taken it yet (docs/PRODUCER.md has an example).
    """

    def __init__(self, target: Log | Topic, linger_ms: int = 5, batch_size: int = 1 << 20,
                 max_buffer_bytes: int = 32 << 20, max_block_ms: int = 60_000,
                 durable: bool = False,
                 key_serializer: Callable[[Any], bytes] | None = None,
                 value_serializer: Callable[[Any], bytes] | None = None) -> None:
        if isinstance(target, Topic):
            self._topic: Topic | None = target
            logs = [target.partition(p) for p in range(target.num_partitions)]
        elif isinstance(target, Log):
            self._topic = None
            logs = [target]
        else:
            raise TypeError(f"a Producer writes to a Log or a Topic, not {type(target).__name__}")
        if any(log.readonly for log in logs):
            raise ReadOnlyError("a Producer needs a writer: the target was opened readonly")
        self._linger = _option("linger_ms", linger_ms, 0) / 1000.0
        self._batch_size = _option("batch_size", batch_size, 1)
        self._max_buffer = _option("max_buffer_bytes", max_buffer_bytes, 1)
        self._max_block = _option("max_block_ms", max_block_ms, 0) / 1000.0
        if not isinstance(durable, bool):
            raise TypeError("durable must be a bool")
        for name, f in (("key_serializer", key_serializer), ("value_serializer", value_serializer)):
            if f is not None and not callable(f):
                raise TypeError(f"{name} must be callable or None")
        self.target = target
        self.durable = durable
        self._key_ser = key_serializer
        self._value_ser = value_serializer
        self._logs = logs
        self._max_msg = [log.config.max_message_bytes for log in logs]
        # a Topic's futures resolve to (partition, offset): their rounds' tag
        self._tags: list[int | None] = ([None] if self._topic is None
                                        else list(range(len(logs))))
        self._parts = [_Part(t) for t in self._tags]
        # the largest plain value ``send`` queues without the checks of ``_prepared``:
        # none with a value serializer (it makes the value), else what fits every
        # partition's batch and the buffer
        self._plain_max = (-1 if value_serializer is not None
                           else min(min(self._max_msg), self._max_buffer))
        self._sticky = 0
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)    # the writer: records wait
        self._space = threading.Condition(self._lock)   # senders: buffer space freed
        self._done = threading.Condition(self._lock)    # flush(): a round completed
        self._queued = 0            # bytes of the records waiting (to be taken)
        self._inflight = 0          # bytes of the records taken, not yet completed
        # ``send``'s common way (plain bytes to the sticky partition) takes only the
        # records' lists and ``_queued`` while ``_queued`` stays within ``_limit``
        # (-1: no send goes that way), which the other way sets; the bytes it adds
        # above ``_fast_from`` are ``_fast_part``'s, counted in by the other way
        self._limit = -1
        self._fast_from = 0
        self._fast_part = self._parts[0]
        self._full = False          # a partition holds batch_size bytes: write at once
        self._oldest = 0.0          # monotonic time the oldest waiting record was queued
        self._any = False           # records wait in ``_parts`` (to be taken)
        self._taken = 0             # records taken by the writer since the start
        self._completed = 0         # of them, written (or failed) with futures resolved
        self._flush_to = 0          # flush() asks the writer to take records up to here
        self._starved = 0           # senders waiting for buffer space: write at once
        # durable: written records whose fsync failed, (partition, futures, offsets,
        # why), kept by the syncer thread until a flush covers them; their count
        self._owed: list[tuple[int, list[Future[Any]], range, BaseException]] = []
        self._owed_n = 0
        self._closing = False
        self._stopped = False
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name="seglog-producer", daemon=True)
        # durable: the rounds the writer appended, (records taken through them, their
        # written records by partition), for the syncer thread; None: the writer ended
        self._appended: queue.SimpleQueue[_Round | None] = queue.SimpleQueue()
        self._syncer: threading.Thread | None = None
        if durable:
            self._syncer = threading.Thread(target=self._sync_rounds, name="seglog-producer-sync",
                                            daemon=True)
            self._syncer.start()
        self._thread.start()
        _LIVE.add(self)

    # -- sending ---------------------------------------------------------------------
    def send(self, value: Any, key: Any = None, timestamp: int | None = None,
             headers: Headers = (), partition: int | None = None) -> "Future[Any]":
        """Queue one record; return the future of its offset (``(partition, offset)``
        on a ``Topic``).

        ``value``/``key`` go through the serializers first (None, a tombstone's
        value or a missing key, is never serialized); ``timestamp`` None means the
        time the record is written. Refused here, with nothing queued:
        ``TypeError``/``ValueError``/``MessageTooLargeError`` as ``Log.append``
        refuses them, ``InvalidConfigError`` for a partition the target lacks,
        whatever a serializer raises, ``ProducerClosedError`` after ``close()``,
        ``ProducerTimeoutError`` when the buffer stayed full ``max_block_ms``.
        """
        item: bytes | Record
        if (type(value) is bytes and key is None and timestamp is None and not headers
                and partition is None and (size := len(value)) <= self._plain_max):
            # the common record, plain bytes to the sticky partition: every check of
            # the way below holds by construction (no serializer applies, it fits a
            # batch and the buffer), and a closed producer is refused under the lock
            p = self._sticky        # (one statement each: no tuple made)
            item = value
            common = True
        else:
            p, item, size = self._prepared(value, key, timestamp, headers, partition)
            common = False
        # a future of the round now waiting; the writer may take that round before
        # the lock is ours (then one of the next round is made)
        part = self._parts[p]
        fut = part.round.new()
        with self._lock:
            # each new int costs an allocation: a sum made once, and no count of
            # records (the parts' lists are, when one is asked for: ``_sent``)
            queued = self._queued + size
            if common and queued <= self._limit and part is self._parts[p]:
                # within the bound the last send set (``_limit``): the buffer has
                # room, the writer is awake, the batch is short of batch_size, the
                # producer is open. Its bytes are the sticky part's (``_fast_part``)
                part.items.append(item)
                part.futures.append(fut)
                self._queued = queued
                return fut
            if queued + self._inflight > self._max_buffer:
                self._wait_for_space(size)
                queued = self._queued + size
            if self._closing:
                raise self._closed_error()
            if part is not self._parts[p]:
                part = self._parts[p]
                fut = part.round.new()
            # the bytes sent the common way since the bound was set
            self._fast_part.nbytes += self._queued - self._fast_from
            part.items.append(item)
            part.futures.append(fut)
            part.nbytes += size
            if type(item) is not bytes:
                part.plain = False
            self._queued = queued
            if not self._any:       # the first record to wait
                self._any = True
                self._oldest = time.monotonic()
                self._wake.notify()
            elif part.nbytes >= self._batch_size and not self._full:
                self._full = True       # one wake-up, not one per send until taken
                self._wake.notify()
            # the bound of the common way until the next send that takes this one:
            # the buffer's room, and (until the writer is told to write at once) one
            # byte short of batch_size in the sticky partition
            sticky = self._parts[self._sticky]
            limit = self._max_buffer - self._inflight
            if not self._full and queued + self._batch_size - 1 - sticky.nbytes < limit:
                limit = queued + self._batch_size - 1 - sticky.nbytes
            self._limit = limit
            self._fast_from = queued
            self._fast_part = sticky
        return fut

    def _sent(self) -> int:
        """(lock held) Records sent since the start: those taken and those waiting."""
        return self._taken + sum(len(part.futures) for part in self._parts)

    def _prepared(self, value: Any, key: Any, timestamp: int | None, headers: Headers,
                  partition: int | None) -> tuple[int, bytes | Record, int]:
        """(``send``) Any record: serialized, placed and checked; its partition, what
        is queued for it and its size."""
        if self._closing:       # closed, or a forked child's copy
            raise self._closed_error()
        if self._value_ser is not None and value is not None:
            value = self._value_ser(value)
        if self._key_ser is not None and key is not None:
            key = self._key_ser(key)
        if self._topic is not None:
            p = self._topic.partition_for(key, partition)
            if p is None:
                p = self._sticky
        elif partition is None or (type(partition) is int and partition == 0):
            p = 0
        else:
            if isinstance(partition, bool) or not isinstance(partition, int):
                raise TypeError(f"partition must be an int, not {type(partition).__name__}")
            raise InvalidConfigError(f"a Log is one partition (0 or None), not {partition}")
        item: bytes | Record
        if type(value) is bytes and key is None and timestamp is None and not headers:
            size = len(value)
            if size > self._max_msg[p]:
                prepare_batch((value,), 0, self._max_msg[p])    # raises the log's error
            item = value
        else:
            item, size = self._checked(p, value, key, timestamp, headers)
        if size > self._max_buffer:
            raise MessageTooLargeError(
                f"record of {size} bytes exceeds max_buffer_bytes={self._max_buffer}")
        return p, item, size

    def _checked(self, p: int, value: Any, key: Any, timestamp: int | None,
                 headers: Headers) -> tuple[Record, int]:
        """A record that is not plain bytes: every check ``Log.append_batch`` makes
        (the log's own ``encode``, so the rules are the log's), and a copy of its
        buffers (a bytearray changed after ``send`` must not change the record)."""
        if not isinstance(headers, (tuple, list, str, bytes, dict)) and isinstance(headers, Iterable):
            # an iterator (zip, a generator) is read once: by the checks and the copy
            headers = tuple(headers)
        rec = Record(value, key, timestamp, headers)
        batches = encode_batches(self._logs[p], (rec,), _time_ms())
        if headers and (not isinstance(headers, tuple)
                        or any(type(v) is not bytes for _, v in headers)):
            headers = tuple((k, memoryview(v).tobytes()) for k, v in headers)
        if type(value) is not bytes and value is not None:
            value = memoryview(value).tobytes()
        if type(key) is not bytes and key is not None:
            key = memoryview(key).tobytes()
        return Record(value, key, timestamp, headers), batches[0][3]

    def _wait_for_space(self, size: int) -> None:
        """(lock held) Wait until ``size`` more bytes fit in the buffer."""
        if self._background():
            # a future's callback runs on the writer (or the syncer): waiting for
            # them would never end
            raise ProducerTimeoutError("the producer's buffer is full; a send() from a "
                                       "future's callback cannot wait for it")
        deadline = time.monotonic() + self._max_block
        # as Kafka's accumulator: a sender waiting for memory makes what waits ready now
        self._starved += 1
        self._wake.notify()
        try:
            while (self._queued + self._inflight + size > self._max_buffer
                   and not self._closing):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ProducerTimeoutError(
                        f"the producer's buffer ({self._max_buffer} bytes) stayed full for "
                        f"max_block_ms={round(self._max_block * 1000)}; nothing was queued")
                self._space.wait(left)
        finally:
            self._starved -= 1

    # -- flushing and closing --------------------------------------------------------
    def flush(self, timeout: float | None = None) -> None:
        """Write everything sent before this call now (``durable``: and fsync it) and
        wait until its futures are resolved; ``ProducerTimeoutError`` after
        ``timeout`` seconds (None: no bound)."""
        if self._pid != os.getpid():
            raise self._closed_error()
        if self._background():
            raise ProducerClosedError("flush() from a future's callback would wait for itself")
        deadline = _deadline(timeout)
        with self._lock:
            target = self._sent()
            if target > self._flush_to:
                self._flush_to = target
                self._wake.notify()
            while self._completed < target or self._owed_n:
                left = deadline - time.monotonic()
                if left <= 0:
                    if self._completed < target:
                        raise ProducerTimeoutError(
                            f"flush: {target - self._completed} record(s) still being "
                            f"written after {timeout} s")
                    raise ProducerTimeoutError(
                        f"flush: {self._owed_n} record(s) written, not yet made durable "
                        f"after {timeout} s (the producer goes on trying)")
                self._done.wait(None if left == _FOREVER else left)

    def close(self, timeout: float | None = None) -> None:
        """Refuse new sends, flush, stop the background thread. Idempotent; does not
        close the target. ``ProducerTimeoutError`` if the flush takes longer than
        ``timeout`` seconds (the thread goes on writing; call ``close`` again to
        wait). In a process forked from the producer's, it does nothing."""
        if self._pid != os.getpid():
            return
        deadline = _deadline(timeout)
        with self._lock:
            self._closing = True
            self._limit = -1
            self._space.notify_all()
            self._wake.notify()
            if self._background():
                self._stopped = True    # from a future's callback: the writer ends its work
                return
        left = None if deadline == _FOREVER else deadline - time.monotonic()
        self.flush(left)
        with self._lock:
            self._stopped = True
            self._wake.notify()
        for t in (self._thread, self._syncer):
            if t is not None and t is not threading.current_thread():
                t.join(None if deadline == _FOREVER else max(0.0, deadline - time.monotonic()))
        _LIVE.discard(self)

    def _background(self) -> bool:
        """True on the producer's own threads (a future's callback runs there)."""
        return threading.current_thread() in (self._thread, self._syncer)

    @property
    def closed(self) -> bool:
        """True from the start of ``close()``: ``send`` then raises
        ``ProducerClosedError``."""
        return self._closing

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _closed_error(self) -> ProducerClosedError:
        if self._pid != os.getpid():
            return ProducerClosedError(
                f"this producer belongs to process {self._pid}; a forked child cannot use "
                f"it (make a new Producer in the child)")
        return ProducerClosedError("the producer is closed")

    def _after_fork(self) -> None:
        """In a forked child: the writer thread does not exist here; locks are new."""
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._space = threading.Condition(self._lock)
        self._done = threading.Condition(self._lock)
        self._closing = True
        self._limit = -1

    # -- the background thread -------------------------------------------------------
    def _run(self) -> None:
        nparts = len(self._parts)
        tags = self._tags
        while True:
            stopping = False
            # made before the lock is taken: what runs while it is held has no Python
            # call in it, so the interpreter never switches threads there and senders
            # never queue on the lock behind a writer that is not running (a convoy)
            fresh = [_Part(t) for t in tags]
            with self._lock:
                while True:
                    if self._any:
                        if (self._closing or self._flush_to > self._taken or self._starved
                                or self._full):
                            break
                        left = self._oldest + self._linger - time.monotonic()
                        if left <= 0:
                            break
                        self._wake.wait(left)
                    elif self._stopped:
                        stopping = True
                        break
                    else:
                        self._wake.wait()
                upto = self._taken = self._sent()     # counted before the swap
                parts, self._parts = self._parts, fresh
                freed = self._queued
                self._inflight += freed
                self._queued = 0
                sticky = self._sticky
                if parts[sticky].items:
                    self._sticky = (sticky + 1) % nparts
                self._limit = -1            # the next send sets the bound anew
                self._fast_from = 0
                self._fast_part = fresh[self._sticky]   # (the taken part is not kept)
                self._any = False
                self._full = False
            # the round is taken whole: from here no record of it can be cancelled
            taken = []
            for p, part in enumerate(parts):
                if part.items:
                    try:
                        taken.append((p, part, part.round.start(part.futures)))
                    except BaseException as e:  # never lose the thread: fail the futures
                        _fail(part.futures, e)
            written: list[tuple[int, _Written]] = []
            for p, part, keep in taken:
                try:
                    w = self._write(p, part, keep)
                except BaseException as e:      # never lose the thread: fail the futures
                    _fail(part.futures, e)
                    continue
                if w:
                    written.append((p, w))
            if self._syncer is not None:
                # the syncer makes the round durable, frees its bytes and completes
                # it, in order
                self._appended.put((upto, freed, written))
                if stopping:
                    self._appended.put(None)
            else:
                with self._lock:
                    self._inflight -= freed
                    self._completed = upto
                    self._space.notify_all()
                    self._done.notify_all()
            if stopping:
                return

    def _sync_rounds(self) -> None:
        """(the syncer thread of a durable producer) Make the rounds the writer
        appended durable, every round waiting at once (one fsync per partition for
        all of them: group commit), resolve their futures and complete them in
        order; while written records whose fsync failed wait, try them again
        every ``_RETRY_S`` the writer leaves it idle. Ends after the writer."""
        while True:
            rounds: list[_Round | None] = []
            try:
                rounds.append(self._appended.get(timeout=_RETRY_S if self._owed else None))
            except queue.Empty:
                self._make_owed_durable()       # idle for _RETRY_S: the retry
            while rounds:
                try:
                    rounds.append(self._appended.get_nowait())
                except queue.Empty:
                    break
            stopping = bool(rounds) and rounds[-1] is None     # the writer's last word
            done = [r for r in rounds if r is not None]
            by_part: dict[int, _Written] = {}
            for _, _, appended in done:
                for p, w in appended:
                    by_part.setdefault(p, []).extend(w)
            for p in sorted(by_part):
                try:
                    self._make_durable(p, by_part[p])
                except BaseException as e:      # never lose the thread: fail the futures
                    for futs, _, _ in by_part[p]:
                        _fail(futs, e)
            self._settle_owed()
            if stopping:
                self._give_up_owed()
            with self._lock:
                if done:
                    self._completed = done[-1][0]
                    self._inflight -= sum(r[1] for r in done)
                    self._space.notify_all()
                self._owed_n = sum(len(f) for _, f, _, _ in self._owed)
                self._done.notify_all()
            if stopping:
                return

    def _write(self, p: int, part: _Part, keep: list[bool] | None) -> _Written:
        """Write one partition's records (its round started: ``keep`` as
        ``FutureRound.start`` said), one atomic batch per append; resolve their
        futures, or (durable) return them for the syncer (``_make_durable``)."""
        rnd: FutureRound | None = part.round
        items: Sequence[bytes | Record] = part.items
        futures = part.futures
        if keep is not None:        # some were cancelled (or the futures are plain
            # ones): the others finish one by one
            rnd = None
            if keep.count(True) != len(keep):       # cancelled ones are not written
                items = list(compress(items, keep))
                futures = list(compress(futures, keep))
                if not items:
                    return []
        log = self._logs[p]
        written: _Written = []
        cuts, lengths = self._chunks(p, items, part.plain)
        for a, b in cuts:
            chunk = items[a:b]
            try:
                batches = encode_batches(log, chunk, _time_ms(),
                                         None if lengths is None else lengths[a:b])
            except Exception:
                # a check that passed in send() fails now (the timestamp window moved):
                # fail the records it refuses, write the others
                batches = self._encode_each(log, chunk, futures[a:b])
            i = a
            for batch in batches:
                n = batch[1]
                futs = futures[i:i + n] if batch[0] is not None else []
                span = None if rnd is None else (rnd, i)
                i += n
                if not futs:
                    continue
                try:
                    written.append((futs, append_encoded(log, [batch]), span))
                except Exception as e:
                    _fail(futs, e)
        if self.durable:
            return written
        self._resolve(p, written)
        return []

    def _make_durable(self, p: int, written: _Written) -> None:
        """(the syncer) fsync partition ``p`` and resolve the ``written`` records it
        covers; those it does not are owed (``_owe``)."""
        log = self._logs[p]
        if written:
            # one fsync for every thread's records of these rounds (group commit)
            try:
                flushed = log.flush()
            except Exception as e:
                # they are written: never said not to be. What a flush already made
                # durable (another writer's, the timed one) resolves; the rest wait
                # for a later flush, or fail with their offsets
                self._owe(p, written, log.flushed_offset, e)
                return
            for futs, offsets, _ in written:
                if offsets.stop > flushed:      # never resolve ahead of the fsync
                    self._owe(p, [(futs, offsets, None)], flushed, StorageError(
                        f"{log.path}: flushed to {flushed}, not past {offsets.stop - 1}"))
            written = [w for w in written if w[1].stop <= flushed]
        self._resolve(p, written)

    def _owe(self, p: int, written: _Written, flushed: int,
             why: BaseException) -> None:
        """Written records a flush did not make durable: those ``flushed`` covers
        resolve; while only the lock stood in the way (another writer held it) and the
        producer is not closing, the rest wait for the next try; else they fail with
        ``NotDurableError`` (the log is closed or poisoned: it flushes no more)."""
        log = self._logs[p]
        for futs, offsets, span in written:
            if offsets.stop <= flushed:
                self._resolve(p, [(futs, offsets, span)])
            elif isinstance(why, LogLockedError) and not self._closing and not log.closed:
                self._owed.append((p, futs, offsets, why))
            else:
                _fail(futs, _not_durable(log, p if self._topic is not None else None,
                                         offsets, why))

    def _resolve(self, p: int, written: _Written) -> None:
        for futs, offsets, span in written:
            if span is not None:
                span[0].resolve(span[1], offsets)
            else:
                finish_all(futs, offsets if self._topic is None else zip(repeat(p), offsets))

    def _settle_owed(self) -> None:
        """(the syncer) Resolve the owed records a flush covered meanwhile (a later
        round's, another writer's, the timed one): with rounds coming steadily, the
        retry after ``_RETRY_S`` idle may never come."""
        if not self._owed:
            return
        keep = []
        for item in self._owed:
            p, futs, offsets, _ = item
            if offsets.stop <= self._logs[p].flushed_offset:
                self._resolve(p, [(futs, offsets, None)])
            else:
                keep.append(item)
        self._owed = keep

    def _make_owed_durable(self) -> None:
        """(the syncer thread) Try again to make the written records whose fsync failed
        durable: one flush per log (``_owe`` says what becomes of them)."""
        owed, self._owed = self._owed, []
        for p in sorted({p for p, _, _, _ in owed}):
            log = self._logs[p]
            mine: _Written = [(futs, offsets, None) for q, futs, offsets, _ in owed if q == p]
            why: BaseException
            try:
                flushed = log.flush()
                why = StorageError(f"{log.path}: flushed to {flushed}")
            except Exception as e:
                flushed, why = log.flushed_offset, e
            self._owe(p, mine, flushed, why)

    def _give_up_owed(self) -> None:
        """(the syncer thread, stopping) A last try (the producer is closing: what it
        does not cover fails with its offsets)."""
        if self._owed:
            self._make_owed_durable()
        for p, futs, offsets, why in self._owed:
            _fail(futs, _not_durable(self._logs[p], p if self._topic is not None else None,
                                     offsets, why))
        self._owed = []

    def _encode_each(self, log: Log, chunk: Sequence[bytes | Record],
                     futures: list[Future[Any]]) -> list[tuple[Any, int, int, int]]:
        """Encode record by record: a refused record's future fails (its batch is
        ``(None, 1, 0, 0)``, skipped by the writer)."""
        out: list[tuple[Any, int, int, int]] = []
        for item, fut in zip(chunk, futures):
            try:
                out += encode_batches(log, (item,), _time_ms())
            except Exception as e:
                fut.set_exception(e)
                out.append((None, 1, 0, 0))
        return out

    def _chunks(self, p: int, items: Sequence[bytes | Record], plain: bool
                ) -> tuple[list[tuple[int, int]], list[int] | None]:
        """Index ranges of ``items``, as long as they can be within
        ``max_message_bytes`` (with ``_CUT_OVERHEAD`` a record), or of one record,
        when plain bytes (exactly ``bytes``: then also their lengths, which the
        encoder takes as they are); other records in one range, which
        ``encode_batches`` cuts into batches itself. C-level passes, no loop per
        record: values of one size are cut by count; others by bisection of their
        running sums."""
        n = len(items)
        if not plain:
            return [(0, n)], None
        lengths = list(map(len, items))
        if n == 1:
            return [(0, n)], lengths
        limit = self._max_msg[p]
        low = lengths[0]
        if lengths.count(low) == n:     # (one pass; min and max were two)
            k = max(1, limit // (low + _CUT_OVERHEAD))
            return [(a, min(n, a + k)) for a in range(0, n, k)], lengths
        ends = list(accumulate(map(add, lengths, repeat(_CUT_OVERHEAD))))
        if ends[-1] <= limit:
            return [(0, n)], lengths
        out = []
        a, base = 0, 0
        while a < n:
            b = max(a + 1, bisect_right(ends, base + limit, a))
            out.append((a, b))
            base = ends[b - 1]
            a = b
        return out, lengths


def _not_durable(log: Log, partition: int | None, offsets: range,
                 why: BaseException) -> NotDurableError:
    try:
        raise NotDurableError(
            f"{log.path}: offsets {offsets.start}..{offsets.stop - 1} were written but not "
            f"made durable ({why}); they are in the log", offsets, partition) from why
    except NotDurableError as e:
        return e


def _fail(futures: list[Future[Any]], e: BaseException) -> None:
    for f in futures:
        if not f.done():
            f.set_exception(e)


_LIVE: "weakref.WeakSet[Producer]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for producer in list(_LIVE):
        producer._after_fork()


def _close_at_exit() -> None:
    # a producer left open when the interpreter exits writes what it holds first
    for producer in list(_LIVE):
        try:
            producer.close()
        except Exception:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_at_exit)

"""``Topic``: a set of partition logs under one root, laid out as Kafka's log dirs.

Partition ``p`` of topic ``name`` is the log directory ``root/<name>-<p>``; the
partition count is recorded in ``root/__topics/<name>.json`` once every partition
exists (so a topic whose creation a crash interrupted is finished by the next
``Topic.open`` that names its partition count, and refused by one that does not).

A topic grows (Kafka's ``kafka-topics --alter --partitions``): a writer's open with
more partitions than recorded creates the new partition logs, then records the new
count, so a crash at any instant leaves the old topic or the new one. Directories of
partitions a crashed growth made but did not record are ignored (never deleted) by
opens that do not grow, and taken by the next growth if they hold no message.

Placement, as Kafka's producer: a keyed record goes to
``xxh64(key, seed=0) % num_partitions`` (stable across processes, runs and
machines); the keyless records of one ``append``/``append_batch`` call go to one
partition, the next call's to the next (sticky); ``partition=`` overrides both.
One writer process per partition (its log's lock); every partition of a process's
topics shares the process's flusher and maintenance threads.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict
# Any: Topic.open's **config: the user's settings, checked there
from typing import Any, Iterable, Iterator

import xxhash

from ._views import notebook as _notebook
from . import repair
from ._log.opening import check_open_options
from ._runtime.platform import lock_within
from ._runtime.files import (TOPICS_DIR, abs_dir, atomic_write, fsync_dir, list_dir, make_dirs,
                             path_error, topic_file)
from ._storage.marker import check_root
from .config import LogConfig
from .errors import InvalidConfigError, LogClosedError, LogLockedError
from .log import Log, append_encoded, check_writable, encode_batches
from .message import Headers, Record

_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
MAX_PARTITIONS = 1 << 16
_CREATE = ".create"       # under __topics/: the root's creation lock


def check_name(name: object, what: str = "topic") -> str:
    """``name`` if it is a valid topic (or group) name: ``[A-Za-z0-9._-]{1,200}``,
    not ``.`` or ``..``; else ``TypeError``/``InvalidConfigError``."""
    if not isinstance(name, str):
        raise TypeError(f"{what} name must be a str, not {type(name).__name__}")
    if not _NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidConfigError(
            f"invalid {what} name {name!r}: use 1 to 200 of A-Z a-z 0-9 . _ - (not . or ..)")
    return name


def partition_dir(root: str, name: str, p: int) -> str:
    """The log directory of partition ``p`` of topic ``name``."""
    return os.path.join(root, f"{name}-{p}")


def read_partition_count(root: str, name: str) -> int | None:
    """The recorded partition count of topic ``name`` under ``root``, None if the
    topic does not exist (or its creation never finished)."""
    try:
        with open(topic_file(root, name), "rb") as f:
            meta = json.loads(f.read())
        n = meta["partitions"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return n if isinstance(n, int) and 1 <= n <= MAX_PARTITIONS else None


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """Kafka-style keyed placement: ``xxh64(key, seed=0) % num_partitions``."""
    return xxhash.xxh64_intdigest(key, 0) % num_partitions


def key_hashes(keys: Iterable[bytes]) -> Iterator[int]:
    """The hash ``partition_for_key`` takes modulo the partition count, of each key,
    in one C-level pass (for placing a column of keys with one array operation)."""
    return map(xxhash.xxh64_intdigest, keys)    # seed 0, its default


class Topic:
    """The partitions of one topic, each a ``Log``. Open with ``Topic.open``."""

    def __init__(self, root: str, name: str, logs: list[Log], readonly: bool) -> None:
        self.root = root
        self.name = name
        self.readonly = readonly
        self._logs = logs
        self._next = 0                  # the sticky partition of the next keyless call
        self._sticky_lock = threading.Lock()
        self._closed = False

    @classmethod
    def open(cls, root: str | os.PathLike[str], name: str, partitions: int | None = None,
             readonly: bool = False, multi_writer: bool = False, lock_timeout_ms: int = 10_000,
             **config: Any) -> "Topic":
        """Open topic ``name`` under ``root``; a writer creates it with ``partitions``,
        or grows it to ``partitions`` if that is more than the recorded count.

        ``InvalidConfigError`` for a bad name, a bad or missing partition count, a
        count below the topic's (a topic never shrinks), or above it on a readonly
        open (a reader never grows a topic); ``partitions=None`` takes the recorded
        count. Options are ``Log`` options, applied to every partition; partitions a
        growth adds take partition 0's settings with them. A writer holds every
        partition's log lock (``LogLockedError`` if another process writes one of
        them), or with ``multi_writer=True`` shares them with other such writers
        (``Log.open``). Creating and growing take the root's creation lock (up to
        ``lock_timeout_ms``), so processes creating or growing a topic at once agree
        on it. A growth creates the new partitions, then records the count: a crash
        leaves the old topic or the new one. A directory a crashed growth left is
        taken by the next growth only if it holds no message (``InvalidConfigError``
        otherwise, before anything is changed). Other processes' open ``Topic``
        objects keep their count until reopened; keyed records of the grown topic go
        to ``partition_for_key(key, new count)``. A ``root`` (or a partition's
        directory) that is a file is a ``NotALogError``, as ``Log.open`` says, and
        so is a root holding anything but seglog's topics, groups and logs (a root
        must be new, empty or seglog's); ``""`` is a ``ValueError``. A refused open
        changes nothing; one that fails creating a topic removes what it made,
        unless partitions were made (the next open naming the count finishes them).
        """
        check_name(name)
        if partitions is not None:
            if isinstance(partitions, bool) or not isinstance(partitions, int):
                raise TypeError("partitions must be an int")
            if not 1 <= partitions <= MAX_PARTITIONS:
                raise InvalidConfigError(f"partitions must be 1 to {MAX_PARTITIONS}, not {partitions}")
        LogConfig.from_kwargs(config)     # bad options: an error before anything is made
        check_open_options(readonly, multi_writer, lock_timeout_ms)
        root = abs_dir(root, "topic root")
        # a file (or a link to nothing) or someone else's directory where the root
        # should be: refused untouched; a missing root is a topic that does not
        # exist, or one to create
        check_root(root)
        return cls._open(root, name, partitions, readonly, multi_writer, lock_timeout_ms,
                         config, locked=False)

    @classmethod
    def _open(cls, root: str, name: str, partitions: int | None, readonly: bool,
              multi_writer: bool, lock_timeout_ms: int, config: dict[str, Any],
              locked: bool) -> "Topic":
        n = read_partition_count(root, name)
        target = _check_count(root, name, n, partitions, readonly)
        if (n is None or target > n) and not locked:
            # creating or growing: one process at a time, under the root's creation
            # lock; the count is read again under it (another may have done it)
            with _creating(root, lock_timeout_ms):
                return cls._open(root, name, partitions, readonly, multi_writer,
                                 lock_timeout_ms, config, locked=True)
        have = target if n is None else n       # partitions that are (or become) the topic's
        if target > have:
            _check_new_dirs(root, name, have, target)     # before any file is touched
        logs: list[Log] = []
        try:
            if n is None:
                make_dirs(os.path.join(root, TOPICS_DIR))
            for p in range(have):
                logs.append(Log.open(partition_dir(root, name, p), readonly=readonly,
                                     multi_writer=multi_writer,
                                     lock_timeout_ms=lock_timeout_ms, **config))
            if target > have:
                # the new partitions take partition 0's settings (this open's options
                # already applied to it), as Kafka's take the topic's configuration
                logs += _add_partitions(root, name, have, target, multi_writer,
                                        lock_timeout_ms, asdict(logs[0].config))
            if n != target:
                try:
                    # the new directories are durable before the record that names them
                    fsync_dir(root)
                    atomic_write(topic_file(root, name),
                                 json.dumps({"version": 1, "name": name,
                                             "partitions": target}).encode())
                except OSError as e:
                    raise path_error(e, f"recording topic {name!r} under {root} failed") from e
        except BaseException:
            for log in logs:
                log.close()
            raise
        return cls(root, name, logs, readonly)

    # -- partitions -------------------------------------------------------------------
    @property
    def num_partitions(self) -> int:
        """The partition count this object opened (another process's growth of the
        topic shows after a reopen)."""
        return len(self._logs)

    def partition(self, p: int) -> Log:
        """The ``Log`` of partition ``p`` (``InvalidConfigError`` if there is none)."""
        return self._logs[self._check_partition(p)]

    def _check_partition(self, p: object) -> int:
        if isinstance(p, bool) or not isinstance(p, int):
            raise TypeError(f"partition must be an int, not {type(p).__name__}")
        if not 0 <= p < len(self._logs):
            raise InvalidConfigError(
                f"topic {self.name!r} has partitions 0 to {len(self._logs) - 1}, not {p}")
        return p

    def partition_for(self, key: bytes | None, partition: int | None = None) -> int | None:
        """The partition ``append`` puts a record in: ``partition`` if given (checked:
        ``TypeError``/``InvalidConfigError``), else the key's (``partition_for_key``),
        else None: a keyless record goes to a sticky partition of the caller's choice."""
        if partition is not None:
            return self._check_partition(partition)
        if key is not None:
            return partition_for_key(_key_bytes(key), len(self._logs))
        return None

    def _sticky(self) -> int:
        with self._sticky_lock:
            p = self._next
            self._next = (p + 1) % len(self._logs)
        return p

    # -- writing ---------------------------------------------------------------------
    def append(self, value: bytes | None, key: bytes | None = None, timestamp: int | None = None,
               headers: Headers = (), partition: int | None = None) -> tuple[int, int]:
        """Append one message; return ``(partition, offset)``. Placement as the module
        docstring says; durability and errors as ``Log.append``."""
        self._check_open()
        if partition is not None:
            p = self._check_partition(partition)
        elif key is not None:
            p = partition_for_key(_key_bytes(key), len(self._logs))
        else:
            p = self._sticky()
        return p, self._logs[p].append(value, key, timestamp, headers)

    def append_batch(self, items: Iterable[bytes | Record], partition: int | None = None
                     ) -> dict[int, range]:
        """Append many messages; return ``{partition: range of offsets}``.

        Keyed records go to their key's partition, keyless ones to this call's
        sticky partition (or all to ``partition``). Every item is validated before
        anything is written; each partition's part is appended atomically (one
        ``Log.append_batch``); parts go to partitions in ascending order.
        """
        self._check_open()
        items = list(items)
        if partition is not None:
            p = self._check_partition(partition)
            return {p: self._logs[p].append_batch(items)} if items else {}
        # validate everything first: a bad item anywhere writes nothing anywhere
        keyed: dict[int, list[bytes | Record]] = {}
        sticky: int | None = None
        n = len(self._logs)
        for item in items:
            if isinstance(item, Record) and item.key is not None:
                p = partition_for_key(_key_bytes(item.key), n)
            elif isinstance(item, (bytes, bytearray, memoryview, Record)):
                if sticky is None:
                    sticky = self._sticky()
                p = sticky
            else:
                raise TypeError(f"items must be bytes or Record, not {type(item).__name__}")
            keyed.setdefault(p, []).append(item)
        now = time.time_ns() // 1_000_000
        encoded = {p: encode_batches(self._logs[p], keyed[p], now) for p in sorted(keyed)}
        for p in encoded:
            check_writable(self._logs[p])
        return {p: append_encoded(self._logs[p], b) for p, b in encoded.items()}

    def flush(self) -> dict[int, int]:
        """fsync every partition; ``{partition: flushed offset}``."""
        self._check_open()
        return {p: log.flush() for p, log in enumerate(self._logs)}

    # -- offsets ---------------------------------------------------------------------
    def start_offsets(self) -> dict[int, int]:
        """Each partition's first offset still stored, by partition number."""
        self._check_open()
        return {p: log.start_offset for p, log in enumerate(self._logs)}

    def end_offsets(self) -> dict[int, int]:
        """Each partition's next offset to assign, by partition number."""
        self._check_open()
        return {p: log.end_offset for p, log in enumerate(self._logs)}

    def offsets_for_time(self, timestamp: int) -> dict[int, int | None]:
        """Per partition, the first offset whose timestamp is >= ``timestamp``."""
        self._check_open()
        return {p: log.offset_for_time(timestamp) for p, log in enumerate(self._logs)}

    # -- lifecycle -------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"topic {self.name!r} is closed")

    @property
    def closed(self) -> bool:
        """True once ``close()`` ran."""
        return self._closed

    def close(self) -> None:
        """Close every partition (flush, seal, release locks). Idempotent; the first
        error is raised after every partition was closed."""
        if self._closed:
            return
        self._closed = True
        first: BaseException | None = None
        for log in self._logs:
            try:
                log.close()
            except BaseException as e:     # close the rest, then report
                first = first or e
        if first is not None:
            raise first

    def __enter__(self) -> "Topic":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- for people: notebooks and operators ------------------------------------------
    def __len__(self) -> int:
        """Messages in all partitions (``len`` of each)."""
        self._check_open()
        return sum(len(log) for log in self._logs)

    def stats(self) -> dict[str, Any]:
        """``Log.stats()`` per partition, and totals, as plain dicts."""
        self._check_open()
        parts = [log.stats() for log in self._logs]
        return _notebook.Stats({"topic": self.name, "root": self.root, "partitions": parts,
                                "messages": sum(p["messages"] for p in parts),
                                "bytes": sum(p["bytes"] for p in parts),
                                "segments": sum(p["segments"] for p in parts)})

    def metrics(self) -> dict[str, Any]:
        """``Log.metrics()`` per partition (``"partitions"``) and the sums of the
        numeric counters over them."""
        self._check_open()
        parts = [log.metrics() for log in self._logs]
        total = {k: sum(p[k] for p in parts) for k, v in parts[0].items()
                 if isinstance(v, int) and not isinstance(v, bool)}
        total["partitions"] = parts
        return _notebook.Metrics(total)

    def to_pandas(self, start: dict[int, int] | None = None, end: dict[int, int] | None = None,
                  *, since: object = None, until: object = None,
                  decode: str | None = None) -> Any:
        """Every partition's messages as one ``pandas.DataFrame`` with a ``partition``
        column first, partition by partition in offset order; ``start``/``end`` map
        partitions to offsets; ``since``/``until``/``decode`` as ``Log.to_pandas``."""
        self._check_open()
        frames = [log.to_pandas((start or {}).get(p), (end or {}).get(p), since=since,
                                until=until, decode=decode)
                  for p, log in enumerate(self._logs)]
        return _notebook.concat_partitions(frames)

    def verify(self) -> repair.CheckReports:
        """``Log.verify()`` of every partition, in partition order: the reports as one
        list (``ok`` when none has a problem; a notebook shows them as one table)."""
        self._check_open()
        return repair.CheckReports(log.verify() for log in self._logs)

    def _repr_html_(self) -> str:
        if self._closed:
            return _notebook.closed_html(f"seglog.Topic {self.name!r}", [("root", self.root)])
        return _notebook.topic_html(self.name, self.root, self.readonly, self._logs)

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("readonly" if self.readonly else "writer")
        return (f"<seglog.Topic {self.name!r} at {self.root} {len(self._logs)} "
                f"partition(s) {state}>")


def _key_bytes(key: object) -> bytes:
    if isinstance(key, bytes):
        return key
    if isinstance(key, (bytearray, memoryview)):
        return bytes(key)
    raise TypeError(f"key must be bytes or None, not {type(key).__name__}")


def _check_count(root: str, name: str, n: int | None, partitions: int | None,
                 readonly: bool) -> int:
    """The partition count an open of a topic recorded with ``n`` partitions (None:
    not created) will have; ``InvalidConfigError`` for an open ``n`` does not allow,
    before anything is touched."""
    if n is None:
        if partitions is None:
            raise InvalidConfigError(f"topic {name!r} does not exist under {root}; "
                                     f"give partitions= to create it")
        if readonly:
            raise InvalidConfigError(f"topic {name!r} does not exist under {root}")
        return partitions
    if partitions is None:
        return n
    if partitions < n:
        raise InvalidConfigError(f"topic {name!r} has {n} partitions, not {partitions}: "
                                 f"a topic never shrinks")
    if partitions > n and readonly:
        raise InvalidConfigError(f"topic {name!r} has {n} partitions, not {partitions}: "
                                 f"a readonly open never grows a topic (a writer's does)")
    return partitions


def _check_new_dirs(root: str, name: str, old: int, new: int) -> None:
    """Refuse a growth from ``old`` to ``new`` partitions if a directory where a new
    partition goes holds anything but what a crashed growth leaves: that is a log
    holding no message (nothing writes to a partition before it is recorded), or a
    start of one. A log holding messages is ``InvalidConfigError``, a file or a
    foreign directory ``NotALogError``; either way nothing is changed."""
    for p in range(old, new):
        d = partition_dir(root, name, p)
        if not os.path.lexists(d):
            continue
        # a reader's look changes nothing (a file or a foreign directory there is a
        # NotALogError, as the writer's open would say)
        with Log.open(d, readonly=True) as seen:
            end = seen.end_offset
        if end:
            raise InvalidConfigError(
                f"cannot grow topic {name!r} to {new} partitions: {d} is a log that "
                f"holds messages (its offsets reach {end}), not a partition of the topic "
                f"(it records {old}); nothing was changed. Move it away")


def _add_partitions(root: str, name: str, old: int, new: int, multi_writer: bool,
                    lock_timeout_ms: int, settings: dict[str, Any]) -> list[Log]:
    """Open partitions ``old`` to ``new - 1`` of a growing topic as writers with
    ``settings``, creating those that do not exist (``_check_new_dirs`` has seen the
    rest)."""
    logs: list[Log] = []
    try:
        for p in range(old, new):
            logs.append(Log.open(partition_dir(root, name, p), multi_writer=multi_writer,
                                 lock_timeout_ms=lock_timeout_ms, **settings))
    except BaseException:
        for log in logs:
            log.close()
        raise
    return logs

@contextmanager
def _creating(root: str, timeout_ms: int) -> Iterator[None]:
    """The topic root's creation lock (``__topics/.create``): ``LogLockedError`` after
    ``timeout_ms`` if another process holds it. If this call made ``__topics/`` and
    what it guards fails having put nothing else under the root, the lock file,
    ``__topics/`` and the root with the parents this call made are removed: a
    refused open leaves nothing behind."""
    top = root              # the highest directory this call makes, if it makes the root
    while not os.path.lexists(os.path.dirname(top)):
        top = os.path.dirname(top)
    made_root = not os.path.lexists(root)
    before = set() if made_root else set(list_dir(root))
    fd = _lock_creation(root, timeout_ms)
    try:
        yield
    except BaseException:
        if TOPICS_DIR not in before:
            _undo_creation(root, top if made_root else None, before)
        raise
    finally:
        os.close(fd)


def _undo_creation(root: str, top: str | None, before: set[str]) -> None:
    """(creation lock held) Remove the lock file, ``__topics/`` and, if ``top`` (the
    highest directory the open made) is not None, the root and its parents up to
    ``top``, provided nothing is there that the root did not hold ``before``; else
    leave everything (as a crash would)."""
    topics = os.path.join(root, TOPICS_DIR)
    try:
        if os.listdir(topics) != [_CREATE] or set(os.listdir(root)) - {TOPICS_DIR} - before:
            return
        # unlinked under the lock: a process waiting for it finds it gone and takes
        # the new one (``_lock_creation``)
        os.unlink(os.path.join(topics, _CREATE))
        os.rmdir(topics)
        gone = root
        if top is not None:
            while True:
                os.rmdir(gone)
                if gone == top:
                    break
                gone = os.path.dirname(gone)
        fsync_dir(os.path.dirname(gone) if top is not None else root)
    except OSError:
        pass        # another process is using the root: what is left is theirs too


def _lock_creation(root: str, timeout_ms: int) -> int:
    """The creation lock's descriptor, locked; made with ``__topics/`` if missing. A
    lock file a refused creation removed while this process waited for it is
    taken again, as the file now there."""
    path = os.path.join(root, TOPICS_DIR, _CREATE)
    deadline = time.monotonic() + timeout_ms / 1000.0
    while True:
        make_dirs(os.path.dirname(path))
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError as e:
            # __topics/ was removed just now by a refused creation: make it again
            if time.monotonic() < deadline:
                continue
            raise path_error(e, f"cannot create topics under {root}") from e
        except OSError as e:
            raise path_error(e, f"cannot create topics under {root}") from e
        try:
            if not lock_within(fd, max(0.0, deadline - time.monotonic())):
                raise LogLockedError(f"another process was creating or growing a topic "
                                     f"under {root} for lock_timeout_ms={timeout_ms}")
            try:
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    return fd
            except FileNotFoundError:
                pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)

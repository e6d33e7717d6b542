"""The task side of the sink: a Spark task's rows placed in partitions (the partition
column, else the key as ``Topic.append`` places it, else the task's sticky
partition), checked, encoded into batches and written to staging files, one per
partition, fsynced before the task reports them. Nothing a reader sees changes
here: the driver's commit publishes the files (``_publish``)."""

from __future__ import annotations

import os
import time
import uuid
# Any: pyarrow and numpy modules and arrays: they ship no type information
from typing import Any, Callable, Iterator, NamedTuple, Protocol

from .._codec import format as _format
from .._runtime.files import fsync_dir, hand_on, remove
from ..config import LogConfig
from ..errors import InvalidConfigError, MessageTooLargeError
from ..log import Log
from .._codec.columns import arrow_modules
from ..topic import Topic, check_name, key_hashes, partition_dir, read_partition_count
from ._encode import Rows, compute, encode_rows
from ._sink_options import ColumnSpec, SinkOptions

STAGE_SUFFIX = ".stage"


class StagedGroup(NamedTuple):
    """A task's rows for one partition, waiting in a staging file (``name``, in the
    write's staging directory): ``size`` bytes of ``batches`` whole batches holding
    ``records`` records, base offsets 0 (stamped when published). Published as one
    atomic append."""

    topic: str
    partition: int
    name: str
    size: int
    batches: int
    records: int


def staged_name(topic: str, partition: int, task: int) -> str:
    """A staging file's name: unique (a random part), saying whose rows it holds."""
    return f"{topic}-{partition}.{task}.{uuid.uuid4().hex[:12]}{STAGE_SUFFIX}"


def group_limit(config: LogConfig) -> int:
    """The most bytes one atomic append may take in a log (``seglog.log.append_encoded``)."""
    return config.segment_bytes + config.max_message_bytes


def ensure_topic(o: SinkOptions, name: str) -> int:
    """The partition count of topic ``name`` under the root, creating the topic
    (with ``partitions`` and the ``log.`` settings) if it is missing and the options
    say how. ``InvalidConfigError`` if it is missing and they do not, or if it exists
    with settings other than the ``log.`` options give (the sink changes no
    existing topic's settings)."""
    check_name(name)
    n = read_partition_count(o.root, name)
    if n is None:
        if o.partitions is None:
            raise InvalidConfigError(
                f"topic {name!r} does not exist under {o.root}; give the option partitions "
                f"(and {'log.<setting> options' if not o.settings else 'the log. settings'}) "
                f"to create it")
        with Topic.open(o.root, name, partitions=o.partitions, multi_writer=True,
                        lock_timeout_ms=o.lock_timeout_ms, **dict(o.settings)) as t:
            return t.num_partitions
    if o.settings:
        have = partition_config(o.root, name, 0)
        for k, v in o.settings:
            if getattr(have, k) != v:
                raise InvalidConfigError(
                    f"topic {name!r} exists with {k}={getattr(have, k)!r}, not {v!r} (option "
                    f"log.{k}): the sink sets a topic's settings only when it creates it")
    return n


def partition_config(root: str, topic: str, p: int) -> LogConfig:
    """The stored settings of partition ``p`` of ``topic`` (a reader's look)."""
    with Log.open(partition_dir(root, topic, p), readonly=True) as log:
        return log.config


class _Topic:
    """A topic as a task sees it: its partition count when first met (as a ``Topic``
    opened then), each partition's settings once asked for."""

    def __init__(self, o: SinkOptions, name: str) -> None:
        self.name = name
        self.partitions = ensure_topic(o, name)
        self._root = o.root
        self._configs: dict[int, LogConfig] = {}

    def config(self, p: int) -> LogConfig:
        cfg = self._configs.get(p)
        if cfg is None:
            cfg = self._configs[p] = partition_config(self._root, self.name, p)
        return cfg


class _File:
    """One staging file being written: whole batches back to back."""

    def __init__(self, directory: str, topic: str, partition: int, task: int,
                 config: LogConfig) -> None:
        self.topic, self.partition, self.config = topic, partition, config
        self.name = staged_name(topic, partition, task)
        self.path = os.path.join(directory, self.name)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self.size = self.batches = self.records = 0
        self.handed_on = 0               # the bytes before it are on their way to disk
        self.limit = group_limit(config)
        self.compress = _format.CODEC_LZ4 if config.compression == "lz4" else _format.CODEC_NONE

    def write(self, parts: list[bytes], n: int) -> None:
        size = sum(map(len, parts))
        if self.size + size > self.limit:
            raise MessageTooLargeError(
                f"{self.topic}-{self.partition}: one Spark task's rows for this partition pass "
                f"{self.limit} bytes, what one atomic append may take (segment_bytes + "
                f"max_message_bytes), and a task's rows in a partition are published as one "
                f"append: spread the rows over more tasks (df.repartition(n)) or raise the "
                f"topic's segment_bytes")
        views = [memoryview(p) for p in parts]
        while views:
            done = os.writev(self.fd, views)
            while views and done >= len(views[0]):
                done -= len(views[0])
                views.pop(0)
            if views and done:
                views[0] = views[0][done:]
        self.size += size
        self.batches += 1
        self.records += n
        # the fsync at the task's end then waits for the last pages only
        self.handed_on = hand_on(self.fd, self.handed_on, self.size)

    def finish(self) -> StagedGroup:
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1
        return StagedGroup(self.topic, self.partition, self.name, self.size, self.batches,
                           self.records)

    def discard(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        remove(self.path)


class Stager:
    """One task's staging: ``add`` each Arrow batch of its rows, then ``finish`` (the
    files fsynced; what the commit message names) or ``discard`` (a failure)."""

    def __init__(self, o: SinkOptions, cols: ColumnSpec, directory: str, task: int,
                 sticky: int, check: Callable[[], None] = lambda: None) -> None:
        self.o, self.cols, self.dir, self.task = o, cols, directory, task
        self._sticky = sticky              # keyless rows' partition: sticky % count
        self._check = check                # raises once the write has ended
        self._topics: dict[str, _Topic] = {}
        self._files: dict[tuple[str, int], _File] = {}

    def add(self, rb: Any) -> None:
        """Place, check, encode and stage the rows of one Arrow record batch."""
        if not rb.num_rows:
            return
        now = time.time_ns() // 1_000_000
        if self.o.topic is not None:
            self._add_to(self.o.topic, rb, now)
            return
        pa, np = arrow_modules()
        col = rb.column(self.cols.topic)
        if col.null_count:
            raise InvalidConfigError("a row's topic is null: each row needs a topic (the topic "
                                     "column, or the option topic for all)")
        coded = col.dictionary_encode()
        names = coded.dictionary.to_pylist()
        if len(names) == 1:
            self._add_to(names[0], rb, now)
            return
        idx = coded.indices.to_numpy(zero_copy_only=False)
        for i, name in enumerate(names):
            self._add_to(name, rb.take(pa.array(np.flatnonzero(idx == i))), now)

    def _add_to(self, name: str, rb: Any, now: int) -> None:
        topic = self._topics.get(name)
        if topic is None:
            topic = self._topics[name] = _Topic(self.o, name)
        dest = self._place(topic, rb)
        if isinstance(dest, int):
            self._stage(topic, dest, rb, now)
            return
        pa, np = arrow_modules()
        order = np.argsort(dest, kind="stable")
        placed = dest[order]
        cuts = (np.flatnonzero(np.diff(placed)) + 1).tolist()
        rb = rb.take(pa.array(order))
        for a, b in zip([0] + cuts, cuts + [len(placed)]):
            self._stage(topic, int(placed[a]), rb.slice(a, b - a), now)

    def _place(self, topic: _Topic, rb: Any) -> Any:
        """Each row's partition (an int when all rows go to one): the partition
        column where given; else the key's, as ``Topic.append`` places it
        (``partition_for_key``); else this task's sticky partition."""
        pa, np = arrow_modules()
        n, rows = topic.partitions, rb.num_rows
        sticky = self._sticky % n
        cols = self.cols
        dest = None
        open_rows = None                   # rows not placed yet (None: all)
        if cols.partition is not None:
            col = rb.column(cols.partition)
            if col.null_count < rows:
                given = compute().fill_null(col, 0).to_numpy(zero_copy_only=False)
                unset = col.is_null().to_numpy(zero_copy_only=False) if col.null_count else None
                bad = (given < 0) | (given >= n)
                if unset is not None:
                    bad &= ~unset
                if bad.any():
                    raise InvalidConfigError(
                        f"a row's partition is {int(given[np.argmax(bad)])}: topic "
                        f"{topic.name!r} has partitions 0 to {n - 1}")
                if unset is None:
                    return int(given[0]) if (given == given[0]).all() else given.astype(np.int64)
                dest = given.astype(np.int64)
                open_rows = unset
        if cols.key is not None:
            keys = rb.column(cols.key)
            keyed = ~keys.is_null().to_numpy(zero_copy_only=False)
            if open_rows is not None:
                keyed &= open_rows
            if keyed.any():
                if keys.type != pa.binary():
                    keys = keys.view(pa.binary())
                chosen = keys.filter(pa.array(keyed)).to_pylist()
                hashes = np.fromiter(key_hashes(chosen), dtype=np.uint64, count=len(chosen))
                if dest is None:
                    dest = np.full(rows, sticky, dtype=np.int64)
                dest[keyed] = (hashes % np.uint64(n)).astype(np.int64)
                open_rows = ~keyed if open_rows is None else open_rows & ~keyed
        if dest is None:
            return sticky
        if open_rows is not None:
            dest[open_rows] = sticky
        return int(dest[0]) if (dest == dest[0]).all() else dest

    def _stage(self, topic: _Topic, p: int, rb: Any, now: int) -> None:
        pa, np = arrow_modules()
        cols = self.cols
        config = topic.config(p)

        def binary(name: str | None) -> Any:
            if name is None:
                return None
            col = rb.column(name)
            return col if col.type == pa.binary() else col.view(pa.binary())
        stamps: Any = now
        if cols.timestamp is not None:
            col = rb.column(cols.timestamp)
            if col.null_count < len(col):
                micros = compute().fill_null(col.cast(pa.int64()), now * 1000)
                stamps = np.floor_divide(micros.to_numpy(zero_copy_only=False), 1000)
        rows = Rows(binary(cols.value), binary(cols.key), stamps,
                    rb.column(cols.headers) if cols.headers is not None else None)
        f = self._files.get((topic.name, p))
        if f is None:
            f = self._files[(topic.name, p)] = _File(self.dir, topic.name, p, self.task, config)
        for parts, n, _ in encode_rows(rows, config, f.compress, now, f"{topic.name}-{p}"):
            f.write(parts, n)

    def finish(self) -> list[StagedGroup]:
        """The staging files fsynced and closed (and their directory entries): the
        groups the task's commit message names, by topic and partition. The write's
        ``check`` comes last: a task that outlived its write keeps nothing."""
        out = [f.finish() for _, f in sorted(self._files.items())]
        if out:
            fsync_dir(self.dir)
        self._check()
        return out

    def discard(self) -> None:
        """Remove what this task staged (it failed)."""
        for f in self._files.values():
            f.discard()
        self._files.clear()
        if os.path.isdir(self.dir):
            fsync_dir(self.dir)


class WriteHome(Protocol):
    """What a task needs of its write's directory (``_publish.WriteDir``)."""

    path: str

    def open_stage(self, batch: int) -> str: ...
    def check(self) -> None: ...
    def ended(self) -> bool: ...
    def remove(self) -> None: ...


def stage_task(o: SinkOptions, cols: ColumnSpec, wd: WriteHome, batch: int, task: int,
               batches: Iterator[Any]) -> list[tuple[str, StagedGroup]]:
    """What one task of ``batch`` does: stage its Arrow ``batches`` in the write's
    staging directory of that batch and return its groups (each with its staging
    directory relative to the write's). A failure leaves nothing of this task's, and
    a task whose write ended under it tidies what is left of the write."""
    directory = wd.open_stage(batch)
    stager = Stager(o, cols, directory, task, sticky=task + batch, check=wd.check)
    try:
        for rb in batches:
            stager.add(rb)
        groups = stager.finish()
    except BaseException:
        stager.discard()
        if wd.ended():
            wd.remove()                  # the job ended under this task: tidy what is left
        raise
    rel = os.path.relpath(directory, wd.path)
    return [(rel, g) for g in groups]

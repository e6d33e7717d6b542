"""The ``"seglog"`` sink: ``df.write`` and ``df.writeStream`` into seglog topics,
exactly once. The behaviour as plain classes; ``sink_classes`` makes the ones Spark
sees on pyspark's Arrow writer bases (``_source.spark_classes`` names them).

Tasks stage their rows (``_stage.stage_task``), the driver's commit publishes them
(``_publish``); docs/SPARK.md, Writing, has the design.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
# Any: pyspark's DataSource objects: rows as Arrow batches, commit messages, the options map
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from .._runtime.files import SPARK_DIR, make_dirs
from .._storage.marker import check_root
from ..errors import InvalidConfigError, SeglogError
from ._publish import (Manifest, WriteDir, anything_published, make_manifest, publish,
                       start_job, sweep_jobs)
from ._sink_options import ColumnSpec, SinkOptions, check_columns, parse_sink_options
from ._stage import StagedGroup, ensure_topic, stage_task

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

_log = logging.getLogger("seglog")


class _Message:
    """A task's commit message: which write and batch, and the groups it staged
    (staging subdirectory, relative to the write's directory; the group)."""

    def __init__(self, write: tuple[str, str], batch: int, task: int,
                 groups: list[tuple[str, StagedGroup]]) -> None:
        self.write, self.batch, self.task, self.groups = write, batch, task, groups

    def __repr__(self) -> str:
        return (f"<seglog staged: {self.write[0]} {self.write[1]} batch {self.batch} task "
                f"{self.task}, {len(self.groups)} group(s)>")


def check_write(options: Any, schema: "StructType", overwrite: bool, streaming: bool
                ) -> tuple[SinkOptions, ColumnSpec]:
    """What a writer Spark asks the data source for (``writer``/``streamWriter``)
    writes: options and columns checked, the topic created when the options say so,
    all on the driver before any task runs."""
    if overwrite:
        how = "outputMode complete" if streaming else 'mode("overwrite")'
        raise InvalidConfigError(
            f"{how} would replace what the sink holds, and a seglog topic is append-only (its "
            f"offsets never change): use {'outputMode append or update' if streaming else 'mode(append)'}")
    o = parse_sink_options(options)
    cols = check_columns(schema, o)
    # a directory of seglog's (or none yet) before the sink makes anything there
    check_root(o.root)
    make_dirs(os.path.join(o.root, SPARK_DIR))
    if o.topic is not None:
        ensure_topic(o, o.topic)
    return o, cols


def _task() -> Any:
    from pyspark import TaskContext
    tc = TaskContext.get()
    if tc is None:
        raise SeglogError("the seglog sink's write() runs in a Spark task")
    return tc


def _groups(messages: Iterable[Any]) -> list[tuple[str, StagedGroup]]:
    return [(d, StagedGroup(*g)) for m in messages if m is not None for d, g in m.groups]


class _Writer:
    """``df.write.format("seglog")``: every row in the topic exactly once when the job
    commits, none when it fails. The job gets its own directory (a new id), made
    here on the driver with a record of the driver process; writes whose drivers
    died are finished or cleaned up first (``sweep_jobs``)."""

    def __init__(self, o: SinkOptions, cols: ColumnSpec, message: type) -> None:
        self.o, self.cols, self._message = o, cols, message
        self.job = uuid.uuid4().hex
        sweep_jobs(o.root, o.lock_timeout_ms, mine=self.job)
        start_job(self._dir())

    def _dir(self) -> WriteDir:
        return WriteDir(self.o.root, "job", self.job)

    def write(self, iterator: Iterator[Any]) -> Any:
        """A task: stage its rows; the message names what it staged."""
        task = _task().partitionId()
        groups = stage_task(self.o, self.cols, self._dir(), 0, task, iterator)
        return self._message(("job", self.job), 0, task, groups)

    def commit(self, messages: list[Any]) -> None:
        """All tasks succeeded: publish every group (manifest first), fsynced. A
        commit that fails (another writer held a partition past ``lockTimeoutMs``, a
        full disk) ends the job with nothing visible if it published nothing; else
        its manifest stays for the next write under the root to finish, and its
        error says so."""
        wd = self._dir()
        with wd.locked(self.o.lock_timeout_ms / 1000):
            groups = _groups(messages)
            if groups:
                m = make_manifest(wd, 0, groups, self.o.lock_timeout_ms)
                try:
                    wd.write_manifest(m)    # in place even if its directory's fsync failed
                    publish(wd, m, resumed=False, timeout_ms=self.o.lock_timeout_ms)
                except Exception as e:      # (not an interrupt: the process is going)
                    self._failed(wd, m, e)
                    raise
            wd.finish(0)

    def _failed(self, wd: WriteDir, m: Manifest, e: Exception) -> None:
        """The commit of ``m`` failed with ``e``: Spark reports the job failed, so
        a job that published nothing is removed whole (a later write must never
        publish its manifest: all or nothing). Rows already published cannot be
        taken back; the job's manifest stays, and the next write finishes it."""
        try:
            some = anything_published(wd, m)
        except Exception as look:
            _log.warning("seglog: cannot tell what the failed commit of Spark write %s "
                         "published (%s): its manifest is kept", self.job, look)
            what = f"and what it published cannot be told ({look})"
        else:
            if not some:
                wd.abandon()
                return
            what = ("after publishing part of its rows (they stay: published rows are "
                    "never taken back)")
        e.add_note(f"seglog: the commit of Spark write {self.job} failed {what}; its "
                   f"manifest is kept: the next seglog write under {self.o.root} publishes "
                   f"what is missing, each row once: do not run the job again")

    def abort(self, messages: list[Any]) -> None:
        """A task failed: nothing was published; the staging files go."""
        wd = self._dir()
        with wd.locked(self.o.lock_timeout_ms / 1000):
            if wd.manifest() is None:
                wd.remove()


class _StreamWriter:
    """``df.writeStream.format("seglog")``: each micro-batch's rows exactly once, under
    the directory of the query (Spark's query id, which its checkpoint keeps)."""

    def __init__(self, o: SinkOptions, cols: ColumnSpec, message: type) -> None:
        self.o, self.cols, self._message = o, cols, message

    def write(self, iterator: Iterator[Any]) -> Any:
        """A task of micro-batch ``streaming.sql.batchId`` of query
        ``sql.streaming.queryId`` (Spark's task properties): stage its rows."""
        tc = _task()
        query, batch = tc.getLocalProperty("sql.streaming.queryId"), \
            tc.getLocalProperty("streaming.sql.batchId")
        if not query or batch is None:
            raise SeglogError("the seglog stream writer runs in a task of a streaming query "
                              "(Spark did not say which query and micro-batch)")
        wd = WriteDir(self.o.root, "query", query)
        groups = stage_task(self.o, self.cols, wd, int(batch), tc.partitionId(), iterator)
        return self._message(("query", query), int(batch), tc.partitionId(), groups)

    def _query(self, messages: list[Any]) -> str | None:
        for m in messages:
            if m is not None:
                return str(m.write[1])
        return query_from_checkpoint(self.o.checkpoint)

    def commit(self, messages: list[Any], batchId: int) -> None:
        """Publish micro-batch ``batchId`` unless it was (a batch run again after the
        driver died); first finish a commit the driver died inside."""
        query = self._query(messages)
        if query is None:
            return                       # no task staged anything, nothing to finish
        wd = WriteDir(self.o.root, "query", query)
        timeout = self.o.lock_timeout_ms
        with wd.locked(timeout / 1000):
            done = wd.committed()
            pending = wd.manifest()
            if pending is not None:
                if done is None or pending.batch > done:
                    publish(wd, pending, resumed=True, timeout_ms=timeout)
                    done = pending.batch
                wd.finish(done)
            if done is not None and batchId <= done:
                wd.clean_stages(batchId)        # this attempt's staging files
                return
            groups = _groups(messages)
            if groups:
                m = make_manifest(wd, batchId, groups, timeout)
                wd.write_manifest(m)
                publish(wd, m, resumed=False, timeout_ms=timeout)
            wd.finish(batchId)

    def abort(self, messages: list[Any], batchId: int) -> None:
        """A task failed: nothing of this attempt was published; its staging files go
        (not those a commit the driver died inside will publish)."""
        query = self._query(messages)
        if query is None:
            return
        wd = WriteDir(self.o.root, "query", query)
        with wd.locked(self.o.lock_timeout_ms / 1000):
            pending = wd.manifest()
            keep = pending.files() if pending is not None else set()
            wd.clean_stages(batchId, keep)


def query_from_checkpoint(checkpoint: str | None) -> str | None:
    """The query id a stream's checkpoint keeps (its ``metadata`` file), None if the
    checkpoint is not a local directory or says none."""
    if not checkpoint:
        return None
    path = checkpoint[len("file:"):] if checkpoint.startswith("file:") else checkpoint
    try:
        with open(os.path.join(path, "metadata"), "rb") as f:
            meta = json.loads(f.readline())
    except (OSError, ValueError):
        return None
    ident = meta.get("id") if isinstance(meta, dict) else None
    return ident if isinstance(ident, str) else None


def sink_classes() -> dict[str, type]:
    """The sink's classes on pyspark's bases (``_source.spark_classes`` names them)."""
    from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                        WriterCommitMessage)

    class SeglogWriter(_Writer, DataSourceArrowWriter):
        __doc__ = _Writer.__doc__

    class SeglogStreamWriter(_StreamWriter, DataSourceStreamArrowWriter):
        __doc__ = _StreamWriter.__doc__

    class SeglogCommitMessage(_Message, WriterCommitMessage):
        __doc__ = _Message.__doc__

    return {"SeglogWriter": SeglogWriter, "SeglogStreamWriter": SeglogStreamWriter,
            "SeglogCommitMessage": SeglogCommitMessage}

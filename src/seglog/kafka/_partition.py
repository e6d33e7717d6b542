"""``KafkaPartition``: one partition directory of a Kafka broker, read with the read API
of a readonly ``seglog.Log`` (``iter``, ``read_arrow``, ``iter_arrow``,
``offset_for_time``, the offsets, the reprs) and Kafka's two isolation levels.

Every call lists the directory again (a broker may be writing it): what a call reads
ends where the files ended when it started. Segments whose files did not change keep
what was learnt about them (index checks, walks, transactions).
"""

from __future__ import annotations

import os
from bisect import bisect_left
from itertools import chain
from typing import Any, Iterator

from .._views import html as _html
from ..errors import InvalidConfigError, NotALogError, OffsetOutOfRangeError
from .._codec.records import make_message, messages_html
from ..message import Message
from .._codec.columns import arrow_modules
from . import _arrow, _discover, _reads, _txn, _wire
from ._segments import ARROW_CHUNK, Segment, list_segments, open_readonly
from ._wire import BatchInfo, Records

ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


class KafkaPartition:
    """A Kafka partition directory, read-only. ``topic`` and ``partition`` come from
    its name (``<topic>-<partition>``; None for a directory named otherwise)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        if not os.path.isdir(self.path):
            raise NotALogError(f"{self.path}: no such directory (give a Kafka partition "
                               f"directory, <log dir>/<topic>-<partition>)")
        named = _discover.parse_name(os.path.basename(os.path.abspath(self.path)))
        self.topic: str | None = named[0] if named else None
        self.partition: int | None = named[1] if named else None
        self._segs: list[Segment] = []
        self._events: dict[int, tuple[Segment, list[_txn.Event]]] = {}

    # -- the files -----------------------------------------------------------------
    def _segments(self) -> list[Segment]:
        self._segs = list_segments(self.path, {s.base: s for s in self._segs})
        return self._segs

    def _recorded_start(self) -> int | None:
        if self.topic is None or self.partition is None:
            return None
        return _discover.recorded_start(os.path.dirname(os.path.abspath(self.path)),
                                        self.topic, self.partition)

    def _bounds(self, segs: list[Segment]) -> tuple[int, int]:
        if not segs:
            start = self._recorded_start() or 0
            return start, start
        end = segs[-1].end_offset()
        if end == segs[-1].base and len(segs) > 1:
            end = max(end, segs[-2].end_offset())
        recorded = self._recorded_start()
        start = segs[0].base if recorded is None else max(recorded, segs[0].base)
        return min(start, end), end

    @property
    def start_offset(self) -> int:
        """The log start offset: the first segment's base offset, or the one Kafka
        recorded in ``log-start-offset-checkpoint`` when higher (records below it were
        deleted)."""
        return self._bounds(self._segments())[0]

    @property
    def end_offset(self) -> int:
        """The offset after the last batch (control batches take offsets too)."""
        return self._bounds(self._segments())[1]

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest transaction still open, else ``end_offset``:
        where a read_committed reader stops."""
        segs = self._segments()
        start, end = self._bounds(segs)
        lso = self._fates(segs, start).last_stable
        return end if lso is None else max(min(lso, end), start)

    def leader_epoch(self) -> int:
        """The latest leader epoch recorded in ``leader-epoch-checkpoint`` (-1: none)."""
        return _discover.leader_epoch(self.path)

    # -- transactions ----------------------------------------------------------------
    def _fates(self, segs: list[Segment], start: int) -> _txn.Fates:
        def control(seg: Segment) -> Any:
            def kind(info: _wire.BatchInfo) -> int:
                fd = open_readonly(seg.path)
                try:
                    buf = os.pread(fd, info.size, info.position)
                finally:
                    os.close(fd)
                at = info._replace(position=0)
                try:
                    _wire.check(buf, at)
                    return _wire.control_type(buf, at)
                except Exception as e:
                    raise _reads.placed(e, seg.path, info.position) from None
            return kind

        evs = []
        for seg in segs:
            kept = self._events.get(seg.base)
            if kept is None or kept[0] is not seg:
                kept = (seg, _txn.events(seg.headers(), control(seg)))
                self._events[seg.base] = kept
            evs.append([e for e in kept[1] if e[1] >= start])
        return _txn.fates(evs)

    # -- reads ---------------------------------------------------------------------
    def _range(self, start: int | None, end: int | None, isolation: str
               ) -> tuple[list[Segment], int, int, _txn.Fates | None]:
        if isolation not in ISOLATION_LEVELS:
            raise InvalidConfigError(f"isolation must be one of {ISOLATION_LEVELS}, "
                                     f"not {isolation!r}")
        segs = self._segments()
        lo, hi = self._bounds(segs)
        if start is None:
            start = lo
        if not lo <= start <= hi:
            raise OffsetOutOfRangeError(f"offset {start} is outside [{lo}, {hi}] of "
                                        f"{self.path}")
        end = hi if end is None else min(end, hi)
        fates = None
        if isolation == "read_committed":
            fates = self._fates(segs, lo)
            if fates.last_stable is not None:
                end = min(end, fates.last_stable)
        return segs, start, max(end, start), fates

    def iter(self, start: int | None = None, end: int | None = None, *,
             isolation: str = "read_uncommitted") -> Iterator[Message]:
        """Messages with ``start <= offset < end`` in order, as ``Log.iter`` gives them
        (``Message``: offset, timestamp, key, value, headers; a header's value may be
        None, as Kafka allows). ``start`` defaults to ``start_offset``, ``end`` to the
        end of the files at the call. ``isolation="read_committed"``: as Kafka's
        read_committed consumer, no record of an aborted transaction and nothing from
        the first open transaction on. Control batches are never yielded.
        ``OffsetOutOfRangeError`` when ``start`` is outside the partition,
        ``CorruptRecordError`` (file, position) for damage."""
        segs, start, end, fates = self._range(start, end, isolation)
        found = _reads.walk(segs, start, end, fates)
        return chain.from_iterable(_reads.message_iters(found, start, end, make_message))

    def __iter__(self) -> Iterator[Message]:
        return self.iter()

    def iter_arrow(self, start: int | None = None, end: int | None = None, *,
                   isolation: str = "read_uncommitted") -> Iterator[Any]:
        """``iter``'s messages as ``pyarrow.RecordBatch``es of ``arrow_schema()`` (a
        header's null value becomes empty bytes), one per chunk read. Needs pyarrow and
        numpy (the ``spark`` extra)."""
        segs, start, end, fates = self._range(start, end, isolation)
        return _arrow.record_batches(_reads.walk(segs, start, end, fates, ARROW_CHUNK),
                                     start, end)

    def read_arrow(self, start: int | None = None, end: int | None = None, *,
                   isolation: str = "read_uncommitted") -> Any:
        """``iter_arrow``'s batches as one ``pyarrow.Table``."""
        pa, _ = arrow_modules()
        batches = list(self.iter_arrow(start, end, isolation=isolation))
        return pa.Table.from_batches(batches) if batches else _arrow.empty_table()

    def batches(self, start: int | None = None, end: int | None = None, *,
                decode: bool = False) -> Iterator[tuple[str, BatchInfo, Records | None]]:
        """Every batch with offsets in ``[start, end)`` as stored, control batches too
        (what ``kafka-dump-log`` shows): (segment file, ``BatchInfo`` with its
        position in that file, its records when ``decode``). Each is checksummed;
        ``CorruptRecordError`` at the first damage."""
        segs = self._segments()
        lo, hi = self._bounds(segs)
        return _reads.every_batch(segs, lo if start is None else start,
                                  hi if end is None else end, decode)

    def offset_for_time(self, timestamp: int) -> int | None:
        """The first offset whose record's timestamp is >= ``timestamp``, or None (as
        Kafka's ``offsetsForTimes``), found through the time indexes where they agree
        with the log."""
        segs = self._segments()
        lo, hi = self._bounds(segs)
        for k, seg in enumerate(segs):
            if seg.max_timestamp() < timestamp:
                continue
            stamps, offs = seg.time_entries()
            j = bisect_left(stamps, timestamp)
            begin = max(lo, offs[j - 1] if j > 0 else seg.base)
            if begin >= hi:
                return None
            for buf, info, path, at in _reads.walk(segs[k:], begin, hi, None):
                if info.max_timestamp < timestamp and info.magic == 2:
                    continue
                for it in _reads.message_iters(iter([(buf, info, path, at)]), begin, hi,
                                               tuple):
                    for m in it:
                        if m[1] >= timestamp:
                            return int(m[0])
            return None
        return None

    def stats(self) -> dict[str, Any]:
        """Offsets, segments and their bytes, the leader epoch, as a plain dict."""
        segs = self._segments()
        start, end = self._bounds(segs)
        return {"path": self.path, "topic": self.topic, "partition": self.partition,
                "start_offset": start, "end_offset": end,
                "segments": len(segs), "bytes": sum(s.size for s in segs),
                "leader_epoch": self.leader_epoch()}

    def __repr__(self) -> str:
        st = self.stats()
        return (f"<seglog.kafka.KafkaPartition {self.path} [{st['start_offset']}, "
                f"{st['end_offset']}) {st['segments']} segment(s) readonly>")

    def _repr_html_(self) -> str:
        st = self.stats()
        head = _html.fields("seglog.kafka.KafkaPartition", [
            ("path", st["path"]), ("topic", st["topic"]), ("partition", st["partition"]),
            ("offsets", f"[{st['start_offset']}, {st['end_offset']})"),
            ("segments", st["segments"]), ("bytes", _html.size(st["bytes"])),
            ("leader epoch", st["leader_epoch"])])
        first = max(st["start_offset"], st["end_offset"] - 5)
        return head + messages_html("last messages", self.iter(first))

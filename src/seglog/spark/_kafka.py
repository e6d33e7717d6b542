"""The ``"seglog"`` source over Apache Kafka's own log dirs (``kafka.logDirs``): which
partitions the options select there, where each is read (``seglog.kafka``'s choice of
copy), and a partition as the readonly log the planner and the readers use
(``KafkaLog``: offsets, the time index, Arrow batches, at the query's isolation level).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterator, Protocol

from .. import kafka
from ..errors import InvalidConfigError

TP = tuple[str, int]
OPTIONS = ("kafka.logDirs", "kafka.isolation.level")


class Selection(Protocol):
    """What the options select of Kafka's log dirs (``_options.Options`` has it; it
    imports this module): the dirs, and the topics, pattern or partitions."""

    @property
    def kafka_dirs(self) -> tuple[str, ...]: ...
    @property
    def subscribe(self) -> tuple[str, ...]: ...
    @property
    def pattern(self) -> str | None: ...
    @property
    def assign(self) -> tuple[TP, ...]: ...


def parse(get: Callable[[str], str | None]) -> dict[str, Any]:
    """The Kafka options' fields of ``Options`` (none when ``kafka.logDirs`` is not given)."""
    dirs = get("kafka.logDirs")
    level = get("kafka.isolation.level")
    if dirs is None:
        if level is not None:
            raise InvalidConfigError("option kafka.isolation.level needs kafka.logDirs")
        return {}
    paths = tuple(d.strip() for d in dirs.split(",") if d.strip())
    if not paths:
        raise InvalidConfigError("option kafka.logDirs names no directory")
    level = (level or "read_uncommitted").strip().lower()
    if level not in kafka.ISOLATION_LEVELS:
        raise InvalidConfigError(f"option kafka.isolation.level must be one of "
                                 f"{', '.join(kafka.ISOLATION_LEVELS)}, not {level!r}")
    return {"kafka_dirs": paths, "isolation": level}


def _found(o: Selection) -> dict[TP, str]:
    try:
        return kafka.list_partitions(list(o.kafka_dirs))
    except (OSError, ValueError) as e:
        raise InvalidConfigError(f"kafka.logDirs: {e}") from None


def partitions(o: Selection, must_exist: bool) -> list[TP]:
    """The partitions of the subscribed topics (or the pattern's, or the assigned
    ones) found in the log dirs."""
    found = _found(o)
    if o.assign:
        missing = [tp for tp in o.assign if tp not in found]
        if missing and must_exist:
            raise InvalidConfigError(f"assign: {missing} not found in kafka.logDirs")
        return [tp for tp in o.assign if tp in found]
    if o.pattern is not None:
        rx = re.compile(o.pattern)
        return sorted(tp for tp in found if rx.fullmatch(tp[0]))
    topics = set(o.subscribe)
    absent = topics - {t for t, _ in found}
    if absent and must_exist:
        raise InvalidConfigError(f"subscribe: topic(s) {sorted(absent)} not found in "
                                 f"kafka.logDirs {list(o.kafka_dirs)}")
    return sorted(tp for tp in found if tp[0] in topics)


def directory(o: Selection, tp: TP) -> str:
    found = _found(o)
    if tp not in found:
        raise InvalidConfigError(f"{tp[0]}-{tp[1]} is not in kafka.logDirs")
    return found[tp]


class KafkaLog:
    """A Kafka partition as the source reads a log: ``start_offset``, ``end_offset``
    (the last stable offset under read_committed, as Kafka's source stops there),
    ``offset_for_time``, ``iter_arrow``. It holds no open file: ``close`` has nothing
    to release."""

    def __init__(self, path: str, isolation: str) -> None:
        self._part = kafka.open_partition(path)
        self._isolation = isolation

    @property
    def start_offset(self) -> int:
        return self._part.start_offset

    @property
    def end_offset(self) -> int:
        if self._isolation == "read_committed":
            return self._part.last_stable_offset
        return self._part.end_offset

    def offset_for_time(self, timestamp: int) -> int | None:
        return self._part.offset_for_time(timestamp)

    def iter_arrow(self, start: int | None = None, end: int | None = None) -> Iterator[Any]:
        return self._part.iter_arrow(start, end, isolation=self._isolation)

    def close(self) -> None:
        """Nothing to release (files are opened per read)."""

    def __enter__(self) -> "KafkaLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

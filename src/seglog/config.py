"""Log configuration: Kafka's topic settings in snake_case, validated up front."""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, fields
# Any: the user's settings, checked at run time
from typing import Any

from .errors import InvalidConfigError

_DAY_MS = 24 * 3600 * 1000
_INT32_MAX = (1 << 31) - 1


@dataclass(frozen=True)
class LogConfig:
    """Settings of one log, the keyword options of ``Log.open`` (Kafka's topic
    settings in snake_case). ``None`` switches a bound off. Every value is checked
    when the config is built: an unknown name or a value out of range raises
    ``InvalidConfigError``.

    ``segment_bytes``
        roll the active segment when the next batch would pass this size.
    ``segment_ms``
        roll when the active segment's records span more than this.
    ``flush_messages``
        fsync after this many appended messages (None: no count bound).
    ``flush_ms``
        fsync at most this long after an append, even if the writer goes idle.
    ``index_interval_bytes``
        bytes of log data between two offset-index entries.
    ``max_index_bytes``
        preallocated size of each index; a full index rolls the segment.
    ``retention_ms``, ``retention_bytes``
        delete policy bounds (None: keep forever).
    ``cleanup_policy``
        ``"delete"``, ``"compact"`` or ``"compact,delete"``.
    ``compression``
        None or ``"lz4"``: the records of a batch compressed together, where that
        pays: a batch of one record (what ``append`` writes) is never compressed,
        as lz4 gains nothing on one record of the sizes logs hold; nor is a batch
        that compression would not make smaller. So it pays with ``append_batch``
        (50 access-log lines: 0.38x the size).
    ``max_message_bytes``
        largest record (key + value + headers) accepted; also the size at which
        ``append_batch`` cuts its input into batches.
    ``delete_retention_ms``
        how long compaction keeps tombstones.
    ``min_cleanable_dirty_ratio``, ``min_compaction_lag_ms``
        when compaction may run.
    ``file_delete_delay_ms``
        how long deleted segments stay on disk, renamed aside.
    ``cleaner_buffer_bytes``
        memory for compaction's offset map (24 bytes a key).
    ``retention_check_ms``
        how often a background thread applies retention and compaction (None:
        only when ``enforce_retention``/``compact`` are called).
    ``message_timestamp_before_max_ms``, ``message_timestamp_after_max_ms``
        how far before / after the writer's clock a given record timestamp may be
        (``ValueError`` otherwise; None: no bound). The defaults, 20 years and 1
        hour, reject seconds passed as milliseconds and runaway clocks.

    A log stores its settings (``seglog.json``): reopening without options keeps
    them; options given to a writer's ``open`` override them and are saved.
    """

    segment_bytes: int = 1 << 30
    segment_ms: int | None = 7 * _DAY_MS
    flush_messages: int | None = None
    flush_ms: int | None = 1000
    index_interval_bytes: int = 4096
    max_index_bytes: int = 10 << 20
    retention_ms: int | None = 7 * _DAY_MS
    retention_bytes: int | None = None
    cleanup_policy: str = "delete"
    compression: str | None = None
    max_message_bytes: int = 1 << 20
    delete_retention_ms: int = _DAY_MS
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    file_delete_delay_ms: int = 60_000
    cleaner_buffer_bytes: int = 32 << 20
    retention_check_ms: int | None = 300_000
    message_timestamp_before_max_ms: int | None = 20 * 365 * _DAY_MS
    message_timestamp_after_max_ms: int | None = 3600 * 1000

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> "LogConfig":
        """A config from keyword options; unknown names and bad values raise
        ``InvalidConfigError``."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            hints = []
            for name in unknown:
                close = difflib.get_close_matches(name, sorted(known), n=1)
                hints.append(f"{name} (did you mean {close[0]}?)" if close else name)
            raise InvalidConfigError(f"unknown option(s): {', '.join(hints)}")
        return cls(**kwargs)

    def __post_init__(self) -> None:
        """Every option checked once, however the config is built
        (``InvalidConfigError``)."""
        _int("segment_bytes", self.segment_bytes, 1024, _INT32_MAX)
        _int("segment_ms", self.segment_ms, 1, None, optional=True)
        _int("flush_messages", self.flush_messages, 1, None, optional=True)
        _int("flush_ms", self.flush_ms, 1, None, optional=True)
        _int("index_interval_bytes", self.index_interval_bytes, 1, _INT32_MAX)
        _int("max_index_bytes", self.max_index_bytes, 24, _INT32_MAX)
        _int("retention_ms", self.retention_ms, 0, None, optional=True)
        _int("retention_bytes", self.retention_bytes, 0, None, optional=True)
        _int("max_message_bytes", self.max_message_bytes, 1, _INT32_MAX)
        _int("delete_retention_ms", self.delete_retention_ms, 0, None)
        _int("min_compaction_lag_ms", self.min_compaction_lag_ms, 0, None)
        _int("file_delete_delay_ms", self.file_delete_delay_ms, 0, None)
        _int("cleaner_buffer_bytes", self.cleaner_buffer_bytes, 1024, None)
        _int("retention_check_ms", self.retention_check_ms, 1, None, optional=True)
        _int("message_timestamp_before_max_ms", self.message_timestamp_before_max_ms, 0, None,
             optional=True)
        _int("message_timestamp_after_max_ms", self.message_timestamp_after_max_ms, 0, None,
             optional=True)
        if self.cleanup_policy not in ("delete", "compact", "compact,delete", "delete,compact"):
            raise InvalidConfigError(
                f"cleanup_policy must be 'delete', 'compact' or 'compact,delete', "
                f"not {self.cleanup_policy!r}")
        if self.compression not in (None, "lz4"):
            raise InvalidConfigError(f"compression must be None or 'lz4', not {self.compression!r}")
        r = self.min_cleanable_dirty_ratio
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0.0 <= r <= 1.0:
            raise InvalidConfigError(f"min_cleanable_dirty_ratio must be in [0, 1], not {r!r}")

    @property
    def compacted(self) -> bool:
        """Whether compaction applies (``cleanup_policy`` names ``compact``)."""
        return "compact" in self.cleanup_policy

    @property
    def deletes(self) -> bool:
        """Whether retention deletes segments (``cleanup_policy`` names ``delete``)."""
        return "delete" in self.cleanup_policy


def open_options(config: object, options: dict[str, Any]) -> dict[str, Any]:
    """The settings ``Log.open`` was given, checked, as keyword options: ``config``
    (a ``LogConfig``: every setting, as if each were given by name) or the individual
    ``options``, never both (``InvalidConfigError`` naming the options given beside
    it); a ``config`` that is not a ``LogConfig`` is a ``TypeError``."""
    if config is None:
        LogConfig.from_kwargs(options)
        return options
    if not isinstance(config, LogConfig):
        raise TypeError(f"config must be a LogConfig, not {type(config).__name__}")
    if options:
        raise InvalidConfigError(
            f"config= gives every setting; {', '.join(sorted(options))} given beside it "
            f"(use dataclasses.replace(config, ...) or the options alone)")
    return asdict(config)


def _int(name: str, value: Any, lo: int, hi: int | None, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidConfigError(f"{name} must be an int{' or None' if optional else ''}, "
                                 f"not {value!r}")
    if value < lo or (hi is not None and value > hi):
        bound = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise InvalidConfigError(f"{name} must be {bound}, not {value}")

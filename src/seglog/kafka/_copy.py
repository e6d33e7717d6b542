"""``copy_to_log``: a Kafka partition's records into a new seglog log at the same
offsets (compaction's holes, and the offsets below the log start, stay holes)."""

from __future__ import annotations

import os
# Any: Log.open's **options (the user's keywords); Kafka's messages
from typing import Any

from .._codec import encode as _encode
from ..errors import InvalidConfigError
from ..log import Log, append_encoded
from ._partition import KafkaPartition

# records of a Kafka batch per seglog batch, at most (one batch's size stays far
# below seglog's max_message_bytes for Kafka's default 1 MiB batches)
_PER_BATCH = 500


def copy_to_log(part: KafkaPartition, dest: str | os.PathLike[str], *,
                isolation: str = "read_uncommitted", **log_options: Any) -> Log:
    """Copy every record ``part.iter(isolation=isolation)`` gives into a new seglog
    log at ``dest`` (``Log.open(dest, **log_options)``), each at its Kafka offset; a
    header's null value is stored as empty bytes. ``dest`` must not hold anything
    yet (``InvalidConfigError``). Returns the open log; the copy is flushed."""
    path = os.fspath(dest)
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise InvalidConfigError(f"{path} exists and is not an empty directory: "
                                 f"copy_to_log writes a new log")
    log = Log.open(path, **log_options)
    try:
        pending: list[Any] = []
        for m in part.iter(isolation=isolation):
            pending.append(m)
            if len(pending) == _PER_BATCH:
                _append(log, pending)
                pending = []
        if pending:
            _append(log, pending)
        log.flush()
    except BaseException:
        log.close()
        raise
    return log


def _append(log: Log, msgs: list[Any]) -> None:
    """One seglog batch holding ``msgs`` at their own offsets: offset deltas from the
    log's end (the first may be past it: a hole)."""
    end = log.end_offset
    deltas = [m.offset - end for m in msgs]
    data = _encode.encode_batch(
        0, [m.value for m in msgs], [m.timestamp for m in msgs],
        keys=[m.key for m in msgs],
        headers=[[(k.encode(), b"" if v is None else v) for k, v in m.headers] for m in msgs],
        offset_deltas=deltas, last_offset_delta=deltas[-1])
    append_encoded(log, [(data, deltas[-1] + 1, max(m.timestamp for m in msgs), len(data))])

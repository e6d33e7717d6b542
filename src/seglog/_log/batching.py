"""Validation and encoding for ``Log.append_batch``: every input check of a call
(``prepare_batch``, the timestamp window), then its records cut into batches of at
most ``max_message_bytes`` and encoded; plain bytes values take one join. Pure:
nothing here touches a file, so a topic encodes every partition's part before
writing any.
"""

from __future__ import annotations

from typing import Any, Sequence

from .._codec.encode import encode_batch, encode_values_parts
from ..config import LogConfig
from .._codec.records import HEADER_FRAMING, PreparedBatch, prepare_batch

# per-record bookkeeping bytes counted against max_message_bytes when cutting batches
_RECORD_OVERHEAD = 24


def encode(items: Sequence[Any], now: int, config: LogConfig, compress: int,
           lengths: list[int] | None = None) -> list[tuple[Any, int, int, int]]:
    """Every input check of ``Log.append_batch(items)`` (``now``: the writer's clock in
    ms) and its batches, encoded with ``compress`` (a codec id); writes nothing.
    ``lengths``: the items' lengths, from a caller that knows each item is exactly
    ``bytes`` (the producer's checked sends): no pass over them here."""
    batches = None
    try:
        # bytes-like values only (Records, str, None make join raise): the join is
        # the type check and the batch body at once
        body = b"".join(items)  # a Record raises: the type check
    except TypeError:
        body = None
    # the whole batch within max_message_bytes: so is every value in it
    if body is not None and len(body) + _RECORD_OVERHEAD * len(items) <= config.max_message_bytes:
        if lengths is None:
            lens = list(map(len, items))
            # len() is the byte size of bytes only (a memoryview, array or ctypes
            # array counts items): other buffers take the careful path
            if sum(lens) == len(body) and list(map(type, items)).count(bytes) == len(lens):
                lengths = lens
        if lengths is not None:
            size, parts = encode_values_parts(body, lengths, now, compress)
            batches = [(parts, len(items), now, size)]
    if batches is None:
        values, keys, stamps, headers = _prepared(items, now, config)
        batches = _encode(values, keys, stamps, headers, config.max_message_bytes, compress)
    return batches


def _prepared(items: Sequence[Any], now: int, config: LogConfig) -> PreparedBatch:
    """``prepare_batch`` and the timestamp window: every input check of a batch."""
    prepared = prepare_batch(items, now, config.max_message_bytes)
    stamps = prepared[2]
    if isinstance(stamps, int):
        check_window(config, stamps, stamps, now)
    else:
        check_window(config, min(stamps), max(stamps), now)
    return prepared


def check_window(config: LogConfig, lo: int, hi: int, now: int) -> None:
    """Record timestamps ``lo``..``hi`` within the configured window around ``now``."""
    before = config.message_timestamp_before_max_ms
    after = config.message_timestamp_after_max_ms
    if before is not None and lo < now - before:
        raise ValueError(
            f"timestamp {lo} is more than message_timestamp_before_max_ms={before} before "
            f"now ({now}); timestamps are milliseconds since the epoch (seconds given?)")
    if after is not None and hi > now + after:
        raise ValueError(
            f"timestamp {hi} is more than message_timestamp_after_max_ms={after} after "
            f"now ({now}); timestamps are milliseconds since the epoch")


def _encode(values: list[bytes | None], keys: list[bytes | None] | None,
            stamps: int | list[int], headers: list[tuple[tuple[bytes, bytes], ...]] | None,
            limit: int, compress: int) -> list[tuple[Any, int, int, int]]:
    """Encode into batches of at most max_message_bytes: (bytes, count, max_ts, size)."""
    n = len(values)
    cuts = [0]
    sizes = [len(v) if v else 0 for v in values]
    if keys is not None or headers is not None:
        for i in range(n):
            k = keys[i] if keys is not None else None
            if k:
                sizes[i] += len(k)
            if headers is not None:
                sizes[i] += sum(len(a) + len(b) + HEADER_FRAMING for a, b in headers[i])
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
        data = encode_batch(0, values[a:b], ts, keys[a:b] if keys is not None else None,
                                  headers[a:b] if headers is not None else None, compress)
        out.append((data, b - a, ts if isinstance(ts, int) else max(ts), len(data)))
    return out

"""Kafka batches and partition directories for the seglog.kafka tests, built with
kafka-python's record builders (an encoder independent of seglog's decoder)."""

from __future__ import annotations

import os

from kafka.record.default_records import DefaultRecordBatchBuilder

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
FIXTURES = os.path.join(os.path.dirname(__file__), "data", "kafka")


def batch(base: int, records: list[tuple[int, bytes | None, bytes | None, list]], *,
          codec: str = "none", offsets: list[int] | None = None) -> bytes:
    """One magic 2 batch at ``base``: records (timestamp, key, value, headers), at
    offset deltas ``offsets`` (default 0, 1, 2...)."""
    b = DefaultRecordBatchBuilder(2, CODECS[codec], False, -1, -1, -1, 1 << 30)
    for k, (ts, key, value, headers) in enumerate(records):
        b.append(offsets[k] if offsets else k, ts, key, value, headers)
    raw = bytearray(b.build())
    raw[0:8] = base.to_bytes(8, "big")
    return bytes(raw)


def as_dict(m) -> dict:
    """A message as the fixtures' expected JSON has it."""
    hx = (lambda b: None if b is None else bytes(b).hex())
    return {"offset": m[0], "timestamp": m[1], "key": hx(m[2]), "value": hx(m[3]),
            "headers": [[k, hx(v)] for k, v in m[4]]}


def row_dict(r: dict) -> dict:
    """An Arrow row (``to_pylist``) as the fixtures' expected JSON has it (a null
    header value reads as empty bytes there)."""
    hx = (lambda b: None if b is None else bytes(b).hex())
    return {"offset": r["offset"], "timestamp": int(r["timestamp"].timestamp() * 1000)
            if r["timestamp"] is not None else None, "key": hx(r["key"]),
            "value": hx(r["value"]), "headers": [[h["key"], hx(h["value"])]
                                                  for h in r["headers"]]}

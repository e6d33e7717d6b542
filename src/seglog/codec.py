"""Batch codec: pure functions between records and bytes, with no file handling.

The only owner of the byte format (docs/FORMAT.md has it byte by byte), in three
modules this one gathers: ``_format`` (the header and its named fields, attribute
bits, the checksum, framing, and ``continues``, the rule by which batches follow
each other), ``_encode`` (records to a batch) and ``_decode`` (a batch to messages
or columns; ``iter_messages`` and ``iter_column_parts``, the read path's fused
walk-and-decode over a buffer of batches).

All integers are little-endian.
"""

from __future__ import annotations

from ._decode import (ColumnPart, WalkEnd, column_part, decode_batch, iter_column_parts,
                      iter_messages)
from ._encode import encode_batch, encode_values_parts, finish_batch
from ._format import (CHECKSUM, CHECKSUM_FROM, CODEC_LZ4, CODEC_MASK, CODEC_NONE,
                      DEFAULT_MAX_UNCOMPRESSED, F_HEADERS, F_HORIZON, F_KEYS, F_NULL_VALUES,
                      F_OFFSETS, F_TIMESTAMPS, F_WIDE, F_WIDE_TS, H_ATTRS, H_BASE, H_BASE_TS,
                      H_CHECKSUM, H_COUNT, H_LAST_DELTA, H_LENGTH, H_MAGIC, H_MAX_TS, HEADER,
                      HEADER_SIZE, LENGTH_END, LZ4_MIN_RECORDS, MAGIC, MIN_BATCH_LENGTH, NEVER,
                      OLD_MAGIC, ONE_HEADER, ONE_PREFIX, ONE_TAIL, BatchHeader, MessageTuple, batch_size,
                      batches_in, checksum_ok, continues, delete_horizon, framed_header,
                      framing_error, last_offset, read_header, sane_header)

__all__ = [
    # the format: header, fields, attribute bits, checksum
    "MAGIC", "OLD_MAGIC", "HEADER", "HEADER_SIZE", "LENGTH_END", "CHECKSUM_FROM",
    "MIN_BATCH_LENGTH", "ONE_TAIL", "ONE_PREFIX", "ONE_HEADER", "H_BASE", "H_LENGTH", "H_MAGIC",
    "H_CHECKSUM", "H_ATTRS", "H_LAST_DELTA", "H_COUNT", "H_BASE_TS", "H_MAX_TS",
    "CODEC_MASK", "CODEC_NONE", "CODEC_LZ4", "F_KEYS", "F_HEADERS", "F_TIMESTAMPS", "F_WIDE",
    "F_OFFSETS", "F_WIDE_TS", "F_NULL_VALUES", "F_HORIZON", "LZ4_MIN_RECORDS",
    "DEFAULT_MAX_UNCOMPRESSED", "NEVER", "CHECKSUM", "BatchHeader", "MessageTuple",
    # headers and framing
    "read_header", "sane_header", "framed_header", "framing_error", "checksum_ok",
    "continues", "batches_in", "last_offset", "batch_size", "delete_horizon",
    # encoding
    "encode_batch", "encode_values_parts", "finish_batch",
    # decoding
    "iter_messages", "iter_column_parts", "WalkEnd", "decode_batch", "column_part",
    "ColumnPart",
]

"""Batch codec: pure functions between records and bytes, with no file handling.

The face of the byte format (docs/FORMAT.md has it byte by byte), which three
modules own: ``_codec.format`` (the header and its named fields, attribute bits, the
checksum, framing, and the rule by which batches follow each other), ``_codec.encode``
(records to a batch) and ``_codec.decode`` (a batch to messages or columns, and the read
path's fused walk-and-decode over a buffer of batches). seglog's own modules
import from those; this one gives users what reading and writing batches needs.

All integers are little-endian.
"""

from __future__ import annotations

from ._codec.decode import ColumnPart, WalkEnd, decode_batch, iter_messages
from ._codec.encode import encode_batch
from ._codec.format import (CHECKSUM, CODEC_LZ4, CODEC_MASK, CODEC_NONE, F_HEADERS, F_HORIZON,
                            F_KEYS, F_NULL_VALUES, F_OFFSETS, F_TIMESTAMPS, F_WIDE, F_WIDE_TS,
                            HEADER_SIZE, MAGIC, BatchHeader, MessageTuple, batches_in, checksum_ok,
                            delete_horizon, read_header)

__all__ = [
    # the format: the magic byte, the header, its attribute bits, the checksum
    "MAGIC", "HEADER_SIZE", "BatchHeader", "CHECKSUM",
    "CODEC_MASK", "CODEC_NONE", "CODEC_LZ4", "F_KEYS", "F_HEADERS", "F_TIMESTAMPS", "F_WIDE",
    "F_OFFSETS", "F_WIDE_TS", "F_NULL_VALUES", "F_HORIZON",
    # headers and framing
    "read_header", "batches_in", "checksum_ok", "delete_horizon",
    # records to a batch, and back
    "encode_batch", "decode_batch", "iter_messages", "MessageTuple", "WalkEnd",
    # a batch's messages as columns (``MessageSet.column_parts``)
    "ColumnPart",
]

"""Kafka's batch formats as pure functions over bytes (no files, no I/O): framing a
batch in a buffer (``batch_size``), its header (``BatchInfo``: magic 2 record batches and
the legacy message sets of magic 0 and 1 alike), its checksum (``check``), and the
general decode of its records (``decode``), one field at a time.

Every function raises only ``CorruptRecordError`` for bad bytes, with the position in
the buffer it was given (callers place it in their file with ``CorruptRecordError.at``),
and ``ImportError`` when a codec of the ``kafka`` extra is missing.
"""

from __future__ import annotations

from struct import Struct
from typing import Any, NamedTuple

from ..errors import CorruptRecordError
from . import _codecs

# magic 2: baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
# lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch,
# baseSequence, recordCount (big-endian, as everything Kafka writes)
V2_HEADER = Struct(">qiiBIhiqqqhii")
V2_HEADER_SIZE = V2_HEADER.size            # 61
# magic 0 and 1: offset, messageSize, crc, magic, attributes
LEGACY_HEADER = Struct(">qiIBb")
LEGACY_HEADER_SIZE = LEGACY_HEADER.size    # 18
LOG_OVERHEAD = 12                          # offset and length: what the length leaves out
MAGIC_AT = 16                              # the magic byte, in both formats
CRC_FROM = 21                              # magic 2's CRC32C covers [21, end)
_V2_MIN = V2_HEADER_SIZE - LOG_OVERHEAD
_LEGACY_MIN = {0: 14, 1: 22}
# an upper bound no real batch reaches (Kafka's message.max.bytes is an int, its
# default 1 MiB): a length past it is damage, not a batch to wait for
MAX_BATCH = 1 << 31

CODEC_MASK = 0x07
TIMESTAMP_TYPE = 0x08                      # LogAppendTime: every record has maxTimestamp
TRANSACTIONAL = 0x10
CONTROL = 0x20
NO_PRODUCER = -1
CONTROL_ABORT, CONTROL_COMMIT = 0, 1

_I16 = Struct(">h")
_I32 = Struct(">i")
_I64 = Struct(">q")
_CONTROL_KEY = Struct(">hh")


class BatchInfo(NamedTuple):
    """One batch's header facts. Legacy messages are batches of their own (a
    compressed one holds several records: its ``base_offset`` is only known once
    decoded, ``-1`` until then). ``records`` is magic 2's record count, 1 for legacy."""

    position: int
    size: int
    magic: int
    base_offset: int
    last_offset: int
    attributes: int
    producer_id: int
    base_timestamp: int
    max_timestamp: int
    records: int

    @property
    def is_control(self) -> bool:
        """A control batch (a transaction's COMMIT or ABORT marker), never yielded."""
        return self.magic >= 2 and bool(self.attributes & CONTROL)

    @property
    def is_transactional(self) -> bool:
        """A batch written inside a transaction."""
        return self.magic >= 2 and bool(self.attributes & TRANSACTIONAL)

    @property
    def codec(self) -> int:
        """The compression codec's number: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & CODEC_MASK


def batch_size(data: bytes, pos: int, end: int) -> int | None:
    """The size of the batch at ``pos`` as its header says (it may reach past ``end``:
    the caller compares), or None when fewer bytes than its length and magic lie
    before ``end``. ``CorruptRecordError`` when no batch of any magic can start there."""
    if pos + MAGIC_AT + 1 > end:
        return None
    length = _I32.unpack_from(data, pos + 8)[0]
    magic = data[pos + MAGIC_AT]
    if magic == 2:
        least = _V2_MIN
    elif magic in (0, 1):
        least = _LEGACY_MIN[magic]
    else:
        raise CorruptRecordError(f"no Kafka batch starts here (magic {magic}, length {length})",
                                 position=pos)
    if length < least or length >= MAX_BATCH:
        raise CorruptRecordError(f"a batch of magic {magic} cannot have length {length}",
                                 position=pos)
    return int(LOG_OVERHEAD + length)


def header(data: bytes, pos: int, size: int) -> BatchInfo:
    """The header of the framed batch at ``pos`` (``batch_size`` gave ``size``, and all
    of it is in ``data``)."""
    magic = data[pos + MAGIC_AT]
    if magic == 2:
        (base, _, _, _, _, attrs, last_delta, base_ts, max_ts, pid, _, _,
         count) = V2_HEADER.unpack_from(data, pos)
        if base < 0 or last_delta < 0 or count < 0 or count > size:
            raise CorruptRecordError(f"a batch header with base offset {base}, last offset "
                                     f"delta {last_delta} and {count} records", position=pos)
        return BatchInfo(pos, size, 2, base, base + last_delta, attrs & 0xFFFF, pid, base_ts,
                         max_ts, count)
    offset, _, _, _, attrs = LEGACY_HEADER.unpack_from(data, pos)
    if offset < 0:
        raise CorruptRecordError(f"a message with offset {offset}", position=pos)
    ts = -1
    if magic == 1:
        ts = _I64.unpack_from(data, pos + LEGACY_HEADER_SIZE)[0]
    base = -1 if attrs & CODEC_MASK else offset
    return BatchInfo(pos, size, magic, base, offset, attrs & 0xFF, NO_PRODUCER, ts, ts, 1)


def check(data: bytes, info: BatchInfo) -> None:
    """``CorruptRecordError`` unless the batch's checksum matches its bytes."""
    pos, size = info.position, info.size
    if info.magic == 2:
        stored = _I32.unpack_from(data, pos + 17)[0] & 0xFFFFFFFF
        actual = _codecs.crc32c_function()(bytes(data[pos + CRC_FROM:pos + size]))
        kind = "CRC32C"
    else:
        stored = _I32.unpack_from(data, pos + 12)[0] & 0xFFFFFFFF
        actual = _codecs.crc32(memoryview(data)[pos + MAGIC_AT:pos + size])
        kind = "CRC32"
    if stored != actual:
        raise CorruptRecordError(f"{kind} mismatch in the batch at offset {info.last_offset} "
                                 f"(stored {stored:#010x}, computed {actual:#010x})",
                                 position=pos, offset=info.last_offset)


class Records(NamedTuple):
    """Decoded records as parallel lists (header values may be None: Kafka allows a
    null header value)."""

    offsets: list[int]
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[tuple[tuple[str, Any], ...]]


def _varint(b: bytes, p: int) -> tuple[int, int]:
    """A zigzag varint (up to 64 bits) at ``p``, and where it ends. ``IndexError`` when
    cut short (the caller turns it into its error)."""
    v = b[p]
    if v < 0x80:
        return (v >> 1) ^ -(v & 1), p + 1
    result = v & 0x7F
    shift = 7
    while True:
        p += 1
        v = b[p]
        result |= (v & 0x7F) << shift
        if v < 0x80:
            return (result >> 1) ^ -(result & 1), p + 1
        shift += 7
        if shift > 63:
            raise CorruptRecordError("a varint longer than 10 bytes")


def records_region(data: bytes, info: BatchInfo,
                   limit: int = _codecs.MAX_UNCOMPRESSED) -> bytes:
    """The records of a magic 2 batch as plain bytes (decompressed when compressed)."""
    body = bytes(data[info.position + V2_HEADER_SIZE:info.position + info.size])
    codec = info.codec
    if codec == _codecs.CODEC_NONE:
        return body
    try:
        return _codecs.decompress(codec, body, limit=limit)
    except CorruptRecordError as e:
        raise e.at(None, info.position, info.last_offset) from None


def records_span(data: bytes, info: BatchInfo) -> tuple[bytes, int, int]:
    """Where a magic 2 batch's (decompressed) records lie: (buffer, start, end), the
    batch's own buffer when uncompressed."""
    if info.attributes & CODEC_MASK:
        region = records_region(data, info)
        return region, 0, len(region)
    return data, info.position + V2_HEADER_SIZE, info.position + info.size


def decode(data: bytes, info: BatchInfo) -> Records:
    """The records of the batch (checked by ``check`` first: this does not), each field
    decoded in Python: the path for every shape of batch."""
    if info.magic == 2:
        return decode_v2(records_region(data, info), info)
    return decode_legacy(data, info)


def decode_v2(region: bytes, info: BatchInfo) -> Records:
    """The records of a magic 2 batch from its (decompressed) records region."""
    base, n = info.base_offset, info.records
    log_append = info.attributes & TIMESTAMP_TYPE
    base_ts = info.base_timestamp
    offsets: list[int] = []
    stamps: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[tuple[tuple[str, Any], ...]] = []
    p = 0
    last = base - 1
    size = len(region)
    try:
        for _ in range(n):
            length, p = _varint(region, p)
            stop = p + length
            if length < 6 or stop > size:
                raise CorruptRecordError(f"a record of length {length} in a batch of "
                                         f"{size} record bytes")
            p += 1                                    # the record's attributes: unused
            delta, p = _varint(region, p)
            od, p = _varint(region, p)
            kl, p = _varint(region, p)
            key = None
            if kl >= 0:
                key = region[p:p + kl]
                p += kl
            vl, p = _varint(region, p)
            value = None
            if vl >= 0:
                value = region[p:p + vl]
                p += vl
            hc, p = _varint(region, p)
            hdrs: tuple[tuple[str, Any], ...] = ()
            if hc:
                if hc < 0 or hc > length:
                    raise CorruptRecordError(f"a record with {hc} headers")
                items = []
                for _ in range(hc):
                    hk, p = _varint(region, p)
                    if hk < 0:
                        raise CorruptRecordError("a header with a null key")
                    name = region[p:p + hk].decode("utf-8", "replace")
                    p += hk
                    hv, p = _varint(region, p)
                    hval = None
                    if hv >= 0:
                        hval = region[p:p + hv]
                        p += hv
                    items.append((name, hval))
                hdrs = tuple(items)
            if p != stop:
                raise CorruptRecordError(f"a record's fields take {p - stop + length} bytes, "
                                         f"its length says {length}")
            off = base + od
            if off <= last or off > info.last_offset:
                raise CorruptRecordError(f"record offset {off} out of order in the batch "
                                         f"[{base}, {info.last_offset}]")
            last = off
            offsets.append(off)
            stamps.append(info.max_timestamp if log_append else base_ts + delta)
            keys.append(key)
            values.append(value)
            headers.append(hdrs)
    except IndexError:
        raise CorruptRecordError("a record is cut short", position=info.position,
                                 offset=info.last_offset) from None
    except CorruptRecordError as e:
        raise e.at(None, info.position, info.last_offset) from None
    if p != size:
        raise CorruptRecordError(f"{size - p} bytes follow the batch's {n} records",
                                 position=info.position, offset=info.last_offset)
    return Records(offsets, stamps, keys, values, headers)


def control_type(data: bytes, info: BatchInfo) -> int:
    """A control batch's kind (``CONTROL_ABORT``, ``CONTROL_COMMIT``, or another a newer
    Kafka defines), from its one record's key."""
    recs = decode_v2(records_region(data, info), info)
    key = recs.keys[0] if recs.keys else None
    if key is None or len(key) < 4:
        raise CorruptRecordError("a control batch without a control key",
                                 position=info.position, offset=info.last_offset)
    return int(_CONTROL_KEY.unpack_from(key, 0)[1])


def _legacy_fields(b: bytes, p: int, end: int, magic: int
                   ) -> tuple[int, bytes | None, bytes | None, int]:
    """(timestamp, key, value, where they end) of a legacy message's body from ``p``
    (just past its attributes byte)."""
    ts = -1
    if magic == 1:
        ts = _I64.unpack_from(b, p)[0]
        p += 8
    key, kl, p = _legacy_bytes(b, p, end, "key")
    value, vl, p = _legacy_bytes(b, p, end, "value")
    if p != end or kl < -1 or vl < -1:
        raise CorruptRecordError("a message's key and value do not fill its length")
    return ts, key, value, p


def _legacy_bytes(b: bytes, p: int, end: int, what: str) -> tuple[bytes | None, int, int]:
    """A legacy message's length-prefixed key or value at ``p``: (it, its length, where
    it ends)."""
    n = _I32.unpack_from(b, p)[0]
    p += 4
    if n < 0:
        return None, n, p
    if p + n > end:
        raise CorruptRecordError(f"a message {what} of {n} bytes past its message's end")
    return bytes(b[p:p + n]), n, p + n


def decode_legacy(data: bytes, info: BatchInfo) -> Records:
    """The records of a legacy message: itself, or the messages its compressed value
    holds (offsets and timestamps as Kafka's consumer reads them)."""
    pos, end, magic = info.position, info.position + info.size, info.magic
    try:
        ts, key, value, _ = _legacy_fields(data, pos + LEGACY_HEADER_SIZE, end, magic)
        codec = info.codec
        if codec == _codecs.CODEC_NONE:
            return Records([info.last_offset], [ts], [key], [value], [()])
        if value is None:
            raise CorruptRecordError("a compressed message without a value")
        inner = _codecs.decompress(codec, value, legacy_lz4=magic == 0)
        recs = _legacy_inner(inner, magic)
    except CorruptRecordError as e:
        raise e.at(None, pos, info.last_offset) from None
    except Exception as e:        # struct.error: a message cut short inside its length
        raise CorruptRecordError(f"a message is cut short ({e})", position=pos,
                                 offset=info.last_offset) from None
    if not recs.offsets:
        raise CorruptRecordError("a compressed message holding no messages", position=pos,
                                 offset=info.last_offset)
    if magic >= 1:                # inner offsets are relative: the last one is the wrapper's
        shift = info.last_offset - recs.offsets[-1]
        offsets = [o + shift for o in recs.offsets]
    else:
        offsets = recs.offsets
    if any(b <= a for a, b in zip(offsets, offsets[1:])) or offsets[-1] != info.last_offset:
        raise CorruptRecordError("the messages inside a compressed message are out of order",
                                 position=pos, offset=info.last_offset)
    stamps = recs.timestamps
    if magic == 1 and info.attributes & TIMESTAMP_TYPE:
        stamps = [ts] * len(offsets)
    return Records(offsets, stamps, recs.keys, recs.values, recs.headers)


def _legacy_inner(b: bytes, wrapper_magic: int) -> Records:
    out = Records([], [], [], [], [])
    p, size = 0, len(b)
    while p < size:
        if p + LEGACY_HEADER_SIZE > size:
            raise CorruptRecordError("an inner message is cut short")
        offset, length, crc, magic, attrs = LEGACY_HEADER.unpack_from(b, p)
        stop = p + LOG_OVERHEAD + length
        if magic not in (0, 1) or length < _LEGACY_MIN[magic] or stop > size:
            raise CorruptRecordError(f"an inner message of magic {magic}, length {length}")
        if _codecs.crc32(memoryview(b)[p + MAGIC_AT:stop]) != crc:
            raise CorruptRecordError("CRC32 mismatch in a message inside a compressed one")
        if attrs & CODEC_MASK:
            raise CorruptRecordError("a compressed message inside a compressed message")
        ts, key, value, _ = _legacy_fields(b, p + LEGACY_HEADER_SIZE, stop, magic)
        out.offsets.append(offset)
        out.timestamps.append(ts)
        out.keys.append(key)
        out.values.append(value)
        out.headers.append(())
        p = stop
    return out

"""The byte format of a batch (docs/FORMAT.md): its header and named header fields,
attribute bits, the checksum, framing, and the rule by which batches follow each
other. ``codec`` is the face of this module, ``_codec.encode`` and ``_codec.decode``.

All integers are little-endian.
"""

from __future__ import annotations

import sys
from struct import Struct
from typing import TYPE_CHECKING, Callable, Iterator, NamedTuple

from xxhash import xxh3_64, xxh3_64_intdigest

from ..errors import CorruptRecordError

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

# the format version, in every batch's magic byte: 2 is the XXH3 checksum (format 1,
# CRC-32, is refused with a message that says so; nobody has format-1 data to convert)
MAGIC = 2
OLD_MAGIC = 1

# base_offset q, batch_length I, magic B, checksum Q, attributes H,
# last_offset_delta I, record_count I, base_timestamp q, max_timestamp q (the fields
# of ``BatchHeader``, in order)
HEADER = Struct("<qIBQHIIqq")
HEADER_SIZE = HEADER.size                 # 47
BASE_OFFSET = Struct("<q")                # the first field alone (at 0)
LENGTH = Struct("<I")                     # batch_length alone (at 8)
# batch_length, magic, checksum, attributes (at 8): what framing a batch reads
FRAMING = Struct("<IBQH")
FRAMING_AT = BASE_OFFSET.size
LENGTH_END = 12                           # batch_length counts the bytes after this
CHECKSUM_FROM = 21                        # the checksum covers bytes [21, end of batch)
MIN_BATCH_LENGTH = HEADER_SIZE - LENGTH_END
# a one-record, keyless, headerless batch with a short value (``Log.append``'s hot
# path): the tail its checksum starts with (then the value), the prefix before the
# checksummed bytes (packed straight into the segment), and the whole header with
# the value's length (prefix + tail)
ONE_TAIL = Struct("<HIIqqH")
ONE_PREFIX = Struct("<qIBQ")
ONE_HEADER = Struct("<qIBQHIIqqH")
assert ONE_PREFIX.size == CHECKSUM_FROM
U32 = LENGTH                              # any little-endian uint32
I64 = Struct("<q")                        # also the delete horizon's size and type

# attribute bits
CODEC_MASK = 0x7
CODEC_NONE = 0
CODEC_LZ4 = 1
F_KEYS = 1 << 3
F_HEADERS = 1 << 4
F_TIMESTAMPS = 1 << 5
F_WIDE = 1 << 6
F_OFFSETS = 1 << 7
F_WIDE_TS = 1 << 8
F_NULL_VALUES = 1 << 9
F_HORIZON = 1 << 10
_KNOWN_ATTRS = (CODEC_MASK | F_KEYS | F_HEADERS | F_TIMESTAMPS | F_WIDE | F_OFFSETS
                | F_WIDE_TS | F_NULL_VALUES | F_HORIZON)

# a length of all ones stands for None (uint16 lengths, or uint32 with F_WIDE)
NULL_16 = 0xFFFF
NULL_32 = 0xFFFFFFFF
BIG_ENDIAN_HOST = sys.byteorder == "big"
# lz4 is tried on batches of at least this many records. One record alone (what
# Log.append writes) has too little repetition in it: lz4 made no single access-log
# line, JSON event or random value smaller, while two records of either text came
# out 21-23 % smaller (docs/FORMAT.md has the figures).
LZ4_MIN_RECORDS = 2
DEFAULT_MAX_UNCOMPRESSED = 1 << 30
NEVER = 1 << 63         # above every offset

# one decoded message: (offset, timestamp, key, value, headers), the 5-tuple a
# ``message_type`` is built from
MessageTuple = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]

# The batch checksum of bytes 21 .. end of a batch: XXH3-64, all 64 bits, so that the
# one definition every writer and checker calls is a C function (a Python function
# keeping 32 of the bits costs ~0.1 us per batch: docs/FORMAT.md)
CHECKSUM: Callable[[ReadableBuffer], int] = xxh3_64_intdigest


def checksum_two(head: bytes, body: ReadableBuffer) -> int:
    """``CHECKSUM(head + body)`` without joining them: a batch's body of a megabyte is
    not copied to be checked (the same XXH3-64, fed in two parts)."""
    h = xxh3_64(head)
    h.update(body)
    return h.intdigest()

# a header as ``HEADER`` unpacks it: the read path's loops unpack it into names at
# once (making a ``BatchHeader`` of it costs more than unpacking it: 0.3 us a batch)
RawHeader = tuple[int, int, int, int, int, int, int, int, int]


class BatchHeader(NamedTuple):
    """A batch's header, by name (docs/FORMAT.md): ``length`` is ``batch_length``,
    the bytes after it; ``attributes`` the codec and flag bits."""

    base_offset: int
    length: int
    magic: int
    checksum: int
    attributes: int
    last_offset_delta: int
    record_count: int
    base_timestamp: int
    max_timestamp: int

    @property
    def last_offset(self) -> int:
        """The offset of the batch's last record: base offset + last offset delta."""
        return self.base_offset + self.last_offset_delta

    @property
    def size(self) -> int:
        """The whole batch's size in bytes, header included (``batch_length`` + 12)."""
        return LENGTH_END + self.length


# a BatchHeader of HEADER's unpacked 9 fields (tuple's own constructor: _make checks the length)
_named = tuple.__new__


def read_header(data: bytes | memoryview, pos: int, end: int | None = None
                ) -> BatchHeader | None:
    """The header of the batch at ``pos`` if the whole batch lies before ``end``
    (no ``end``: the header alone, from a buffer that may hold only it).

    Returns None when the bytes stop short (a partial batch, or the end). Raises
    CorruptRecordError when the framing is impossible (bad magic, bad length,
    zero-filled space). The checksum is not checked here; see ``checksum_ok``.
    """
    raw = read_raw_header(data, pos, end)
    return None if raw is None else _named(BatchHeader, raw)


def read_raw_header(data: bytes | memoryview, pos: int, end: int | None = None
                    ) -> RawHeader | None:
    """``read_header``, the header as ``HEADER`` unpacks it: for the loop of every
    scan (``_storage.scan.walk``), whose callers unpack it into names at once."""
    if (end is not None and pos + HEADER_SIZE > end) or pos + HEADER_SIZE > len(data):
        if old_magic_at(data, pos, len(data) if end is None else end):
            raise framing_error(OLD_MAGIC, 0, 0, pos, None)
        return None
    raw = HEADER.unpack_from(data, pos)
    base, length, magic, _, attrs, _, _, _, _ = raw
    if magic != MAGIC or length < MIN_BATCH_LENGTH or base < 0 or attrs & ~_KNOWN_ATTRS:
        raise framing_error(magic, length, base, pos, None)
    if end is not None and pos + LENGTH_END + length > end:
        return None
    return raw


def as_header(raw: RawHeader) -> BatchHeader:
    """A header as ``HEADER`` unpacks it, by its fields."""
    return _named(BatchHeader, raw)


def sane_header(data: bytes | memoryview, pos: int = 0) -> BatchHeader | None:
    """The header at ``pos`` if one of this format's could start there (its framing;
    neither the rest of the batch nor its checksum), else None. Never raises."""
    try:
        return read_header(data, pos)
    except CorruptRecordError:
        return None


def framed_header(data: bytes | memoryview, pos: int = 0) -> BatchHeader | None:
    """The header at ``pos`` if a whole header is there whose magic and length frame a
    batch, else None. Never raises.

    Looser than ``read_header`` on purpose: neither the attribute bits nor the base
    offset are judged. Where batches are only looked for (past damage, where an index
    entry points), a batch a newer seglog wrote, with an attribute bit this one does
    not know, is still a batch: its checksum says whether it is whole.
    """
    if pos + HEADER_SIZE > len(data):
        return None
    raw = HEADER.unpack_from(data, pos)
    return _named(BatchHeader, raw) if raw[2] == MAGIC and raw[1] >= MIN_BATCH_LENGTH else None


def old_magic_at(data: bytes | memoryview, pos: int, end: int) -> bool:
    """A format-1 batch can be shorter than a format-2 header: its magic byte says so."""
    return pos + LENGTH_END < min(end, len(data)) and data[pos + LENGTH_END] == OLD_MAGIC


def framing_error(magic: int, length: int, base: int, pos: int,
                  offset: int | None) -> CorruptRecordError:
    """The error for a batch header that cannot be one of this format's."""
    if magic == OLD_MAGIC:
        return CorruptRecordError(
            f"a batch of format {OLD_MAGIC} (magic byte {OLD_MAGIC}, CRC-32 checksums): this "
            f"seglog reads format {MAGIC} only, and converts no older data", position=pos,
            offset=offset)
    return CorruptRecordError(
        f"bad batch framing (magic {magic}, length {length}, base offset {base})",
        position=pos, offset=offset)


def checksum_ok(data: bytes | memoryview, pos: int, hdr: RawHeader) -> bool:
    """True when the batch at ``pos`` (header ``hdr``: a ``BatchHeader``, or as
    ``HEADER`` unpacks it) matches its checksum."""
    _, length, _, checksum = hdr[:4]
    with memoryview(data) as mv:
        return CHECKSUM(mv[pos + CHECKSUM_FROM: pos + LENGTH_END + length]) == checksum


def continues(expect: int, base: int, attrs: int) -> bool:
    """True if a batch with base offset ``base`` and attributes ``attrs`` may follow
    batches that end before offset ``expect``: it starts there, or (a compacted batch,
    ``F_OFFSETS``, whose predecessors' records were removed) above it.

    The base offset lies outside the checksum: this is what checks it."""
    return base == expect or (base > expect and attrs & F_OFFSETS != 0)


def batches_in(data: bytes | memoryview, start: int, end: int
               ) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole batch in ``data[start:end]``, framing checked.

    Stops quietly at a batch that does not fit before ``end`` (the caller knows
    whether that is the end of a chunk or damage); raises ``CorruptRecordError``
    (``position`` in ``data``) where the framing is impossible. Checksums are not checked.
    """
    for pos, raw in raw_batches_in(data, start, end):
        yield pos, _named(BatchHeader, raw)


def raw_batches_in(data: bytes | memoryview, start: int, end: int
                   ) -> Iterator[tuple[int, RawHeader]]:
    """``batches_in`` with each header as ``HEADER`` unpacks it (``read_raw_header``):
    for loops that unpack it into names at once."""
    pos = start
    end = min(end, len(data))    # read_header's end may lie past a header-only buffer
    while True:
        raw = read_raw_header(data, pos, end)
        if raw is None:
            return
        yield pos, raw
        pos += LENGTH_END + raw[1]      # batch_length


def whole_batches(data: bytes | memoryview, start: int, end: int) -> tuple[int, int]:
    """Where the whole batches from ``start`` stop before ``end``, and where the last
    of them starts (-1: none): ``raw_batches_in``'s walk and checks with no header
    made (a read's walk to its last batch). Raises ``CorruptRecordError`` where the
    framing is impossible."""
    # read_raw_header's checks inlined: through raw_batches_in's generator a Log.read
    # cost 15 % more instructions (callgrind); tests/codec/test_unit_codec.py's
    # test_whole_batches_walks_as_batches_in holds the two walks to the same answers
    pos, last = start, -1
    end = min(end, len(data))
    unpack, length_end, known = HEADER.unpack_from, LENGTH_END, _KNOWN_ATTRS
    while pos + HEADER_SIZE <= end:
        base, length, magic, _, attrs, _, _, _, _ = unpack(data, pos)
        if magic != MAGIC or length < MIN_BATCH_LENGTH or base < 0 or attrs & ~known:
            raise framing_error(magic, length, base, pos, None)
        if pos + length_end + length > end:
            return pos, last
        last = pos
        pos += length_end + length
    if pos < end and old_magic_at(data, pos, end):
        raise framing_error(OLD_MAGIC, 0, 0, pos, None)
    return pos, last


def delete_horizon(data: bytes | memoryview, pos: int, hdr: RawHeader) -> int | None:
    """The delete horizon (ms) stored in the batch at ``pos`` by compaction, or None.
    Raises CorruptRecordError if the batch is too short to hold one."""
    base, length, _, _, attrs = hdr[:5]
    if not attrs & F_HORIZON:
        return None
    if HEADER_SIZE + I64.size > LENGTH_END + length:
        raise CorruptRecordError("undecodable batch: batch too short for its attributes",
                                 position=pos, offset=base)
    return int(I64.unpack_from(data, pos + HEADER_SIZE)[0])

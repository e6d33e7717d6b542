"""The checksums and compression codecs of Kafka's record batches: CRC32C (magic 2),
CRC32 (magic 0 and 1), and decompression of gzip, snappy, lz4 and zstd payloads.

Pure functions over bytes. CRC32C, snappy and zstd come from the ``kafka`` extra
(``google-crc32c``, ``cramjam``); without it they raise ``ImportError`` saying so.
Every failure of a codec on bad input is a ``CorruptRecordError`` at position 0 of the
payload (the caller places it in its file).
"""

from __future__ import annotations

import zlib
from typing import Any, Callable

import lz4.frame
from xxhash import xxh32_intdigest

from ..errors import CorruptRecordError

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = range(5)
CODEC_NAMES = {CODEC_NONE: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy",
               CODEC_LZ4: "lz4", CODEC_ZSTD: "zstd"}
# the largest payload a batch may decompress to (as seglog's own reads bound theirs): a
# damaged or hostile batch cannot make a read allocate without bound
MAX_UNCOMPRESSED = 1 << 30
_EXTRA = "reading Kafka's files needs the kafka extra: pip install 'seglog[kafka]'"

crc32 = zlib.crc32


def _load_crc32c() -> Callable[[Any], int]:
    try:
        import google_crc32c
    except ImportError as e:
        raise ImportError(f"{_EXTRA} ({e})") from e
    if google_crc32c.implementation != "c":
        raise ImportError(f"{_EXTRA}: google-crc32c has no C implementation on this "
                          f"machine (a pure-Python CRC32C is ~1000x slower)")
    fn: Callable[[Any], int] = google_crc32c.value
    return fn


_crc32c: Callable[[Any], int] | None = None


def crc32c_function() -> Callable[[Any], int]:
    """The CRC32C function (``ImportError`` without the ``kafka`` extra); looked up once."""
    global _crc32c
    if _crc32c is None:
        _crc32c = _load_crc32c()
    return _crc32c


def _cramjam() -> Any:
    try:
        import cramjam
    except ImportError as e:
        raise ImportError(f"{_EXTRA} ({e})") from e
    return cramjam


_XERIAL = b"\x82SNAPPY\x00"


def _snappy(data: bytes, limit: int) -> bytes:
    """Kafka's Java client frames snappy the way snappy-java's stream does (a magic
    header, then blocks each prefixed by its big-endian length); others write one raw
    block. Both are read."""
    snappy = _cramjam().snappy
    if not data.startswith(_XERIAL):
        return bytes(snappy.decompress_raw(data))
    out = []
    pos, end, total = 16, len(data), 0
    while pos < end:
        if pos + 4 > end:
            raise CorruptRecordError("a snappy block's length is cut short")
        n = int.from_bytes(data[pos:pos + 4], "big")
        if pos + 4 + n > end:
            raise CorruptRecordError("a snappy block is cut short")
        block = bytes(snappy.decompress_raw(data[pos + 4:pos + 4 + n]))
        total += len(block)
        if total > limit:
            raise _too_large(limit)
        out.append(block)
        pos += 4 + n
    return b"".join(out)


def _lz4(data: bytes, limit: int, broken_header: bool) -> bytes:
    if broken_header:
        data = fixed_lz4_header(data)
    d = lz4.frame.LZ4FrameDecompressor()
    out = d.decompress(data, max_length=limit + 1)
    if len(out) > limit:
        raise _too_large(limit)
    return bytes(out)


def fixed_lz4_header(data: bytes) -> bytes:
    """The lz4 frame with its header checksum as the frame format defines it. Kafka
    before 0.10 (messages of magic 0) computed that byte over the frame's magic number
    too; its own reader expects the broken byte there, as this reads it."""
    if len(data) < 7:
        return data
    flags = data[4]
    hc = 6 + (8 if flags & 0x08 else 0)
    if len(data) <= hc:
        return data
    right = (xxh32_intdigest(data[4:hc]) >> 8) & 0xFF
    return data[:hc] + bytes((right,)) + data[hc + 1:]


def _gzip(data: bytes, limit: int) -> bytes:
    d = zlib.decompressobj(wbits=47)              # a gzip or zlib header, found by zlib
    out = d.decompress(data, limit + 1)
    if len(out) > limit:
        raise _too_large(limit)
    return out


def _zstd(data: bytes, limit: int) -> bytes:
    out = bytes(_cramjam().zstd.decompress(data))
    if len(out) > limit:
        raise _too_large(limit)
    return out


def _too_large(limit: int) -> CorruptRecordError:
    return CorruptRecordError(f"a compressed batch decompresses past {limit} bytes")


def decompress(codec: int, data: bytes, *, legacy_lz4: bool = False,
               limit: int = MAX_UNCOMPRESSED) -> bytes:
    """``data`` decompressed with Kafka's codec number ``codec`` (1-4).

    ``CorruptRecordError`` for an unknown codec or data the codec refuses;
    ``ImportError`` when snappy or zstd is needed and the ``kafka`` extra is missing.
    """
    try:
        if codec == CODEC_GZIP:
            return _gzip(data, limit)
        if codec == CODEC_SNAPPY:
            return _snappy(data, limit)
        if codec == CODEC_LZ4:
            return _lz4(data, limit, legacy_lz4)
        if codec == CODEC_ZSTD:
            return _zstd(data, limit)
    except (CorruptRecordError, ImportError):
        raise
    except Exception as e:        # each codec library has its own error types
        raise CorruptRecordError(f"{CODEC_NAMES[codec]} data does not decompress: "
                                 f"{type(e).__name__}: {e}") from None
    raise CorruptRecordError(f"unknown compression codec {codec}")

"""The columnar read past 2 GiB: Arrow's 32-bit offsets. ``binary_view`` views
carry a 32-bit position in their buffer and ``binary`` arrays 32-bit offsets, so
values that start past 2 GiB in the buffer read, or that add up to more than
2 GiB in one set, must still come back whole, as ``iter()`` gives them, in valid
arrays (``large_binary`` where the values pass 2 GiB), never as an Arrow error or
as views pointing outside their buffer (a read there is a segfault).

The large sets are made of lz4 batches of zeros built by hand (a few KB on disk
that decompress to a GiB), so that the test costs decompression only."""

from __future__ import annotations

import mmap
import struct

import pytest

from seglog import MessageSet, codec

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")
from seglog._arrow_batches import arrow_columns  # noqa: E402

GiB = 1 << 30
_TAIL = b"tail!"        # an lz4 block ends with at least five literal bytes


def _zeros_lz4_batch(base: int, zeros: int) -> bytes:
    """A two-record lz4 batch (F_WIDE lengths): a value of ``zeros`` zero bytes, then
    ``_TAIL``. The lz4 block is one literal run and one long match, written by hand:
    compressing a GiB would cost seconds."""
    lens = struct.pack("<II", zeros, len(_TAIL))
    literal = lens + bytes(64)
    rest = zeros - 64 - 4 - 15          # the match's length past its token and 15
    block = (bytes([0xFF, len(literal) - 15]) + literal + struct.pack("<H", 64)
             + b"\xff" * (rest // 255) + bytes([rest % 255])
             + bytes([len(_TAIL) << 4]) + _TAIL)
    usize = len(lens) + zeros + len(_TAIL)
    checked = struct.pack("<HIIqq", codec.CODEC_LZ4 | codec.F_WIDE, 1, 2, 7, 7) \
        + struct.pack("<I", usize) + block
    # batch_length counts the bytes after itself: magic and checksum, then the rest
    head = struct.pack("<qIBQ", base, codec.CHECKSUM_FROM - codec.LENGTH_END + len(checked),
                       codec.MAGIC, codec.CHECKSUM(checked))
    return head + checked


def _lengths(values) -> list[int]:
    """The value lengths of a value column (no nulls), without making a GiB of bytes."""
    if values.type == pa.binary_view():
        # a view's first 4 bytes are the value's length
        import numpy as np
        views = np.frombuffer(values.buffers()[1], dtype="<i4").reshape(-1, 4)
        return views[values.offset:values.offset + len(values), 0].tolist()
    return pa.compute.binary_length(values).to_pylist()


def _enough_memory() -> bool:
    """The sets past 2 GiB need about 8 GiB of memory at their peak."""
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemAvailable"].split()[0]) > 10 << 20        # kB
    except (OSError, KeyError, ValueError):
        return False


big = pytest.mark.skipif(not _enough_memory(), reason="needs about 8 GiB of free memory")


def test_the_hand_made_batch_decodes_as_iteration_does():
    batch = _zeros_lz4_batch(3, 1000)
    assert [(m.offset, m.value) for m in MessageSet(batch)] == [(3, bytes(1000)), (4, _TAIL)]


@pytest.mark.parametrize("views", [False, True])
def test_values_starting_past_2_gib_in_the_buffer_read_whole(views):
    # a pyarrow.Buffer (as read_arrow's reads are) whose batches start past 2 GiB:
    # a view's position in it does not fit the view's 32 bits
    batch = codec.encode_batch(5, [b"a" * 20, b"short", b"", b"b" * 30], 9)
    at = 2 * GiB + 64
    mm = mmap.mmap(-1, at + len(batch))      # zero pages, none written but the batch
    mm[at:at + len(batch)] = batch
    cols, done = arrow_columns(pa.py_buffer(mm), at, len(mm), views=views)
    for a in cols.arrow_arrays():
        a.validate(full=True)                # before any value is read
    assert cols.values.to_pylist() == [b"a" * 20, b"short", b"", b"b" * 30]
    assert cols.offsets.to_pylist() == [5, 6, 7, 8]
    assert tuple(done) == (len(mm), 9)


@big
def test_a_set_of_more_than_2_gib_of_values_in_runs_split_by_plain_batches():
    # lz4 batches are read by the general walk, the plain batch between them by the
    # numpy road: two pieces of binary columns whose values add up past 2 GiB
    # (binary_view pieces join whatever their size; one run takes seconds)
    views = False
    n = GiB + (GiB >> 4)
    data = b"".join((_zeros_lz4_batch(0, n), codec.encode_batch(2, [b"plain"], 7),
                     _zeros_lz4_batch(3, n)))
    rb = MessageSet(data, max_uncompressed=2 * GiB).to_arrow(views=views)
    rb.validate()
    assert rb.column("offset").to_pylist() == [0, 1, 2, 3, 4]
    assert _lengths(rb.column("value")) == [n, 5, 5, n, 5]
    assert rb.column("value")[2].as_py() == b"plain"
    assert rb.column("value")[4].as_py() == _TAIL


@big
def test_a_run_of_batches_with_more_than_2_gib_of_values_asked_as_views():
    # adjacent lz4 batches: one piece of columns past 2 GiB (large_binary), which
    # views=True must not squeeze into a binary_view of one buffer (without views
    # it is one large_binary piece: that worked)
    views = True
    n = GiB + (GiB >> 4)
    data = _zeros_lz4_batch(0, n) + _zeros_lz4_batch(2, n)
    rb = MessageSet(data, max_uncompressed=2 * GiB).to_arrow(views=views)
    rb.validate()
    assert rb.column("offset").to_pylist() == [0, 1, 2, 3]
    assert _lengths(rb.column("value")) == [n, 5, n, 5]
    assert rb.schema.field("value").type == pa.large_binary()

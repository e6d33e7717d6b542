"""The fast path of magic 2 decoding: a batch whose records all have one shape.

Kafka stores each record as varints, so records cannot be found without walking them.
But a producer's batch is usually uniform: every record of the same length, no
headers, one-byte timestamp and offset deltas, keys all null or all of one length.
``runs`` reads the first record's layout, then checks with strided slices (one C-level
compare per structural byte, over all records at once) that every record of a run has
it; the fields are then strided slices too. A batch that is not uniform gives None and
goes through ``_wire.decode``. Pure functions over bytes.
"""

from __future__ import annotations

# Any: a column cutter giving a run or a tuple starting with one
from typing import Any, Callable, NamedTuple

# zigzag decoding of one varint byte (values 0..127)
ZIGZAG = tuple((v >> 1) ^ -(v & 1) for v in range(128))
# the offset deltas 0..8191 as Kafka writes them: one byte (zigzag) below 64, two from 64
_OD1 = bytes(2 * d for d in range(64))
_OD2_LO = bytes(((2 * d) & 0x7F) | 0x80 for d in range(64, 8192))
_OD2_HI = bytes((2 * d) >> 7 for d in range(64, 8192))


class Run(NamedTuple):
    """``records`` records of one layout from ``start`` in the buffer, ``stride`` bytes
    each, the first at offset delta ``first_delta``. Within a record: the timestamp
    delta's one byte at ``ts_at``; the key (``key_len`` bytes, -1: null) at ``key_at``;
    the value likewise."""

    start: int
    records: int
    stride: int
    first_delta: int
    ts_at: int
    key_at: int
    key_len: int
    value_at: int
    value_len: int

    @property
    def stop(self) -> int:
        return self.start + self.records * self.stride


def _small_varint(b: bytes, p: int) -> tuple[int, int]:
    """(zigzag value, bytes) of a varint of at most 3 bytes at ``p``; (0, 0) if longer."""
    v = b[p]
    if v < 0x80:
        return (v >> 1) ^ -(v & 1), 1
    w = b[p + 1]
    if w < 0x80:
        r = (v & 0x7F) | (w << 7)
        return (r >> 1) ^ -(r & 1), 2
    x = b[p + 2]
    if x < 0x80:
        r = (v & 0x7F) | ((w & 0x7F) << 7) | (x << 14)
        return (r >> 1) ^ -(r & 1), 3
    return 0, 0


def _candidate(b: bytes, p: int, end: int, delta: int, left: int
               ) -> tuple[Run, list[int], int] | None:
    """The run the first record at ``p`` (offset delta ``delta``) would start if the
    next records had its layout, unchecked: (it, the structural byte positions in a
    record, the offset delta's size); None when the first record is not of the fast
    shape."""
    try:
        length, lb = _small_varint(b, p)
        if not lb or length <= 0:
            return None
        stride = lb + length
        q = p + lb + 1                               # past the attributes byte
        if b[q] >= 0x80:
            return None                              # a timestamp delta of several bytes
        ts_at = q - p
        q += 1
        if delta < 64:
            if b[q] != 2 * delta:
                return None
            od_size, cap = 1, 64
        elif delta < 8192:
            if b[q] != _OD2_LO[delta - 64] or b[q + 1] != _OD2_HI[delta - 64]:
                return None
            od_size, cap = 2, 8192
        else:
            return None
        q += od_size
        kl, kb = _small_varint(b, q)
        if not kb:
            return None
        structural = [*range(lb), *range(q - p, q - p + kb)]
        q += kb
        key_at = q - p
        if kl > 0:
            q += kl
        vl, vb = _small_varint(b, q)
        if not vb:
            return None
        structural += range(q - p, q - p + vb)
        q += vb
        value_at = q - p
        if vl > 0:
            q += vl
        if q + 1 != p + stride or b[q] != 0:         # no headers, and nothing else
            return None
        structural.append(stride - 1)
    except IndexError:
        return None
    m = min(left, cap - delta, (end - p) // stride)
    if m <= 0:
        return None
    return Run(p, m, stride, delta, ts_at, key_at, kl, value_at, vl), structural, od_size


def _run_at(b: bytes, p: int, end: int, delta: int, left: int) -> Run | None:
    """The longest uniform run of at most ``left`` records from ``p`` whose first record
    has offset delta ``delta``, checked; None when there is none."""
    c = _candidate(b, p, end, delta, left)
    if c is None:
        return None
    run, structural, od_size = c
    m, stride, ts_at = run.records, run.stride, run.ts_at
    stop = p + m * stride
    for rel in structural:
        if b[p + rel:stop:stride] != bytes((b[p + rel],)) * m:
            return None
    if not b[p + ts_at:stop:stride].isascii():
        return None
    od_at = p + ts_at + 1
    delta = run.first_delta
    if od_size == 1:
        if b[od_at:stop:stride] != _OD1[delta:delta + m]:
            return None
    elif (b[od_at:stop:stride] != _OD2_LO[delta - 64:delta - 64 + m]
          or b[od_at + 1:stop:stride] != _OD2_HI[delta - 64:delta - 64 + m]):
        return None
    return run


def _chain(b: bytes, start: int, end: int, count: int,
           at: Callable[[bytes, int, int, int, int], Any]) -> list[Any] | None:
    """What ``at`` gives for each run in turn, covering all ``count`` records in
    ``b[start:end]`` exactly, or None. ``at`` returns a Run or a tuple starting with one."""
    out: list[Any] = []
    p, done = start, 0
    while done < count:
        got = at(b, p, end, done, count - done)
        if got is None:
            return None
        out.append(got)
        run = got if isinstance(got, Run) else got[0]
        done += run.records
        p = run.stop
    return out if p == end else None


def runs(b: bytes, start: int, end: int, count: int) -> list[Run] | None:
    """Uniform runs covering all ``count`` records in ``b[start:end]`` exactly (offset
    deltas 0, 1, 2...: no compaction holes), or None. Bad bytes give None, never an
    error: the general decoder then judges them."""
    return _chain(b, start, end, count, _run_at)


def candidates(b: bytes, start: int, end: int, count: int
               ) -> list[tuple[Run, list[int], int]] | None:
    """``runs`` without the checks: what each run's first record says (for callers
    that check all runs of many batches at once, as the Arrow path does with numpy)."""
    return _chain(b, start, end, count, _candidate)

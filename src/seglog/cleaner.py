"""Log compaction: keep the latest record per key, as Kafka's log cleaner does.

A pass:

1. Picks the cleanable segments: sealed ones (never the active segment) whose
   newest record is at least ``min_compaction_lag_ms`` old. The part after the
   cleaner checkpoint is *dirty*; the pass runs only if the dirty share of the
   cleanable bytes reaches ``min_cleanable_dirty_ratio``.
2. Builds an ``OffsetMap`` (16-byte xxh3-128 of the key -> latest offset) over the
   dirty segments, oldest first, as far as ``cleaner_buffer_bytes`` allows; what
   does not fit waits for the next pass.
3. Rewrites every cleanable segment up to the end of the mapped range, merging
   neighbours while their output (not their input, as Kafka's) fits in
   ``segment_bytes``: a record is kept if it has a key and no
   later record of that key is in the map; tombstones (value None) are kept until
   ``delete_retention_ms`` after the pass that first cleaned them (the horizon is
   stored in the batch). Offsets never change; holes are left where records went.
4. Swaps each rewritten group in atomically (rule R4): the new files are written as
   ``.seglog-cleaned.<name>`` and fsynced; a manifest ``.seglog-swap.<base>`` naming the replaced range
   is written (temp, fsync, rename, fsync dir) -- the commit point; then the new
   files are renamed over the first old segment, the others deleted, and the
   manifest removed. Recovery rolls a swap with a manifest forward and deletes
   cleaned files without one.
"""

from __future__ import annotations

import os
import time
from array import array
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Iterator, Sequence

import xxhash

from ._codec import decode as _decode, encode as _encode, format as _format
from ._storage import scan as _scan
from ._runtime.files import (CLEANED, SEGMENT_SUFFIXES, SWAP, fsync_dir, fsync_file, is_leftover,
                             list_segments, read_checkpoint, remove, segment_name, segment_path,
                             write_checkpoint)
from .config import LogConfig
from .errors import CorruptRecordError
from .index import MAX_RELATIVE_OFFSET, OffsetIndex, TimeIndex
from .segment import Segment

# what the caller holds around each use of a segment's files (a read in flight)
_Reading = Callable[[], ContextManager[object]]

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
# the earliest delete horizon of a tombstone kept in cleaned segments: a pass is due
# then even if nothing new is dirty
HORIZON_CHECKPOINT = "cleaner-horizon-checkpoint"
_M64 = (1 << 64) - 1
# an output's bytes wait in memory up to this much, or a quarter of a segment when
# that is less: a log of small segments drains its outputs to their files (and
# merges drained ones) as a log of large segments does, not only in memory
_DRAIN_BYTES = 1 << 20


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def _prime_at_least(n: int) -> int:
    while not _is_prime(n):
        n += 1
    return n


class OffsetMap:
    """Key hash -> latest offset, in 24 bytes a slot (Kafka's SkimpyOffsetMap).

    Open addressing with double hashing over three flat arrays (low and high 64 bits
    of the key's xxh3-128 digest, offset). Grows by 1.2x at 90 % load, up to
    ``max_bytes``, so it holds 24 / 0.75 = 32 bytes a key at most and 26.7 at best.
    Two keys with the same 128-bit digest would be confused; the odds are about
    n² / 2**129.
    """

    SLOT = 24
    LOAD = 0.9
    GROWTH = 1.2

    def __init__(self, max_bytes: int, initial_slots: int = 1021) -> None:
        self.max_slots = max(7, max_bytes // self.SLOT)
        self.size = 0
        self._alloc(_prime_at_least(min(initial_slots, self.max_slots)))

    def _alloc(self, n: int) -> None:
        self._n = n
        self._lo = array("Q", bytes(8 * n))
        self._hi = array("Q", bytes(8 * n))
        self._off = array("q", [-1]) * n
        self._limit = int(n * self.LOAD)

    @property
    def memory_bytes(self) -> int:
        return self._n * self.SLOT

    @property
    def full(self) -> bool:
        return self.size >= self._limit and self._n >= self.max_slots

    def _slot(self, lo: int, hi: int) -> int:
        n = self._n
        i = lo % n
        step = hi % (n - 1) + 1
        lo_a, hi_a, off = self._lo, self._hi, self._off
        while off[i] >= 0 and (lo_a[i] != lo or hi_a[i] != hi):
            i = (i + step) % n
        return i

    def put(self, key: bytes, offset: int) -> bool:
        """Record ``offset`` as the latest for ``key``; False if the map is full."""
        d = xxhash.xxh3_128_intdigest(key)
        lo, hi = d & _M64, d >> 64
        i = self._slot(lo, hi)
        if self._off[i] >= 0:
            if offset > self._off[i]:
                self._off[i] = offset
            return True
        if self.size >= self._limit:
            if not self._grow():
                return False
            i = self._slot(lo, hi)
        self._lo[i], self._hi[i], self._off[i] = lo, hi, offset
        self.size += 1
        return True

    def get(self, key: bytes) -> int:
        """The latest offset recorded for ``key``, -1 if none."""
        d = xxhash.xxh3_128_intdigest(key)
        return self._off[self._slot(d & _M64, d >> 64)]

    def _grow(self) -> bool:
        if self._n >= self.max_slots:
            return False
        old = (self._lo, self._hi, self._off)
        self._alloc(_prime_at_least(min(self.max_slots, max(self._n + 1, int(self._n * self.GROWTH)))))
        lo_a, hi_a, off_a = self._lo, self._hi, self._off
        for lo, hi, o in zip(*old):
            if o >= 0:
                i = self._slot(lo, hi)
                lo_a[i], hi_a[i], off_a[i] = lo, hi, o
        return True


@dataclass
class CompactionStats:
    """What a compaction pass did (``skipped`` says why it did nothing)."""

    skipped: str | None = None
    first_dirty_offset: int = 0
    dirty_end_offset: int = 0
    dirty_ratio: float = 0.0
    segments_before: int = 0
    segments_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    records_read: int = 0
    records_kept: int = 0
    tombstones_dropped: int = 0
    map_entries: int = 0
    map_bytes: int = 0
    next_horizon: int | None = None
    seconds: float = 0.0
    replaced: list[tuple[int, int]] = field(default_factory=list)   # (base, end) ranges


def _batches(seg: Segment) -> Iterator[tuple[bytes, int, _format.BatchHeader]]:
    """(buffer, position in it, header) of each batch, read in large chunks, checked."""
    try:
        for buf, p, _, hdr in _scan.walk(seg.fileno(), 0, seg.size, check=True):
            yield buf, p, _format.as_header(hdr)
    except CorruptRecordError as e:
        raise CorruptRecordError(f"{e.message} during compaction", seg.path, e.position,
                                 e.offset) from None


def build_map(segs: list[Segment], first_dirty: int, omap: OffsetMap,
              reading: _Reading = nullcontext) -> tuple[int, int]:
    """Map the keys of ``segs`` from ``first_dirty`` on; return (dirty end, records read),
    each segment read inside ``reading()``.

    Stops at the start of the first segment that does not fit in the map: only
    whole segments count as mapped (the map may hold some of that segment's keys,
    which is harmless: they are newer than everything the pass rewrites).
    """
    end = first_dirty
    read = 0
    for seg in segs:
        with reading():
            for buf, p, hdr in _batches(seg):
                if hdr.last_offset < first_dirty:
                    continue
                if not hdr.attributes & _format.F_KEYS:
                    read += hdr.record_count
                    continue
                for m in _decode.decode_batch(buf, p, hdr):
                    read += 1
                    if m[0] >= first_dirty and m[2] is not None and not omap.put(m[2], m[0]):
                        return end, read
        end = seg.next_offset if seg.next_offset is not None else end
    return end, read


class _Writer:
    """Writes a cleaned segment file and its index entries.

    The file is made at the first drain: an output that stays small lives in
    memory until it is finished, or taken in by the writer before it (``absorb``).
    """

    def __init__(self, directory: str, base: int, cfg: LogConfig) -> None:
        self.base = base
        interval = cfg.index_interval_bytes
        self.drain_at = min(_DRAIN_BYTES, max(1, cfg.segment_bytes // 4))
        stem = os.path.join(directory, segment_name(base))
        self.path = _cleaned(stem + ".log")
        self.index_path = _cleaned(stem + ".index")
        self.timeindex_path = _cleaned(stem + ".timeindex")
        self.fd = -1
        self.pos = 0
        self.drained = 0                 # bytes in the file, the rest is pending
        self.pending: list[bytes] = []
        # per pending batch: base offset, largest timestamp, next offset
        self.pending_meta: list[tuple[int, int, int]] = []
        self.pending_size = 0
        self.covered = base              # offsets below this are in batches written
        self.input_max_ts = -1           # of every input batch, dropped ones too
        self.res = _scan.ScanResult(end=0, next_offset=base, max_ts_offset=base,
                                    interval=interval, next_entry=interval)

    def add(self, data: bytes, base_offset: int, max_ts: int, next_offset: int) -> None:
        self.res.add(self.pos, base_offset, max_ts)
        self.pending.append(data)
        self.pending_meta.append((base_offset, max_ts, next_offset))
        self.pending_size += len(data)
        self.pos += len(data)
        self.covered = next_offset
        if self.pending_size >= self.drain_at:
            self._drain()

    def _drain(self) -> None:
        if self.fd < 0:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        view = memoryview(b"".join(self.pending))
        while view:
            view = view[os.write(self.fd, view):]
        self.drained = self.pos
        self.pending.clear()
        self.pending_meta.clear()
        self.pending_size = 0

    def absorb(self, other: "_Writer") -> None:
        """Append ``other``'s batches (the output of the segments after this one's)
        and drop its files; the index entries are made as one writer makes them."""
        if other.fd >= 0:
            for buf, p, _, hdr in _scan.walk(other.fd, 0, other.drained):
                base, length, _, _, _, last_delta, _, _, max_ts = hdr
                size = _format.LENGTH_END + length
                self.add(buf[p:p + size], base, max_ts, base + last_delta + 1)
        for data, (b, ts, nxt) in zip(other.pending, other.pending_meta):
            self.add(data, b, ts, nxt)
        if other.pos:
            self.covered = other.covered
        self.input_max_ts = max(self.input_max_ts, other.input_max_ts)
        other.abort()

    def cover(self, end: int) -> None:
        """End the output at offset ``end - 1``: when compaction dropped the last
        batches (or every record), an empty batch covers the offsets that are gone,
        so a reader can tell offsets compaction removed from a segment cut short."""
        if self.covered < end:
            # no records; the largest timestamp of the input (so time retention
            # judges the segment as before)
            ts = max(self.input_max_ts, 0)
            self.add(_empty_batch(self.covered, end, ts), self.covered, ts, end)

    def finish(self, max_index_bytes: int) -> None:
        self._drain()
        fsync_file(self.fd)
        os.close(self.fd)
        self.fd = -1
        _scan.write_index_files(self.base, self.res, max_index_bytes, True,
                                   self.index_path, self.timeindex_path)

    def abort(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1
        for p in (self.path, self.index_path, self.timeindex_path):
            remove(p)


def _empty_batch(covered: int, end: int, ts: int) -> bytes:
    """A batch of no records holding offsets ``covered`` to ``end - 1``."""
    return _encode.encode_batch(covered, [], ts, offset_deltas=[],
                              last_offset_delta=end - 1 - covered)


# an empty batch's size: the most ``cover`` adds
_EMPTY_BATCH_BYTES = len(_empty_batch(0, 1, 0))


def _clean_segment(directory: str, cfg: LogConfig, seg: Segment, omap: OffsetMap,
                   now: int, stats: CompactionStats, reading: _Reading = nullcontext
                   ) -> _Writer:
    """Write the kept records of ``seg`` (a segment's output on its own; the caller
    merges outputs and ends each merged one with ``cover``), read inside ``reading()``."""
    w = _Writer(directory, seg.base_offset, cfg)
    try:
        with reading():
            for buf, p, hdr in _batches(seg):
                w.input_max_ts = max(w.input_max_ts, hdr.max_timestamp)
                horizon = _format.delete_horizon(buf, p, hdr)
                keep: list[_format.MessageTuple] = []
                for m in _decode.decode_batch(buf, p, hdr):
                    stats.records_read += 1
                    key = m[2]
                    if key is None:
                        continue
                    latest = omap.get(key)
                    if latest > m[0]:
                        continue
                    if m[3] is None and horizon is not None and now > horizon:
                        stats.tombstones_dropped += 1
                        continue
                    keep.append(m)
                if not keep:
                    continue
                stats.records_kept += len(keep)
                if any(m[3] is None for m in keep):
                    if horizon is None:
                        horizon = now + cfg.delete_retention_ms
                    if stats.next_horizon is None or horizon < stats.next_horizon:
                        stats.next_horizon = horizon
                base = hdr.base_offset
                data = _encode.encode_batch(
                    base, [m[3] for m in keep], [m[1] for m in keep], [m[2] for m in keep],
                    [[(k.encode(), v) for k, v in m[4]] for m in keep]
                    if any(m[4] for m in keep) else None,
                    hdr.attributes & _format.CODEC_MASK,
                    offset_deltas=[m[0] - base for m in keep],
                    last_offset_delta=hdr.last_offset_delta,
                    delete_horizon=horizon)
                w.add(data, base, max(m[1] for m in keep), hdr.last_offset + 1)
    except BaseException:
        w.abort()
        raise
    return w


def _takes(w: _Writer, nxt: _Writer, end: int, cfg: LogConfig) -> bool:
    """Whether the output ``w`` may take in ``nxt``, the next segment's output,
    ending at offset ``end``: the merged output, with the empty batch that may end
    it, fits in ``segment_bytes`` (an output of nothing takes in whatever follows:
    the result is no larger than that output alone), its offsets fit the index's
    32-bit relative offsets, and its entries the indexes (Kafka's limits on a group).

    Entries: ``nxt``'s batches, moved behind ``w``'s, may take one entry more than
    on their own (the next entry is due up to an interval earlier), the empty batch
    one more; the time index has at most one entry per offset-index entry, and the
    segment's largest timestamp last."""
    covered = nxt.covered if nxt.pos else w.covered
    cover = covered < end
    size = w.pos + nxt.pos + (_EMPTY_BATCH_BYTES if cover else 0)
    entries = len(w.res.index) + len(nxt.res.index) + (nxt.pos > 0) + cover
    return ((not w.pos or size <= cfg.segment_bytes)
            and end - 1 - w.base <= MAX_RELATIVE_OFFSET
            and entries <= cfg.max_index_bytes // OffsetIndex.SIZE
            and entries + 1 <= cfg.max_index_bytes // TimeIndex.SIZE)


def _commit(directory: str, cfg: LogConfig, group: list[Segment], w: _Writer,
            replace: Callable[[list[Segment], Segment], None], stats: CompactionStats) -> None:
    """Swap the output ``w`` of ``group`` in (rule R4): its files finished and
    fsynced, the manifest written (the commit point), the files renamed over the
    group's, then ``replace``. Before the commit point a failure removes the new
    files; after it, they stay for recovery to roll the swap forward."""
    for seg in group:
        # open (the log may have closed them as idle since they were read): if the
        # swap fails half-way, the segments the log still lists read the files they
        # describe, not the new ones renamed over them
        seg.fileno()
    end = group[-1].next_offset
    assert end is not None and w.base == group[0].base_offset
    try:
        w.cover(end)
        w.finish(cfg.max_index_bytes)
        fsync_dir(directory)
    except BaseException:
        w.abort()
        raise
    manifest = SWAP + segment_name(w.base)
    try:
        write_checkpoint(directory, manifest, end)
    except BaseException:
        _withdraw(directory, manifest, w)
        raise
    swap_in(directory, w.base, end)
    # the writer's object for the sealed segment just swapped in, its file opened now:
    # its identity is what tells it apart from a copy another writer's compaction
    # swaps in later (an object that never opened its file takes any file for its own)
    new = Segment(directory, w.base, max_index_bytes=cfg.max_index_bytes, owner=True,
                  index_interval_bytes=cfg.index_interval_bytes)
    new.set_measured(w.pos, end, w.res.max_timestamp)
    new.fileno()
    replace(group, new)
    stats.bytes_after += w.pos
    stats.replaced.append((w.base, end))


def _withdraw(directory: str, manifest: str, w: _Writer) -> None:
    """After the manifest's write failed: take the swap back and free the new
    files' space. A manifest that was renamed in goes first, and the new files only
    once its removal is durable (else recovery still finds it and needs them);
    what cannot be removed now is a leftover for the next open."""
    try:
        if remove(os.path.join(directory, manifest)):
            fsync_dir(directory)
        w.abort()
    except OSError:
        pass


def swap_in(directory: str, base: int, end: int) -> None:
    """Roll a committed swap forward: new files over ``base``, originals in (base, end) gone.

    Idempotent, so recovery can call it after a crash at any step.
    """
    stem = os.path.join(directory, segment_name(base))
    for ext in SEGMENT_SUFFIXES:
        src = _cleaned(stem + ext)
        if os.path.exists(src):
            os.rename(src, stem + ext)
    fsync_dir(directory)
    gone = False
    for b in list_segments(directory):
        if base < b < end:
            for ext in SEGMENT_SUFFIXES:
                remove(segment_path(directory, b, ext))
            gone = True
    if gone:
        fsync_dir(directory)
    remove(os.path.join(directory, SWAP + segment_name(base)))
    fsync_dir(directory)


def _cleaned(path: str) -> str:
    d, name = os.path.split(path)
    return os.path.join(d, CLEANED + name)


def resolve_interrupted(directory: str) -> None:
    """At open: finish committed swaps (R4). Cleaned files no manifest committed are
    removed with the other leftovers (``retention.remove_leftovers``)."""
    for name in os.listdir(directory):
        if name.startswith(SWAP) and is_leftover(name):
            end = read_checkpoint(directory, name)
            if end is not None:
                swap_in(directory, int(name[len(SWAP):]), end)
            elif remove(os.path.join(directory, name)):
                fsync_dir(directory)


def compact(directory: str, segments: Sequence[Segment], start_offset: int, cfg: LogConfig,
            replace: Callable[[list[Segment], Segment], None],
            now_ms: int | None = None, reading: _Reading = nullcontext) -> CompactionStats:
    """One compaction pass over the sealed ``segments`` of the log in ``directory``
    (oldest first, without the active one). See the module docstring. Each use of
    a segment's files happens inside ``reading()`` (its log counts a read in
    flight), one segment at a time: between them the log may close idle files, so
    a pass over thousands of segments holds a few descriptors.

    Each rewritten group is committed on disk, then handed to ``replace(old, new)``,
    which swaps it into the log's segment list (Kafka's ``replaceSegments``). The
    caller runs one pass at a time. I/O errors propagate as ``OSError``.
    """
    t0 = time.perf_counter()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    stats = CompactionStats()
    if not cfg.compacted:
        stats.skipped = f"cleanup_policy is {cfg.cleanup_policy!r}"
        return stats
    lag = cfg.min_compaction_lag_ms
    cleanable = []
    for s in segments:
        if lag:
            with reading():
                if s.max_timestamp > now - lag:
                    break
        cleanable.append(s)
    stats.segments_before = len(cleanable)
    first_dirty = max(read_checkpoint(directory, CLEANER_CHECKPOINT) or 0, start_offset)
    stats.first_dirty_offset = first_dirty
    dirty = [s for s in cleanable if (s.next_offset or 0) > first_dirty]

    def size(s: Segment) -> int:
        with reading():        # measured from the file when the log was reopened
            return s.size

    dirty_bytes = sum(map(size, dirty))
    total = sum(map(size, cleanable))
    stats.dirty_ratio = dirty_bytes / total if total else 0.0
    horizon = read_checkpoint(directory, HORIZON_CHECKPOINT)
    tombstones_due = horizon is not None and now > horizon
    omap = OffsetMap(cfg.cleaner_buffer_bytes)
    if dirty and stats.dirty_ratio >= cfg.min_cleanable_dirty_ratio:
        dirty_end, _ = build_map(dirty, first_dirty, omap, reading)
        if dirty_end <= first_dirty and not tombstones_due:
            stats.skipped = "cleaner_buffer_bytes cannot hold the keys of one segment"
            return stats
    elif tombstones_due:
        dirty_end = first_dirty      # only drop expired tombstones from cleaned data
    else:
        stats.skipped = ("nothing dirty in the sealed segments" if not dirty else
                         f"dirty ratio {stats.dirty_ratio:.2f} below "
                         f"min_cleanable_dirty_ratio {cfg.min_cleanable_dirty_ratio}")
        return stats
    stats.map_entries, stats.map_bytes = omap.size, omap.memory_bytes
    stats.dirty_end_offset = dirty_end
    todo = [s for s in cleanable if s.base_offset < dirty_end]
    stats.bytes_before = sum(map(size, todo))
    # each segment's output is made on its own, then taken into the output before
    # it while the two fit in one segment: grouped by what the pass writes, not by
    # what it reads, so no pass leaves neighbours that a merge would join
    w: _Writer | None = None            # the output being grouped, not yet committed
    nxt: _Writer | None = None
    group: list[Segment] = []
    try:
        for seg in todo:
            nxt = _clean_segment(directory, cfg, seg, omap, now, stats, reading)
            end = seg.next_offset
            assert end is not None
            if w is not None and _takes(w, nxt, end, cfg):
                w.absorb(nxt)
                group.append(seg)
            else:
                if w is not None:
                    done, w = w, None
                    with reading():
                        _commit(directory, cfg, group, done, replace, stats)
                w, group = nxt, [seg]
            nxt = None
        if w is not None:
            done, w = w, None
            with reading():
                _commit(directory, cfg, group, done, replace, stats)
    except BaseException:
        for x in (w, nxt):
            if x is not None:
                x.abort()
        raise
    write_checkpoint(directory, CLEANER_CHECKPOINT, dirty_end)
    if stats.next_horizon is not None:
        write_checkpoint(directory, HORIZON_CHECKPOINT, stats.next_horizon)
    elif remove(os.path.join(directory, HORIZON_CHECKPOINT)):
        fsync_dir(directory)
    stats.segments_after = len(stats.replaced)
    stats.seconds = time.perf_counter() - t0
    return stats

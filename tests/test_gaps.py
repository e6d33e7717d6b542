"""A hole in the middle of the log is damage: CorruptRecordError, never a hang or a
silent skip. Holes compaction leaves are not holes: an empty batch covers them."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog import CorruptRecordError, Log, Record, codec

TS0 = 1_700_000_000_000


def _deadline(fn, seconds: float = 20):
    """fn() in a thread; its result or exception, or a failure if it hangs."""
    out: list = []

    def run() -> None:
        try:
            out.append(("ok", fn()))
        except BaseException as e:   # noqa: BLE001 - handed to the caller
            out.append(("err", e))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "hung"
    kind, val = out[0]
    if kind == "err":
        raise val
    return val


def _build(path) -> Log:
    log = Log.open(path, segment_bytes=2048, index_interval_bytes=256, flush_ms=None)
    for i in range(0, 300, 3):
        log.append_batch([Record(b"v%03d" % j + b"." * 30, timestamp=TS0 + j)
                          for j in range(i, i + 3)])
    log.flush()
    assert len(log.segments) >= 4
    return log


def _boundaries(seg) -> list[tuple[int, int]]:
    """(position, base offset) of every batch after the first."""
    return [(p, h[0]) for p, h in seg.batches()][1:]


@pytest.mark.parametrize("which", [0, 1, 2])
def test_sealed_segment_cut_back_at_every_batch_boundary(tmp_path, which):
    path = tmp_path / "l"
    log = _build(path)
    seg = log.segments[which]
    cuts = _boundaries(seg)
    log.close()
    for pos, hole in cuts:
        d = tmp_path / f"cut{pos}"
        import shutil
        shutil.copytree(path, d)
        with open(d / os.path.basename(seg.path), "r+b") as f:
            f.truncate(pos)          # a batch boundary: every batch left is whole
        nxt = seg.next_offset
        for mode in ("writer", "reader"):
            w = Log.open(d) if mode == "writer" else Log.open(d, readonly=True)
            with pytest.raises(CorruptRecordError) as e:
                _deadline(lambda: sum(1 for _ in w.iter()))
            assert e.value.offset == hole and e.value.path.endswith(os.path.basename(seg.path))
            for o in (hole, (hole + nxt) // 2, nxt - 1):
                with pytest.raises(CorruptRecordError):
                    _deadline(lambda: list(w.read(o)))
            with pytest.raises(CorruptRecordError):
                _deadline(lambda: w.offset_for_time(TS0 + hole))
            # offsets before and after the hole still read
            assert next(iter(w.read(0))).offset == 0
            assert next(iter(w.read(nxt))).offset == nxt
            assert [m.offset for m in w.iter(nxt)] == list(range(nxt, 300))
            w.close()
        shutil.rmtree(d)


def test_writer_holding_the_segment_when_it_is_cut(tmp_path):
    """The writer knows the segment's old size: a short read is damage, not a spin."""
    log = _build(tmp_path / "l")
    seg = log.segments[1]
    sum(1 for _ in log.iter())            # the writer has the file open, size known
    pos, hole = _boundaries(seg)[2]
    with open(seg.path, "r+b") as f:
        f.truncate(pos)
    with pytest.raises(CorruptRecordError):
        _deadline(lambda: sum(1 for _ in log.iter()))
    with pytest.raises(CorruptRecordError):
        _deadline(lambda: list(log.read(hole)))
    log.close()


_READER = r"""
import sys, seglog
r = seglog.Log.open(sys.argv[1], readonly=True)
try:
    sum(1 for _ in r.iter())
except seglog.CorruptRecordError as e:
    print("corrupt", e.offset)
else:
    print("no error")
"""


def test_reader_in_another_process_sees_the_hole(tmp_path):
    log = _build(tmp_path / "l")
    seg = log.segments[1]
    pos, hole = _boundaries(seg)[1]
    log.close()
    with open(seg.path, "r+b") as f:
        f.truncate(pos)
    out = subprocess.run([sys.executable, "-c", _READER, str(tmp_path / "l")],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["corrupt", str(hole)], out.stderr


def _records(log: Log) -> set[tuple[int, bytes | None, bytes | None]]:
    return {(m.offset, m.key, m.value) for m in log.iter()}


def _check_contiguous(log: Log) -> None:
    """Every sealed segment's batches end exactly where the next segment starts."""
    segs = log.segments
    for seg, nxt in zip(segs, segs[1:]):
        last = None
        for _, hdr in seg.batches():
            last = hdr
        assert last is not None, f"sealed segment {seg.base_offset} is empty"
        assert codec.last_offset(last) + 1 == nxt.base_offset


def test_compaction_dropping_whole_batches_and_segments_is_not_a_hole(tmp_path):
    path = tmp_path / "l"
    log = Log.open(path, segment_bytes=1024, cleanup_policy="compact",
                   min_cleanable_dirty_ratio=0.0, retention_check_ms=None)
    # the same three keys over and over: most segments end up with nothing kept
    for i in range(60):
        log.append_batch([Record(b"%d" % i, key=b"k%d" % (j % 3)) for j in range(10)])
    log.append(b"last", key=b"k0")
    every = _records(log)
    active = log.segments[-1].base_offset
    log.compact()
    _check_contiguous(log)
    kept = _records(log)
    # sealed: the latest record of each key among sealed ones; active: untouched
    latest = {}
    for off, key, value in sorted(every):
        if off < active:
            latest[key] = (off, key, value)
    assert kept == set(latest.values()) | {r for r in every if r[0] >= active}
    # the kept records fit in one sealed segment, whose last batch covers the
    # offsets dropped up to the active segment
    assert len(log.segments) == 2
    reader = Log.open(path, readonly=True)
    assert _records(reader) == kept
    for off, key, value in kept:
        for lg in (log, reader):
            m = next(iter(lg.read(off)))
            assert (m.offset, m.key, m.value) == (off, key, value)
    # a read in a removed stretch goes on to the next kept record
    assert next(iter(log.read(0))).offset == min(kept)[0]
    reader.close()
    log.close()
    with Log.open(path) as again:
        assert _records(again) == kept


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 12), st.booleans()), min_size=1, max_size=300),
       st.integers(1, 20))
def test_compaction_output_is_contiguous(tmp_path_factory, ops, batch):
    path = tmp_path_factory.mktemp("c") / "l"
    with Log.open(path, segment_bytes=1024, cleanup_policy="compact",
                  min_cleanable_dirty_ratio=0.0, retention_check_ms=None) as log:
        written: list[tuple[int, bytes, bytes | None]] = []
        for i in range(0, len(ops), batch):
            part = ops[i:i + batch]
            recs = [Record(None if tomb else b"v%d" % (i + n), key=b"k%d" % k)
                    for n, (k, tomb) in enumerate(part)]
            r = log.append_batch(recs)
            written += [(off, rec.key, rec.value) for off, rec in zip(r, recs)]
        log.compact()
        log.compact()
        _check_contiguous(log)
        # compaction's map covers the sealed segments: the latest record of each key
        # among them is kept (tombstones too, for delete_retention_ms)
        sealed_end = log.segments[-1].base_offset
        latest = {k: (o, k, v) for o, k, v in written if o < sealed_end}
        got = {(m.offset, m.key, m.value) for m in log.iter() if m.offset < sealed_end}
        assert got == set(latest.values())


@pytest.mark.parametrize("bit", range(16, 32))
def test_first_batch_length_claiming_past_the_data_is_damage(tmp_path, bit):
    """A flipped high bit in a batch's length field makes it claim bytes past the
    segment's data: before, iter() then ended silently at offset 0."""
    path = tmp_path / "l"
    with Log.open(path, segment_bytes=64 << 10) as log:
        log.append_batch([b"v%d" % i for i in range(200)])
        for i in range(200, 260):
            log.append(b"w%d" % i)
        seg = log.segments[0].path
    with open(seg, "r+b") as f:
        f.seek(8)
        length = int.from_bytes(f.read(4), "little")
        f.seek(8)
        f.write((length ^ (1 << bit)).to_bytes(4, "little"))
    for ro in (False, True):
        with Log.open(path, readonly=ro) as log:
            with pytest.raises(CorruptRecordError) as e:
                _deadline(lambda: list(log.iter()))
            assert e.value.path == seg
            with pytest.raises(CorruptRecordError):
                _deadline(lambda: list(log.read(0)))

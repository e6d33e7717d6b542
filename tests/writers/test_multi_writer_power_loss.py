"""Power loss under several writers (``seglog.testing.FaultyFS``): two multi-writer
``Log`` objects of one process append in turn, flush, close, reopen and crash
(``abandon``); crash states are captured at every step (inside appends, rolls,
flushes). After each state is materialised and the log reopened, every offset below
the last flush any writer returned is there with its bytes, nothing torn is left,
and recovery cut only the unflushed tail. Scaled by SEGLOG_TORTURE; the seed is
printed (rerun with SEGLOG_SEED=<seed>)."""

from __future__ import annotations

import os
import random
import shutil

import seglog
from seglog import Log, repair
from seglog.testing import FaultyFS, abandon

from mw_harness import SCALE, seed_for

CFG = dict(segment_bytes=2048, max_message_bytes=1024, flush_ms=None,
           index_interval_bytes=200, max_index_bytes=240, retention_check_ms=None)


def test_power_loss_with_two_writers(tmp_path):
    seed = seed_for("multi-writer power loss")
    checked = instants = 0
    for round_ in range(SCALE):
        c, i = _round(str(tmp_path / f"r{round_}"), seed + round_)
        checked += c
        instants += i
    print(f"multi-writer power loss: {checked} crash states from {instants} instants, "
          f"0 violations")
    assert checked >= 250 * SCALE


def _round(root: str, seed: int) -> tuple[int, int]:
    rnd = random.Random(seed)
    src = os.path.join(root, "src")
    model: dict[int, bytes] = {}       # offset -> value, every acknowledged append
    flushed = 0                        # the largest offset a flush() returned
    states = []
    with FaultyFS(src) as fs:
        handles: list[Log | None] = [None, None]

        def capture(op: str, path: str) -> None:
            if any(h is not None for h in handles) and rnd.random() < 0.08:
                states.append(fs.capture(flushed=flushed, op=op))
        fs.on_event = capture
        handles[0] = Log.open(src, multi_writer=True, **CFG)
        handles[1] = Log.open(src, multi_writer=True, **CFG)
        for step in range(100):
            i = rnd.randrange(2)
            h = handles[i]
            assert h is not None
            n = rnd.choice([1, 1, 2, 5, 9])
            vals = [b"h%d.%d." % (i, step) + bytes([65 + j]) * rnd.randint(0, 150)
                    for j in range(n)]
            if n == 1:
                offs = [h.append(vals[0])]
            else:
                offs = list(h.append_batch(vals))
            assert offs == list(range(len(model), len(model) + n)), "offsets not dense"
            model.update(zip(offs, vals))
            r = rnd.random()
            if r < 0.2:
                # one writer's flush covers both writers' appends, and both see it
                got = h.flush()
                assert got == len(model) >= flushed
                flushed = got
                assert all(x is not None and x.flushed_offset == flushed for x in handles)
            elif r < 0.25:
                h.close()
                handles[i] = Log.open(src, multi_writer=True, **CFG)
            elif r < 0.29:
                abandon(h)                 # its process killed (between appends)
                handles[i] = Log.open(src, multi_writer=True, **CFG)
            if rnd.random() < 0.1:
                states.append(fs.capture(flushed=flushed, op="-"))
        for h in handles:
            assert h is not None
            h.close()
        states.append(fs.capture(flushed=len(model), op="closed"))
    checked = 0
    for i, st in enumerate(states):
        for mode in ("random", "random", "lose", "keep", "garble"):
            dest = os.path.join(root, f"crash-{i}-{mode}")
            st.materialize(dest, random.Random(seed * 7919 + i), mode)
            where = (f"seed {seed} state {i} ({st.note['op']}, mode {mode}, "
                     f"flushed {st.note['flushed']})")
            _check(dest, model, st.note["flushed"], multi=i % 2 == 0, where=where)
            shutil.rmtree(dest)
            checked += 1
    return checked, len(states)


def _check(dest: str, model: dict[int, bytes], flushed: int, multi: bool, where: str) -> None:
    try:
        # the first multi-writer of a log all had left recovers, as an exclusive one does
        with Log.open(dest, multi_writer=multi) as log:
            assert log.start_offset == 0
            got = [(m.offset, m.value) for m in log.iter()]
            end = log.end_offset
            # the log goes on after what recovery kept
            assert log.append(b"after") == end, f"{where}: appended past a gap"
    except seglog.SeglogError as e:
        raise AssertionError(f"{where}: the log did not open: {e}") from e
    assert [o for o, _ in got] == list(range(end)), f"{where}: offsets not dense"
    assert end >= flushed, f"{where}: lost flushed data: end {end} < {flushed}"
    assert end <= len(model), f"{where}: invented messages"
    for o, v in got:
        assert v == model[o], f"{where}: wrong bytes at offset {o}"
    report = repair.check(dest)
    assert not report.problems, f"{where}: {report.problems}"


def test_recovery_of_a_tail_past_the_recovery_point_keeps_the_time_index_dense(tmp_path):
    """What the power-loss test above found, with one writer: the segment holding the
    recovery point had time index entries past it when the writer died; after
    recovery and a clean close the time index must still be entries without a gap
    (``seglog verify`` finds no damage)."""
    path = str(tmp_path / "log")
    now = 1_700_000_000_000
    log = Log.open(path, segment_bytes=2048, max_message_bytes=1024, index_interval_bytes=200,
                   max_index_bytes=240, flush_ms=None)
    for i in range(30):
        log.append(b"x" * 60, timestamp=now + i // 2)
        if i == 21:
            log.flush()
    abandon(log)
    with Log.open(path) as log:
        assert log.recovery is not None and log.end_offset == 30
        assert log.offset_for_time(now + 14) == 28
    assert not repair.check(path).problems

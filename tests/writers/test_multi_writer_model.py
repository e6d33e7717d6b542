"""A hypothesis state machine: several writer handles of one log (``Log`` objects opened
with ``multi_writer=True`` in one process, each a writer as another process's would
be) against a model: appends through any handle, flushes, rolls, retention,
compaction, closing, reopening and crashing handles (``abandon``: a killed writer),
and a writer stopped holding the append lock (the test holds the ``.writers`` flock
as a SIGSTOPped writer does). Handles that have not written since another's
retention or compaction are stale: they decide nothing on their old view. While a
writer is stopped, every write, flush, retention or compaction pass, close and open
raises ``LogLockedError`` and changes nothing; reads answer at once. Offsets stay
dense (but for compaction's holes), contents equal the model minus what retention
deleted and compaction removed, flushed_offset is shared and never moves back."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time

import hypothesis.strategies as st
from hypothesis import event, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import pytest

from seglog import Log, LogLockedError, Record, repair
from seglog.testing import abandon

SCALE = int(os.environ.get("SEGLOG_TORTURE", "1"))
HANDLES = 3
keys = st.sampled_from([None, b"a", b"b", b"c", b"d"])
values = st.one_of(st.binary(max_size=200), st.none())
headers = st.lists(st.tuples(st.text(max_size=3), st.binary(max_size=3)), max_size=2)
records = st.builds(Record, values, keys, st.none(), headers)
handle = st.integers(0, HANDLES - 1)
LATER = int(time.time() * 1000) + 10 ** 9      # every sealed segment has expired by then


def _item(r: Record) -> tuple:
    return (r.key, r.value, tuple(r.headers))


class MultiWriterModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="seglog-mw-model-")
        self.cfg = dict(segment_bytes=1024, index_interval_bytes=96, max_index_bytes=96,
                        flush_ms=None, max_message_bytes=4096, retention_ms=60_000,
                        retention_check_ms=None, cleanup_policy="compact,delete",
                        min_cleanable_dirty_ratio=0.0, lock_timeout_ms=30)
        self.logs: list[Log | None] = [None] * HANDLES
        self.logs[0] = Log.open(self.dir, multi_writer=True, **self.cfg)
        self.model: dict[int, tuple] = {}       # offset -> (key, value, headers)
        self.end = 0
        self.start = 0
        self.flushed = 0
        self.stopped: int | None = None      # the held .writers flock's descriptor

    def teardown(self) -> None:
        self._continue()
        for log in self.logs:
            if log is not None:
                log.close()
        assert not repair.check(self.dir).problems
        shutil.rmtree(self.dir, ignore_errors=True)

    def _open(self) -> list[int]:
        return [i for i, log in enumerate(self.logs) if log is not None]

    def _pick(self, i: int) -> Log:
        """Handle ``i`` if open, else the first open one (opening one if none is)."""
        log = self.logs[i]
        if log is None:
            opened = self._open()
            if opened:
                log = self.logs[opened[0]]
                assert log is not None
                return log
            log = self.logs[i] = Log.open(self.dir, multi_writer=True, **self.cfg)
        return log

    def _refused(self, i: int, call) -> bool:
        """While a writer is stopped: ``call(handle)`` raises LogLockedError and
        changes nothing (True); else False (the rule goes on)."""
        if self.stopped is None:
            return False
        opened = self._open()
        if not opened:
            return True                     # opening needs the lock too
        log = self.logs[i] if self.logs[i] is not None else self.logs[opened[0]]
        before = (log.start_offset, log.end_offset, log.flushed_offset)
        with pytest.raises(LogLockedError):
            call(log)
        assert (log.start_offset, log.end_offset, log.flushed_offset) == before
        event("refused behind a stopped writer")
        return True

    def _continue(self) -> None:
        if self.stopped is not None:
            fcntl.flock(self.stopped, fcntl.LOCK_UN)
            os.close(self.stopped)
            self.stopped = None

    # -- a writer stopped holding the append lock ------------------------------------------
    @precondition(lambda self: self.stopped is None)
    @rule()
    def stop_a_writer(self):
        fd = os.open(os.path.join(self.dir, ".writers"), os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self.stopped = fd

    @precondition(lambda self: self.stopped is not None)
    @rule()
    def continue_the_stopped_writer(self):
        self._continue()

    # -- appends ------------------------------------------------------------------------
    @rule(i=handle, r=records)
    def append(self, i, r):
        if self._refused(i, lambda log: log.append(r.value, key=r.key, headers=r.headers)):
            return
        off = self._pick(i).append(r.value, key=r.key, headers=r.headers)
        assert off == self.end
        self.model[off] = _item(r)
        self.end += 1

    @rule(i=handle, rs=st.lists(st.one_of(st.binary(max_size=150), records), max_size=30))
    def append_batch(self, i, rs):
        if self._refused(i, lambda log: log.append_batch(rs or [b""])):
            return
        got = self._pick(i).append_batch(rs)
        assert got == range(self.end, self.end + len(rs))
        for off, r in zip(got, rs):
            self.model[off] = (None, r, ()) if isinstance(r, bytes) else _item(r)
        self.end += len(rs)

    @rule(i=handle)
    def roll(self, i):
        if self._refused(i, lambda log: log.append(b"r" * 900)):
            return
        log = self._pick(i)
        base = log.segments[-1].base_offset
        for _ in range(3):            # a segment holds at most one of these after another
            off = log.append(b"r" * 900)
            assert off == self.end
            self.model[off] = (None, b"r" * 900, ())
            self.end += 1
            if log.segments[-1].base_offset != base:
                break
        assert log.segments[-1].base_offset == self.end - 1, "it did not roll"

    # -- flushes and maintenance -----------------------------------------------------------
    @rule(i=handle)
    def flush(self, i):
        if self._refused(i, lambda log: log.flush()):
            return
        got = self._pick(i).flush()
        assert got == self.end and got >= self.flushed
        self.flushed = got
        for j in self._open():
            assert self.logs[j].flushed_offset == got, f"handle {j} does not see the flush"

    @rule(i=handle)
    def enforce_retention(self, i):
        if self._refused(i, lambda log: log.enforce_retention(now_ms=LATER)):
            return
        log = self._pick(i)
        deleted = log.enforce_retention(now_ms=LATER)
        new_start = log.start_offset
        assert new_start == log.segments[-1].base_offset       # every sealed one expired
        assert all(b < new_start for b in deleted) and new_start >= self.start
        event(f"retention deleted segments: {bool(deleted)}")
        self.start = new_start
        self.model = {o: m for o, m in self.model.items() if o >= new_start}

    @rule(i=handle)
    def compact(self, i):
        if self._refused(i, lambda log: log.compact()):
            return
        log = self._pick(i)
        log.compact()
        present = {m.offset: (m.key, m.value, tuple(m.headers)) for m in log.iter()}
        active = log.segments[-1].base_offset
        latest = {}
        for off, (k, _, _) in sorted(self.model.items()):
            if k is not None:
                latest[k] = off
        for off, item in self.model.items():
            if off in present:
                assert present[off] == item, f"offset {off} changed"
                continue
            k = item[0]
            assert off < active, f"offset {off} removed from the active segment"
            assert k is not None and latest[k] > off or k is None, \
                f"offset {off} removed, yet the latest of key {k!r}"
        assert set(present) <= set(self.model)
        event(f"compaction removed records: {len(present) < len(self.model)}")
        self.model = {o: self.model[o] for o in present}

    # -- handles come and go -------------------------------------------------------------------
    @precondition(lambda self: len(self._open()) < HANDLES)
    @rule(data=st.data())
    def open_handle(self, data):
        i = data.draw(st.sampled_from([j for j, log in enumerate(self.logs) if log is None]))
        if self.stopped is not None:
            with pytest.raises(LogLockedError):
                Log.open(self.dir, multi_writer=True, **self.cfg)
            return
        log = self.logs[i] = Log.open(self.dir, multi_writer=True, **self.cfg)
        assert log.end_offset == self.end and log.start_offset == self.start

    @precondition(lambda self: self._open())
    @rule(data=st.data())
    def close_handle(self, data):
        i = data.draw(st.sampled_from(self._open()))
        if self.stopped is not None:
            # refused: the handle stays open and working
            with pytest.raises(LogLockedError):
                self.logs[i].close()
            assert not self.logs[i].closed
            return
        self.logs[i].close()
        self.logs[i] = None
        if not self._open():
            self.flushed = self.end     # the last writer's close flushed

    @precondition(lambda self: self._open())
    @rule(data=st.data())
    def crash_handle(self, data):
        """A writer's process dies: every append survives (the page cache keeps it)."""
        i = data.draw(st.sampled_from(self._open()))
        abandon(self.logs[i])
        self.logs[i] = None

    # -- what every handle sees -------------------------------------------------------------------
    @rule(i=handle)
    def contents(self, i):
        if self.stopped is not None and not self._open():
            return
        log = self._pick(i)
        got = {m.offset: (m.key, m.value, tuple(m.headers)) for m in log.iter()}
        assert got == self.model

    @rule()
    def readonly_view(self):
        with Log.open(self.dir, readonly=True) as r:
            assert (r.start_offset, r.end_offset) == (self.start, self.end)
            assert {m.offset: (m.key, m.value, tuple(m.headers)) for m in r.iter()} == self.model

    @invariant()
    def offsets(self):
        for i in self._open():
            log = self.logs[i]
            assert (log.start_offset, log.end_offset) == (self.start, self.end), f"handle {i}"
            assert self.flushed <= log.flushed_offset <= self.end, f"handle {i}"
            self.flushed = log.flushed_offset


MultiWriterModel.TestCase.settings = settings(max_examples=60 * SCALE, stateful_step_count=40,
                                              deadline=None)
TestMultiWriterModel = MultiWriterModel.TestCase

"""A hypothesis state machine: the log against a plain list, across rolls and reopens."""

from __future__ import annotations

import shutil
import tempfile

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import seglog
from seglog import Log, Record
from seglog.testing import abandon

from clock import SYNTHETIC_CLOCK

# records here carry made-up timestamps near 0 ms (SYNTHETIC_CLOCK)
values = st.one_of(st.binary(max_size=300), st.none())
keys = st.one_of(st.none(), st.binary(max_size=8))
stamps = st.one_of(st.none(), st.integers(0, 2**45))
headers = st.lists(st.tuples(st.text(max_size=4), st.binary(max_size=4)), max_size=2)
records = st.builds(Record, values, keys, stamps, headers)


class LogModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="seglog-model-")
        self.cfg = dict(segment_bytes=1024, index_interval_bytes=96, max_index_bytes=96,
                        flush_ms=None, max_message_bytes=4096)
        self.log = Log.open(self.dir, **self.cfg, **SYNTHETIC_CLOCK)
        self.model: list[tuple] = []   # (key, value, headers)
        self.flushed = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(v=st.binary(max_size=300))
    def append_plain(self, v):
        assert self.log.append(v) == len(self.model)
        self.model.append((None, v, ()))

    @rule(r=records)
    def append_record(self, r):
        off = self.log.append(r.value, key=r.key, timestamp=r.timestamp, headers=r.headers)
        assert off == len(self.model)
        self.model.append((r.key, r.value, tuple(r.headers)))

    @rule(rs=st.lists(st.one_of(st.binary(max_size=200), records), max_size=40))
    def append_batch(self, rs):
        got = self.log.append_batch(rs)
        assert got == range(len(self.model), len(self.model) + len(rs))
        for r in rs:
            self.model.append((None, r, ()) if isinstance(r, bytes)
                              else (r.key, r.value, tuple(r.headers)))

    @rule()
    def flush(self):
        self.flushed = self.log.flush()
        assert self.flushed == len(self.model)

    @rule(lz=st.booleans())
    def reopen(self, lz):
        # batches written with and without compression live side by side
        self.cfg["compression"] = "lz4" if lz else None
        self.log.close()
        self.log = Log.open(self.dir, **self.cfg, **SYNTHETIC_CLOCK)
        assert self.log.end_offset == len(self.model)

    @rule()
    def crash(self):
        """The writer's process dies (SIGKILL): every appended message survives."""
        abandon(self.log)
        self.log = Log.open(self.dir, **self.cfg, **SYNTHETIC_CLOCK)
        assert self.log.end_offset == len(self.model)
        assert self.log.flushed_offset == len(self.model)

    @rule(data=st.data())
    def read_at(self, data):
        off = data.draw(st.integers(0, len(self.model)))
        mb = data.draw(st.integers(1, 4000))
        ms = self.log.read(off, max_bytes=mb)
        got = list(ms)
        if off < len(self.model):
            assert got, "at least one message when one exists"
        for i, m in enumerate(got):
            assert m.offset == off + i
            assert (m.key, m.value, m.headers) == self.model[m.offset]
        assert ms.next_offset == off + len(got)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def iter_range(self, data):
        a = data.draw(st.integers(0, len(self.model)))
        b = data.draw(st.integers(a, len(self.model)))
        got = [(m.offset, m.key, m.value, m.headers) for m in self.log.iter(a, b)]
        assert got == [(i, *self.model[i]) for i in range(a, b)]

    @rule()
    def readonly_view(self):
        with Log.open(self.dir, readonly=True) as r:
            assert r.end_offset == len(self.model)
            assert [m.value for m in r.iter()] == [m[1] for m in self.model]

    @invariant()
    def offsets(self):
        assert self.log.end_offset == len(self.model)
        assert self.log.start_offset == 0


LogModel.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestLogModel = LogModel.TestCase

"""A hypothesis state machine: a ``Producer`` over a two-partition topic whose writer is
stuck (as behind another writer's lock) against a model of its buffer. Sends come
both ways a send is queued (plain values to the sticky partition, values to a
partition named); each is accepted exactly when its bytes fit ``max_buffer_bytes``
beside the bytes accepted and not yet written (a cancelled record's bytes count
until its round is written), refused with ``ProducerTimeoutError`` (``max_block_ms=0``)
otherwise, and with ``MessageTooLargeError`` beyond the buffer; after ``close``
every send is refused. A flush (from another thread) makes the writer take what
waits, and then it is stuck on it (the model waits for that), so a cancel succeeds
exactly for a record not taken. Whenever the writer is let go, each partition holds exactly the
accepted, uncancelled records sent to it, in the order sent, and each future its
``(partition, offset)``."""

from __future__ import annotations

import concurrent.futures as cf
import os
import shutil
import tempfile
import threading

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, rule

import seglog
from seglog import (MessageTooLargeError, Producer, ProducerClosedError,
                    ProducerTimeoutError, Topic)

SCALE = int(os.environ.get("SEGLOG_TORTURE", "1"))
BUFFER = 600
# sizes around the buffer's edges (hypothesis alone makes mostly short values)
SIZES = [0, 1, 50, 99, 100, 150, 200, 250, 299, 300, BUFFER - 1, BUFFER, BUFFER + 1]
values = st.tuples(st.sampled_from(SIZES), st.binary(min_size=1, max_size=8)).map(
    lambda t: (t[1] * t[0])[:t[0]])


class ProducerModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="seglog-producer-model-")
        self.topic = Topic.open(self.dir, "t", partitions=2, flush_ms=None,
                                retention_check_ms=None)
        self.gate = threading.Event()
        self.entered = threading.Event()        # the writer is at the gate
        self.real = seglog.producer.append_encoded
        real, gate, entered = self.real, self.gate, self.entered

        def stuck(log, batches, atomic=False):
            entered.set()
            assert gate.wait(60), "the test never let the writer go"
            return real(log, batches, atomic)
        seglog.producer.append_encoded = stuck
        self.p = Producer(self.topic, linger_ms=60_000, batch_size=1 << 30,
                          max_buffer_bytes=BUFFER, max_block_ms=0)
        self.held = 0               # bytes accepted and not yet written
        self.sent: list[tuple[cf.Future, int | None, bytes]] = []
        self.waiting: list[int] = []    # places in ``sent`` the writer has not taken
        self.cancelled: set[int] = set()
        self.stuck = False              # the writer took a round and waits at the gate
        self.flushers: list[threading.Thread] = []
        self.closed = False

    def teardown(self) -> None:
        try:
            self.gate.set()
            self.p.close(timeout=60)
            self._join_flushers()
            self._check()
        finally:
            seglog.producer.append_encoded = self.real
            self.topic.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def _send(self, value: bytes, partition: int | None) -> None:
        if self.closed:
            try:
                self.p.send(value, partition=partition)
            except ProducerClosedError:
                return
            raise AssertionError("a closed producer took a record")
        if len(value) > BUFFER:
            try:
                self.p.send(value, partition=partition)
            except MessageTooLargeError:
                return
            raise AssertionError("a record larger than the buffer was taken")
        if self.held + len(value) > BUFFER:
            try:
                self.p.send(value, partition=partition)
            except ProducerTimeoutError:
                return
            raise AssertionError(f"{len(value)} bytes taken beside {self.held} of {BUFFER}")
        self.waiting.append(len(self.sent))
        self.sent.append((self.p.send(value, partition=partition), partition, value))
        self.held += len(value)

    @rule()
    def writer_takes_what_waits(self) -> None:
        """A flush in another thread: the writer takes what waits (at least one
        record not cancelled: the cancel rule keeps one) and stops at the gate, its
        bytes still held; the flush returns once the writer is let go."""
        if self.stuck or not self.waiting or self.closed:
            return
        t = threading.Thread(target=self.p.flush, kwargs={"timeout": 60})
        t.start()
        self.flushers.append(t)
        assert self.entered.wait(30), "the writer never took what waited"
        self.stuck = True
        self.waiting = []

    def _join_flushers(self) -> None:
        for t in self.flushers:
            t.join(60)
            assert not t.is_alive()
        self.flushers = []

    @rule(value=values)
    def send_plain(self, value: bytes) -> None:
        self._send(value, None)

    @rule(value=values, partition=st.integers(0, 1))
    def send_to_a_partition(self, value: bytes, partition: int) -> None:
        self._send(value, partition)

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        if not self.sent:
            return
        i = data.draw(st.integers(0, len(self.sent) - 1))
        left = [j for j in self.waiting if j not in self.cancelled and j != i]
        if i in self.waiting and not left:
            return      # keep one record waiting: a round of none would not stop the writer
        f = self.sent[i][0]
        taken = i not in self.waiting and i not in self.cancelled
        assert f.cancel() == (not taken) and f.cancelled() == (not taken)
        if not taken:
            self.cancelled.add(i)

    @rule()
    def let_the_writer_go(self) -> None:
        self.gate.set()
        self.p.flush(timeout=60)
        self._join_flushers()
        self._check()
        self.held = 0
        self.waiting = []
        self.stuck = False
        self.entered.clear()
        self.gate.clear()

    @rule()
    def close(self) -> None:
        self.gate.set()
        self.p.close(timeout=60)
        self._join_flushers()
        self.closed = True
        self.held = 0
        self.waiting = []

    def _check(self) -> None:
        logs = {p: {m.offset: m.value for m in self.topic.partition(p).iter()} for p in (0, 1)}
        want: dict[int, list[bytes]] = {0: [], 1: []}
        for f, partition, value in self.sent:
            assert f.done()
            if f.cancelled():
                continue
            p, offset = f.result(timeout=0)
            assert partition in (None, p) and logs[p][offset] == value
            want[p].append(value)
        for p in (0, 1):
            assert list(logs[p].values()) == want[p], f"partition {p}"
            assert list(logs[p]) == sorted(logs[p]) == list(range(len(want[p])))


ProducerModel.TestCase.settings = settings(max_examples=100 * SCALE, stateful_step_count=30,
                                           deadline=None)
TestProducerModel = ProducerModel.TestCase

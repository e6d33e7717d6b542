"""``seglog.Producer``: futures hold exactly the offsets of their records in the log,
bad input is refused by ``send`` with nothing written, failed writes fail exactly
their records' futures, a full buffer blocks then times out, durable futures never
run ahead of ``flushed_offset``, and nothing a resolved future promised is lost to
a SIGKILL."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import random
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import seglog
from seglog import (InvalidConfigError, Log, LogClosedError, LogLockedError,
                    MessageTooLargeError, Producer, ProducerClosedError,
                    ProducerTimeoutError, Record, StorageError, Topic)
from seglog.testing import FaultyFS

SEED = int(os.environ.get("SEGLOG_SEED", str(random.randrange(1 << 30))))
SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src")


def contents(log: Log) -> set[tuple[int, bytes | None]]:
    return {(m.offset, m.value) for m in log.iter()}


def resolved(futs: dict[cf.Future, bytes]) -> set[tuple[int, bytes]]:
    return {(f.result(), v) for f, v in futs.items() if f.exception() is None}


class Flaky:
    """The producer's appends to ``log`` of which the chosen ones fail (as another
    writer holding the lock would make them) or wait for ``gate`` (a writer stuck on
    the lock); appends to other logs go through."""

    def __init__(self, monkeypatch, log: Log, fail_calls: set[int] = frozenset(),
                 gate: threading.Event | None = None) -> None:
        self.calls = 0
        real = seglog.producer.append_encoded

        def append_encoded(lg: Log, batches, atomic: bool = False) -> range:
            if lg is log:
                self.calls += 1
                if gate is not None:
                    assert gate.wait(30)
                if self.calls in fail_calls:
                    raise LogLockedError("held by another writer (injected)")
            return real(lg, batches, atomic)
        monkeypatch.setattr(seglog.producer, "append_encoded", append_encoded)


def send_from_threads(producer: Producer, threads: int, each: int,
                      value) -> list[dict[cf.Future, bytes]]:
    """``each`` sends of ``value(t, i)`` from each of ``threads`` threads at once, then
    a flush: each thread's futures, in the order it sent."""
    sent: list[dict[cf.Future, bytes]] = [{} for _ in range(threads)]

    def work(t: int) -> None:
        for i in range(each):
            v = value(t, i)
            sent[t][producer.send(v)] = v
    started = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in started:
        th.start()
    for th in started:
        th.join(120)
        assert not th.is_alive()
    producer.flush(timeout=120)
    return sent


def assert_each_written_once_in_order(log: Log, sent: list[dict[cf.Future, bytes]]) -> None:
    every = {f: v for s in sent for f, v in s.items()}
    assert all(f.done() for f in every)
    assert resolved(every) == contents(log) and len(contents(log)) == len(every)
    for s in sent:      # each thread's records in the order it sent them
        offsets = [f.result() for f in s]
        assert offsets == sorted(offsets)


def test_many_threads_futures_are_the_log_offsets(logdir):
    print("seed", SEED)
    rng = random.Random(SEED)
    sizes = [rng.randrange(0, 3000) for _ in range(64)]
    with Log.open(logdir, max_message_bytes=20_000) as log:
        with Producer(log, linger_ms=1, batch_size=50_000) as producer:
            sent = send_from_threads(
                producer, 8, 1500, lambda t, i: b"%d:%d:" % (t, i) + b"x" * sizes[(t + i) % 64])
        assert_each_written_once_in_order(log, sent)
        assert not log.closed             # the producer never closes its target


def test_sends_racing_the_writers_swaps_are_each_written_once(logdir):
    # linger 0: the writer takes what waits as soon as it can; a tiny switch interval
    # makes threads switch between a send's first look at the round now waiting and
    # its lock, where the writer takes that round: every record is written once, in
    # its thread's order, and its future resolves to its offset
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with Log.open(logdir) as log:
            with Producer(log, linger_ms=0) as producer:
                sent = send_from_threads(producer, 8, 8000, lambda t, i: b"%d:%d" % (t, i))
            assert_each_written_once_in_order(log, sent)
    finally:
        sys.setswitchinterval(old)


def test_batches_stay_atomic_within_max_message_bytes(logdir):
    # batch_size far above max_message_bytes: a round is cut into several appends,
    # each one batch of the log
    with Log.open(logdir, max_message_bytes=2000) as log:
        with Producer(log, linger_ms=60_000, batch_size=1 << 30) as producer:
            futs = {producer.send(b"v%04d" % i + b"." * 95): b"v%04d" % i + b"." * 95
                    for i in range(300)}
            keyed = {producer.send(b"k%d" % i, key=b"key"): b"k%d" % i for i in range(50)}
        assert resolved({**futs, **keyed}) == contents(log)
        assert log.metrics()["batches_appended"] >= 300 * 100 // 2000


def test_a_round_of_uneven_values_is_cut_into_few_batches_within_the_limit(logdir):
    # values of many sizes up to the limit in one round: each batch within
    # max_message_bytes (the log refuses larger ones), and not many more batches
    # than the bytes need (a cut that gave up filling ranges would fail here)
    rng = random.Random(SEED)
    print("seed", SEED)
    sizes = [rng.choice((1, 10, 100, 1000, 1900)) for _ in range(2000)]
    with Log.open(logdir, max_message_bytes=2000) as log:
        with Producer(log, linger_ms=60_000, batch_size=1 << 30) as producer:
            futs = {producer.send(b"%d." % i + b"x" * s): b"%d." % i + b"x" * s
                    for i, s in enumerate(sizes)}
        assert resolved(futs) == contents(log)
        need = sum(len(v) + 32 for v in futs.values()) // 2000 + 1
        assert need <= log.metrics()["batches_appended"] <= 2 * need


def test_topic_keyed_placement_and_sticky_keyless(tmp_path):
    keys = [b"user-%d" % i for i in range(200)]
    with Topic.open(tmp_path, "a", partitions=4) as a, Topic.open(tmp_path, "b", partitions=4) as b:
        with Producer(a, linger_ms=60_000) as producer:
            futs = [producer.send(b"v", key=k) for k in keys]
            producer.flush()
            placed = [f.result()[0] for f in futs]
            assert placed == [b.append(b"v", key=k)[0] for k in keys]
            assert len(set(placed)) == 4
            # keyless: one partition per accumulated batch, the next batch elsewhere
            first = [producer.send(b"free") for _ in range(20)]
            producer.flush()
            second = [producer.send(b"free") for _ in range(20)]
            producer.flush()
            p1 = {f.result()[0] for f in first}
            p2 = {f.result()[0] for f in second}
            assert len(p1) == 1 and len(p2) == 1 and p1 != p2
            explicit = producer.send(b"here", key=b"user-1", partition=3)
        assert explicit.result()[0] == 3
        for f in futs + first + second + [explicit]:
            p, off = f.result()
            assert a.partition(p).iter(off, off + 1).__next__().offset == off


def test_bad_input_is_refused_by_send_and_nothing_is_written(tmp_path):
    def boom(v: object) -> bytes:
        raise RuntimeError("serializer failed")
    log = Log.open(tmp_path / "log", max_message_bytes=1000)
    topic = Topic.open(tmp_path, "t", partitions=2)
    with log, topic, Producer(log, linger_ms=0, max_buffer_bytes=5000) as p, \
            Producer(topic, linger_ms=0) as tp, Producer(log, value_serializer=boom) as bad:
        cases = [
            (TypeError, lambda: p.send("text")),
            (TypeError, lambda: p.send(b"v", key="text")),
            (TypeError, lambda: p.send(b"v", headers=[("k", "not bytes")])),
            (TypeError, lambda: p.send(b"v", headers={"k": b"v"})),
            (TypeError, lambda: p.send(b"v", timestamp="now")),
            (TypeError, lambda: p.send(b"v", timestamp=True)),
            (ValueError, lambda: p.send(b"v", timestamp=-1)),
            (ValueError, lambda: p.send(b"v", timestamp=5)),     # seconds, not ms: window
            (MessageTooLargeError, lambda: p.send(b"x" * 1001)),
            (MessageTooLargeError, lambda: p.send(b"x" * 600, key=b"k" * 600)),
            (InvalidConfigError, lambda: p.send(b"v", partition=1)),
            (TypeError, lambda: p.send(b"v", partition="0")),
            (InvalidConfigError, lambda: tp.send(b"v", partition=2)),
            (InvalidConfigError, lambda: tp.send(b"v", partition=-1)),
            (TypeError, lambda: tp.send(b"v", key=5)),
            (RuntimeError, lambda: bad.send({"a": 1})),
        ]
        for exc, call in cases:
            with pytest.raises(exc):
                call()
        p.flush()
        tp.flush()
        bad.flush()
        assert log.end_offset == 0 and topic.end_offsets() == {0: 0, 1: 0}
        # a record larger than the whole buffer could never be queued
        with Producer(log, max_buffer_bytes=100) as small:
            with pytest.raises(MessageTooLargeError):
                small.send(b"x" * 101)
        # still usable; a bytearray changed after send is written as it was sent
        buf = bytearray(b"before")
        f = p.send(b"v", key=buf, headers=[("h", bytearray(b"hv"))])
        buf[:] = b"after!"
        p.flush()
        m = next(log.iter(f.result()))
        assert (m.key, m.value, m.headers) == (b"before", b"v", ((("h", b"hv")),))


class _Once:
    """An iterable that can be iterated once (as a file or a cursor)."""

    def __init__(self, pairs):
        self._it = iter(pairs)

    def __iter__(self):
        it, self._it = self._it, iter(())
        return it


@pytest.mark.parametrize("durable", [False, True])
@pytest.mark.parametrize("target", ["log", "topic"])
def test_headers_from_any_iterable_are_kept_as_log_append_keeps_them(tmp_path, target, durable):
    names, values = ["trace", "user"], [b"t-1", b"u-2"]
    want = (("trace", b"t-1"), ("user", b"u-2"))
    makers = {"zip": lambda: zip(names, values),
              "generator": lambda: ((n, v) for n, v in zip(names, values)),
              "map": lambda: map(lambda n, v: (n, bytearray(v)), names, values),
              "iterate once": lambda: _Once(list(zip(names, values))),
              "dict items": lambda: dict(zip(names, values)).items(),
              "list": lambda: list(zip(names, values))}
    # each maker with a plain value, a keyed one, a bytearray value and a timestamp:
    # every way send() takes a record that carries headers
    shapes = {"plain": {}, "keyed": {"key": b"k"}, "bytearray": {"value": bytearray(b"ba")},
              "stamped": {"timestamp": 1_700_000_000_000}}
    with (Log.open(tmp_path / "log") if target == "log"
          else Topic.open(tmp_path / "root", "t", partitions=2)) as t, \
            Producer(t, linger_ms=0, durable=durable) as p:
        futs = {}
        for how, make in makers.items():
            for shape, kw in shapes.items():
                kw = {"value": b"v", **kw}
                futs[p.send(kw.pop("value"), headers=make(), **kw)] = (how, shape)
        p.flush()
        logs = [t] if target == "log" else [t.partition(i) for i in range(2)]
        got = {}
        for f, case in futs.items():
            part, off = (0, f.result(10)) if target == "log" else f.result(10)
            got[case] = next(logs[part].iter(off)).headers
        assert got == {case: want for case in futs.values()}
    # Log.append: the same iterables, the same headers
    with Log.open(tmp_path / "direct") as log:
        offs = {how: log.append(b"v", headers=make()) for how, make in makers.items()}
        assert {how: next(log.iter(o)).headers for how, o in offs.items()} == \
            {how: want for how in makers}


def test_options_and_targets_are_checked(tmp_path):
    with Log.open(tmp_path / "w") as log:
        for kw, exc in (({"linger_ms": -1}, InvalidConfigError), ({"batch_size": 0}, InvalidConfigError),
                        ({"max_buffer_bytes": 0}, InvalidConfigError),
                        ({"max_block_ms": 1.5}, TypeError), ({"durable": 1}, TypeError),
                        ({"value_serializer": "json"}, TypeError)):
            with pytest.raises(exc):
                Producer(log, **kw)
        with pytest.raises(TypeError):
            Producer(str(tmp_path))
        with Log.open(tmp_path / "w", readonly=True) as reader, pytest.raises(seglog.ReadOnlyError):
            Producer(reader)


def test_serializers_apply_and_none_stays_a_tombstone(logdir):
    import json
    with Log.open(logdir) as log, Producer(log, key_serializer=str.encode,
                                           value_serializer=lambda v: json.dumps(v).encode()) as p:
        a = p.send({"n": 1}, key="k")
        b = p.send(None, key="k")
        p.flush()
        got = {(m.offset, m.key, m.value) for m in log.iter()}
        assert got == {(a.result(), b"k", b'{"n": 1}'), (b.result(), b"k", None)}


def test_plain_values_meet_every_check_other_records_do(tmp_path):
    # a plain bytes value with nothing else is queued without the general checks: it
    # must meet the same limits, serializers and closed state all the same
    log = Log.open(tmp_path / "log", max_message_bytes=1000)
    topic = Topic.open(tmp_path, "t", partitions=3)
    with log, topic:
        # the largest that fits: max_message_bytes, then a smaller buffer
        for offset, (buffer, largest) in enumerate(((5000, 1000), (500, 500))):
            with Producer(log, linger_ms=0, max_buffer_bytes=buffer) as p:
                fits = p.send(b"v" * largest)
                with pytest.raises(MessageTooLargeError):
                    p.send(b"v" * (largest + 1))
                p.flush()
                assert fits.result() == offset
        # a value serializer is applied to bytes values too
        with Producer(log, linger_ms=0, value_serializer=lambda v: b"<" + v + b">") as p:
            wrapped = p.send(b"raw")
            p.flush()
            assert next(log.iter(wrapped.result())).value == b"<raw>"
        closed = Producer(log)
        closed.close()
        with pytest.raises(ProducerClosedError):
            closed.send(b"late")
        # on a topic, plain values stick to one partition per round, as keyed ones do not
        with Producer(topic, linger_ms=60_000) as tp:
            futs = [tp.send(b"v%d" % i) for i in range(20)]
            tp.flush()
            assert len({f.result()[0] for f in futs}) == 1
        assert [m.value for m in log.iter()] == [b"v" * 1000, b"v" * 500, b"<raw>"]


def test_a_failed_append_fails_exactly_its_records(logdir, monkeypatch):
    # max_message_bytes 1000 and 100-byte values: about nine records per append call;
    # the second call is refused, the others go on
    log = Log.open(logdir, max_message_bytes=1000)
    Flaky(monkeypatch, log, fail_calls={2})
    with log, Producer(log, linger_ms=60_000) as producer:
        futs = {producer.send(b"%03d" % i + b"-" * 97): b"%03d" % i + b"-" * 97 for i in range(40)}
        producer.flush()
        failed = {v for f, v in futs.items() if f.exception() is not None}
        assert failed and all(isinstance(f.exception(), LogLockedError)
                              for f, v in futs.items() if v in failed)
        assert resolved(futs) == contents(log)
        assert failed.isdisjoint(v for _, v in contents(log))
        assert failed | {v for _, v in contents(log)} == set(futs.values())


def test_log_closed_under_the_producer(logdir):
    log = Log.open(logdir)
    producer = Producer(log, linger_ms=60_000)
    early = {producer.send(b"a%d" % i): b"a%d" % i for i in range(10)}
    producer.flush()
    log.close()
    late = [producer.send(b"b%d" % i) for i in range(10)]
    producer.flush()
    assert all(isinstance(f.exception(), LogClosedError) for f in late)
    producer.close()
    with Log.open(logdir) as again:
        assert resolved(early) == contents(again)


def test_storage_error_fails_exactly_the_records_not_written(logdir):
    log = Log.open(logdir, segment_bytes=4096, flush_ms=None, retention_check_ms=None)
    futs: dict[cf.Future, bytes] = {}
    with FaultyFS(logdir) as fs, Producer(log, linger_ms=60_000) as producer:
        fs.fail("open", nth=1, times=None)      # the next roll cannot create its files
        for i in range(200):
            v = b"%04d" % i + b"#" * 196
            futs[producer.send(v)] = v
            if i % 10 == 9:
                producer.flush()
        producer.flush()
    failed = [f for f in futs if f.exception() is not None]
    assert failed and all(isinstance(f.exception(), StorageError) for f in failed)
    ok = resolved(futs)
    assert ok and ok == contents(log)
    assert {futs[f] for f in failed}.isdisjoint(v for _, v in ok)
    seglog.testing.abandon(log)
    with Log.open(logdir) as again:
        assert contents(again) == ok


def test_durable_futures_never_run_ahead_of_the_fsync(logdir):
    ahead: list[int] = []
    with Log.open(logdir, flush_ms=None) as log, Producer(log, linger_ms=1, durable=True) as p:
        def check(f: cf.Future) -> None:
            if f.exception() is None and log.flushed_offset <= f.result():
                ahead.append(f.result())

        def work(t: int) -> None:
            for i in range(500):
                p.send(b"%d-%d" % (t, i)).add_done_callback(check)
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        p.flush(timeout=60)
        assert ahead == []
        assert log.flushed_offset == log.end_offset == 2000
        # few fsyncs for many records: group commit
        assert log.metrics()["flushes"] < 2000 // 4


def test_a_durable_producer_appends_while_its_fsync_runs_and_resolves_after_it(logdir):
    """The fsync of a durable producer's round runs beside the writer (its syncer
    thread): the next rounds are appended meanwhile, and no future resolves before
    an fsync covers it."""
    with Log.open(logdir, flush_ms=None) as log:
        inside, release = threading.Event(), threading.Event()
        real = log.flush

        def held_flush() -> int:
            inside.set()
            assert release.wait(30), "the test never let the fsync go on"
            return real()
        log.flush = held_flush                     # type: ignore[method-assign]
        with Producer(log, linger_ms=1, durable=True) as p:
            first = p.send(b"first")
            assert inside.wait(30), "the first round was never fsynced"
            more = [p.send(b"more%d" % i) for i in range(100)]
            # appended while the fsync waits
            assert log.wait(100, timeout=30), f"only {log.end_offset} appended"
            assert log.flushed_offset == 0
            assert not first.done() and not any(f.done() for f in more)
            release.set()
            assert [f.result(30) for f in [first, *more]] == list(range(101))
            assert log.flushed_offset == 101


def test_records_an_fsync_failed_for_resolve_once_a_later_flush_covers_them(logdir,
                                                                          monkeypatch):
    """An fsync that another writer's lock stood in the way of leaves its records
    owed; the next round's fsync covers them and they resolve then, without
    waiting for the syncer's retry (which comes only after ``_RETRY_S`` without a
    round: with rounds coming steadily, never; here an hour)."""
    monkeypatch.setattr(seglog.producer, "_RETRY_S", 3600.0)
    with Log.open(logdir, flush_ms=None) as log:
        real, calls, refused = log.flush, [], threading.Event()

        def flaky_flush() -> int:
            calls.append(1)
            if len(calls) == 1:
                refused.set()
                raise LogLockedError("another writer held the lock (injected)")
            return real()
        log.flush = flaky_flush                    # type: ignore[method-assign]
        p = Producer(log, linger_ms=1, durable=True)
        try:
            first = p.send(b"first")
            assert refused.wait(30), "the first round was never fsynced"
            second = p.send(b"second")
            p.flush(timeout=10)
            assert (first.result(0), second.result(0)) == (0, 1)
            assert log.flushed_offset == 2
        finally:
            p.close(timeout=10)


def test_durable_fsync_failure_fails_the_unflushed_records(logdir):
    log = Log.open(logdir, flush_ms=None, retention_check_ms=None, segment_bytes=1 << 16)
    with FaultyFS(logdir) as fs, Producer(log, linger_ms=60_000, durable=True) as p:
        first = [p.send(b"one%d" % i) for i in range(5)]
        p.flush()
        fs.fail("fsync", nth=1, times=None)
        second = [p.send(b"two%d" % i) for i in range(5)]
        p.flush()
    assert [f.result() for f in first] == list(range(5))
    # written, not made durable: the error says where they are, and why
    errors = [f.exception() for f in second]
    assert all(isinstance(e, seglog.NotDurableError) for e in errors), errors
    assert [e.offsets for e in errors] == [range(5, 10)] * 5
    assert all(isinstance(e.__cause__, StorageError) for e in errors)
    assert log.flushed_offset == 5
    seglog.testing.abandon(log)


def test_a_full_buffer_blocks_send_then_times_out(logdir, monkeypatch):
    # the writer is stuck (an append waits for the gate, as on another writer's lock)
    log = Log.open(logdir)
    gate = threading.Event()
    Flaky(monkeypatch, log, gate=gate)
    with log, Producer(log, linger_ms=60_000, max_buffer_bytes=1000, max_block_ms=200) as p:
        queued = [p.send(b"%02d" % i + b"." * 98) for i in range(10)]     # 1000 bytes
        t0 = time.monotonic()
        with pytest.raises(ProducerTimeoutError):
            p.send(b"refused" + b"." * 93)
        assert time.monotonic() - t0 >= 0.19
        assert not any(f.done() for f in queued)
        gate.set()
        later = p.send(b"later")
        p.flush()
        assert [m.value for m in log.iter()][-1] == b"later" and later.result() == 10
        assert b"refused" not in b"".join(m.value for m in log.iter())


def test_a_blocked_sender_makes_the_writer_write_at_once(logdir):
    # linger is a minute: only the waiting sender can make the writer free room
    with Log.open(logdir) as log, Producer(log, linger_ms=60_000, max_buffer_bytes=1000,
                                           max_block_ms=30_000) as p:
        queued = [p.send(b"%02d" % i + b"." * 98) for i in range(10)]
        t0 = time.monotonic()
        later = p.send(b"later")
        assert time.monotonic() - t0 < 30
        assert [f.result(timeout=30) for f in queued] == list(range(10))
        p.flush()
        assert later.result() == 10


@pytest.mark.parametrize("target", ["log", "topic"])
def test_batch_size_bytes_waiting_make_the_writer_write_at_once(tmp_path, target):
    # linger is a minute: only batch_size bytes waiting in one partition make the
    # writer write before a flush; plain values, keyed records and the first record
    # of a round all count (they are queued three different ways)
    with contextlib.ExitStack() as stack:
        if target == "log":
            log = stack.enter_context(Log.open(str(tmp_path / "log")))
            p = stack.enter_context(Producer(log, linger_ms=60_000, batch_size=1000))
            keyed = {"partition": 0}
        else:
            topic = stack.enter_context(Topic.open(tmp_path, "t", partitions=3))
            p = stack.enter_context(Producer(topic, linger_ms=60_000, batch_size=1000))
            # a key of the sticky partition (0 for a new producer's first round)
            key = next(k for k in (b"k%d" % i for i in range(100))
                       if topic.partition_for(k) == 0)
            keyed = {"key": key}
        futs = [p.send(b"a" * 100) for _ in range(4)]           # 400 bytes
        futs.append(p.send(b"b" * 100, **keyed))                # 500 and more
        futs += [p.send(b"c" * 100) for _ in range(2)]          # 700 and more, < 1000
        assert not any(f.done() for f in futs)
        # 300 more: 1000 only if every way counted its bytes
        futs.append(p.send(b"d" * 300))
        offsets = [f.result(timeout=30) for f in futs]
        assert offsets == (list(range(8)) if target == "log" else [(0, i) for i in range(8)])


def test_flush_and_close_with_a_stuck_writer(logdir, monkeypatch):
    log = Log.open(logdir)
    gate = threading.Event()
    Flaky(monkeypatch, log, gate=gate)
    p = Producer(log, linger_ms=0)
    f = p.send(b"stuck")
    with pytest.raises(ProducerTimeoutError):
        p.flush(timeout=0.1)
    with pytest.raises(ProducerTimeoutError):
        p.close(timeout=0.1)
    with pytest.raises(ProducerClosedError):
        p.send(b"after close")
    gate.set()
    p.close()
    p.close()       # idempotent
    assert f.result() == 0 and [m.value for m in log.iter()] == [b"stuck"]
    log.close()


def test_flush_waits_for_everything_sent_before(logdir):
    with Log.open(logdir) as log:
        p = Producer(log, linger_ms=60_000)
        futs = [p.send(b"%d" % i) for i in range(100)]
        assert not any(f.done() for f in futs)
        p.flush()
        assert [f.result() for f in futs] == list(range(100))
        with p:
            g = p.send(b"last")
        assert p.closed and g.result() == 100        # the with block's close flushed


def test_cancelled_futures_are_not_written(logdir):
    with Log.open(logdir) as log, Producer(log, linger_ms=60_000) as p:
        futs = [p.send(b"%d" % i) for i in range(10)]
        assert futs[3].cancel() and futs[7].cancel()
        p.flush()
        assert futs[3].cancelled() and futs[7].cancelled()
        assert [m.value for m in log.iter()] == [b"%d" % i for i in range(10) if i not in (3, 7)]
        assert [f.result() for i, f in enumerate(futs) if i not in (3, 7)] == list(range(8))
        assert not futs[0].cancel()         # written: too late


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_refuses_the_parents_producer(logdir):
    with Log.open(logdir) as log, Producer(log) as p:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                try:
                    p.send(b"child")
                except ProducerClosedError as e:
                    code = 0 if "forked" in str(e) else 2
                p.close()           # a no-op in the child
            finally:
                os.write(w, bytes([code]))
                os._exit(0)
        os.close(w)
        ready, _, _ = select.select([r], [], [], 30)
        assert ready and os.read(r, 1) == b"\0"
        os.close(r)
        os.waitpid(pid, 0)
        assert p.send(b"parent").result(timeout=30) == 0
    with Log.open(logdir) as again:
        assert [m.value for m in again.iter()] == [b"parent"]


_CHILD = textwrap.dedent(r"""
    import os, sys, threading
    import seglog
    log = seglog.Log.open(sys.argv[1], flush_ms=None)
    producer = seglog.Producer(log, linger_ms=2)
    out = os.fdopen(1, "w", buffering=1)
    lock = threading.Lock()
    def report(f, v):
        with lock:
            out.write("%d %s\n" % (f.result(), v.hex()))
    def work(t):
        i = 0
        while True:
            v = b"%d:%d:" % (t, i) + os.urandom(i % 50)
            producer.send(v).add_done_callback(lambda f, v=v: report(f, v))
            i += 1
    for t in range(4):
        threading.Thread(target=work, args=(t,), daemon=True).start()
    threading.Event().wait()
""")


def test_sigkill_after_futures_resolved_loses_nothing(logdir):
    env = dict(os.environ, PYTHONPATH=SRC)
    child = subprocess.Popen([sys.executable, "-c", _CHILD, logdir], stdout=subprocess.PIPE,
                             env=env)
    got: dict[int, bytes] = {}
    buf = b""
    deadline = time.monotonic() + 60
    try:
        while len(got) < 3000:
            left = deadline - time.monotonic()
            assert left > 0, "the child reported too few resolved futures in time"
            ready, _, _ = select.select([child.stdout], [], [], left)
            if not ready:
                continue
            chunk = os.read(child.stdout.fileno(), 1 << 16)
            assert chunk, f"the child ended: {child.wait()}"
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                off, v = line.split()
                got[int(off)] = bytes.fromhex(v.decode())
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        child.stdout.close()
    with Log.open(logdir) as log:
        stored = {m.offset: m.value for m in log.iter()}
    assert {o: stored.get(o) for o in got} == got


def test_a_producer_left_open_is_flushed_at_exit(logdir):
    script = ("import sys, seglog\n"
              "log = seglog.Log.open(sys.argv[1])\n"
              "p = seglog.Producer(log, linger_ms=600_000)\n"
              "p.send(b'kept')\n")
    subprocess.run([sys.executable, "-c", script, logdir], check=True, timeout=60,
                   env=dict(os.environ, PYTHONPATH=SRC))
    with Log.open(logdir) as log:
        assert [m.value for m in log.iter()] == [b"kept"]

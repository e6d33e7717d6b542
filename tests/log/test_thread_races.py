"""Races between threads of one process on one ``Log``, each forced to happen exactly:
a hook at the point where a switch of the GIL would let the other thread in (a race
point the code names, ``seglog.testing.at``, or a public function the library calls
there, patched) runs the other thread to its end there, then lets the first go on. Checked: ``check_writable(log)`` during a ``close()`` raises
``LogClosedError``; ``flushed_offset`` beside a close returns an int; an iteration
whose segment grew and rolled after it measured it goes on and yields every offset;
a readonly log refreshed after its close leaves no file open into the log
directory; ``read()`` and ``iter()`` of an offset retention removed after the start
check raise ``OffsetOutOfRangeError`` rather than return later messages.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable

import pytest

from seglog import Log, LogClosedError, OffsetOutOfRangeError
from seglog._log import live as _live, local_log
from seglog import recovery
from seglog.log import check_writable
from seglog.testing import at

from helpers import fds_into

DEADLINE = 30.0


class Outcome:
    """What a function run in another thread did: ``ended`` once it returned or
    raised, with its ``value`` or ``error``."""

    def __init__(self) -> None:
        self.ended = False
        self.value: Any = None
        self.error: BaseException | None = None


def in_another_thread(fn: Callable[[], Any], name: str | None = None) -> Outcome:
    """Run ``fn`` in a new thread and wait (up to DEADLINE) for it to end."""
    out = Outcome()

    def run() -> None:
        try:
            out.value = fn()
        except BaseException as e:          # handed to the test
            out.error = e
        out.ended = True
    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    t.join(DEADLINE)
    return out


def test_check_writable_while_another_thread_closes_the_log(tmp_path, monkeypatch):
    """A close marks the log not writable first, then seals it (fsyncs), and only then
    marks it closed. ``check_writable(log)`` from another thread in between must raise
    ``LogClosedError``, not take the log for one an I/O error poisoned (nor fail an
    assertion). Forced: writing the clean-close marker, inside that window, lets
    another thread call it; then a few closes beside a thread calling it in a loop."""
    log = Log.open(str(tmp_path / "log"), flush_ms=None, retention_check_ms=None)
    log.append(b"x")
    real = recovery.write_marker
    during: list[Outcome] = []

    def write_marker(*a: Any, **k: Any) -> None:
        if not during:
            during.append(in_another_thread(lambda: check_writable(log)))
        real(*a, **k)
    with monkeypatch.context() as m:
        m.setattr(recovery, "write_marker", write_marker)
        log.close()
    assert len(during) == 1, "the close wrote no marker: the race was not forced"
    assert during[0].ended
    assert isinstance(during[0].error, LogClosedError), repr(during[0].error)

    # the same without a hook: whatever the interleaving, only LogClosedError
    for i in range(20):
        lg = Log.open(str(tmp_path / f"n{i}"), flush_ms=None, retention_check_ms=None)
        lg.append(b"x")
        stop = threading.Event()
        got: list[BaseException] = []

        def spin(lg: Log = lg, stop: threading.Event = stop,
                 got: list[BaseException] = got) -> None:
            while not stop.is_set():
                try:
                    check_writable(lg)
                except BaseException as e:   # checked below
                    got.append(e)
                    return
        t = threading.Thread(target=spin, daemon=True)
        t.start()
        lg.close()
        stop.set()
        t.join(DEADLINE)
        assert not t.is_alive()
        assert all(isinstance(e, LogClosedError) for e in got), got


def test_flushed_offset_while_another_thread_closes_a_multi_writer_log(tmp_path):
    """One of several writers reads its flushed offset from the shared header without
    the append lock, after checking the log is not closed. A close in another thread
    between the check and the read unmaps the header: ``flushed_offset`` must still
    return an int (the last one it knew), not raise ``ValueError``. Forced: the header
    check the read makes first lets another thread close the log."""
    log = Log.open(str(tmp_path / "log"), multi_writer=True, flush_ms=None,
                   retention_check_ms=None)
    log.append(b"x")
    assert isinstance(log.flushed_offset, int)
    closer: list[Outcome] = []

    def close_first() -> None:
        if not closer:
            closer.append(in_another_thread(log.close))
    with at("writers.flushed", close_first):
        flushed = log.flushed_offset
    assert len(closer) == 1, "flushed_offset read no header: the race was not forced"
    assert closer[0].ended and closer[0].error is None, repr(closer[0].error)
    assert log.closed
    assert isinstance(flushed, int) and flushed >= 0, flushed


def _append_then_roll(log: Log) -> list[int]:
    """Append one record that fits the active segment, then more until the log rolls;
    the offsets appended."""
    offsets = [log.append(b"b" * 100)]
    n = len(log.segments)
    for _ in range(1000):
        if len(log.segments) != n:
            return offsets
        offsets.append(log.append(b"c" * 100))
    raise AssertionError("the log never rolled")


def test_an_iteration_whose_segment_grows_and_rolls_after_it_measured_it(tmp_path,
                                                                        monkeypatch):
    """An iteration at the end of the active segment measures the segment's size, then
    reads the segment list. If another thread appends to that segment and rolls in
    between, the reader sees a next segment while it holds the old size: it must read
    what was added and go on (every offset, densely), not report the records between
    as missing (``CorruptRecordError``). Forced: the log start the reader looks up in
    between lets another thread append and roll first."""
    log = Log.open(str(tmp_path / "log"), segment_bytes=1024, flush_ms=None,
                   retention_check_ms=None)
    for _ in range(3):
        log.append(b"a" * 100)
    it = log.iter()
    first = [next(it).offset for _ in range(3)]       # the reader is at the end now
    real = local_log.LocalLog.start
    writer: list[Outcome] = []

    def start(self: local_log.LocalLog) -> int:
        if not writer and sys._getframe(1).f_code.co_name == "_step":
            writer.append(in_another_thread(lambda: _append_then_roll(log)))
        return real.fget(self)              # type: ignore[attr-defined]
    with monkeypatch.context() as m:
        m.setattr(local_log.LocalLog, "start", property(start))
        rest = [msg.offset for msg in it]
    assert len(writer) == 1, "the iteration looked up no start: the race was not forced"
    assert writer[0].ended and writer[0].error is None, repr(writer[0].error)
    assert len(log.segments) >= 2
    assert first + rest == [0, 1, 2] + writer[0].value
    assert first + rest == list(range(log.end_offset))
    log.close()


def test_a_readonly_iteration_whose_segment_another_thread_refreshes_grown_and_rolled(
        tmp_path, monkeypatch):
    """Two threads share one readonly log. One iterates to the end of the live segment:
    it measures the segment, then reads the segment list. The other thread's refresh
    in between (the writer appended and rolled) publishes the grown segment and its
    successor: the iteration must read what was added and go on (every offset,
    densely), not report damage. Forced: the log start the iterating thread looks up
    in between lets the writer append and roll and the other thread refresh first."""
    path = str(tmp_path / "log")
    w = Log.open(path, segment_bytes=1024, flush_ms=None, retention_check_ms=None)
    for _ in range(3):
        w.append(b"a" * 100)
    r = Log.open(path, readonly=True)
    it = r.iter()
    first = [next(it).offset for _ in range(3)]
    reader = threading.current_thread()
    real = _live.LiveLog.start
    added: list[int] = []
    refresher: list[Outcome] = []

    def start(self: _live.LiveLog) -> int:
        if not refresher and threading.current_thread() is reader \
                and sys._getframe(1).f_code.co_name == "_step":
            added.extend(_append_then_roll(w))         # the writer (another process)
            refresher.append(in_another_thread(lambda: r.end_offset))   # a refresh
        return real.fget(self)              # type: ignore[attr-defined]
    with monkeypatch.context() as m:
        m.setattr(_live.LiveLog, "start", property(start))
        rest = [msg.offset for msg in it]
    assert len(refresher) == 1, "the iteration looked up no start: the race was not forced"
    assert refresher[0].ended and refresher[0].error is None, repr(refresher[0].error)
    assert first + rest == [0, 1, 2] + added
    assert first + rest == list(range(w.end_offset))
    r.close()
    w.close()


def test_a_readonly_log_refreshed_by_one_thread_while_another_closes_it(tmp_path):
    """A readonly log's refresh checks that the log is open, then takes the lock it
    re-lists the directory under; a close takes the same lock and closes every file.
    If the close gets the lock first, the refresh must not reopen the last segment's
    files after it: nothing would close them again. Forced: the lock lets a closing
    thread go first when the refreshing thread asks for it; after that no descriptor
    into the log directory is left open."""
    path = str((tmp_path / "log").resolve())
    w = Log.open(path, segment_bytes=1024, flush_ms=None, retention_check_ms=None)
    for _ in range(20):
        w.append(b"a" * 100)
    r = Log.open(path, readonly=True)
    assert r.end_offset == 20
    w.append(b"b" * 100)                    # something new for the refresh to find
    w.close()                               # the writer's descriptors out of the count
    assert fds_into(path), "the reader holds no file open: nothing to check"
    closer: list[Outcome] = []

    def close_first() -> None:
        if not closer and threading.current_thread().name == "refresher":
            closer.append(in_another_thread(r.close))
    with at("reader.refresh", close_first):
        refresh = in_another_thread(lambda: r.end_offset, name="refresher")
    assert refresh.ended
    assert len(closer) == 1, "the refresh took no lock: the race was not forced"
    assert closer[0].ended and closer[0].error is None, repr(closer[0].error)
    assert refresh.error is None or isinstance(refresh.error, LogClosedError), \
        repr(refresh.error)
    assert r.closed
    assert fds_into(path) == []


def test_read_and_iter_of_an_offset_retention_removes_after_the_start_check(tmp_path):
    """``read(offset)`` and ``iter(offset)`` check the offset against the log start,
    then find its segment in the segment list. If retention in another thread deletes
    that segment in between, they must raise ``OffsetOutOfRangeError`` (the offset is
    gone), not return messages from the new start. Forced: the call from the check to
    the lookup lets another thread run retention first."""
    log = Log.open(str(tmp_path / "log"), segment_bytes=1024, retention_ms=1000,
                   flush_ms=None, retention_check_ms=None, file_delete_delay_ms=0)
    for i in range(40):
        log.append(b"v%03d" % i + b"x" * 96)
    later = int(time.time() * 1000) + 3_600_000        # every sealed segment is due
    retention: list[Outcome] = []

    main = threading.current_thread()

    def retention_first() -> None:
        if not retention and threading.current_thread() is main:
            retention.append(in_another_thread(
                lambda: log.enforce_retention(now_ms=later)))

    # read()
    with at("read.lookup", retention_first):
        with pytest.raises(OffsetOutOfRangeError):
            got = log.read(0)
            pytest.fail(f"read(0) returned offsets {[msg.offset for msg in got]}")
    assert len(retention) == 1, "read() did not get to its lookup: the race was not forced"
    assert retention[0].ended and retention[0].error is None, repr(retention[0].error)
    assert log.start_offset > 0

    # iter()
    for i in range(40):
        log.append(b"w%03d" % i + b"x" * 96)
    lo = log.start_offset
    retention.clear()
    with at("read.lookup", retention_first):
        with pytest.raises(OffsetOutOfRangeError):
            offsets = [msg.offset for msg in log.iter(lo)]
            pytest.fail(f"iter({lo}) yielded offsets {offsets[0]}..{offsets[-1]}")
    assert len(retention) == 1, "iter() did not get to its lookup: the race was not forced"
    assert retention[0].ended and retention[0].error is None, repr(retention[0].error)
    assert log.start_offset > lo
    log.close()

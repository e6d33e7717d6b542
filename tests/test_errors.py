"""One test per error of the spec's list: the right type, and nothing written."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import seglog
from seglog import Log, Record


def log_bytes(path: str) -> dict[str, int]:
    """Sizes of the segment data a failed call must not have changed."""
    out = {}
    for name in sorted(os.listdir(path)):
        if name.endswith(".log"):
            out[name] = os.path.getsize(os.path.join(path, name))
    return out


def snapshot(log: Log):
    return (log.end_offset, [s.size for s in log.segments], [m for m in log.iter()])


def test_all_errors_derive_from_seglog_error():
    for e in (seglog.OffsetOutOfRangeError, seglog.MessageTooLargeError, seglog.CorruptRecordError,
              seglog.LogLockedError, seglog.LogClosedError, seglog.InvalidConfigError,
              seglog.StorageError, seglog.ReadOnlyError):
        assert issubclass(e, seglog.SeglogError)


def test_offset_out_of_range(logdir):
    with Log.open(logdir) as log:
        log.append(b"a")
        before = snapshot(log)
        for bad in (-1, 2, 10**12):
            with pytest.raises(seglog.OffsetOutOfRangeError):
                log.read(bad)
            with pytest.raises(seglog.OffsetOutOfRangeError):
                log.iter(bad)
        assert snapshot(log) == before


def test_message_too_large_writes_nothing(logdir):
    with Log.open(logdir, max_message_bytes=100) as log:
        log.append(b"ok")
        before = snapshot(log)
        with pytest.raises(seglog.MessageTooLargeError):
            log.append(b"x" * 101)
        with pytest.raises(seglog.MessageTooLargeError):
            log.append(b"x" * 60, key=b"k" * 41)
        with pytest.raises(seglog.MessageTooLargeError):
            log.append(b"x", headers=[("h", b"y" * 100)])
        # one bad record rejects the whole batch
        with pytest.raises(seglog.MessageTooLargeError):
            log.append_batch([b"fine", b"x" * 101])
        with pytest.raises(seglog.MessageTooLargeError):
            log.append_batch([Record(b"fine"), Record(b"x" * 101)])
        assert snapshot(log) == before
        assert log.append(b"x" * 100) == 1  # the bound itself is allowed


def test_type_and_value_errors_write_nothing(logdir):
    with Log.open(logdir) as log:
        log.append(b"ok")
        before = snapshot(log)
        for call in (lambda: log.append("text"),
                     lambda: log.append(123),
                     lambda: log.append(b"v", key="k"),
                     lambda: log.append(b"v", headers=[("k", "str-value")]),
                     lambda: log.append(b"v", headers=[(b"bytes-key", b"v")]),
                     lambda: log.append(b"v", headers="nope"),
                     lambda: log.append(b"v", timestamp="now"),
                     lambda: log.append(b"v", timestamp=1.5),
                     lambda: log.append_batch([b"fine", "text"]),
                     lambda: log.append_batch([b"fine", 7]),
                     lambda: log.append_batch([Record(b"a", timestamp=True)]),
                     lambda: log.read("0"),
                     lambda: log.read(0, max_bytes=None)):
            with pytest.raises(TypeError):
                call()
        for call in (lambda: log.append(b"v", timestamp=-1),
                     lambda: log.append(b"v", timestamp=2**63),
                     lambda: log.append_batch([Record(b"a", timestamp=-5)]),
                     lambda: log.read(0, max_bytes=0)):
            with pytest.raises(ValueError):
                call()
        assert snapshot(log) == before


def test_corrupt_record_on_read(logdir):
    with Log.open(logdir) as log:
        log.append_batch([b"hello" * 10] * 5)
        path = log.segments[0].path
    with open(path, "r+b") as f:
        f.seek(60)
        b = f.read(1)
        f.seek(60)
        f.write(bytes([b[0] ^ 0xFF]))
    reader = Log.open(logdir, readonly=True)
    with pytest.raises(seglog.CorruptRecordError) as ei:
        list(reader.read(0))
    assert ei.value.path == path and ei.value.position == 0 and ei.value.offset == 0
    with pytest.raises(seglog.CorruptRecordError):
        reader.read(0).validate()


def test_corrupt_record_on_iter_names_file_position_and_offset(logdir):
    with Log.open(logdir) as log:
        for i in range(40):
            log.append_batch([bytes([i]) * 300] * 10)
        seg = log.segments[0]
        path = seg.path
        second_last = [p for p, _ in seg.batches()][-2]
    with open(path, "r+b") as f:
        f.seek(second_last + 100)
        b = f.read(1)
        f.seek(second_last + 100)
        f.write(bytes([b[0] ^ 0x01]))
    reader = Log.open(logdir, readonly=True)
    seen = []
    with pytest.raises(seglog.CorruptRecordError) as ei:
        for m in reader.iter():
            seen.append(m.offset)
    assert seen == list(range(380))      # every message before the damaged batch, once
    assert (ei.value.path, ei.value.position, ei.value.offset) == (path, second_last, 380)


def test_log_locked_in_this_process(logdir):
    with Log.open(logdir) as log:
        log.append(b"a")
        with pytest.raises(seglog.LogLockedError):
            Log.open(logdir)
        assert log.append(b"b") == 1   # the first writer is unaffected
    with Log.open(logdir) as again:   # released on close
        assert again.end_offset == 2


def test_log_locked_from_another_process(logdir):
    with Log.open(logdir):
        code = (f"import seglog, sys\n"
                f"try:\n    seglog.Log.open({logdir!r})\nexcept seglog.LogLockedError:\n"
                f"    sys.exit(7)\nsys.exit(0)\n")
        rc = subprocess.run([sys.executable, "-c", code], timeout=60).returncode
        assert rc == 7


def test_log_closed(logdir):
    log = Log.open(logdir)
    log.append(b"a")
    log.close()
    for call in (lambda: log.append(b"x"), lambda: log.append_batch([b"x"]),
                 lambda: log.read(0), lambda: log.iter(), lambda: log.flush(),
                 lambda: log.offset_for_time(0), lambda: log.wait(5)):
        with pytest.raises(seglog.LogClosedError):
            call()
    assert log_bytes(logdir) == {"00000000000000000000.log": log.segments[0].size}


def test_invalid_config(logdir):
    for kw in ({"segment_byte": 100}, {"segment_bytes": 10}, {"segment_bytes": "big"},
               {"flush_ms": 0}, {"flush_messages": -1}, {"cleanup_policy": "keep"},
               {"compression": "gzip"}, {"min_cleanable_dirty_ratio": 1.5},
               {"retention_ms": -2}, {"index_interval_bytes": True},
               {"max_index_bytes": 8}, {"max_message_bytes": 0}):
        with pytest.raises(seglog.InvalidConfigError):
            Log.open(logdir, **kw)
    assert not os.path.exists(logdir)   # nothing created
    with Log.open(logdir, flush_ms=None, retention_ms=None, segment_ms=None,
                  cleanup_policy="compact,delete", compression="lz4"):
        pass


def test_storage_error_after_failed_fsync(logdir, monkeypatch):
    log = Log.open(logdir, flush_ms=None)
    log.append(b"a")
    real = os.fsync

    def failing(fd):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(seglog.StorageError):
        log.flush()
    assert log.flushed_offset == 0          # never reported durable
    monkeypatch.setattr(os, "fsync", real)
    end = log.end_offset
    with pytest.raises(seglog.StorageError):
        log.append(b"b")
    with pytest.raises(seglog.StorageError):
        log.append_batch([b"c"])
    with pytest.raises(seglog.StorageError):
        log.flush()
    assert log.end_offset == end
    log.close()
    with Log.open(logdir) as again:          # reopening clears it
        assert again.end_offset == 1
        assert again.append(b"b") == 1


def test_storage_error_on_full_disk(logdir, monkeypatch):
    log = Log.open(logdir, flush_ms=None, max_message_bytes=32 << 20)
    log.append(b"a")

    def full(fd, offset, length):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(seglog.StorageError):
        log.append(b"x" * 20_000_000)       # past the reserved blocks
    monkeypatch.undo()
    assert log.end_offset == 1
    log.close()
    with Log.open(logdir) as again:
        assert [m.value for m in again.iter()] == [b"a"]

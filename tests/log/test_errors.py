"""One test per error of the spec's list: the right type, and nothing written."""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys

import pytest

import seglog
from seglog import Log, Record, consumer_group, repair, spark


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
              seglog.StorageError, seglog.ReadOnlyError, seglog.NotALogError,
              seglog.CommitFailedError):
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


# -- paths that cannot be a log: a typed error, and nothing touched ---------------------

def _tree(root) -> dict[str, object]:
    """Every entry under ``root``: a file's bytes' hash, a link's target, or "dir"."""
    out: dict[str, object] = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            elif os.path.isdir(p):
                out[rel] = "dir"
            else:
                with open(p, "rb") as f:
                    out[rel] = hashlib.sha256(f.read()).hexdigest()
    return out


def _bad_path(tmp_path, kind: str) -> str:
    """A path of the given kind beside a regular file holding some bytes."""
    f = tmp_path / "data.bin"
    f.write_bytes(b"not a log\n" * 100)
    if kind == "file":
        return str(f)
    if kind == "link_to_file":
        os.symlink(f, tmp_path / "link")
        return str(tmp_path / "link")
    if kind == "dangling_link":
        os.symlink(tmp_path / "gone", tmp_path / "link")
        return str(tmp_path / "link")
    if kind == "through_file":
        return str(f / "log")
    raise AssertionError(kind)


PATH_ENTRIES = {
    "Log.open": lambda p: Log.open(p),
    "Log.open readonly": lambda p: Log.open(p, readonly=True),
    "Topic.open": lambda p: seglog.Topic.open(p, "t", partitions=2),
    "Topic.open readonly": lambda p: seglog.Topic.open(p, "t", readonly=True),
    "Consumer": lambda p: seglog.Consumer(p, "g", topics=["t"]),
    "describe_group": lambda p: seglog.describe_group(p, "g"),
    "commit_offsets": lambda p: consumer_group.commit_offsets(p, "g", {}),
    "committed_offsets": lambda p: consumer_group.committed_offsets(p, "g"),
    "repair.check": lambda p: repair.check(p),
    "spark.offset_ranges": lambda p: spark.offset_ranges(p, ["t"]),
}


@pytest.mark.parametrize("kind", ["file", "link_to_file", "dangling_link", "through_file"])
@pytest.mark.parametrize("entry", sorted(PATH_ENTRIES))
def test_path_that_is_not_a_directory_is_refused_untouched(tmp_path, entry, kind):
    path = _bad_path(tmp_path, kind)
    before = _tree(tmp_path)
    with pytest.raises(seglog.NotALogError):
        PATH_ENTRIES[entry](path)
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("made", ["directory", "link"])
def test_a_directory_another_writer_makes_between_the_looks_is_opened(tmp_path, monkeypatch, made):
    """Writers opening a new log together (Celery's prefork workers at start): the
    directory may appear between ``open``'s looks at the path. Found by a run of the
    Celery example: the second look took the new directory for a link to nothing and
    ``readlink`` failed with EINVAL."""
    from seglog._runtime import files as _files
    path = tmp_path / "log"
    real_stat = os.stat
    calls = []

    def stat_then_another_writer_makes_it(p, *a, **k):
        calls.append(p)
        if len(calls) == 1:
            try:
                return real_stat(p, *a, **k)         # nothing there yet
            finally:
                if made == "directory":
                    os.mkdir(path)                   # meanwhile, another writer
                else:
                    os.mkdir(tmp_path / "elsewhere")
                    os.symlink(tmp_path / "elsewhere", path)
        return real_stat(p, *a, **k)

    monkeypatch.setattr(_files.os, "stat", stat_then_another_writer_makes_it)
    log = Log.open(str(path), multi_writer=True)
    monkeypatch.undo()
    try:
        assert log.append(b"x") == 0
    finally:
        log.close()
    assert len(calls) >= 2


# a reader of nothing creates nothing (a writer makes the directory and its parents)
@pytest.mark.parametrize("entry", ["Log.open readonly", "Topic.open readonly", "Consumer",
                                   "describe_group", "repair.check", "spark.offset_ranges"])
def test_reader_of_a_missing_path_raises_a_seglog_error_and_creates_nothing(tmp_path, entry):
    with pytest.raises(seglog.SeglogError):
        PATH_ENTRIES[entry](str(tmp_path / "no" / "such" / "log"))
    assert _tree(tmp_path) == {}


def test_readonly_open_of_a_missing_directory_is_not_a_log(tmp_path):
    with pytest.raises(seglog.NotALogError, match="no log directory"):
        Log.open(str(tmp_path / "nope"), readonly=True)


@pytest.mark.parametrize("readonly", [False, True])
def test_partition_directory_that_is_a_file_is_refused_untouched(tmp_path, readonly):
    root = str(tmp_path)
    if readonly:
        seglog.Topic.open(root, "t", partitions=2).close()
        for name in os.listdir(tmp_path / "t-1"):
            os.unlink(tmp_path / "t-1" / name)
        os.rmdir(tmp_path / "t-1")
    (tmp_path / "t-1").write_bytes(b"someone else's file")
    before = _tree(tmp_path)
    with pytest.raises(seglog.NotALogError, match="t-1"):
        seglog.Topic.open(root, "t", partitions=None if readonly else 2, readonly=readonly)
    # nothing at all: a root holding a file of someone else's is not seglog's
    assert _tree(tmp_path) == before


def test_partition_directory_that_is_a_file_under_a_seglog_root_is_refused(tmp_path):
    root = str(tmp_path)
    seglog.Topic.open(root, "other", partitions=1).close()      # the root is seglog's
    (tmp_path / "t-1").write_bytes(b"someone else's file")
    before = _tree(tmp_path)
    with pytest.raises(seglog.NotALogError, match="t-1"):
        seglog.Topic.open(root, "t", partitions=2)
    after = _tree(tmp_path)
    assert after["t-1"] == before["t-1"]
    # partition 0 was made before partition 1 was refused; the topic was never
    # recorded, so it does not exist
    assert "__topics/t.json" not in after
    with pytest.raises(seglog.InvalidConfigError, match="does not exist"):
        seglog.Topic.open(root, "t")


def _someone_elses(d) -> None:
    """A directory of a project: files, a subdirectory, dot files."""
    os.makedirs(d / "src")
    os.makedirs(d / ".git")
    (d / "notes.txt").write_text("my notes\n")
    (d / "src" / "main.py").write_text("print('hello')\n")
    (d / ".git" / "HEAD").write_text("ref: refs/heads/main\n")


@pytest.mark.parametrize("extra", ["", "a log beside", "one file"])
@pytest.mark.parametrize("readonly", [False, True])
def test_a_topic_root_holding_someone_elses_files_is_refused_untouched(tmp_path, readonly, extra):
    root = tmp_path / "project"
    _someone_elses(root)
    if extra == "a log beside":
        Log.open(str(root / "t-0")).close()     # even one named as the topic's partition
    elif extra == "one file":
        (tmp_path / "plain").mkdir()
        root = tmp_path / "plain"
        (root / "data.csv").write_text("a,b\n")
    before = _tree(tmp_path)
    with pytest.raises(seglog.NotALogError, match="nothing was changed"):
        seglog.Topic.open(str(root), "t", partitions=None if readonly else 2, readonly=readonly)
    assert _tree(tmp_path) == before
    # as Log.open refuses the same directory
    with pytest.raises(seglog.NotALogError):
        Log.open(str(root))
    assert _tree(tmp_path) == before


def test_a_topic_root_that_is_new_empty_or_seglogs_is_taken(tmp_path):
    roots = {"new": tmp_path / "a" / "b", "empty": tmp_path / "empty",
             "logs only": tmp_path / "logs", "groups": tmp_path / "groups",
             "topics": tmp_path / "topics"}
    roots["empty"].mkdir()
    Log.open(str(roots["logs only"] / "events")).close()
    (roots["groups"] / "__groups" / "g").mkdir(parents=True)
    (roots["groups"] / "README").write_text("written after seglog made the root\n")
    seglog.Topic.open(str(roots["topics"]), "other", partitions=1).close()
    (roots["topics"] / "README").write_text("written after seglog made the root\n")
    for kind, root in roots.items():
        with seglog.Topic.open(str(root), "t", partitions=2) as t:
            assert t.append(b"v", partition=1) == (1, 0), kind
        with seglog.Topic.open(str(root), "t", readonly=True) as t:
            assert t.end_offsets() == {0: 0, 1: 1}, kind


def test_a_refused_topic_creation_leaves_nothing_behind(tmp_path, monkeypatch):
    # a root that is seglog's (a group's files) with a file where partition 0 goes
    root = tmp_path / "root"
    (root / "__groups" / "g").mkdir(parents=True)
    (root / "t-0").write_bytes(b"someone else's file")
    before = _tree(tmp_path)
    with pytest.raises(seglog.NotALogError, match="t-0"):
        seglog.Topic.open(str(root), "t", partitions=2)
    assert _tree(tmp_path) == before
    # a partition held by another writer
    os.unlink(root / "t-0")
    with Log.open(str(root / "t-0")) as held:
        held.append(b"x")
        held.flush()
        before = _tree(tmp_path)
        with pytest.raises(seglog.LogLockedError):
            seglog.Topic.open(str(root), "t", partitions=2)
        assert _tree(tmp_path) == before
    # a new root, and the disk full when the first partition is made: the root too goes
    real_open = Log.open.__func__

    def full(cls, path, *a, **kw):
        if not kw.get("readonly"):
            raise seglog.StorageError(errno.ENOSPC, f"{path}: no space left (injected)")
        return real_open(cls, path, *a, **kw)
    monkeypatch.setattr(Log, "open", classmethod(full))
    before = _tree(tmp_path)
    with pytest.raises(seglog.StorageError):
        seglog.Topic.open(str(tmp_path / "new" / "root"), "t", partitions=1)
    assert _tree(tmp_path) == before
    monkeypatch.undo()
    # and a creation that then succeeds is whole
    with seglog.Topic.open(str(tmp_path / "new" / "root"), "t", partitions=1) as t:
        assert t.append(b"v") == (0, 0)
    assert sorted(os.listdir(tmp_path / "new" / "root" / "__topics")) == [".create", "t.json"]


def test_empty_paths_are_a_value_error_and_touch_nothing(tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    calls = {"Log.open": lambda p: Log.open(p),
             "Log.open multi_writer": lambda p: Log.open(p, multi_writer=True),
             "Log.open readonly": lambda p: Log.open(p, readonly=True),
             "Topic.open": lambda p: seglog.Topic.open(p, "t", partitions=1),
             "Topic.open readonly": lambda p: seglog.Topic.open(p, "t", readonly=True)}
    for name, call in calls.items():
        with pytest.raises(ValueError, match="empty"):
            call("")
        assert _tree(tmp_path) == {"cwd": "dir"}, name


def _permission_results(closed: str, readable: str) -> dict[str, str]:
    """What each opening call does on a directory the process may not enter and on
    one it may only read (modes set here, put back after)."""
    calls = {"Log.open": lambda d: Log.open(d),
             "Log.open readonly": lambda d: Log.open(d, readonly=True),
             "Topic.open": lambda d: seglog.Topic.open(d, "t", partitions=1)}
    results = {}
    os.chmod(closed, 0o000)
    os.chmod(readable, 0o555)
    try:
        for d in (closed, readable):
            for name, call in calls.items():
                try:
                    call(d).close()
                    results[f"{os.path.basename(d)} {name}"] = "opened"
                except seglog.SeglogError as e:
                    results[f"{os.path.basename(d)} {name}"] = type(e).__name__
    finally:
        os.chmod(closed, 0o755)
        os.chmod(readable, 0o755)
    return results


def _as_nobody(fn, *args):
    """``fn(*args)`` in a forked child that dropped root for uid/gid 65534 (root may
    read and write any directory: the permission checks only bite an ordinary
    user). Its result comes back as JSON; an exception fails the test with the
    child's traceback."""
    import json
    import traceback
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                       # the child: never returns into pytest
        code = 0
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            out = json.dumps({"ok": fn(*args)})
        except BaseException:
            out, code = json.dumps({"error": traceback.format_exc()}), 1
        with os.fdopen(w, "w") as f:
            f.write(out)
        os._exit(code)
    os.close(w)
    with os.fdopen(r) as f:
        got = json.loads(f.read() or '{"error": "the child wrote nothing"}')
    os.waitpid(pid, 0)
    assert "error" not in got, got.get("error")
    return got["ok"]


def test_directory_without_permission_raises_a_seglog_error_and_changes_nothing(tmp_path):
    if os.geteuid() == 0:
        # a directory an unprivileged user can reach (pytest's base is root's own)
        import tempfile
        base = tempfile.mkdtemp(prefix="seglog-perm-")
        os.chmod(base, 0o755)
    else:
        base = str(tmp_path)
    try:
        closed, readable = os.path.join(base, "closed"), os.path.join(base, "readable")
        for d in (closed, readable):
            with Log.open(d) as log:
                log.append(b"kept")
        if os.geteuid() == 0:
            for d, _, names in os.walk(base):
                for n in [d] + [os.path.join(d, x) for x in names]:
                    os.chown(n, 65534, 65534)
        before = _tree(readable)
        results = (_as_nobody(_permission_results, closed, readable) if os.geteuid() == 0
                   else _permission_results(closed, readable))
        assert results == {"closed Log.open": "StorageError",
                           "closed Log.open readonly": "StorageError",
                           "closed Topic.open": "StorageError",
                           # a reader needs no write permission; a writer does
                           "readable Log.open": "StorageError",
                           "readable Log.open readonly": "opened",
                           # a log's directory is no topic root: refused before any write
                           "readable Topic.open": "NotALogError"}
        assert _tree(readable) == before
        with Log.open(closed, readonly=True) as log:
            assert [m.value for m in log.iter()] == [b"kept"]
    finally:
        if base != str(tmp_path):
            import shutil
            shutil.rmtree(base, ignore_errors=True)

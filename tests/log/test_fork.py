"""A process forked from one with an open writer (a worker pool) must not touch it.

The child's copy of the writer refuses every operation with a clear ``SeglogError``,
its ``close()`` (also through ``with``) changes no file, it never holds the lock,
and nothing the parent acknowledged is lost.
"""

from __future__ import annotations

import hashlib
import os
import signal
import time

import pytest

import seglog
from seglog import LogLockedError, SeglogError

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _snapshot(path) -> dict[str, tuple[int, str]]:
    # sizes and contents (not mtimes: the parent's prefaulter thread faults pages of
    # the live segment in, which the kernel may count as a modification)
    out = {}
    for name in os.listdir(path):
        with open(os.path.join(path, name), "rb") as f:
            data = f.read()
        out[name] = (len(data), hashlib.sha256(data).hexdigest())
    return out


def _child(fn) -> int:
    """Run fn() in a forked child; its exit code (0: passed), within a deadline."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = fn() or 0
        except BaseException:   # noqa: BLE001 - the parent sees the exit code
            import traceback
            traceback.print_exc()
        finally:
            os._exit(code)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert not os.WIFSIGNALED(status), f"child died of signal {os.WTERMSIG(status)}"
            return os.WEXITSTATUS(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("child did not finish in 30 s")


def test_child_cannot_write_and_its_close_touches_nothing(tmp_path):
    path = tmp_path / "l"
    log = seglog.Log.open(path, segment_bytes=4096)
    acked = [log.append(b"parent %d" % i) for i in range(100)]
    log.flush()
    before = _snapshot(path)

    def child() -> int:
        for op in (lambda: log.append(b"child"), lambda: log.append_batch([b"c"]),
                   lambda: log.flush(), lambda: log.compact(), lambda: log.read(0),
                   lambda: list(log.iter())):
            try:
                op()
            except SeglogError as e:
                if "fork" not in str(e):
                    return 2          # not a clear error
            else:
                return 3              # the child wrote or read through the parent's writer
        with log:                     # a worker leaving a with block: close() runs
            pass
        log.close()
        # the lock stays the parent's
        try:
            seglog.Log.open(path)
        except LogLockedError:
            pass
        else:
            return 4
        return 0

    assert _child(child) == 0
    assert _snapshot(path) == before, "the child changed files"
    # the parent goes on writing into the same live segment, across rolls
    acked += [log.append(b"after %d" % i) for i in range(300)]
    log.close()
    with seglog.Log.open(path) as again:
        assert again.recovery is None
        assert [m.offset for m in again.iter()] == acked


def test_a_live_child_does_not_keep_the_lock(tmp_path):
    path = tmp_path / "l"
    log = seglog.Log.open(path)
    log.append(b"x")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.read(r, 1)        # stay alive until the parent has checked
        os._exit(0)
    os.close(r)
    try:
        log.close()
        # the child is alive and forked while the lock was held: the lock is free
        with seglog.Log.open(path) as again:
            assert again.end_offset == 1
    finally:
        os.write(w, b"x")
        os.close(w)
        os.waitpid(pid, 0)


def test_close_releases_the_lock_while_another_process_holds_a_copy_of_its_descriptor(tmp_path):
    """What a child forked a moment ago holds until its after-fork handler has run
    (on a loaded machine, after the parent closed): a copy of the lock's descriptor.
    Made deterministic with a process that inherits the copy and keeps it."""
    import subprocess
    import sys
    path = tmp_path / "l"
    log = seglog.Log.open(path)
    log.append(b"x")
    lock = os.path.realpath(path / ".lock")
    fds = [int(f) for f in os.listdir("/proc/self/fd")
           if os.path.realpath(f"/proc/self/fd/{f}") == lock]
    assert fds, "the writer's lock file is open"
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE, pass_fds=fds)
    try:
        log.close()
        with seglog.Log.open(path) as again:
            assert again.end_offset == 1
    finally:
        child.communicate(timeout=60)


def test_readers_opened_before_fork_keep_working(tmp_path):
    path = tmp_path / "l"
    log = seglog.Log.open(path, segment_bytes=4096)
    log.append_batch([b"m%d" % i for i in range(200)])
    reader = seglog.Log.open(path, readonly=True)
    assert reader.end_offset == 200

    def child() -> int:
        # the parent appends meanwhile; the child's reader follows it
        if not reader.wait(299, timeout=20):
            return 5
        vals = [m.value for m in reader.iter(0, 300)]
        return 0 if vals == [b"m%d" % i for i in range(300)] else 6

    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = child()
        finally:
            os._exit(code)
    log.append_batch([b"m%d" % i for i in range(200, 300)])
    deadline = time.monotonic() + 30
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.01)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise AssertionError("child reader hung")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    reader.close()
    log.close()


def test_parent_survives_child_exit_through_with_block(tmp_path):
    """The scenario that lost data: a child closes its copy, the parent keeps appending.

    Before the fix the child's close() cut the live segment back to its size and wrote
    the clean-shutdown marker; the parent's next append past that point died of
    SIGBUS. The parent here is itself a child process, so a SIGBUS fails the test.
    """
    path = tmp_path / "l"

    def parent() -> int:
        with seglog.Log.open(path, segment_bytes=1 << 20) as log:
            n = len([log.append(b"%d" % i) for i in range(1000)])

            def worker() -> int:
                with log:
                    pass
                return 0

            if _child(worker) != 0:
                return 7
            n += len([log.append(b"x" * 100) for _ in range(20_000)])
        return 0 if n == 21_000 else 8

    assert _child(parent) == 0
    with seglog.Log.open(path) as again:
        assert again.recovery is None
        assert again.end_offset == 21_000
        assert sum(1 for _ in again.iter()) == 21_000

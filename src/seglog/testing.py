"""Crash-testing helpers: simulated power loss and injected I/O errors.

For your own pytest/hypothesis crash tests, and for seglog's::

    from seglog.testing import FaultyFS

    with FaultyFS(directory) as fs:          # watches files under ``directory``
        log = seglog.Log.open(directory)
        log.append(b"x"); n = log.flush()
        crash = fs.capture()                 # the machine as it is now
        log.append(b"y")                     # not flushed
    crash.materialize(other_dir, random.Random(seed))   # the disk after a power loss
    seglog.Log.open(other_dir)               # must hold every offset below n

How it works. While active, ``FaultyFS`` wraps the ``os`` functions a storage
engine uses (``open``, ``write``, ``pwrite``, ``fsync``, ``fdatasync``,
``ftruncate``, ``truncate``, ``posix_fallocate``, ``rename``, ``replace``,
``unlink``) for paths under the watched directory:

* At each ``fsync`` of a file it records the file's bytes as durable; at each
  ``fsync`` of the directory it records the directory's names as durable.
  Writes made through a shared memory mapping are seen too (they are in the file).
* Creates, renames and unlinks since the directory's last fsync are kept as an
  ordered log; a power loss keeps a prefix of it (as a journaling file system does).
* ``capture()`` snapshots durable and current state. ``CrashState.materialize``
  writes one possible post-power-loss directory: each 512-byte sector written since
  the file's last fsync is kept, dropped (old bytes, or zeros past the old end) or
  garbled (random bytes); the file length is the old or the new one. The writer
  session file is marked as from an earlier boot, as after a real restart.
* ``fail(op, nth, errno, times)`` makes the nth next call of ``op`` ("write",
  "fsync", "rename", "truncate", "fallocate", "unlink", "open") raise
  ``OSError(errno)``, once or ``times`` times (None: forever).
* ``on_event``: a callable ``(op, path)`` called before each watched operation,
  e.g. to ``capture()`` a crash state at every step.

``at(point, fn)`` runs ``fn`` where seglog's code opens a named race window
(``RACE_POINTS``), to make another thread act inside it.

``platform_fallbacks()`` runs seglog on the paths a platform without
``posix_fallocate`` and ``MADV_POPULATE_WRITE`` takes (macOS), to test them on Linux.

Not thread-safe with respect to other code using ``os`` in the same process; meant
for tests. Linux only (it reads ``/proc/self/fd``).
"""

from __future__ import annotations

import errno as _errno
import json
import os
import random
import stat
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, StrPath

from ._runtime import platform as _platform
from ._runtime import points as _points
from ._runtime.files import WRITER_SESSION
from ._groups.files import advance_clock
from . import log as log_module
from .log import Log

SECTOR = 512

_OPS = {
    "open": ("open",), "write": ("write", "pwrite"), "fsync": ("fsync", "fdatasync"),
    "truncate": ("ftruncate", "truncate"), "fallocate": ("posix_fallocate",),
    "rename": ("rename", "replace"), "unlink": ("unlink", "remove"),
}


@dataclass
class _Fault:
    op: str
    countdown: int
    errno: int
    times: int | None


@dataclass
class CrashState:
    """One instant of a run: what was durable and what was written."""

    directory: str
    durable_names: dict[str, str]            # name -> file identity, at the last dir fsync
    ops: list[tuple[Any, ...]]               # namespace ops since then, in order
    durable_content: dict[str, bytes]        # identity -> bytes at its last fsync
    current_content: dict[str, bytes]        # identity -> bytes now
    note: dict[str, Any] = field(default_factory=dict)  # free for the test (e.g. flushed offset)

    def materialize(self, dest: str, rng: random.Random, mode: str = "random") -> None:
        """Write one possible post-power-loss directory to ``dest`` (created, must not exist).

        ``mode``: "random" (each unsynced op and sector chosen by ``rng``), "lose"
        (nothing unsynced survives), "keep" (everything survives, as after a clean
        kernel flush), "garble" (unsynced sectors dropped or, past the old end,
        garbage; never kept).
        """
        os.makedirs(dest)
        names = dict(self.durable_names)
        if mode == "lose":
            upto = 0
        elif mode == "keep":
            upto = len(self.ops)
        else:
            upto = rng.randint(0, len(self.ops))
        for op in self.ops[:upto]:
            if op[0] == "create":
                names[op[1]] = op[2]
            elif op[0] == "rename":
                ident = names.pop(op[1], op[3])
                names[op[2]] = ident
            elif op[0] == "unlink":
                names.pop(op[1], None)
        for name, ident in names.items():
            data = self._file_after_crash(ident, rng, mode)
            path = os.path.join(dest, name)
            with open(path, "wb") as f:
                f.write(data)
            if name == WRITER_SESSION:
                _mark_rebooted(path)

    def _file_after_crash(self, ident: str, rng: random.Random, mode: str) -> bytes:
        old = self.durable_content.get(ident, b"")
        new = self.current_content.get(ident, old)
        if old == new or mode == "lose":
            return old
        if mode == "keep":
            return new
        length = len(new) if mode == "garble" or rng.random() < 0.5 else len(old)
        out = bytearray(length)
        for start in range(0, length, SECTOR):
            end = min(length, start + SECTOR)
            a, b = old[start:end], new[start:end]
            if a == b and len(a) == end - start:
                out[start:end] = a
                continue
            r = rng.random()
            if mode == "random" and r < 1 / 3:
                chunk = b                        # the write reached the disk
            elif r < 2 / 3 or len(a) == end - start:
                chunk = a                        # it did not: old bytes (zeros past the old end)
            else:
                # newly allocated space whose length reached the disk before its data:
                # nonsense past the old end; sectors never tear (powersafe overwrite)
                chunk = a + rng.randbytes(end - start - len(a))
            out[start:start + len(chunk)] = chunk
        return bytes(out)


def _mark_rebooted(path: str) -> None:
    try:
        with open(path, "rb") as f:
            session = json.loads(f.read())
        session["boot_id"] = "before-the-power-loss"
        with open(path, "wb") as f:
            f.write(json.dumps(session).encode())
    except (OSError, ValueError, TypeError):
        pass


class FaultyFS:
    """Records durability and injects faults for files under one directory."""

    def __init__(self, directory: str) -> None:
        self.directory = os.path.abspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.on_event: Callable[[str, str], None] | None = None
        self.events = 0
        self._faults: list[_Fault] = []
        self._real: dict[str, Callable[..., Any]] = {}     # the os functions wrapped
        self._gen: dict[int, int] = {}
        self._durable_names: dict[str, str] = {}
        self._ops: list[tuple[Any, ...]] = []
        self._durable: dict[str, bytes] = {}
        self._gone: dict[str, bytes] = {}     # content of unlinked or replaced files
        self._active = False

    # -- setup -----------------------------------------------------------------
    def __enter__(self) -> "FaultyFS":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Take the directory as it is as durable, and start watching."""
        self._durable_names = {}
        for name in os.listdir(self.directory):
            ident = self._ident_of_path(os.path.join(self.directory, name))
            if ident is not None:
                self._durable_names[name] = ident
                self._durable[ident] = self._read_path(os.path.join(self.directory, name))
        for group in _OPS.values():
            for fn in group:
                self._real[fn] = getattr(os, fn)
                setattr(os, fn, getattr(self, "_" + fn))
        self._active = True

    def stop(self) -> None:
        """Stop watching: the real ``os`` functions are back. Capture states taken
        so far stay valid; idempotent."""
        if not self._active:
            return
        for fn, real in self._real.items():
            setattr(os, fn, real)
        self._active = False

    # -- faults ----------------------------------------------------------------
    def fail(self, op: str, nth: int = 1, errno: int = _errno.EIO, times: int | None = 1) -> None:
        """Make the ``nth`` next call of ``op`` fail with ``errno`` (``times`` calls; None: all)."""
        if op not in _OPS:
            raise ValueError(f"op must be one of {sorted(_OPS)}")
        self._faults.append(_Fault(op, nth, errno, times))

    def clear_faults(self) -> None:
        """Drop every fault ``fail`` set that has not fired yet."""
        self._faults.clear()

    def _event(self, op: str, path: str | None) -> None:
        if path is None or not self._watched(path):
            return
        self.events += 1
        if self.on_event is not None:
            self.on_event(op, path)
        for f in self._faults:
            if f.op != op:
                continue
            f.countdown -= 1
            if f.countdown <= 0 and (f.times is None or f.times > 0):
                if f.times is not None:
                    f.times -= 1
                raise OSError(f.errno, f"{os.strerror(f.errno)} (injected: {op} {path})")

    # -- capture -----------------------------------------------------------------
    def capture(self, **note: object) -> CrashState:
        """The state a power loss right now could leave (see ``CrashState``)."""
        current: dict[str, bytes] = dict(self._gone)
        for name in self._listdir():
            path = os.path.join(self.directory, name)
            ident = self._ident_of_path(path)
            if ident is not None:
                current[ident] = self._read_path(path)
        return CrashState(self.directory, dict(self._durable_names), list(self._ops),
                          dict(self._durable), current, dict(note))

    # -- helpers -----------------------------------------------------------------
    def _watched(self, path: str) -> bool:
        path = os.path.abspath(path)
        return path == self.directory or os.path.dirname(path) == self.directory

    def _ident(self, st: os.stat_result) -> str:
        return f"{st.st_ino}:{self._gen.get(st.st_ino, 0)}"

    def _ident_of_path(self, path: str) -> str | None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        return self._ident(st) if stat.S_ISREG(st.st_mode) else None

    def _read_path(self, path: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return b""

    def _listdir(self) -> list[str]:
        return os.listdir(self.directory)

    def _fd_path(self, fd: int) -> str | None:
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None

    # -- wrapped os functions -------------------------------------------------------
    def _open(self, path: StrPath, flags: int, mode: int = 0o777, *,
              dir_fd: int | None = None) -> int:
        p = os.fspath(path)
        existed = os.path.exists(p)
        self._event("open", p)
        fd: int = self._real["open"](path, flags, mode, dir_fd=dir_fd)
        if flags & os.O_CREAT and not existed and self._watched(p):
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):
                self._gen[st.st_ino] = self._gen.get(st.st_ino, 0) + 1
                self._ops.append(("create", os.path.basename(p), self._ident(st)))
        return fd

    def _write(self, fd: int, data: ReadableBuffer) -> int:
        self._event("write", self._fd_path(fd))
        n: int = self._real["write"](fd, data)
        return n

    def _pwrite(self, fd: int, data: ReadableBuffer, offset: int) -> int:
        self._event("write", self._fd_path(fd))
        n: int = self._real["pwrite"](fd, data, offset)
        return n

    def _sync(self, name: str, fd: int) -> None:
        path = self._fd_path(fd)
        self._event("fsync", path)
        self._real[name](fd)
        if path is None or not self._watched(path):
            return
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            if os.path.abspath(path) == self.directory:
                self._durable_names = {}
                for n in self._listdir():
                    ident = self._ident_of_path(os.path.join(self.directory, n))
                    if ident is not None:
                        self._durable_names[n] = ident
                self._ops.clear()
        elif stat.S_ISREG(st.st_mode):
            try:
                data = _pread_all(fd, st.st_size)
            except OSError:          # a write-only descriptor: read the file by name
                data = self._read_path(path)
            self._durable[self._ident(st)] = data

    def _fsync(self, fd: int) -> None:
        self._sync("fsync", fd)

    def _fdatasync(self, fd: int) -> None:
        self._sync("fdatasync", fd)

    def _ftruncate(self, fd: int, length: int) -> None:
        self._event("truncate", self._fd_path(fd))
        self._real["ftruncate"](fd, length)

    def _truncate(self, path: int | StrPath, length: int) -> None:
        self._event("truncate", os.fspath(path) if not isinstance(path, int) else self._fd_path(path))
        self._real["truncate"](path, length)

    def _posix_fallocate(self, fd: int, offset: int, length: int) -> None:
        self._event("fallocate", self._fd_path(fd))
        self._real["posix_fallocate"](fd, offset, length)

    # **kw: os's own keywords (dir_fd, src_dir_fd, dst_dir_fd), passed through
    def _move(self, name: str, src: StrPath, dst: StrPath, **kw: int | None) -> None:
        s, d = os.fspath(src), os.fspath(dst)
        self._event("rename", s)
        watched = self._watched(s) and self._watched(d)
        if watched:
            replaced = self._ident_of_path(d)
            if replaced is not None:
                self._gone[replaced] = self._read_path(d)
            ident = self._ident_of_path(s)
        self._real[name](src, dst, **kw)
        if watched:
            self._ops.append(("rename", os.path.basename(s), os.path.basename(d), ident))

    def _rename(self, src: StrPath, dst: StrPath, **kw: int | None) -> None:
        self._move("rename", src, dst, **kw)

    def _replace(self, src: StrPath, dst: StrPath, **kw: int | None) -> None:
        self._move("replace", src, dst, **kw)

    def _drop(self, name: str, path: StrPath, **kw: int | None) -> None:
        p = os.fspath(path)
        self._event("unlink", p)
        ident = self._ident_of_path(p) if self._watched(p) else None
        if ident is not None:
            self._gone[ident] = self._read_path(p)
        self._real[name](path, **kw)
        if ident is not None:
            self._ops.append(("unlink", os.path.basename(p)))

    def _unlink(self, path: StrPath, **kw: int | None) -> None:
        self._drop("unlink", path, **kw)

    def _remove(self, path: StrPath, **kw: int | None) -> None:
        self._drop("remove", path, **kw)


def _pread_all(fd: int, size: int) -> bytes:
    chunks = []
    pos = 0
    while pos < size:
        b = os.pread(fd, min(1 << 20, size - pos), pos)
        if not b:
            break
        chunks.append(b)
        pos += len(b)
    return b"".join(chunks)


def abandon(log: Log) -> None:
    """Drop a writer as if its process had been killed: no flush, no seal, no marker.

    The page cache keeps what was appended (as after SIGKILL); the lock is
    released, so the directory can be opened again, which then recovers.
    """
    log_module.abandon(log)


def advance_group_clock(seconds: float) -> None:
    """Move this process's consumer-group clock forward by ``seconds`` (it never goes
    back): every member of this process looks at its group at its next poll, and
    judges a member whose heartbeat it has seen unchanged for that member's session
    timeout silent, so it is expelled. For tests of session timeouts without
    sleeping; members in other processes keep their own clocks."""
    advance_clock(seconds)


#: The race windows ``at`` can reach: each name, and where its window is.
RACE_POINTS: dict[str, str] = dict(_points.POINTS)


@contextmanager
def at(point: str, fn: Callable[[], None]) -> Iterator[None]:
    """Within the block, call ``fn`` (in the thread that gets there) each time
    seglog's code reaches ``point``, one of ``RACE_POINTS``: a window between a check
    and the act that relies on it, where a test lets another thread run (start it,
    and join it, from ``fn``). ``ValueError`` for a name that is not a point. Points
    are process-wide: use it where no other test's thread passes the same point."""
    _points.arm(point, fn)
    try:
        yield
    finally:
        _points.disarm(point)


@contextmanager
def platform_fallbacks() -> Iterator[None]:
    """Within the block, this process takes the paths seglog takes where the platform
    lacks them, as on macOS: disk blocks ahead of the writer are reserved by writing
    zeros instead of ``posix_fallocate``, and the active segment's pages are not
    faulted in ahead (no ``MADV_POPULATE_WRITE``: the writer's copies fault them in).
    For disk-full and crash tests of those paths on Linux. It switches the whole
    process while the block runs (every log, every thread): use it where nothing
    else in the process writes a log meanwhile."""
    _platform.use_fallbacks(True)
    try:
        yield
    finally:
        _platform.use_fallbacks(False)

"""File names and file-system primitives with the fsyncs durability needs (rules
R2-R4 in docs/DURABILITY.md).

Ownership: seglog only ever removes or rewrites files whose names it can prove are
its own. A log directory holds the marker ``seglog.json`` (written when seglog
creates the log); segment files are named ``<20 digits>.log/.index/.timeindex``;
every file seglog leaves behind on the way (temp files of checkpoints, retention's
renamed-aside files, compaction's new files and swap manifests) carries the prefix
``.seglog-`` and is removed at the next writer's open only when its name matches one
of those exact forms.
"""

from __future__ import annotations

import errno
import mmap
import os
import re
import stat

from . import platform as _platform
from ..errors import NotALogError, StorageError

MARKER = "seglog.json"
PREFIX = ".seglog-"
TMP = PREFIX + "tmp."            # + the name being replaced (checkpoints, indexes)
DELETED = PREFIX + "deleted."    # + a segment file name (retention, delayed delete)
CLEANED = PREFIX + "cleaned."    # + a segment file name (compaction output)
SWAP = PREFIX + "swap."          # + a 20-digit base offset (compaction manifest)
SEGMENT_SUFFIXES = (".log", ".index", ".timeindex")   # a segment's three files
WRITER_SESSION = "writer-session"   # the exclusive writer's session record
TOPICS_DIR = "__topics"             # under a topic root: <name>.json per topic
GROUPS_DIR = "__groups"             # under a topic root: one directory per consumer group
SPARK_DIR = "__spark"               # under a topic root: the Spark sink's writes
_MAX_BASE = (1 << 63) - 1
_SEGMENT_FILE = re.compile(r"(\d{20})\.(log|index|timeindex)")
_LEFTOVER = re.compile(
    r"\.seglog-(?:(?:tmp|deleted|cleaned)\.(\d{20})\.(?:log|index|timeindex)"
    r"|tmp\.[A-Za-z0-9_.-]+|swap\.(\d{20}))")


def abs_dir(path: str | os.PathLike[str], what: str) -> str:
    """``path`` made absolute; ``ValueError`` for an empty one, which would name the
    current directory (a ``what`` is never made of it by accident)."""
    given = os.fspath(path)
    if not given:
        raise ValueError(f"the {what} path is empty; name a directory (\".\" for the "
                         f"current one)")
    return os.path.abspath(given)


def require_dir(path: str, what: str, create: bool) -> bool:
    """Check that ``path`` can be a ``what`` directory before anything is made or
    read there: True if it is a directory, False if nothing is at ``path`` and
    ``create`` (the caller makes it, with any missing parents). ``NotALogError``
    for a file, a symbolic link to nothing, a path through a file, or (without
    ``create``) nothing at all; ``StorageError`` (with the errno) if the path
    cannot be looked at. Touches nothing."""
    try:
        st = _stat_settled(path)
    except FileNotFoundError:
        if create:
            return False
        raise NotALogError(f"no {what} directory at {path}") from None
    except NotADirectoryError:
        raise NotALogError(f"{path} is not a {what} directory: a part of the path is a "
                           f"file; nothing was changed") from None
    except OSError as e:
        raise path_error(e, f"cannot look at {path}") from e
    if not stat.S_ISDIR(st.st_mode):
        raise NotALogError(f"{path} is a file, not a {what} directory; nothing was changed")
    return True


def _stat_settled(path: str) -> os.stat_result:
    """``os.stat(path)``; ``FileNotFoundError`` only if nothing is there,
    ``NotALogError`` for a symbolic link to nothing. Another process may make the
    directory between the looks (writers opening a new log together): what is there
    by the last look is what counts, never a mix of two looks."""
    for _ in range(100):
        try:
            return os.stat(path)
        except FileNotFoundError:
            try:
                target = os.readlink(path)
            except FileNotFoundError:
                raise                       # nothing there (nor a link)
            except OSError:
                continue                    # not a link: it was made since; look again
            try:
                return os.stat(path)        # a link made since, to what exists now
            except FileNotFoundError:
                raise NotALogError(f"{path} is a symbolic link to {target!r}, which does "
                                   f"not exist; nothing was changed") from None
    raise NotALogError(f"{path} keeps appearing and vanishing; nothing was changed")


def list_dir(path: str) -> list[str]:
    """``os.listdir``, with a failure (no permission, the directory gone) a
    ``SeglogError`` naming the path."""
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        raise NotALogError(f"{path} is not a directory (any more)") from None
    except OSError as e:
        raise path_error(e, f"cannot list {path}") from e


def make_dirs(path: str) -> None:
    """``os.makedirs`` (existing is fine), with a failure a ``SeglogError``."""
    try:
        os.makedirs(path, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        # a file appeared there (or on the way) since the path was checked
        raise NotALogError(f"{path} cannot be made: a file is in the way; nothing was "
                           f"changed") from None
    except OSError as e:
        raise path_error(e, f"cannot make the directory {path}") from e


def path_error(e: OSError, doing: str) -> StorageError:
    """A ``StorageError`` for a file-system call that failed on a path, with the
    cause's errno (``e.errno == errno.EACCES``)."""
    why = e.strerror or str(e)
    if e.errno in (errno.EACCES, errno.EPERM):
        why += " (check the directory's owner and permissions)"
    return StorageError(e.errno, f"{doing}: {why}") if e.errno is not None \
        else StorageError(f"{doing}: {why}")


def segment_base(name: str) -> int | None:
    """The base offset of a segment file name (``.log``, ``.index``, ``.timeindex``),
    None if the name is not one seglog gives (20 digits, below 2**63)."""
    m = _SEGMENT_FILE.fullmatch(name)
    if m is None:
        return None
    base = int(m.group(1))
    return base if base <= _MAX_BASE else None


def is_leftover(name: str) -> bool:
    """True for names of seglog's own unfinished work (see the module docstring)."""
    m = _LEFTOVER.fullmatch(name)
    if m is None:
        return False
    digits = m.group(1) or m.group(2)
    return digits is None or int(digits) <= _MAX_BASE


def tmp_path(path: str) -> str:
    """Where a replacement of ``path`` is written before the rename."""
    d, name = os.path.split(path)
    return os.path.join(d, TMP + name)


def fsync_file(fd: int) -> None:
    _platform.fsync(fd)


# a long run of writes hands its pages to the disk every HAND_ON bytes, so that the
# fsync after it waits for the last few, not all: POSIX_FADV_DONTNEED on pages just
# written (still dirty) starts their writeback and drops none of them (PostgreSQL
# asks the same where sync_file_range is missing)
HAND_ON = 8 << 20


def hand_on(fd: int, start: int, end: int) -> int:
    """Start the writeback of the whole pages of ``fd`` in ``[start, end)``, a run of
    bytes just written, once it holds ``HAND_ON`` bytes; returns where the part not
    yet handed on starts (``start``, or ``end`` rounded down to a page: its last page
    may be written further). Pages only partly in the run (which may hold bytes
    another writer wrote) are left alone. Changes nothing a reader sees."""
    if end - start < HAND_ON:
        return start
    advise = getattr(os, "posix_fadvise", None)    # absent on some systems (macOS)
    if advise is None:
        return end
    lo = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    hi = end - end % mmap.PAGESIZE
    try:
        advise(fd, lo, hi - lo, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass        # a hint: refused, the fsync after does all the work, as without it
    return hi


def fsync_dir(path: str) -> None:
    """Make the directory's entries (creates, renames, deletes) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _platform.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename, fsync directory (R3)."""
    tmp = tmp_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            _platform.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except BaseException:
        # a full disk is the usual cause: give the temp file's space back now
        try:
            remove(tmp)
        except OSError:
            pass
        raise
    fsync_dir(os.path.dirname(path) or ".")


def remove(path: str) -> bool:
    """Unlink ``path`` if it exists; True if it did. The caller fsyncs the directory."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


# -- checkpoints: an offset in a small file, replaced atomically -------------------
def segment_name(base_offset: int) -> str:
    """The 20-digit, zero-padded file stem of a segment."""
    return f"{base_offset:020d}"


def segment_path(directory: str, base_offset: int, suffix: str = ".log") -> str:
    """The path of one of a segment's files (``suffix`` one of SEGMENT_SUFFIXES)."""
    return os.path.join(directory, f"{base_offset:020d}{suffix}")


def topic_file(root: str, name: str) -> str:
    """The file recording topic ``name``'s partition count under ``root``."""
    return os.path.join(root, TOPICS_DIR, name + ".json")


def list_topics(root: str) -> list[str]:
    """The names of the topics recorded under ``root``, sorted ([] if none)."""
    try:
        names = os.listdir(os.path.join(root, TOPICS_DIR))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as e:
        raise path_error(e, f"cannot list the topics of {root}") from e
    # a record's temp file (a writer killed while replacing it) is no topic
    return sorted(n[:-5] for n in names
                  if n.endswith(".json") and len(n) > 5 and not n.startswith(PREFIX))


RECOVERY_POINT = "recovery-point"
LOG_START = "log-start-offset"
CHECKPOINT_MAGIC = "seglog-checkpoint 1"
LOCK_FILE = ".lock"             # the writer's flock (shared by multi-writers)
WRITERS_FILE = ".writers"       # multi-writers: the shared header, its flock the append lock
MAINTENANCE_LOCK = ".maintenance"   # multi-writers: one retention or compaction pass at a time
LOCK_FILES = (LOCK_FILE, WRITERS_FILE, MAINTENANCE_LOCK)


def read_checkpoint(directory: str, name: str) -> int | None:
    """The offset stored in a checkpoint file, None if absent or unreadable."""
    try:
        with open(os.path.join(directory, name), "r", encoding="ascii") as f:
            magic, value = f.read().split("\n")[:2]
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if magic != CHECKPOINT_MAGIC or not value.isdigit():
        return None
    return int(value)


def write_checkpoint(directory: str, name: str, offset: int) -> None:
    """Durably replace a checkpoint (temp + fsync + rename + fsync dir, rule R3)."""
    atomic_write(os.path.join(directory, name), f"{CHECKPOINT_MAGIC}\n{offset}\n".encode())


def superseded_segments(directory: str, names: list[str], bases: list[int]) -> set[int]:
    """The ``bases`` a committed compaction swap replaced, once its new segment is
    renamed in (its cleaned ``.log`` gone), that its writer has not deleted yet (it
    was killed or stopped in between, or is about to): a writer's open deletes them,
    so the log does not hold them. Before the rename they are the log."""
    out: set[int] = set()
    swaps = [n for n in names if n.startswith(SWAP) and n[len(SWAP):].isdigit()]
    if not swaps:
        return out
    present = set(names)
    for n in swaps:
        if CLEANED + n[len(SWAP):] + ".log" in present:
            continue
        end = read_checkpoint(directory, n)
        if end is not None:
            base = int(n[len(SWAP):])
            out.update(b for b in bases if base < b < end)
    return out


def list_segments(directory: str, names: list[str] | None = None) -> list[int]:
    """Base offsets of the ``.log`` files in ``directory`` (or ``names``), ascending.

    Only names seglog gives count (20 digits, below 2**63): other files are not
    seglog's and are never touched."""
    bases = []
    for n in (os.listdir(directory) if names is None else names):
        if n.endswith(".log"):
            b = segment_base(n)
            if b is not None:
                bases.append(b)
    bases.sort()
    return bases

"""What the writer processes of one log share (``Log.open(multi_writer=True)``).

Modelled on SQLite's WAL index and LMDB's lock file: the writers map one small file,
``<log>/.writers``, whose header holds the writer's tail of the active segment (the
``WriterState`` of ``segment.py``), the log start, the shared recovery point and two
change counters; its ``flock`` is the append lock across processes. A writer reads
the header under that lock and reloads its view only when the counter moved, so an
uncontended append pays one lock round trip and one compare. A writer that dies
holding the lock leaves its token in ``holder``: the next one repairs the tail
(``LocalLog`` does, with ``follow`` and ``Segment.adopt``). The mode lock (the
exclusive writer's ``.lock``, taken shared by multi-writers) is ``_log_open``'s.

Header (little-endian, from byte 0): magic, boot hash; counter, holder, size,
next offset (what every append publishes); version, session, list generation,
log start, flushed offset, the rest of the ``WriterState`` (what a roll, a new
index entry or timestamp, or a change of the segment list publishes); reserved
(the end of the disk blocks any writer reserved in the active segment).
"""

from __future__ import annotations

import mmap
import os
import random
from struct import Struct
from typing import NamedTuple

import xxhash

from . import _platform
from ._files import WRITERS_FILE, list_segments, superseded_segments
from .errors import LogLockedError
from .segment import Segment, WriterState

MAGIC = b"SEGLOGW1"
_SIZE = 4096
_HEAD = Struct("<8sQ")              # magic, boot hash (at 0)
# single words, each written by one 8-byte store (a memoryview item: struct's pack
# zero-fills its whole span before writing fields, which a kill could leave torn);
# CURRENT: the change counter and the slot holding the state, counter << 1 | slot
CURRENT, HOLDER, _SESSION, _RESERVED = 2, 3, 4, 5
# the state, in two slots: a writer fills the one not current, then flips CURRENT,
# so a writer killed at any instant leaves the last published state whole
# (SQLite's two header copies). version, list generation, start, flushed, then the
# WriterState (base, size, next offset, index entries, time entries, next index
# position, largest timestamp and its offset, first timestamp)
SLOT = Struct("<13q")
SLOT_AT = (64, 64 + SLOT.size)
SIZE_NEXT = Struct("<qq")           # the WriterState's size and next offset
SIZE_NEXT_AT = 40                   # their place in a slot
VERSION = Struct("<q")              # a slot's first field


class Shared(NamedTuple):
    """A snapshot of the header (read under the append lock)."""

    current: int
    holder: int
    version: int
    list_gen: int
    start: int
    flushed: int
    reserved: int
    state: WriterState


def _boot_hash() -> int:
    return xxhash.xxh64_intdigest((_platform.boot_id() or "").encode()) | 1


class WritersFile:
    """The mapped ``.writers`` file of a log: the header and the append lock.

    ``lock`` waits at most ``timeout`` seconds (``LogLockedError``); the other
    methods are called with the lock held. One object per ``Log``: its descriptor
    is its own open file description, so two ``Log`` objects of one process
    exclude each other as two processes do."""

    __slots__ = ("path", "fd", "mm", "words", "timeout", "token")

    def __init__(self, directory: str, timeout_ms: int) -> None:
        self.path = os.path.join(directory, WRITERS_FILE)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < _SIZE:
                os.ftruncate(fd, _SIZE)      # two openers extending it at once agree
            self.mm = mmap.mmap(fd, _SIZE)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        self.words = memoryview(self.mm).cast("Q")     # the single words, native order
        self.timeout = timeout_ms / 1000.0
        # nonzero: what ``holder`` says while this writer holds the lock
        self.token = random.getrandbits(62) | 1

    # -- the append lock across processes ---------------------------------------------
    def lock(self, timeout: float | None = None, raising: bool = True) -> bool:
        """Take the append lock, waiting at most ``timeout`` (default: this log's
        ``lock_timeout_ms``); else ``LogLockedError`` (a stopped or slow writer holds
        it), or False if not ``raising``."""
        if _platform.lock_within(self.fd, self.timeout if timeout is None else timeout):
            return True
        if raising:
            raise self.timed_out()
        return False

    def timed_out(self) -> LogLockedError:
        return LogLockedError(
            f"another writer held the append lock of {os.path.dirname(self.path)} for "
            f"lock_timeout_ms={round(self.timeout * 1000)} (stopped or slow); nothing "
            f"was written")

    def unlock(self) -> None:
        _platform.flock(self.fd, _platform.LOCK_UN)

    # -- the header (lock held) ----------------------------------------------------------
    def live(self) -> bool:
        """True if the header is a live session's: written in this boot, not ended."""
        magic, boot = _HEAD.unpack_from(self.mm, 0)
        return magic == MAGIC and boot == _boot_hash() and self.words[_SESSION] != 0

    def read(self) -> Shared:
        """The current state (whole: the slot CURRENT names)."""
        cur = int(self.words[CURRENT])
        (version, gen, start, flushed, base, size, nxt, ie, te, nip, mts, mto,
         first) = SLOT.unpack_from(self.mm, SLOT_AT[cur & 1])
        return Shared(cur, int(self.words[HOLDER]), version, gen, start,
                      flushed, int(self.words[_RESERVED]),
                      WriterState(base, size, nxt, ie, te, nip, mts, mto, first))

    def fast(self, cur: int) -> tuple[int, int, int]:
        """(version, size, next offset) of the state ``cur`` names."""
        at = SLOT_AT[cur & 1]
        size, nxt = SIZE_NEXT.unpack_from(self.mm, at + SIZE_NEXT_AT)
        return VERSION.unpack_from(self.mm, at)[0], size, nxt

    def unhold(self) -> None:
        self.words[HOLDER] = 0

    def publish(self, cur: int, version: int, list_gen: int, start: int, flushed: int,
                st: WriterState) -> int:
        """Everything, into the slot ``cur`` does not name, then the flip (one store);
        returns the new current word. The holder is left to the caller."""
        slot = (cur & 1) ^ 1
        SLOT.pack_into(self.mm, SLOT_AT[slot], version, list_gen, start, flushed, *st)
        new = ((cur >> 1) + 1) << 1 | slot
        self.words[CURRENT] = new
        return new

    def publish_tail(self, cur: int, size: int, next_offset: int) -> int:
        """Only size and next offset moved: the current slot copied with them."""
        slot = (cur & 1) ^ 1
        mm = self.mm
        dst, src = SLOT_AT[slot], SLOT_AT[slot ^ 1]
        mm[dst:dst + SLOT.size] = mm[src:src + SLOT.size]
        SIZE_NEXT.pack_into(mm, dst + SIZE_NEXT_AT, size, next_offset)
        new = ((cur >> 1) + 1) << 1 | slot
        self.words[CURRENT] = new
        return new

    def begin(self) -> int:
        """Start a session (the first writer, after recovery): this boot, a new
        session id; returns it. ``publish`` follows."""
        session = random.getrandbits(62) | 1
        _HEAD.pack_into(self.mm, 0, MAGIC, _boot_hash())
        self.words[_RESERVED] = 0
        self.words[_SESSION] = session
        return session

    def end(self) -> None:
        """End the session (the last writer's clean close): the next multi-writer
        recovers from the files."""
        self.words[_SESSION] = 0

    def reserved(self) -> int:
        return int(self.words[_RESERVED])

    def reserve(self, end: int) -> None:
        """A writer reserved disk blocks up to ``end`` in the active segment (before
        writing below it): the bound of what a dead writer may have left there."""
        if end > self.words[_RESERVED]:
            self.words[_RESERVED] = end

    def clear_reserved(self) -> None:
        self.words[_RESERVED] = 0

    # -- lifetime -------------------------------------------------------------------
    def close(self) -> None:
        """Unmap and close (which releases the append lock if held)."""
        if self.fd >= 0:
            self.words.release()
            self.mm.close()
            os.close(self.fd)
            self.fd = -1

    def drop_copy(self) -> None:
        """In a forked child: close this process's copies (never the parent's lock)."""
        if self.fd >= 0:
            try:
                self.words.release()
                self.mm.close()
                os.close(self.fd)
            except (OSError, ValueError):
                pass
            self.fd = -1


def invalidate(directory: str) -> None:
    """An exclusive writer's open: a multi-writer header left by an earlier session
    no longer describes the files (no multi-writer can be open: the exclusive writer
    holds the mode lock)."""
    path = os.path.join(directory, WRITERS_FILE)
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        if os.fstat(fd).st_size >= _SIZE:
            os.pwrite(fd, bytes(8), _SESSION * 8)    # one system call: never torn
    finally:
        os.close(fd)


def follow(directory: str, segs: tuple[Segment, ...], shared: Shared, capacity: int,
           interval: int, max_index_bytes: int) -> tuple[list[Segment], list[Segment]]:
    """The segment list as the header says it is after another writer rolled, or
    retention or compaction changed it: (the new list, the objects that left it).

    Objects whose files are unchanged are kept; the active one (the header's) is
    activated at the header's state, reloaded if this writer had it active. A
    segment this writer had active and another sealed leaves (its copy of the
    writable map is dropped, never touched: the file was cut back under it)."""
    names = os.listdir(directory)
    bases = list_segments(directory, names)
    gone = superseded_segments(directory, names, bases)
    active = shared.state.base_offset
    bases = [b for b in bases if b not in gone and b <= active]
    bases = bases[sum(1 for nxt in bases[1:] if nxt <= shared.start):]
    if not bases or bases[-1] != active:
        raise FileNotFoundError(f"the active segment {active} of {directory} is missing")
    known = {s.base_offset: s for s in segs}
    new: list[Segment] = []
    for b in bases[:-1]:
        s = known.get(b)
        if s is not None and (s.retired or s.is_active or _replaced(s)):
            s = None
        new.append(s if s is not None else
                   Segment(directory, b, max_index_bytes=max_index_bytes, writer=True,
                           index_interval_bytes=interval))
    s = known.get(active)
    if s is not None and s.is_active and not s.retired:
        s.reload(shared.state)
    else:
        s = Segment(directory, active, max_index_bytes=max_index_bytes, writer=True,
                    index_interval_bytes=interval)
        s.activate(capacity, shared.state)
    new.append(s)
    for prev, nxt in zip(new, new[1:]):
        prev.next_offset = nxt.base_offset
    kept = set(map(id, new))
    return new, [s for s in segs if id(s) not in kept]


def _replaced(seg: Segment) -> bool:
    """Compaction swapped another file in under this sealed segment's name."""
    return not seg.at_path()


def stray_segments(directory: str, active: int) -> list[int]:
    """Segments after the active one: a writer died inside a roll, after creating the
    next segment and before publishing it. Nothing was written to them."""
    return [b for b in list_segments(directory) if b > active]

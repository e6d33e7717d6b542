"""What the writer processes of one log share (``Log.open(multi_writer=True)``).

Modelled on SQLite's WAL index and LMDB's lock file: the writers map one small file,
``<log>/.writers``, whose header holds the writer's tail of the active segment (the
``WriterState`` of ``segment.py``), the log start, the shared recovery point and two
change counters; its ``flock`` is the append lock across processes. A writer reads
the header under that lock and reloads its view only when the counter moved, so an
uncontended append pays one lock round trip and one compare. ``WritersFile`` (one per
writer) is the only code that touches the header's words, and keeps that writer's
copy of where the header stood (as SQLite's ``wal.c`` alone touches the WAL index
header, and each connection's ``Wal`` its copy of it); ``LocalLog`` applies what it
reports to its own state. The functions at the end repair what a writer that died
holding the lock left (``rolling_cut``, ``adopt``, ``remove_unwritten``). A writer that dies holding the lock leaves
its token in the holder word: the next one repairs the tail. The mode lock (the
exclusive writer's ``.lock``, taken shared by multi-writers) is ``_log.opening``'s.

Header (from byte 0): magic, boot hash; then single words: the counter word (change
counter and which of two state slots is current), holder, session, reserved (the end
of the disk blocks any writer reserved in the active segment), rolling (the segment
its holder is sealing); then two slots, each: version, list generation, log start,
flushed offset, the ``WriterState``. A writer fills the slot not current and flips
the counter word, so a kill at any instant leaves the last published state whole.
"""

from __future__ import annotations

import mmap
import os
import random
from struct import Struct
from typing import NamedTuple

import xxhash

from .._codec import format as _format
from .._runtime import platform as _platform
from .._runtime import points as _points
from .._runtime.files import (SEGMENT_SUFFIXES, WRITERS_FILE, fsync_dir, list_segments, remove,
                              segment_path, superseded_segments)
from .._runtime.platform import LOCK_EX_NB as _EX_NB, LOCK_UN as _UN, flock as _flock
from .._storage.scan import Damage, walk
from ..errors import CorruptRecordError, LogClosedError, LogLockedError
from ..segment import ActiveSegment, ActiveSettings, Segment, WriterState

# the header's layout; a writer of another layout refuses to join a live session of
# it (``foreign``), and the first writer of a session rewrites it whole (``live`` is
# False for it)
MAGIC = b"SEGLOGW3"
_SIZE = 4096
_HEAD = Struct("<8sQ")              # magic, boot hash (at 0)
# single words, each written by one 8-byte store (a memoryview item: struct's pack
# zero-fills its whole span before writing fields, which a kill could leave torn);
# _CURRENT: the change counter and the slot holding the state, counter << 1 | slot;
# _ROLLING: the base offset of the active segment its holder is sealing (-1: none),
# so a writer that died inside a roll is told from one that died inside an append
_CURRENT, _HOLDER, _SESSION, _RESERVED, _ROLLING = 2, 3, 4, 5, 6
# the state, in two slots: a writer fills the one not current, then flips _CURRENT,
# so a writer killed at any instant leaves the last published state whole
# (SQLite's two header copies). version, list generation, start, flushed, then the
# WriterState (base, size, next offset, index entries, time entries, next index
# position, largest timestamp and its offset, first timestamp)
_SLOT = Struct("<13q")
_SLOT_AT = (64, 64 + _SLOT.size)
_STATE = Struct("<9q")              # a slot's WriterState
_STATE_AT = 32                      # its place in a slot
_SIZE_NEXT = Struct("<qq")          # the WriterState's size and next offset
_SIZE_NEXT_AT = _STATE_AT + 8       # their place in a slot
_VERSION = Struct("<q")             # a slot's first field
_FLUSHED_AT = 24                    # a slot's flushed offset


class Shared(NamedTuple):
    """A snapshot of the header (read under the append lock).

    ``current``: the change counter word; ``holder``: the token of a writer that held
    the lock and did not let go of it (it died, or failed inside a write: the taker
    repairs); ``version``: bumped when more than the active segment's tail changed;
    ``list_gen``: bumped by every change of the segment list; ``rolling``: the base
    offset its holder was sealing (-1: none); ``reserved``: the end of the disk blocks
    reserved in the active segment; ``state``: the active segment's ``WriterState``."""

    current: int
    holder: int
    version: int
    list_gen: int
    start: int
    flushed: int
    reserved: int
    rolling: int
    state: WriterState


def _boot_hash() -> int:
    return xxhash.xxh64_intdigest((_platform.boot_id() or "").encode()) | 1


class WritersFile:
    """One writer's handle on the mapped ``.writers`` file of a log: the header, the
    append lock across processes, and this writer's copy of where the header stood
    when it last looked or published (as SQLite's per-connection ``Wal`` object keeps
    its copy of the WAL index header). The only code that reads or writes the
    header's words.

    The lock: ``enter`` takes it if it is free now (``BlockingIOError`` else),
    ``lock`` waits at most ``timeout`` seconds (``LogLockedError``). Under it:
    ``enter`` / ``read`` say what moved, ``followed`` records that the writer took it,
    ``publish`` / ``leave_tail`` / ``leave_state`` publish, ``leave`` /
    ``leave_for_repair`` let go;
    ``reserve``, the rolling mark, ``begin`` / ``end`` of a session. ``flushed_now``
    reads without it. One object per writer ``Log``: its descriptor is its own open
    file description, so two ``Log`` objects of one process exclude each other as two
    processes do."""

    __slots__ = ("_path", "_fd", "_mm", "_words", "_timeout", "_token", "_cur", "_version",
                 "_gen")

    def __init__(self, directory: str, timeout_ms: int) -> None:
        self._path = os.path.join(directory, WRITERS_FILE)
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < _SIZE:
                os.ftruncate(fd, _SIZE)      # two openers extending it at once agree
            self._mm = mmap.mmap(fd, _SIZE)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._words = memoryview(self._mm).cast("Q")     # the single words, native order
        self._timeout = timeout_ms / 1000.0
        # nonzero: what the holder word says while this writer holds the lock
        self._token = random.getrandbits(62) | 1
        # where the header stood when this writer last looked or published: the
        # counter word, the version, the list generation
        self._cur = -1
        self._version = 0
        self._gen = 0

    @property
    def timeout(self) -> float:
        """``lock_timeout_ms`` in seconds: how long ``lock`` waits by default."""
        return self._timeout

    @property
    def closed(self) -> bool:
        return self._fd < 0

    # -- the append lock across processes ---------------------------------------------
    def enter(self, held: bool = False) -> WriterState | Shared | None:
        """The way in: take the lock if it is free now (``BlockingIOError`` if another
        holds it; ``LogClosedError`` once closed), or (``held``) this writer took it
        already (``lock``; a failure lets go of it either way); then what moved
        since this writer last looked: None
        (nothing, and no writer died holding the lock), the active segment's
        ``WriterState`` (appends only: the same segment list, start and flushed
        offset), or the whole ``Shared`` state. After None or a ``WriterState`` this
        writer holds the lock and stands where the header does; after ``Shared`` it
        follows, then calls ``followed``."""
        fd = self._fd
        if fd < 0:
            raise LogClosedError("the writers' file is closed")
        if not held:
            _flock(fd, _EX_NB)
        try:
            words = self._words
            cur = words[_CURRENT]
            if not words[_HOLDER]:
                if cur == self._cur:
                    words[_HOLDER] = self._token
                    return None
                at = _SLOT_AT[cur & 1]
                mm = self._mm
                if _VERSION.unpack_from(mm, at)[0] == self._version:
                    tail = WriterState._make(_STATE.unpack_from(mm, at + _STATE_AT))
                    self._cur = cur
                    words[_HOLDER] = self._token
                    return tail
            return self.read()
        except BaseException:
            _flock(fd, _UN)
            raise

    def lock(self, timeout: float | None = None, what: str = "nothing was written") -> None:
        """Take the append lock, waiting at most ``timeout`` (default: this log's
        ``lock_timeout_ms``); else ``LogLockedError`` (a stopped or slow writer holds
        it) whose message ends with ``what`` (what the caller did not do)."""
        if self._fd < 0:
            raise LogClosedError("the writers' file is closed")
        if not _platform.lock_within(self._fd, self._timeout if timeout is None else timeout):
            raise self.timed_out(what)

    def timed_out(self, what: str = "nothing was written") -> LogLockedError:
        return LogLockedError(
            f"another writer held the append lock of {os.path.dirname(self._path)} for "
            f"lock_timeout_ms={round(self._timeout * 1000)} (stopped or slow); {what}")

    def unlock(self) -> None:
        _flock(self._fd, _UN)

    def leave(self) -> None:
        """Say no writer holds the lock, and let go of it."""
        self._words[_HOLDER] = 0
        _flock(self._fd, _UN)

    def leave_tail(self, size: int, next_offset: int) -> None:
        """The append path's way out when appends moved only the active segment's size
        and next offset: those published at the same version (the current slot copied
        with them), then ``leave``."""
        dst = self._flip_slot()
        _SIZE_NEXT.pack_into(self._mm, dst + _SIZE_NEXT_AT, size, next_offset)
        self._flipped()

    def leave_state(self, st: WriterState) -> None:
        """The append path's way out when appends moved more of the active segment's
        tail (an index entry, the largest timestamp): ``st`` published at the same
        version (the current slot's other fields copied with it), then ``leave``."""
        dst = self._flip_slot()
        _STATE.pack_into(self._mm, dst + _STATE_AT, *st)
        self._flipped()

    def _flip_slot(self) -> int:
        # the slot not current, filled with the current one; where it starts
        slot = (self._cur & 1) ^ 1
        mm = self._mm
        dst, src = _SLOT_AT[slot], _SLOT_AT[slot ^ 1]
        mm[dst:dst + _SLOT.size] = mm[src:src + _SLOT.size]
        return dst

    def _flipped(self) -> None:
        # the slot filled by _flip_slot made current (one store), then leave
        cur = self._cur
        self._cur = new = ((cur >> 1) + 1) << 1 | ((cur & 1) ^ 1)
        words = self._words
        words[_CURRENT] = new
        words[_HOLDER] = 0
        _flock(self._fd, _UN)

    def leave_for_repair(self) -> None:
        """Let go of the lock after a failure inside a write or a roll: nothing is
        published and the holder word stays, as after a death, so the next writer to
        take the lock repairs (this one too: it forgets where the header stood)."""
        self._cur = self._gen = -1
        if self._fd >= 0:
            _flock(self._fd, _UN)

    # -- the header (lock held) ----------------------------------------------------------
    def live(self) -> bool:
        """True if the header is a live session's: written in this boot, not ended."""
        magic, boot = _HEAD.unpack_from(self._mm, 0)
        return magic == MAGIC and boot == _boot_hash() and self._words[_SESSION] != 0

    def foreign(self) -> bytes | None:
        """The magic of a live session's header of another layout (writers of another
        seglog version have the log open: this writer may not join them, and starting
        a session would rewrite the header under them), else None."""
        magic, boot = _HEAD.unpack_from(self._mm, 0)
        if (magic != MAGIC and magic.startswith(MAGIC[:7]) and boot == _boot_hash()
                and self._words[_SESSION] != 0):
            return bytes(magic)
        return None

    def read(self) -> Shared:
        """The current state (whole: the slot the counter word names)."""
        words = self._words
        cur = int(words[_CURRENT])
        (version, gen, start, flushed, base, size, nxt, ie, te, nip, mts, mto,
         first) = _SLOT.unpack_from(self._mm, _SLOT_AT[cur & 1])
        rolling = int(words[_ROLLING])
        return Shared(cur, int(words[_HOLDER]), version, gen, start, flushed,
                      int(words[_RESERVED]), rolling - 1 if rolling else -1,
                      WriterState(base, size, nxt, ie, te, nip, mts, mto, first))

    def list_moved(self, sh: Shared) -> bool:
        """True if ``sh``'s segment list is not the one this writer last followed."""
        return sh.list_gen != self._gen

    def followed(self, sh: Shared) -> None:
        """The writer took the state ``enter`` or ``read`` reported: it holds the lock
        now."""
        self._cur = sh.current
        self._version, self._gen = sh.version, sh.list_gen
        self._words[_HOLDER] = self._token

    def flushed_now(self) -> int:
        """The published flushed offset, read without the lock (SQLite's readers of the
        WAL index header): the slot the counter word names, taken again until the
        word did not move while it was read; -1 if the header is not a live
        session's."""
        words, mm = self._words, self._mm
        if self._fd < 0:
            return -1
        _points.reach("writers.flushed")
        if not self.live():
            return -1
        for _ in range(1000):
            cur = words[_CURRENT]
            flushed = _VERSION.unpack_from(mm, _SLOT_AT[cur & 1] + _FLUSHED_AT)[0]
            if words[_CURRENT] == cur:
                return int(flushed)
        return -1

    def unhold(self) -> None:
        self._words[_HOLDER] = 0

    def publish(self, start: int, flushed: int, list_changed: bool, st: WriterState) -> None:
        """Everything: the log start, the flushed offset, the active segment's state,
        and a new list generation when ``list_changed``; into the slot the counter
        word does not name, then the flip (one store). The holder is left as it is."""
        self._version += 1
        if list_changed:
            self._gen += 1
        cur = self._cur
        slot = (cur & 1) ^ 1
        _SLOT.pack_into(self._mm, _SLOT_AT[slot], self._version, self._gen, start, flushed,
                        *st)
        self._cur = new = ((cur >> 1) + 1) << 1 | slot
        self._words[_CURRENT] = new

    def begin(self) -> None:
        """Start a session (the first writer, after recovery): this boot, a new session
        id, no reservation, no roll, no holder (one of the last session's is nobody's
        now). ``publish`` follows; the counter goes on from the last session's (a
        writer of that one may still hold its value)."""
        session = random.getrandbits(62) | 1
        _HEAD.pack_into(self._mm, 0, MAGIC, _boot_hash())
        words = self._words
        words[_RESERVED] = 0
        words[_ROLLING] = 0
        words[_HOLDER] = 0
        words[_SESSION] = session
        self._cur = int(words[_CURRENT])
        self._version = self._gen = 0

    def end(self) -> None:
        """End the session (the last writer's clean close): the next multi-writer
        recovers from the files."""
        self._words[_SESSION] = 0

    def reserve(self, end: int) -> None:
        """A writer reserved disk blocks up to ``end`` in the active segment (before
        writing below it): the bound of what a dead writer may have left there."""
        if end > self._words[_RESERVED]:
            self._words[_RESERVED] = end

    def rolling(self, base: int) -> None:
        """The holder starts sealing the active segment ``base`` (a roll)."""
        self._words[_ROLLING] = base + 1

    def rolled(self) -> None:
        """The roll is done (``publish`` follows): the new active segment has reserved
        nothing yet."""
        words = self._words
        words[_RESERVED] = 0
        words[_ROLLING] = 0

    # -- lifetime -------------------------------------------------------------------
    def close(self) -> None:
        """Unmap and close (which releases the append lock if held)."""
        if self._fd >= 0:
            self._words.release()
            self._mm.close()
            os.close(self._fd)
            self._fd = -1

    def drop_copy(self) -> None:
        """In a forked child: close this process's copies (never the parent's lock)."""
        if self._fd >= 0:
            try:
                self._words.release()
                self._mm.close()
                os.close(self._fd)
            except (OSError, ValueError):
                pass
            self._fd = -1


def exists(directory: str) -> bool:
    """True if a multi-writer ever made the writers' file of ``directory``."""
    return os.path.exists(os.path.join(directory, WRITERS_FILE))


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


def follow(directory: str, segs: tuple[Segment, ...], active: ActiveSegment | None,
           shared: Shared, settings: ActiveSettings
           ) -> tuple[list[Segment], list[Segment], ActiveSegment]:
    """The segment list as the header says it is after another writer rolled, or
    retention or compaction changed it: (the new list, the objects that left it, the
    writer's role of its last one).

    Objects whose files are unchanged are kept; the header's active segment is
    taken at the header's state with ``settings``, reloaded if it is this writer's
    ``active`` still. A segment this writer had active and another sealed leaves
    (its copy of the writable map is dropped, never touched: the file was cut back
    under it)."""
    names = os.listdir(directory)
    bases = list_segments(directory, names)
    gone = superseded_segments(directory, names, bases)
    last = shared.state.base_offset
    bases = [b for b in bases if b not in gone and b <= last]
    bases = bases[sum(1 for nxt in bases[1:] if nxt <= shared.start):]
    if not bases or bases[-1] != last:
        raise FileNotFoundError(f"the active segment {last} of {directory} is missing")
    known = {s.base_offset: s for s in segs}
    max_index_bytes, interval = settings.max_index_bytes, settings.index_interval_bytes
    new: list[Segment] = []
    for b, nxt in zip(bases, bases[1:]):
        s = known.get(b)
        if s is not None and (s.retired or s.is_active or _replaced(s)
                              or s.next_offset != nxt):
            s = None
        new.append(s if s is not None else
                   Segment(directory, b, next_offset=nxt, max_index_bytes=max_index_bytes,
                           owner=True, index_interval_bytes=interval))
    if (active is not None and active.base_offset == last and active.mapped
            and not active.segment.retired):
        active.reload(shared.state)
    else:
        active = ActiveSegment(Segment(directory, last, max_index_bytes=max_index_bytes,
                                       owner=True, index_interval_bytes=interval),
                               shared.state, settings)
    new.append(active.segment)
    kept = set(map(id, new))
    return new, [s for s in segs if id(s) not in kept], active


def _replaced(seg: Segment) -> bool:
    """Compaction swapped another file in under this sealed segment's name."""
    return not seg.at_path()


def stray_segments(directory: str, active: int) -> list[int]:
    """Segments after the active one: a writer died inside a roll, after creating the
    next segment and before publishing it. Nothing was written to them."""
    return [b for b in list_segments(directory) if b > active]


# -- after a writer that died holding the lock ---------------------------------------
def rolling_cut(directory: str, sh: Shared) -> int | None:
    """If the dead holder died inside a roll (it marked the header, or the next
    segment exists already), the size of the header's active segment's file (which it
    may have cut back), measured before anything maps it; else None."""
    base = sh.state.base_offset
    try:
        size = os.stat(segment_path(directory, base, ".log")).st_size
    except FileNotFoundError:
        return None             # ``follow`` says the active segment is missing
    if sh.rolling == base or stray_segments(directory, base):
        return size
    return None


def adopt(seg: ActiveSegment, limit: int) -> int:
    """After a writer of the active ``seg`` died inside an append: keep the whole
    batches it wrote past ``seg.size`` that continue the log (readers may have seen
    them), appended again over themselves (the same bytes), and zero what follows up
    to ``limit`` (a torn batch). Returns the batches kept."""
    kept = 0
    try:
        for buf, p, _, hdr in walk(seg.segment.fileno(), seg.size, limit,
                                   expect=seg.next_offset, check=True):
            base, length, _, _, _, last_delta, _, _, max_ts = hdr
            n = _format.LENGTH_END + length
            if seg.append(buf[p:p + n], base, base + last_delta + 1, max_ts) < 0:
                break
            kept += 1
    except Damage:
        pass
    seg.erase_after(limit)
    return kept


def remove_unwritten(directory: str, base: int) -> None:
    """Remove a segment a dead writer created inside a roll, once shown to hold no
    batch; anything else after the active segment is damage, never deleted."""
    path = segment_path(directory, base, ".log")
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        fd = -1
    if fd >= 0:
        try:
            if any(os.pread(fd, _format.HEADER_SIZE, 0)):
                raise CorruptRecordError(f"segment {base} after the active segment holds data",
                                         path, 0, base)
        finally:
            os.close(fd)
    for ext in SEGMENT_SUFFIXES:
        remove(segment_path(directory, base, ext))
    fsync_dir(directory)


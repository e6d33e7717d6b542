"""Consumer groups coordinated by files and ``flock`` only (docs/GROUPS.md).

Under ``root/__groups/<group>/``:

* ``members/<id>``: each member holds an exclusive ``flock`` on its file for its
  whole life (the lock dies with its process, even on SIGKILL, and a forked child
  never keeps it); the file's mtime is its heartbeat, refreshed by every ``poll``;
  its content names its topics and its own session timeout, by which the others
  judge it.
* ``group.lock``: held briefly by whoever changes the group's state or commits, for
  short file reads and writes only (never a user callback, a log open or a wait);
  taken with a deadline, so a member stopped while holding it stalls no one: polls
  go on with what they own, joins and commits raise ``GroupBusyError``.
* ``state.json``: the current generation, its members and their assignment, and
  the partition counts it was computed from, replaced atomically by the member
  that first sees a change of membership (or a subscribed topic appear or go).
* ``owners.json``: which member consumes which partition now. A member claims a
  partition of its assignment only when no live member of the current generation
  holds it, and releases it (after committing its position and calling
  ``on_revoke``) when a new generation gives it to another.
* ``offsets.json``: committed offsets with the generation that committed them,
  replaced durably (temp, fsync, rename, fsync dir) before ``commit()`` returns.

Every state change and every commit happens under ``group.lock`` after re-reading
the state; every file read is checked for shape (``SeglogError`` naming the file).
A commit is accepted only from a member of the current generation that holds the
partition in ``owners.json``: a member that was expelled (its claims are dropped by
the rebalance that expelled it) gets ``CommitFailedError``; a member that lost a
partition in a rebalance may still commit it until it releases it, which is how
its last position reaches the next owner. Committed offsets never move backwards
unless the owner ``seek``s back.

``commit_offsets`` records offsets for a reader outside the membership (a Spark
query, a batch job): within each partition's log, under ``group.lock``, durably,
never backwards, not fenced.
"""

from __future__ import annotations

import itertools
import json
import logging
import operator
import os
import re
import socket
import stat
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, TypeGuard, TypeVar

from . import _html, _platform
from ._files import atomic_write, fsync_dir, make_dirs, remove, require_dir
from .errors import (CommitFailedError, GroupBusyError, InvalidConfigError, LogClosedError,
                     OffsetOutOfRangeError, SeglogError, StorageError)
from .log import Log
from .message import Headers, Message, short_repr, field_getter
from .topic import check_name, partition_dir, read_partition_count

_log = logging.getLogger("seglog")
_FETCH_BYTES = 1 << 18    # one read per partition; what a poll leaves waits for the next
GROUPS_DIR = "__groups"
ASSIGNORS = ("range", "roundrobin", "sticky")
TP = tuple[str, int]
Callback = Callable[[set[TP]], None]
_T = TypeVar("_T")
# how long a poll waits for a busy group lock before it leaves the group work to its
# next look (and goes on fetching from what it owns)
_POLL_LOCK_WAIT_S = 0.01
_DEFAULT_SESSION_S = 10.0     # for member files that do not say (and describe_group)

if TYPE_CHECKING:
    _ConsumerMessageBase = tuple[str, int, int, int, bytes | None, bytes | None, Headers]
else:
    _ConsumerMessageBase = tuple


class ConsumerMessage(_ConsumerMessageBase):
    """One message as a consumer sees it:
    ``topic, partition, offset, timestamp, key, value, headers``.

    A tuple with named fields, like ``Message``; built from one 7-tuple so that the
    consume path makes it with C-level calls only.
    """

    __slots__ = ()
    _fields = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")
    topic: str = field_getter(0, "Topic name.")
    partition: int = field_getter(1, "Partition number.")
    offset: int = field_getter(2, "Logical offset in the partition.")
    timestamp: int = field_getter(3, "Milliseconds since the epoch.")
    key: bytes | None = field_getter(4, "Key bytes or None.")
    value: bytes | None = field_getter(5, "Value bytes; None is a tombstone.")
    headers: Headers = field_getter(6, "(str, bytes) pairs.")

    _asdict = Message._asdict        # one definition: it reads ``_fields``

    def __repr__(self) -> str:
        return (f"ConsumerMessage(topic={self[0]!r}, partition={self[1]}, offset={self[2]}, "
                f"timestamp={self[3]}, key={self[4]!r}, value={short_repr(self[5])}, "
                f"headers={self[6]!r})")


# -- assignors: pure functions of (members and their topics, partition counts, previous) --

def assign(assignor: str, members: dict[str, list[str]], partitions: dict[str, int],
           previous: dict[str, list[TP]] | None = None) -> dict[str, list[TP]]:
    """Every partition of every subscribed topic to exactly one member subscribed to
    its topic. ``range``: per topic, contiguous runs, the first members one more
    (the Kafka paper's Algorithm 1); ``roundrobin``: all partitions dealt in turn;
    ``sticky``: previous owners keep what they can, balanced to within one."""
    out: dict[str, list[TP]] = {m: [] for m in members}
    ids = sorted(members)
    if assignor == "range":
        for topic in sorted(partitions):
            subs = [m for m in ids if topic in members[m]]
            if not subs:
                continue
            n, k = partitions[topic], len(subs)
            start = 0
            for i, m in enumerate(subs):
                count = n // k + (1 if i < n % k else 0)
                out[m].extend((topic, p) for p in range(start, start + count))
                start += count
        return out
    tps = [(t, p) for t in sorted(partitions) for p in range(partitions[t])]
    if assignor == "roundrobin":
        cycle = itertools.cycle(ids)
        for tp in tps:
            for _ in range(len(ids)):
                m = next(cycle)
                if tp[0] in members[m]:
                    out[m].append(tp)
                    break
        return out
    # sticky: keep previous owners' partitions up to a fair quota, deal out the rest
    prev_owner = {tp: m for m, owned in (previous or {}).items() for tp in owned}
    quota = -(-len(tps) // max(1, len(ids)))
    free = []
    for tp in tps:
        owner = prev_owner.get(tp)
        if owner is not None and owner in out and tp[0] in members[owner] \
                and len(out[owner]) < quota:
            out[owner].append(tp)
        else:
            free.append(tp)
    for tp in free:
        subs = [m for m in ids if tp[0] in members[m]]
        if subs:
            out[min(subs, key=lambda m: (len(out[m]), m))].append(tp)
    for m in out:
        out[m].sort()
    return out


# -- the group's files, read with their shape checked -------------------------------

_MEMBER_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
_KEY = re.compile(r"([A-Za-z0-9._-]{1,200})/([0-9]{1,9})")


def _is_name(v: object) -> bool:
    return isinstance(v, str) and _MEMBER_NAME.fullmatch(v) is not None and v not in (".", "..")


def _is_count(v: object) -> TypeGuard[int]:
    return type(v) is int and v >= 0


def _bad(path: str, what: str) -> SeglogError:
    return SeglogError(f"group file {path} is not as seglog writes it ({what}); move the "
                       f"group's directory aside to start the group afresh")


def _dict_of(path: str, raw: Any, field: str) -> dict[str, Any]:
    v = raw.get(field)
    if not isinstance(v, dict):
        raise _bad(path, f"{field!r} must be an object")
    return v


def _top(path: str, raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise _bad(path, f"a JSON object expected, not {type(raw).__name__}")
    if raw.get("version", 1) != 1:
        raise _bad(path, f"unknown version {raw.get('version')!r}")
    return raw


def _topics(path: str, v: object, what: str) -> list[str]:
    if not isinstance(v, list) or not all(_is_name(t) for t in v):
        raise _bad(path, f"{what} must be a list of topic names")
    return list(v)


def _parse_key(path: str, k: str) -> TP:
    m = _KEY.fullmatch(k)
    if m is None or m.group(1) in (".", ".."):
        raise _bad(path, f"{k!r} is not 'topic/partition'")
    return m.group(1), int(m.group(2))


def _parse_pairs(path: str, raw: Any, field: str, first: Callable[[object], bool]
                 ) -> dict[str, list[Any]]:
    """``{"topic/p": [first, generation]}`` with checked keys and values."""
    out = _dict_of(path, _top(path, raw), field)
    for k, v in out.items():
        _parse_key(path, k)
        if not (isinstance(v, list) and len(v) == 2 and first(v[0]) and _is_count(v[1])):
            what = "member" if first is _is_name else "offset"
            raise _bad(path, f"{field}[{k!r}] must be a pair [{what}, generation]")
    return out


@dataclass
class _State:
    generation: int
    members: dict[str, list[str]]          # member id -> subscribed topics
    assignment: dict[str, list[TP]]
    assignor: str
    # the partition counts the assignment was made from (a topic not yet created is
    # absent); None in files written before it was recorded
    partitions: dict[str, int] | None = None

    @classmethod
    def empty(cls, assignor: str) -> "_State":
        return cls(0, {}, {}, assignor, {})

    @classmethod
    def parse(cls, path: str, raw: Any) -> "_State":
        top = _top(path, raw)
        gen = top.get("generation")
        if not _is_count(gen):
            raise _bad(path, "'generation' must be an int >= 0")
        members = _dict_of(path, top, "members")
        for m, ts in members.items():
            if not _is_name(m):
                raise _bad(path, f"member id {m!r}")
            _topics(path, ts, f"the topics of member {m!r}")
        assignment: dict[str, list[TP]] = {}
        for m, tps in _dict_of(path, top, "assignment").items():
            if not isinstance(tps, list) or not all(
                    isinstance(tp, list) and len(tp) == 2 and _is_name(tp[0]) and _is_count(tp[1])
                    for tp in tps):
                raise _bad(path, f"the assignment of {m!r} must be a list of [topic, partition]")
            assignment[m] = [(t, p) for t, p in tps]
        assignor = top.get("assignor", "range")
        if assignor not in ASSIGNORS:
            raise _bad(path, f"assignor {assignor!r}")
        parts = top.get("partitions")
        if parts is not None and not (isinstance(parts, dict) and all(
                _is_name(t) and type(n) is int and n >= 1 for t, n in parts.items())):
            raise _bad(path, "'partitions' must map topics to counts")
        return cls(gen, members, assignment, assignor, parts)

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "version": 1, "generation": self.generation, "members": self.members,
            "assignor": self.assignor,
            "assignment": {m: [list(tp) for tp in tps] for m, tps in self.assignment.items()}}
        if self.partitions is not None:
            doc["partitions"] = self.partitions
        return json.dumps(doc, sort_keys=True).encode()


@dataclass(frozen=True)
class _MemberInfo:
    topics: list[str]
    session_s: float | None      # None: a file from before members recorded it


def _parse_member(path: str, data: bytes) -> _MemberInfo:
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise SeglogError(f"unreadable group file {path}: {e}") from e
    top = _top(path, raw)
    topics = _topics(path, top.get("topics"), "'topics'")
    ms = top.get("session_timeout_ms")
    if ms is not None and not (type(ms) is int and ms >= 1):
        raise _bad(path, "'session_timeout_ms' must be an int >= 1")
    return _MemberInfo(topics, None if ms is None else ms / 1000.0)


def _open_file(path: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A descriptor of the group file ``path``, opened without waiting: a FIFO or a
    device put there would block ``open`` (and a reader of it) for ever, under
    ``group.lock`` too. Anything but a regular file is refused with a
    ``SeglogError`` naming it; ``FileNotFoundError`` passes."""
    fd = os.open(path, flags | os.O_NONBLOCK, mode)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _bad(path, "not a regular file")
        # back to blocking I/O: a regular file's reads and writes never wait anyway
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_json(path: str) -> Any:
    try:
        fd = _open_file(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise SeglogError(f"unreadable group file {path}: {e}") from e
    try:
        with open(fd, "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError, RecursionError) as e:
        raise SeglogError(f"unreadable group file {path}: {e}") from e


def _write(path: str, data: bytes) -> None:
    """Replace a group file durably (temp, fsync, rename, fsync dir)."""
    try:
        atomic_write(path, data)
    except OSError as e:
        raise StorageError(e.errno, f"writing group file {path} failed: {e}") from e


# descriptors a forked child must close at once: group locks held at the fork (by
# another thread) and member files being joined; a child never holds a group's lock
_CHILD_CLOSES: set[int] = set()


class _Flock:
    """``group.lock``, waited for until a deadline (non-blocking tries with back-off):
    ``GroupBusyError`` past it."""

    def __init__(self, path: str, wait_s: float, what: str) -> None:
        self.path = path
        self.wait_s = wait_s
        self.what = what
        self.fd = -1

    def __enter__(self) -> "_Flock":
        try:
            fd = _open_file(self.path, os.O_RDWR | os.O_CREAT)
        except OSError as e:
            raise SeglogError(f"{self.what}: cannot open {self.path}: {e}") from e
        _CHILD_CLOSES.add(fd)
        deadline = time.monotonic() + self.wait_s
        delay = 0.0005
        try:
            while True:
                try:
                    _platform.flock(fd, _platform.LOCK_EX_NB)
                    break
                except BlockingIOError:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise GroupBusyError(
                            f"{self.what}: another process has held {self.path} for over "
                            f"{self.wait_s:g} s (a member stopped while changing the group?); "
                            f"nothing was written") from None
                    time.sleep(min(delay, left))
                    delay = min(delay * 2, 0.02)
        except BaseException:
            _CHILD_CLOSES.discard(fd)
            os.close(fd)
            raise
        self.fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        _CHILD_CLOSES.discard(self.fd)
        os.close(self.fd)          # releases the lock
        self.fd = -1


class _GroupFiles:
    """The files of one group (see the module docstring)."""

    def __init__(self, root: str, group: str) -> None:
        self.dir = os.path.join(root, GROUPS_DIR, group)
        self.members_dir = os.path.join(self.dir, "members")
        self.lock_path = os.path.join(self.dir, "group.lock")
        self.state_path = os.path.join(self.dir, "state.json")
        self.owners_path = os.path.join(self.dir, "owners.json")
        self.offsets_path = os.path.join(self.dir, "offsets.json")
        # member files never change once they appear: parsed once per file (inode)
        self._infos: dict[str, tuple[int, _MemberInfo]] = {}

    def make(self) -> None:
        make_dirs(self.members_dir)

    def locked(self, wait_s: float, what: str) -> _Flock:
        return _Flock(self.lock_path, wait_s, what)

    def state(self, assignor: str = "range") -> _State:
        raw = _read_json(self.state_path)
        if raw is None:
            return _State.empty(assignor)
        return _State.parse(self.state_path, raw)

    def write_state(self, st: _State) -> None:
        _write(self.state_path, st.to_json())

    def owners(self) -> dict[str, list[Any]]:
        """``"topic/p"`` -> [member, generation of its claim]."""
        raw = _read_json(self.owners_path)
        return {} if raw is None else _parse_pairs(self.owners_path, raw, "owners", _is_name)

    def write_owners(self, owners: dict[str, list[Any]]) -> None:
        _write(self.owners_path, json.dumps({"version": 1, "owners": owners},
                                            sort_keys=True).encode())

    def offsets(self) -> dict[str, list[int]]:
        """``"topic/p"`` -> [committed offset, generation that committed it]."""
        raw = _read_json(self.offsets_path)
        return {} if raw is None else _parse_pairs(self.offsets_path, raw, "offsets", _is_count)

    def write_offsets(self, offsets: dict[str, list[int]]) -> None:
        _write(self.offsets_path, json.dumps({"version": 1, "offsets": offsets},
                                             sort_keys=True).encode())

    def member_path(self, member: str) -> str:
        return os.path.join(self.members_dir, member)

    def member_files(self) -> list[str]:
        """Member ids with a file (temporary files of joins, and names seglog never
        gives a member, are not members)."""
        try:
            return [n for n in os.listdir(self.members_dir) if _is_name(n) and n[0] != "."]
        except FileNotFoundError:
            return []

    def member_info(self, member: str, fd: int | None = None) -> _MemberInfo | None:
        """Its topics and session timeout, from its file (None if it is gone)."""
        path = self.member_path(member)
        own = fd is None
        if fd is None:
            try:
                fd = _open_file(path)
            except FileNotFoundError:
                return None
            except OSError as e:
                raise SeglogError(f"unreadable group file {path}: {e}") from e
        try:
            ino = os.fstat(fd).st_ino
            cached = self._infos.get(member)
            if cached is not None and cached[0] == ino:
                return cached[1]
            data = os.pread(fd, 1 << 16, 0)
            info = _parse_member(path, data)
            self._infos[member] = (ino, info)
            return info
        except OSError as e:
            raise SeglogError(f"unreadable group file {path}: {e}") from e
        finally:
            if own:
                os.close(fd)

    def probe(self, member: str, now: float, default_s: float, tidy: bool = False) -> str:
        """``"alive"``, ``"dead"`` (no process holds its lock) or ``"silent"`` (alive,
        but no heartbeat for its own session timeout, ``default_s`` if its file does
        not say). With ``tidy`` (group lock held) a dead member's file is removed."""
        path = self.member_path(member)
        try:
            fd = _open_file(path)
        except FileNotFoundError:
            return "dead"
        except OSError as e:
            raise SeglogError(f"unreadable group file {path}: {e}") from e
        try:
            try:
                _platform.flock(fd, _platform.LOCK_EX_NB)
            except BlockingIOError:
                age = now - os.fstat(fd).st_mtime
                info = self.member_info(member, fd)
                session = default_s if info is None or info.session_s is None else info.session_s
                return "silent" if age > session else "alive"
            if tidy:
                remove(path)   # nobody holds it: its process is gone
            self._infos.pop(member, None)
            return "dead"
        finally:
            os.close(fd)


def _check_partition(p: object) -> int:
    """A partition number given by a caller: an int (``True`` is not partition 1)."""
    if isinstance(p, bool) or not isinstance(p, int):
        raise TypeError(f"partition must be an int, not {type(p).__name__}")
    return p


def _key(tp: TP) -> str:
    return f"{tp[0]}/{tp[1]}"


def _partition_counts(root: str, topics: Iterable[str]) -> dict[str, int]:
    """The partition counts of the topics that exist (a topic not created yet has
    none: its subscribers wait for it)."""
    out = {}
    for t in topics:
        n = read_partition_count(root, t)
        if n is not None:
            out[t] = n
    return out


def _rebalance(files: _GroupFiles, root: str, me: str | None, my_topics: list[str] | None,
               default_s: float, assignor: str) -> _State:
    """Under the group lock: the current state, or a new generation if membership
    changed (dead and silent members out, ``me`` in, or out with ``my_topics``
    None) or a subscribed topic appeared or went."""
    st = files.state(assignor)
    now = time.time()
    live: dict[str, list[str]] = {}
    for m in sorted(set(st.members) | set(files.member_files())):
        if m == me:
            continue
        if files.probe(m, now, default_s, tidy=True) == "alive":
            topics = st.members.get(m)
            if topics is None:
                info = files.member_info(m)
                topics = None if info is None else info.topics
            if topics is not None:
                live[m] = list(topics)
    if me is not None and my_topics is not None:
        live[me] = my_topics
    counts = _partition_counts(root, sorted({t for ts in live.values() for t in ts}))
    if live == st.members and counts == st.partitions:
        return st
    group_assignor = st.assignor if st.members else assignor
    new = _State(st.generation + 1, live, assign(group_assignor, live, counts, st.assignment),
                 group_assignor, counts)
    files.write_state(new)
    # partitions held by members no longer in the group are free at once
    owners = files.owners()
    kept = {k: v for k, v in owners.items() if v[0] in live}
    if kept != owners:
        files.write_owners(kept)
    return new


_CONSUMERS: "weakref.WeakSet[Consumer]" = weakref.WeakSet()


class Consumer:
    """A member of consumer group ``group`` reading ``topics`` under ``root``.

    At-least-once delivery: positions are committed by ``commit()``, by
    auto-commit (``auto_commit_ms``, at the start of a poll, for what earlier polls
    returned) and by ``close()``; a new owner starts at the committed offset. The
    poll loop is the heartbeat: a member that does not poll (or iterate) for its
    ``session_timeout_ms`` is expelled and its partitions go to the others. A topic
    that does not exist yet is waited for: its partitions are assigned once it is
    created. ``on_assign`` and ``on_revoke`` are called with the partitions this
    member gains and loses, so that the partitions they announced are exactly those
    that polls deliver from. Joining, ``commit()`` and ``close()`` wait at most
    ``lock_timeout_ms`` for the group's lock (``GroupBusyError`` past it, nothing
    written); ``poll`` never waits for it beyond its own timeout. A process forked
    from the consumer's may not use it (the child never holds the member's lock).
    """

    def __init__(self, root: str | os.PathLike[str], group: str, topics: Iterable[str],
                 auto_offset_reset: str = "earliest", auto_commit_ms: int | None = 5000,
                 session_timeout_ms: int = 10_000, assignor: str = "range",
                 on_assign: Callback | None = None, on_revoke: Callback | None = None,
                 member_id: str | None = None, lock_timeout_ms: int = 10_000) -> None:
        check_name(group, "group")
        if isinstance(topics, str):
            raise TypeError("topics must be a list of topic names, not a str")
        topic_list = sorted({check_name(t) for t in topics})
        if not topic_list:
            raise InvalidConfigError("subscribe to at least one topic")
        if auto_offset_reset not in ("earliest", "latest"):
            raise InvalidConfigError(
                f"auto_offset_reset must be 'earliest' or 'latest', not {auto_offset_reset!r}")
        if assignor not in ASSIGNORS:
            raise InvalidConfigError(f"assignor must be one of {ASSIGNORS}, not {assignor!r}")
        for name, v, lo in (("session_timeout_ms", session_timeout_ms, 10),
                            ("auto_commit_ms", auto_commit_ms, 1),
                            ("lock_timeout_ms", lock_timeout_ms, 0)):
            if v is None and name == "auto_commit_ms":
                continue
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{name} must be an int")
            if v < lo:
                raise InvalidConfigError(f"{name} must be >= {lo}, not {v}")
        for name, cb in (("on_assign", on_assign), ("on_revoke", on_revoke)):
            if cb is not None and not callable(cb):
                raise TypeError(f"{name} must be callable")
        if member_id is None:
            member_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
            member_id = "".join(c if c.isalnum() or c in "._-" else "-" for c in member_id)[:200]
        check_name(member_id, "member")
        if member_id.startswith("."):
            raise InvalidConfigError(f"member id {member_id!r}: names starting with '.' are "
                                     f"the group's temporary files")
        self.root = os.path.abspath(os.fspath(root))
        require_dir(self.root, "topic root", create=True)    # a file: NotALogError
        if not os.path.isdir(self.root):
            # topics may come later, the root of topics may not: a mistyped path
            # would otherwise become a new tree of directories
            raise InvalidConfigError(f"{self.root} is not a directory (a root of topics)")
        self.group = group
        self.topics = topic_list
        self.member_id = member_id
        self._reset = auto_offset_reset
        self._auto_commit_s = None if auto_commit_ms is None else auto_commit_ms / 1000.0
        self._session_ms = session_timeout_ms
        self._session_s = session_timeout_ms / 1000.0
        self._lock_s = lock_timeout_ms / 1000.0
        self._check_s = min(0.1, self._session_s / 10)
        self._assignor = assignor
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._files = _GroupFiles(self.root, group)
        self._generation = 0
        self._joined = False                  # in the generation it adopted last
        # the partitions the current generation gives this member: on_assign has
        # announced them, and on_revoke announces each that leaves
        self._assigned: frozenset[TP] = frozenset()
        self._owned: dict[TP, Log] = {}       # claimed, assigned partitions and their readers
        self._positions: dict[TP, int] = {}
        # per partition, what the last read returned and nobody took yet: the set's
        # next offset and its messages
        self._fetched: dict[TP, tuple[int, Iterator[ConsumerMessage]]] = {}
        self._seeked: set[TP] = set()
        # revoked partitions whose claim is still to be released (the group's lock was
        # busy): the position to commit (None: commit nothing) and whether it was seeked
        self._releasing: dict[TP, tuple[int | None, bool]] = {}
        # an error met by a poll that returned what it had read before it: raised by
        # the next poll (unless the partition went or was seeked)
        self._pending_error: tuple[TP, Exception] | None = None
        self._callback_error: Exception | None = None
        # the batch an iterator is yielding: (messages, its iterator, epoch), so that
        # commit() and close() count only what it yielded; the epoch moves with every
        # poll that returns messages and every seek
        self._undelivered: tuple[list[ConsumerMessage], Iterator[ConsumerMessage], int] | None \
            = None
        self._epoch = 0
        self._rr = 0
        self._closed = False
        self._pid = os.getpid()
        self._forked_from: int | None = None
        self._member_fd = -1
        self._last_check = 0.0
        self._last_commit = time.monotonic()
        self._state_sig: tuple[int, int, int] | None = None
        self._state_read = 0.0
        self._state: _State | None = None
        self._lock_wait = _POLL_LOCK_WAIT_S   # this look's wait for the group lock
        self._busy = False                    # this look found the group lock busy
        _CONSUMERS.add(self)
        self._join()
        try:
            self._claim()
            self._raise_callback_error()
        except BaseException:
            self._abort_join()
            raise

    # -- the group lock --------------------------------------------------------------
    def _locked(self, what: str) -> _Flock:
        """The group lock for a call that must do its work: ``lock_timeout_ms``."""
        return self._files.locked(self._lock_s, f"consumer {self.member_id} of group "
                                                f"{self.group!r}: {what}")

    def _try_locked(self, fn: Callable[[], _T]) -> _T | None:
        """``fn()`` under the group lock if it is free within this look's short wait;
        None if not (the poll's group work waits for its next look)."""
        if self._busy:
            return None
        try:
            with self._files.locked(self._lock_wait, "poll"):
                return fn()
        except GroupBusyError:
            self._busy = True
            return None

    # -- membership ----------------------------------------------------------------
    def _join(self) -> None:
        files = self._files
        files.make()
        path = files.member_path(self.member_id)
        tmp = os.path.join(files.members_dir, f".join-{self.member_id}")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        _CHILD_CLOSES.add(fd)
        renamed = False
        try:
            _platform.flock(fd, _platform.LOCK_EX_NB)
            os.write(fd, json.dumps({"topics": self.topics, "pid": os.getpid(),
                                     "host": socket.gethostname(),
                                     "session_timeout_ms": self._session_ms}).encode())
            with self._locked("join"):
                if os.path.exists(path):
                    if files.probe(self.member_id, time.time(), self._session_s) != "dead":
                        raise InvalidConfigError(
                            f"member id {self.member_id!r} is in use in group {self.group!r}")
                # locked before it appears: a prober never sees it unlocked
                os.rename(tmp, path)
                renamed = True
                fsync_dir(files.members_dir)
                try:
                    st = self._rebalance()
                except BaseException:
                    remove(path)         # ours, and the lock is held: no one saw it join
                    raise
        except BaseException:
            _CHILD_CLOSES.discard(fd)
            os.close(fd)
            if not renamed:
                remove(tmp)
            raise
        _CHILD_CLOSES.discard(fd)      # the consumer's own fork handling closes it now
        self._member_fd = fd
        self._adopt(st)

    def _abort_join(self) -> None:
        """The constructor failed after joining (a callback raised): leave again."""
        try:
            self.close()
        except SeglogError as e:
            _log.warning("seglog: leaving group %s after a failed start: %s", self.group, e)

    def _rebalance(self, leaving: bool = False) -> _State:
        """Under the group lock: the current generation, or a new one with this member
        in it (or out of it, ``leaving``)."""
        return _rebalance(self._files, self.root, self.member_id,
                          None if leaving else self.topics, self._session_s, self._assignor)

    def _heartbeat(self) -> None:
        os.utime(self._member_fd)

    def _check_group(self, lock_wait: float, force: bool = False) -> None:
        """Heartbeat; adopt a new generation; start one if a member died, went silent
        or wants in, or a subscribed topic appeared or went; release and claim partitions.
        Group work that needs the lock is left to a later look if the lock is busy
        for ``lock_wait``."""
        now = time.monotonic()
        if not force and now - self._last_check < self._check_s:
            return
        self._last_check = now
        self._lock_wait = lock_wait
        self._busy = False
        self._heartbeat()
        files = self._files
        try:
            s = os.stat(files.state_path)
            sig: tuple[int, int, int] | None = (s.st_mtime_ns, s.st_size, s.st_ino)
        except FileNotFoundError:
            sig = None
        st = self._state
        # the file's identity tells a change at once; a full read every second covers
        # a replacement the identity cannot tell (same size, same recycled inode,
        # within the file system's clock tick)
        if sig != self._state_sig or force or st is None or now - self._state_read > 1.0:
            self._state_sig = sig
            self._state_read = now
            st = self._state = files.state(self._assignor)
        if self.member_id not in st.members:
            if self._joined:
                _log.warning("seglog: consumer %s of group %s was expelled (generation "
                             "%d); rejoining", self.member_id, self.group, st.generation)
                self._joined = False
                # its claims were dropped with it: nothing to commit or release
                self._revoke(set(self._assigned), commit=False)
                self._assigned = frozenset()
            joined = self._try_locked(self._rebalance)
            if joined is None:
                return
            st = joined
        if st.generation != self._generation or not self._joined:
            self._adopt(st)
        if self._stale(st):
            new = self._try_locked(self._rebalance)
            if new is not None and (new.generation != self._generation or not self._joined):
                self._adopt(new)
        self._release()
        self._claim()

    def _stale(self, st: _State) -> bool:
        """Is a rebalance due: a member of the generation dead or silent, a member
        file not in it alive (it wants in) or dead (to tidy), or a subscribed topic
        created or deleted since the assignment?"""
        files = self._files
        wall = time.time()
        for m in st.members:
            if m != self.member_id and files.probe(m, wall, self._session_s) != "alive":
                return True
        for m in files.member_files():
            if m not in st.members and m != self.member_id \
                    and files.probe(m, wall, self._session_s) != "silent":
                return True
        known = st.partitions or {}
        # a deleted topic (its record gone) leaves the assignment too: its members
        # would otherwise fail every other poll on its vanished logs for ever
        return any(read_partition_count(self.root, t) != known.get(t) for t in self.topics)

    def _adopt(self, st: _State) -> None:
        """Take generation ``st``: revoke what it no longer assigns to this member,
        announce what it adds (claims follow, in ``_claim``)."""
        self._state = st
        mine = frozenset(st.assignment.get(self.member_id, ()))
        if self._owned:
            # a claim gone means a generation in between went on without this member
            # (expelled, and put back before it looked): another member may have read
            # and committed those partitions since. They are lost, and (if still
            # assigned) announced and claimed anew, from the committed offsets.
            owners = self._files.owners()
            gone = {tp for tp in self._owned
                    if owners.get(_key(tp), [None])[0] != self.member_id}
            if gone:
                _log.warning("seglog: consumer %s of group %s lost %s in a generation it "
                             "missed; taking them anew", self.member_id, self.group,
                             sorted(gone))
                self._revoke(gone, commit=False)
                self._assigned -= gone
        lost = self._assigned - mine
        if lost:
            self._revoke(lost, commit=True)
        added = mine - self._assigned
        self._generation = st.generation
        self._assigned = mine
        self._joined = self.member_id in st.members
        if added:
            self._callback(self._on_assign, added)

    def _callback(self, cb: Callback | None, tps: Iterable[TP]) -> None:
        """A user callback, outside every lock; what it raises is raised by the poll
        (or the call) once the group work is done."""
        if cb is None:
            return
        try:
            cb(set(tps))
        except Exception as e:
            if self._callback_error is None:
                self._callback_error = e

    def _raise_callback_error(self) -> None:
        e, self._callback_error = self._callback_error, None
        if e is not None:
            raise e

    def _claim(self) -> None:
        """Start on assigned partitions nobody live in this generation still holds."""
        want = sorted(self._assigned - set(self._owned) - set(self._releasing))
        if not want:
            return
        files = self._files
        generation = self._generation

        def claim() -> tuple[list[TP], dict[str, list[int]]] | None:
            st = files.state(self._assignor)
            if st.generation != generation:
                self._state_sig = None     # a newer generation: adopt it first
                return None
            owners = files.owners()
            got = []
            for tp in want:
                holder = owners.get(_key(tp))
                if holder is not None and holder[0] != self.member_id and holder[0] in st.members:
                    continue           # its owner has not given it up yet
                owners[_key(tp)] = [self.member_id, generation]
                got.append(tp)
            if got:
                files.write_owners(owners)
            return got, files.offsets()

        done = self._try_locked(claim)
        if done is None:
            return
        got, offsets = done
        for tp in got:
            log = Log.open(partition_dir(self.root, tp[0], tp[1]), readonly=True)
            self._owned[tp] = log
            committed = offsets.get(_key(tp))
            if committed is not None:
                pos = committed[0]
            else:
                pos = log.start_offset if self._reset == "earliest" else log.end_offset
            if pos < log.start_offset:
                _log.warning("seglog: group %s: committed offset %d of %s-%d was deleted by "
                             "retention; resuming at the log start %d", self.group, pos,
                             tp[0], tp[1], log.start_offset)
                pos = log.start_offset
            self._positions[tp] = min(pos, log.end_offset)

    def _revoke(self, tps: Iterable[TP], commit: bool) -> None:
        """Give partitions up: tell the user (who may still ``commit()`` them), stop
        reading them, then commit their positions (auto-commit on) and release them
        for their next owner, now or at a later look if the group lock is busy."""
        tps = set(tps)
        if not tps:
            return
        self._callback(self._on_revoke, tps)
        for tp in tps:
            log = self._owned.pop(tp, None)
            if log is not None:
                log.close()
                pos = self._positions.pop(tp)
                self._releasing[tp] = (pos if commit and self._auto_commit_s is not None
                                       else None, tp in self._seeked)
            self._fetched.pop(tp, None)
            self._seeked.discard(tp)
            if self._pending_error is not None and self._pending_error[0] == tp:
                self._pending_error = None
        self._release()

    def _release(self) -> None:
        """Commit the final positions of revoked partitions and drop their claims, if
        the group lock is free now (else at a later look)."""
        if self._releasing:
            refused = self._try_locked(self._release_locked)
            if refused is not None:
                self._releasing.clear()
                self._warn(refused)

    def _release_locked(self) -> list[str]:
        """``_release``'s work, under the group lock; the commits refused (logged by
        the caller, after the lock: a logging handler may block)."""
        releasing = self._releasing
        refused = []
        todo = {tp: pos for tp, (pos, _) in releasing.items() if pos is not None}
        if todo:
            try:
                self._commit_locked(todo, {tp for tp, (_, seeked) in releasing.items() if seeked})
            except CommitFailedError as e:
                refused.append(str(e))
        owners = self._files.owners()
        mine = [k for k in map(_key, releasing) if k in owners and owners[k][0] == self.member_id]
        for k in mine:
            del owners[k]
        if mine:
            self._files.write_owners(owners)
        return refused

    @staticmethod
    def _warn(messages: list[str]) -> None:
        for m in messages:
            _log.warning("seglog: %s", m)

    # -- consuming -----------------------------------------------------------------
    def poll(self, timeout_ms: int = 1000, max_records: int = 500) -> list[ConsumerMessage]:
        """Messages from owned partitions, up to ``max_records``; waits up to
        ``timeout_ms`` for some (0: look once), and returns within it whatever other
        members do. Heartbeats, follows rebalances and auto-commits as it goes.

        A poll that fails (a damaged batch, say) moves no position; one that fails
        on a partition after reading others returns what it read, and the next poll
        raises the error."""
        self._check_open()
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)):
            raise TypeError("timeout_ms must be a number")
        if isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1:
            raise TypeError("max_records must be an int >= 1")
        self._give_back()
        if self._pending_error is not None:
            e = self._pending_error[1]
            self._pending_error = None
            raise e
        deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        delay = 0.0005
        while True:
            self._check_group(min(_POLL_LOCK_WAIT_S, max(0.0, deadline - time.monotonic())))
            self._raise_callback_error()
            if self._auto_commit_s is not None and \
                    time.monotonic() - self._last_commit >= self._auto_commit_s:
                self._auto_commit()
            out = self._fetch(max_records)
            if out:
                self._epoch += 1
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                return out
            time.sleep(min(delay, left, self._check_s))
            # back off to 50 ms between looks: an idle member costs well under 1 % of
            # a core, and new data waits at most that long
            delay = min(delay * 2, 0.05)

    def _fetch(self, max_records: int) -> list[ConsumerMessage]:
        out: list[ConsumerMessage] = []
        tps = sorted(self._owned)
        if not tps:
            return out
        n = len(tps)
        start = self._rr % n
        self._rr += 1
        # positions and read-ahead change only when the fetch is over, by what it
        # returns: a fetch interrupted half-way moves nothing
        moved: dict[TP, int] = {}
        keep: dict[TP, tuple[int, Iterator[ConsumerMessage]]] = {}
        error: tuple[TP, Exception] | None = None
        for i in range(n):
            tp = tps[(start + i) % n]
            buffered = self._fetched.pop(tp, None)
            before = len(out)
            want = max_records - before
            try:
                if buffered is None:
                    log = self._owned[tp]
                    pos = self._positions[tp]
                    try:
                        ms = log.read(pos, _FETCH_BYTES)
                    except OffsetOutOfRangeError:
                        start_off = log.start_offset
                        _log.warning("seglog: group %s: offset %d of %s-%d was deleted by "
                                     "retention; resuming at the log start %d", self.group,
                                     pos, tp[0], tp[1], start_off)
                        moved[tp] = start_off
                        continue
                    if not ms:
                        continue
                    buffered = ms.next_offset, ms.iter_as(ConsumerMessage, tp)
                out += itertools.islice(buffered[1], want)
            except Exception as e:
                # damage (or an I/O error) in this partition: what was read before it
                # is returned, the error waits for the next poll
                if len(out) > before:
                    moved[tp] = out[-1][2] + 1
                error = (tp, e)
                break
            if len(out) - before == want:
                # the rest of what was read waits for the next poll: no read again
                keep[tp] = buffered
                moved[tp] = out[-1][2] + 1
                break
            # all of it taken: go on after the set (past batches compaction emptied)
            moved[tp] = max(self._positions[tp], buffered[0])
        self._positions.update(moved)
        self._fetched.update(keep)
        if error is not None:
            if not out:
                raise error[1]
            self._pending_error = error
        return out

    def __iter__(self) -> Iterator[ConsumerMessage]:
        """Messages for ever (until ``close()``), blocking while there are none.

        Leaving the loop early (``break``) gives back what the last poll returned and
        the loop did not reach: the positions (and the next commit) count only the
        messages yielded. The loop ends when the consumer is closed (by another
        thread, or a callback); an error of a poll, such as a partition's log whose
        directory was removed (``LogClosedError`` too), is raised, never taken for
        that end."""
        while not self._closed:
            try:
                batch = self.poll(timeout_ms=1000)
            except LogClosedError:
                if self._closed:
                    return
                raise
            if not batch:
                continue
            it = iter(batch)
            token = (batch, it, self._epoch)
            self._undelivered = token
            try:
                yield from it
            finally:
                if self._undelivered is token:
                    self._undelivered = None
                rest = list(it)
                if rest and not self._closed and self._epoch == token[2]:
                    self._rewind(rest)

    def _firsts(self, msgs: list[ConsumerMessage]) -> dict[TP, int]:
        """Per partition, the first offset among ``msgs``."""
        return {(m[0], m[1]): m[2] for m in reversed(msgs)}

    def _rewind(self, rest: list[ConsumerMessage]) -> None:
        for tp, off in self._firsts(rest).items():
            if tp in self._owned:
                self._positions[tp] = off
                self._fetched.pop(tp, None)

    def _give_back(self) -> None:
        """What an iterator holds back goes back to its partitions (it yields no
        more of its batch): before a poll, a seek or closing."""
        u, self._undelivered = self._undelivered, None
        if u is not None and u[2] == self._epoch:
            rest = list(u[1])
            if rest:
                self._rewind(rest)

    def _delivered(self) -> dict[TP, int]:
        """The positions of the owned partitions, less what an iterator holds back."""
        out = dict(self._positions)
        u = self._undelivered
        if u is not None and u[2] == self._epoch:
            left = operator.length_hint(u[1])
            if left:
                for tp, off in self._firsts(u[0][len(u[0]) - left:]).items():
                    if tp in out:
                        out[tp] = off
        return out

    # -- offsets -------------------------------------------------------------------
    def commit(self) -> None:
        """Durably commit the position (next offset) of every owned partition.

        ``CommitFailedError`` if this member no longer owns them in the group's
        current generation (it rejoins at its next poll; nothing is committed).
        ``GroupBusyError`` if the group's lock stayed busy for ``lock_timeout_ms``
        (nothing is committed; commit again later). A position below the committed
        offset is committed only after a ``seek``.
        """
        self._check_open()
        todo = self._delivered()
        if not todo:
            return
        with self._locked("commit"):
            self._commit_locked(todo, self._seeked & set(todo))
        self._seeked.difference_update(todo)
        self._last_commit = time.monotonic()

    def _auto_commit(self) -> None:
        todo = self._delivered()
        if not todo:
            self._last_commit = time.monotonic()
            return
        try:
            done = self._try_locked(lambda: self._commit_locked(todo, self._seeked & set(todo)))
        except CommitFailedError as e:
            _log.warning("seglog: auto-commit: %s", e)
            self._state_sig = None          # look at the group now
            self._last_check = 0.0
            self._last_commit = time.monotonic()
            return
        if done is None:
            # the lock is busy: try again at the next look at the group
            self._last_commit = time.monotonic() - self._auto_commit_s + self._check_s \
                if self._auto_commit_s is not None else time.monotonic()
            return
        self._seeked.difference_update(todo)
        self._last_commit = time.monotonic()

    def _commit_locked(self, todo: dict[TP, int], seeked: set[TP]) -> bool:
        """Under the group lock: check the fence, write the offsets that move."""
        files = self._files
        st = files.state(self._assignor)
        if self.member_id not in st.members:
            self._state_sig = None
            raise CommitFailedError(
                f"consumer {self.member_id} of group {self.group!r} (generation "
                f"{self._generation}) is not a member of generation {st.generation}: it "
                f"was expelled; commit refused, it rejoins at its next poll")
        owners = files.owners()
        for tp in todo:
            holder = owners.get(_key(tp))
            if holder is None or holder[0] != self.member_id:
                raise CommitFailedError(f"consumer {self.member_id} no longer owns "
                                        f"{tp[0]}-{tp[1]}: commit refused")
        offsets = files.offsets()
        changed = False
        for tp, pos in todo.items():
            cur = offsets.get(_key(tp))
            if cur is not None and (cur[0] == pos or (pos < cur[0] and tp not in seeked)):
                continue
            offsets[_key(tp)] = [pos, st.generation]
            changed = True
        if changed:
            files.write_offsets(offsets)
        return True

    def position(self, topic: str, partition: int) -> int:
        """The next offset this member will return from an owned partition."""
        self._check_open()
        return self._delivered()[self._owned_tp(topic, partition)]

    def committed(self, topic: str, partition: int) -> int | None:
        """The group's committed offset of a partition (any owner), None if none."""
        self._check_open()
        c = self._files.offsets().get(_key((check_name(topic), _check_partition(partition))))
        return None if c is None else int(c[0])

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Move the position of an owned partition; a later commit may move the
        committed offset back to it."""
        self._check_open()
        tp = self._owned_tp(topic, partition)
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise TypeError("offset must be an int")
        log = self._owned[tp]
        if not log.start_offset <= offset <= log.end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{log.start_offset}, {log.end_offset}]")
        self._give_back()
        self._epoch += 1
        self._positions[tp] = offset
        self._fetched.pop(tp, None)
        self._seeked.add(tp)
        if self._pending_error is not None and self._pending_error[0] == tp:
            self._pending_error = None

    def _owned_tp(self, topic: str, partition: int) -> TP:
        tp = (check_name(topic), _check_partition(partition))
        if tp not in self._owned:
            raise InvalidConfigError(f"{topic}-{partition} is not owned by this consumer "
                                     f"(assignment: {sorted(self._assigned)})")
        return tp

    def assignment(self) -> frozenset[TP]:
        """The (topic, partition)s the current generation gives this member (what
        ``on_assign`` announced and ``on_revoke`` did not take back)."""
        return self._assigned

    @property
    def generation(self) -> int:
        return self._generation

    # -- lifecycle -----------------------------------------------------------------
    def _check_open(self) -> None:
        if self._forked_from is not None:
            raise SeglogError(
                f"consumer {self.member_id} of group {self.group!r} was made by process "
                f"{self._forked_from}; this process ({self._pid}) is a fork of it and may "
                f"not use it: make a consumer here")
        if self._closed:
            raise LogClosedError(f"consumer {self.member_id} of group {self.group!r} is closed")

    def _after_fork(self) -> None:
        """In a forked child: the consumer is the parent's. Its copy of the member
        file's descriptor is closed (closing a copy never releases the parent's
        lock, and the child must not keep the member alive when the parent dies);
        every call refuses, ``close`` touches nothing."""
        if self._forked_from is None:
            self._forked_from = self._pid
        self._pid = os.getpid()
        if self._member_fd >= 0:
            try:
                os.close(self._member_fd)
            except OSError:
                pass
            self._member_fd = -1

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Commit (auto-commit on), give the partitions up and leave the group at once:
        the others rebalance at their next poll, without waiting for a timeout.

        The consumer is closed however this ends; ``GroupBusyError`` if the group's
        lock stayed busy for ``lock_timeout_ms``: then nothing was committed (the next
        owners start at the last commit) and the group sees this member gone by its
        released lock. In a forked child it changes no file."""
        if self._closed:
            return
        if self._forked_from is not None:
            self._closed = True
            return
        self._give_back()
        self._busy = False
        self._lock_wait = _POLL_LOCK_WAIT_S
        try:
            try:
                # on_revoke may still commit() what it is given
                self._revoke(set(self._assigned), commit=True)
            finally:
                self._closed = True
            self._assigned = frozenset()
            with self._locked("leave"):
                refused = self._release_locked()
                self._rebalance(leaving=True)
                remove(self._files.member_path(self.member_id))
            self._warn(refused)
        finally:
            for log in self._owned.values():
                log.close()
            self._owned.clear()
            self._releasing.clear()
            if self._member_fd >= 0:
                _CHILD_CLOSES.discard(self._member_fd)
                os.close(self._member_fd)
                self._member_fd = -1
            _CONSUMERS.discard(self)
        self._raise_callback_error()

    def __del__(self) -> None:
        # dropped without close(): leave as a killed process would (no commit, no
        # callback), so that the group sees the member gone at once instead of
        # waiting for its session timeout
        fd = getattr(self, "_member_fd", -1)
        if fd >= 0 and getattr(self, "_forked_from", None) is None:
            self._member_fd = -1
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<seglog.Consumer {self.member_id} group={self.group!r} "
                f"generation={self._generation} owns={sorted(self._owned)}"
                f"{' closed' if self._closed else ''}>")


class GroupDescription(dict[str, Any]):
    """``describe_group``'s answer: a plain dict (JSON-ready) that a notebook shows
    as tables."""

    def _repr_html_(self) -> str:
        members = _html.grid(
            f"group {self['group']!r}: generation {self['generation']}, assignor "
            f"{self['assignor']}", ("member", "status", "topics", "assignment"),
            [(m, v["status"], ", ".join(v["topics"]),
              ", ".join(f"{t}-{p}" for t, p in v["assignment"]))
             for m, v in self["members"].items()])
        parts = _html.grid("partitions", ("partition", "owner", "committed", "end", "lag"),
                           [(tp, v["owner"] or "-", _dash(v["committed"]), _dash(v["end"]),
                             _dash(v["lag"])) for tp, v in self["partitions"].items()])
        return members + parts


def _dash(v: object) -> object:
    return "-" if v is None else v


def list_groups(root: str | os.PathLike[str]) -> list[str]:
    """The groups under ``root`` (directories of ``__groups/`` with a group's name;
    anything else there is not a group)."""
    gdir = os.path.join(os.fspath(root), GROUPS_DIR)
    try:
        names = os.listdir(gdir)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(n for n in names if _is_name(n) and os.path.isdir(os.path.join(gdir, n)))


def describe_group(root: str | os.PathLike[str], group: str) -> GroupDescription:
    """The group as its files and its members' locks say: ``generation``,
    ``members`` (id -> topics, assignment and ``status``: ``"alive"``, ``"silent"``
    past its session timeout, or ``"dead"``, its process gone and the group not yet
    rebalanced), and per ``"topic-partition"``: ``owner`` (None when nobody holds
    it, or its holder is dead), ``committed``, ``end``, ``lag`` (end - committed, or
    None with nothing committed). Changes nothing."""
    check_name(group, "group")
    root = os.path.abspath(os.fspath(root))
    require_dir(root, "topic root", create=True)      # a file: NotALogError
    files = _GroupFiles(root, group)
    if not os.path.isdir(files.dir):
        raise InvalidConfigError(f"no group {group!r} under {root}")
    st = files.state()
    owners = files.owners()
    offsets = files.offsets()
    now = time.time()
    status: dict[str, str] = {}

    def probe(m: str) -> str:
        if m not in status:
            status[m] = files.probe(m, now, _DEFAULT_SESSION_S)
        return status[m]

    topics = sorted({t for ts in st.members.values() for t in ts}
                    | {_parse_key(files.offsets_path, k)[0] for k in offsets})
    parts: dict[str, dict[str, Any]] = {}
    for t in topics:
        n = read_partition_count(root, t)
        for p in range(n or 0):
            try:
                log = Log.open(partition_dir(root, t, p), readonly=True)
            except (OSError, SeglogError):
                end = None
            else:
                with log:
                    end = log.end_offset
            c = offsets.get(_key((t, p)))
            holder = owners.get(_key((t, p)))
            owner = holder[0] if holder and probe(holder[0]) != "dead" else None
            parts[f"{t}-{p}"] = {"owner": owner,
                                 "committed": c[0] if c else None, "end": end,
                                 "lag": (end - c[0]) if (c and end is not None) else None}
    return GroupDescription(
        group=group, generation=st.generation, assignor=st.assignor,
        members={m: {"topics": ts, "assignment": sorted(st.assignment.get(m, [])),
                     "status": probe(m)}
                 for m, ts in st.members.items()},
        partitions=parts)


def commit_offsets(root: str | os.PathLike[str], group: str,
                   offsets: Mapping[tuple[str, int], int],
                   lock_timeout_ms: int = 10_000) -> dict[tuple[str, int], int]:
    """Durably record ``{(topic, partition): next offset}`` as ``group``'s committed
    offsets without being a member: for a reader that keeps its own position (a Spark
    query's checkpoint, a batch job's offset ranges) and wants ``describe_group`` to
    show its progress and lag.

    Under ``group.lock``, in ``offsets.json`` (the group and its directory are made
    when missing; an empty mapping changes nothing). Not fenced by generations,
    since the caller's own record is the truth; an offset below the committed one is
    ignored, so committed offsets never move backwards. Returns the committed
    offsets of the given partitions afterwards. ``InvalidConfigError``/``TypeError``
    for a bad group, topic, partition or offset, ``OffsetOutOfRangeError`` for an
    offset outside its partition's log (``start_offset`` to ``end_offset``),
    ``GroupBusyError`` if the lock stayed busy for ``lock_timeout_ms``: then nothing
    was written.
    """
    check_name(group, "group")
    if not isinstance(offsets, Mapping):
        raise TypeError(f"offsets must be a mapping, not {type(offsets).__name__}")
    if isinstance(lock_timeout_ms, bool) or not isinstance(lock_timeout_ms, int):
        raise TypeError("lock_timeout_ms must be an int")
    if lock_timeout_ms < 0:
        raise InvalidConfigError(f"lock_timeout_ms must be >= 0, not {lock_timeout_ms}")
    root = os.path.abspath(os.fspath(root))
    require_dir(root, "topic root", create=True)      # a file there: refused untouched
    todo: dict[TP, int] = {}
    counts: dict[str, int] = {}
    for tp, off in offsets.items():
        if not isinstance(tp, tuple) or len(tp) != 2:
            raise TypeError(f"offsets keys must be (topic, partition), not {tp!r}")
        topic, p = tp
        check_name(topic)
        if topic not in counts:
            n = read_partition_count(root, topic)
            if n is None:
                raise InvalidConfigError(f"topic {topic!r} does not exist under {root}")
            counts[topic] = n
        for what, v in (("partition", p), ("offset", off)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{what} must be an int, not {type(v).__name__}")
        if not 0 <= p < counts[topic]:
            raise InvalidConfigError(
                f"topic {topic!r} has partitions 0 to {counts[topic] - 1}, not {p}")
        if off < 0:
            raise InvalidConfigError(f"offset must be >= 0, not {off} ({topic}-{p})")
        todo[(topic, p)] = off
    if not todo:
        return {}
    # an offset the log never had would make the group skip what is appended up to it
    for (topic, p), off in todo.items():
        with Log.open(partition_dir(root, topic, p), readonly=True) as log:
            first, end = log.start_offset, log.end_offset
        if not first <= off <= end:
            raise OffsetOutOfRangeError(
                f"offset {off} is outside {topic}-{p}'s log [{first}, {end}]: nothing "
                f"committed")
    files = _GroupFiles(root, group)
    files.make()
    with files.locked(lock_timeout_ms / 1000.0, f"commit_offsets to group {group!r}"):
        generation = files.state().generation
        current = files.offsets()
        changed = False
        for tp, off in todo.items():
            cur = current.get(_key(tp))
            if cur is None or off > cur[0]:
                current[_key(tp)] = [off, generation]
                changed = True
        if changed:
            files.write_offsets(current)
    return {tp: int(current[_key(tp)][0]) for tp in todo}


def committed_offsets(root: str | os.PathLike[str], group: str) -> dict[tuple[str, int], int]:
    """``{(topic, partition): committed offset}`` of ``group`` as its ``offsets.json``
    says; empty for a group that does not exist (yet)."""
    check_name(group, "group")
    root = os.path.abspath(os.fspath(root))
    require_dir(root, "topic root", create=True)      # a file: NotALogError
    files = _GroupFiles(root, group)
    return {_parse_key(files.offsets_path, k): int(v[0]) for k, v in files.offsets().items()}


def _after_fork_in_child() -> None:
    for fd in list(_CHILD_CLOSES):
        try:
            os.close(fd)       # a copy: the parent's lock stays the parent's
        except OSError:
            pass
    _CHILD_CLOSES.clear()
    for c in list(_CONSUMERS):
        c._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

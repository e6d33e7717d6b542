"""The files of one consumer group under ``root/__groups/<group>/`` (docs/GROUPS.md):
their names, reading them with their shape checked, replacing them durably,
``group.lock`` taken with a deadline, probing member files' locks and watching
their heartbeats.

Every read refuses a file that is not as seglog writes it, or not a regular file,
with a ``SeglogError`` naming it.

Heartbeats are judged by the observer's own monotonic clock (``clock``): a member
is silent once its file's stamp has not changed for its session timeout of that
clock, so a step of the wall clock (backwards or forwards) never keeps a stopped
member alive nor expels a live one.
"""

from __future__ import annotations

import functools
import json
import os
import re
import stat
import time
from dataclasses import dataclass
# Any: parsed JSON / JSON documents (dict[str, Any]): the group's files, checked as parsed
from typing import Any, Callable, TypeGuard

from .._storage import marker as _marker
from .._runtime import platform as _platform
from .assignors import ASSIGNORS, TP
from .._runtime.files import (GROUPS_DIR, TMP, atomic_write, fsync_dir, list_topics, make_dirs,
                              remove)
from ..errors import GroupBusyError, SeglogError, StorageError

JOIN_PREFIX = ".join-"     # a joiner's member file before it is renamed into place
_skew = 0.0                # how far ``advance_clock`` moved the groups' clock


def clock() -> float:
    """The clock members judge heartbeats and pace their looks at the group by:
    ``time.monotonic()``, plus what ``advance_clock`` added in this process."""
    return time.monotonic() + _skew


def advance_clock(seconds: float) -> None:
    """Move this process's group clock forward (``seglog.testing.advance_group_clock``:
    session timeouts passed without sleeping)."""
    global _skew
    if not seconds >= 0:
        raise ValueError("the clock only moves forward")
    _skew += seconds


def log_id(directory: str) -> str | None:
    """The id of the log in ``directory`` (from its marker): a log deleted and made
    again under the same name has another. None for a log from before markers;
    ``NotALogError`` for a damaged marker."""
    marker = _marker.read(directory)
    v = None if marker is None else marker.get("id")
    return v if isinstance(v, str) else None


def committed_offset(entry: list[Any] | None, current_id: str | None) -> int | None:
    """The committed offset an ``offsets.json`` entry gives the log ``current_id``:
    None if there is none, or if it was committed for another log of the same name
    (a topic deleted and created again: its offsets do not survive it)."""
    if entry is None:
        return None
    if len(entry) > 2 and current_id is not None and entry[2] != current_id:
        return None
    return int(entry[0])


_MEMBER_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
_KEY = re.compile(r"([A-Za-z0-9._-]{1,200})/([0-9]{1,9})")


def is_name(v: object) -> bool:
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
    if not isinstance(v, list) or not all(is_name(t) for t in v):
        raise _bad(path, f"{what} must be a list of topic names")
    return list(v)


def parse_key(path: str, k: str) -> TP:
    m = _KEY.fullmatch(k)
    if m is None or m.group(1) in (".", ".."):
        raise _bad(path, f"{k!r} is not 'topic/partition'")
    return m.group(1), int(m.group(2))


_LOG_ID = re.compile(r"[0-9a-f]{1,64}")


def _parse_pairs(path: str, raw: Any, field: str, first: Callable[[object], bool],
                 with_id: bool = False) -> dict[str, list[Any]]:
    """``{"topic/p": [first, generation]}`` with checked keys and values; ``with_id``:
    a third item, the id of the log the entry is for, may follow."""
    out = _dict_of(path, _top(path, raw), field)
    for k, v in out.items():
        parse_key(path, k)
        if not (isinstance(v, list) and (len(v) == 2 or (with_id and len(v) == 3
                                                          and isinstance(v[2], str)
                                                          and _LOG_ID.fullmatch(v[2])))
                and first(v[0]) and _is_count(v[1])):
            what = "member" if first is is_name else "offset"
            raise _bad(path, f"{field}[{k!r}] must be a pair [{what}, generation]"
                             f"{' (and the log id)' if with_id else ''}")
    return out


@dataclass
class State:
    generation: int
    members: dict[str, list[str]]          # member id -> subscribed topics
    assignment: dict[str, list[TP]]
    assignor: str
    # the partition counts the assignment was made from (a topic not yet created is
    # absent); None in files written before it was recorded
    partitions: dict[str, int] | None = None

    @classmethod
    def empty(cls, assignor: str) -> "State":
        return cls(0, {}, {}, assignor, {})

    @classmethod
    def parse(cls, path: str, raw: Any) -> "State":
        top = _top(path, raw)
        gen = top.get("generation")
        if not _is_count(gen):
            raise _bad(path, "'generation' must be an int >= 0")
        members = _dict_of(path, top, "members")
        for m, ts in members.items():
            if not is_name(m):
                raise _bad(path, f"member id {m!r}")
            _topics(path, ts, f"the topics of member {m!r}")
        assignment: dict[str, list[TP]] = {}
        for m, tps in _dict_of(path, top, "assignment").items():
            if not isinstance(tps, list) or not all(
                    isinstance(tp, list) and len(tp) == 2 and is_name(tp[0]) and _is_count(tp[1])
                    for tp in tps):
                raise _bad(path, f"the assignment of {m!r} must be a list of [topic, partition]")
            assignment[m] = [(t, p) for t, p in tps]
        assignor = top.get("assignor", "range")
        if assignor not in ASSIGNORS:
            raise _bad(path, f"assignor {assignor!r}")
        parts = top.get("partitions")
        if parts is not None and not (isinstance(parts, dict) and all(
                is_name(t) and type(n) is int and n >= 1 for t, n in parts.items())):
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
class MemberInfo:
    topics: list[str]            # its subscription when it joined
    session_s: float | None      # None: a file from before members recorded it
    pattern: str | None = None   # a pattern subscription: its topics are those matching now


MAX_PATTERN = 4096               # characters: a member file stays one small read


@functools.lru_cache(maxsize=256)
def compile_pattern(pattern: str) -> re.Pattern[str]:
    """A subscription pattern, compiled (``re.error`` if it is not a regex)."""
    return re.compile(pattern)


def topics_matching(root: str, pattern: str) -> list[str]:
    """The topics recorded under ``root`` whose whole name matches ``pattern``, sorted
    (a record being replaced, a temporary file, is not a topic)."""
    rx = compile_pattern(pattern)
    return [t for t in list_topics(root)
            if is_name(t) and not t.startswith(TMP) and rx.fullmatch(t) is not None]


def _unreadable(path: str, e: Exception) -> SeglogError:
    return SeglogError(f"unreadable group file {path}: {e}")


def _loads(path: str, data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:
        raise _unreadable(path, e) from e


def _parse_member(path: str, data: bytes) -> MemberInfo:
    top = _top(path, _loads(path, data))
    topics = _topics(path, top.get("topics"), "'topics'")
    ms = top.get("session_timeout_ms")
    if ms is not None and not (type(ms) is int and ms >= 1):
        raise _bad(path, "'session_timeout_ms' must be an int >= 1")
    pattern = top.get("pattern")
    if pattern is not None:
        if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN:
            raise _bad(path, "'pattern' must be a regular expression")
        try:
            compile_pattern(pattern)
        except (re.error, RecursionError, OverflowError) as e:
            raise _bad(path, f"'pattern' is not a regular expression: {e}") from None
    return MemberInfo(topics, None if ms is None else ms / 1000.0, pattern)


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


def _open_existing(path: str) -> int | None:
    """``_open_file`` for reading: None if the file is not there, ``SeglogError``
    naming it if it cannot be opened."""
    try:
        return _open_file(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _unreadable(path, e) from e


def _read_json(path: str) -> Any:
    fd = _open_existing(path)
    if fd is None:
        return None
    try:
        with open(fd, "rb") as f:
            data = f.read()
    except OSError as e:
        raise _unreadable(path, e) from e
    return _loads(path, data)


def _write(path: str, data: bytes) -> None:
    """Replace a group file durably (temp, fsync, rename, fsync dir)."""
    try:
        atomic_write(path, data)
    except OSError as e:
        raise StorageError(e.errno, f"writing group file {path} failed: {e}") from e


# descriptors a forked child must close at once: group locks held at the fork (by
# another thread) and member files being joined; a child never holds a group's lock
_CHILD_CLOSES: set[int] = set()


def close_on_fork(fd: int) -> None:
    """A forked child closes its copy of ``fd`` at once (``close_fork_copies``)."""
    _CHILD_CLOSES.add(fd)


def keep_on_fork(fd: int) -> None:
    """``fd`` is closed, or its owner now handles forks itself."""
    _CHILD_CLOSES.discard(fd)


def close_fork_copies() -> None:
    """In a forked child: close the copies of the descriptors registered with
    ``close_on_fork`` (closing a copy never releases the parent's lock)."""
    for fd in list(_CHILD_CLOSES):
        try:
            os.close(fd)
        except OSError:
            pass
    _CHILD_CLOSES.clear()


class Flock:
    """``group.lock``, waited for until a deadline (non-blocking tries with back-off):
    ``GroupBusyError`` past it."""

    def __init__(self, path: str, wait_s: float, what: str) -> None:
        self.path = path
        self.wait_s = wait_s
        self.what = what
        self.fd = -1

    def __enter__(self) -> "Flock":
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
        try:
            # released explicitly: a child forked while it was held keeps a copy of
            # the descriptor until its after-fork handler runs, and a flock belongs
            # to the open file, so a close alone would leave it held by that copy
            _platform.flock(self.fd, _platform.LOCK_UN)
        finally:
            os.close(self.fd)
            self.fd = -1


class GroupFiles:
    """The files of one group (see the module docstring)."""

    def __init__(self, root: str, group: str) -> None:
        self.group = group
        self.dir = os.path.join(root, GROUPS_DIR, group)
        self.members_dir = os.path.join(self.dir, "members")
        self.lock_path = os.path.join(self.dir, "group.lock")
        self.state_path = os.path.join(self.dir, "state.json")
        self.owners_path = os.path.join(self.dir, "owners.json")
        self.offsets_path = os.path.join(self.dir, "offsets.json")
        # member files never change once they appear, but a name may come back with
        # another file (a member rejoining; a recycled inode): parsed once per content
        self._infos: dict[str, tuple[bytes, MemberInfo]] = {}
        # per member, the stamp of its file last seen and when (``clock``) it was
        # first seen so: its heartbeat stopped once that stays for its session
        self._beats: dict[str, tuple[tuple[int, int, int], float]] = {}

    def make(self) -> None:
        make_dirs(self.members_dir)

    def locked(self, wait_s: float, what: str) -> Flock:
        return Flock(self.lock_path, wait_s, what)

    def state(self, assignor: str = "range") -> State:
        raw = _read_json(self.state_path)
        if raw is None:
            return State.empty(assignor)
        return State.parse(self.state_path, raw)

    def write_state(self, st: State) -> None:
        _write(self.state_path, st.to_json())

    def owners(self) -> dict[str, list[Any]]:
        """``"topic/p"`` -> [member, generation of its claim]."""
        raw = _read_json(self.owners_path)
        return {} if raw is None else _parse_pairs(self.owners_path, raw, "owners", is_name)

    def write_owners(self, owners: dict[str, list[Any]]) -> None:
        _write(self.owners_path, json.dumps({"version": 1, "owners": owners},
                                            sort_keys=True).encode())

    def offsets(self) -> dict[str, list[Any]]:
        """``"topic/p"`` -> [committed offset, generation that committed it, the id of
        the log it was committed for (absent in files from before ids)]."""
        raw = _read_json(self.offsets_path)
        return {} if raw is None else _parse_pairs(self.offsets_path, raw, "offsets", _is_count,
                                                   with_id=True)

    def write_offsets(self, offsets: dict[str, list[Any]]) -> None:
        _write(self.offsets_path, json.dumps({"version": 1, "offsets": offsets},
                                             sort_keys=True).encode())

    def member_path(self, member: str) -> str:
        return os.path.join(self.members_dir, member)

    def member_files(self) -> list[str]:
        """Member ids with a file (temporary files of joins, and names seglog never
        gives a member, are not members)."""
        try:
            return [n for n in os.listdir(self.members_dir) if is_name(n) and n[0] != "."]
        except FileNotFoundError:
            return []

    def join_path(self, member: str) -> str:
        """Where ``member`` writes its file before renaming it into place (under the
        group lock: one left outside it is a killed joiner's, see ``tidy_joins``)."""
        return os.path.join(self.members_dir, JOIN_PREFIX + member)

    def tidy_joins(self) -> None:
        """Under the group lock: remove the member files killed joiners left half
        made (a joiner makes and renames its file under the lock, so any there now
        is a leftover)."""
        try:
            names = os.listdir(self.members_dir)
        except FileNotFoundError:
            return
        for n in names:
            if n.startswith(JOIN_PREFIX) and is_name(n[len(JOIN_PREFIX):]):
                remove(os.path.join(self.members_dir, n))

    def member_info(self, member: str, fd: int | None = None) -> MemberInfo | None:
        """Its topics and session timeout, from its file (None if it is gone)."""
        path = self.member_path(member)
        own = fd is None
        if fd is None:
            fd = _open_existing(path)
            if fd is None:
                return None
        try:
            data = os.pread(fd, 1 << 16, 0)
            cached = self._infos.get(member)
            if cached is not None and cached[0] == data:
                return cached[1]
            info = _parse_member(path, data)
            self._infos[member] = (data, info)
            return info
        except OSError as e:
            raise _unreadable(path, e) from e
        finally:
            if own:
                os.close(fd)

    def probe(self, member: str, default_s: float, tidy: bool = False,
              wall: float | None = None) -> str:
        """``"alive"``, ``"dead"`` (no process holds its lock) or ``"silent"`` (alive,
        but its heartbeat unchanged for its own session timeout, ``default_s`` if its
        file does not say, of ``clock``: a member first seen now is alive). ``wall``
        (a look without history, ``describe_group``): judged instead by the age of
        the heartbeat on the wall clock at ``wall``. With ``tidy`` (group lock held)
        a dead member's file is removed."""
        path = self.member_path(member)
        fd = _open_existing(path)
        if fd is None:
            self._beats.pop(member, None)
            return "dead"
        try:
            try:
                _platform.flock(fd, _platform.LOCK_EX_NB)
            except BlockingIOError:
                st = os.fstat(fd)
                info = self.member_info(member, fd)
                session = default_s if info is None or info.session_s is None else info.session_s
                if wall is not None:
                    return "silent" if wall - st.st_mtime > session else "alive"
                return "silent" if self._unchanged_for(member, st) > session else "alive"
            if tidy:
                remove(path)   # nobody holds it: its process is gone
            self._infos.pop(member, None)
            self._beats.pop(member, None)
            return "dead"
        finally:
            os.close(fd)

    def _unchanged_for(self, member: str, st: os.stat_result) -> float:
        """How long (``clock``) this observer has seen ``member``'s file unchanged: a
        heartbeat sets its times (to whatever the wall clock says), a new file has
        another inode or times."""
        stamp = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        now = clock()
        seen = self._beats.get(member)
        if seen is None or seen[0] != stamp:
            self._beats[member] = (stamp, now)
            return 0.0
        return now - seen[1]


class MemberFile:
    """A member's own file, ``members/<id>`` of ``files``: made and renamed into place
    under the group lock, locked (``flock``) before it appears and for the member's
    whole life (the lock dies with its process); its mtime is the heartbeat. The
    one holder of its descriptor."""

    def __init__(self, files: GroupFiles, member: str) -> None:
        self._files = files
        self._member = member
        self._fd = -1

    def create(self, info: dict[str, Any]) -> None:
        """Under the group lock: write ``info`` beside the members, lock it, rename it
        into place (a prober never sees it unlocked). Nothing is left on failure."""
        files = self._files
        tmp = files.join_path(self._member)
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        close_on_fork(fd)
        try:
            _platform.flock(fd, _platform.LOCK_EX_NB)
            os.write(fd, json.dumps(info).encode())
            os.rename(tmp, files.member_path(self._member))
        except BaseException:
            keep_on_fork(fd)
            os.close(fd)
            remove(tmp)
            raise
        self._fd = fd
        fsync_dir(files.members_dir)

    def remove(self) -> None:
        """Under the group lock: the member leaves (its file goes before its lock)."""
        remove(self._files.member_path(self._member))

    def beat(self) -> None:
        """The heartbeat: the file's times set to now."""
        if self._fd >= 0:
            os.utime(self._fd)

    def close(self) -> None:
        """Close the descriptor: the lock goes (the member is dead to the others)."""
        if self._fd >= 0:
            keep_on_fork(self._fd)
            os.close(self._fd)
            self._fd = -1

    def drop_copy(self) -> None:
        """In a forked child: close the copy of the descriptor (closing a copy never
        releases the parent's lock, and the child must not keep the member alive
        when the parent dies)."""
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = -1

    def __del__(self) -> None:
        # dropped without close(): leave as a killed process would (no commit, no
        # callback), so that the group sees the member gone at once instead of
        # waiting for its session timeout
        if hasattr(self, "_fd"):
            self.drop_copy()


def key(tp: TP) -> str:
    return f"{tp[0]}/{tp[1]}"


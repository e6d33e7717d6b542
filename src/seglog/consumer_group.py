"""Consumer groups coordinated by files and ``flock`` only (docs/GROUPS.md).

Under ``root/__groups/<group>/``:

* ``members/<id>``: each member holds an exclusive ``flock`` on its file for its
  whole life (the lock dies with its process, even on SIGKILL); the file's mtime is
  its heartbeat, refreshed by every ``poll``; its content names its topics.
* ``group.lock``: held briefly by whoever changes the group's state or commits.
* ``state.json``: the current generation, its members and their assignment,
  replaced atomically by the member that first sees a change of membership.
* ``owners.json``: which member consumes which partition now. A member claims a
  partition of its assignment only when no live member of the current generation
  holds it, and releases it (after committing its position and calling
  ``on_revoke``) when a new generation gives it to another.
* ``offsets.json``: committed offsets with the generation that committed them,
  replaced durably (temp, fsync, rename, fsync dir) before ``commit()`` returns.

Every state change and every commit happens under ``group.lock`` after re-reading
the state. A commit is accepted only from a member of the current generation that
holds the partition in ``owners.json``: a member that was expelled (its claims are
dropped by the rebalance that expelled it) gets ``CommitFailedError``; a member
that lost a partition in a rebalance may still commit it until it releases it,
which is how its last position reaches the next owner. Committed offsets never
move backwards unless the owner ``seek``s back.

``commit_offsets`` records offsets for a reader outside the membership (a Spark
query, a batch job): under ``group.lock``, durably, never backwards, not fenced.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

from . import _html, _platform
from ._files import atomic_write, fsync_dir, make_dirs, remove, require_dir
from .errors import (CommitFailedError, InvalidConfigError, LogClosedError,
                     OffsetOutOfRangeError, SeglogError)
from .log import Log
from .message import Headers, Message, _short, _tuplegetter
from .topic import check_name, partition_dir, read_partition_count

_log = logging.getLogger("seglog")
_FETCH_BYTES = 1 << 18    # one read per partition; what a poll leaves waits for the next
GROUPS_DIR = "__groups"
ASSIGNORS = ("range", "roundrobin", "sticky")
TP = tuple[str, int]
Callback = Callable[[set[TP]], None]


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
    topic: str = _tuplegetter(0, "Topic name.")
    partition: int = _tuplegetter(1, "Partition number.")
    offset: int = _tuplegetter(2, "Logical offset in the partition.")
    timestamp: int = _tuplegetter(3, "Milliseconds since the epoch.")
    key: bytes | None = _tuplegetter(4, "Key bytes or None.")
    value: bytes | None = _tuplegetter(5, "Value bytes; None is a tombstone.")
    headers: Headers = _tuplegetter(6, "(str, bytes) pairs.")

    _asdict = Message._asdict        # one definition: it reads ``_fields``

    def __repr__(self) -> str:
        return (f"ConsumerMessage(topic={self[0]!r}, partition={self[1]}, offset={self[2]}, "
                f"timestamp={self[3]}, key={self[4]!r}, value={_short(self[5])}, "
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


# -- the group's files --------------------------------------------------------------

@dataclass
class _State:
    generation: int
    members: dict[str, list[str]]          # member id -> subscribed topics
    assignment: dict[str, list[TP]]
    assignor: str

    @classmethod
    def empty(cls, assignor: str) -> "_State":
        return cls(0, {}, {}, assignor)

    def to_json(self) -> bytes:
        return json.dumps({"version": 1, "generation": self.generation,
                           "members": self.members, "assignor": self.assignor,
                           "assignment": {m: [list(tp) for tp in tps]
                                          for m, tps in self.assignment.items()}},
                          sort_keys=True).encode()


def _read_json(path: str) -> Any:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise SeglogError(f"unreadable group file {path}: {e}") from e


class _GroupFiles:
    """The files of one group (see the module docstring)."""

    def __init__(self, root: str, group: str) -> None:
        self.dir = os.path.join(root, GROUPS_DIR, group)
        self.members_dir = os.path.join(self.dir, "members")
        self.lock_path = os.path.join(self.dir, "group.lock")
        self.state_path = os.path.join(self.dir, "state.json")
        self.owners_path = os.path.join(self.dir, "owners.json")
        self.offsets_path = os.path.join(self.dir, "offsets.json")

    def make(self) -> None:
        make_dirs(self.members_dir)

    def locked(self) -> "_Flock":
        return _Flock(self.lock_path)

    def state(self, assignor: str = "range") -> _State:
        raw = _read_json(self.state_path)
        if not raw:
            return _State.empty(assignor)
        return _State(raw["generation"], raw["members"],
                      {m: [(t, p) for t, p in tps] for m, tps in raw["assignment"].items()},
                      raw.get("assignor", assignor))

    def write_state(self, st: _State) -> None:
        atomic_write(self.state_path, st.to_json())

    def owners(self) -> dict[str, list[Any]]:
        raw = _read_json(self.owners_path)
        return raw.get("owners", {}) if raw else {}

    def write_owners(self, owners: dict[str, list[Any]]) -> None:
        atomic_write(self.owners_path, json.dumps({"version": 1, "owners": owners},
                                                  sort_keys=True).encode())

    def offsets(self) -> dict[str, list[int]]:
        """``"topic/p"`` -> [committed offset, generation that committed it]."""
        raw = _read_json(self.offsets_path)
        return raw.get("offsets", {}) if raw else {}

    def write_offsets(self, offsets: dict[str, list[int]]) -> None:
        atomic_write(self.offsets_path, json.dumps({"version": 1, "offsets": offsets},
                                                   sort_keys=True).encode())

    def member_path(self, member: str) -> str:
        return os.path.join(self.members_dir, member)

    def member_files(self) -> list[str]:
        try:
            return [n for n in os.listdir(self.members_dir) if not n.startswith(".")]
        except FileNotFoundError:
            return []

    def probe(self, member: str, now: float, session_s: float, tidy: bool = True) -> str:
        """``"alive"``, ``"dead"`` (no process holds its lock) or ``"silent"`` (alive,
        but no heartbeat for ``session_s``). With ``tidy`` (group lock held) a dead
        member's file is removed."""
        path = self.member_path(member)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return "dead"
        try:
            try:
                _platform.flock(fd, _platform.LOCK_EX_NB)
            except BlockingIOError:
                age = now - os.fstat(fd).st_mtime
                return "silent" if age > session_s else "alive"
            if tidy:
                remove(path)   # nobody holds it: its process is gone
            return "dead"
        finally:
            os.close(fd)


class _Flock:
    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1

    def __enter__(self) -> "_Flock":
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        _platform.flock(self.fd, _platform.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)          # releases the lock
        self.fd = -1


def _key(tp: TP) -> str:
    return f"{tp[0]}/{tp[1]}"


def _partition_counts(root: str, topics: Iterable[str]) -> dict[str, int]:
    out = {}
    for t in topics:
        n = read_partition_count(root, t)
        if n is None:
            raise InvalidConfigError(f"topic {t!r} does not exist under {root}")
        out[t] = n
    return out


def _rebalance(files: _GroupFiles, root: str, me: str | None, my_topics: list[str] | None,
               leaving: bool, session_s: float, assignor: str) -> _State:
    """Under the group lock: the current state, or a new generation if membership
    changed (dead and silent members out, ``me`` in, or out when ``leaving``)."""
    st = files.state(assignor)
    now = time.time()
    live: dict[str, list[str]] = {}
    candidates = set(st.members) | set(files.member_files())
    for m in sorted(candidates):
        if m == me:
            continue
        verdict = files.probe(m, now, session_s)
        if verdict == "alive":
            topics = st.members.get(m)
            if topics is None:
                info = _read_json(files.member_path(m)) or {}
                topics = info.get("topics")
            if topics is not None:
                live[m] = list(topics)
    if me is not None and not leaving:
        assert my_topics is not None
        live[me] = my_topics
    if live == st.members:
        return st
    counts = _partition_counts(root, sorted({t for ts in live.values() for t in ts}))
    new = _State(st.generation + 1, live,
                 assign(st.assignor if st.members else assignor, live, counts, st.assignment),
                 st.assignor if st.members else assignor)
    files.write_state(new)
    # partitions held by members no longer in the group are free at once
    owners = files.owners()
    kept = {k: v for k, v in owners.items() if v[0] in live}
    if kept != owners:
        files.write_owners(kept)
    return new


class Consumer:
    """A member of consumer group ``group`` reading ``topics`` under ``root``.

    At-least-once delivery: positions are committed by ``commit()``, by
    auto-commit (``auto_commit_ms``, at the start of a poll, for what earlier polls
    returned) and by ``close()``; a new owner starts at the committed offset. The
    poll loop is the heartbeat: a member that does not poll (or iterate) for
    ``session_timeout_ms`` is expelled and its partitions go to the others.
    """

    def __init__(self, root: str | os.PathLike[str], group: str, topics: Iterable[str],
                 auto_offset_reset: str = "earliest", auto_commit_ms: int | None = 5000,
                 session_timeout_ms: int = 10_000, assignor: str = "range",
                 on_assign: Callback | None = None, on_revoke: Callback | None = None,
                 member_id: str | None = None) -> None:
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
                            ("auto_commit_ms", auto_commit_ms, 1)):
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
        self.root = os.path.abspath(os.fspath(root))
        require_dir(self.root, "topic root", create=True)    # a file: NotALogError
        self.group = group
        self.topics = topic_list
        self.member_id = member_id
        self._reset = auto_offset_reset
        self._auto_commit_s = None if auto_commit_ms is None else auto_commit_ms / 1000.0
        self._session_s = session_timeout_ms / 1000.0
        self._check_s = min(0.1, self._session_s / 10)
        self._assignor = assignor
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        _partition_counts(self.root, topic_list)        # unknown topics: an error now
        self._files = _GroupFiles(self.root, group)
        self._files.make()
        self._generation = 0
        self._assigned: frozenset[TP] = frozenset()
        self._owned: dict[TP, Log] = {}       # claimed partitions and their readers
        self._positions: dict[TP, int] = {}
        # per partition, what the last read returned and nobody took yet: the set's
        # next offset and its messages
        self._fetched: dict[TP, tuple[int, Iterator[ConsumerMessage]]] = {}
        self._seeked: set[TP] = set()
        self._rr = 0
        self._closed = False
        self._member_fd = -1
        self._last_check = 0.0
        self._last_commit = time.monotonic()
        self._state_sig: tuple[int, int, int] | None = None
        self._state: _State | None = None
        self._join()

    # -- membership ----------------------------------------------------------------
    def _join(self) -> None:
        files = self._files
        path = files.member_path(self.member_id)
        tmp = os.path.join(files.members_dir, f".join-{self.member_id}")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _platform.flock(fd, _platform.LOCK_EX_NB)
            os.write(fd, json.dumps({"topics": self.topics, "pid": os.getpid(),
                                     "host": socket.gethostname()}).encode())
            with files.locked():
                if os.path.exists(path):
                    if files.probe(self.member_id, time.time(), self._session_s) != "dead":
                        raise InvalidConfigError(
                            f"member id {self.member_id!r} is in use in group {self.group!r}")
                # locked before it appears: a prober never sees it unlocked
                os.rename(tmp, path)
                fsync_dir(files.members_dir)
                self._member_fd = fd
                st = self._rebalance()
        except BaseException:
            if self._member_fd < 0:
                os.close(fd)
                remove(tmp)
            raise
        self._adopt(st)

    def _rebalance(self, leaving: bool = False) -> _State:
        """Under the group lock: the current generation, or a new one with this member
        in it (or out of it, ``leaving``)."""
        return _rebalance(self._files, self.root, self.member_id,
                          None if leaving else self.topics, leaving, self._session_s,
                          self._assignor)

    def _heartbeat(self) -> None:
        os.utime(self._member_fd)

    def _check_group(self, force: bool = False) -> None:
        """Heartbeat; adopt a new generation; start one if a member died or went silent."""
        now = time.monotonic()
        if not force and now - self._last_check < self._check_s:
            return
        self._last_check = now
        self._heartbeat()
        files = self._files
        try:
            s = os.stat(files.state_path)
            sig = (s.st_mtime_ns, s.st_size, s.st_ino)
        except FileNotFoundError:
            sig = None
        st = self._state
        if sig != self._state_sig or force or st is None:
            self._state_sig = sig
            st = self._state = files.state(self._assignor)
            if st.generation != self._generation or self.member_id not in st.members:
                if self.member_id not in st.members:
                    _log.warning("seglog: consumer %s of group %s was expelled (generation "
                                 "%d); rejoining", self.member_id, self.group, st.generation)
                    self._revoke(set(self._owned), commit=False)
                    with files.locked():
                        st = self._rebalance()
                self._adopt(st)
        # is every other member of the generation still there?
        stale = False
        wall = time.time()
        for m in st.members:
            if m != self.member_id and files.probe(m, wall, self._session_s, tidy=False) != "alive":
                stale = True
                break
        if not stale:
            present = set(files.member_files())
            stale = bool(present - set(st.members) - {self.member_id})
        if stale:
            with files.locked():
                st = self._rebalance()
            self._adopt(st)
        if self._assigned - set(self._owned):
            self._claim()

    def _adopt(self, st: _State) -> None:
        """Take generation ``st``: give up what it no longer assigns to this member."""
        self._state = st
        mine = frozenset(st.assignment.get(self.member_id, ()))
        lost = set(self._owned) - mine
        if lost:
            self._revoke(lost, commit=True, generation=self._generation)
        added = mine - self._assigned
        self._generation = st.generation
        self._assigned = mine
        if added and self._on_assign is not None:
            self._on_assign(set(added))
        self._claim()

    def _claim(self) -> None:
        """Start on assigned partitions nobody live in this generation still holds."""
        want = sorted(self._assigned - set(self._owned))
        if not want:
            return
        files = self._files
        with files.locked():
            st = files.state(self._assignor)
            if st.generation != self._generation:
                return                 # a newer generation: adopt it first
            owners = files.owners()
            offsets = files.offsets()
            got = []
            for tp in want:
                holder = owners.get(_key(tp))
                if holder is not None and holder[0] != self.member_id and holder[0] in st.members:
                    continue           # its owner has not given it up yet
                owners[_key(tp)] = [self.member_id, self._generation]
                got.append(tp)
            if got:
                files.write_owners(owners)
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

    def _revoke(self, tps: set[TP], commit: bool, generation: int | None = None) -> None:
        """Give partitions up: commit their positions (auto-commit on), tell the user,
        release them for their next owner."""
        if not tps:
            return
        if commit and self._auto_commit_s is not None:
            try:
                self._commit(tps, generation if generation is not None else self._generation)
            except CommitFailedError as e:
                _log.warning("seglog: %s", e)
        if self._on_revoke is not None:
            self._on_revoke(set(tps))
        files = self._files
        with files.locked():
            owners = files.owners()
            changed = False
            for tp in tps:
                holder = owners.get(_key(tp))
                if holder is not None and holder[0] == self.member_id:
                    del owners[_key(tp)]
                    changed = True
            if changed:
                files.write_owners(owners)
        for tp in tps:
            log = self._owned.pop(tp, None)
            if log is not None:
                log.close()
            self._positions.pop(tp, None)
            self._fetched.pop(tp, None)
            self._seeked.discard(tp)

    # -- consuming -----------------------------------------------------------------
    def poll(self, timeout_ms: int = 1000, max_records: int = 500) -> list[ConsumerMessage]:
        """Messages from owned partitions, up to ``max_records``; waits up to
        ``timeout_ms`` for some (0: look once). Heartbeats, follows rebalances and
        auto-commits as it goes."""
        self._check_open()
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)):
            raise TypeError("timeout_ms must be a number")
        if isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1:
            raise TypeError("max_records must be an int >= 1")
        deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        delay = 0.0005
        while True:
            self._check_group()
            if self._auto_commit_s is not None and \
                    time.monotonic() - self._last_commit >= self._auto_commit_s:
                self._auto_commit()
            out = self._fetch(max_records)
            if out:
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
        for i in range(n):
            tp = tps[(start + i) % n]
            buffered = self._fetched.pop(tp, None)
            if buffered is None:
                log = self._owned[tp]
                pos = self._positions[tp]
                try:
                    ms = log.read(pos, _FETCH_BYTES)
                except OffsetOutOfRangeError:
                    start_off = log.start_offset
                    _log.warning("seglog: group %s: offset %d of %s-%d was deleted by "
                                 "retention; resuming at the log start %d", self.group, pos,
                                 tp[0], tp[1], start_off)
                    self._positions[tp] = start_off
                    continue
                if not ms:
                    continue
                buffered = ms.next_offset, ms._iter_as(ConsumerMessage, tp)
            before = len(out)
            want = max_records - before
            out += itertools.islice(buffered[1], want)
            if len(out) - before == want:
                # the rest of what was read waits for the next poll: no read again
                self._fetched[tp] = buffered
                self._positions[tp] = out[-1].offset + 1
                break
            # all of it taken: go on after the set (past batches compaction emptied)
            self._positions[tp] = max(self._positions[tp], buffered[0])
        return out

    def __iter__(self) -> Iterator[ConsumerMessage]:
        """Messages for ever (until ``close()``), blocking while there are none."""
        while not self._closed:
            try:
                batch = self.poll(timeout_ms=1000)
            except LogClosedError:
                return
            yield from batch

    # -- offsets -------------------------------------------------------------------
    def commit(self) -> None:
        """Durably commit the position (next offset) of every owned partition.

        ``CommitFailedError`` if this member no longer owns them in the group's
        current generation (it rejoins at its next poll; nothing is committed).
        A position below the committed offset is committed only after a ``seek``.
        """
        self._check_open()
        self._commit(set(self._owned), self._generation)

    def _auto_commit(self) -> None:
        self._last_commit = time.monotonic()
        try:
            self._commit(set(self._owned), self._generation)
        except CommitFailedError as e:
            _log.warning("seglog: auto-commit: %s", e)
            self._state_sig = None          # look at the group now

    def _commit(self, tps: set[TP], generation: int) -> None:
        todo = {tp: self._positions[tp] for tp in tps if tp in self._positions}
        if not todo:
            return
        files = self._files
        with files.locked():
            st = files.state(self._assignor)
            if self.member_id not in st.members:
                self._state_sig = None
                raise CommitFailedError(
                    f"consumer {self.member_id} of group {self.group!r} (generation "
                    f"{generation}) is not a member of generation {st.generation}: it was "
                    f"expelled; commit refused, it rejoins at its next poll")
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
                if cur is not None and (cur[0] == pos or (pos < cur[0] and tp not in self._seeked)):
                    continue
                offsets[_key(tp)] = [pos, generation]
                changed = True
            if changed:
                files.write_offsets(offsets)
        self._seeked.difference_update(todo)
        self._last_commit = time.monotonic()

    def position(self, topic: str, partition: int) -> int:
        """The next offset this member will return from an owned partition."""
        self._check_open()
        return self._positions[self._owned_tp(topic, partition)]

    def committed(self, topic: str, partition: int) -> int | None:
        """The group's committed offset of a partition (any owner), None if none."""
        self._check_open()
        c = self._files.offsets().get(_key((check_name(topic), partition)))
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
        self._positions[tp] = offset
        self._fetched.pop(tp, None)
        self._seeked.add(tp)

    def _owned_tp(self, topic: str, partition: int) -> TP:
        tp = (check_name(topic), partition)
        if tp not in self._owned:
            raise InvalidConfigError(f"{topic}-{partition} is not owned by this consumer "
                                     f"(assignment: {sorted(self._assigned)})")
        return tp

    def assignment(self) -> frozenset[TP]:
        """The (topic, partition)s the current generation gives this member."""
        return self._assigned

    @property
    def generation(self) -> int:
        return self._generation

    # -- lifecycle -----------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"consumer {self.member_id} of group {self.group!r} is closed")

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Commit (auto-commit on), give the partitions up and leave the group at once:
        the others rebalance at their next poll, without waiting for a timeout."""
        if self._closed:
            return
        self._closed = True
        try:
            self._revoke(set(self._owned), commit=True)
            with self._files.locked():
                self._rebalance(leaving=True)
                remove(self._files.member_path(self.member_id))
        finally:
            for log in self._owned.values():
                log.close()
            self._owned.clear()
            if self._member_fd >= 0:
                os.close(self._member_fd)
                self._member_fd = -1

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
            f"{self['assignor']}", ("member", "topics", "assignment"),
            [(m, ", ".join(v["topics"]), ", ".join(f"{t}-{p}" for t, p in v["assignment"]))
             for m, v in self["members"].items()])
        parts = _html.grid("partitions", ("partition", "owner", "committed", "end", "lag"),
                           [(tp, v["owner"] or "-", _dash(v["committed"]), _dash(v["end"]),
                             _dash(v["lag"])) for tp, v in self["partitions"].items()])
        return members + parts


def _dash(v: object) -> object:
    return "-" if v is None else v


def describe_group(root: str | os.PathLike[str], group: str) -> GroupDescription:
    """The group as its files say: ``generation``, ``members`` (id -> topics and
    assignment), and per ``"topic-partition"``: ``owner``, ``committed``, ``end``,
    ``lag`` (end - committed, or None with nothing committed)."""
    check_name(group, "group")
    root = os.path.abspath(os.fspath(root))
    require_dir(root, "topic root", create=True)      # a file: NotALogError
    files = _GroupFiles(root, group)
    if not os.path.isdir(files.dir):
        raise InvalidConfigError(f"no group {group!r} under {root}")
    st = files.state()
    owners = files.owners()
    offsets = files.offsets()
    topics = sorted({t for ts in st.members.values() for t in ts}
                    | {k.rsplit("/", 1)[0] for k in offsets})
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
            parts[f"{t}-{p}"] = {"owner": holder[0] if holder else None,
                                 "committed": c[0] if c else None, "end": end,
                                 "lag": (end - c[0]) if (c and end is not None) else None}
    return GroupDescription(
        group=group, generation=st.generation, assignor=st.assignor,
        members={m: {"topics": ts, "assignment": sorted(st.assignment.get(m, []))}
                 for m, ts in st.members.items()},
        partitions=parts)


def commit_offsets(root: str | os.PathLike[str], group: str,
                   offsets: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """Durably record ``{(topic, partition): next offset}`` as ``group``'s committed
    offsets without being a member: for a reader that keeps its own position (a Spark
    query's checkpoint, a batch job's offset ranges) and wants ``describe_group`` to
    show its progress and lag.

    Under ``group.lock``, in ``offsets.json`` (the group and its directory are made
    when missing). Not fenced by generations, since the caller's own record is the
    truth; an offset below the committed one is ignored, so committed offsets never
    move backwards. Returns the committed offsets of the given partitions afterwards.
    ``InvalidConfigError``/``TypeError`` for a bad group, topic, partition or offset.
    """
    check_name(group, "group")
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
            counts.update(_partition_counts(root, [topic]))
        for what, v in (("partition", p), ("offset", off)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{what} must be an int, not {type(v).__name__}")
        if not 0 <= p < counts[topic]:
            raise InvalidConfigError(
                f"topic {topic!r} has partitions 0 to {counts[topic] - 1}, not {p}")
        if off < 0:
            raise InvalidConfigError(f"offset must be >= 0, not {off} ({topic}-{p})")
        todo[(topic, p)] = off
    files = _GroupFiles(root, group)
    files.make()
    with files.locked():
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
    out = {}
    for k, (off, _) in files.offsets().items():
        topic, p = k.rsplit("/", 1)
        out[(topic, int(p))] = int(off)
    return out

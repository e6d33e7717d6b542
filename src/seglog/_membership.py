"""One consumer's membership of its group (docs/GROUPS.md): joining, the heartbeat,
following and starting generations, claiming, revoking and releasing partitions,
the commit fence and leaving. ``Consumer`` holds one and keeps the reading, the
positions' use and the public API.

The member owns which partitions are consumed and from where: ``owned`` (the
claimed partitions' readers), ``positions`` and ``seeked`` are its dicts and set,
which the consumer reads and moves in place (the same objects, so that a poll
reaches them with one attribute lookup). Partitions it gives up are added to
``dropped`` for the consumer to forget their read-ahead.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from typing import Callable, Iterable, TypeVar

from . import _platform
from ._assignors import TP, assign
from ._files import fsync_dir, remove
from ._group_files import GroupFiles, Flock, State, close_on_fork, keep_on_fork, key, \
    topics_matching
from .errors import CommitFailedError, GroupBusyError, InvalidConfigError
from .log import Log
from .topic import partition_dir, read_partition_count

_log = logging.getLogger("seglog")
Callback = Callable[[set[TP]], None]
_T = TypeVar("_T")
# how long a poll waits for a busy group lock before it leaves the group work to its
# next look (and goes on fetching from what it owns)
POLL_LOCK_WAIT_S = 0.01


def _partition_counts(root: str, topics: Iterable[str]) -> dict[str, int]:
    """The partition counts of the topics that exist (a topic not created yet has
    none: its subscribers wait for it)."""
    out = {}
    for t in topics:
        n = read_partition_count(root, t)
        if n is not None:
            out[t] = n
    return out


def _rebalance(files: GroupFiles, root: str, me: str, my_topics: list[str] | None,
               session_s: float, assignor: str) -> State:
    """Under the group lock: the current state, or a new generation if membership
    changed (dead and silent members out, ``me`` in, or out with ``my_topics``
    None), a member's subscription changed or a subscribed topic appeared or went.

    A member subscribed by pattern (its file names the pattern) subscribes to the
    topics that match it now, whoever computes the generation: the topic one
    member sees created is in the next generation for every member whose pattern
    matches it."""
    st = files.state(assignor)
    now = time.time()
    live: dict[str, list[str]] = {}
    for m in sorted(set(st.members) | set(files.member_files())):
        if m == me:
            continue
        if files.probe(m, now, session_s, tidy=True) == "alive":
            info = files.member_info(m)
            if info is not None and info.pattern is not None:
                topics: list[str] | None = topics_matching(root, info.pattern)
            else:
                topics = st.members.get(m)
                if topics is None:
                    topics = None if info is None else info.topics
            if topics is not None:
                live[m] = list(topics)
    if my_topics is not None:
        live[me] = my_topics
    counts = _partition_counts(root, sorted({t for ts in live.values() for t in ts}))
    if live == st.members and counts == st.partitions:
        return st
    group_assignor = st.assignor if st.members else assignor
    new = State(st.generation + 1, live, assign(group_assignor, live, counts, st.assignment),
                group_assignor, counts)
    files.write_state(new)
    # partitions held by members no longer in the group are free at once
    owners = files.owners()
    kept = {k: v for k, v in owners.items() if v[0] in live}
    if kept != owners:
        files.write_owners(kept)
    return new


def _warn(messages: list[str]) -> None:
    for m in messages:
        _log.warning("seglog: %s", m)


class Membership:
    """The member ``member_id`` of ``group`` under ``root``, subscribed to
    ``topics``, or to the topics whose names match ``pattern`` (then ``topics`` is
    the set that matches at the last look, and grows or shrinks as topics are
    created or deleted): its member file and lock, the generation it adopted, its
    assignment and claims. Every method runs in the consumer's thread; none waits
    for the group lock beyond ``lock_s`` (joining, committing, leaving) or this
    look's short wait (the poll's group work, which is otherwise left to a later
    look)."""

    def __init__(self, root: str, group: str, topics: list[str], member_id: str, *,
                 reset: str, commit_on_revoke: bool, session_ms: int, lock_s: float,
                 assignor: str, on_assign: Callback | None, on_revoke: Callback | None,
                 pattern: str | None = None) -> None:
        self.root = root
        self.group = group
        self.pattern = pattern
        self.topics = topics if pattern is None else topics_matching(root, pattern)
        self.member_id = member_id
        self.files = GroupFiles(root, group)
        self.reset = reset
        self.commit_on_revoke = commit_on_revoke
        self.session_ms = session_ms
        self.session_s = session_ms / 1000.0
        self.lock_s = lock_s
        self.check_s = min(0.1, self.session_s / 10)    # between looks at the group
        self.assignor = assignor
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        self.generation = 0
        self.joined = False                  # in the generation it adopted last
        # the partitions the current generation gives this member: on_assign has
        # announced them, and on_revoke announces each that leaves
        self.assigned: frozenset[TP] = frozenset()
        self.owned: dict[TP, Log] = {}       # claimed, assigned partitions and their readers
        self.positions: dict[TP, int] = {}
        self.seeked: set[TP] = set()
        self.dropped: set[TP] = set()        # given up since the consumer last looked
        # revoked partitions whose claim is still to be released (the group's lock was
        # busy): the position to commit (None: commit nothing) and whether it was seeked
        self.releasing: dict[TP, tuple[int | None, bool]] = {}
        self.callback_error: Exception | None = None
        self.member_fd = -1
        self.last_check = 0.0
        self.state_sig: tuple[int, int, int] | None = None
        self.state_read = 0.0
        self.state: State | None = None
        self.lock_wait = POLL_LOCK_WAIT_S    # this look's wait for the group lock
        self.busy = False                    # this look found the group lock busy

    # -- the group lock --------------------------------------------------------------
    def locked(self, what: str) -> Flock:
        """The group lock for a call that must do its work: ``lock_timeout_ms``."""
        return self.files.locked(self.lock_s, f"consumer {self.member_id} of group "
                                              f"{self.group!r}: {what}")

    def try_locked(self, fn: Callable[[], _T]) -> _T | None:
        """``fn()`` under the group lock if it is free within this look's short wait;
        None if not (the poll's group work waits for its next look)."""
        if self.busy:
            return None
        try:
            with self.files.locked(self.lock_wait, "poll"):
                return fn()
        except GroupBusyError:
            self.busy = True
            return None

    # -- joining, looking, leaving ---------------------------------------------------
    def join(self) -> None:
        """Write the member file, locked before it appears, and adopt the generation
        that takes this member in."""
        files = self.files
        files.make()
        path = files.member_path(self.member_id)
        tmp = os.path.join(files.members_dir, f".join-{self.member_id}")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        close_on_fork(fd)
        renamed = False
        try:
            _platform.flock(fd, _platform.LOCK_EX_NB)
            info: dict[str, object] = {"topics": self.topics, "pid": os.getpid(),
                                       "host": socket.gethostname(),
                                       "session_timeout_ms": self.session_ms}
            if self.pattern is not None:
                # the others compute this member's topics from it at every rebalance
                info["pattern"] = self.pattern
            os.write(fd, json.dumps(info).encode())
            with self.locked("join"):
                if os.path.exists(path):
                    if files.probe(self.member_id, time.time(), self.session_s) != "dead":
                        raise InvalidConfigError(
                            f"member id {self.member_id!r} is in use in group {self.group!r}")
                # locked before it appears: a prober never sees it unlocked
                os.rename(tmp, path)
                renamed = True
                fsync_dir(files.members_dir)
                try:
                    st = self.rebalance()
                except BaseException:
                    remove(path)         # ours, and the lock is held: no one saw it join
                    raise
        except BaseException:
            keep_on_fork(fd)
            os.close(fd)
            if not renamed:
                remove(tmp)
            raise
        keep_on_fork(fd)      # the consumer's own fork handling closes it now
        self.member_fd = fd
        self._adopt(st)

    def rebalance(self, leaving: bool = False) -> State:
        """Under the group lock: the current generation, or a new one with this member
        in it (or out of it, ``leaving``)."""
        if self.pattern is not None and not leaving:
            self.topics = topics_matching(self.root, self.pattern)
        return _rebalance(self.files, self.root, self.member_id,
                          None if leaving else self.topics, self.session_s, self.assignor)

    def heartbeat(self) -> None:
        os.utime(self.member_fd)

    def check(self, lock_wait: float) -> None:
        """Heartbeat; adopt a new generation; start one if a member died, went silent
        or wants in, or a subscribed topic appeared or went; release and claim partitions.
        At most every ``check_s``. Group work that needs the lock is left to a later
        look if the lock is busy for ``lock_wait``."""
        now = time.monotonic()
        if now - self.last_check < self.check_s:
            return
        self.last_check = now
        self.lock_wait = lock_wait
        self.busy = False
        self.heartbeat()
        if self.pattern is not None:
            # topics created or deleted since the last look: a rebalance is due
            self.topics = topics_matching(self.root, self.pattern)
        files = self.files
        try:
            s = os.stat(files.state_path)
            sig: tuple[int, int, int] | None = (s.st_mtime_ns, s.st_size, s.st_ino)
        except FileNotFoundError:
            sig = None
        st = self.state
        # the file's identity tells a change at once; a full read every second covers
        # a replacement the identity cannot tell (same size, same recycled inode,
        # within the file system's clock tick)
        if sig != self.state_sig or st is None or now - self.state_read > 1.0:
            self.state_sig = sig
            self.state_read = now
            st = self.state = files.state(self.assignor)
        if self.member_id not in st.members:
            if self.joined:
                _log.warning("seglog: consumer %s of group %s was expelled (generation "
                             "%d); rejoining", self.member_id, self.group, st.generation)
                self.joined = False
                # its claims were dropped with it: nothing to commit or release
                self._revoke(set(self.assigned), commit=False)
                self.assigned = frozenset()
            joined = self.try_locked(self.rebalance)
            if joined is None:
                return
            st = joined
        if st.generation != self.generation or not self.joined:
            self._adopt(st)
        if self._stale(st):
            new = self.try_locked(self.rebalance)
            if new is not None and (new.generation != self.generation or not self.joined):
                self._adopt(new)
        self._release()
        self.claim()

    def _stale(self, st: State) -> bool:
        """Is a rebalance due: a member of the generation dead or silent, a member
        file not in it alive (it wants in) or dead (to tidy), this member's
        subscription changed (a pattern's), or a subscribed topic created or deleted
        since the assignment?"""
        if st.members.get(self.member_id) != self.topics:
            return True
        files = self.files
        wall = time.time()
        for m in st.members:
            if m != self.member_id and files.probe(m, wall, self.session_s) != "alive":
                return True
        for m in files.member_files():
            if m not in st.members and m != self.member_id \
                    and files.probe(m, wall, self.session_s) != "silent":
                return True
        known = st.partitions or {}
        # a deleted topic (its record gone) leaves the assignment too: its members
        # would otherwise fail every other poll on its vanished logs for ever
        return any(read_partition_count(self.root, t) != known.get(t) for t in self.topics)

    def _adopt(self, st: State) -> None:
        """Take generation ``st``: revoke what it no longer assigns to this member,
        announce what it adds (claims follow, in ``claim``)."""
        self.state = st
        mine = frozenset(st.assignment.get(self.member_id, ()))
        if self.owned:
            # a claim gone means a generation in between went on without this member
            # (expelled, and put back before it looked): another member may have read
            # and committed those partitions since. They are lost, and (if still
            # assigned) announced and claimed anew, from the committed offsets.
            owners = self.files.owners()
            gone = {tp for tp in self.owned
                    if owners.get(key(tp), [None])[0] != self.member_id}
            if gone:
                _log.warning("seglog: consumer %s of group %s lost %s in a generation it "
                             "missed; taking them anew", self.member_id, self.group,
                             sorted(gone))
                self._revoke(gone, commit=False)
                self.assigned -= gone
        lost = self.assigned - mine
        if lost:
            self._revoke(lost, commit=True)
        added = mine - self.assigned
        self.generation = st.generation
        self.assigned = mine
        self.joined = self.member_id in st.members
        if added:
            self._callback(self.on_assign, added)

    def leave(self) -> None:
        """Give every partition up (``on_revoke`` may still commit them), the first
        half of leaving; ``exit`` is the second."""
        self.busy = False
        self.lock_wait = POLL_LOCK_WAIT_S
        self._revoke(set(self.assigned), commit=True)

    def exit(self) -> None:
        """Release the claims, start the generation without this member and remove
        its file, under the group lock (``GroupBusyError`` past ``lock_s``)."""
        self.assigned = frozenset()
        with self.locked("leave"):
            refused = self._release_locked()
            self.rebalance(leaving=True)
            remove(self.files.member_path(self.member_id))
        _warn(refused)

    def close(self) -> None:
        """Close the readers and the member file (its lock goes): however leaving
        ended."""
        for log in self.owned.values():
            log.close()
        self.owned.clear()
        self.releasing.clear()
        if self.member_fd >= 0:
            keep_on_fork(self.member_fd)
            os.close(self.member_fd)
            self.member_fd = -1

    def after_fork(self) -> None:
        """In a forked child: close the copy of the member file's descriptor (closing
        a copy never releases the parent's lock, and the child must not keep the
        member alive when the parent dies)."""
        if self.member_fd >= 0:
            try:
                os.close(self.member_fd)
            except OSError:
                pass
            self.member_fd = -1

    def __del__(self) -> None:
        # dropped without close(): leave as a killed process would (no commit, no
        # callback), so that the group sees the member gone at once instead of
        # waiting for its session timeout
        fd = getattr(self, "member_fd", -1)
        if fd >= 0:
            self.member_fd = -1
            try:
                os.close(fd)
            except OSError:
                pass

    # -- callbacks -------------------------------------------------------------------
    def _callback(self, cb: Callback | None, tps: Iterable[TP]) -> None:
        """A user callback, outside every lock; what it raises is raised by the poll
        (or the call) once the group work is done."""
        if cb is None:
            return
        try:
            cb(set(tps))
        except Exception as e:
            if self.callback_error is None:
                self.callback_error = e

    def raise_callback_error(self) -> None:
        e, self.callback_error = self.callback_error, None
        if e is not None:
            raise e

    # -- claims ----------------------------------------------------------------------
    def claim(self) -> None:
        """Start on assigned partitions nobody live in this generation still holds."""
        want = sorted(self.assigned - set(self.owned) - set(self.releasing))
        if not want:
            return
        files = self.files
        generation = self.generation

        def claim() -> tuple[list[TP], dict[str, list[int]]] | None:
            st = files.state(self.assignor)
            if st.generation != generation:
                self.state_sig = None     # a newer generation: adopt it first
                return None
            owners = files.owners()
            got = []
            for tp in want:
                holder = owners.get(key(tp))
                if holder is not None and holder[0] != self.member_id and holder[0] in st.members:
                    continue           # its owner has not given it up yet
                owners[key(tp)] = [self.member_id, generation]
                got.append(tp)
            if got:
                files.write_owners(owners)
            return got, files.offsets()

        done = self.try_locked(claim)
        if done is None:
            return
        got, offsets = done
        for tp in got:
            log = Log.open(partition_dir(self.root, tp[0], tp[1]), readonly=True)
            self.owned[tp] = log
            committed = offsets.get(key(tp))
            if committed is not None:
                pos = committed[0]
            else:
                pos = log.start_offset if self.reset == "earliest" else log.end_offset
            if pos < log.start_offset:
                _log.warning("seglog: group %s: committed offset %d of %s-%d was deleted by "
                             "retention; resuming at the log start %d", self.group, pos,
                             tp[0], tp[1], log.start_offset)
                pos = log.start_offset
            self.positions[tp] = min(pos, log.end_offset)

    def _revoke(self, tps: Iterable[TP], commit: bool) -> None:
        """Give partitions up: tell the user (who may still ``commit()`` them), stop
        reading them, then commit their positions (auto-commit on) and release them
        for their next owner, now or at a later look if the group lock is busy."""
        tps = set(tps)
        if not tps:
            return
        self._callback(self.on_revoke, tps)
        for tp in tps:
            log = self.owned.pop(tp, None)
            if log is not None:
                log.close()
                pos = self.positions.pop(tp)
                self.releasing[tp] = (pos if commit and self.commit_on_revoke else None,
                                      tp in self.seeked)
            self.seeked.discard(tp)
        self.dropped |= tps
        self._release()

    def _release(self) -> None:
        """Commit the final positions of revoked partitions and drop their claims, if
        the group lock is free now (else at a later look)."""
        if self.releasing:
            refused = self.try_locked(self._release_locked)
            if refused is not None:
                self.releasing.clear()
                _warn(refused)

    def _release_locked(self) -> list[str]:
        """``_release``'s work, under the group lock; the commits refused (logged by
        the caller, after the lock: a logging handler may block)."""
        releasing = self.releasing
        refused = []
        todo = {tp: pos for tp, (pos, _) in releasing.items() if pos is not None}
        if todo:
            try:
                self._commit_locked(todo, {tp for tp, (_, seeked) in releasing.items() if seeked})
            except CommitFailedError as e:
                refused.append(str(e))
        owners = self.files.owners()
        mine = [k for k in map(key, releasing) if k in owners and owners[k][0] == self.member_id]
        for k in mine:
            del owners[k]
        if mine:
            self.files.write_owners(owners)
        return refused

    # -- commits ---------------------------------------------------------------------
    def commit(self, todo: dict[TP, int], exact: bool = False) -> None:
        """Commit positions ``todo`` under the group lock, waited for up to
        ``lock_s`` (``GroupBusyError``); ``CommitFailedError`` if fenced. ``exact``:
        offsets the user named, committed as given (also below the committed one),
        which leaves the positions and their seeks alone."""
        with self.locked("commit"):
            self._commit_locked(todo, set(todo) if exact else self.seeked & set(todo))
        if not exact:
            self.seeked.difference_update(todo)

    def try_commit(self, todo: dict[TP, int]) -> bool:
        """Auto-commit ``todo`` if the group lock is free within this look's wait:
        False if it is busy. A refused commit is logged, and makes the next poll look
        at the group."""
        try:
            done = self.try_locked(lambda: self._commit_locked(todo, self.seeked & set(todo)))
        except CommitFailedError as e:
            _log.warning("seglog: auto-commit: %s", e)
            self.state_sig = None          # look at the group now
            self.last_check = 0.0
            return True
        if done is None:
            return False
        self.seeked.difference_update(todo)
        return True

    def _commit_locked(self, todo: dict[TP, int], seeked: set[TP]) -> bool:
        """Under the group lock: check the fence, write the offsets that move."""
        files = self.files
        st = files.state(self.assignor)
        if self.member_id not in st.members:
            self.state_sig = None
            raise CommitFailedError(
                f"consumer {self.member_id} of group {self.group!r} (generation "
                f"{self.generation}) is not a member of generation {st.generation}: it "
                f"was expelled; commit refused, it rejoins at its next poll")
        owners = files.owners()
        for tp in todo:
            holder = owners.get(key(tp))
            if holder is None or holder[0] != self.member_id:
                raise CommitFailedError(f"consumer {self.member_id} no longer owns "
                                        f"{tp[0]}-{tp[1]}: commit refused")
        offsets = files.offsets()
        changed = False
        for tp, pos in todo.items():
            cur = offsets.get(key(tp))
            if cur is not None and (cur[0] == pos or (pos < cur[0] and tp not in seeked)):
                continue
            offsets[key(tp)] = [pos, st.generation]
            changed = True
        if changed:
            files.write_offsets(offsets)
        return True

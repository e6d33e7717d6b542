"""One consumer's membership of its group (docs/GROUPS.md): joining, the heartbeat,
following and starting generations, claiming, revoking and releasing partitions,
the commit fence and leaving. ``Consumer`` holds one and keeps the reading and the
public API.

The member decides which partitions are consumed: it takes a claimed partition
into the consumer's ``Assignment`` (which owns the readers and positions) and gives
revoked ones up through it, committing the positions ``give_up`` returns. It stops
its group work at the next step once the consumer is closing (``stop``), so that a
``close()`` from a callback, a deserializer, a signal handler or another thread
never meets a half-done look.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Callable, Iterable, TypeVar

from . import ops
from .assignment import Assignment
from .assignors import TP
from .topic_watch import TopicWatch, removed_alone
from .files import (Flock, GroupFiles, MemberFile, State, clock, committed_offset, key, log_id,
                    topics_matching)
from ..errors import CommitFailedError, GroupBusyError, InvalidConfigError, SeglogError
from ..log import Log
from ..topic import partition_dir, read_partition_count

_log = logging.getLogger("seglog")
Callback = Callable[[set[TP]], None]
_T = TypeVar("_T")
# how long a poll waits for a busy group lock before it leaves the group work to its
# next look (and goes on fetching from what it owns)
POLL_LOCK_WAIT_S = 0.01


def _warn(messages: list[str]) -> None:
    for m in messages:
        _log.warning("seglog: %s", m)


class Membership:
    """The member ``member_id`` of ``group`` under ``root``, subscribed to
    ``topics``, or to the topics whose names match ``pattern`` (then ``topics`` is
    the set that matches at the last look, and grows or shrinks as topics are
    created or deleted): its member file and lock, the generation it adopted, its
    assignment and claims; ``parts`` is the consumer's ``Assignment``. Every method
    runs in the consumer's thread; none waits for the group lock beyond ``lock_s``
    (joining, committing, leaving) or this look's short wait (the poll's group work,
    which is otherwise left to a later look)."""

    def __init__(self, root: str, group: str, topics: list[str], member_id: str,
                 parts: Assignment, *, commit_on_revoke: bool, session_ms: int,
                 lock_s: float, assignor: str, on_assign: Callback | None,
                 on_revoke: Callback | None, pattern: str | None = None) -> None:
        self.root = root
        self.group = group
        self.pattern = pattern
        self.topics = topics if pattern is None else topics_matching(root, pattern)
        self.member_id = member_id
        self.files = GroupFiles(root, group)
        self._parts = parts
        self._commit_on_revoke = commit_on_revoke
        self._session_ms = session_ms
        self._session_s = session_ms / 1000.0
        self._lock_s = lock_s
        self.check_s = min(0.1, self._session_s / 10)    # between looks at the group
        # how long an owned partition's log directory may be gone while its topic's
        # record stays: the other half of a deletion in another process, which may be
        # stalled as long as a member may be silent; then an error (a log removed
        # alone). The same bound for a claim that cannot open the log (docs/GROUPS.md)
        self._half_done_s = self._session_s
        self._assignor = assignor
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self.generation = 0
        self.joined = False                  # in the generation it adopted last
        # the partitions the current generation gives this member: on_assign has
        # announced them, and on_revoke announces each that leaves
        self.assigned: frozenset[TP] = frozenset()
        self._unannounced: frozenset[TP] = frozenset()      # assigned, on_assign not yet
        # revoked partitions whose claim is still to be released (the group's lock was
        # busy): the position to commit (None: commit nothing), whether it was seeked,
        # and the id of its log
        self._releasing: dict[TP, tuple[int | None, bool, str | None]] = {}
        self._callback_error: Exception | None = None
        self._file = MemberFile(self.files, member_id)
        self._last_check = -1e18
        self._state_sig: tuple[int, int, int] | None = None
        self._state_read = 0.0
        self._state: State | None = None
        self._lock_wait = POLL_LOCK_WAIT_S   # this look's wait for the group lock
        self._busy = False                   # this look found the group lock busy
        self._stopping = False               # the consumer is closing: no more group work
        self._watch = TopicWatch(root, parts)

    # -- the group lock --------------------------------------------------------------
    def _locked(self, what: str) -> Flock:
        """The group lock for a call that must do its work: ``lock_timeout_ms``."""
        return self.files.locked(self._lock_s, f"consumer {self.member_id} of group "
                                               f"{self.group!r}: {what}")

    def _try_locked(self, fn: Callable[[], _T]) -> _T | None:
        """``fn()`` under the group lock if it is free within this look's short wait;
        None if not (the poll's group work waits for its next look)."""
        if self._busy:
            return None
        try:
            with self.files.locked(self._lock_wait, "poll"):
                return fn()
        except GroupBusyError:
            self._busy = True
            return None

    # -- joining, looking, leaving ---------------------------------------------------
    def join(self) -> None:
        """Write the member file, locked before it appears, and adopt the generation
        that takes this member in. The file is made and renamed into place under the
        group lock: one left beside the members is a killed joiner's (tidied)."""
        files = self.files
        files.make()
        info: dict[str, object] = {"topics": self.topics, "pid": os.getpid(),
                                   "host": socket.gethostname(),
                                   "session_timeout_ms": self._session_ms}
        if self.pattern is not None:
            # the others compute this member's topics from it at every rebalance
            info["pattern"] = self.pattern
        with self._locked("join"):
            if os.path.exists(files.member_path(self.member_id)) and \
                    files.probe(self.member_id, self._session_s) != "dead":
                raise InvalidConfigError(
                    f"member id {self.member_id!r} is in use in group {self.group!r}")
            self._file.create(info)
            try:
                st = self.rebalance()
            except BaseException:
                self._file.remove()      # ours, and the lock is held: no one saw it join
                self._file.close()
                raise
        # the first assignment is announced by the first poll: ``on_assign`` may then
        # use the consumer (seek, pause), which the caller has not got yet
        self._adopt(st, announce=False)

    def announce(self) -> None:
        """``on_assign`` for what the generation joined gave and nobody announced yet
        (at the first poll)."""
        if self._unannounced and not self._stopping:
            tps, self._unannounced = self._unannounced, frozenset()
            self._callback(self._on_assign, tps)

    def rebalance(self, leaving: bool = False) -> State:
        """Under the group lock: the current generation, or a new one with this member
        in it (or out of it, ``leaving``)."""
        if self.pattern is not None and not leaving:
            self.topics = topics_matching(self.root, self.pattern)
        return ops.rebalance(self.files, self.root, self.member_id,
                             None if leaving else self.topics, self._session_s, self._assignor)

    def stop(self) -> None:
        """The consumer is closing: group work under way stops at its next step (the
        leaving is ``leave`` and ``exit``)."""
        self._stopping = True

    def look_soon(self) -> None:
        """Make the next poll look at the group at once."""
        self._last_check = -1e18
        self._state_sig = None

    def check(self, lock_wait: float) -> None:
        """Heartbeat; adopt a new generation; start one if a member died, went silent
        or wants in, or a subscribed topic appeared, went or was made again; release
        and claim partitions. At most every ``check_s``. Group work that needs the
        lock is left to a later look if the lock is busy for ``lock_wait``. Raises
        ``LogClosedError`` for an owned partition whose log directory has been gone
        for the session timeout while its topic is still there (removed alone)."""
        now = clock()
        if self._stopping or now - self._last_check < self.check_s:
            return
        self._last_check = now
        self._lock_wait = lock_wait
        self._busy = False
        self._file.beat()
        if self.pattern is not None:
            # topics created or deleted since the last look: a rebalance is due
            self.topics = topics_matching(self.root, self.pattern)
        self._retake(self._watch.look(self.topics))
        st = self._read_state(now)
        if self._stopping:
            return
        if self.member_id not in st.members:
            if self.joined:
                _log.warning("seglog: consumer %s of group %s was expelled (generation "
                             "%d); rejoining", self.member_id, self.group, st.generation)
                self.joined = False
                # its claims were dropped with it: nothing to commit or release
                self._revoke(self.assigned, commit=False)
            if self._stopping:
                return
            joined = self._try_locked(self.rebalance)
            if joined is None:
                return
            st = joined
        if st.generation != self.generation or not self.joined:
            self._adopt(st)
        if not self._stopping and self._stale(st):
            new = self._try_locked(self.rebalance)
            if new is not None and (new.generation != self.generation or not self.joined):
                self._adopt(new)
        if self._stopping:
            return
        self._release()
        self.claim()
        self._retake(self._watch.settle(now, self._half_done_s))

    def _read_state(self, now: float) -> State:
        files = self.files
        try:
            s = os.stat(files.state_path)
            sig: tuple[int, int, int] | None = (s.st_mtime_ns, s.st_size, s.st_ino)
        except FileNotFoundError:
            sig = None
        st = self._state
        # the file's identity tells a change at once; a full read every second covers
        # a replacement the identity cannot tell (same size, same recycled inode,
        # within the file system's clock tick)
        if sig != self._state_sig or st is None or now - self._state_read > 1.0:
            self._state_sig = sig
            self._state_read = now
            st = self._state = files.state(self._assignor)
        return st

    def _retake(self, tps: set[TP]) -> None:
        """Owned partitions whose log is another now (the topic deleted and made
        again): revoked without a commit (their positions are of the old log) and
        announced and claimed anew, from the new log's committed offset or
        ``auto_offset_reset``."""
        if not tps:
            return
        _log.warning("seglog: consumer %s of group %s: the logs of %s were deleted and made "
                     "again; taking them anew", self.member_id, self.group, sorted(tps))
        self._revoke(tps, commit=False)
        if not self._stopping:
            self.assigned |= tps
            self._callback(self._on_assign, tps)

    def out_of_range(self, tp: TP) -> bool:
        """A fetch found ``tp``'s position outside its log: True if the log is another
        now (the topic deleted and made again, before a look saw its record change),
        then taken anew; False: the position is to be placed in this log."""
        if self._parts.offset_past_end(tp) and self._parts.replaced(tp):
            self._retake({tp})
            self.look_soon()
            return True
        return False

    def vanished(self, tp: TP) -> None:
        """A fetch found ``tp``'s log directory gone: it is read no more, and the next
        look decides (its topic deleted: it leaves with the next generation; made
        again: taken anew; still there after a look: ``LogClosedError``)."""
        if self._watch.vanished(tp):
            self.look_soon()

    def _stale(self, st: State) -> bool:
        """Is a rebalance due: a member of the generation dead or silent, a member
        file not in it alive (it wants in) or dead (to tidy), this member's
        subscription changed (a pattern's), or a subscribed topic created or deleted
        since the assignment?"""
        if st.members.get(self.member_id) != self.topics:
            return True
        files = self.files
        for m in st.members:
            if m != self.member_id and files.probe(m, self._session_s) != "alive":
                return True
        for m in files.member_files():
            if m not in st.members and m != self.member_id \
                    and files.probe(m, self._session_s) != "silent":
                return True
        known = st.partitions or {}
        # a deleted topic (its record gone) leaves the assignment too: its members
        # would otherwise fail every other poll on its vanished logs for ever
        return any(self._watch.count(t) != known.get(t) for t in self.topics)

    def _adopt(self, st: State, announce: bool = True) -> None:
        """Take generation ``st``: revoke what it no longer assigns to this member,
        announce what it adds (or leave that to ``announce``; claims follow, in
        ``claim``)."""
        self._state = st
        mine = frozenset(st.assignment.get(self.member_id, ()))
        if len(self._parts):
            # a claim gone means a generation in between went on without this member
            # (expelled, and put back before it looked): another member may have read
            # and committed those partitions since. They are lost, and (if still
            # assigned) announced and claimed anew, from the committed offsets.
            owners = self.files.owners()
            gone = {tp for tp in self._parts.owned()
                    if owners.get(key(tp), [None])[0] != self.member_id}
            if gone:
                _log.warning("seglog: consumer %s of group %s lost %s in a generation it "
                             "missed; taking them anew", self.member_id, self.group,
                             sorted(gone))
                self._revoke(gone, commit=False)
        lost = self.assigned - mine
        if lost:
            self._revoke(lost, commit=True)
        self.generation = st.generation
        self.joined = self.member_id in st.members
        if self._stopping:
            return              # nothing more announced: leaving revokes what was
        added = mine - self.assigned
        self.assigned = mine
        if added and not announce:
            self._unannounced |= added
        elif added:
            self._callback(self._on_assign, added)

    def leave(self) -> None:
        """Give every partition up (``on_revoke`` may still commit them), the first
        half of leaving; ``exit`` is the second."""
        self._stopping = True
        self._busy = False
        self._lock_wait = POLL_LOCK_WAIT_S
        self._revoke(self.assigned, commit=True)

    def exit(self) -> None:
        """Release the claims, start the generation without this member and remove
        its file, under the group lock (``GroupBusyError`` past ``lock_s``)."""
        self.assigned = frozenset()
        self.joined = False
        with self._locked("leave"):
            refused = self._release_locked()
            self.rebalance(leaving=True)
            self._file.remove()
        _warn(refused)

    def close(self) -> None:
        """Close the readers and the member file (its lock goes): however leaving
        ended."""
        self._stopping = True
        self.joined = False
        self._parts.close()
        self._releasing.clear()
        self._watch.clear()
        self._file.close()

    def after_fork(self) -> None:
        """In a forked child: the member file's descriptor is the parent's."""
        self._file.drop_copy()

    # -- callbacks -------------------------------------------------------------------
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

    def raise_callback_error(self) -> None:
        e, self._callback_error = self._callback_error, None
        if e is not None:
            raise e

    # -- claims ----------------------------------------------------------------------
    def claim(self) -> None:
        """Start on assigned partitions nobody live in this generation still holds."""
        if self._stopping:
            return
        parts = self._parts
        want = sorted(tp for tp in self.assigned if tp not in parts and tp not in self._releasing)
        if not want:
            return
        done = self._try_locked(lambda: ops.claim(self.files, self.member_id, self.generation,
                                                  want, self._assignor))
        if done is None:
            self._state_sig = None          # a newer generation: adopt it first
            return
        got, offsets = done
        for tp in got:
            path = partition_dir(self.root, tp[0], tp[1])
            try:
                ident = log_id(path)
                log = Log.open(path, readonly=True)
            except (OSError, SeglogError) as e:
                # its topic being deleted (the next generation drops it) or made again:
                # tried again at the next look; still so once the other half of a
                # deletion would have come, raised
                if self._watch.unopened(tp, self._half_done_s):
                    if not os.path.isdir(path):
                        raise removed_alone(path, tp[0]) from e
                    raise
                continue
            entry = offsets.get(key(tp))
            committed = committed_offset(entry, ident)
            if entry is not None and committed is None:
                _log.warning("seglog: group %s: the offset committed for %s-%d is of a log "
                             "deleted since (the topic was made again); starting per "
                             "auto_offset_reset", self.group, tp[0], tp[1])
            try:
                parts.take(tp, log, ident, committed)
            except (OSError, SeglogError):
                # its directory went while its offsets were read: as a log that could
                # not be opened (nothing of it was taken)
                log.close()
                if self._watch.unopened(tp, self._half_done_s):
                    raise
                continue
            self._watch.opened(tp)

    def _revoke(self, tps: Iterable[TP], commit: bool) -> None:
        """Give partitions up: tell the user (who may still ``commit()`` them), stop
        reading them, then commit their positions (auto-commit on; never for a
        topic deleted or made again since) and release them for their next owner,
        now or at a later look if the group lock is busy."""
        tps = set(tps)
        if not tps:
            return
        if tps - self._unannounced:
            self._callback(self._on_revoke, tps - self._unannounced)
        self._unannounced -= tps
        self.assigned -= tps
        self._watch.forget(tps)
        for tp, given in self._parts.give_up(tps).items():
            keep = commit and self._commit_on_revoke and self._same_log(tp, given.log_id)
            self._releasing[tp] = (given.position if keep else None, given.seeked,
                                   given.log_id)
        self._release()

    def _same_log(self, tp: TP, ident: str | None) -> bool:
        """Is ``tp``'s topic still there, with the log ``ident``?"""
        if read_partition_count(self.root, tp[0]) is None:
            return False
        try:
            return ident is None or log_id(partition_dir(self.root, tp[0], tp[1])) == ident
        except SeglogError:
            return False

    def _release(self) -> None:
        """Commit the final positions of revoked partitions and drop their claims, if
        the group lock is free now (else at a later look)."""
        if self._releasing:
            refused = self._try_locked(self._release_locked)
            if refused is not None:
                self._releasing.clear()
                _warn(refused)

    def _release_locked(self) -> list[str]:
        """``_release``'s work, under the group lock; the commits refused (logged by
        the caller, after the lock: a logging handler may block)."""
        releasing = self._releasing
        refused = []
        todo = {tp: pos for tp, (pos, _, _) in releasing.items() if pos is not None}
        if todo:
            try:
                self._commit_locked(todo, {tp for tp, r in releasing.items() if r[1]},
                                    {tp: r[2] for tp, r in releasing.items()})
            except CommitFailedError as e:
                refused.append(str(e))
        ops.release(self.files, self.member_id, releasing)
        return refused

    # -- commits ---------------------------------------------------------------------
    def commit(self, todo: dict[TP, int], exact: bool = False) -> None:
        """Commit positions ``todo`` of owned partitions under the group lock, waited
        for up to ``lock_s`` (``GroupBusyError``); ``CommitFailedError`` if fenced.
        ``exact``: offsets the user named, committed as given (also below the
        committed one), which leaves the positions and their seeks alone."""
        parts = self._parts
        with self._locked("commit"):
            self._commit_locked(todo, set(todo) if exact else parts.seeked(todo),
                                {tp: parts.log_id(tp) for tp in todo})
        if not exact:
            parts.committed(todo)

    def try_commit(self, todo: dict[TP, int]) -> bool:
        """Auto-commit ``todo`` if the group lock is free within this look's wait:
        False if it is busy. A refused commit is logged, and makes the next poll look
        at the group."""
        parts = self._parts
        ids = {tp: parts.log_id(tp) for tp in todo}
        try:
            done = self._try_locked(lambda: self._commit_locked(todo, parts.seeked(todo), ids))
        except CommitFailedError as e:
            _log.warning("seglog: auto-commit: %s", e)
            self.look_soon()
            return True
        if done is None:
            return False
        parts.committed(todo)
        return True

    def _commit_locked(self, todo: dict[TP, int], seeked: set[TP],
                       ids: dict[TP, str | None]) -> bool:
        """``ops.commit`` (True: done); a refused one makes the next look read the
        state."""
        try:
            ops.commit(self.files, self.member_id, self.generation, self._assignor, todo,
                       seeked, ids)
        except CommitFailedError:
            self._state_sig = None
            raise
        return True

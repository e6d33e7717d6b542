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

This module is the consumer and the names users import; beside it, ``_assignors``
deals partitions, ``_group_files`` reads and writes the files above,
``_membership`` is one member's coordination (which a ``Consumer`` holds) and
``_group_admin`` the calls made without being a member.
"""

from __future__ import annotations

import itertools
import logging
import operator
import os
import socket
import time
import uuid
import weakref
from typing import TYPE_CHECKING, Iterable, Iterator

from ._assignors import ASSIGNORS, TP, assign
from ._files import require_dir
from ._group_admin import GroupDescription, check_int, check_ms, commit_offsets, \
    committed_offsets, describe_group, list_groups
from ._group_files import GROUPS_DIR, close_fork_copies, key
from ._membership import POLL_LOCK_WAIT_S, Callback, Membership
from .errors import InvalidConfigError, LogClosedError, OffsetOutOfRangeError, SeglogError
from .message import Headers, Message, short_repr, field_getter
from .topic import check_name

__all__ = ["ASSIGNORS", "GROUPS_DIR", "TP", "Callback", "Consumer", "ConsumerMessage",
           "GroupDescription", "assign", "commit_offsets", "committed_offsets",
           "describe_group", "list_groups"]

_log = logging.getLogger("seglog")
_FETCH_BYTES = 1 << 18    # one read per partition; what a poll leaves waits for the next

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
            check_ms(name, v, lo)
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
        self._auto_commit_s = None if auto_commit_ms is None else auto_commit_ms / 1000.0
        self._member = m = Membership(
            self.root, group, topic_list, member_id, reset=auto_offset_reset,
            commit_on_revoke=auto_commit_ms is not None, session_ms=session_timeout_ms,
            lock_s=lock_timeout_ms / 1000.0, assignor=assignor, on_assign=on_assign,
            on_revoke=on_revoke)
        # the member's, moved in place here: one attribute lookup from a poll
        self._owned = m.owned
        self._positions = m.positions
        self._seeked = m.seeked
        # per partition, what the last read returned and nobody took yet: the set's
        # next offset and its messages
        self._fetched: dict[TP, tuple[int, Iterator[ConsumerMessage]]] = {}
        # an error met by a poll that returned what it had read before it: raised by
        # the next poll (unless the partition went or was seeked)
        self._pending_error: tuple[TP, Exception] | None = None
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
        self._last_commit = time.monotonic()
        _CONSUMERS.add(self)
        m.join()
        try:
            m.claim()
            m.raise_callback_error()
        except BaseException:
            self._abort_join()
            raise

    def _abort_join(self) -> None:
        """The constructor failed after joining (a callback raised): leave again."""
        try:
            self.close()
        except SeglogError as e:
            _log.warning("seglog: leaving group %s after a failed start: %s", self.group, e)

    def _forget(self) -> None:
        """Drop the read-ahead and the waiting error of partitions the member gave up."""
        dropped = self._member.dropped
        for tp in dropped:
            self._fetched.pop(tp, None)
            if self._pending_error is not None and self._pending_error[0] == tp:
                self._pending_error = None
        dropped.clear()

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
        member = self._member
        deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        delay = 0.0005
        while True:
            member.check(min(POLL_LOCK_WAIT_S, max(0.0, deadline - time.monotonic())))
            if member.dropped:
                self._forget()
            member.raise_callback_error()
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
            time.sleep(min(delay, left, member.check_s))
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
        self._member.commit(todo)
        self._last_commit = time.monotonic()

    def _auto_commit(self) -> None:
        todo = self._delivered()
        if not todo or self._member.try_commit(todo) or self._auto_commit_s is None:
            self._last_commit = time.monotonic()
        else:
            # the lock is busy: try again at the next look at the group
            self._last_commit = time.monotonic() - self._auto_commit_s + self._member.check_s

    def position(self, topic: str, partition: int) -> int:
        """The next offset this member will return from an owned partition."""
        self._check_open()
        return self._delivered()[self._owned_tp(topic, partition)]

    def committed(self, topic: str, partition: int) -> int | None:
        """The group's committed offset of a partition (any owner), None if none."""
        self._check_open()
        tp = (check_name(topic), check_int("partition", partition))
        c = self._member.files.offsets().get(key(tp))
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
        tp = (check_name(topic), check_int("partition", partition))
        if tp not in self._owned:
            raise InvalidConfigError(f"{topic}-{partition} is not owned by this consumer "
                                     f"(assignment: {sorted(self._member.assigned)})")
        return tp

    def assignment(self) -> frozenset[TP]:
        """The (topic, partition)s the current generation gives this member (what
        ``on_assign`` announced and ``on_revoke`` did not take back)."""
        return self._member.assigned

    @property
    def generation(self) -> int:
        return self._member.generation


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
        self._member.after_fork()

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
        member = self._member
        try:
            try:
                # on_revoke may still commit() what it is given
                member.leave()
            finally:
                self._closed = True
            member.exit()
        finally:
            member.close()
            self._fetched.clear()
            self._pending_error = None
            member.dropped.clear()
            _CONSUMERS.discard(self)
        member.raise_callback_error()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<seglog.Consumer {self.member_id} group={self.group!r} "
                f"generation={self._member.generation} owns={sorted(self._owned)}"
                f"{' closed' if self._closed else ''}>")


def _after_fork_in_child() -> None:
    close_fork_copies()
    for c in list(_CONSUMERS):
        c._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

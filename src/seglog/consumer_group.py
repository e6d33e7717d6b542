"""Consumer groups coordinated by files and ``flock`` only (docs/GROUPS.md).

Under ``root/__groups/<group>/``:

* ``members/<id>``: each member holds an exclusive ``flock`` on its file for its
  whole life (the lock dies with its process, even on SIGKILL, and a forked child
  never keeps it); the file's mtime is its heartbeat, refreshed by every ``poll``;
  its content names its topics (and its pattern, subscribed by one) and its own
  session timeout, by which the others judge it.
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
``_membership`` is one member's coordination (which a ``Consumer`` holds),
``_consumer_fetch`` its reading (``ConsumerMessage``, the ``Fetcher``),
``_consumer_args`` the checks of its arguments and ``_group_admin`` the calls made
without being a member; ``_aio`` runs ``async for``'s polls in worker threads.
"""

from __future__ import annotations

import logging
import operator
import os
import time
import weakref
from typing import AsyncIterator, Iterable, Iterator, Mapping

from . import _consumer_args as args
from ._aio import Serial, poll_in_thread
from ._assignors import ASSIGNORS, TP, assign
from ._consumer_fetch import ConsumerMessage, Deserializer, Fetcher
from ._files import require_dir
from ._group_admin import GroupDescription, check_int, commit_offsets, committed_offsets, \
    describe_group, list_groups
from ._group_files import GROUPS_DIR, close_fork_copies, key
from ._membership import POLL_LOCK_WAIT_S, Callback, Membership
from .errors import InvalidConfigError, LogClosedError, OffsetOutOfRangeError, SeglogError
from .topic import check_name

__all__ = ["ASSIGNORS", "GROUPS_DIR", "TP", "Callback", "Consumer", "ConsumerMessage",
           "GroupDescription", "assign", "commit_offsets", "committed_offsets",
           "describe_group", "list_groups"]

_log = logging.getLogger("seglog")
_ASYNC_POLL_MS = 500      # one poll of ``async for`` in its worker thread, at most
_CONSUMERS: "weakref.WeakSet[Consumer]" = weakref.WeakSet()
_Batch = tuple[list[ConsumerMessage], Iterator[ConsumerMessage], int]


def _firsts(msgs: list[ConsumerMessage]) -> dict[TP, int]:
    """Per partition, the first offset among ``msgs``."""
    return {(m[0], m[1]): m[2] for m in reversed(msgs)}


class Consumer:
    """A member of consumer group ``group`` reading ``topics`` under ``root``, or
    every topic whose whole name matches the regular expression ``pattern``
    (give one of the two; topics created later that match join the subscription at
    the member's next look at the group, a rebalance follows).

    At-least-once delivery: positions are committed by ``commit()``, by
    auto-commit (``auto_commit_ms``, at the start of a poll, for what earlier polls
    returned) and by ``close()``; a new owner starts at the committed offset. The
    poll loop is the heartbeat: a member that does not poll (or iterate) for its
    ``session_timeout_ms`` is expelled and its partitions go to the others. A topic
    that does not exist yet is waited for: its partitions are assigned once it is
    created. ``on_assign`` and ``on_revoke`` are called with the partitions this
    member gains and loses, so that the partitions they announced are exactly those
    that polls deliver from. ``key_deserializer`` and ``value_deserializer`` turn
    each message's key and value bytes (never None) into what polls return.
    Joining, ``commit()`` and ``close()`` wait at most ``lock_timeout_ms`` for the
    group's lock (``GroupBusyError`` past it, nothing written); ``poll`` never waits
    for it beyond its own timeout. ``async for m in consumer`` polls in a worker
    thread. The consumer's calls are serialized: a call from another thread while
    a poll waits makes that poll return at once. A process forked from the
    consumer's may not use it (the child never holds the member's lock).
    """

    def __init__(self, root: str | os.PathLike[str], group: str,
                 topics: Iterable[str] | None = None, auto_offset_reset: str = "earliest",
                 auto_commit_ms: int | None = 5000, session_timeout_ms: int = 10_000,
                 assignor: str = "range", on_assign: Callback | None = None,
                 on_revoke: Callback | None = None, member_id: str | None = None,
                 lock_timeout_ms: int = 10_000, *, pattern: str | None = None,
                 key_deserializer: Deserializer | None = None,
                 value_deserializer: Deserializer | None = None) -> None:
        check_name(group, "group")
        topic_list, pattern = args.subscription(topics, pattern)
        args.settings(auto_offset_reset, assignor, session_timeout_ms, auto_commit_ms,
                      lock_timeout_ms, {"on_assign": on_assign, "on_revoke": on_revoke,
                                        "key_deserializer": key_deserializer,
                                        "value_deserializer": value_deserializer})
        member_id = args.member_id(member_id)
        self.root = os.path.abspath(os.fspath(root))
        require_dir(self.root, "topic root", create=True)    # a file: NotALogError
        if not os.path.isdir(self.root):
            # topics may come later, the root of topics may not: a mistyped path
            # would otherwise become a new tree of directories
            raise InvalidConfigError(f"{self.root} is not a directory (a root of topics)")
        self.group = group
        self.pattern = pattern
        self.member_id = member_id
        self._auto_commit_s = None if auto_commit_ms is None else auto_commit_ms / 1000.0
        self._member = m = Membership(
            self.root, group, topic_list, member_id, reset=auto_offset_reset,
            commit_on_revoke=auto_commit_ms is not None, session_ms=session_timeout_ms,
            lock_s=lock_timeout_ms / 1000.0, assignor=assignor, on_assign=on_assign,
            on_revoke=on_revoke, pattern=pattern)
        # the member's, moved in place here: one attribute lookup from a poll
        self._owned = m.owned
        self._positions = m.positions
        self._seeked = m.seeked
        self._fetcher = Fetcher(m.owned, m.positions, group, key_deserializer,
                                value_deserializer)
        # the batch an iterator is yielding: (messages, its iterator, epoch), so that
        # commit() and close() count only what it yielded; the epoch moves with every
        # poll that returns messages and every seek
        self._undelivered: _Batch | None = None
        self._epoch = 0
        # one call at a time: a call from another thread ends a waiting poll at once
        self._serial = Serial()
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

    @property
    def topics(self) -> list[str]:
        """The subscribed topics now, sorted (``subscription()`` as a list)."""
        return list(self._member.topics)

    def subscription(self) -> set[str]:
        """The subscribed topics: those given, or those matching ``pattern`` at the
        member's last look at the group (kafka-python's ``subscription()``)."""
        return set(self._member.topics)

    # -- consuming -----------------------------------------------------------------
    def poll(self, timeout_ms: int = 1000, max_records: int = 500) -> list[ConsumerMessage]:
        """Messages from owned, unpaused partitions, up to ``max_records``; waits up to
        ``timeout_ms`` for some (0: look once), and returns within it whatever other
        members do. Heartbeats, follows rebalances and auto-commits as it goes.

        A poll that fails (a damaged batch, a deserializer's error) moves no position
        past the message that failed; one that fails on a partition after reading
        others returns what it read, and the next poll raises the error. A message a
        deserializer refused is read again by every later poll (which raises again
        if it fails again) until a ``seek`` moves past it."""
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)):
            raise TypeError("timeout_ms must be a number")
        if isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1:
            raise TypeError("max_records must be an int >= 1")
        with self._serial:
            self._check_open()
            return self._poll(timeout_ms, max_records)

    def _poll(self, timeout_ms: float, max_records: int) -> list[ConsumerMessage]:
        self._give_back()
        fetcher = self._fetcher
        fetcher.raise_pending()
        member = self._member
        deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        delay = 0.0005
        while True:
            member.check(min(POLL_LOCK_WAIT_S, max(0.0, deadline - time.monotonic())))
            if member.dropped:
                fetcher.forget(member.dropped)
                member.dropped.clear()
            member.raise_callback_error()
            if self._auto_commit_s is not None and \
                    time.monotonic() - self._last_commit >= self._auto_commit_s:
                self._auto_commit()
            out = fetcher.fetch(max_records)
            if out:
                self._epoch += 1
                return out
            left = deadline - time.monotonic()
            if left <= 0 or self._serial.calls:
                return out
            # back off to 50 ms between looks: an idle member costs well under 1 % of
            # a core, and new data waits at most that long; a call from another
            # thread ends the wait at once
            self._serial.wake.wait(min(delay, left, member.check_s))
            delay = min(delay * 2, 0.05)

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
            token = self._begin_batch(batch)
            try:
                yield from token[1]
            finally:
                self._end_batch(token)

    async def __aiter__(self) -> AsyncIterator[ConsumerMessage]:
        """``async for m in consumer``: ``__iter__`` for asyncio. Each poll (at most
        0.5 s) runs in a worker thread while the event loop awaits it, one at a
        time; callbacks and deserializers run there too. A task cancelled while a
        poll is under way loses nothing: what that poll returns goes back to the
        partitions. ``close()`` (from another task) ends the loop at once."""
        while not self._closed:
            try:
                batch = (await poll_in_thread(self._async_poll, self._async_give_back,
                                              self._serial))[0]
            except LogClosedError:
                if self._closed:
                    return
                raise
            if not batch:
                continue
            token = self._begin_batch(batch)
            try:
                for m in token[1]:
                    yield m
            finally:
                self._end_batch(token)

    def _async_poll(self) -> tuple[list[ConsumerMessage], int]:
        batch = self.poll(timeout_ms=_ASYNC_POLL_MS)
        return batch, self._epoch

    def _async_give_back(self, polled: tuple[list[ConsumerMessage], int]) -> None:
        """A poll's messages that nobody received go back (the consumer's lock held)."""
        batch, epoch = polled
        if batch and not self._closed and epoch == self._epoch:
            self._fetcher.rewind(batch)

    def _begin_batch(self, batch: list[ConsumerMessage]) -> _Batch:
        """An iteration starts yielding ``batch``: until it ends, commits count only
        what it yielded."""
        token = self._undelivered = (batch, iter(batch), self._epoch)
        return token

    def _end_batch(self, token: _Batch) -> None:
        """An iteration left its batch: what it did not yield goes back."""
        with self._serial:
            if self._undelivered is token:
                self._undelivered = None
            rest = list(token[1])
            if rest and not self._closed and self._epoch == token[2]:
                self._fetcher.rewind(rest)

    def _give_back(self) -> None:
        """What an iterator holds back goes back to its partitions (it yields no
        more of its batch): before a poll, a seek or closing."""
        u, self._undelivered = self._undelivered, None
        if u is not None and u[2] == self._epoch:
            rest = list(u[1])
            if rest:
                self._fetcher.rewind(rest)

    def _delivered(self) -> dict[TP, int]:
        """The positions of the owned partitions, less what an iterator holds back."""
        out = dict(self._positions)
        u = self._undelivered
        if u is not None and u[2] == self._epoch:
            left = operator.length_hint(u[1])
            if left:
                for tp, off in _firsts(u[0][len(u[0]) - left:]).items():
                    if tp in out:
                        out[tp] = off
        return out

    # -- pausing -------------------------------------------------------------------
    def pause(self, *partitions: TP) -> None:
        """Stop fetching from these owned (topic, partition)s (none given: nothing
        paused, as kafka-python). They stay owned, polls go on heartbeating, and what
        was read ahead waits; a partition lost in a rebalance is no longer paused.
        ``InvalidConfigError`` (nothing paused) if one is not owned."""
        with self._serial:
            self._check_open()
            self._fetcher.paused.update(self._owned_tps(partitions))

    def resume(self, *partitions: TP) -> None:
        """Fetch again from these paused (topic, partition)s (owned ones: else
        ``InvalidConfigError``, nothing resumed)."""
        with self._serial:
            self._check_open()
            self._fetcher.paused.difference_update(self._owned_tps(partitions))

    def paused(self) -> set[TP]:
        """The (topic, partition)s paused now (a new set, as kafka-python's)."""
        return set(self._fetcher.paused)

    # -- offsets -------------------------------------------------------------------
    def commit(self, offsets: Mapping[TP, int] | None = None) -> None:
        """Durably commit the position (next offset) of every owned partition, or
        with ``offsets`` exactly those ``{(topic, partition): offset}`` (owned
        partitions, int offsets within the log: ``InvalidConfigError``,
        ``TypeError`` or ``OffsetOutOfRangeError`` before anything is written; a
        given offset may be below the committed one; positions do not move).

        ``CommitFailedError`` if this member no longer owns them in the group's
        current generation (it rejoins at its next poll; nothing is committed).
        ``GroupBusyError`` if the group's lock stayed busy for ``lock_timeout_ms``
        (nothing is committed; commit again later). A position below the committed
        offset is committed only after a ``seek``.
        """
        with self._serial:
            self._check_open()
            if offsets is not None:
                todo = args.offsets(offsets, self._owned, self._member.assigned)
                if todo:
                    self._member.commit(todo, exact=True)
                return
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
        with self._serial:
            self._check_open()
            return self._delivered()[self._owned_tps(((topic, partition),))[0]]

    def committed(self, topic: str, partition: int) -> int | None:
        """The group's committed offset of a partition (any owner), None if none."""
        self._check_open()
        tp = (check_name(topic), check_int("partition", partition))
        c = self._member.files.offsets().get(key(tp))
        return None if c is None else int(c[0])

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Move the position of an owned partition; a later commit may move the
        committed offset back to it."""
        with self._serial:
            self._check_open()
            tp = self._owned_tps(((topic, partition),))[0]
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise TypeError("offset must be an int")
            log = self._owned[tp]
            if not log.start_offset <= offset <= log.end_offset:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is outside [{log.start_offset}, {log.end_offset}]")
            self._seek({tp: offset})

    def seek_to_beginning(self, *partitions: TP) -> None:
        """Move these owned (topic, partition)s (none given: every owned one) to
        their log's start offset now. ``InvalidConfigError`` (nothing moved) if one
        is not owned."""
        with self._serial:
            self._check_open()
            tps = self._owned_tps(partitions) if partitions else sorted(self._owned)
            self._seek({tp: self._owned[tp].start_offset for tp in tps})

    def seek_to_end(self, *partitions: TP) -> None:
        """Move these owned (topic, partition)s (none given: every owned one) to
        their log's end offset now: only what is appended later is returned.
        ``InvalidConfigError`` (nothing moved) if one is not owned."""
        with self._serial:
            self._check_open()
            tps = self._owned_tps(partitions) if partitions else sorted(self._owned)
            self._seek({tp: self._owned[tp].end_offset for tp in tps})

    def _seek(self, where: dict[TP, int]) -> None:
        self._give_back()
        self._epoch += 1
        for tp, offset in where.items():
            self._positions[tp] = offset
            self._fetcher.drop(tp)
            self._seeked.add(tp)

    def _owned_tps(self, tps: tuple[object, ...]) -> list[TP]:
        return args.owned_tps(tps, self._owned, self._member.assigned)

    def assignment(self) -> frozenset[TP]:
        """The (topic, partition)s the current generation gives this member (what
        ``on_assign`` announced and ``on_revoke`` did not take back)."""
        return self._member.assigned

    @property
    def generation(self) -> int:
        """The group generation this member last joined (it moves with every
        rebalance: a member joining, leaving or expelled, a topic created or grown)."""
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
        self._serial = Serial()     # another thread of the parent may have held it
        self._member.after_fork()

    @property
    def closed(self) -> bool:
        """True once ``close()`` ran (or a callback closed it)."""
        return self._closed

    def close(self) -> None:
        """Commit (auto-commit on), give the partitions up and leave the group at once:
        the others rebalance at their next poll, without waiting for a timeout. A
        poll waiting in another thread (or ``async for``'s worker) returns at once,
        and the iteration ends.

        The consumer is closed however this ends; ``GroupBusyError`` if the group's
        lock stayed busy for ``lock_timeout_ms``: then nothing was committed (the next
        owners start at the last commit) and the group sees this member gone by its
        released lock. In a forked child it changes no file."""
        if self._closed:
            return
        if self._forked_from is not None:
            self._closed = True
            return
        with self._serial:
            if self._closed:
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
                self._fetcher.clear()
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

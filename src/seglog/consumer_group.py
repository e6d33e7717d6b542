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

This module is the consumer and the names users import; beside it, ``_groups.assignors``
deals partitions, ``_groups.files`` reads and writes the files above,
``_groups.ops`` is everything done under ``group.lock``, ``_groups.membership`` one
member's coordination (which a ``Consumer`` holds) and ``_groups.topic_watch`` what it
knows of its topics, ``_groups.assignment`` the one owner of a consumer's partitions and
positions, ``_groups.fetch`` its reading (``ConsumerMessage``, the ``Fetcher``),
``_groups.args`` the checks of its arguments and ``_groups.admin`` the calls made
without being a member; ``_runtime.aio`` runs ``async for``'s polls in worker threads.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from typing import AsyncIterator, Iterable, Iterator, Mapping

from ._groups import args
from ._runtime.aio import Serial, in_thread
from ._groups.assignment import Assignment, Held, Target
from ._groups.assignors import ASSIGNORS, TP, assign
from ._groups.fetch import ConsumerMessage, Deserializer, Fetcher
from ._runtime.files import GROUPS_DIR
from ._storage.marker import check_root
from ._groups.admin import (GroupDescription, check_int, commit_offsets, committed_offsets,
                            describe_group, list_groups)
from ._groups.files import close_fork_copies, committed_offset, key, log_id
from ._groups.membership import POLL_LOCK_WAIT_S, Callback, Membership
from .errors import InvalidConfigError, LogClosedError, SeglogError
from .topic import check_name, partition_dir

__all__ = ["ASSIGNORS", "GROUPS_DIR", "TP", "Callback", "Consumer", "ConsumerMessage",
           "GroupDescription", "assign", "commit_offsets", "committed_offsets",
           "describe_group", "list_groups"]

_log = logging.getLogger("seglog")
_ASYNC_POLL_MS = 500      # one poll of ``async for`` in its worker thread, at most
_ITER_MAX_RECORDS = 500
_CONSUMERS: "weakref.WeakSet[Consumer]" = weakref.WeakSet()


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
    created (a topic deleted leaves, one made again is read from its start). The
    constructor joins the group; ``on_assign`` and ``on_revoke`` are called, from
    the first poll on, with the partitions this member gains and loses, so that the
    partitions they announced are exactly those that polls deliver from (and
    ``on_assign`` may seek the consumer). ``key_deserializer`` and ``value_deserializer`` turn
    each message's key and value bytes (never None) into what polls return.
    Joining, ``commit()`` and ``close()`` wait at most ``lock_timeout_ms`` for the
    group's lock (``GroupBusyError`` past it, nothing written); ``poll`` never waits
    for it beyond its own timeout. ``async for m in consumer`` polls in a worker
    thread. The consumer's calls are serialized: a call from another thread while
    a poll waits makes that poll return at once; ``close()`` may come from any
    thread, task, callback or signal handler. A process forked from the
    consumer's may not use it (the child never holds the member's lock). A root
    that holds files seglog did not make is refused (``NotALogError``).
    """

    def __init__(self, root: str | os.PathLike[str], group: str, *,
                 topics: Iterable[str] | None = None, auto_offset_reset: str = "earliest",
                 auto_commit_ms: int | None = 5000, session_timeout_ms: int = 10_000,
                 assignor: str = "range", on_assign: Callback | None = None,
                 on_revoke: Callback | None = None, member_id: str | None = None,
                 lock_timeout_ms: int = 10_000, pattern: str | None = None,
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
        # someone else's directory, a log, a file: NotALogError, nothing written
        if not check_root(self.root):
            # topics may come later, the root of topics may not: a mistyped path
            # would otherwise become a new tree of directories
            raise InvalidConfigError(f"{self.root} is not a directory (a root of topics)")
        self.group = group
        self.pattern = pattern
        self.member_id = member_id
        self._auto_commit_s = None if auto_commit_ms is None else auto_commit_ms / 1000.0
        # the one owner of the claimed partitions' readers and positions
        self._parts = Assignment(group, auto_offset_reset)
        self._member = m = Membership(
            self.root, group, topic_list, member_id, self._parts,
            commit_on_revoke=auto_commit_ms is not None, session_ms=session_timeout_ms,
            lock_s=lock_timeout_ms / 1000.0, assignor=assignor, on_assign=on_assign,
            on_revoke=on_revoke, pattern=pattern)
        self._fetcher = Fetcher(key_deserializer, value_deserializer)
        # one call at a time: a call from another thread ends a waiting poll at once
        self._serial = Serial()
        # closing: asked (every loop ends, polls return nothing); closed: done
        self._closing = False
        self._closed = False
        self._pid = os.getpid()
        self._forked_from: int | None = None
        self._last_commit = time.monotonic()
        _CONSUMERS.add(self)
        with self._serial:
            m.join()
        try:
            with self._serial:
                if not self._closing:      # on_assign may have closed it
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
        if it fails again) until a ``seek`` moves past it. A poll of a consumer being
        closed (by a callback, a deserializer or a signal handler inside this poll)
        returns ``[]``."""
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)):
            raise TypeError("timeout_ms must be a number")
        if isinstance(max_records, bool) or not isinstance(max_records, int):
            raise TypeError("max_records must be an int")
        if max_records < 1:
            raise InvalidConfigError(f"max_records must be >= 1, not {max_records}")
        with self._serial:
            self._check_open()
            if self._closing:
                self._serial.then(self._finish_close)
                return []
            return self._poll(timeout_ms, max_records)

    def _poll(self, timeout_ms: float, max_records: int) -> list[ConsumerMessage]:
        parts = self._parts
        parts.give_back()
        fetcher = self._fetcher
        member = self._member
        deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        delay = 0.0005
        member.announce()
        while True:
            member.check(min(POLL_LOCK_WAIT_S, max(0.0, deadline - time.monotonic())))
            member.raise_callback_error()
            if self._closing:
                return []
            if self._auto_commit_s is not None and \
                    time.monotonic() - self._last_commit >= self._auto_commit_s:
                self._auto_commit()
            got = fetcher.fetch(parts.fetchable(), max_records)
            if got.moves:
                parts.advance(got.moves)
            for tp in got.out_of_range:
                try:
                    if not member.out_of_range(tp):
                        parts.out_of_range(tp)
                except LogClosedError:
                    if self._closing:
                        return []
                    # its directory went since the fetch, or holds another log now (a
                    # reader never reads on into a log made again under the same name)
                    member.vanished(tp)
            for tp in got.vanished:
                member.vanished(tp)
            if got.error is not None:
                if self._closing and isinstance(got.error, LogClosedError):
                    return []          # a deserializer closed the consumer
                raise got.error
            if got.messages or self._closing:
                return got.messages
            left = deadline - time.monotonic()
            if left <= 0 or self._serial.calls:
                return got.messages
            # back off to 50 ms between looks: an idle member costs well under 1 % of
            # a core, and new data waits at most that long; a call from another
            # thread ends the wait at once
            self._serial.wake.wait(min(delay, left, member.check_s))
            delay = min(delay * 2, 0.05)

    def _poll_held(self, timeout_ms: int) -> Held | None:
        """An iteration's poll: its batch held (not delivered until yielded) before
        the consumer's lock is released, so that no commit, close or seek from
        another thread or task counts it first. None once the consumer is closing."""
        with self._serial:
            if not self._closing:
                self._check_open()
            if self._closing:
                if not self._closed:
                    self._serial.then(self._finish_close)
                return None
            try:
                batch = self._poll(timeout_ms, _ITER_MAX_RECORDS)
            except LogClosedError:
                if self._closing:
                    return None
                raise
            return self._parts.hold(batch)

    def _release(self, held: Held) -> None:
        """An iteration left ``held``: what it did not yield goes back."""
        with self._serial:
            self._parts.release(held)

    def __iter__(self) -> Iterator[ConsumerMessage]:
        """Messages for ever (until ``close()``), blocking while there are none.

        Leaving the loop early (``break``) gives back what the last poll returned and
        the loop did not reach: the positions (and the next commit) count only the
        messages yielded. The loop ends when the consumer is closed, from any thread,
        a callback, a deserializer or a signal handler (what it had not yielded goes
        back); an error of a poll, such as a partition's log whose directory was
        removed alone (``LogClosedError`` too), is raised, never taken for that end."""
        while not self._closing:
            held = self._poll_held(1000)
            if held is None:
                return
            try:
                yield from held.rest
            finally:
                self._release(held)

    async def __aiter__(self) -> AsyncIterator[ConsumerMessage]:
        """``async for m in consumer``: ``__iter__`` for asyncio. Each poll (at most
        0.5 s) runs in a worker thread while the event loop awaits it, one at a
        time; callbacks and deserializers run there too. A task cancelled while a
        poll is under way loses nothing: what that poll returns stays with the
        consumer, undelivered, and the next poll returns it again. ``close()`` (from
        another task, a thread or a signal handler) ends the loop at once."""
        while not self._closing:
            held = await in_thread(self._async_poll, None)
            if held is None:
                return
            try:
                for m in held.rest:
                    yield m
            finally:
                self._release(held)

    def _async_poll(self) -> Held | None:
        return self._poll_held(_ASYNC_POLL_MS)

    # -- pausing -------------------------------------------------------------------
    def pause(self, *partitions: TP) -> None:
        """Stop fetching from these assigned (topic, partition)s (none given: nothing
        paused, as kafka-python). They stay owned, polls go on heartbeating, and what
        was read ahead waits; a partition lost in a rebalance is no longer paused.
        ``InvalidConfigError`` (nothing paused) if one is not assigned."""
        with self._serial:
            self._check_open()
            self._parts.pause(self._assigned_tps(partitions))

    def resume(self, *partitions: TP) -> None:
        """Fetch again from these paused (topic, partition)s (assigned ones: else
        ``InvalidConfigError``, nothing resumed)."""
        with self._serial:
            self._check_open()
            self._parts.resume(self._assigned_tps(partitions))

    def paused(self) -> set[TP]:
        """The (topic, partition)s paused now (a new set, as kafka-python's)."""
        return self._parts.paused()

    # -- offsets -------------------------------------------------------------------
    def commit(self, offsets: Mapping[TP, int] | None = None) -> None:
        """Durably commit the position (next offset) of every owned partition, or
        with ``offsets`` exactly those ``{(topic, partition): offset}`` (owned
        partitions, int offsets within the log: ``InvalidConfigError``,
        ``TypeError`` or ``OffsetOutOfRangeError`` before anything is written; a
        given offset may be below the committed one; positions do not move).

        A position counts only what was delivered: what ``poll`` returned, and of a
        batch a loop over the consumer is yielding (``for``, ``async for``) only
        what it has yielded, whichever thread or task commits.
        ``CommitFailedError`` if this member no longer owns them in the group's
        current generation (it rejoins at its next poll; nothing is committed).
        ``GroupBusyError`` if the group's lock stayed busy for ``lock_timeout_ms``
        (nothing is committed; commit again later). A position below the committed
        offset is committed only after a ``seek``.
        """
        with self._serial:
            self._check_open()
            if offsets is not None:
                todo = args.offsets(offsets, self._parts, self._member.assigned)
                if todo:
                    self._member.commit(todo, exact=True)
                return
            todo = self._parts.delivered()
            if not todo:
                return
            self._member.commit(todo)
            self._last_commit = time.monotonic()

    def _auto_commit(self) -> None:
        todo = self._parts.delivered()
        if not todo or self._member.try_commit(todo) or self._auto_commit_s is None:
            self._last_commit = time.monotonic()
        else:
            # the lock is busy: try again at the next look at the group
            self._last_commit = time.monotonic() - self._auto_commit_s + self._member.check_s

    def position(self, topic: str, partition: int) -> int:
        """The next offset this member will return from an owned partition."""
        with self._serial:
            self._check_open()
            tp = args.owned_tp((topic, partition), self._parts, self._member.assigned)
            return self._parts.delivered()[tp]

    def committed(self, topic: str, partition: int) -> int | None:
        """The group's committed offset of a partition (any owner), None if none (or
        if it was committed for a log deleted since: the topic made again)."""
        self._check_open()
        tp = (check_name(topic), check_int("partition", partition))
        entry = self._member.files.offsets().get(key(tp))
        if entry is None:
            return None
        try:
            ident = log_id(partition_dir(self.root, tp[0], tp[1]))
        except SeglogError:
            ident = None
        return committed_offset(entry, ident)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Move the position of an assigned partition; a later commit may move the
        committed offset back to it. An owned partition moves now (``offset`` within
        its log: else ``OffsetOutOfRangeError``); one assigned but not yet claimed
        from its previous owner (a seek in ``on_assign``) starts there when it is
        (an offset outside the log then is placed as ``auto_offset_reset`` says)."""
        with self._serial:
            self._check_open()
            tp = self._assigned_tps(((topic, partition),))[0]
            self._parts.seek({tp: args.seek_target(tp, offset, self._parts)})

    def seek_to_beginning(self, *partitions: TP) -> None:
        """Move these assigned (topic, partition)s (none given: every one) to their
        log's start offset, now if owned, else once claimed. ``InvalidConfigError``
        (nothing moved) if one is not assigned."""
        self._seek_all(partitions, "beginning")

    def seek_to_end(self, *partitions: TP) -> None:
        """Move these assigned (topic, partition)s (none given: every one) to their
        log's end offset, now if owned, else once claimed: only what is appended
        later is returned. ``InvalidConfigError`` (nothing moved) if one is not
        assigned."""
        self._seek_all(partitions, "end")

    def _seek_all(self, partitions: tuple[TP, ...], where: Target) -> None:
        with self._serial:
            self._check_open()
            tps = self._assigned_tps(partitions) if partitions else sorted(self._member.assigned)
            self._parts.seek({tp: where for tp in tps})

    def _assigned_tps(self, tps: tuple[object, ...]) -> list[TP]:
        return args.assigned_tps(tps, self._member.assigned)

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
        """True once ``close()`` was called (from anywhere: a callback's close is
        finished when the call it interrupted returns)."""
        return self._closing

    def close(self) -> None:
        """Commit what was delivered (auto-commit on), give the partitions up and leave
        the group at once: the others rebalance at their next poll, without waiting
        for a timeout. Any loop over the consumer ends, in any thread or task; a poll
        waiting in another thread (or ``async for``'s worker) returns at once.

        Safe from anywhere: another thread or task, ``on_assign``, ``on_revoke``, a
        deserializer, a signal handler. Called from inside one of the consumer's own
        calls (a callback, or a signal handler interrupting it), it marks the consumer
        closed and the leaving is done when that call returns.

        The consumer is closed however this ends; ``GroupBusyError`` if the group's
        lock stayed busy for ``lock_timeout_ms``: then nothing was committed (the next
        owners start at the last commit) and the group sees this member gone by its
        released lock. In a forked child it changes no file."""
        if self._forked_from is not None:
            self._closing = self._closed = True
            return
        if self._closing:
            if not self._closed and not self._serial.held_here():
                with self._serial:       # another thread is closing it: wait for it
                    self._finish_close()
            return
        self._closing = True
        self._member.stop()
        if self._serial.held_here():
            self._serial.then(self._finish_close)
            return
        with self._serial:
            self._finish_close()

    def _finish_close(self) -> None:
        """``close``'s work, holding the consumer's lock: once."""
        if self._closed:
            return
        member = self._member
        self._parts.give_back()
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
            _CONSUMERS.discard(self)
        member.raise_callback_error()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<seglog.Consumer {self.member_id} group={self.group!r} "
                f"generation={self._member.generation} owns={self._parts.owned()}"
                f"{' closed' if self._closing else ''}>")


def _after_fork_in_child() -> None:
    close_fork_copies()
    for c in list(_CONSUMERS):
        c._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

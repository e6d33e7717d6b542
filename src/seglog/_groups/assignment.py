"""One consumer's partitions and where it reads them (docs/GROUPS.md, "Delivery"):
the ``Assignment`` is the one owner of the claimed partitions' readers, their
positions, the seeks and pauses, the batch an iteration is yielding, and so of what
a commit counts.

Who changes what, each through the methods here: the membership takes a claimed
partition (``take``, at the committed offset or a seek made in ``on_assign``) and
gives partitions up (``give_up``, which returns the positions to commit); the
consumer moves positions by the fetcher's moves (``advance``), by the user's seeks
and by giving back what an iteration did not yield (``give_back``); nothing else
holds these dicts.
"""

from __future__ import annotations

import logging
import operator
from typing import Iterable, Iterator, Literal, NamedTuple

from .assignors import TP
from .fetch import ConsumerMessage, Part
from .files import log_id
from ..errors import SeglogError
from ..log import Log

_log = logging.getLogger("seglog")
# a seek asked for a partition assigned but not claimed yet (in ``on_assign``)
Target = int | Literal["beginning", "end"]


class Held:
    """A batch an iteration is yielding: ``rest`` is what it has not yielded yet."""

    __slots__ = ("batch", "rest")

    def __init__(self, batch: list[ConsumerMessage]) -> None:
        self.batch = batch
        self.rest: Iterator[ConsumerMessage] = iter(batch)


class GivenUp(NamedTuple):
    """A partition given up: the position to commit (what was delivered), whether it
    was seeked (a commit may then go back) and the id of the log it is of."""
    position: int
    seeked: bool
    log_id: str | None


def _firsts(msgs: list[ConsumerMessage]) -> dict[TP, int]:
    """Per partition, the first offset among ``msgs``."""
    return {(m[0], m[1]): m[2] for m in reversed(msgs)}


class Assignment:
    """The partitions a consumer of ``group`` owns and its positions in them;
    ``reset`` (``"earliest"``/``"latest"``) places a partition with no usable
    committed offset."""

    def __init__(self, group: str, reset: str) -> None:
        self._group = group
        self._reset = reset
        self._logs: dict[TP, Log] = {}          # claimed partitions and their readers
        self._ids: dict[TP, str | None] = {}    # the id of each reader's log
        self._positions: dict[TP, int] = {}     # the next offset to fetch
        self._seeked: set[TP] = set()           # moved by a seek since the last commit
        self._paused: set[TP] = set()           # owned or assigned
        self._targets: dict[TP, Target] = {}    # seeks of partitions not claimed yet
        self._aside: set[TP] = set()            # their log's directory went: not fetched
        self._held: Held | None = None

    # -- what is owned -------------------------------------------------------------------
    def __contains__(self, tp: object) -> bool:
        return tp in self._logs

    def __len__(self) -> int:
        return len(self._logs)

    def owned(self) -> list[TP]:
        """The claimed partitions, sorted."""
        return sorted(self._logs)

    def log(self, tp: TP) -> Log:
        return self._logs[tp]

    def log_id(self, tp: TP) -> str | None:
        return self._ids[tp]

    def aside(self) -> set[TP]:
        """Owned partitions whose log directory went (see ``set_aside``)."""
        return set(self._aside)

    # -- the membership's: taking and giving up ------------------------------------------
    def take(self, tp: TP, log: Log, ident: str | None, committed: int | None) -> None:
        """Start reading claimed partition ``tp`` with ``log`` (of id ``ident``): at a
        seek made while it was assigned but not claimed, else at ``committed``, else
        where ``reset`` says. A start outside the log is placed as ``out_of_range``
        places a position. Reading the log's offsets may fail (its directory went):
        then nothing of ``tp`` was taken."""
        target = self._targets.get(tp)
        if target is not None:
            pos = (log.start_offset if target == "beginning" else
                   log.end_offset if target == "end" else target)
        elif committed is not None:
            pos = committed
        else:
            pos = log.start_offset if self._reset == "earliest" else log.end_offset
        pos = self._within(tp, log, pos)
        self._targets.pop(tp, None)
        if target is not None:
            self._seeked.add(tp)
        self._logs[tp] = log
        self._ids[tp] = ident
        self._positions[tp] = pos

    def give_up(self, tps: Iterable[TP]) -> dict[TP, GivenUp]:
        """Stop reading ``tps`` (owned or only assigned): close their readers, forget
        their pauses and seeks; the owned ones' delivered positions."""
        tps = set(tps)
        delivered = self.delivered() if tps & self._logs.keys() else {}
        out = {}
        for tp in tps:
            log = self._logs.pop(tp, None)
            if log is not None:
                log.close()
                out[tp] = GivenUp(delivered[tp], tp in self._seeked, self._ids.pop(tp))
                del self._positions[tp]
            self._seeked.discard(tp)
            self._paused.discard(tp)
            self._targets.pop(tp, None)
            self._aside.discard(tp)
        return out

    def set_aside(self, tp: TP) -> None:
        """``tp``'s log directory went: fetch it no more (the member decides at its next
        look whether its topic was deleted or replaced, or the log removed alone)."""
        self._aside.add(tp)

    def replaced(self, tp: TP) -> bool:
        """Is ``tp``'s log another now than the one it was taken with (deleted and
        made again under the same name)? A directory gone is not (yet) another log."""
        ident = self._ids[tp]
        if ident is None:
            return False
        try:
            now = log_id(self._logs[tp].path)
        except SeglogError:
            return True          # a marker being written, or damaged: not the one taken
        return now is not None and now != ident

    def close(self) -> None:
        """Close every reader; the assignment is empty afterwards."""
        for log in self._logs.values():
            log.close()
        self._logs.clear()
        self._ids.clear()
        self._positions.clear()
        self._seeked.clear()
        self._paused.clear()
        self._targets.clear()
        self._aside.clear()
        self._held = None

    # -- fetching ------------------------------------------------------------------------
    def fetchable(self) -> list[Part]:
        """The owned partitions to fetch from (not paused, not set aside), sorted."""
        skip = self._paused | self._aside if self._paused or self._aside else None
        pos = self._positions
        return [(tp, log, pos[tp]) for tp, log in sorted(self._logs.items())
                if skip is None or tp not in skip]

    def advance(self, moves: dict[TP, int]) -> None:
        """A fetch's moves (of partitions still owned)."""
        if moves.keys() <= self._logs.keys():
            self._positions.update(moves)
        else:
            self._positions.update((tp, p) for tp, p in moves.items() if tp in self._logs)

    def offset_past_end(self, tp: TP) -> bool:
        """Is owned ``tp``'s position past its log's end?"""
        return tp in self._logs and self._positions[tp] > self._logs[tp].end_offset

    def out_of_range(self, tp: TP) -> None:
        """``tp``'s position lies outside its log: below the start (retention deleted
        it), resume at the start; past the end (the log was cut back, or is another
        log of the same name), where ``reset`` says, as Kafka does."""
        if tp in self._logs:
            self._positions[tp] = self._within(tp, self._logs[tp], self._positions[tp])

    def _within(self, tp: TP, log: Log, pos: int) -> int:
        start, end = log.start_offset, log.end_offset
        if pos < start:
            _log.warning("seglog: group %s: offset %d of %s-%d was deleted by retention; "
                         "resuming at the log start %d", self._group, pos, tp[0], tp[1], start)
            return start
        if pos > end:
            to = start if self._reset == "earliest" else end
            _log.warning("seglog: group %s: offset %d of %s-%d is past the log's end %d; "
                         "resuming at %d (auto_offset_reset=%s)", self._group, pos, tp[0],
                         tp[1], end, to, self._reset)
            return to
        return pos

    # -- delivery ------------------------------------------------------------------------
    def hold(self, batch: list[ConsumerMessage]) -> Held:
        """An iteration is to yield ``batch``: until it has, what it has not yielded
        is not delivered (not committed, given back by ``give_back``)."""
        held = self._held = Held(batch)
        return held

    def give_back(self) -> None:
        """What the held batch has not yielded goes back to its partitions (their
        positions move back to it); the iteration yields no more of it."""
        held, self._held = self._held, None
        if held is not None:
            rest = list(held.rest)
            if rest:
                for tp, off in _firsts(rest).items():
                    if tp in self._logs:
                        self._positions[tp] = off

    def release(self, held: Held) -> None:
        """An iteration left ``held``: give back what it did not yield, unless that
        batch was already given back (by a poll, a seek or closing)."""
        if self._held is held:
            self.give_back()

    def delivered(self) -> dict[TP, int]:
        """The positions of the owned partitions, less what the held batch has not
        yielded: what a commit counts."""
        out = dict(self._positions)
        held = self._held
        if held is not None:
            left = operator.length_hint(held.rest)
            if left:
                batch = held.batch
                for tp, off in _firsts(batch[len(batch) - left:]).items():
                    if tp in out:
                        out[tp] = off
        return out

    def seeked(self, tps: Iterable[TP]) -> set[TP]:
        """Those of ``tps`` seeked since their last commit."""
        return self._seeked.intersection(tps)

    def committed(self, tps: Iterable[TP]) -> None:
        """Their positions were committed: a later commit goes back only after a seek."""
        self._seeked.difference_update(tps)

    # -- the user's moves ----------------------------------------------------------------
    def seek(self, where: dict[TP, Target]) -> None:
        """Move owned partitions' positions (``"beginning"``/``"end"``: the log's start
        or end now) and record seeks of assigned partitions not claimed yet, applied
        when they are (``take``). The held batch goes back first."""
        self.give_back()
        for tp, target in where.items():
            log = self._logs.get(tp)
            if log is None:
                self._targets[tp] = target
                continue
            self._positions[tp] = (log.start_offset if target == "beginning" else
                                   log.end_offset if target == "end" else target)
            self._seeked.add(tp)

    def pause(self, tps: Iterable[TP]) -> None:
        self._paused.update(tps)

    def resume(self, tps: Iterable[TP]) -> None:
        self._paused.difference_update(tps)

    def paused(self) -> set[TP]:
        return set(self._paused)

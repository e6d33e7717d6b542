"""A ``Consumer``'s arguments checked before anything is done with them: its
settings and subscription, (topic, partition) arguments, and the offsets given to
``commit``. Each check raises ``TypeError`` for a wrong type,
``InvalidConfigError`` for a wrong value or a partition this member does not own,
``OffsetOutOfRangeError`` for an offset outside its partition's log; a call that
raises has changed nothing.
"""

from __future__ import annotations

import os
import re
import socket
import uuid
# Any: the user's callbacks
from typing import Any, Callable, Iterable, Mapping

from .assignment import Assignment, Target
from .assignors import ASSIGNORS, TP
from .admin import check_int, check_ms
from .files import MAX_PATTERN, compile_pattern
from ..errors import InvalidConfigError, OffsetOutOfRangeError
from ..topic import check_name


def subscription(topics: Iterable[str] | None, pattern: object) -> tuple[list[str], str | None]:
    """(sorted topics, None) or ([], pattern): exactly one of them given."""
    if pattern is None:
        if topics is None:
            raise InvalidConfigError("give topics or a pattern")
        if isinstance(topics, str):
            raise TypeError("topics must be a list of topic names, not a str")
        topic_list = sorted({check_name(t) for t in topics})
        if not topic_list:
            raise InvalidConfigError("subscribe to at least one topic")
        return topic_list, None
    if topics is not None:
        raise InvalidConfigError("give topics or a pattern, not both")
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a str (a regular expression), not "
                        f"{type(pattern).__name__}")
    if len(pattern) > MAX_PATTERN:
        raise InvalidConfigError(f"pattern is longer than {MAX_PATTERN} characters")
    try:
        compile_pattern(pattern)
    except (re.error, RecursionError, OverflowError) as e:
        raise InvalidConfigError(f"pattern {pattern!r} is not a regular expression: "
                                 f"{e}") from None
    return [], pattern


def settings(auto_offset_reset: str, assignor: str, session_timeout_ms: int,
             auto_commit_ms: int | None, lock_timeout_ms: int,
             callbacks: dict[str, Callable[..., Any] | None]) -> None:
    if auto_offset_reset not in ("earliest", "latest"):
        raise InvalidConfigError(
            f"auto_offset_reset must be 'earliest' or 'latest', not {auto_offset_reset!r}")
    if assignor not in ASSIGNORS:
        raise InvalidConfigError(f"assignor must be one of {ASSIGNORS}, not {assignor!r}")
    check_ms("session_timeout_ms", session_timeout_ms, 10)
    if auto_commit_ms is not None:
        check_ms("auto_commit_ms", auto_commit_ms, 1)
    check_ms("lock_timeout_ms", lock_timeout_ms, 0)
    for name, cb in callbacks.items():
        if cb is not None and not callable(cb):
            raise TypeError(f"{name} must be callable")


def member_id(given: str | None) -> str:
    """The member id given, checked, or a new one (host, pid and a random part)."""
    if given is None:
        given = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        given = "".join(c if c.isalnum() or c in "._-" else "-" for c in given)[:200]
    check_name(given, "member")
    if given.startswith("."):
        raise InvalidConfigError(f"member id {given!r}: names starting with '.' are "
                                 f"the group's temporary files")
    return given


def _tp(tp: object) -> TP:
    if not isinstance(tp, tuple) or len(tp) != 2:
        raise TypeError(f"a partition is a (topic, partition) tuple, not {tp!r}")
    return check_name(tp[0]), check_int("partition", tp[1])


def owned_tp(tp: object, parts: Assignment, assigned: Iterable[TP]) -> TP:
    """``tp`` checked: a (topic, partition) this member owns now."""
    t = _tp(tp)
    if t not in parts:
        raise InvalidConfigError(f"{t[0]}-{t[1]} is not owned by this consumer "
                                 f"(assignment: {sorted(assigned)})")
    return t


def assigned_tps(tps: tuple[object, ...], assigned: frozenset[TP]) -> list[TP]:
    """Every one of ``tps`` checked before any is used: a (topic, partition) the
    current generation assigns to this member (owned now, or to be claimed)."""
    out = []
    for tp in tps:
        t = _tp(tp)
        if t not in assigned:
            raise InvalidConfigError(f"{t[0]}-{t[1]} is not assigned to this consumer "
                                     f"(assignment: {sorted(assigned)})")
        out.append(t)
    return out


def seek_target(tp: TP, offset: object, parts: Assignment) -> Target:
    """``seek``'s offset: an int, within the log's range if the partition is owned
    (a partition assigned but not claimed yet is placed when it is)."""
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError("offset must be an int")
    if offset < 0:
        raise OffsetOutOfRangeError(f"offset {offset} is negative")
    if tp in parts:
        log = parts.log(tp)
        if not log.start_offset <= offset <= log.end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{log.start_offset}, {log.end_offset}]")
    return offset


def offsets(given: object, parts: Assignment, assigned: Iterable[TP]) -> dict[TP, int]:
    """``commit``'s ``{(topic, partition): offset}``: owned partitions, int offsets
    from the log's start to its end (as ``seek`` allows), all checked first."""
    if not isinstance(given, Mapping):
        raise TypeError(f"offsets must be a dict {{(topic, partition): offset}}, not "
                        f"{type(given).__name__}")
    todo: dict[TP, int] = {}
    for tp, off in given.items():
        t = owned_tp(tp, parts, assigned)
        if isinstance(off, bool) or not isinstance(off, int):
            raise TypeError(f"the offset of {t[0]}-{t[1]} must be an int (the next offset "
                            f"to read), not {type(off).__name__}")
        todo[t] = off
    for t, off in todo.items():
        log = parts.log(t)
        first, end = log.start_offset, log.end_offset
        if not first <= off <= end:
            raise OffsetOutOfRangeError(f"offset {off} is outside {t[0]}-{t[1]}'s log "
                                        f"[{first}, {end}]: nothing committed")
    return todo

"""What a check of a log found, said to a person (``seglog verify``, ``stats``,
``recover``, ``Log.verify()`` in a notebook): what was read, and at damage where
it is, what is at stake and what to do next, one scope per line. Functions of a
``repair.CheckReport`` (duck-typed: this module sits below ``repair``)."""

from __future__ import annotations

import os
import re
import textwrap
import threading
from typing import Protocol, Sequence

from . import html as _html
from .html import num, offsets, plural, size, when



# what the functions read of a report: this module sits below ``repair``, whose
# ``CheckReport``, ``Problem`` and ``CutPlan`` have these
class Finding(Protocol):
    """One problem a check found (``_log.walk.Problem``)."""

    @property
    def path(self) -> str: ...
    @property
    def position(self) -> int | None: ...
    @property
    def offset(self) -> int | None: ...
    @property
    def reason(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def torn(self) -> bool: ...


class Stake(Protocol):
    """What a cut at the damage loses (``repair.CutPlan``)."""

    @property
    def position(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def damaged_unread(self) -> bool: ...
    @property
    def damaged_count(self) -> int | None: ...
    @property
    def lost_messages(self) -> int: ...
    @property
    def lost_end_offset(self) -> int | None: ...
    @property
    def lost_bytes(self) -> int: ...
    @property
    def lost_segments(self) -> int: ...
    @property
    def valid_after(self) -> int: ...


class Report(Protocol):
    """A check of one log (``repair.CheckReport``)."""

    @property
    def path(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def ok(self) -> bool: ...
    @property
    def problems(self) -> Sequence[Finding]: ...
    @property
    def cut(self) -> Stake | None: ...
    @property
    def stopped_at_damage(self) -> bool: ...
    @property
    def messages(self) -> int: ...
    @property
    def segments(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def reserved_bytes(self) -> int: ...
    @property
    def start_offset(self) -> int | None: ...
    @property
    def end_offset(self) -> int | None: ...
    @property
    def vanished(self) -> Sequence[str]: ...
    @property
    def superseded(self) -> Sequence[str]: ...
    @property
    def checked_at(self) -> int: ...


WIDTH = 80
_LATEST: dict[str, Report] = {}      # real path -> the latest full check's report
_LATEST_MAX = 4096
_LATEST_LOCK = threading.Lock()
_LABEL = 12          # "  at stake: " and its kind

# what each reason means, for the person who has to act on it
_MEANS = {
    "checksum": "the checksum does not match: the batch's bytes changed after they "
                "were written (a flipped bit, a failing disk, a foreign write)",
    "zeros": "zeros where a batch should start",
    "partial": "a batch runs past the end of the data",
    "short": "the file ends inside a batch",
    "records": "the records inside the batch do not add up",
}


def reason_text(reason: str, message: str) -> str:
    """The damage in words, without saying the same thing twice."""
    means = _MEANS.get(reason)
    if means is None:
        return message
    if message.startswith(("checksum mismatch", "zero-filled space", "the file ends inside",
                           "partial batch header", "batch runs past")):
        extra = message.partition(" (")[2]
        return means + (f" ({extra}" if extra else "")
    return f"{means}: {message}"


_UNIT = re.compile(r"(\d) (B|KB|MB|GB|TB|ms|s|min|h|d)\b")


def wrap(label: str, text: str, width: int = WIDTH) -> list[str]:
    """``  label:   text`` wrapped at ``width``, continuation lines indented (a
    label longer than the column is followed by one space); a number stays on the
    line of its unit."""
    head = f"  {label + ':':<{_LABEL - 2}}"
    if len(head) > _LABEL or not head.endswith(" "):
        head = f"  {label}: "
    kept = _UNIT.sub("\\1\u00a0\\2", text)
    lines = textwrap.wrap(kept, width, initial_indent=head, subsequent_indent=" " * _LABEL,
                          break_long_words=False, break_on_hyphens=False) or [head]
    return [ln.replace("\u00a0", " ") for ln in lines]


def _where(p: Finding) -> str:
    at = [os.path.basename(p.path)]
    if p.position is not None:
        at.append(f"position {p.position}")
    return ", ".join(at) + (f" (offset {p.offset})" if p.offset is not None else "")


def stake_text(cut: Stake) -> str:
    """What lies from the damage on: the messages a cut there loses, in all and by
    where they are."""
    damaged = cut.damaged_count if cut.damaged_unread else 0
    total = cut.lost_messages + (damaged or 0)
    rng = (f" (offsets {cut.offset}..{cut.lost_end_offset - 1})"
           if cut.lost_end_offset is not None and cut.lost_end_offset > cut.offset else "")
    parts = []
    if cut.damaged_unread:
        parts.append(f"{num(damaged)} in the damaged batch (as its header says)"
                     if damaged is not None else "the damaged batch's (its header is "
                                                 "unreadable: not counted)")
    if cut.lost_messages:
        parts.append(f"{num(cut.lost_messages)} in {plural(cut.valid_after, 'good batch', 'good batches')} "
                     f"after it" if cut.valid_after else f"{num(cut.lost_messages)} in it")
    what = (f"{plural(total, 'message')}{rng}: {' and '.join(parts)}" if parts
            else "no message in a good batch after the damage")
    return (f"{what}; {size(cut.lost_bytes)} of data in "
            f"{plural(cut.lost_segments, 'segment file')} from the damaged one on")


def next_step(rep: Report, name: str) -> str:
    """What the operator does about the report's problems."""
    path = rep.path
    data = [p for p in rep.problems if p.reason not in ("index", "missing")]
    if any(p.reason == "missing" for p in rep.problems):
        return (f"restore the partition's directory from a backup; `seglog verify` "
                f"checks the rest")
    if not data:
        return (f"`seglog recover {path}` (opening the log for writing rebuilds damaged "
                f"indexes from the data; nothing is lost)")
    if all(p.torn for p in data):
        return (f"`seglog recover {path}` (opening the log for writing cuts the torn tail "
                f"off, as after any crash)")
    return (f"back up {path}, then `seglog recover --truncate-at-damage {path}` (it shows "
            f"what the cut loses and asks first)")


def total_messages(rep: Report) -> int | None:
    """The messages the log holds by its batches' headers, the damaged batch's too:
    None when the damaged batch's count cannot be read."""
    cut = rep.cut
    if cut is None:
        return None if rep.stopped_at_damage else int(rep.messages)
    if cut.damaged_unread and cut.damaged_count is None:
        return None
    damaged = (cut.damaged_count or 0) if cut.damaged_unread else 0
    return int(rep.messages + cut.lost_messages + damaged)


def scopes(rep: Report, name: str) -> tuple[str, list[tuple[str, str]]]:
    """A log's check as a headline and (scope, text) pairs: none when it is healthy,
    else what was read, the damage, what is at stake, and what to do next."""
    healthy = (f"{plural(rep.messages, 'message')}, {plural(rep.segments, 'segment')}, "
               f"{size(rep.bytes)}" + (f" (+{size(rep.reserved_bytes)} reserved)"
                                       if rep.reserved_bytes else ""))
    if any(p.reason == "missing" for p in rep.problems):
        return f"{name}: MISSING", [("damage", rep.problems[0].message),
                                    ("next", next_step(rep, name))]
    span = offsets(rep.start_offset, rep.end_offset)
    also = []
    if rep.vanished:
        also.append(("also", f"{plural(len(rep.vanished), 'segment')} deleted by retention or "
                             f"compaction during the check"))
    if rep.superseded:
        also.append(("also", f"{plural(len(rep.superseded), 'segment')} a compaction replaced and "
                             f"has not deleted yet (a writer's open deletes them)"))
    if rep.ok:
        where = span if rep.end_offset is None or rep.end_offset <= (rep.start_offset or 0) \
            else f"offsets {span}"
        return f"{name}: ok: {where}, {healthy}", also
    cut = rep.cut
    out: list[tuple[str, str]] = []
    if rep.stopped_at_damage:
        # the segments read: those before the damaged one, and it if read in part
        before = rep.segments - (cut.lost_segments - (cut.position > 0) if cut is not None
                                 else 0)
        out.append(("read", f"offsets {span} ({plural(rep.messages, 'message')}, "
                            f"{size(rep.bytes)} in {before} of "
                            f"{plural(rep.segments, 'segment')}); nothing after the damage "
                            f"is read as data"))
    else:
        out.append(("read", f"offsets {span}, {healthy}"))
    for p in rep.problems:
        if p.reason == "index":
            out.append(("index", f"{_where(p)}: {p.message}"))
        else:
            out.append(("damage", f"{_where(p)}: {reason_text(p.reason, p.message)}"))
    if cut is not None:
        out.append(("at stake", stake_text(cut)))
    return f"{name}: DAMAGED", out + also + [("next", next_step(rep, name))]


def report_lines(rep: Report, name: str, width: int = WIDTH) -> list[str]:
    """``scopes`` as lines of at most ``width`` characters."""
    head, parts = scopes(rep, name)
    out = textwrap.wrap(head, width, subsequent_indent="    ", break_long_words=False)
    for label, text in parts:
        out += wrap(label, text, width)
    return out


def status(rep: Report | None, start: int | None = None, short: bool = False
           ) -> tuple[str, str]:
    """(label, kind) of a view's verification: what was checked and when (``short``:
    for a table's cell or a title)."""
    if rep is None:
        return ("not verified" if short else
                "not verified: .verify() reads every batch"), "warn"
    at = when(rep.checked_at)[:19] + "Z"
    if rep.ok:
        return ((f"ok ({at[11:]})" if short else
                 f"verified {at}: no damage in offsets "
                 f"{offsets(rep.start_offset, rep.end_offset)}"), "ok")
    first = damage_of(rep)
    if first.offset is not None and start is not None and first.offset < start:
        return ("verify again" if short else
                f"damage found {at} at offset {first.offset}, below the start offset now: "
                f"verify again"), "warn"
    where = f" at offset {first.offset}" if first.offset is not None else ""
    kind = "index damage" if first.reason == "index" else "DAMAGE"
    return (f"{kind}{where}" if short else f"{kind}{where} (verified {at})"), "bad"


def damage_of(rep: Report) -> Finding:
    """The report's first problem in the data (else its first)."""
    return next((p for p in rep.problems if p.reason != "index"), rep.problems[0])


def report_html(reps: Sequence[Report]) -> str:
    """Reports as a notebook shows them: a status per log, and for each damaged one
    where, what is at stake and what to do."""
    rows = []
    details = []
    for r in reps:
        rows.append((r.name, _html.pill("ok" if r.ok else "DAMAGED", "ok" if r.ok else "bad"),
                     offsets(r.start_offset, r.end_offset), num(r.messages),
                     r.segments, size(r.bytes)))
        if not r.ok:
            head_, parts = scopes(r, r.name)
            details.append(_html.title(head_) + _html.fields_table(parts))
    ok = all(r.ok for r in reps)
    head = _html.title(f"seglog verify: {plural(len(reps), 'log')}" if len(reps) != 1
                       else f"seglog verify: {reps[0].name}",
                       _html.pill("no damage" if ok else "DAMAGE", "ok" if ok else "bad"))
    when_ = when(max((r.checked_at for r in reps), default=0))
    table = _html.table(("log", "state", "offsets read", "messages read", "segments",
                         "bytes read"), rows, "llrrrr")
    return _html.block(head, table, *details,
                       _html.note(f"every batch and index entry read at {when_}"))


def remember(path: str, rep: Report) -> None:
    """Keep ``rep`` as the latest check of the log at ``path`` (this process's)."""
    key = os.path.realpath(path)
    with _LATEST_LOCK:
        _LATEST.pop(key, None)
        _LATEST[key] = rep
        while len(_LATEST) > _LATEST_MAX:
            del _LATEST[next(iter(_LATEST))]          # the oldest


def forget(path: str) -> None:
    """The log at ``path`` changed (a cut): its latest check no longer describes it."""
    with _LATEST_LOCK:
        _LATEST.pop(os.path.realpath(path), None)


def latest(path: str) -> Report | None:
    """The latest check of the log at ``path`` this process made, None if none."""
    with _LATEST_LOCK:
        return _LATEST.get(os.path.realpath(path))

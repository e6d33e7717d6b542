"""What the ``seglog`` command says: exit codes, numbers and offsets in one
convention (``_views.html``'s: counts with separators, offsets plain, ranges first..last,
sizes in units, times ISO with a ``Z``), tables that fit the terminal, values
shown safely as text or JSON, and progress on a terminal."""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import dataclass
from typing import IO, Any, Sequence  # Any: values of the JSON documents --json prints

from .._codec import format as _format
from .._views import html as _html
from .. import repair
from .._views.html import size

EXIT_OK, EXIT_DAMAGE, EXIT_USAGE, EXIT_NOT_A_LOG, EXIT_LOCKED, EXIT_DECLINED = 0, 1, 2, 3, 4, 5
WIDTH = 80


class Progress:
    """bytes done / total, rate and ETA on stderr, only when it is a terminal. The
    total and the counts are bytes of data (never a writer's reserved zeros)."""

    def __init__(self, label: str, total: int, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        self.on = bool(getattr(self.stream, "isatty", lambda: False)()) and total > 0
        self.label, self.total, self.done = label, total, 0
        self.t0 = self.last = time.monotonic()

    def __call__(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.on and now - self.last >= 0.2:
            self.last = now
            rate = self.done / max(now - self.t0, 1e-9)
            left = max(self.total - self.done, 0)
            eta = left / rate if rate else 0
            self.stream.write(f"\r{self.label}: {size(self.done):>9} of {size(self.total):>9} "
                              f"{rate / 1e6:7.1f} MB/s  ETA {eta:5.0f} s ")
            self.stream.flush()

    def close(self) -> None:
        if self.on:
            self.stream.write("\r" + " " * 70 + "\r")
            self.stream.flush()


def plural(count: int, noun: str) -> str:
    """``1 segment``, ``2 segments``, ``1 batch``, ``3 batches``, ``1,000 messages``."""
    if count == 1:
        return f"1 {noun}"
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return f"{count:,} {noun[:-1]}ies"
    return f"{count:,} {noun}{'es' if noun.endswith(('s', 'sh', 'ch', 'x')) else 's'}"


def width(out: IO[str]) -> int:
    """Columns to fit: the terminal's when ``out`` is one, else 80."""
    if getattr(out, "isatty", lambda: False)():
        return max(40, shutil.get_terminal_size((WIDTH, 24)).columns)
    return WIDTH


# -- offsets and bytes, one convention -------------------------------------------------
def span_text(start: int | None, end: int | None) -> str:
    """A log's offsets as Kafka prints them: ``offsets first..last``; without
    messages ``empty (end offset N)``."""
    if start is None or end is None:
        return "no segments"
    if end <= start:
        return f"empty (end offset {end})"
    return f"offsets {start}..{end - 1}"


def offset_fields(start: int | None, end: int | None) -> dict[str, int | None]:
    return {"start_offset": start,
            "last_offset": end - 1 if start is not None and end is not None and end > start
            else None,
            "end_offset": end}


def bytes_text(stored: int, reserved: int) -> str:
    return size(stored) + (f" (+{size(reserved)} reserved)" if reserved else "")


# -- tables that fit -------------------------------------------------------------------
@dataclass
class Col:
    """A column: its header, ``r`` to right-align (numbers), its rank (the lowest
    goes first when the table is too wide) and the most characters a cell keeps
    (longer ones are cut with "…")."""

    name: str
    align: str = "l"
    rank: int = 9
    most: int = 0


def table(cols: Sequence[Col], rows: Sequence[Sequence[str]], room: int = WIDTH
          ) -> list[str]:
    """Rows under a header, two spaces between columns, fitted into ``room``
    characters: cells cut at their column's ``most``, then columns of the lowest
    rank left out until it fits (a last line names them)."""
    cells = [[_cut(str(c), col.most) for c, col in zip(r, cols)] for r in rows]
    keep = list(range(len(cols)))
    widths = [max([len(cols[i].name)] + [len(r[i]) for r in cells]) for i in keep]

    def total(ks: list[int]) -> int:
        return sum(widths[i] for i in ks) + 2 * (len(ks) - 1)
    dropped = []
    while total(keep) > room and len(keep) > 1:
        low = min(keep[1:], key=lambda i: (cols[i].rank, -i))
        keep.remove(low)
        dropped.append(cols[low].name)

    def line(vals: Sequence[str]) -> str:
        return "  ".join(vals[i].rjust(widths[i]) if cols[i].align == "r"
                         else vals[i].ljust(widths[i]) for i in keep).rstrip()
    out = [line([c.name for c in cols])] + [line(r) for r in cells]
    if dropped:
        out.append(f"(left out to fit {room} columns: {', '.join(dropped)}; --json has all)")
    return out


def _cut(s: str, most: int) -> str:
    return s if not most or len(s) <= most else s[:most - 1] + "…"


# -- showing values safely -------------------------------------------------------------
def show_value(b: bytes | None, limit: int) -> str:
    """A key or value on one line: JSON (an object or array) as compact JSON, other
    printable UTF-8 text quoted (escapes only for quotes and backslashes), anything
    else as ``hex:``; cut at ``limit`` bytes (whole characters) with the full length
    said."""
    v = _html.shown(b, limit, compact=True)
    if v.kind == "null":
        return "null"
    body = {"json": v.text, "hex": "hex:" + v.text}.get(v.kind) or json.dumps(
        v.text, ensure_ascii=False)
    return body + (f"...({v.length:,} bytes)" if v.cut else "")


def header_key(k: str) -> str:
    """A header key as is if it is one printable word, else quoted with escapes: a
    key holding a newline, a space or '=' must not pass for more of the line (or a
    line of its own)."""
    if k and k.isprintable() and not any(c.isspace() or c in '="' for c in k):
        return k
    return json.dumps(k)


def headers_text(headers: Sequence[tuple[str, bytes | None]], limit: int) -> str:
    return " ".join(f"{header_key(k)}={show_value(v, limit)}" for k, v in headers)


def json_value(b: bytes | None, limit: int) -> Any:
    """A key or value in JSON output: a string (UTF-8 text), ``{"hex": ...}``
    (other bytes) or null; cut at ``limit`` bytes, an object with the part kept
    (``text`` or ``hex``) and the full ``length``."""
    if b is None:
        return None
    part = bytes(b[:limit])
    cut = len(b) > limit
    s = _html.utf8(part, cut=cut)
    if not cut:
        return s if s is not None else {"hex": part.hex()}
    return ({"text": s} if s is not None else {"hex": part.hex()}) | {"length": len(b)}


def flags_text(attrs: int) -> str:
    names = [("keys", _format.F_KEYS), ("headers", _format.F_HEADERS),
             ("timestamps", _format.F_TIMESTAMPS), ("offset-deltas", _format.F_OFFSETS),
             ("tombstones", _format.F_NULL_VALUES), ("horizon", _format.F_HORIZON)]
    return ",".join(n for n, bit in names if attrs & bit) or "-"


def codec_name(attrs: int) -> str:
    return {_format.CODEC_NONE: "none", _format.CODEC_LZ4: "lz4"}.get(attrs & _format.CODEC_MASK,
                                                                  "unknown")


def problem_dicts(rep: repair.CheckReport | repair.RangeRead, deep: bool
                  ) -> list[dict[str, Any]]:
    """The report's problems as JSON; index problems only if ``deep`` (``dump`` shows
    them with --deep, ``verify`` always)."""
    return [{"file": p.path, "position": p.position, "offset": p.offset, "reason": p.reason,
             "message": p.message} for p in rep.problems if deep or p.reason != "index"]


def stake_dict(cut: repair.CutPlan | None) -> dict[str, Any] | None:
    """What lies from the damage on (a cut there loses it), as JSON."""
    if cut is None:
        return None
    return {"messages": cut.lost_messages, "batches_after": cut.valid_after,
            "damaged_batch_messages": cut.damaged_count if cut.damaged_unread else None,
            "last_offset": None if cut.lost_end_offset is None else cut.lost_end_offset - 1,
            "bytes": cut.lost_bytes, "segments": cut.lost_segments,
            "later_segments": cut.later_segments}


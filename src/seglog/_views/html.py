"""How seglog shows things to people, as pure text (no seglog imports): numbers,
sizes, times, offsets and values in one convention for the command line and the
notebooks, and small HTML tables for notebooks' ``_repr_html_``.

The convention: counts carry thousands separators (``30,021``); offsets do not
(they are identifiers, pasted into ``--from``); a range of offsets is first..last,
both included (``0..32849``); times are UTC ISO 8601 with a ``Z``; sizes are in
units (``203.7 KB``, powers of 1000). Values are shown safely: JSON as JSON, UTF-8
text as text, anything else as hex, cut short with their full length said.

HTML tables align numbers right and text left with inline styles, which
JupyterLab's stylesheet (every cell right-aligned, tables centred) does not
override.
"""

from __future__ import annotations

import codecs
import datetime as _dt
import json
from html import escape
from typing import Iterable, NamedTuple, Sequence

# cosmetics only: alignment is inline (see the module's docstring), colours are
# translucent so that dark themes keep their text colour
STYLE = (
    "<style>.seglog{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;"
    "font-size:13px;line-height:1.35;margin:2px 0 10px 0}"
    ".seglog table{border-collapse:collapse!important;margin:3px 0!important;"
    "table-layout:auto!important;width:auto!important}"
    ".seglog th,.seglog td{padding:2px 10px!important;border:none!important;"
    "border-bottom:1px solid rgba(127,127,127,.25)!important;vertical-align:top!important;"
    "font-variant-numeric:tabular-nums;white-space:nowrap}"
    ".seglog td.v{white-space:normal;max-width:46em;overflow-wrap:anywhere}"
    ".seglog th{font-weight:600;background:rgba(127,127,127,.10)}"
    ".seglog tr:nth-child(even){background:transparent!important}"
    ".seglog .t{font-weight:600;font-size:14px}"
    ".seglog .mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;"
    "font-size:12px}"
    ".seglog .pill{border-radius:9px;padding:1px 8px;margin-left:8px;font-size:12px;"
    "font-weight:600;white-space:nowrap}"
    ".seglog .ok{background:rgba(46,160,67,.18)}.seglog .warn{background:rgba(212,167,44,.25)}"
    ".seglog .bad{background:rgba(248,81,73,.22)}.seglog .dim{opacity:.7}"
    ".seglog .row{display:flex;flex-wrap:wrap;gap:6px 28px;align-items:flex-start}"
    ".seglog .gap td{text-align:center!important;font-style:italic;opacity:.75}"
    ".seglog .note{opacity:.8;margin:2px 0}</style>")
LEFT, RIGHT = "text-align:left", "text-align:right"


# -- numbers, sizes, times, offsets ----------------------------------------------
def num(n: int | None) -> str:
    """A count with thousands separators ("-" for none)."""
    return "-" if n is None else f"{n:,}"


def size(n: int | None) -> str:
    """Bytes in units of 1000: ``812 B``, ``203.7 KB``, ``2.7 GB``."""
    if n is None:
        return "-"
    x = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(x) < 1000 or unit == "TB":
            return f"{int(x):,} B" if unit == "B" else f"{x:,.1f} {unit}"
        x /= 1000
    return f"{n} B"


def when(ms: int | None) -> str:
    """A millisecond timestamp as UTC ISO 8601 ("-" for none)."""
    if ms is None or ms < 0:
        return "-"
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


def when_s(ms: int | None) -> str:
    """``when`` to the second (``2026-11-27T23:59:18Z``), for narrow columns."""
    return "-" if ms is None or ms < 0 else when(ms)[:19] + "Z"


def duration(ms: int | None) -> str:
    """A length of time in its two largest units: ``850 ms``, ``42 s``, ``3 min 5 s``,
    ``23 h 56 min``, ``2 d 4 h``."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{max(ms, 0)} ms"
    s = ms // 1000
    parts = [(s // 86400, "d"), (s // 3600 % 24, "h"), (s // 60 % 60, "min"), (s % 60, "s")]
    while parts[0][0] == 0:
        parts.pop(0)
    return " ".join(f"{v} {u}" for v, u in parts[:2] if v or u == parts[0][1])


def plural(n: int, word: str, words: str = "") -> str:
    """``1 message``, ``6,500 messages``, ``2 batches`` (``words``: the plural when
    it is not ``word`` + s)."""
    return f"{n:,} {word if n == 1 else words or word + 's'}"


def offsets(first: int | None, end: int | None) -> str:
    """The offsets ``first`` to ``end`` (one past the last) as first..last; ``empty
    (end offset N)`` without messages."""
    if first is None or end is None:
        return "no segments"
    if end <= first:
        return f"empty (end offset {end})"
    return f"{first}..{end - 1}"


# -- values ----------------------------------------------------------------------
def utf8(b: bytes, cut: bool = False) -> str | None:
    """``b`` decoded as UTF-8, else None. With ``cut`` (``b`` is the start of a
    longer value), a character the cut split at the end is left out: a UTF-8 value
    cut short is still text."""
    try:
        return codecs.getincrementaldecoder("utf-8")().decode(b) if cut else b.decode()
    except UnicodeDecodeError:
        return None


def text(b: bytes, cut: bool = False) -> str | None:
    """``b`` as text if it is UTF-8 that prints (tabs allowed), else None; ``cut``
    as in ``utf8``."""
    s = utf8(b, cut)
    if s is None:
        return None
    return s if all(c.isprintable() or c == "\t" for c in s) else None


class Shown(NamedTuple):
    """A key or value as shown: ``kind`` is ``"null"``, ``"json"`` (an object or an
    array, ``text`` its JSON on one line), ``"text"`` (printable UTF-8) or ``"hex"``;
    ``length`` the value's bytes; ``cut`` whether ``text`` is only its start."""

    kind: str
    text: str
    length: int
    cut: bool


def shown(b: bytes | None, limit: int, chars: bool = False, compact: bool = False) -> Shown:
    """How to show ``b`` cut at ``limit`` bytes (``chars``: characters) of its text
    or JSON, or bytes of its hex (two digits each). An object or array of JSON is
    shown on one line (``compact``: without spaces), parsed from the whole value."""
    if b is None:
        return Shown("null", "null", 0, False)
    raw = bytes(b)
    n = len(raw)
    if n <= 1 << 20 and raw.lstrip()[:1] in (b"{", b"["):
        try:
            one = json.dumps(json.loads(raw), ensure_ascii=False,
                             separators=(",", ":") if compact else None)
        except ValueError:
            pass
        else:
            if one.isprintable():
                t, cut = _cut(one, limit, chars)
                return Shown("json", t, n, cut)
    head = raw[:limit * 4 + 4] if chars else raw[:limit]
    s = text(head, cut=n > len(head))
    if s is not None:
        if chars:
            return Shown("text", s[:limit], n, len(s) > limit or n > len(head))
        return Shown("text", s, n, n > limit)
    return Shown("hex", raw[:limit].hex(), n, n > limit)


def _cut(s: str, limit: int, chars: bool) -> tuple[str, bool]:
    """``s`` cut at ``limit`` characters, or bytes of UTF-8 (whole characters)."""
    if chars:
        return s[:limit], len(s) > limit
    enc = s.encode()
    if len(enc) <= limit:
        return s, False
    return codecs.getincrementaldecoder("utf-8")().decode(enc[:limit]), True


def preview(b: bytes | None, limit: int = 60) -> str:
    """A short, printable rendering of a key or value (``None`` for a null)."""
    v = shown(b, limit, chars=True)
    if v.kind == "null":
        return "None"
    body = f"hex {v.text}" if v.kind == "hex" else v.text
    return body + (f"… ({v.length:,} bytes)" if v.cut else "")


def _value_cell(b: bytes | None, limit: int) -> str:
    v = shown(b, limit, chars=True)
    if v.kind == "null":
        return "<i class='dim'>null</i>"
    body = escape(v.text)
    if v.kind == "hex":
        body = f"<span class='dim'>hex</span> {body}"
    more = f" <span class='dim'>… {v.length:,} bytes</span>" if v.cut else ""
    return f"<span class='mono'>{body}</span>{more}"


def _headers_cell(headers: Sequence[tuple[str, bytes | None]], limit: int) -> str:
    if not headers:
        return ""
    return "<br>".join(f"<span class='mono'><b>{escape(k)}</b></span>: "
                       f"{_value_cell(v, limit)}" for k, v in headers)


# -- HTML ------------------------------------------------------------------------
# a message as the tables show it: (offset, timestamp, key, value, headers), the
# codec's ``MessageTuple`` (this module sits below the codec)
ShownMessage = tuple[int, int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]


class Raw(str):
    """HTML that a table puts in a cell as it is (built here, already escaped)."""


def pill(label: str, kind: str) -> Raw:
    """A coloured label: ``kind`` is ``"ok"``, ``"warn"`` or ``"bad"``."""
    return Raw(f"<span class='pill {kind}'>{escape(label)}</span>")


def _cell(v: object, align: str, wide: bool = False) -> str:
    body = v if isinstance(v, Raw) else escape(str(v))
    return f"<td{' class=v' if wide else ''} style='{align}'>{body}</td>"


def title(text_: str, badge: Raw | str = "") -> str:
    return f"<div class='t'>{escape(text_)}{badge}</div>"


def block(*parts: str) -> str:
    """Parts under one styled ``seglog`` block (the style sheet once per view)."""
    return f"{STYLE}<div class='seglog'>{''.join(parts)}</div>"


def side_by_side(*parts: str) -> str:
    return f"<div class='row'>{''.join(f'<div>{p}</div>' for p in parts if p)}</div>"


def note(text_: str | Raw) -> str:
    if not text_:
        return ""
    return f"<div class='note'>{text_ if isinstance(text_, Raw) else escape(text_)}</div>"


def fields_table(rows: Iterable[tuple[str, object]]) -> str:
    """A two-column table of names and values (values left-aligned)."""
    body = "".join(f"<tr><th style='{LEFT}'>{escape(k)}</th>{_cell(v, LEFT, True)}</tr>"
                   for k, v in rows)
    return f"<table>{body}</table>"


def fields(title_: str, rows: Iterable[tuple[str, object]], badge: Raw | str = "") -> str:
    """A titled two-column table of names and values."""
    return block(title(title_, badge), fields_table(rows))


def table(header: Sequence[str], rows: Iterable[Sequence[object] | "Gap"], align: str = "",
          wide: int = -1) -> str:
    """A table with a header row: ``align`` has one letter per column, ``r`` for
    numbers (right) and ``l`` for text (the default, also for ``Raw`` cells);
    column ``wide`` may wrap. A ``Gap`` row spans every column."""
    al = [RIGHT if i < len(align) and align[i] == "r" else LEFT for i in range(len(header))]
    head = "".join(f"<th style='{a}'>{escape(h)}</th>" for h, a in zip(header, al))
    body = []
    for r in rows:
        if isinstance(r, Gap):
            body.append(f"<tr class='gap'><td colspan={len(header)}>{escape(r.text)}</td></tr>")
        else:
            body.append("<tr>" + "".join(_cell(c, a, i == wide)
                                         for i, (c, a) in enumerate(zip(r, al))) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


class Gap(NamedTuple):
    """A row standing for rows left out (``table``)."""

    text: str


def grid(title_: str, header: Sequence[str], rows: Iterable[Sequence[object] | Gap],
         note_: str = "", align: str = "", badge: Raw | str = "") -> str:
    """A titled table with a header row, and a note below it (``table``)."""
    return block(title(title_, badge), table(header, rows, align), note(note_))


def messages_table(msgs: Iterable[ShownMessage], limit: int = 20, width: int = 120) -> str:
    """Up to ``limit`` messages (offset, time, key, value, headers) as a table, values
    shown as JSON, text or hex and cut at ``width`` characters; a note when more
    were left out."""
    rows: list[Sequence[object]] = []
    more = False
    for m in msgs:
        if len(rows) == limit:
            more = True
            break
        rows.append((m[0], when(m[1]), Raw(_value_cell(m[2], 40)),
                     Raw(_value_cell(m[3], width)), Raw(_headers_cell(m[4], 40))))
    if not rows:
        return note("no messages")
    return (table(("offset", "timestamp", "key", "value", "headers"), rows, "rl", wide=3)
            + note(f"the first {limit} messages shown" if more else ""))


def messages(title_: str, msgs: Iterable[ShownMessage], limit: int = 20) -> str:
    """A titled table of messages (``messages_table``)."""
    return block(title(title_), messages_table(msgs, limit))

"""Small HTML tables for notebooks' ``_repr_html_`` (no seglog imports: pure text).

Values are previewed safely: UTF-8 text when it decodes and prints, else escaped
bytes; everything is HTML-escaped and cut short.
"""

from __future__ import annotations

import codecs
import datetime as _dt
from html import escape
from typing import Any, Iterable, Sequence

_STYLE = ("<style>.seglog td,.seglog th{text-align:left;padding:1px 8px;"
          "font-family:monospace}</style>")


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


def preview(b: bytes | None, limit: int = 60) -> str:
    """A short, printable rendering of a key or value."""
    if b is None:
        return "None"
    part = bytes(b[:limit])
    s = text(part, cut=len(b) > limit)
    shown = s if s is not None else repr(part)
    return shown + (f"… ({len(b)} bytes)" if len(b) > limit else "")


def when(ms: int | None) -> str:
    """A millisecond timestamp as UTC ISO 8601 ("-" for none)."""
    if ms is None or ms < 0:
        return "-"
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


def size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000  # type: ignore[assignment]  # int to float on purpose: a shown size
    return str(n)


def fields(title: str, rows: Iterable[tuple[str, Any]]) -> str:
    """A two-column table of name and value under a title."""
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(str(v))}</td></tr>" for k, v in rows)
    return f"{_STYLE}<div class='seglog'><b>{escape(title)}</b><table>{body}</table></div>"


def grid(title: str, header: Sequence[str], rows: Iterable[Sequence[Any]],
         note: str = "") -> str:
    """A table with a header row under a title, and a note below it."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in r) + "</tr>"
                   for r in rows)
    foot = f"<div>{escape(note)}</div>" if note else ""
    return (f"{_STYLE}<div class='seglog'><b>{escape(title)}</b><table><tr>{head}</tr>"
            f"{body}</table>{foot}</div>")

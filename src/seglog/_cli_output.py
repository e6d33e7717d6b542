"""What the ``seglog`` command says: exit codes, offsets and bytes in one convention,
values shown safely as text or JSON, damage as JSON, and progress on a terminal."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from . import _html, codec, repair

EXIT_OK, EXIT_DAMAGE, EXIT_USAGE, EXIT_NOT_A_LOG, EXIT_LOCKED, EXIT_DECLINED = 0, 1, 2, 3, 4, 5


class Progress:
    """bytes done / total, rate and ETA on stderr, only when it is a terminal."""

    def __init__(self, label: str, total: int, stream: Any = None) -> None:
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
            eta = (self.total - self.done) / rate if rate else 0
            self.stream.write(f"\r{self.label}: {mb(self.done)} / {mb(self.total)} "
                              f"{rate / 1e6:7.1f} MB/s  ETA {eta:5.0f} s ")
            self.stream.flush()

    def close(self) -> None:
        if self.on:
            self.stream.write("\r" + " " * 70 + "\r")
            self.stream.flush()


def plural(count: int, noun: str) -> str:
    """``1 segment``, ``2 segments``, ``1 batch``, ``3 batches``."""
    if count == 1:
        return f"1 {noun}"
    return f"{count:} {noun}{'es' if noun.endswith(('s', 'sh', 'ch', 'x')) else 's'}"


def mb(n: int) -> str:
    """Bytes as megabytes, right-aligned for the progress line."""
    return f"{n / 1e6:8.1f} MB"


# -- offsets and bytes, one convention -------------------------------------------------
def span_text(start: int | None, end: int | None) -> str:
    """A log's offsets as Kafka prints them: first..last; without messages, its end."""
    if start is None or end is None:
        return "no segments"
    if end <= start:
        return f"no messages (end offset {end})"
    return f"offsets {start}..{end - 1}"


def offset_fields(start: int | None, end: int | None) -> dict[str, int | None]:
    return {"start_offset": start,
            "last_offset": end - 1 if start is not None and end is not None and end > start
            else None,
            "end_offset": end}


def bytes_text(stored: int, reserved: int) -> str:
    return f"{stored} bytes" + (f" (+{reserved} reserved)" if reserved else "")


# -- showing values safely -------------------------------------------------------------
def show_value(b: bytes | None, limit: int) -> str:
    """UTF-8 text if it is printable, else escaped bytes; cut at ``limit``."""
    if b is None:
        return "null"
    part = bytes(b[:limit])
    s = _html.text(part, cut=len(b) > limit)
    # printable text is shown as it is (quoted, escapes only for quotes and
    # backslashes), not as \u escapes
    shown = json.dumps(s, ensure_ascii=False) if s is not None else repr(part)
    return shown + (f"...({len(b)} bytes)" if len(b) > limit else "")


def header_key(k: str) -> str:
    """A header key as is if it is one printable word, else quoted with escapes: a
    key holding a newline, a space or '=' must not pass for more of the line (or a
    line of its own)."""
    if k and k.isprintable() and not any(c.isspace() or c in '="' for c in k):
        return k
    return json.dumps(k)


def json_value(b: bytes | None, limit: int) -> Any:
    if b is None:
        return None
    part = bytes(b[:limit])
    s = _html.utf8(part, cut=len(b) > limit)
    return s if s is not None else {"hex": part.hex()}


def flags_text(attrs: int) -> str:
    names = [("keys", codec.F_KEYS), ("headers", codec.F_HEADERS),
             ("timestamps", codec.F_TIMESTAMPS), ("offset-deltas", codec.F_OFFSETS),
             ("tombstones", codec.F_NULL_VALUES), ("horizon", codec.F_HORIZON)]
    return ",".join(n for n, bit in names if attrs & bit) or "-"


def codec_name(attrs: int) -> str:
    return {codec.CODEC_NONE: "none", codec.CODEC_LZ4: "lz4"}.get(attrs & codec.CODEC_MASK,
                                                                  "unknown")


def problem_dicts(rep: repair.CheckReport, deep: bool) -> list[dict[str, Any]]:
    """The report's problems as JSON; index problems only if ``deep`` (``dump`` shows
    them with --deep, ``verify`` always)."""
    return [{"file": p.path, "position": p.position, "offset": p.offset, "reason": p.reason,
             "message": p.message} for p in rep.problems if deep or p.reason != "index"]

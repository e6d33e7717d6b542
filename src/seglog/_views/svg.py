"""Small charts as inline SVG for the notebook views (pure text, no seglog imports,
no plotting library): counts over time in buckets that fit, a column per segment,
and horizontal bars per partition. Text takes the page's colour (``currentColor``),
so light and dark themes both read it."""

from __future__ import annotations

import datetime as _dt
from html import escape
from typing import Callable, Sequence

BAR = "#4c78a8"
LIGHT = "#9ecae9"         # a segment still written to
WARN = "#e45756"
_FONT = "font-family='system-ui,sans-serif' font-size='11' fill='currentColor'"
# bucket lengths a person counts in (ms), smallest first
_STEPS = [1_000, 5_000, 10_000, 15_000, 30_000, 60_000, 300_000, 600_000, 900_000,
          1_800_000, 3_600_000, 3 * 3_600_000, 6 * 3_600_000, 12 * 3_600_000, 86_400_000,
          7 * 86_400_000, 30 * 86_400_000, 365 * 86_400_000]
_STEP_NAMES = {1_000: "second", 60_000: "minute", 3_600_000: "hour", 86_400_000: "day",
               7 * 86_400_000: "week", 30 * 86_400_000: "30 days",
               365 * 86_400_000: "365 days"}


def step_for(span_ms: int, most: int = 48) -> int:
    """The smallest bucket length of ``_STEPS`` that covers ``span_ms`` in at most
    ``most`` buckets."""
    for s in _STEPS:
        if span_ms < s * most:
            return s
    return _STEPS[-1]


def step_name(step: int) -> str:
    """``hour``, ``5 minutes``, ``15 seconds``: the bucket as words."""
    if step in _STEP_NAMES:
        return _STEP_NAMES[step]
    for unit, name in ((86_400_000, "days"), (3_600_000, "hours"), (60_000, "minutes"),
                       (1_000, "seconds")):
        if step % unit == 0:
            return f"{step // unit} {name}"
    return f"{step} ms"


def _nice(top: float) -> float:
    """A round number at or above ``top`` (1, 2, 2.5 or 5 times a power of ten)."""
    if top <= 0:
        return 1
    p = 1.0
    while p * 10 <= top:
        p *= 10
    while p > top:
        p /= 10
    for m in (1, 2, 2.5, 5, 10):
        if p * m >= top:
            return p * m
    return p * 10


def _short(v: float) -> str:
    """A tick label: ``0``, ``750``, ``2.5k``, ``30k``, ``1.2M``."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            x = v / div
            return f"{x:.1f}".rstrip("0").rstrip(".") + suffix
    return f"{v:.0f}" if float(v).is_integer() else f"{v:.1f}"


def _tick_label(ms: int, step: int) -> str:
    """A time tick: the day at midnight (``11-28``), else the time of day."""
    t = _dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc)
    if step >= 86_400_000 or (t.hour, t.minute, t.second) == (0, 0, 0):
        return t.strftime("%m-%d")
    return t.strftime("%H:%M" if step >= 60_000 else "%H:%M:%S")


def _stamp(ms: int) -> str:
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def _svg(width: int, height: int, body: str, label: str) -> str:
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
            f"viewBox='0 0 {width} {height}' role='img' aria-label='{escape(label)}'>"
            f"<title>{escape(label)}</title>{body}</svg>")


def _y_axis(left: int, top: int, plot_h: int, right: int, ymax: float,
            fmt: Callable[[float], str] = _short) -> str:
    """The y axis: lines at 0, half and the top, labelled with ``fmt``."""
    out = []
    for frac in (0, 0.5, 1):
        y = top + plot_h - frac * plot_h
        out.append(f"<line x1='{left}' x2='{right}' y1='{y:.1f}' y2='{y:.1f}' "
                   f"stroke='currentColor' stroke-opacity='{0.5 if frac == 0 else 0.15}'/>")
        out.append(f"<text x='{left - 5}' y='{y + 4:.1f}' text-anchor='end' {_FONT}>"
                   f"{escape(fmt(ymax * frac))}</text>")
    return "".join(out)


def _bars(values: Sequence[int], label: str, width: int, height: int, left: int,
          right: int, bottom: int, fmt: Callable[[float], str],
          color_of: Callable[[int], str], tip_of: Callable[[int, int], str]
          ) -> tuple[list[str], float, int]:
    """A column per value under a title, with a y axis: (the SVG parts, a column's
    width, the baseline's y) for the caller's x axis."""
    top = 22
    plot_w, plot_h = width - left - right, height - top - bottom
    ymax = _nice(max(values, default=0))
    bw = plot_w / max(len(values), 1)
    out = [f"<text x='{left}' y='13' {_FONT} font-weight='600'>{escape(label)}</text>",
           _y_axis(left, top, plot_h, width - right, ymax, fmt)]
    for i, v in enumerate(values):
        if v <= 0:
            continue
        h = max(1.0, v / ymax * plot_h)
        out.append(f"<rect x='{left + i * bw + 0.5:.1f}' y='{top + plot_h - h:.1f}' "
                   f"width='{max(bw - 1, 1):.1f}' height='{h:.1f}' fill='{color_of(i)}'>"
                   f"<title>{escape(tip_of(i, v))}</title></rect>")
    return out, bw, top + plot_h


def time_bars(counts: Sequence[int], t0: int, step: int, label: str,
              width: int = 620, height: int = 170) -> str:
    """A column chart of ``counts[i]`` messages in ``[t0 + i*step, t0 + (i+1)*step)``
    with a y axis of counts and x ticks in UTC."""
    left, right = 46, 22
    out, bw, base = _bars(counts, label, width, height, left, right, 34, _short,
                          lambda i: BAR, lambda i, c: f"{_stamp(t0 + i * step)}: {c:,}")
    n = max(len(counts), 1)
    every = 1
    while n / every > 8:
        every = next(k for k in (2, 3, 4, 6, 8, 12, 24, 48, 96, 10**9) if k > every)
    for i in range(0, n + 1, every):
        x = left + i * bw
        out.append(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{base}' y2='{base + 4}' "
                   f"stroke='currentColor' stroke-opacity='.5'/>")
        out.append(f"<text x='{x:.1f}' y='{base + 16}' text-anchor='middle' "
                   f"{_FONT}>{_tick_label(t0 + i * step, step)}</text>")
    out.append(f"<text x='{width - right}' y='{height - 3}' text-anchor='end' {_FONT} "
               f"fill-opacity='.7'>UTC from {_stamp(t0)}, one bar per {step_name(step)}"
               f"</text>")
    return _svg(width, height, "".join(out), label)


def columns(values: Sequence[int], label: str, x_labels: Sequence[str],
            fmt: Callable[[float], str] = _short, colors: dict[int, str] | None = None,
            width: int = 620, height: int = 150) -> str:
    """A column per value (a segment's size, in order), ``x_labels`` under the first,
    middle and last; ``colors`` gives some columns another colour (the active
    segment ``LIGHT``, a damaged one ``WARN``)."""
    left = 56
    out, bw, base = _bars(values, label, width, height, left, 10, 30, fmt,
                          lambda i: (colors or {}).get(i, BAR),
                          lambda i, v: f"{x_labels[i] if i < len(x_labels) else i}: {fmt(v)}")
    n = max(len(values), 1)
    picks = sorted({0, n // 2, n - 1}) if n > 2 else list(range(n))
    for i in picks:
        if i < len(x_labels):
            x = left + (i + 0.5) * bw
            anchor = "start" if i == 0 and n > 2 else ("end" if i == n - 1 and n > 2
                                                       else "middle")
            out.append(f"<text x='{x:.1f}' y='{base + 15}' text-anchor='{anchor}' "
                       f"{_FONT}>{escape(x_labels[i])}</text>")
    return _svg(width, height, "".join(out), label)


def hbars(rows: Sequence[tuple[str, int, str]], label: str, width: int = 620,
          warn: Sequence[bool] = ()) -> str:
    """A horizontal bar per row (label, value, the value as shown), longest = widest;
    rows flagged in ``warn`` in the warning colour."""
    row_h, top, left, right = 18, 22, 110, 150
    height = top + row_h * max(len(rows), 1) + 6
    top_v = max((v for _, v, _ in rows), default=0) or 1
    plot_w = width - left - right
    out = [f"<text x='4' y='13' {_FONT} font-weight='600'>{escape(label)}</text>"]
    for i, (name, v, shown) in enumerate(rows):
        y = top + i * row_h
        w = max(v, 0) / top_v * plot_w
        color = WARN if i < len(warn) and warn[i] else BAR
        out.append(f"<text x='{left - 6}' y='{y + 12}' text-anchor='end' {_FONT}>"
                   f"{escape(name)}</text>")
        if v > 0:
            out.append(f"<rect x='{left}' y='{y + 2}' width='{max(w, 1):.1f}' "
                       f"height='{row_h - 5}' fill='{color}'/>")
        out.append(f"<text x='{left + w + 6:.1f}' y='{y + 12}' {_FONT}>{escape(shown)}</text>")
    return _svg(width, height, "".join(out), label)


def bucket(samples: Sequence[tuple[int, int]], t0: int, step: int, n: int) -> list[int]:
    """``(timestamp, count)`` samples summed into ``n`` buckets of ``step`` ms from
    ``t0`` (samples outside them go to the first or last)."""
    out = [0] * n
    for ts, c in samples:
        i = (ts - t0) // step
        out[0 if i < 0 else n - 1 if i >= n else i] += c
    return out

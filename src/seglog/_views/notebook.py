"""Notebook views of segments, logs and topics: ``stats``, ``to_pandas`` and the
``_repr_html_`` tables and charts, as functions of the narrow things they show
(the storage classes delegate to them; pandas and pyarrow are imported only when
used). Every view says what it checked: a log's batches are all read only by
``verify()``, and a view shows that check's result and time, or that there was
none."""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from html import escape
# Any: pyarrow tables and pandas frames (no type information), IPython's printer, stats and
# metrics dicts (JSON-shaped)
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

from . import html as _html, svg as _svg, verdict as _verdict
from .html import Gap, Raw, num, offsets, plural, size, when
from ..config import LogConfig
from ..errors import CorruptRecordError, OffsetOutOfRangeError, SeglogError

# the read path's in-flight count (a context manager; what it yields is not used)
Reading = Callable[[], AbstractContextManager[object]]
# the chart counts every batch of a log up to this many bytes (reading them is
# quick); above, it estimates from the time index (a few entries per segment)
EXACT_CHART_BYTES = 64 << 20
_SHOWN_SEGMENTS = (3, 5)          # the first and last rows of a long segment table
_COLUMN_BARS = 240                # at most this many columns in the segment sizes chart


# -- what the views read: this module sits below the segment and the log, which have these
class ShownHeader(Protocol):
    """A batch's header as a view reads it (``_codec.format.BatchHeader``)."""

    @property
    def base_offset(self) -> int: ...
    @property
    def base_timestamp(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def record_count(self) -> int: ...
    @property
    def size(self) -> int: ...


class ShownTimeIndex(Protocol):
    """A segment's time index as a chart samples it (``index.TimeIndex``)."""

    def entries(self) -> list[tuple[int, int]]: ...


class ShownSegment(Protocol):
    """A segment as its table, the log's table and the charts read it (``Segment``)."""

    @property
    def base_offset(self) -> int: ...
    @property
    def path(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def is_active(self) -> bool: ...
    @property
    def live(self) -> bool: ...
    @property
    def time_index(self) -> ShownTimeIndex: ...

    def first_header(self) -> ShownHeader | None: ...

    def batches(self, start: int = 0, end: int | None = None, expect: int | None = None
                ) -> Iterator[tuple[int, ShownHeader]]: ...

    def read_at(self, start: int, min_offset: int, max_bytes: int, end: int,
                max_offset: int | None = None, expect: int | None = None
                ) -> Iterable[tuple[int, int, object, object, object]]: ...


class ShownLog(Protocol):
    """A topic's partition as the topic's table reads it (``Log``)."""

    @property
    def path(self) -> str: ...

    def stats(self) -> dict[str, Any]: ...


# -- dicts that show themselves -----------------------------------------------------
class Stats(dict[str, Any]):
    """``stats()``'s plain dict (JSON-ready, compared as a dict) that a notebook shows
    as a table: sizes in units, counts with separators, times in ISO. A log's
    also keeps what the topic view's chart reads (its segments and the read path's
    ``reading``), outside the dict."""

    _part: tuple[Sequence[ShownSegment], int, Reading] | None = None

    def _repr_html_(self) -> str:
        return _html.block(_html.title(f"stats of {self.get('path') or self.get('topic')}"),
                           _html.fields_table(_readable(self)))


class Metrics(dict[str, Any]):
    """``metrics()``'s plain dict that a notebook shows with the counters that moved
    (the zeros named in one line), per partition for a topic."""

    def _repr_html_(self) -> str:
        return metrics_html(self)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(metrics_text(self))


def _readable(d: dict[str, Any]) -> list[tuple[str, Any]]:
    rows = []
    for k, v in d.items():
        if isinstance(v, (list, dict)):
            continue
        if isinstance(v, bool) or v is None:
            shown: Any = "-" if v is None else v
        elif isinstance(v, int) and "timestamp" in k:
            shown = when(v)
        elif isinstance(v, int) and "bytes" in k:
            shown = size(v)
        elif isinstance(v, int) and "offset" in k:
            shown = v
        elif isinstance(v, int):
            shown = num(v)
        else:
            shown = v
        rows.append((k.replace("_", " "), shown))
    return rows


def _moved(d: dict[str, Any], prefix: str = "") -> tuple[list[tuple[str, Any]], list[str]]:
    """(counters that are not zero, names of those that are) of a metrics dict."""
    on: list[tuple[str, Any]] = []
    off: list[str] = []
    for k, v in d.items():
        if k == "partitions":
            continue
        name = prefix + k
        if isinstance(v, dict):
            a, b = _moved(v, name + ".")
            on += a
            off += b
        elif isinstance(v, list):
            if any(v):
                on.append((name, ", ".join(map(str, v))))
            else:
                off.append(name)
        elif v in (0, None, 0.0):
            off.append(name)
        else:
            on.append((name, size(v) if "bytes" in k and isinstance(v, int) else
                       num(v) if isinstance(v, int) and not isinstance(v, bool) else v))
    return on, off


def metrics_text(m: dict[str, Any]) -> str:
    """Metrics as lines: the counters that moved, the zeros in one line."""
    on, off = _moved(m)
    lines = [f"{k}: {v}" for k, v in on] or ["no counter moved"]
    if off:
        lines.append(f"({len(off)} counters at 0: {', '.join(off[:8])}"
                     f"{', ...' if len(off) > 8 else ''})")
    parts = m.get("partitions")
    if parts:
        idle = [p for p, pm in enumerate(parts) if not _moved(pm)[0]]
        lines.append(f"{len(parts)} partitions: per partition in ['partitions']"
                     + (f"; {len(idle)} idle (every counter 0)" if idle else ""))
    return "\n".join(lines)


def metrics_html(m: dict[str, Any]) -> str:
    on, off = _moved(m)
    parts = m.get("partitions")
    rows = on or [("counters", "none moved since the log was opened")]
    body = [_html.title("metrics (since opened)"), _html.fields_table(rows)]
    if off:
        body.append(_html.note(f"{len(off)} counters at 0: {', '.join(off)}"))
    if parts:
        moving = [(p, _moved(pm)[0]) for p, pm in enumerate(parts)]
        busy = [(p, on_) for p, on_ in moving if on_]
        if busy:
            keys = sorted({k for _, on_ in busy for k, _ in on_})[:8]
            body.append(_html.table(["partition"] + keys, [
                [p] + [dict(on_).get(k, "0") for k in keys] for p, on_ in busy],
                "r" * (len(keys) + 1)))
        body.append(_html.note(f"{len(parts)} partitions, {len(parts) - len(busy)} idle "
                               f"(every counter 0); per partition in ['partitions']"))
    return _html.block(*body)


# -- segments ------------------------------------------------------------------------
def segment_state(seg: ShownSegment) -> str:
    """One word for a segment, the same in every table: ``active`` (this process
    appends to it), ``live`` (a reader's last segment, which another process may
    still append to) or ``sealed``."""
    if seg.is_active:
        return "active"
    return "live" if seg.live else "sealed"


def _first_ts(seg: ShownSegment) -> int | None:
    hdr = seg.first_header()
    return None if hdr is None else int(hdr.base_timestamp)


def segment_html(seg: ShownSegment) -> str:
    """A segment's table (``Segment._repr_html_``)."""
    try:
        first = _first_ts(seg)
        rows: list[tuple[str, object]] = [
            ("base offset", seg.base_offset), ("size", size(seg.size)),
            ("oldest record", when(first)), ("newest record", when(seg.max_timestamp)),
            ("state", segment_state(seg))]
    except (OSError, SeglogError, ValueError) as e:
        rows = [("base offset", seg.base_offset), ("unreadable", str(e))]
    return _html.fields(f"seglog.Segment {seg.path}", rows)


def segment_repr(seg: ShownSegment) -> str:
    """A segment's repr (``Segment.__repr__``); never raises, for a closed or deleted one."""
    try:
        size_: int | str = seg.size
    except (OSError, ValueError):
        size_ = "?"
    return f"<Segment base={seg.base_offset} size={size_} {segment_state(seg)}>"


# -- a log's numbers -----------------------------------------------------------------
def log_stats(path: str, start: int, end: int, messages: int | None, segs: Sequence[ShownSegment],
              readonly: bool, reading: Reading | None = None) -> Stats:
    """``Log.stats()``'s dict from the segments (batch headers only); ``messages``
    None: not counted (a view that does not show it). ``reading``: the read path's
    in-flight count, kept for the topic view's chart."""
    first_ts = None
    for seg in segs:
        hdr = seg.first_header()
        if hdr is not None:
            first_ts = hdr.base_timestamp
            break
    newest = max((s.max_timestamp for s in segs if s.size), default=-1)
    st = Stats({"path": path, "start_offset": start, "end_offset": end,
                "messages": messages, "segments": len(segs),
                "bytes": sum(s.size for s in segs), "oldest_timestamp": first_ts,
                "newest_timestamp": newest if newest >= 0 else None,
                "readonly": readonly})
    if reading is not None:
        st._part = (segs, end, reading)
    return st


@dataclass
class Timeline:
    """Messages over time, counted into ``counts`` buckets of ``step`` ms from
    ``t0``; ``exact`` when every batch was read (else estimated from the time
    index); ``damage`` when reading stopped at one."""

    t0: int
    step: int
    counts: list[int]
    exact: bool
    damage: str | None = None


def _grid(oldest: int | None, newest: int | None) -> tuple[int, int, int] | None:
    """(t0, step, buckets) covering ``oldest`` to ``newest`` in at most 48 buckets."""
    if oldest is None or newest is None or newest < oldest:
        return None
    step = _svg.step_for(newest - oldest + 1)
    t0 = oldest - oldest % step
    return t0, step, (newest - t0) // step + 1


def samples(segs: Sequence[ShownSegment], end: int, reading: Reading, step: int, exact: bool
            ) -> tuple[list[tuple[int, int]], str | None]:
    """``(timestamp, messages)`` samples of the segments (the last one ending at
    offset ``end``), and the damage that stopped the reading (None). ``exact``:
    from every batch header, and from the records of a batch whose times fall in
    two buckets; else from each segment's time index (its entries' offsets)."""
    out: list[tuple[int, int]] = []
    for i, seg in enumerate(segs):
        seg_end = segs[i + 1].base_offset if i + 1 < len(segs) else end
        try:
            with reading():
                if exact:
                    _batch_samples(seg, step, out)
                else:
                    _index_samples(seg, seg_end, out)
        except CorruptRecordError as e:
            return out, str(e)
        except (OffsetOutOfRangeError, FileNotFoundError):
            continue        # retention or compaction took it meanwhile: not counted
    return out, None


def _batch_samples(seg: ShownSegment, step: int, out: list[tuple[int, int]]) -> None:
    for p, hdr in seg.batches(0, seg.size):
        lo, hi, n = hdr.base_timestamp, hdr.max_timestamp, hdr.record_count
        if lo // step == hi // step:
            out.append((lo, n))
        else:
            size_ = hdr.size
            out += ((m[1], 1) for m in seg.read_at(p, hdr.base_offset, size_, p + size_))


def _index_samples(seg: ShownSegment, end: int, out: list[tuple[int, int]]) -> None:
    first = _first_ts(seg)
    if first is None:
        return
    pts = [(first, seg.base_offset)] + [(ts, seg.base_offset + rel)
                                        for ts, rel in seg.time_index.entries()]
    pts.append((max(seg.max_timestamp, pts[-1][0]), end))
    out += ((t_b, o_b - o_a) for (_, o_a), (t_b, o_b) in zip(pts, pts[1:]) if o_b > o_a)


def timeline(parts: Sequence[tuple[Sequence[ShownSegment], int, Reading]], oldest: int | None,
             newest: int | None) -> Timeline | None:
    """Messages over time of one log or of a topic's partitions (each ``(segments,
    end offset, reading)``), in buckets that fit (``_views.svg.step_for``)."""
    g = _grid(oldest, newest)
    if g is None:
        return None
    t0, step, n = g
    exact = sum(s.size for segs, _, _ in parts for s in segs) <= EXACT_CHART_BYTES
    got: list[tuple[int, int]] = []
    damage = None
    for segs, end, reading in parts:
        s, d = samples(segs, end, reading, step, exact)
        got += s
        damage = damage or d
    return Timeline(t0, step, _svg.bucket(got, t0, step, n), exact, damage)


def timeline_svg(tl: Timeline | None) -> str:
    if tl is None or not any(tl.counts):
        return ""
    how = "" if tl.exact else " (estimated from the time index)"
    return _svg.time_bars(tl.counts, tl.t0, tl.step,
                          f"messages per {_svg.step_name(tl.step)}{how}")


# -- a log -------------------------------------------------------------------------
@dataclass
class LogView:
    """What ``Log._repr_html_`` shows, gathered by the read path (``_log.reads``)."""

    stats: dict[str, Any]
    segs: Sequence[ShownSegment]
    config: LogConfig
    reading: Reading
    last: Sequence[_html.ShownMessage] = field(default_factory=list)
    last_error: str | None = None
    verified: _verdict.Report | None = None   # repair.latest(path): a CheckReport, or None


def _damaged_segment(rep: _verdict.Report | None) -> int | None:
    """The base offset of the segment a check found damaged (its file name)."""
    if rep is None or rep.ok:
        return None
    name = os.path.basename(_verdict.damage_of(rep).path)
    return int(name[:-4]) if name.endswith(".log") and name[:-4].isdigit() else None


def _segment_rows(segs: Sequence[ShownSegment], end: int, reading: Reading, compacted: bool,
                  damaged: int | None) -> list[Sequence[object] | Gap]:
    n = len(segs)
    head, tail = _SHOWN_SEGMENTS
    shown = list(range(n)) if n <= head + tail + 2 else list(range(head)) + [-1] + list(
        range(n - tail, n))
    rows: list[Sequence[object] | Gap] = []
    for i in shown:
        if i < 0:
            lo, hi = segs[head].base_offset, segs[n - tail].base_offset
            rows.append(Gap(f"… {n - head - tail} segments not shown: offsets "
                            f"{offsets(lo, hi)}, {size(sum(s.size for s in segs[head:n - tail]))}"
                            f" …"))
            continue
        s = segs[i]
        seg_end = segs[i + 1].base_offset if i + 1 < n else end
        try:
            with reading():
                first = _first_ts(s)
                newest = s.max_timestamp
        except (OSError, SeglogError):
            first = newest = None
        count = max(seg_end - s.base_offset, 0)
        state: Any = segment_state(s)
        if s.base_offset == damaged:
            state = Raw(escape(state) + str(_html.pill("DAMAGE", "bad")))
        rows.append((offsets(s.base_offset, seg_end),
                     ("≤ " if compacted and count else "") + num(count), size(s.size),
                     when(first), when(newest), state))
    return rows


def _sizes_svg(segs: Sequence[ShownSegment], damaged: int | None) -> str:
    if len(segs) < 2:
        return ""
    k = -(-len(segs) // _COLUMN_BARS)
    vals: list[int] = []
    labels: list[str] = []
    colors: dict[int, str] = {}
    for i in range(0, len(segs), k):
        group = segs[i:i + k]
        if any(s.base_offset == damaged for s in group):
            colors[len(vals)] = _svg.WARN
        vals.append(max(s.size for s in group))
        labels.append(f"offset {group[0].base_offset}" + (f" (+{len(group) - 1} segments)"
                                                          if len(group) > 1 else ""))
    if segs[-1].is_active or segs[-1].live:
        colors.setdefault(len(vals) - 1, _svg.LIGHT)
    what = "segment sizes" + (f" (the largest of each {k})" if k > 1 else "")
    legend = ("; light: still written" if segs[-1].is_active or segs[-1].live else "") + (
        "; red: damaged" if damaged is not None else "")
    return _svg.columns(vals, what + ", oldest to newest" + legend, labels,
                        lambda v: size(int(v)), colors)


def log_html(v: LogView) -> str:
    """A log's view (``Log._repr_html_``): its numbers and what was checked, messages
    over time, its segments, and the last messages."""
    st, segs, cfg = v.stats, v.segs, v.config
    compacted = "compact" in cfg.cleanup_policy
    start, end = st["start_offset"], st["end_offset"]
    oldest, newest = st["oldest_timestamp"], st["newest_timestamp"]
    count = (f"{num(st['messages'])}" if st.get("messages") is not None else
             f"≤ {num(end - start)} (compacted: len() counts them)" if compacted
             else num(end - start))
    span = "-" if oldest is None else (
        f"{when(oldest)} .. {when(newest)} ({_html.duration((newest or oldest) - oldest)})")
    label, kind = _verdict.status(v.verified, start)
    short, _ = _verdict.status(v.verified, start, short=True)
    damaged = _damaged_segment(v.verified)
    facts = _html.fields_table([
        ("offsets", offsets(start, end)), ("messages", count),
        ("segments", num(st["segments"])), ("size", size(st["bytes"])),
        ("time span", span),
        ("cleanup policy", cfg.cleanup_policy), ("compression", cfg.compression or "none"),
        ("checked", _html.pill(label, kind))])
    tl = timeline([(segs, end, v.reading)], oldest, newest)
    parts = [_html.title(f"seglog.Log {st['path']}" + (" (readonly)" if st["readonly"] else
                                                         ""), _html.pill(short, kind)),
             _html.side_by_side(facts, timeline_svg(tl))]
    if tl is not None and tl.damage:
        parts.append(_html.note(Raw(str(_html.pill("damage", "bad")) + " the chart stops at "
                                    "damage: " + escape(tl.damage))))
    if not segs:
        parts.append(_html.note("no segments"))
    else:
        parts += [_html.title(f"segments ({num(len(segs))})"), _html.side_by_side(
            _html.table(("offsets", "messages", "size", "oldest record", "newest record",
                         "state"), _segment_rows(segs, end, v.reading, compacted, damaged),
                        "rrrlll"),
            _sizes_svg(segs, damaged))]
    if v.last_error is not None:
        parts.append(_html.title("the last messages", _html.pill("damage", "bad")))
        parts.append(_html.note(f"reading them failed: {v.last_error}; .verify() says "
                                f"where the damage is, what is at stake and what to do"))
    elif end <= start:
        parts.append(_html.note(f"empty: no messages (end offset {end})"))
    else:
        parts.append(_html.title("the last messages"))
        parts.append(_html.messages_table(iter(v.last)))
    return _html.block(*parts)


def closed_html(what: str, rows: Sequence[tuple[str, object]]) -> str:
    return _html.fields(f"{what} (closed)", rows)


# -- a topic -----------------------------------------------------------------------
def topic_html(name: str, root: str, readonly: bool, logs: Sequence[ShownLog]) -> str:
    """A topic's view (``Topic._repr_html_``): a row per partition (its numbers, and
    what its latest verification found or that there was none), totals, and
    messages over time. A partition whose stats cannot be read (damage met
    counting a compacted log) says why in its row."""
    stats: list[dict[str, Any] | str] = []
    for log in logs:
        try:
            stats.append(log.stats())
        except SeglogError as e:
            stats.append(f"unreadable: {e}")
    rows: list[Sequence[object]] = []
    good = [st for st in stats if isinstance(st, Stats)]
    verified = [_verdict.latest(log.path) for log in logs]
    for p, st in enumerate(stats):
        if isinstance(st, str):
            rows.append((p, "-", "-", "-", "-", "-", _html.pill(st, "bad")))
            continue
        label, kind = _verdict.status(verified[p], st["start_offset"], short=True)
        rows.append((p, offsets(st["start_offset"], st["end_offset"]), num(st["messages"]),
                     num(st["segments"]), size(st["bytes"]), when(st["newest_timestamp"]),
                     _html.pill(label, kind)))
    rows.append((Raw("<b>all</b>"), "", Raw(f"<b>{num(sum(st['messages'] for st in good))}</b>"),
                 num(sum(st["segments"] for st in good)),
                 Raw(f"<b>{size(sum(st['bytes'] for st in good))}</b>"),
                 when(max((st["newest_timestamp"] or -1 for st in good), default=-1)), ""))
    oldest = min((st["oldest_timestamp"] for st in good if st["oldest_timestamp"] is not None),
                 default=None)
    newest = max((st["newest_timestamp"] for st in good if st["newest_timestamp"] is not None),
                 default=None)
    tl = timeline([st._part for st in good if st._part is not None], oldest, newest)
    bad = sum(1 for r in verified if r is not None and not r.ok) + len(stats) - len(good)
    unchecked = sum(1 for r in verified if r is None)
    badge = (_html.pill(f"{plural(bad, 'partition')} damaged", "bad") if bad else
             _html.pill(f"{unchecked} of {plural(len(logs), 'partition')} not verified",
                        "warn")
             if unchecked else _html.pill("verified: no damage", "ok"))
    table = _html.table(("partition", "offsets", "messages", "segments", "size",
                         "newest record", "checked"), rows, "rrrrrl")
    return _html.block(
        _html.title(f"seglog.Topic {name!r} at {root}" + (" (readonly)" if readonly else ""),
                    badge),
        table, timeline_svg(tl),
        _html.note("verify: topic.verify() reads every batch of every partition"
                   if unchecked else ""))


# -- pandas --------------------------------------------------------------------------
def frame(table: Any, t0: int | None, t1: int | None, decode: str | None = None) -> Any:
    """A pandas DataFrame from ``read_arrow``'s table, rows outside ``[t0, t1)``
    dropped (timestamps need not ascend, so the offset window is not enough);
    ``decode="utf-8"``: keys and values as ``str`` (Arrow's cast, checked:
    ``UnicodeDecodeError`` naming the first offset that does not decode)."""
    try:
        import pandas  # noqa: F401  (to_pandas below needs it; say so plainly)
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError as e:
        raise ImportError(f"to_pandas needs pandas and pyarrow: pip install 'seglog[spark]' "
                          f"({e})") from e
    if t0 is not None or t1 is not None:
        ms = table.column("timestamp").cast(pa.int64())
        keep = pc.greater_equal(ms, t0 if t0 is not None else 0)
        if t1 is not None:
            keep = pc.and_(keep, pc.less(ms, t1))
        table = table.filter(keep)
    if decode is not None:
        table = _decoded(table, decode)
    return table.to_pandas()


def _decoded(table: Any, encoding: str) -> Any:
    import pyarrow as pa
    if encoding.lower().replace("_", "-") not in ("utf-8", "utf8"):
        raise ValueError(f"decode={encoding!r}: keys and values decode as 'utf-8' (Arrow's "
                         f"cast, in C); decode other encodings from the bytes")
    for col in ("key", "value"):
        i = table.schema.get_field_index(col)
        try:
            as_str = table.column(i).cast(pa.large_string())
        except pa.ArrowInvalid:
            bad = _first_bad(table, col)
            raise UnicodeDecodeError("utf-8", b"", 0, 1, f"the {col} at offset {bad} is "
                                     f"not UTF-8 (decode=None keeps bytes)") from None
        table = table.set_column(i, col, as_str)
    return table


def _first_bad(table: Any, col: str) -> int | None:
    """The offset of the first row whose ``col`` is not UTF-8 (an error's message)."""
    for off, b in zip(table.column("offset").to_pylist(), table.column(col).to_pylist()):
        if b is not None:
            try:
                b.decode()
            except UnicodeDecodeError:
                return int(off)
    return None


def concat_partitions(frames: list[Any]) -> Any:
    """Partitions' frames as one, with a ``partition`` column first (``Topic.to_pandas``)."""
    for p, df in enumerate(frames):
        df.insert(0, "partition", p)
    import pandas as pd
    return pd.concat(frames, ignore_index=True)



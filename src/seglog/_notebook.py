"""Notebook views of segments, logs and topics: ``stats``, ``to_pandas`` and the
``_repr_html_`` tables, as functions of the narrow things they show (the storage
classes delegate to them; pandas and pyarrow are imported only when used)."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from . import _html, codec
from .message import messages_html


def segment_html(seg: Any) -> str:
    """A segment's table (``Segment._repr_html_``)."""
    return _html.fields(f"seglog.Segment {seg.path}", [
        ("base offset", seg.base_offset), ("bytes", _html.size(seg.size)),
        ("newest record", _html.when(seg.max_timestamp)),
        ("state", "active" if seg.is_active else "sealed")])


def segment_repr(seg: Any) -> str:
    """A segment's repr (``Segment.__repr__``); never raises, for a closed or deleted one."""
    try:
        size: int | str = seg.size
    except (OSError, ValueError):
        size = "?"
    return f"<Segment base={seg.base_offset} size={size} {'active' if seg.is_active else 'sealed'}>"


def log_stats(path: str, start: int, end: int, messages: int | None, segs: Sequence[Any],
              readonly: bool) -> dict[str, Any]:
    """``Log.stats()``'s dict from the segments (batch headers only); ``messages``
    None: not counted (a view that does not show it)."""
    first_ts = None
    for seg in segs:
        hdr = seg.first_header()
        if hdr is not None:
            first_ts = hdr[codec.H_BASE_TS]
            break
    newest = max((s.max_timestamp for s in segs if s.size), default=-1)
    return {"path": path, "start_offset": start, "end_offset": end,
            "messages": messages, "segments": len(segs), "bytes": sum(s.size for s in segs),
            "oldest_timestamp": first_ts, "newest_timestamp": newest if newest >= 0 else None,
            "readonly": readonly}


def log_html(st: dict[str, Any], segs: Sequence[Any], config: Any,
             last: Iterable[Any]) -> str:
    """A log's tables (``Log._repr_html_``): ``st`` from ``log_stats`` (the message
    count is not shown, so a compacted log is not read to count it), the segments
    and the last messages."""
    head = _html.fields(f"seglog.Log{' (readonly)' if st['readonly'] else ''}", [
        ("path", st["path"]),
        ("offsets", f"[{st['start_offset']:,}, {st['end_offset']:,})"),
        ("segments", st["segments"]), ("bytes", _html.size(st["bytes"])),
        ("time span", f"{_html.when(st['oldest_timestamp'])} .. "
                      f"{_html.when(st['newest_timestamp'])}"),
        ("cleanup policy", config.cleanup_policy),
        ("compression", config.compression or "none")])
    shown = segs if len(segs) <= 10 else list(segs[:5]) + list(segs[-5:])
    table = _html.grid("segments", ("base offset", "bytes", "newest record", "state"),
                       [(s.base_offset, _html.size(s.size), _html.when(s.max_timestamp),
                         "active" if s is segs[-1] else "sealed") for s in shown],
                       f"{len(segs) - 10} more in between" if len(segs) > 10 else "")
    return head + table + messages_html("the last messages", iter(last))


def closed_html(what: str, rows: list[tuple[str, Any]]) -> str:
    return _html.fields(f"{what} (closed)", rows)


def topic_html(name: str, root: str, readonly: bool, stats: list[dict[str, Any]]) -> str:
    """A topic's table, one row per partition (``Topic._repr_html_``)."""
    rows = [(p, st["start_offset"], st["end_offset"], st["messages"], st["segments"],
             _html.size(st["bytes"]), _html.when(st["newest_timestamp"]))
            for p, st in enumerate(stats)]
    return _html.grid(f"seglog.Topic {name!r} at {root}{' (readonly)' if readonly else ''}",
                      ("partition", "start", "end", "messages", "segments", "bytes",
                       "newest record"), rows)


def frame(table: Any, t0: int | None, t1: int | None) -> Any:
    """A pandas DataFrame from ``read_arrow``'s table, rows outside ``[t0, t1)``
    dropped (timestamps need not ascend, so the offset window is not enough)."""
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
    return table.to_pandas()


def concat_partitions(frames: list[Any]) -> Any:
    """Partitions' frames as one, with a ``partition`` column first (``Topic.to_pandas``)."""
    for p, df in enumerate(frames):
        df.insert(0, "partition", p)
    import pandas as pd
    return pd.concat(frames, ignore_index=True)

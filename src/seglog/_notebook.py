"""Notebook views of segments, logs and topics: ``stats``, ``to_pandas`` and the
``_repr_html_`` tables, as functions of the narrow things they show (the storage
classes delegate to them; pandas and pyarrow are imported only when used)."""

from __future__ import annotations

from typing import Any

from . import _html


def segment_html(seg: Any) -> str:
    """A segment's table (``Segment._repr_html_``)."""
    return _html.fields(f"seglog.Segment {seg.path}", [
        ("base offset", seg.base_offset), ("bytes", _html.size(seg.size)),
        ("newest record", _html.when(seg.max_timestamp)),
        ("state", "active" if seg.is_active else "sealed")])

"""Records going in (``Record``), messages coming out (``Message``), ``Columns`` and
their conversion to Arrow, and ``MessageSet``.

This module gathers three: ``_records`` (``Record``, ``Message``, input validation),
``_columns`` (``Columns``, Arrow) and ``_messageset`` (``MessageSet``).
"""

from __future__ import annotations

from ._arrow_batches import ArrowColumns
from ._columns import ARROW_FIELDS, Columns, arrow_modules, arrow_schema
from ._messageset import MessageSet
from ._records import (HEADER_FRAMING, Headers, Message, PreparedBatch, Record, as_ms,
                       check_timestamp, field_getter, messages_html, prepare_batch, short_repr)

__all__ = [
    "Record", "Message", "Headers", "field_getter", "short_repr", "messages_html",
    "as_ms", "check_timestamp", "prepare_batch", "PreparedBatch", "HEADER_FRAMING",
    "Columns", "ArrowColumns", "ARROW_FIELDS", "arrow_modules", "arrow_schema",
    "MessageSet",
]

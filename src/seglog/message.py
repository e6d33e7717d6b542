"""Records going in (``Record``), messages coming out (``Message``), ``Columns`` and
their conversion to Arrow, and ``MessageSet``: what users import.

This module gathers three: ``_records`` (``Record``, ``Message``; input validation
is its own), ``_columns`` (``Columns``, Arrow) and ``_messageset`` (``MessageSet``).
Other seglog modules import the internals from those modules directly.
"""

from __future__ import annotations

from ._arrow_batches import ArrowColumns
from ._columns import Columns, arrow_schema
from ._messageset import MessageSet
from ._records import Headers, Message, Record

__all__ = ["Record", "Message", "Headers", "MessageSet", "Columns", "ArrowColumns",
           "arrow_schema"]

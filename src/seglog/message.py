"""Records going in (``Record``), messages coming out (``Message``), ``Columns`` and
their conversion to Arrow, and ``MessageSet``: what users import.

This module gathers three: ``_codec.records`` (``Record``, ``Message``; input validation
is its own), ``_codec.columns`` (``Columns``, Arrow) and ``_codec.messageset`` (``MessageSet``).
Other seglog modules import the internals from those modules directly.
"""

from __future__ import annotations

from ._codec.arrow_batches import ArrowColumns
from ._codec.columns import Columns, arrow_schema
from ._codec.messageset import MessageSet
from ._codec.records import Headers, Message, Record

__all__ = ["Record", "Message", "Headers", "MessageSet", "Columns", "ArrowColumns",
           "arrow_schema"]

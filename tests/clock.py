"""Options for logs whose records carry a made-up clock (millisecond values near 0,
``now_ms=10_000``): the record timestamp window (``message_timestamp_before_max_ms``
/ ``message_timestamp_after_max_ms``) switched off, as ``LogConfig`` documents. Pass
them to ``Log.open`` / ``Topic.open``: ``Log.open(path, **SYNTHETIC_CLOCK)``. The
window has tests of its own (test_settings.py)."""

SYNTHETIC_CLOCK = {"message_timestamp_before_max_ms": None,
                   "message_timestamp_after_max_ms": None}

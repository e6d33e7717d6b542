"""The log's internals under ``seglog.log.Log`` (Kafka's ``LocalLog`` and its helpers):
the writer's segment list and offsets (``_log.local_log``) and the parts it drives
(``append_line``, ``flush_marks``, ``end_watch``, ``close_gate``, ``inflight``,
``metrics``); a readonly reader's list (``live``); opening a directory (``opening``);
the read path (``reads``), waiting (``wait``), an append's validation and batching
(``batching``), retention and compaction passes (``maintenance``), and walking a log's
files without opening it (``walk``)."""

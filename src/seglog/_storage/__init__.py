"""A segment's files, below ``seglog.segment`` and ``seglog.index``: the one chunked
batch walker over a file (``scan``), the ``.log`` descriptor (``segment_file``), reading
whole batches by ``pread`` (``segment_read``), the active segment's writable mapping and
its reserved blocks (``writable_map``), the index pair opened checked or rebuilt
(``segment_indexes``), and the log directory's marker ``seglog.json`` (``marker``)."""

"""Apache Kafka's own segment files, read straight off disk (docs/KAFKA.md).

``open_partition(dir)`` gives a ``KafkaPartition`` with the read API of a readonly
``seglog.Log``; ``list_partitions(log_dirs)`` finds every partition in a broker's log
dirs (one copy each: the highest leader epoch, then the highest end offset);
``copy_to_log`` makes a seglog log of a partition, at the same offsets. Nothing in a
Kafka directory is ever written, locked, renamed or deleted. Needs the ``kafka`` extra
(CRC32C, snappy, zstd).

The package's modules, one concept each: ``_wire`` (the batch formats, pure functions
over bytes), ``_uniform`` (the fast path for batches of one record shape), ``_codecs``
(checksums and compression), ``_segments`` (a partition directory's files and
indexes), ``_txn`` (transactions and the last stable offset), ``_reads`` and
``_arrow`` (the read path to messages and to Arrow), ``_partition``
(``KafkaPartition``), ``_discover`` (log dirs, checkpoints, choosing a copy),
``_copy`` (``copy_to_log``).
"""

from __future__ import annotations

import os
from typing import Iterable

from ._copy import copy_to_log
from ._discover import list_partitions as _list
from ._partition import ISOLATION_LEVELS, KafkaPartition
from ._segments import SEGMENT_NAME
from ._wire import BatchInfo, Records

__all__ = ["open_partition", "list_partitions", "copy_to_log", "KafkaPartition",
           "ISOLATION_LEVELS", "BatchInfo", "Records", "SEGMENT_NAME", "CODEC_NAMES"]

CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")


def open_partition(path: str | os.PathLike[str]) -> KafkaPartition:
    """The Kafka partition directory ``path`` (``<log dir>/<topic>-<partition>``), to read."""
    return KafkaPartition(path)


def list_partitions(log_dirs: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]
                    ) -> dict[tuple[str, int], str]:
    """{(topic, partition): directory} of every partition in the log dirs (one dir, or
    several: a broker's ``log.dirs``, or several brokers' volumes). A partition found
    in several is read from the copy with the highest leader epoch, then the highest
    end offset; ``-delete``, ``-future`` and ``-stray`` directories are ignored."""
    dirs = [os.fspath(log_dirs)] if isinstance(log_dirs, (str, os.PathLike)) else \
        [os.fspath(d) for d in log_dirs]
    return _list(dirs)

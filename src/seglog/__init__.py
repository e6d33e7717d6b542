"""seglog: Kafka's partition log as an embeddable, in-process library.

    import seglog
    with seglog.Log.open("events") as log:
        off = log.append(b"hello")
        for m in log.iter(off):
            print(m.offset, m.value)
"""

from .config import LogConfig
from .consumer_group import (Consumer, ConsumerMessage, commit_offsets, committed_offsets,
                             describe_group, list_groups)
from .errors import (CommitFailedError, CorruptRecordError, GroupBusyError, InvalidConfigError,
                     LogClosedError, LogLockedError, MessageTooLargeError, NotALogError,
                     NotDurableError, OffsetOutOfRangeError, ProducerClosedError, ProducerTimeoutError,
                     ReadOnlyError, SeglogError, StorageError)
from .index import OffsetIndex, TimeIndex
from .log import Log
from .message import ArrowColumns, Columns, Message, MessageSet, Record, arrow_schema
from .producer import Producer
from .segment import Segment
from .topic import Topic

__all__ = [
    "Log", "LogConfig", "Record", "Message", "MessageSet", "Segment", "OffsetIndex", "TimeIndex",
    "SeglogError", "OffsetOutOfRangeError", "MessageTooLargeError", "CorruptRecordError",
    "LogLockedError", "LogClosedError", "InvalidConfigError", "StorageError", "ReadOnlyError",
    "NotALogError", "Topic", "Consumer", "ConsumerMessage", "describe_group",
    "list_groups", "committed_offsets", "commit_offsets",
    "CommitFailedError", "GroupBusyError", "Columns", "ArrowColumns", "arrow_schema",
    "Producer", "ProducerTimeoutError", "ProducerClosedError", "NotDurableError",
]
__version__ = "0.1.0"

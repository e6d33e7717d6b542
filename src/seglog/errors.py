"""Exception hierarchy. Every error seglog raises on purpose derives from SeglogError."""

from __future__ import annotations


class SeglogError(Exception):
    """Base class of all seglog errors."""


class OffsetOutOfRangeError(SeglogError, IndexError):
    """The offset is below ``start_offset`` or above ``end_offset``."""


class MessageTooLargeError(SeglogError, ValueError):
    """A record is larger than ``max_message_bytes``; nothing was written."""


class CorruptRecordError(SeglogError):
    """A batch failed validation (framing, length, CRC or offsets).

    ``path``, ``position`` and ``offset`` say where, when known.
    """

    def __init__(self, message: str, path: str | None = None,
                 position: int | None = None, offset: int | None = None) -> None:
        where = []
        if path is not None:
            where.append(f"file {path}")
        if position is not None:
            where.append(f"position {position}")
        if offset is not None:
            where.append(f"offset {offset}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.message = message
        self.path = path
        self.position = position
        self.offset = offset

    def at(self, path: str | None, position: int | None,
           offset: int | None = None) -> "CorruptRecordError":
        """The same error, placed in a file (decoders report positions in their buffer)."""
        return CorruptRecordError(self.message, path, position, offset)


class LogLockedError(SeglogError):
    """Another writer (this or another process) holds the log directory's lock."""


class LogClosedError(SeglogError):
    """The log was closed."""


class InvalidConfigError(SeglogError, ValueError):
    """An unknown option or an out-of-range value was given."""


class StorageError(SeglogError, OSError):
    """A write or fsync failed; the log refuses further writes until reopened."""


def storage_error(cause: BaseException, message: str) -> StorageError:
    """A StorageError that keeps its cause's errno (``e.errno == errno.ENOSPC``)."""
    code = getattr(cause, "errno", None)
    return StorageError(code, message) if code is not None else StorageError(message)


class NotALogError(SeglogError):
    """The directory holds files but no seglog marker: seglog did not create it, and
    refuses to open it (it never truncates or deletes files it cannot prove are its
    own). Also raised when the marker itself is unreadable."""


class CommitFailedError(SeglogError):
    """A consumer's commit was refused: it is no longer the owner of a partition in
    the group's current generation (a rebalance happened, or it was expelled). It
    rejoins the group at its next poll; nothing was committed."""


class GroupBusyError(SeglogError, TimeoutError):
    """Another process held a consumer group's ``group.lock`` longer than the wait
    bound (``lock_timeout_ms``): the join, commit or leave was not done and nothing
    was written. A member stopped (SIGSTOP, a debugger) inside its short critical
    section causes it; the group proceeds once that member resumes or dies."""


class ReadOnlyError(SeglogError):
    """A write was attempted on a log opened with ``readonly=True``."""


class ProducerTimeoutError(SeglogError, TimeoutError):
    """A ``Producer`` call waited longer than its bound: ``send`` on a full buffer
    past ``max_block_ms`` (nothing was queued), or ``flush``/``close`` past their
    ``timeout`` (the records keep being written in the background)."""


class ProducerClosedError(SeglogError):
    """The ``Producer`` was closed, or belongs to the process it was forked from;
    nothing was queued."""


class NotDurableError(SeglogError):
    """A durable ``Producer``'s records were written at ``offsets`` (of ``partition`` on
    a ``Topic``; None on a ``Log``) but could not be made durable: no fsync covering
    them succeeded before the producer closed (the log was closed, or its flush kept
    failing: ``__cause__`` says why). They are in the log and readable; they survive
    a crash of the process, not necessarily a power loss. Never sent again by seglog:
    sending them again would duplicate them."""

    def __init__(self, message: str, offsets: range, partition: int | None = None) -> None:
        super().__init__(message)
        self.offsets = offsets
        self.partition = partition

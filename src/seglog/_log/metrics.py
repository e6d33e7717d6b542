"""Counters a log keeps about itself (``Log.metrics()``): plain ints and one
fixed-bucket latency histogram, updated where the work happens and cheap enough to
leave on (the append path adds one integer increment)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

# fsync latency bucket bounds in milliseconds (the last bucket: everything slower)
FSYNC_BOUNDS_MS = (0.1, 0.5, 1.0, 5.0, 10.0, 50.0, 100.0, 500.0, 1000.0)


class Histogram:
    """Counts of observations per latency bucket, with their count and sum."""

    __slots__ = ("counts", "count", "sum_s")

    def __init__(self) -> None:
        self.counts = [0] * (len(FSYNC_BOUNDS_MS) + 1)
        self.count = 0
        self.sum_s = 0.0

    def observe(self, seconds: float) -> None:
        ms = seconds * 1000.0
        i = 0
        for bound in FSYNC_BOUNDS_MS:
            if ms <= bound:
                break
            i += 1
        self.counts[i] += 1
        self.count += 1
        self.sum_s += seconds

    def snapshot(self) -> dict[str, Any]:
        """Cumulative counts by upper bound (``"+Inf"`` last), as Prometheus buckets."""
        cum, buckets = 0, {}
        for bound, n in zip((*map(str, FSYNC_BOUNDS_MS), "+Inf"), self.counts):
            cum += n
            buckets[bound] = cum
        return {"buckets_ms": buckets, "count": self.count, "sum_seconds": self.sum_s}


class Metrics:
    """A log's counters since it was opened (this process, this ``Log`` object)."""

    __slots__ = ("flushes", "fsync", "rolls", "corrupt_batches", "retention_runs",
                 "retention_deleted_segments", "retention_deleted_bytes", "compaction_runs",
                 "compaction_bytes_saved", "wait_wakeups", "_polling")

    def __init__(self) -> None:
        self.flushes = 0
        self.fsync = Histogram()
        self.rolls = 0
        self.corrupt_batches = 0
        self.retention_runs = 0
        self.retention_deleted_segments = 0
        self.retention_deleted_bytes = 0
        self.compaction_runs = 0
        self.compaction_bytes_saved = 0
        self.wait_wakeups = 0
        # one entry per wait() caller polling the files now (a readonly reader's, one
        # of several writers'; a list: append and pop are each one C call, so
        # threads need no lock)
        self._polling: list[None] = []

    # what happened, told by the layer that did it (the counters are this object's)
    def flushed(self, seconds: float) -> None:
        self.flushes += 1
        self.fsync.observe(seconds)

    def rolled(self) -> None:
        self.rolls += 1

    def corrupt_batch(self) -> None:
        self.corrupt_batches += 1

    def retention_ran(self, deleted_segments: int, deleted_bytes: int) -> None:
        self.retention_runs += 1
        self.retention_deleted_segments += deleted_segments
        self.retention_deleted_bytes += deleted_bytes

    def compaction_ran(self, bytes_saved: int) -> None:
        self.compaction_runs += 1
        self.compaction_bytes_saved += bytes_saved

    def woke(self) -> None:
        self.wait_wakeups += 1

    @contextmanager
    def polling(self) -> Iterator[None]:
        """Around a ``wait()`` while it polls the files (a readonly reader's, one of
        several writers')."""
        self._polling.append(None)
        try:
            yield
        finally:
            self._polling.pop()

    def after_fork(self) -> None:
        """A forked child's copy: the parent's polling threads do not exist here
        (their entries would never be popped)."""
        self._polling = []

    @property
    def pollers(self) -> int:
        """The ``wait()`` callers polling the files now."""
        return len(self._polling)

    def snapshot(self) -> dict[str, Any]:
        return {"flushes": self.flushes, "fsync_latency": self.fsync.snapshot(),
                "rolls": self.rolls, "corrupt_batches_seen": self.corrupt_batches,
                "retention_runs": self.retention_runs,
                "retention_deleted_segments": self.retention_deleted_segments,
                "retention_deleted_bytes": self.retention_deleted_bytes,
                "compaction_runs": self.compaction_runs,
                "compaction_bytes_saved": self.compaction_bytes_saved,
                "wait_wakeups": self.wait_wakeups}


class AppendCounts:
    """What one writer appended since it opened, at no cost to the append path: the
    end offset and the active segment's size, measured against where they were."""

    __slots__ = ("_end", "_active", "_rolled")

    def __init__(self, end: int) -> None:
        self._end = end          # the end offset counted from
        self._active = 0         # the active segment's size counted from
        self._rolled = 0         # bytes appended to segments that were active since

    def restart(self, end: int, active_size: int) -> None:
        """Count from here (a writer opening, or joining others)."""
        self._end, self._active, self._rolled = end, active_size, 0

    def rolled(self, sealed_size: int) -> None:
        """The active segment was sealed at ``sealed_size``; the next one is counted
        from empty."""
        self._rolled += max(0, sealed_size - self._active)
        self._active = 0

    def since_open(self, end: int, active_size: int) -> tuple[int, int]:
        """(messages, bytes) appended, given the end offset and active size now."""
        return max(0, end - self._end), self._rolled + active_size - self._active

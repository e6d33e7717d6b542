"""A writer that takes an active segment's tail from elsewhere (another writer's
published tail, ``ActiveSegment.follow_tail``; a recovery) appends, indexes and rolls
exactly as the writer before it would have. Each test compares the files with
those one exclusive writer makes of the same calls."""

from __future__ import annotations

import os

import pytest

from seglog import Log, LogLockedError, codec
from seglog.log import append_encoded
from seglog.testing import abandon

TS = 1_700_000_000_000


def _files(path: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(path)):
        if name.endswith((".log", ".index", ".timeindex")):
            with open(os.path.join(path, name), "rb") as f:
                out[name] = f.read()
    return out


def _same_files(alone: str, turns: str) -> None:
    a, t = _files(alone), _files(turns)
    assert sorted(a) == sorted(t)
    for name in a:
        assert a[name] == t[name], f"{name} differs"


# a time index of 4 slots (3 for appends' entries), an entry every batch or so
FULL_OPTS = dict(segment_bytes=100_000, index_interval_bytes=50, max_index_bytes=48,
                 segment_ms=None, flush_ms=None)


def _append(logs: list[Log], ids: range) -> None:
    """Message ``i`` of ``ids`` appended by ``logs[i % len(logs)]``."""
    for i in ids:
        logs[i % len(logs)].append(b"x" * 40, timestamp=TS + i)


def test_a_writer_following_a_filled_time_index_rolls_as_the_writer_that_filled_it(tmp_path):
    """The time index keeps its last slot for the entry a seal adds: the append that
    fills the slot before it makes the segment roll at the next append. A writer that
    takes the segment from the header (or a recovery) at that count must roll at its
    next append too, not go on appending with no more index entries."""
    alone, turns = str(tmp_path / "alone"), str(tmp_path / "turns")
    with Log.open(alone, **FULL_OPTS) as log:
        _append([log], range(40))
    writers = [Log.open(turns, multi_writer=True, **FULL_OPTS) for _ in range(2)]
    try:
        _append(writers, range(40))
    finally:
        for w in writers:
            w.close()
    assert len([n for n in os.listdir(alone) if n.endswith(".log")]) > 5
    _same_files(alone, turns)


def test_a_writer_following_a_first_batch_without_timestamp_rolls_by_size(tmp_path):
    """A first batch whose largest timestamp is -1 (a Kafka message of magic 0, as
    ``kafka.copy_to_log`` appends it) moves no index entry and no timestamp; the
    writer that appends after it, in another process, must still roll at
    ``segment_bytes`` (the segment is no longer empty)."""
    opts = dict(segment_bytes=4000, segment_ms=None, flush_ms=None)
    first = codec.encode_batch(0, [b"v0"], [-1])
    alone, turns = str(tmp_path / "alone"), str(tmp_path / "turns")
    with Log.open(alone, **opts) as log:
        append_encoded(log, [(first, 1, -1, len(first))])
        for i in range(300):
            log.append(b"x" * 100, timestamp=TS + i)
    a = Log.open(turns, multi_writer=True, **opts)
    b = Log.open(turns, multi_writer=True, **opts)
    try:
        append_encoded(a, [(first, 1, -1, len(first))])
        for i in range(300):
            b.append(b"x" * 100, timestamp=TS + i)
    finally:
        b.close()
        a.close()
    assert len([n for n in os.listdir(alone) if n.endswith(".log")]) > 5
    _same_files(alone, turns)


def test_a_writer_recovering_a_filled_time_index_rolls_at_its_next_append(tmp_path):
    """The same count reached by one exclusive writer that was then killed: the
    writer that recovers the segment rolls at its next append, as the killed one
    would have."""
    alone, killed = str(tmp_path / "alone"), str(tmp_path / "killed")
    with Log.open(alone, **FULL_OPTS) as log:
        _append([log], range(12))
    log = Log.open(killed, **FULL_OPTS)
    _append([log], range(4))
    abandon(log)
    with Log.open(killed, **FULL_OPTS) as log:
        _append([log], range(4, 12))
    assert len([n for n in os.listdir(alone) if n.endswith(".log")]) == 3
    _same_files(alone, killed)


def test_a_writer_refuses_to_join_writers_of_another_header_layout(tmp_path):
    """Writers of the previous header layout (magic SEGLOGW2: they take only size and
    next offset from a hand-off at the same version) have the log open: a writer of
    this layout refuses to join them (``LogLockedError``) instead of recovering the
    files and starting a session of its own under them; they go on undisturbed."""
    path = str(tmp_path / "log")
    a = Log.open(path, multi_writer=True, flush_ms=None)
    try:
        a.append(b"a0")
        # what a writer of the previous layout's session start leaves in the header
        with open(os.path.join(path, ".writers"), "r+b") as f:
            f.write(b"SEGLOGW2")
        with open(os.path.join(path, ".writers"), "rb") as f:
            before = f.read()
        with pytest.raises(LogLockedError, match="layout"):
            Log.open(path, multi_writer=True, flush_ms=None)
        with open(os.path.join(path, ".writers"), "rb") as f:
            assert f.read() == before
    finally:
        a.close()

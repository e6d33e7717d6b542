"""``seglog.repair``: ``check`` (what ``seglog verify`` says) agrees with what opening
the log for writing and reading it do, on logs damaged in many ways; and the cut
``recover --truncate-at-damage`` makes is the one its plan announced."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from typing import Callable

import pytest

from seglog import CorruptRecordError, Log, codec, repair
from seglog._runtime.files import RECOVERY_POINT, read_checkpoint
from seglog.testing import abandon

SMALL = dict(segment_bytes=4096, max_message_bytes=64 << 10, index_interval_bytes=512,
             flush_ms=None)
BATCHES = 40                 # of 10 messages: offsets 0..399, about 4 batches a segment
FLUSHED = 38 * 10            # the recovery point: inside the last segment


def build(path: str, clean: bool) -> None:
    """A log of 40 batches over about ten segments, flushed up to offset 380; left
    as a killed writer leaves it (no clean-shutdown marker) unless ``clean``."""
    log = Log.open(path, **SMALL)
    for i in range(BATCHES):
        log.append_batch([b"m%05d-" % j + b"x" * 80 for j in range(i * 10, i * 10 + 10)])
        if (i + 1) * 10 == FLUSHED:
            log.flush()
    assert log.segments[-1].base_offset < FLUSHED, "the recovery point must be in the last segment"
    if clean:
        log.close()
    else:
        abandon(log)


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    root = tmp_path_factory.mktemp("bases")
    out = {}
    for clean in (False, True):
        path = str(root / ("clean" if clean else "killed"))
        build(path, clean)
        batches: list[repair.BatchInfo] = []
        assert repair.check(path, batches=batches).ok
        out[clean] = (path, batches)
    return out


# -- ways to damage a log: each returns the base offsets of the batches it destroyed
Info = list[repair.BatchInfo]


def _write(path: str, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def _xor(path: str, pos: int) -> None:
    with open(path, "rb") as f:
        f.seek(pos)
        b = f.read(1)
    _write(path, pos, bytes([b[0] ^ 0x5A]))


def _segments(batches: Info) -> list[str]:
    return sorted({b.segment for b in batches})


def _at(batches: Info, offset: int) -> repair.BatchInfo:
    (b,) = [b for b in batches if b.base_offset == offset]
    return b


def _in(batches: Info, segment: str) -> Info:
    return [b for b in batches if b.segment == segment]


def base_offset(offset: int, to: int) -> Callable[[Info], set[int]]:
    def damage(batches: Info) -> set[int]:
        b = _at(batches, offset)
        _write(b.segment, b.position, struct.pack("<q", to))
        return set()                 # offsets are outside the checksum: the batch is whole
    return damage


def first_of_segment(k: int, to: int) -> Callable[[Info], set[int]]:
    def damage(batches: Info) -> set[int]:
        return base_offset(_in(batches, _segments(batches)[k])[0].base_offset, to)(batches)
    return damage


def byte(offset: int, at: int) -> Callable[[Info], set[int]]:
    def damage(batches: Info) -> set[int]:
        b = _at(batches, offset)
        _xor(b.segment, b.position + at)
        return {offset}
    return damage


def zero(offset: int) -> Callable[[Info], set[int]]:
    def damage(batches: Info) -> set[int]:
        b = _at(batches, offset)
        _write(b.segment, b.position, bytes(b.size))
        return {offset}
    return damage


def truncate(offset: int, into: int) -> Callable[[Info], set[int]]:
    """Cut the file of the batch at ``offset`` ``into`` bytes into it (0: before it)."""
    def damage(batches: Info) -> set[int]:
        b = _at(batches, offset)
        with open(b.segment, "r+b") as f:
            f.truncate(b.position + into)
        return {x.base_offset for x in _in(batches, b.segment) if x.position >= b.position}
    return damage


def delete_segment(k: int) -> Callable[[Info], set[int]]:
    def damage(batches: Info) -> set[int]:
        seg = _segments(batches)[k]
        os.remove(seg)
        return {b.base_offset for b in _in(batches, seg)}
    return damage


def garbage_past_the_data(batches: Info) -> set[int]:
    last = batches[-1]
    _write(last.segment, last.position + last.size + 100, b"junk")
    return set()


CASES: dict[str, tuple[bool, Callable[[Info], set[int]]]] = {
    "intact": (False, lambda batches: set()),
    "intact, clean": (True, lambda batches: set()),
    "base offset of the first batch of the log": (False, base_offset(0, 5)),
    "base offset of a middle segment's first batch": (False, first_of_segment(3, 11)),
    "base offset of a batch inside a middle segment": (False, base_offset(150, 11)),
    "base offset below the recovery point": (False, base_offset(370, 11)),
    "base offset above the recovery point, followed": (False, base_offset(380, 11)),
    "base offset of the last batch": (False, base_offset(390, 11)),
    "base offset of the last batch, clean": (True, base_offset(390, 11)),
    "checksum of a middle segment": (False, byte(150, 30)),
    "record of a middle segment": (False, byte(150, 90)),
    "checksum below the recovery point": (False, byte(370, 60)),
    "checksum above the recovery point, followed": (False, byte(380, 60)),
    "checksum of the last batch (a torn tail)": (False, byte(390, 60)),
    "checksum of the last batch, clean": (True, byte(390, 60)),
    "length of a batch": (False, byte(150, 9)),
    "magic of a batch": (False, byte(150, 12)),
    "a zeroed batch in a middle segment": (False, zero(150)),
    "a zeroed batch below the recovery point": (False, zero(370)),
    "a zeroed last batch (never written)": (False, zero(390)),
    "a zeroed last batch, clean": (True, zero(390)),
    "a middle segment cut inside a batch": (False, truncate(150, 40)),
    "a middle segment cut at a batch": (False, truncate(150, 0)),
    "the last segment cut inside its last batch": (False, truncate(390, 40)),
    "the last segment cut inside its last batch, clean": (True, truncate(390, 40)),
    "a middle segment deleted": (False, delete_segment(4)),
    "garbage past the data": (False, garbage_past_the_data),
}


def _log_files(path: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(path)):
        if name.endswith(".log"):
            with open(os.path.join(path, name), "rb") as f:
                out[name] = f.read()
    return out


def opening_finds_damage(path: str) -> bool:
    """What a writer's open and a full read say: damage if the open refuses, cuts
    data (not just the writer's zero-filled reservation) or deletes a segment
    holding data, or reading the log fails."""
    before = _log_files(path)
    try:
        log = Log.open(path)
    except CorruptRecordError:
        return True
    try:
        list(log.iter())
    except CorruptRecordError:
        return True
    finally:
        log.close()
    after = _log_files(path)
    for name, data in before.items():
        kept = after.get(name, b"")
        assert data.startswith(kept), "recovery changed data it kept"
        if any(data[len(kept):]):
            return True
    return False


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "seglog", *args], capture_output=True,
                          text=True, timeout=120)


def _data(files: dict[str, bytes]) -> int:
    return sum(len(d.rstrip(b"\0")) for d in files.values())


@pytest.mark.parametrize("case", list(CASES))
def test_check_agrees_with_opening_and_the_cut_loses_what_it_says(case, bases, tmp_path):
    clean, damage = CASES[case]
    base, batches = bases[clean]
    checked, opened = str(tmp_path / "checked"), str(tmp_path / "opened")
    shutil.copytree(base, checked)
    destroyed = damage([repair.BatchInfo(b.segment.replace(base, checked), *[
        getattr(b, f) for f in ("position", "size", "base_offset", "last_offset", "count",
                                "attributes", "base_timestamp", "max_timestamp")])
        for b in batches])
    shutil.copytree(checked, opened)

    report = repair.check(checked)
    assert (not report.ok) == opening_finds_damage(opened), (case, report.problems)
    if report.ok:
        return
    # the operator's cut: what the plan says it loses is what goes
    files = _log_files(checked)
    p = run("recover", checked, "--truncate-at-damage", "--yes", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    cut = doc["cut"]
    with Log.open(checked) as log:
        kept = [m.offset for m in log.iter()]
        assert log.end_offset == cut["offset"] == doc["end_offset"]
    assert repair.check(checked).ok
    original = [o for b in batches for o in range(b.base_offset, b.last_offset + 1)]
    assert kept == [o for o in original if o < cut["offset"]]
    removed = [b for b in batches if b.base_offset >= cut["offset"]
               and b.base_offset not in destroyed]
    assert cut["lost_messages"] == sum(b.count for b in removed), case
    assert cut["lost_last_offset"] == (max(b.last_offset for b in removed) if removed
                                       else None)
    at_cut = [b for b in batches if os.path.basename(b.segment) ==
              os.path.basename(cut["path"]) and b.position == cut["position"]]
    assert cut["damaged_bytes_unread"] == (not at_cut or at_cut[0].base_offset in destroyed)
    assert cut["lost_bytes"] == _data(files) - _data(_log_files(checked)), case


def test_the_cut_keeps_and_checkpoints_the_true_offsets_of_a_bad_base_offset(tmp_path):
    """A batch whose base offset reads 11 where 75 belongs: the log is cut before it
    and ends at 75, and the recovery point goes to 75, not to the bogus 11."""
    path = str(tmp_path / "l")
    log = Log.open(path, flush_ms=None)
    for i in range(100):
        log.append(b"m%05d" % i)
    log.flush()
    abandon(log)
    batches: list[repair.BatchInfo] = []
    repair.check(path, batches=batches)
    b = _at(batches, 75)
    _write(b.segment, b.position, struct.pack("<q", 11))
    plan = repair.plan_cut(path)
    assert plan is not None and (plan.position, plan.offset) == (b.position, 75)
    assert plan.lost_messages == 25 and plan.lost_end_offset == 100
    assert plan.lost_bytes == sum(x.size for x in batches if x.base_offset >= 75)
    assert plan.reserved_bytes == os.path.getsize(b.segment) - batches[-1].position \
        - batches[-1].size
    repair.cut(plan)
    assert read_checkpoint(path, RECOVERY_POINT) == 75
    with Log.open(path) as log:
        assert [m.value for m in log.iter()] == [b"m%05d" % i for i in range(75)]


def test_a_first_batch_not_at_its_segment_s_base_offset_is_damage(tmp_path):
    """The walk checks each segment's first batch against the segment's name, as
    opening does: else the batch after it takes the blame, and a cut there leaves a
    log that still does not open."""
    path = str(tmp_path / "l")
    build(path, clean=False)
    batches: list[repair.BatchInfo] = []
    repair.check(path, batches=batches)
    last = [b for b in batches if b.segment == batches[-1].segment][0]
    _write(last.segment, last.position, struct.pack("<q", last.base_offset + 5))
    (problem,) = repair.check(path).problems
    assert (problem.path, problem.position, problem.reason) == (last.segment, 0, "offsets")
    assert "segment's base offset" in problem.message
    with pytest.raises(CorruptRecordError):
        with Log.open(path) as log:
            list(log.iter())

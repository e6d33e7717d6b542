"""seglog never truncates or deletes a file it cannot prove is its own."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import struct
import zlib

import pytest

import seglog
from seglog._codec import format as _format
from seglog import CorruptRecordError, Log, NotALogError, Record, codec
from seglog._runtime import files as _files
from seglog.testing import abandon

from helpers import header


def _tree(path) -> dict[str, tuple[int, str]]:
    """Every file under ``path``: size and content hash."""
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            p = os.path.join(root, name)
            with open(p, "rb") as f:
                data = f.read()
            out[os.path.relpath(p, path)] = (len(data), hashlib.sha256(data).hexdigest())
    return out


def _foreign(path) -> None:
    os.makedirs(path, exist_ok=True)
    rng = random.Random(7)
    for name in ("00000000000000000000.log", "00000000000000000100.log",
                 "00000000000000000100.index", "99999999999999999999.log",
                 "notes.txt", "x.tmp", "a.log.deleted", "b.cleaned", "c.swap"):
        with open(os.path.join(path, name), "wb") as f:
            f.write(rng.randbytes(rng.randrange(1, 5000)))


@pytest.mark.parametrize("readonly", [False, True])
def test_directory_not_created_by_seglog_is_refused_untouched(tmp_path, readonly):
    path = tmp_path / "theirs"
    _foreign(path)
    before = _tree(path)
    with pytest.raises(NotALogError, match="seglog.json"):
        Log.open(path, readonly=readonly)
    assert _tree(path) == before
    assert sorted(os.listdir(path)) == sorted(before)        # not even a .lock


def test_bad_options_create_nothing(tmp_path):
    with pytest.raises(seglog.InvalidConfigError):
        Log.open(tmp_path / "new", segment_bytes="big")
    assert not os.path.exists(tmp_path / "new")


def test_new_log_has_a_marker_with_format_and_settings(tmp_path):
    with Log.open(tmp_path / "l", retention_ms=None) as log:
        log.append(b"x")
    with open(tmp_path / "l" / "seglog.json") as f:
        m = json.load(f)
    assert m["seglog"] == "log" and m["format"] == 2 and m["config"]["retention_ms"] is None


def test_foreign_files_in_a_log_directory_are_never_touched(tmp_path):
    path = tmp_path / "l"
    log = Log.open(path, segment_bytes=1024, cleanup_policy="compact,delete",
                   retention_bytes=4096, min_cleanable_dirty_ratio=0.0,
                   file_delete_delay_ms=0, retention_check_ms=None)
    names = {"notes.txt": b"mine", "x.tmp": b"t", "foo.deleted": b"d", "y.cleaned": b"c",
             "z.swap": b"s", "99999999999999999999.log": b"not a segment (> 2**63)",
             ".seglog-tmp.notes": b"", ".seglog-deleted.x.log": b"wrong form"}
    for n, data in names.items():
        with open(path / n, "wb") as f:
            f.write(data)
    for i in range(300):
        log.append(b"v%d" % i, key=b"k%d" % (i % 7))
    log.compact()
    log.enforce_retention()
    log.close()
    with Log.open(path, readonly=True) as r:
        assert r.end_offset == 300
    with Log.open(path) as again:           # the writer's open clears leftovers
        assert again.end_offset == 300
    for n, data in names.items():
        if n == ".seglog-tmp.notes":
            continue                         # seglog's own form: a temp file it left
        with open(path / n, "rb") as f:
            assert f.read() == data, n


def test_seglog_leftovers_are_removed_at_open(tmp_path):
    path = tmp_path / "l"
    with Log.open(path) as log:
        log.append(b"x")
    left = [".seglog-tmp.recovery-point", ".seglog-tmp.00000000000000000000.index",
            ".seglog-deleted.00000000000000000000.log",
            ".seglog-cleaned.00000000000000000007.timeindex"]
    for n in left:
        with open(path / n, "wb") as f:
            f.write(b"junk")
    with Log.open(path) as log:
        assert log.end_offset == 1
    assert not set(left) & set(os.listdir(path))


def test_legacy_directory_is_adopted(tmp_path):
    """A log written before markers existed: its checkpoints prove it is seglog's."""
    path = tmp_path / "l"
    with Log.open(path) as log:
        log.append_batch([b"a", b"b"])
    os.unlink(path / "seglog.json")
    with Log.open(path, readonly=True) as r:
        assert [m.value for m in r.iter()] == [b"a", b"b"]
    assert not os.path.exists(path / "seglog.json")        # a reader writes nothing
    with Log.open(path) as log:
        assert log.end_offset == 2
    assert os.path.exists(path / "seglog.json")


def _rewrite_as_format_1(path) -> None:
    """Every batch of every segment as format 1 wrote it (magic 1, a 4-byte CRC-32 of
    the rest), and the marker saying format 1."""
    for name in os.listdir(path):
        if not name.endswith(".log"):
            continue
        with open(path / name, "r+b") as f:
            data = f.read()
            old = []
            pos = 0
            while data[pos:pos + codec.HEADER_SIZE].strip(b"\0"):    # to the preallocated zeros
                hdr = header(data, pos)
                end = pos + hdr.size
                rest = data[pos + _format.CHECKSUM_FROM:end]
                old.append(struct.pack("<qIBI", hdr.base_offset, 5 + len(rest), 1, zlib.crc32(rest)) + rest)
                pos = end
            f.seek(0)
            f.write(b"".join(old) + data[pos:])     # as long as before: zeros stay zeros
    with open(path / "seglog.json") as f:
        marker = json.load(f)
    marker["format"] = 1
    with open(path / "seglog.json", "w") as f:
        json.dump(marker, f)


@pytest.mark.parametrize("clean", [True, False])
def test_format_1_log_is_refused_untouched_naming_its_format(tmp_path, clean):
    path = tmp_path / "l"
    log = Log.open(path, flush_ms=None)
    log.append_batch([b"a", b"b"])
    log.append(b"c")
    log.flush()
    log.close() if clean else abandon(log)     # unclean: an open would scan the tail
    _rewrite_as_format_1(path)
    clear = r"format 1: this seglog reads format 2 only"
    before = _tree(path)
    for ro in (False, True):
        with pytest.raises(CorruptRecordError, match=clear):
            Log.open(path, readonly=ro)
    assert _tree(path) == before
    # from before markers: the first batch says which format (never cut as a torn tail)
    os.unlink(path / "seglog.json")
    before = _tree(path)
    for ro in (False, True):
        with pytest.raises(CorruptRecordError, match=clear):
            Log.open(path, readonly=ro)
    assert _tree(path) == before


def test_format_1_batches_in_a_format_2_log_are_refused_on_read(tmp_path):
    path = tmp_path / "l"
    with Log.open(path) as log:
        log.append_batch([b"a", b"b"])
        log.append(b"c")
    with open(path / "seglog.json") as f:
        marker = f.read()
    _rewrite_as_format_1(path)
    with open(path / "seglog.json", "w") as f:
        f.write(marker)                 # a format-2 marker over format-1 segments
    with Log.open(path) as log:         # a clean open reads no data
        with pytest.raises(CorruptRecordError, match=r"format 1 .*this seglog reads format 2"):
            list(log.iter())
        with pytest.raises(CorruptRecordError, match=r"format 1 .*this seglog reads format 2"):
            list(log.read(2))


def test_damaged_marker_is_refused_untouched(tmp_path):
    path = tmp_path / "l"
    with Log.open(path) as log:
        log.append(b"x")
    with open(path / "seglog.json", "wb") as f:
        f.write(b"{not json")
    before = _tree(path)
    for ro in (False, True):
        with pytest.raises(NotALogError, match="unreadable"):
            Log.open(path, readonly=ro)
    assert _tree(path) == before


def test_lost_recovery_point_never_deletes_sealed_segments(tmp_path):
    """A bit flip in an old segment plus an unreadable recovery-point checkpoint used
    to cut a 3,000-offset log to 140 offsets."""
    path = tmp_path / "l"
    log = Log.open(path, segment_bytes=4096, flush_ms=None)
    for i in range(0, 3000, 10):
        log.append_batch([b"value %d" % j for j in range(i, i + 10)])
    seg = log.segments[1]
    abandon(log)
    with open(seg.path, "r+b") as f:          # a bit flip inside a sealed segment
        f.seek(seg.size // 2)
        b = f.read(1)
        f.seek(seg.size // 2)
        f.write(bytes([b[0] ^ 0x10]))
    with open(path / "recovery-point", "wb") as f:
        f.write(b"garbage")
    before = _tree(path)
    with Log.open(path) as again:             # the damage is not in the tail: it opens
        assert again.end_offset == 3000
        with pytest.raises(CorruptRecordError):
            sum(1 for _ in again.iter())      # and the damage is reported where it is
    after = _tree(path)
    assert {n for n in before if n.endswith(".log")} == {n for n in after if n.endswith(".log")}
    for n in before:
        if n.endswith(".log") and not n.startswith(os.path.basename(log.segments[-1].path)[:20]):
            assert after[n] == before[n], f"{n} changed"


def test_damage_before_the_last_segment_with_no_checkpoint_is_reported_not_cut(tmp_path):
    """With the recovery-point checkpoint gone, recovery used to scan from the first
    segment and cut the log at the damage, deleting every later segment. A segment
    with a successor was fsynced before the successor existed: its damage is
    corruption, reported where it is, and no file is cut or deleted."""
    path = tmp_path / "l"
    log = Log.open(path, segment_bytes=4096, flush_ms=None)
    for i in range(0, 3000, 10):
        log.append_batch([Record(b"value %d" % j) for j in range(i, i + 10)])
    segs = log.segments
    abandon(log)
    os.unlink(path / "recovery-point")
    victim = segs[-2]
    with open(victim.path, "r+b") as f:
        f.seek(victim.size - 5)
        f.write(b"\xff\xff\xff")
    before = _tree(path)
    with Log.open(path) as again:
        assert again.end_offset == 3000
        with pytest.raises(CorruptRecordError) as e:
            sum(1 for _ in again.iter())
        assert e.value.path == victim.path
        assert [m.offset for m in again.iter(segs[-1].base_offset)] == list(
            range(segs[-1].base_offset, 3000))
    after = _tree(path)
    for seg in segs[:-1]:
        name = os.path.basename(seg.path)
        assert after[name] == before[name], f"{name} changed"


def _documented_names() -> set[str]:
    """The file names docs/FORMAT.md lists in its log directory, segment names
    generalised to <digits>.ext."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "docs", "FORMAT.md"), encoding="utf-8") as f:
        text = f.read()
    block = text.split("## The log directory", 1)[1].split("```", 2)[1]
    names = {line.split()[0] for line in block.splitlines()[2:] if line.startswith("  ")
             and not line.startswith("   ")}
    return {re.sub(r"^\d{20}\.", "<digits>.", n) for n in names}


def test_every_file_a_log_directory_holds_is_documented(tmp_path):
    path = str(tmp_path / "events")
    seen: set[str] = set()
    with Log.open(path, segment_bytes=1024, cleanup_policy="compact,delete",
                  min_cleanable_dirty_ratio=0.0, retention_bytes=4096) as log:
        for i in range(300):
            log.append(b"v%d" % i, key=b"k%d" % (i % 7))
        log.append(None, key=b"gone")           # a tombstone: a horizon checkpoint
        for i in range(40):                     # ... in a sealed segment
            log.append(b"w%d" % i, key=b"k%d" % (i % 7))
        log.flush()
        seen |= set(os.listdir(path))
        assert log.enforce_retention()
        seen |= set(os.listdir(path))
        assert log.compact().skipped is None
        seen |= set(os.listdir(path))
    seen |= set(os.listdir(path))               # after close: the clean-shutdown marker
    # work under way: names of the forms FORMAT.md gives below the listing
    passing = {n for n in seen if n.startswith(".seglog-")}
    assert passing and all(_files.is_leftover(n) for n in passing)
    names = {re.sub(r"^\d{20}\.", "<digits>.", n) for n in seen - passing}
    assert {"writer-session", "cleaner-offset-checkpoint", "cleaner-horizon-checkpoint",
            "log-start-offset", ".clean-shutdown"} <= names
    assert names - _documented_names() == set()

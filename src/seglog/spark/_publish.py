"""The driver side of the sink: what a write's tasks staged, published exactly once.

Each write has a directory under ``<root>/__spark``: a stream's is
``queries/<Spark's query id>`` (the id its checkpoint keeps, so a restarted query
finds it again), a batch write's ``jobs/<a new id>``. The tasks stage their rows
there (``_stage``); the commit, holding the directory's lock:

1. writes the manifest: the groups to publish (staging files, by partition) and
   each partition's end offset now, durably, before anything is published;
2. appends each group to its partition as one atomic append
   (``seglog.log.append_encoded(log, batches, atomic=True)``), partition by partition, each partition
   fsynced before the next;
3. records the batch as published (a stream's ``committed``), removes the manifest
   and the staging files.

A commit that finds a manifest (its committer died) finishes it instead of
publishing what it was given: it recognises the groups already published by the
checksums of their batches, found after the end offset the manifest recorded
(``published``), and publishes the rest. A stream's batch at or below
``committed`` is not published again. So a batch's rows appear once, whichever
instant the driver died at. Docs: docs/SPARK.md, Writing.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import re
import socket
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from itertools import groupby
# Any: parsed JSON / JSON documents (dict[str, Any]): the job's manifest
from typing import Any, Iterable, Iterator

from .._codec import format as _format
from .._runtime.files import SPARK_DIR, atomic_write, fsync_dir, make_dirs, remove
from .._runtime.platform import boot_id, lock_within
from ..errors import CorruptRecordError, LogLockedError, SeglogError
from ..log import Log, append_encoded
from ..topic import partition_dir
from ._stage import STAGE_SUFFIX, StagedGroup

MANIFEST = "manifest.json"
COMMITTED = "committed.json"       # a stream's last published batch
DRIVER = "driver.json"             # a batch write's driver process (``driver_alive``)
LOCK = ".lock"
STAGE = "stage"
_ID = re.compile(r"[A-Za-z0-9-]{1,100}")
_STAGED = re.compile(r"[A-Za-z0-9._-]{1,200}-\d+\.\d+\.[0-9a-f]{12}" + re.escape(STAGE_SUFFIX))
_log = logging.getLogger("seglog")

TP = tuple[str, int]


class WriteDir:
    """The directory of one write under ``<root>/__spark``: a stream's (``kind``
    ``"query"``, staging per batch) or a batch write's (``"job"``)."""

    def __init__(self, root: str, kind: str, ident: str) -> None:
        if not _ID.fullmatch(ident):
            raise SeglogError(f"bad {kind} id {ident!r}")
        self.root, self.kind, self.ident = root, kind, ident
        self.path = os.path.join(root, SPARK_DIR, "queries" if kind == "query" else "jobs",
                                 ident)

    def stage_dir(self, batch: int) -> str:
        """Where the tasks of ``batch`` stage (a job has one batch)."""
        if self.kind == "job":
            return os.path.join(self.path, STAGE)
        return os.path.join(self.path, STAGE, str(batch))

    def open_stage(self, batch: int) -> str:
        """The staging directory of ``batch``, made if missing, for a task about to
        stage: ``SeglogError`` if the write is over (``check``). A job's directory is
        never made here: a task that starts after its job ended makes nothing."""
        d = self.stage_dir(batch)
        if self.kind == "query":
            make_dirs(d)
            return d
        try:
            os.mkdir(d)
        except FileExistsError:
            pass
        except FileNotFoundError:
            self.check()
            raise
        try:
            self.check()
        except SeglogError:
            try:
                os.rmdir(d)
            except OSError:
                pass
            raise
        return d

    def ended(self) -> bool:
        """True for a batch write that ended (committed, or aborted after a task
        failed): its driver record is gone."""
        return self.kind == "job" and not os.path.isfile(os.path.join(self.path, DRIVER))

    def check(self) -> None:
        """``SeglogError`` if the write ``ended``, so that a task still running then
        keeps nothing staged."""
        if self.ended():
            raise SeglogError(f"the Spark write {self.ident} has ended (it committed, or "
                              f"another task failed and it was aborted): this task's rows "
                              f"are not written")

    @contextmanager
    def locked(self, timeout_s: float, wait: bool = True) -> Iterator[bool]:
        """Hold the write's lock (``LogLockedError`` after ``timeout_s``; without
        ``wait``, yields False at once if another process holds it)."""
        make_dirs(self.path)
        fd = os.open(os.path.join(self.path, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            got = lock_within(fd, timeout_s if wait else 0.0)
            if not got and wait:
                raise LogLockedError(f"another process held the lock of {self.path} for "
                                     f"{timeout_s:.0f} s (a commit of the same write?)")
            yield got
        finally:
            os.close(fd)

    # -- the state files ---------------------------------------------------------------
    def _read(self, name: str) -> Any:
        path = os.path.join(self.path, name)
        try:
            with open(path, "rb") as f:
                return json.loads(f.read())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise CorruptRecordError(f"the sink's state file cannot be read ({e}); it says "
                                     f"what was published: see docs/SPARK.md, Writing", path) from e

    def committed(self) -> int | None:
        """A stream's last published batch, None before the first."""
        state = self._read(COMMITTED)
        return None if state is None else int(state["batch"])

    def manifest(self) -> "Manifest | None":
        raw = self._read(MANIFEST)
        return None if raw is None else Manifest.from_json(raw)

    def write_manifest(self, m: "Manifest") -> None:
        atomic_write(os.path.join(self.path, MANIFEST), json.dumps(m.to_json()).encode())

    def finish(self, batch: int) -> None:
        """``batch`` is published: recorded (a stream), its manifest and staging
        files removed; a job's directory goes whole."""
        if self.kind == "query":
            atomic_write(os.path.join(self.path, COMMITTED),
                         json.dumps({"version": 1, "batch": batch}).encode())
        self._drop_manifest()
        if self.kind == "query":
            self.clean_stages(batch)
        else:
            self.remove()

    def abandon(self) -> None:
        """A batch write whose commit failed having published nothing ends: its
        manifest removed durably first (one a power loss brought back would be
        published by the next write's sweep), then the rest (``remove``)."""
        self._drop_manifest()
        self.remove()

    def _drop_manifest(self) -> None:
        if remove(os.path.join(self.path, MANIFEST)):
            fsync_dir(self.path)

    def clean_stages(self, upto: int, keep: Iterable[str] = ()) -> None:
        """Remove the staging files of batches up to ``upto`` (but ``keep``), of every
        attempt: none is staging any more."""
        top = os.path.join(self.path, STAGE)
        try:
            names = os.listdir(top)
        except FileNotFoundError:
            return
        for name in names:
            if name.isdigit() and int(name) <= upto:
                _remove_staged(os.path.join(top, name), set(keep))

    def remove(self) -> None:
        """Remove a job's directory: its driver record first (the job has ended: a
        task still running keeps nothing, ``check``), then its staging files, state
        files and lock. A task that ends after (and made its staging directory anew)
        removes its own; an empty directory left then goes at the next sweep. None of
        it fsynced: what a crash brings back is a job whose driver is gone, which the
        next sweep removes."""
        remove(os.path.join(self.path, DRIVER))
        _remove_staged(os.path.join(self.path, STAGE), set())
        for name in (MANIFEST, LOCK):
            remove(os.path.join(self.path, name))
        try:
            os.rmdir(self.path)
        except OSError:
            pass                         # something not the sink's is in it: left there


def _remove_staged(directory: str, keep: set[str]) -> None:
    """Remove the staging files in ``directory`` (names the sink gives only), then the
    directory if that empties it. Not fsynced: a removal a crash undoes leaves files
    the next commit (a stream's) or sweep (a batch write's) removes again."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        if _STAGED.fullmatch(name) and name not in keep:
            remove(os.path.join(directory, name))
    try:
        os.rmdir(directory)
    except OSError:
        pass


class Manifest:
    """What a commit publishes: ``groups`` (staging files, relative to the write's
    directory, by topic and partition), and per partition the end offset before any
    was published (``ends``): the published ones lie after it."""

    def __init__(self, batch: int, groups: list[tuple[str, StagedGroup]], ends: dict[TP, int]
                 ) -> None:
        self.batch, self.groups, self.ends = batch, groups, ends

    def to_json(self) -> dict[str, Any]:
        return {"version": 1, "batch": self.batch,
                "groups": [[d, *g] for d, g in self.groups],
                "ends": [[t, p, e] for (t, p), e in sorted(self.ends.items())]}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "Manifest":
        return cls(int(raw["batch"]), [(g[0], StagedGroup(*g[1:])) for g in raw["groups"]],
                   {(t, int(p)): int(e) for t, p, e in raw["ends"]})

    def files(self) -> set[str]:
        return {g.name for _, g in self.groups}

    def by_partition(self) -> list[tuple[TP, list[tuple[str, StagedGroup]]]]:
        """The groups partition by partition (they are sorted so)."""
        return [(tp, list(items)) for tp, items in
                groupby(self.groups, key=lambda x: (x[1].topic, x[1].partition))]


def make_manifest(wd: WriteDir, batch: int, groups: list[tuple[str, StagedGroup]],
                  timeout_ms: int) -> Manifest:
    """The manifest of ``groups`` (staging subdirectory, group): sorted by partition,
    with each partition's end offset now."""
    groups = sorted(groups, key=lambda x: (x[1].topic, x[1].partition, x[1].name))
    ends = {}
    for tp in {(g.topic, g.partition) for _, g in groups}:
        with Log.open(partition_dir(wd.root, *tp), readonly=True) as log:
            ends[tp] = log.end_offset
    return Manifest(batch, groups, ends)


def publish(wd: WriteDir, m: Manifest, resumed: bool, timeout_ms: int) -> dict[TP, range]:
    """Append each group of ``m`` as one atomic append, the partitions side by side
    (a thread each), each fsynced once its groups are in; with ``resumed`` (a
    committer died inside), only the groups not found published after the recorded
    end offsets. Returns when every partition is fsynced (an error: the first
    partition's that failed, once the others are done), per partition the offsets
    appended now."""
    parts = m.by_partition()
    with ExitStack() as opened:
        logs = [opened.enter_context(Log.open(partition_dir(wd.root, *tp), multi_writer=True,
                                              lock_timeout_ms=timeout_ms)) for tp, _ in parts]
        # partitions side by side: the copies and fsyncs wait for the kernel and the
        # disk, not for Python
        with ThreadPoolExecutor(max_workers=min(8, len(parts) or 1)) as pool:
            done = list(pool.map(lambda p: _publish_partition(wd, m, resumed, *p),
                                 [(tp, todo, log) for (tp, todo), log in zip(parts, logs)]))
    return {tp: r for (tp, _), r in zip(parts, done) if r is not None}


def _publish_partition(wd: WriteDir, m: Manifest, resumed: bool, tp: TP,
                       todo: list[tuple[str, StagedGroup]], log: Log) -> range | None:
    """``publish`` in one partition: its groups appended (those not found published,
    ``resumed``), then fsynced; the offsets appended."""
    skip: set[int] = set()
    if resumed:
        skip = published(log, m.ends[tp], [_checksums(wd, d, g) for d, g in todo])
    first = last = None
    for i, (d, g) in enumerate(todo):
        if i in skip:
            continue
        with staged_batches(os.path.join(wd.path, d, g.name), g) as batches:
            r = append_encoded(log, batches, atomic=True)
        first = r.start if first is None else first
        last = r.stop
    log.flush()
    return None if first is None or last is None else range(first, last)


@contextmanager
def staged_batches(path: str, g: StagedGroup) -> Iterator[list[tuple[Any, int, int, int]]]:
    """The batches of a staging file, checked (framing, checksums, what the task
    reported), as ``seglog.log.append_encoded`` takes them: views of the file mapped."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise SeglogError(f"the staging file {path} is missing: the sink cannot publish "
                          f"those rows (removed by hand?)") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size != g.size:
            raise CorruptRecordError(f"staging file holds {size} bytes, not the {g.size} "
                                     f"its task wrote", path)
        if not size:
            yield []
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            view = memoryview(mm)
            out: list[tuple[Any, int, int, int]] = []
            try:
                pos = records = 0
                for pos, hdr in _format.batches_in(view, 0, size):
                    if not _format.checksum_ok(view, pos, hdr):
                        raise CorruptRecordError("checksum mismatch in a staging file", path, pos)
                    n = hdr.size
                    count = hdr.last_offset_delta + 1
                    out.append((view[pos:pos + n], count, hdr.max_timestamp, n))
                    records += count
                    pos += n
                if pos != size or len(out) != g.batches or records != g.records:
                    raise CorruptRecordError(f"staging file does not hold the {g.batches} "
                                             f"batches of {g.records} records its task wrote",
                                             path, pos)
                yield out
            finally:
                for b in out:
                    b[0].release()
                out.clear()
                view.release()


def _checksums(wd: WriteDir, d: str, g: StagedGroup) -> list[int]:
    out = []
    with staged_batches(os.path.join(wd.path, d, g.name), g) as batches:
        for b in batches:
            hdr = _format.read_header(b[0], 0)    # staged whole: never short
            assert hdr is not None
            out.append(hdr.checksum)
    return out


def published(log: Log, start: int, groups: list[list[int]]) -> set[int]:
    """Which of ``groups`` (each its batches' checksums) were appended to ``log`` at or
    after offset ``start``: found as that run of batches there (a group is appended
    whole and contiguous; the checksum covers its records, timestamps included,
    not the offsets). Offsets retention deleted meanwhile cannot be looked at: a
    group not found then is taken as not published, with a warning."""
    first = log.start_offset
    if first > start:
        _log.warning("seglog: retention deleted offsets %d to %d of %s before the sink could "
                     "check what it had published there; rows found nowhere are published "
                     "again", start, first - 1, log.path)
    seen: list[int] = []
    off, end = max(start, first), log.end_offset
    while off < end:
        ms = log.read(off, 1 << 20)
        buf = ms.buffer()
        for _, hdr in _format.batches_in(buf, 0, len(buf)):
            if hdr.last_offset >= start:
                seen.append(hdr.checksum)
        off = ms.next_offset
    at: dict[int, list[int]] = {}
    for i, c in enumerate(seen):
        at.setdefault(c, []).append(i)
    out = set()
    for k, sums in enumerate(groups):
        if sums and any(seen[i:i + len(sums)] == sums for i in at.get(sums[0], ())):
            out.add(k)
    return out


def anything_published(wd: WriteDir, m: Manifest) -> bool:
    """Whether any group of ``m`` is in its partition, looked for as a resumed
    commit looks (``published``), by readers (a stopped writer blocks nothing): after
    a commit that failed. A partition that did not grow past its recorded end holds
    none (its staging files are not read: they may be what failed); one whose
    offsets after the recorded end were deleted meanwhile cannot be looked at, and
    counts as published."""
    for tp, items in m.by_partition():
        with Log.open(partition_dir(wd.root, *tp), readonly=True) as log:
            if log.end_offset == m.ends[tp]:
                continue
            if log.start_offset > m.ends[tp] or published(
                    log, m.ends[tp], [_checksums(wd, d, g) for d, g in items]):
                return True
    return False


# -- a batch write's driver, and the writes whose drivers died ---------------------------
def _process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), None if it is gone or
    this system cannot tell (no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rindex(b")") + 2:].split()[19])


def _jvm() -> tuple[int, int] | None:
    """(pid, start) of the JVM this Python worker serves (its nearest ancestor
    running java), None where that cannot be found."""
    pid = os.getppid()
    for _ in range(8):
        if pid <= 1:
            return None
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            return None
        comm = stat[stat.index(b"(") + 1:stat.rindex(b")")]
        fields = stat[stat.rindex(b")") + 2:].split()
        if comm == b"java":
            return pid, int(fields[19])
        pid = int(fields[1])
    return None


def start_job(wd: WriteDir) -> None:
    """Make a batch write's directory, holding the record of the process that drives
    it (its JVM, on this machine in this boot), so that a later write can tell it
    died (``driver_alive``): made aside and renamed in whole, so that a job's
    directory without the record is one that ended."""
    jvm = _jvm()
    top = os.path.dirname(wd.path)
    make_dirs(top)
    new = os.path.join(top, ".new-" + wd.ident)
    os.mkdir(new)
    atomic_write(os.path.join(new, DRIVER), json.dumps(
        {"version": 1, "host": socket.gethostname(), "boot": boot_id(),
         "pid": jvm[0] if jvm else None, "start": jvm[1] if jvm else None}).encode())
    os.rename(new, wd.path)
    fsync_dir(top)


def driver_alive(wd: WriteDir) -> bool:
    """False when the write has ended (no driver record) or its driver is proven
    gone: it ran on this machine and the machine restarted since, or its JVM is no
    longer running. Anything else (another machine, a system without /proc, a
    record that cannot be read) counts as alive."""
    try:
        with open(os.path.join(wd.path, DRIVER), "rb") as f:
            d = json.loads(f.read())
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True
    if d.get("host") != socket.gethostname():
        return True
    boot = boot_id()
    if boot is not None and d.get("boot") not in (None, boot):
        return False
    if d.get("pid") is None or d.get("start") is None:
        return True
    return _process_start(int(d["pid"])) == int(d["start"])


def sweep_jobs(root: str, timeout_ms: int, mine: str | None = None) -> None:
    """Batch writes whose drivers died: one that died inside its commit, or whose
    commit failed after publishing part (its manifest there, its lock free), is
    finished, so it is all there (a failure says which write it was); one that died
    before (no manifest) had published nothing, and its staging files are removed,
    once its driver is proven gone (``driver_alive``); what tasks of ended writes
    left goes."""
    top = os.path.join(root, SPARK_DIR, "jobs")
    try:
        names = sorted(os.listdir(top))
    except FileNotFoundError:
        return
    for name in names:
        if name == mine or not _ID.fullmatch(name):
            continue
        wd = WriteDir(root, "job", name)
        with wd.locked(0, wait=False) as got:
            if not got:
                continue                 # its commit is running
            m = wd.manifest()
            if m is not None:
                _log.warning("seglog: finishing the commit of Spark write %s, which did not "
                             "finish (its driver died inside it, or it failed after "
                             "publishing part)", name)
                try:
                    publish(wd, m, resumed=True, timeout_ms=timeout_ms)
                except Exception as e:
                    e.add_note(
                        f"seglog: a sink write under {root} first finishes Spark write "
                        f"{name}, whose commit did not finish, and that failed. If the cause "
                        f"lasts (a damaged or missing staging file), that write's rows stay "
                        f"part published and the rest cannot be: move {wd.path} out of the "
                        f"way to write again")
                    raise
                wd.finish(m.batch)
            elif not driver_alive(wd):
                wd.remove()

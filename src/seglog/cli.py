"""The ``seglog`` command: inspect, check, repair and tend logs and topics.

    seglog dump PATH [--from OFF] [--to OFF] [--print-data] [--deep]
    seglog verify PATH|ROOT
    seglog recover PATH [--truncate-at-damage] [--yes]
    seglog stats PATH|ROOT
    seglog tail PATH|ROOT [TOPIC] [-f] [-n N] [--from-time ISO8601]
    seglog groups ROOT [GROUP]
    seglog compact PATH
    seglog retention PATH [--dry-run]

Every subcommand takes ``--json`` (one JSON document on stdout, or one per line for
``tail``). PATH is a log directory; ROOT a directory of topics (``<topic>-<p>``
partition logs). Reading commands take no lock and work beside a live writer.

Offsets are printed as Kafka prints them: a range is first..last, both included
(``offsets 0..962``); an end offset (one past the last, the next to assign) is
called one. JSON has ``start_offset``, ``last_offset`` and ``end_offset``. Bytes
are the bytes of stored batches; a writer's preallocated space is reported apart,
as reserved.

Exit codes: 0 done (verify: no damage); 1 damage found, or recovery refused; 2 bad
usage; 3 not a seglog log or topic root; 4 a writer holds the log (recover,
compact, retention need it); 5 cut not confirmed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import time
from typing import Any, Callable, Sequence

from . import _html, codec, recovery, repair
from ._files import MARKER, list_topics
from .consumer_group import GROUPS_DIR, describe_group, list_groups
from .errors import (CorruptRecordError, InvalidConfigError, LogLockedError, NotALogError,
                     OffsetOutOfRangeError, SeglogError)
from .log import Log
from .message import as_ms
from .retention import expired_prefix
from .topic import read_partition_count

EXIT_OK, EXIT_DAMAGE, EXIT_USAGE, EXIT_NOT_A_LOG, EXIT_LOCKED, EXIT_DECLINED = 0, 1, 2, 3, 4, 5


class _Progress:
    """bytes done / total, rate and ETA on stderr, only when it is a terminal."""

    def __init__(self, label: str, total: int, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.on = bool(getattr(self.stream, "isatty", lambda: False)()) and total > 0
        self.label, self.total, self.done = label, total, 0
        self.t0 = self.last = time.monotonic()

    def __call__(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.on and now - self.last >= 0.2:
            self.last = now
            rate = self.done / max(now - self.t0, 1e-9)
            eta = (self.total - self.done) / rate if rate else 0
            self.stream.write(f"\r{self.label}: {_mb(self.done)} / {_mb(self.total)} "
                              f"{rate / 1e6:7.1f} MB/s  ETA {eta:5.0f} s ")
            self.stream.flush()

    def close(self) -> None:
        if self.on:
            self.stream.write("\r" + " " * 70 + "\r")
            self.stream.flush()


def _version() -> str:
    try:
        return importlib.metadata.version("seglog")
    except importlib.metadata.PackageNotFoundError:   # run from a source tree
        return "(not installed)"


def _n(count: int, noun: str) -> str:
    """``1 segment``, ``2 segments``, ``1 batch``, ``3 batches``."""
    if count == 1:
        return f"1 {noun}"
    return f"{count:} {noun}{'es' if noun.endswith(('s', 'sh', 'ch', 'x')) else 's'}"


def _mb(n: int) -> str:
    return f"{n / 1e6:8.1f} MB"


# -- what a path is --------------------------------------------------------------------
def _is_log(path: str) -> bool:
    return os.path.isfile(os.path.join(path, MARKER))


def _not_a_log(path: str) -> str:
    """Why ``path`` is not a log, for a message."""
    if not os.path.isdir(path):
        return _no_dir(path)
    return f"{path} is not a seglog log (no {MARKER})"


def _no_dir(path: str) -> str:
    """Why ``path`` is no directory: missing, or something else (a file) is there."""
    if os.path.lexists(path):
        return f"{path} is not a directory: give a log directory or a root of topics"
    return f"{path}: no such directory"


def _require_log(path: str) -> None:
    if not _is_log(path):
        raise NotALogError(_not_a_log(path))


def _partitions(root: str, topic: str | None = None) -> list[tuple[str, int, str]]:
    """(topic, partition, log directory) under a topic root, in order. A partition
    the topic records but whose directory is missing is listed too: callers say so."""
    if not os.path.isdir(root):
        raise NotALogError(_no_dir(root))
    out: list[tuple[str, int, str]] = []
    names = sorted(os.listdir(root))
    topics = set(list_topics(root))
    for n in names:
        t, _, num = n.rpartition("-")
        if t and num.isdigit() and _is_log(os.path.join(root, n)):
            topics.add(t)
    for t in sorted(topics):
        if topic is not None and t != topic:
            continue
        count = read_partition_count(root, t)
        ps = range(count) if count else sorted(
            int(n.rpartition("-")[2]) for n in names
            if n.rpartition("-")[0] == t and n.rpartition("-")[2].isdigit())
        for p in ps:
            out.append((t, p, os.path.join(root, f"{t}-{p}")))
    if not out:
        raise NotALogError(f"{root} is neither a seglog log (no {MARKER}) nor a root of "
                           f"topics" + (f" holding {topic!r}" if topic else ""))
    return out


def _logs(path: str) -> list[tuple[str, str]]:
    """(name, log directory) for a log or every partition under a root."""
    if _is_log(path):
        return [(os.path.basename(os.path.abspath(path)), path)]
    return [(f"{t}-{p}", d) for t, p, d in _partitions(path)]


def _dir_bytes(path: str) -> int:
    """The segment files' sizes (a progress total; files may vanish meanwhile)."""
    total = 0
    for _, p in repair.segment_paths(path):
        try:
            total += os.path.getsize(p)
        except FileNotFoundError:
            pass
    return total


def _total(logs: list[tuple[str, str]]) -> int:
    return sum(_dir_bytes(d) for _, d in logs if _is_log(d))


# -- offsets and bytes, one convention -------------------------------------------------
def _span(start: int | None, end: int | None) -> str:
    """A log's offsets as Kafka prints them: first..last; without messages, its end."""
    if start is None or end is None:
        return "no segments"
    if end <= start:
        return f"no messages (end offset {end})"
    return f"offsets {start}..{end - 1}"


def _offsets(start: int | None, end: int | None) -> dict[str, int | None]:
    return {"start_offset": start,
            "last_offset": end - 1 if start is not None and end is not None and end > start
            else None,
            "end_offset": end}


def _bytes(stored: int, reserved: int) -> str:
    return f"{stored} bytes" + (f" (+{reserved} reserved)" if reserved else "")


# -- showing values safely -------------------------------------------------------------
def _show(b: bytes | None, limit: int) -> str:
    """UTF-8 text if it is printable, else escaped bytes; cut at ``limit``."""
    if b is None:
        return "null"
    part = bytes(b[:limit])
    s = _html.text(part, cut=len(b) > limit)
    # printable text is shown as it is (quoted, escapes only for quotes and
    # backslashes), not as \u escapes
    shown = json.dumps(s, ensure_ascii=False) if s is not None else repr(part)
    return shown + (f"...({len(b)} bytes)" if len(b) > limit else "")


def _header_key(k: str) -> str:
    """A header key as is if it is one printable word, else quoted with escapes: a
    key holding a newline, a space or '=' must not pass for more of the line (or a
    line of its own)."""
    if k and k.isprintable() and not any(c.isspace() or c in '="' for c in k):
        return k
    return json.dumps(k)


def _json_value(b: bytes | None, limit: int) -> Any:
    if b is None:
        return None
    part = bytes(b[:limit])
    s = _html.utf8(part, cut=len(b) > limit)
    return s if s is not None else {"hex": part.hex()}


_ts = _html.when


def _parse_time(s: str) -> int:
    try:
        return as_ms(s, "--from-time")
    except ValueError as e:
        raise InvalidConfigError(str(e)) from None


def _flags(attrs: int) -> str:
    names = [("keys", codec.F_KEYS), ("headers", codec.F_HEADERS),
             ("timestamps", codec.F_TIMESTAMPS), ("offset-deltas", codec.F_OFFSETS),
             ("tombstones", codec.F_NULL_VALUES), ("horizon", codec.F_HORIZON)]
    return ",".join(n for n, bit in names if attrs & bit) or "-"


def _codec_name(attrs: int) -> str:
    return {codec.CODEC_NONE: "none", codec.CODEC_LZ4: "lz4"}.get(attrs & codec.CODEC_MASK,
                                                                  "unknown")


# -- subcommands -----------------------------------------------------------------------
def cmd_dump(a: argparse.Namespace, out: Any) -> int:
    path = a.path
    _require_log(path)
    lowest = a.from_offset if a.from_offset is not None else 0
    if a.to_offset is not None and a.to_offset <= lowest:
        raise InvalidConfigError(f"--to {a.to_offset} must be above --from {lowest} "
                                 f"(--to is the first offset not shown)")
    batches: list[repair.BatchInfo] = []
    prog = _Progress("dump", _dir_bytes(path))
    try:
        rep = repair.check(path, prog, batches)
    finally:
        prog.close()
    lo = a.from_offset if a.from_offset is not None else -1
    hi = a.to_offset if a.to_offset is not None else 1 << 63
    shown = [b for b in batches if b.last_offset >= lo and b.base_offset < hi]
    note = None
    if not shown and (a.from_offset is not None or a.to_offset is not None):
        want = (f"offsets {a.from_offset if a.from_offset is not None else 0}.."
                + (f"{a.to_offset - 1}" if a.to_offset is not None else ""))
        note = (f"no batch holds {want}: the log has {_span(rep.start_offset, rep.end_offset)}"
                + (" up to the damage" if rep.problems else ""))
    if a.json:
        docs = []
        for b in shown:
            d: dict[str, Any] = {
                "segment": os.path.basename(b.segment), "position": b.position, "size": b.size,
                "base_offset": b.base_offset, "last_offset": b.last_offset, "count": b.count,
                "codec": _codec_name(b.attributes), "flags": _flags(b.attributes),
                "base_timestamp": b.base_timestamp, "max_timestamp": b.max_timestamp,
                "checksum": "valid"}
            if a.print_data:
                ms = _records(b, lo, hi)
                d["records"] = None if ms is None else [
                    {"offset": m[0], "timestamp": m[1], "key": _json_value(m[2], a.max_bytes),
                     "value": _json_value(m[3], a.max_bytes),
                     "headers": [[k, _json_value(v, a.max_bytes)] for k, v in m[4]]}
                    for m in ms]
                if ms is None:
                    d["records_gone"] = _GONE
            docs.append(d)
        json.dump({"path": path, **_offsets(rep.start_offset, rep.end_offset),
                   "batches": docs, "note": note, "problems": _problems(rep, a.deep)}, out,
                  indent=1)
        out.write("\n")
    else:
        seg = None
        for b in shown:
            if b.segment != seg:
                seg = b.segment
                out.write(f"segment {seg}\n")
            out.write(f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: "
                      f"{b.count} position: {b.position} size: {b.size} codec: "
                      f"{_codec_name(b.attributes)} flags: {_flags(b.attributes)} "
                      f"baseTimestamp: {b.base_timestamp} maxTimestamp: {b.max_timestamp} "
                      f"checksum: valid\n")
            ms = _records(b, lo, hi) if a.print_data else []
            if ms is None:
                out.write(f"| {_GONE}\n")
            for m in ms or ():
                hs = " ".join(f"{_header_key(k)}={_show(v, a.max_bytes)}" for k, v in m[4])
                out.write(f"| offset: {m[0]} timestamp: {m[1]} key: "
                          f"{_show(m[2], a.max_bytes)} value: {_show(m[3], a.max_bytes)}"
                          + (f" headers: {hs}" if hs else "") + "\n")
        for p in _problems(rep, a.deep):
            out.write(f"DAMAGE {p['file']} position {p['position']} offset {p['offset']}: "
                      f"{p['reason']}: {p['message']}\n")
        if note is not None:
            out.flush()
            sys.stderr.write(f"seglog: {note}\n")
    return EXIT_DAMAGE if _problems(rep, a.deep) else EXIT_OK


def _problems(rep: repair.CheckReport, deep: bool) -> list[dict[str, Any]]:
    # index problems are reported with --deep (dump) or always (verify)
    return [{"file": p.path, "position": p.position, "offset": p.offset, "reason": p.reason,
             "message": p.message} for p in rep.problems if deep or p.reason != "index"]


_GONE = "the records are gone: retention or compaction deleted the segment after it was read"


def _records(b: repair.BatchInfo, lo: int, hi: int) -> list[codec.MessageTuple] | None:
    """The batch's records in ``[lo, hi)``, read again from its file; None if a live
    writer's retention or compaction has deleted or replaced the file meanwhile."""
    try:
        with open(b.segment, "rb") as f:
            data = os.pread(f.fileno(), b.size, b.position)
    except FileNotFoundError:
        return None
    try:
        hdr = codec.read_header(data, 0, len(data))
    except CorruptRecordError:
        return None
    if (hdr is None or hdr[codec.H_BASE] != b.base_offset or codec.batch_size(hdr) != b.size
            or not codec.checksum_ok(data, 0, hdr)):
        return None          # another file under the name now (compaction's)
    return list(codec.decode_batch(data, 0, hdr, max(lo, 0), hi))


def _missing(d: str) -> repair.CheckReport:
    """A partition the topic records whose log is not there: damage."""
    return repair.CheckReport(path=d, problems=[repair.Problem(
        d, None, None, "missing", f"the topic has this partition, but {_not_a_log(d)}")])


def cmd_verify(a: argparse.Namespace, out: Any) -> int:
    logs = _logs(a.path)
    prog = _Progress("verify", _total(logs))
    reports = []
    try:
        for name, d in logs:
            reports.append((name, repair.check(d, prog) if _is_log(d) else _missing(d)))
    finally:
        prog.close()
    bad = [p for _, r in reports for p in r.problems]
    if a.json:
        json.dump({"ok": not bad, "logs": [{
            "log": name, "path": r.path, "segments": r.segments, "batches": r.batches,
            "messages": r.messages, "bytes": r.bytes, "reserved_bytes": r.reserved_bytes,
            **_offsets(r.start_offset, r.end_offset), "tail": r.tail,
            "vanished_segments": r.vanished, "superseded_segments": r.superseded,
            "problems": _problems(r, True)}
            for name, r in reports]}, out, indent=1)
        out.write("\n")
    else:
        for name, r in reports:
            state = "ok" if r.ok else f"DAMAGED ({len(r.problems)} problem(s))"
            out.write(f"{name}: {state}: {_n(r.segments, 'segment')}, "
                      f"{_n(r.batches, 'batch')}, {_n(r.messages, 'message')}, {_bytes(r.bytes, r.reserved_bytes)}, "
                      f"{_span(r.start_offset, r.end_offset)}"
                      + (" up to the damage (the rest is not read)" if r.stopped_at_damage
                         else "")
                      + (f", {len(r.vanished)} segment(s) deleted by retention or "
                         f"compaction during the check" if r.vanished else "")
                      + (f", {len(r.superseded)} segment(s) a compaction replaced and "
                         f"has not deleted yet (a writer's open deletes them)"
                         if r.superseded else "") + "\n")
            for p in r.problems:
                out.write(f"  DAMAGE {p.path} position {p.position} offset {p.offset}: "
                          f"{p.reason}: {p.message}\n")
        out.write(f"verified {len(reports)} log(s): "
                  + ("no damage\n" if not bad else f"{len(bad)} problem(s)\n"))
    return EXIT_DAMAGE if bad else EXIT_OK


def _plan_text(plan: repair.CutPlan) -> str:
    keeps = (f"the log then ends at offset {plan.offset}" if plan.start_offset is None
             else f"the log keeps {_span(plan.start_offset, plan.offset)}")
    lost = f"{plan.lost_messages} message(s) in batches with a good checksum"
    if plan.lost_end_offset is not None:
        lost += f" (offsets up to {plan.lost_end_offset - 1})"
    if plan.damaged_unread:
        lost += ", and whatever the damaged bytes held"
    return (f"first damage: {plan.path} position {plan.position} (offset {plan.offset}): "
            f"{plan.reason}: {plan.message}\n"
            f"cutting there: {keeps}; it loses {lost}: {plan.lost_bytes} bytes of data in "
            f"{1 + len(plan.later_segments)} segment file(s) ({len(plan.later_segments)} "
            f"later segment(s) deleted), and {plan.reserved_bytes} bytes of reserved space "
            f"(zeros); {plan.valid_after} batch(es) with a good checksum after the damage\n")


def _cut_text(c: recovery.Cut) -> str:
    name = os.path.basename(c.path)
    if c.reason == "deleted":
        return (f"  deleted the segment {name} (after the torn tail): {c.messages} "
                f"message(s) in batches with a good checksum, {c.data_bytes} bytes of "
                f"data\n")
    if not c.data_bytes:
        return (f"  dropped {c.reserved_bytes} bytes of reserved space at the end of {name} "
                f"(zeros the writer preallocated past its data): no data cut\n")
    return (f"  cut {name} at position {c.position} ({c.reason}): {c.data_bytes} bytes of "
            f"data ({c.messages} message(s) in batches with a good checksum), and "
            f"{c.reserved_bytes} bytes of reserved space (zeros)\n")


def cmd_recover(a: argparse.Namespace, out: Any, stdin: Any) -> int:
    path = a.path
    _require_log(path)
    result: dict[str, Any] = {"path": path}
    if a.truncate_at_damage:
        plan = repair.plan_cut(path)
        if plan is None:
            result["cut"] = None
        else:
            result["cut"] = {"path": plan.path, "position": plan.position,
                             "offset": plan.offset, "reason": plan.reason,
                             "message": plan.message,
                             "keeps": _offsets(plan.start_offset, plan.offset),
                             "lost_messages": plan.lost_messages,
                             "lost_last_offset": None if plan.lost_end_offset is None
                             else plan.lost_end_offset - 1,
                             "damaged_bytes_unread": plan.damaged_unread,
                             "lost_bytes": plan.lost_bytes,
                             "reserved_bytes": plan.reserved_bytes,
                             "later_segments": plan.later_segments,
                             "valid_batches_after": plan.valid_after}
            if not a.json:
                out.write(_plan_text(plan))
            if not a.yes:
                out.flush()
                sys.stderr.write("type 'yes' to cut the log there: ")
                sys.stderr.flush()
                if stdin.readline().strip() != "yes":
                    sys.stderr.write("not cut\n")
                    return EXIT_DECLINED
            repair.cut(plan)
    try:
        with Log.open(path) as log:
            rec = log.recovery
            result.update(_offsets(log.start_offset, log.end_offset))
    except CorruptRecordError as e:
        result["refused"] = str(e)
        if a.json:
            json.dump(result, out, indent=1)
            out.write("\n")
        else:
            out.write(f"recovery refused: {e}\nthe log holds damage that a crash does not "
                      f"explain; `seglog recover --truncate-at-damage {path}` cuts it at the "
                      f"first bad batch after showing what is lost\n")
        return EXIT_DAMAGE
    result["recovery"] = None if rec is None else {
        "recovery_point": rec.recovery_point, "same_boot": rec.same_boot,
        "segments_scanned": rec.segments_scanned, "scanned_bytes": rec.scanned_bytes,
        "cut_messages": rec.cut_messages, "cut_data_bytes": rec.cut_data_bytes,
        "reserved_bytes": rec.reserved_bytes,
        "truncated": [{"file": c.path, "position": c.position, "bytes": c.file_bytes,
                       "why": c.reason, "data_bytes": c.data_bytes,
                       "reserved_bytes": c.reserved_bytes, "messages": c.messages}
                      for c in rec.cuts if c.reason != "deleted"],
        "deleted_segments": rec.deleted_segments}
    if a.json:
        json.dump(result, out, indent=1)
        out.write("\n")
    else:
        if rec is None:
            out.write(f"{path}: clean (closed cleanly; nothing to recover: recovery reads "
                      f"no batch of a cleanly closed log, `seglog verify` reads them all)\n")
        else:
            out.write(f"{path}: recovered from the recovery point {rec.recovery_point}: "
                      f"scanned {rec.segments_scanned} segment(s), {rec.scanned_bytes} bytes\n")
            for c in rec.cuts:
                out.write(_cut_text(c))
            if rec.cuts:
                out.write(f"  in all: {rec.cut_messages} message(s) and {rec.cut_data_bytes} "
                          f"bytes of data cut, {rec.reserved_bytes} bytes of reserved space "
                          f"dropped\n")
        out.write(f"{_span(result['start_offset'], result['end_offset'])}\n")
    return EXIT_OK


def _scan_stats(d: str, prog: Callable[[int], None]) -> dict[str, Any]:
    """Counts from the batch headers, and lz4's ratio and distinct keys (an estimate:
    the number of distinct 64-bit key hashes, exact below 2**20 keys) from the records."""
    import xxhash
    st: dict[str, Any] = {"batches": 0, "messages": 0,
                          "min_timestamp": None, "max_timestamp": None,
                          "lz4_batches": 0, "lz4_stored": 0, "lz4_raw": 0}
    keys: set[int] = set()
    many = False
    info = repair.WalkInfo()
    for _, _pos, buf, p, hdr in repair.walk_log(d, prog, decode=False, info=info):
        st["batches"] += 1
        st["messages"] += hdr[codec.H_COUNT]
        size = codec.batch_size(hdr)
        lo_ts, hi_ts = hdr[codec.H_BASE_TS], hdr[codec.H_MAX_TS]
        st["min_timestamp"] = lo_ts if st["min_timestamp"] is None else min(st["min_timestamp"], lo_ts)
        st["max_timestamp"] = hi_ts if st["max_timestamp"] is None else max(st["max_timestamp"], hi_ts)
        attrs = hdr[codec.H_ATTRS]
        if attrs & codec.CODEC_MASK:
            st["lz4_batches"] += 1
            st["lz4_stored"] += size
        if attrs & codec.F_KEYS:
            for m in codec.decode_batch(buf, p, hdr):
                if attrs & codec.CODEC_MASK:
                    st["lz4_raw"] += len(m[3] or b"") + len(m[2] or b"")
                if m[2] is not None and not many:
                    keys.add(xxhash.xxh3_64_intdigest(m[2]))
                    many = len(keys) >= 1 << 20
        elif attrs & codec.CODEC_MASK:
            st["lz4_raw"] += sum(len(m[3] or b"") for m in codec.decode_batch(buf, p, hdr))
    st["distinct_keys"] = len(keys) if not many else f">= {len(keys)}"
    return {"segments": len(info.listed) - len(info.vanished) - len(info.superseded),
            "bytes": info.stored_bytes,
            "reserved_bytes": info.reserved_bytes,
            **_offsets(info.start_offset, info.end_offset), **st}


def cmd_stats(a: argparse.Namespace, out: Any) -> int:
    logs = _logs(a.path)
    prog = _Progress("stats", _total(logs))
    rows: list[dict[str, Any]] = []
    try:
        for name, d in logs:
            if not _is_log(d):
                rows.append({"log": name, "error": _missing(d).problems[0].message})
                continue
            try:
                rows.append({"log": name, **_scan_stats(d, prog)})
            except CorruptRecordError as e:
                rows.append({"log": name, "error": f"damage: {e}"})
    finally:
        prog.close()
    code = EXIT_DAMAGE if any("error" in r for r in rows) else EXIT_OK
    good = [r for r in rows if "error" not in r]
    if a.json:
        json.dump({"path": a.path, "logs": rows}, out, indent=1)
        out.write("\n")
        return code
    for r in rows:
        if "error" in r:
            out.write(f"{r['log']}: {r['error']}\n")
            continue
        span = (f"{_ts(r['min_timestamp'])} .. {_ts(r['max_timestamp'])}"
                if r["min_timestamp"] is not None else "-")
        ratio = (f"{r['lz4_stored'] / r['lz4_raw']:.2f}x over {r['lz4_batches']} lz4 batches"
                 if r["lz4_raw"] else "none")
        out.write(f"{r['log']}: {_n(r['segments'], 'segment')}, "
                  f"{_bytes(r['bytes'], r['reserved_bytes'])}, "
                  f"{_n(r['messages'], 'message')} in {_n(r['batches'], 'batch')}, "
                  f"{_span(r['start_offset'], r['end_offset'])}, time {span}, compression "
                  f"{ratio}, distinct keys {r['distinct_keys']}\n")
    if len(rows) > 1:
        stored, reserved = (sum(r[k] for r in good) for k in ("bytes", "reserved_bytes"))
        out.write(f"total: {_n(sum(r['segments'] for r in good), 'segment')}, "
                  f"{_bytes(stored, reserved)}, "
                  f"{_n(sum(r['messages'] for r in good), 'message')}"
                  + (f"; {len(rows) - len(good)} log(s) unreadable" if len(good) < len(rows)
                     else "") + "\n")
    return code


def cmd_tail(a: argparse.Namespace, out: Any) -> int:
    if _is_log(a.path):
        if a.topic is not None:
            raise InvalidConfigError(f"{a.path} is a log; TOPIC applies to a root of topics")
        targets: list[tuple[str | None, int | None, str]] = [(None, None, a.path)]
    else:
        if not os.path.isdir(a.path):
            raise NotALogError(_not_a_log(a.path))
        if a.topic is None:
            raise InvalidConfigError("TOPIC is required with a root of topics")
        targets = [(t, p, d) for t, p, d in _partitions(a.path, a.topic)]
    since = _parse_time(a.from_time) if a.from_time is not None else None
    # -n caps what is printed before following; without it, --from-time prints all
    # from that time on and a plain tail the last 10
    n = a.n if a.n is not None else (None if since is not None else 10)
    logs: list[tuple[str | None, int | None, Log]] = []
    code = EXIT_OK
    try:
        for t, p, d in targets:
            if not _is_log(d):
                sys.stderr.write(f"seglog: {t}-{p}: {_missing(d).problems[0].message}\n")
                code = EXIT_DAMAGE
                continue
            logs.append((t, p, Log.open(d, readonly=True)))
        pos = []
        for _, _, log in logs:
            end = log.end_offset
            first = log.start_offset
            if since is not None:
                at = log.offset_for_time(since)
                first = end if at is None else at
            pos.append(first if n is None else _last_n(log, first, end, n))
        while True:
            for i, (t, p, log) in enumerate(logs):
                pos[i] = _print_from(out, a, t, p, log, pos[i])
            out.flush()
            if not a.follow:
                return code
            time.sleep(0.1)
    except KeyboardInterrupt:
        return code
    finally:
        for _, _, log in logs:
            log.close()


def _last_n(log: Log, first: int, end: int, n: int) -> int:
    """Where the last ``n`` messages from ``first`` on start. Offsets count messages
    only where nothing was compacted away: in a compacted log, the window before
    the end is widened until it holds ``n`` messages (or reaches ``first``)."""
    lo = max(first, end - n)
    if n == 0 or not log.config.compacted:
        return lo
    while True:
        try:
            offsets = [m[0] for m in log.iter(lo, end)]
        except OffsetOutOfRangeError:       # retention went past lo: print from there
            return max(lo, log.start_offset)
        if len(offsets) >= n:
            return offsets[-n]
        if lo <= first:
            return lo
        lo = max(first, end - 2 * (end - lo))


def _print_from(out: Any, a: argparse.Namespace, t: str | None, p: int | None, log: Log,
                pos: int) -> int:
    """Print the messages of ``log`` from ``pos`` to its end now; return the next
    position. Messages retention deletes before they are printed are said to be gone."""
    end = log.end_offset          # once: what is appended after it is the next round's
    for _ in range(64):
        try:
            for m in log.iter(pos, end):
                _print_message(out, a, t, p, m)
                pos = m[0] + 1
            return max(pos, end)
        except OffsetOutOfRangeError:
            start = log.start_offset
            if start <= pos:
                raise
            out.flush()
            sys.stderr.write(f"seglog: {'' if t is None else f'{t}-{p}: '}offsets {pos}.."
                             f"{start - 1} were deleted by retention before they were "
                             f"printed\n")
            pos = start
            end = max(end, start)
    return pos


def _print_message(out: Any, a: argparse.Namespace, t: str | None, p: int | None,
                   m: codec.MessageTuple) -> None:
    if a.json:
        d: dict[str, Any] = {} if t is None else {"topic": t, "partition": p}
        d.update(offset=m[0], timestamp=m[1], key=_json_value(m[2], a.max_bytes),
                 value=_json_value(m[3], a.max_bytes),
                 headers=[[k, _json_value(v, a.max_bytes)] for k, v in m[4]])
        out.write(json.dumps(d) + "\n")
    else:
        where = "" if t is None else f"{t}-{p} "
        out.write(f"{where}{m[0]} {_ts(m[1])} key={_show(m[2], a.max_bytes)} "
                  f"{_show(m[3], a.max_bytes)}\n")


def _require_root(root: str) -> None:
    """``root`` is a root of topics: a directory (not a log) holding topics or groups."""
    if _is_log(root):
        raise NotALogError(f"{root} is a log directory, not a root of topics: give the "
                           f"directory that holds the topics")
    if not os.path.isdir(root):
        raise NotALogError(f"{root} is not a directory: give a root of topics")
    if not os.path.isdir(os.path.join(root, GROUPS_DIR)):
        _partitions(root)          # NotALogError unless it holds topics


def cmd_groups(a: argparse.Namespace, out: Any) -> int:
    _require_root(a.root)
    if a.group is None:
        descs = [describe_group(a.root, g) for g in list_groups(a.root)]
        if a.json:
            json.dump({"groups": descs}, out, indent=1)
            out.write("\n")
        else:
            for d in descs:
                lags = [v["lag"] for v in d["partitions"].values()]
                known = [x for x in lags if x is not None]
                # a partition without a commit has no lag: counting it as 0 would call a
                # group that never committed caught up
                lag = str(sum(known)) if known else "-"
                if len(known) < len(lags):
                    lag += f" ({len(lags) - len(known)} partition(s) never committed)"
                down = sum(1 for v in d["members"].values() if v["status"] != "alive")
                out.write(f"{d['group']}: generation {d['generation']}, "
                          f"{len(d['members'])} member(s)"
                          f"{f' ({down} dead or silent)' if down else ''}, lag {lag}\n")
            if not descs:
                out.write(f"no consumer groups under {a.root}\n")
        return EXIT_OK
    d = describe_group(a.root, a.group)
    if a.json:
        json.dump(d, out, indent=1)
        out.write("\n")
        return EXIT_OK
    out.write(f"group {d['group']}: generation {d['generation']}, assignor {d['assignor']}, "
              f"{len(d['members'])} member(s)\n")
    for m, v in d["members"].items():
        out.write(f"  member {m}: {v['status']}, "
                  f"{', '.join(f'{t}-{p}' for t, p in v['assignment']) or 'no partitions'}\n")
    out.write(f"{'TOPIC-PARTITION':<24} {'OWNER':<32} {'COMMITTED':>12} {'END':>12} "
              f"{'LAG':>10}\n")
    for tp, v in d["partitions"].items():
        out.write(f"{tp:<24} {str(v['owner'] or '-'):<32} "
                  f"{str(v['committed'] if v['committed'] is not None else '-'):>12} "
                  f"{str(v['end'] if v['end'] is not None else '-'):>12} "
                  f"{str(v['lag'] if v['lag'] is not None else '-'):>10}\n")
    return EXIT_OK


def cmd_compact(a: argparse.Namespace, out: Any) -> int:
    _require_log(a.path)
    with Log.open(a.path) as log:
        before = sum(s.size for s in log.segments)       # stored bytes, not reservations
        if "compact" not in log.config.cleanup_policy:
            raise InvalidConfigError(f"{a.path} has cleanup_policy "
                                     f"{log.config.cleanup_policy!r}: nothing to compact")
        st = log.compact()
    if a.json:
        json.dump({"path": a.path, "skipped": st.skipped, "segments_before": st.segments_before,
                   "segments_after": st.segments_after, "bytes_before": st.bytes_before,
                   "bytes_after": st.bytes_after, "records_read": st.records_read,
                   "records_kept": st.records_kept,
                   "tombstones_dropped": st.tombstones_dropped}, out)
        out.write("\n")
    elif st.skipped:
        out.write(f"{a.path}: nothing compacted: {st.skipped}\n")
    else:
        out.write(f"{a.path}: compacted {st.segments_before} segment(s) of {st.bytes_before} "
                  f"bytes into {st.segments_after} of {st.bytes_after}; kept "
                  f"{st.records_kept} of {st.records_read} records, dropped "
                  f"{st.tombstones_dropped} tombstone(s); the log stored {before} bytes "
                  f"before (replaced segments linger, renamed aside, for "
                  f"file_delete_delay_ms)\n")
    return EXIT_OK


def cmd_retention(a: argparse.Namespace, out: Any) -> int:
    _require_log(a.path)
    now = int(time.time() * 1000)
    with Log.open(a.path, readonly=a.dry_run) as log:
        cfg = log.config
        segs = log.segments
        n = 0
        if "delete" in cfg.cleanup_policy:
            n = expired_prefix(segs, now, cfg.retention_ms, cfg.retention_bytes)
        due = [{"base_offset": s.base_offset, "size": s.size, "max_timestamp": s.max_timestamp}
               for s in segs[:n]]
        if not a.dry_run:
            log.enforce_retention(now)
            start = log.start_offset
        else:
            # where the start offset goes once the due prefix is gone, as the real run
            # moves it: the first kept segment's base offset
            start = max(log.start_offset, segs[n].base_offset) if n else log.start_offset
    if a.json:
        json.dump({"path": a.path, "dry_run": a.dry_run, "segments": due,
                   "start_offset": start}, out)
        out.write("\n")
    else:
        verb = "would delete" if a.dry_run else "deleted"
        out.write(f"{a.path}: {verb} {len(due)} segment(s), "
                  f"{sum(d['size'] for d in due)} bytes\n")
        for d in due:
            out.write(f"  segment at offset {d['base_offset']}: {d['size']} bytes, newest "
                      f"record {_ts(d['max_timestamp']) if d['max_timestamp'] >= 0 else '-'}\n")
        verb = ("would become" if due else "stays") if a.dry_run else "now"
        out.write(f"log start offset {verb} {start}\n")
    return EXIT_OK


# -- the parser ------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    ap = argparse.ArgumentParser(prog="seglog", description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1], formatter_class=fmt)
    ap.add_argument("--version", action="version", version=f"seglog {_version()}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help: str, examples: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, formatter_class=fmt,
                           epilog="examples:\n" + examples)
        p.add_argument("--json", action="store_true", help="print JSON for machines")
        return p

    p = add("dump", "Batches of a log's segments as kafka-dump-log shows them",
            "  seglog dump data/events\n"
            "  seglog dump data/events --from 1000 --to 1010 --print-data\n"
            "  seglog dump data/events --deep --json")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--from", dest="from_offset", type=int, help="first offset to show")
    p.add_argument("--to", dest="to_offset", type=int, help="show offsets below this")
    p.add_argument("--print-data", action="store_true", help="show the records too")
    p.add_argument("--deep", action="store_true", help="check the index files too")
    p.add_argument("--max-bytes", type=int, default=64, help="cut values at (default 64)")

    p = add("verify", "Read every batch and index entry; exit 1 on damage",
            "  seglog verify data/events\n  seglog verify data          # every partition of "
            "every topic\n  seglog verify data --json")
    p.add_argument("path", metavar="PATH|ROOT")

    p = add("recover", "Run recovery and report what it did; cut at damage on request",
            "  seglog recover data/events\n"
            "  seglog recover data/events --truncate-at-damage        # shows, then asks\n"
            "  seglog recover data/events --truncate-at-damage --yes")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--truncate-at-damage", action="store_true",
                   help="cut the log at its first bad batch (after confirmation): the "
                        "way out when the library refuses to open it")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    p = add("stats", "Segments, bytes, messages, offsets, time span, compression, keys",
            "  seglog stats data/events\n  seglog stats data --json")
    p.add_argument("path", metavar="PATH|ROOT")

    p = add("tail", "The last messages of a log or topic; -f follows",
            "  seglog tail data/events -n 20\n  seglog tail data orders -f\n"
            "  seglog tail data orders --from-time 2026-11-23T10:00:00Z --json")
    p.add_argument("path", metavar="PATH|ROOT")
    p.add_argument("topic", metavar="TOPIC", nargs="?")
    p.add_argument("-f", "--follow", action="store_true", help="wait for new messages")
    p.add_argument("-n", type=int, default=None,
                   help="at most the last N messages per partition (default 10; with "
                        "--from-time, all from that time)")
    p.add_argument("--from-time", help="start at the first message at/after this time")
    p.add_argument("--max-bytes", type=int, default=200, help="cut values at (default 200)")

    p = add("groups", "Consumer groups: members, generation, owner, committed, end, lag",
            "  seglog groups data\n  seglog groups data billing\n  seglog groups data billing "
            "--json")
    p.add_argument("root", metavar="ROOT")
    p.add_argument("group", metavar="GROUP", nargs="?")

    p = add("compact", "Compact a log now (cleanup_policy must include compact)",
            "  seglog compact data/users")
    p.add_argument("path", metavar="PATH")

    p = add("retention", "Delete the segments retention says are due",
            "  seglog retention data/events --dry-run\n  seglog retention data/events")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--dry-run", action="store_true", help="say what would go; delete nothing")
    return ap


def main(argv: Sequence[str] | None = None, out: Any = None, stdin: Any = None) -> int:
    """Run the command line; return the exit code."""
    out = out or sys.stdout
    a = _parser().parse_args(argv)
    for name, flag in (("n", "-n"), ("max_bytes", "--max-bytes"), ("from_offset", "--from"),
                       ("to_offset", "--to")):
        if getattr(a, name, 1) is not None and getattr(a, name, 1) < 0:
            sys.stderr.write(f"seglog: {flag} must be >= 0\n")
            return EXIT_USAGE
    try:
        if a.command == "recover":
            return cmd_recover(a, out, stdin or sys.stdin)
        return {"dump": cmd_dump, "verify": cmd_verify, "stats": cmd_stats, "tail": cmd_tail,
                "groups": cmd_groups, "compact": cmd_compact,
                "retention": cmd_retention}[a.command](a, out)
    except NotALogError as e:
        sys.stderr.write(f"seglog: {e}\n")
        return EXIT_NOT_A_LOG
    except LogLockedError as e:
        sys.stderr.write(f"seglog: {e}\n")
        return EXIT_LOCKED
    except InvalidConfigError as e:
        sys.stderr.write(f"seglog: {e}\n")
        return EXIT_USAGE
    except CorruptRecordError as e:
        sys.stderr.write(f"seglog: damage: {e}\n")
        return EXIT_DAMAGE
    except BrokenPipeError:        # `seglog dump ... | head`
        return EXIT_OK
    except (SeglogError, OSError) as e:
        sys.stderr.write(f"seglog: {e}\n")
        return EXIT_DAMAGE


def run() -> None:
    """The console script."""
    sys.exit(main())

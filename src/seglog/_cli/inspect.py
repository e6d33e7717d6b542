"""The ``seglog`` commands that read and take no lock: ``dump``, ``verify``, ``stats``
and ``tail`` (docs/CLI.md; ``groups`` is ``_cli.groups``). They work beside a live
writer."""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import time
from typing import IO, Any, Callable  # Any: values of the JSON documents --json prints

from . import kafka as _cli_kafka
from .._codec import decode as _decode, format as _format
from .._views import verdict as _verdict
from .. import repair
from .output import (EXIT_DAMAGE, EXIT_OK, Col, Progress, codec_name, flags_text, headers_text,
                     json_value, offset_fields, plural, problem_dicts, show_value, span_text,
                     stake_dict, table, width)
from .paths import (Found, Target, find_logs, is_log, missing_report, not_a_log, partitions,
                    require_log, total_bytes)
from .._views.html import duration, num, size, when
from ..errors import CorruptRecordError, InvalidConfigError, NotALogError, OffsetOutOfRangeError
from ..log import Log
from .._codec.records import as_ms


def _parse_time(s: str) -> int:
    try:
        return as_ms(s, "--from-time")
    except ValueError as e:
        raise InvalidConfigError(str(e)) from None


# -- dump --------------------------------------------------------------------------------
def cmd_dump(a: argparse.Namespace, out: IO[str]) -> int:
    path = a.path
    kafka_parts = _cli_kafka.targets(path)
    if kafka_parts is not None:
        return _cli_kafka.dump(a, out, kafka_parts)
    require_log(path)
    lowest = a.from_offset if a.from_offset is not None else 0
    if a.to_offset is not None and a.to_offset <= lowest:
        raise InvalidConfigError(f"--to {a.to_offset} must be above --from {lowest} "
                                 f"(--to is the first offset not shown)")
    ranged = (a.from_offset is not None or a.to_offset is not None) and not a.deep
    batches: list[repair.BatchInfo] = []
    found: repair.CheckReport | repair.RangeRead
    if ranged:
        # through the offset index: only the part of the log that holds the range
        found = repair.read_range(path, lowest, a.to_offset)
        batches = found.batches
    else:
        prog = Progress("dump", repair.data_bytes(path))
        try:
            found = repair.check(path, prog, batches)
        finally:
            prog.close()
    lo = a.from_offset if a.from_offset is not None else -1
    hi = a.to_offset if a.to_offset is not None else 1 << 63
    shown = [b for b in batches if b.last_offset >= lo and b.base_offset < hi]
    note = None
    if not shown and (a.from_offset is not None or a.to_offset is not None):
        want = (f"offsets {lowest}.." + (f"{a.to_offset - 1}" if a.to_offset is not None
                                         else ""))
        if isinstance(found, repair.CheckReport):
            start, end = found.start_offset, found.end_offset
        else:
            start, end, _ = repair.extent(path)
        note = (f"no batch holds {want}: the log has {span_text(start, end)}"
                + (" up to the damage" if found.problems else ""))
    problems = problem_dicts(found, a.deep)
    if a.json:
        docs = [_batch_json(b, a, lo, hi) for b in shown]
        doc: dict[str, Any] = {"path": path, "batches": docs, "note": note,
                               "problems": problems}
        if isinstance(found, repair.CheckReport):
            doc.update(offset_fields(found.start_offset, found.end_offset))
        json.dump(doc, out, indent=1)
        out.write("\n")
    else:
        seg = None
        for b in shown:
            if b.segment != seg:
                seg = b.segment
                out.write(f"segment {seg}\n")
            out.write(f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: "
                      f"{b.count} position: {b.position} size: {b.size} codec: "
                      f"{codec_name(b.attributes)} flags: {flags_text(b.attributes)} "
                      f"baseTimestamp: {when(b.base_timestamp)} maxTimestamp: "
                      f"{when(b.max_timestamp)} checksum: valid\n")
            ms = reread_records(b, lo, hi) if a.print_data else []
            if ms is None:
                out.write(f"| {_GONE}\n")
            for m in ms or ():
                hs = headers_text(m[4], a.max_bytes)
                out.write(f"| offset: {m[0]} timestamp: {when(m[1])} key: "
                          f"{show_value(m[2], a.max_bytes)} value: {show_value(m[3], a.max_bytes)}"
                          + (f" headers: {hs}" if hs else "") + "\n")
        for p in found.problems:
            if a.deep or p.reason != "index":
                out.write(f"DAMAGE {p.path} position {p.position} offset {p.offset}: "
                          f"{_verdict.reason_text(p.reason, p.message)}\n")
        if note is not None:
            out.flush()
            sys.stderr.write(f"seglog: {note}\n")
    return EXIT_DAMAGE if problems else EXIT_OK


def _batch_json(b: repair.BatchInfo, a: argparse.Namespace, lo: int, hi: int
                ) -> dict[str, Any]:
    d: dict[str, Any] = {
        "segment": os.path.basename(b.segment), "position": b.position, "size": b.size,
        "base_offset": b.base_offset, "last_offset": b.last_offset, "count": b.count,
        "codec": codec_name(b.attributes), "flags": flags_text(b.attributes),
        "base_timestamp": b.base_timestamp, "max_timestamp": b.max_timestamp,
        "checksum": "valid"}
    if a.print_data:
        ms = reread_records(b, lo, hi)
        d["records"] = None if ms is None else [
            {"offset": m[0], "timestamp": m[1], "key": json_value(m[2], a.max_bytes),
             "value": json_value(m[3], a.max_bytes),
             "headers": [[k, json_value(v, a.max_bytes)] for k, v in m[4]]}
            for m in ms]
        if ms is None:
            d["records_gone"] = _GONE
    return d


_GONE = "the records are gone: retention or compaction deleted the segment after it was read"


def reread_records(b: repair.BatchInfo, lo: int, hi: int) -> list[_format.MessageTuple] | None:
    """The batch's records in ``[lo, hi)``, read again from its file; None if a live
    writer's retention or compaction has deleted or replaced the file meanwhile."""
    try:
        with open(b.segment, "rb") as f:
            data = os.pread(f.fileno(), b.size, b.position)
    except FileNotFoundError:
        return None
    try:
        hdr = _format.read_header(data, 0, len(data))
    except CorruptRecordError:
        return None
    if (hdr is None or hdr.base_offset != b.base_offset or hdr.size != b.size
            or not _format.checksum_ok(data, 0, hdr)):
        return None          # another file under the name now (compaction's)
    return list(_decode.decode_batch(data, 0, hdr, max(lo, 0), hi))


# -- verify ------------------------------------------------------------------------------
def _check(t: Target, prog: Progress) -> repair.CheckReport:
    return missing_report(t.path) if t.missing else repair.check(t.path, prog)


def cmd_verify(a: argparse.Namespace, out: IO[str]) -> int:
    kafka_parts = _cli_kafka.targets(a.path)
    if kafka_parts is not None:
        return _cli_kafka.verify(a, out, kafka_parts)
    found = find_logs(a.path)
    prog = Progress("verify", total_bytes(found.targets))
    reports = []
    try:
        for t in found.targets:
            reports.append((t.name, _check(t, prog)))
    finally:
        prog.close()
    bad = [(n, r) for n, r in reports if not r.ok]
    if a.json:
        json.dump({"ok": not bad, "logs": [{
            "log": name, "path": r.path, "ok": r.ok, "segments": r.segments,
            "batches": r.batches, "messages": r.messages, "bytes": r.bytes,
            "reserved_bytes": r.reserved_bytes,
            **offset_fields(r.start_offset, r.end_offset), "tail": r.tail,
            "stopped_at_damage": r.stopped_at_damage,
            "vanished_segments": r.vanished, "superseded_segments": r.superseded,
            "problems": problem_dicts(r, True), "at_stake": stake_dict(r.cut),
            "next": None if r.ok else _verdict.next_step(r, name)}
            for name, r in reports],
            "skipped": [{"name": n, "why": why} for n, why in found.skipped]}, out, indent=1)
        out.write("\n")
        return EXIT_DAMAGE if bad else EXIT_OK
    room = width(out)
    for name, r in reports:
        out.write("\n".join(_verdict.report_lines(r, name, room)) + "\n")
    _skipped(out, a.path, found, room)
    n = len(reports)
    if bad:
        out.write(f"verified {plural(n, 'log')}: {len(bad)} DAMAGED "
                  f"({', '.join(x for x, _ in bad)})\n")
    else:
        out.write(f"verified {plural(n, 'log')}: no damage in any batch or index entry "
                  f"read\n")
    return EXIT_DAMAGE if bad else EXIT_OK


def _skipped(out: IO[str], path: str, found: Found, room: int) -> None:
    if found.skipped:
        out.write(f"skipped {plural(len(found.skipped), 'entry')} of {path} (not read):\n")
        for name, why in found.skipped:
            out.write("\n".join(_verdict.wrap(name, why, room)) + "\n")


# -- stats -------------------------------------------------------------------------------
def _scan_stats(d: str, prog: Callable[[int], None]) -> dict[str, Any]:
    """Counts from the batch headers, and lz4's ratio and distinct keys (an estimate:
    the number of distinct 64-bit key hashes, exact below 2**20 keys) from the
    records. At damage: the counts up to it, what the headers say lies after it,
    and the check's report (``report``, as ``verify`` says it)."""
    import xxhash
    st: dict[str, Any] = {"batches": 0, "messages": 0,
                          "min_timestamp": None, "max_timestamp": None,
                          "lz4_batches": 0, "lz4_stored": 0, "lz4_raw": 0}
    keys: set[int] = set()

    def visit(buf: bytes, p: int, hdr: _format.BatchHeader) -> None:
        lo_ts, hi_ts = hdr.base_timestamp, hdr.max_timestamp
        lo, hi = st["min_timestamp"], st["max_timestamp"]
        st["min_timestamp"] = lo_ts if lo is None else min(lo, lo_ts)
        st["max_timestamp"] = hi_ts if hi is None else max(hi, hi_ts)
        attrs = hdr.attributes
        lz4 = attrs & _format.CODEC_MASK
        if lz4:
            st["lz4_batches"] += 1
            st["lz4_stored"] += hdr.size
        if attrs & _format.F_KEYS:
            for m in _decode.decode_batch(buf, p, hdr):
                if lz4:
                    st["lz4_raw"] += len(m[3] or b"") + len(m[2] or b"")
                if m[2] is not None and len(keys) < 1 << 20:
                    keys.add(xxhash.xxh3_64_intdigest(m[2]))
        elif lz4:
            st["lz4_raw"] += sum(len(m[3] or b"") for m in _decode.decode_batch(buf, p, hdr))
    rep = repair.check(d, prog, visit=visit, decode=False)
    st["batches"], st["messages"] = rep.batches, rep.messages
    st["distinct_keys"] = len(keys) if len(keys) < 1 << 20 else f">= {len(keys):,}"
    row = {"segments": rep.segments, "bytes": rep.bytes, "reserved_bytes": rep.reserved_bytes,
           **offset_fields(rep.start_offset, rep.end_offset), **st}
    if rep.stopped_at_damage:
        cut = rep.cut
        row["damaged"] = {"problems": problem_dicts(rep, False), "at_stake": stake_dict(cut),
                          "read_messages": rep.messages, "read_bytes": rep.bytes,
                          "next": _verdict.next_step(rep, os.path.basename(d))}
        row["report"] = rep
        # what the batch headers say the log holds: before, in and after the damage
        row["messages"] = _verdict.total_messages(rep)
        if cut is not None:
            row["bytes"] = rep.bytes + cut.lost_bytes
            if cut.lost_end_offset is not None:
                row.update(offset_fields(rep.start_offset, cut.lost_end_offset))
    return row


def _ratio(r: dict[str, Any]) -> str:
    """How much smaller lz4 made its batches than their keys and values: ``-51%``."""
    if not r["lz4_raw"]:
        return "-"
    return f"{(r['lz4_stored'] / r['lz4_raw'] - 1) * 100:+.0f}%"


def cmd_stats(a: argparse.Namespace, out: IO[str]) -> int:
    kafka_parts = _cli_kafka.targets(a.path)
    if kafka_parts is not None:
        return _cli_kafka.stats(a, out, kafka_parts)
    found = find_logs(a.path)
    prog = Progress("stats", total_bytes(found.targets))
    rows: list[dict[str, Any]] = []
    try:
        for t in found.targets:
            if t.missing:
                rows.append({"log": t.name, "error": missing_report(t.path).problems[0].message})
                continue
            rows.append({"log": t.name, **_scan_stats(t.path, prog)})
    finally:
        prog.close()
    code = EXIT_DAMAGE if any("error" in r or "damaged" in r for r in rows) else EXIT_OK
    good = [r for r in rows if "error" not in r]
    if a.json:
        json.dump({"path": a.path, "logs": [{k: v for k, v in r.items() if k != "report"}
                                            for r in rows],
                   "skipped": [{"name": n, "why": why} for n, why in found.skipped]},
                  out, indent=1)
        out.write("\n")
        return code
    room = width(out)
    times = [t for r in good for t in (r["min_timestamp"], r["max_timestamp"]) if t is not None]
    fmt = _time_format(times)
    cols = [Col("LOG", rank=20, most=24), Col("MESSAGES", "r", 19), Col("SIZE", "r", 18),
            Col("OFFSETS", "r", 17), Col("SEGS", "r", 13),
            Col(f"TIME ({fmt[1]})", rank=16), Col("LZ4", "r", 15), Col("KEYS", "r", 14)]
    lines = []
    for r in rows:
        if "error" in r:
            lines.append([r["log"], "MISSING", "", "", "", "", "", ""])
            continue
        lo, hi = r["min_timestamp"], r["max_timestamp"]
        msgs = "?" if r["messages"] is None else num(r["messages"])
        lines.append([r["log"] + (" !" if "damaged" in r else ""), msgs, size(r["bytes"]),
                      _span(r["start_offset"], r["end_offset"]), str(r["segments"]),
                      "-" if lo is None else f"{fmt[0](lo)}..{fmt[0](hi)}",
                      _ratio(r), str(r["distinct_keys"]) if r["distinct_keys"] else "-"])
    out.write("\n".join(table(cols, lines, room)) + "\n")
    lo_all = min((r["min_timestamp"] for r in good if r["min_timestamp"] is not None),
                 default=None)
    hi_all = max((r["max_timestamp"] for r in good if r["max_timestamp"] is not None),
                 default=None)
    if len(rows) > 1:
        known = [r["messages"] for r in good if r["messages"] is not None]
        out.write(f"total: {plural(len(rows), 'log')}, {num(sum(known))} messages, "
                  f"{size(sum(r['bytes'] for r in good))} in "
                  f"{plural(sum(r['segments'] for r in good), 'segment')}\n")
    if lo_all is not None and hi_all is not None:
        out.write(f"time: {when(lo_all)} .. {when(hi_all)} ({duration(hi_all - lo_all)})\n")
    reserved = sum(r["reserved_bytes"] for r in good)
    if reserved:
        out.write(f"reserved: {size(reserved)} of zeros a writer preallocated past its data "
                  f"(not counted)\n")
    if any(r["lz4_raw"] for r in good):
        out.write("LZ4: the size of lz4 batches against their keys and values "
                  "(-51% = about half)\n")
    for r in rows:
        if "damaged" in r:
            out.write("\n".join(textwrap.wrap(
                f"{r['log']} !: DAMAGED: its numbers are what the batch headers say, up to "
                f"and after the damage; TIME, LZ4 and KEYS only up to it", room,
                subsequent_indent="    ")) + "\n")
            out.write("\n".join(_verdict.report_lines(r["report"], r["log"], room)[1:]) + "\n")
        elif "error" in r:
            out.write("\n".join(textwrap.wrap(f"{r['log']}: {r['error']}", room,
                                             subsequent_indent="    ")) + "\n")
    _skipped(out, a.path, found, room)
    return code


def _time_format(times: list[int]) -> tuple[Callable[[int], str], str]:
    """How to show times in the TIME column, and its header's note: to the minute,
    less what every time shares (``14:05`` when all fall on one day; that day in
    the header)."""
    if not times:
        return (lambda ms: when(ms)[:16] + "Z"), "UTC"
    lo, hi = when(min(times)), when(max(times))
    if lo[:10] == hi[:10]:
        return (lambda ms: when(ms)[11:16]), f"UTC, {lo[:10]}"
    if lo[:4] == hi[:4]:
        return (lambda ms: when(ms)[5:16]), f"UTC, {lo[:4]}"
    return (lambda ms: when(ms)[:16] + "Z"), "UTC"


def _span(start: int | None, end: int | None) -> str:
    if start is None or end is None:
        return "-"
    return f"{start}..{end - 1}" if end > start else f"empty ({end})"


# -- tail --------------------------------------------------------------------------------
def cmd_tail(a: argparse.Namespace, out: IO[str]) -> int:
    if is_log(a.path):
        if a.topic is not None:
            raise InvalidConfigError(f"{a.path} is a log; TOPIC applies to a root of topics")
        targets: list[tuple[str | None, int | None, str]] = [(None, None, a.path)]
    else:
        if not os.path.isdir(a.path):
            raise NotALogError(not_a_log(a.path))
        if a.topic is None:
            raise InvalidConfigError("TOPIC is required with a root of topics")
        targets = [(t, p, d) for t, p, d in partitions(a.path, a.topic)]
    since = _parse_time(a.from_time) if a.from_time is not None else None
    # -n caps what is printed before following; without it, --from-time prints all
    # from that time on and a plain tail the last 10
    n = a.n if a.n is not None else (None if since is not None else 10)
    logs: list[tuple[str | None, int | None, Log]] = []
    code = EXIT_OK
    try:
        for t, p, d in targets:
            if not is_log(d):
                sys.stderr.write(f"seglog: {t}-{p}: {missing_report(d).problems[0].message}\n")
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


def _print_from(out: IO[str], a: argparse.Namespace, t: str | None, p: int | None, log: Log,
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


def _print_message(out: IO[str], a: argparse.Namespace, t: str | None, p: int | None,
                   m: _format.MessageTuple) -> None:
    if a.json:
        d: dict[str, Any] = {} if t is None else {"topic": t, "partition": p}
        d.update(offset=m[0], timestamp=m[1], key=json_value(m[2], a.max_bytes),
                 value=json_value(m[3], a.max_bytes),
                 headers=[[k, json_value(v, a.max_bytes)] for k, v in m[4]])
        out.write(json.dumps(d) + "\n")
    else:
        where = "" if t is None else f"{t}-{p} "
        hs = headers_text(m[4], min(a.max_bytes, 40))
        out.write(f"{where}{m[0]} {when(m[1])} key={show_value(m[2], a.max_bytes)} "
                  f"{show_value(m[3], a.max_bytes)}" + (f" headers: {hs}" if hs else "")
                  + "\n")

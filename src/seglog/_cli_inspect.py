"""The ``seglog`` commands that read and take no lock: ``dump``, ``verify``, ``stats``,
``tail`` and ``groups`` (docs/CLI.md). They work beside a live writer."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable

from . import _cli_kafka, codec, repair
from ._cli_output import (EXIT_DAMAGE, EXIT_OK, Progress, bytes_text, codec_name, flags_text,
                          header_key, json_value, offset_fields, plural, problem_dicts,
                          show_value, span_text)
from ._cli_paths import (dir_bytes, is_log, logs_at, missing_report, not_a_log, partitions,
                         require_log, require_root, total_bytes)
from ._html import when
from .consumer_group import describe_group, list_groups
from .errors import CorruptRecordError, InvalidConfigError, NotALogError, OffsetOutOfRangeError
from .log import Log
from .message import as_ms


def _parse_time(s: str) -> int:
    try:
        return as_ms(s, "--from-time")
    except ValueError as e:
        raise InvalidConfigError(str(e)) from None


def cmd_dump(a: argparse.Namespace, out: Any) -> int:
    path = a.path
    kafka_parts = _cli_kafka.targets(path)
    if kafka_parts is not None:
        return _cli_kafka.dump(a, out, kafka_parts)
    require_log(path)
    lowest = a.from_offset if a.from_offset is not None else 0
    if a.to_offset is not None and a.to_offset <= lowest:
        raise InvalidConfigError(f"--to {a.to_offset} must be above --from {lowest} "
                                 f"(--to is the first offset not shown)")
    batches: list[repair.BatchInfo] = []
    prog = Progress("dump", dir_bytes(path))
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
        note = (f"no batch holds {want}: the log has {span_text(rep.start_offset, rep.end_offset)}"
                + (" up to the damage" if rep.problems else ""))
    if a.json:
        docs = []
        for b in shown:
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
            docs.append(d)
        json.dump({"path": path, **offset_fields(rep.start_offset, rep.end_offset),
                   "batches": docs, "note": note, "problems": problem_dicts(rep, a.deep)}, out,
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
                      f"{codec_name(b.attributes)} flags: {flags_text(b.attributes)} "
                      f"baseTimestamp: {b.base_timestamp} maxTimestamp: {b.max_timestamp} "
                      f"checksum: valid\n")
            ms = reread_records(b, lo, hi) if a.print_data else []
            if ms is None:
                out.write(f"| {_GONE}\n")
            for m in ms or ():
                hs = " ".join(f"{header_key(k)}={show_value(v, a.max_bytes)}" for k, v in m[4])
                out.write(f"| offset: {m[0]} timestamp: {m[1]} key: "
                          f"{show_value(m[2], a.max_bytes)} value: {show_value(m[3], a.max_bytes)}"
                          + (f" headers: {hs}" if hs else "") + "\n")
        for p in problem_dicts(rep, a.deep):
            out.write(f"DAMAGE {p['file']} position {p['position']} offset {p['offset']}: "
                      f"{p['reason']}: {p['message']}\n")
        if note is not None:
            out.flush()
            sys.stderr.write(f"seglog: {note}\n")
    return EXIT_DAMAGE if problem_dicts(rep, a.deep) else EXIT_OK


_GONE = "the records are gone: retention or compaction deleted the segment after it was read"


def reread_records(b: repair.BatchInfo, lo: int, hi: int) -> list[codec.MessageTuple] | None:
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


def cmd_verify(a: argparse.Namespace, out: Any) -> int:
    kafka_parts = _cli_kafka.targets(a.path)
    if kafka_parts is not None:
        return _cli_kafka.verify(a, out, kafka_parts)
    logs = logs_at(a.path)
    prog = Progress("verify", total_bytes(logs))
    reports = []
    try:
        for name, d in logs:
            reports.append((name, repair.check(d, prog) if is_log(d) else missing_report(d)))
    finally:
        prog.close()
    bad = [p for _, r in reports for p in r.problems]
    if a.json:
        json.dump({"ok": not bad, "logs": [{
            "log": name, "path": r.path, "segments": r.segments, "batches": r.batches,
            "messages": r.messages, "bytes": r.bytes, "reserved_bytes": r.reserved_bytes,
            **offset_fields(r.start_offset, r.end_offset), "tail": r.tail,
            "vanished_segments": r.vanished, "superseded_segments": r.superseded,
            "problems": problem_dicts(r, True)}
            for name, r in reports]}, out, indent=1)
        out.write("\n")
    else:
        for name, r in reports:
            state = "ok" if r.ok else f"DAMAGED ({len(r.problems)} problem(s))"
            out.write(f"{name}: {state}: {plural(r.segments, 'segment')}, "
                      f"{plural(r.batches, 'batch')}, {plural(r.messages, 'message')}, "
                      f"{bytes_text(r.bytes, r.reserved_bytes)}, "
                      f"{span_text(r.start_offset, r.end_offset)}"
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
        lo, hi = st["min_timestamp"], st["max_timestamp"]
        st["min_timestamp"] = lo_ts if lo is None else min(lo, lo_ts)
        st["max_timestamp"] = hi_ts if hi is None else max(hi, hi_ts)
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
            **offset_fields(info.start_offset, info.end_offset), **st}


def cmd_stats(a: argparse.Namespace, out: Any) -> int:
    kafka_parts = _cli_kafka.targets(a.path)
    if kafka_parts is not None:
        return _cli_kafka.stats(a, out, kafka_parts)
    logs = logs_at(a.path)
    prog = Progress("stats", total_bytes(logs))
    rows: list[dict[str, Any]] = []
    try:
        for name, d in logs:
            if not is_log(d):
                rows.append({"log": name, "error": missing_report(d).problems[0].message})
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
        span = (f"{when(r['min_timestamp'])} .. {when(r['max_timestamp'])}"
                if r["min_timestamp"] is not None else "-")
        ratio = (f"{r['lz4_stored'] / r['lz4_raw']:.2f}x over {r['lz4_batches']} lz4 batches"
                 if r["lz4_raw"] else "none")
        out.write(f"{r['log']}: {plural(r['segments'], 'segment')}, "
                  f"{bytes_text(r['bytes'], r['reserved_bytes'])}, "
                  f"{plural(r['messages'], 'message')} in {plural(r['batches'], 'batch')}, "
                  f"{span_text(r['start_offset'], r['end_offset'])}, time {span}, compression "
                  f"{ratio}, distinct keys {r['distinct_keys']}\n")
    if len(rows) > 1:
        stored, reserved = (sum(r[k] for r in good) for k in ("bytes", "reserved_bytes"))
        out.write(f"total: {plural(sum(r['segments'] for r in good), 'segment')}, "
                  f"{bytes_text(stored, reserved)}, "
                  f"{plural(sum(r['messages'] for r in good), 'message')}"
                  + (f"; {len(rows) - len(good)} log(s) unreadable" if len(good) < len(rows)
                     else "") + "\n")
    return code


def cmd_tail(a: argparse.Namespace, out: Any) -> int:
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
        d.update(offset=m[0], timestamp=m[1], key=json_value(m[2], a.max_bytes),
                 value=json_value(m[3], a.max_bytes),
                 headers=[[k, json_value(v, a.max_bytes)] for k, v in m[4]])
        out.write(json.dumps(d) + "\n")
    else:
        where = "" if t is None else f"{t}-{p} "
        out.write(f"{where}{m[0]} {when(m[1])} key={show_value(m[2], a.max_bytes)} "
                  f"{show_value(m[3], a.max_bytes)}\n")


def cmd_groups(a: argparse.Namespace, out: Any) -> int:
    require_root(a.root)
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

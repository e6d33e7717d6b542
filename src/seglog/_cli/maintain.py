"""The ``seglog`` commands that change a log and take the writer's lock: ``recover``
(and its cut at damage), ``compact`` and ``retention`` (``--dry-run`` takes none)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import time
from typing import IO, Any  # Any: values of the JSON documents --json prints

from .._views import verdict as _verdict
from .. import recovery, repair
from .output import (EXIT_DAMAGE, EXIT_DECLINED, EXIT_OK, offset_fields, problem_dicts, span_text,
                     stake_dict, width)
from .paths import require_log
from .._views.html import num, size, when
from ..errors import CorruptRecordError, InvalidConfigError
from ..log import Log
from ..retention import expired_prefix


def _plan_text(plan: repair.CutPlan) -> str:
    keeps = (f"the log then ends at offset {plan.offset}" if plan.start_offset is None
             else f"the log keeps {span_text(plan.start_offset, plan.offset)}")
    lost = f"{num(plan.lost_messages)} message(s) in batches with a good checksum"
    if plan.lost_end_offset is not None:
        lost += f" (offsets up to {plan.lost_end_offset - 1})"
    if plan.damaged_unread:
        lost += ", and whatever the damaged bytes held" + (
            f" ({num(plan.damaged_count)} message(s), as the damaged batch's header says)"
            if plan.damaged_count is not None else "")
    lines = [f"the cut at the first damage, before anything is changed:"]
    lines += _verdict.wrap("damage", f"{os.path.basename(plan.path)}, position {plan.position} (offset "
                           f"{plan.offset}): {_verdict.reason_text(plan.reason, plan.message)}")
    lines += _verdict.wrap("keeps", keeps)
    lines += _verdict.wrap("loses", f"{lost}: {size(plan.lost_bytes)} of data in "
                           f"{plan.lost_segments} segment file(s) ({len(plan.later_segments)} "
                           f"later segment(s) deleted), and {size(plan.reserved_bytes)} of "
                           f"reserved space (zeros)")
    lines += _verdict.wrap("after it", f"{num(plan.valid_after)} batch(es) with a good "
                           f"checksum (data a torn write would not have left)")
    return "\n".join(lines) + "\n"


def _plan_dict(plan: repair.CutPlan) -> dict[str, Any]:
    return {"path": plan.path, "position": plan.position, "offset": plan.offset,
            "reason": plan.reason, "message": plan.message,
            "keeps": offset_fields(plan.start_offset, plan.offset),
            "lost_messages": plan.lost_messages,
            "lost_last_offset": None if plan.lost_end_offset is None
            else plan.lost_end_offset - 1,
            "damaged_bytes_unread": plan.damaged_unread,
            "damaged_batch_messages": plan.damaged_count if plan.damaged_unread else None,
            "lost_bytes": plan.lost_bytes, "reserved_bytes": plan.reserved_bytes,
            "later_segments": plan.later_segments, "valid_batches_after": plan.valid_after}


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


def _emit(a: argparse.Namespace, out: IO[str], result: dict[str, Any]) -> None:
    if a.json:
        json.dump(result, out, indent=1)
        out.write("\n")


def cmd_recover(a: argparse.Namespace, out: IO[str], stdin: IO[str]) -> int:
    path = a.path
    require_log(path)
    result: dict[str, Any] = {"path": path}
    if a.truncate_at_damage:
        plan = repair.plan_cut(path)
        result["cut"] = None if plan is None else _plan_dict(plan)
        if plan is not None:
            # the plan first, in both modes: with --json a person answering the
            # question reads it on stderr, the JSON document comes after
            if not a.json or not a.yes:
                (sys.stderr if a.json else out).write(_plan_text(plan))
            if not a.yes:
                out.flush()
                sys.stderr.write("type 'yes' to cut the log there: ")
                sys.stderr.flush()
                if stdin.readline().strip() != "yes":
                    sys.stderr.write("not cut: nothing was changed\n")
                    result["declined"] = True
                    _emit(a, out, result)
                    return EXIT_DECLINED
            repair.cut(plan)
    try:
        with Log.open(path) as log:
            rec = log.recovery
            result.update(offset_fields(log.start_offset, log.end_offset))
    except CorruptRecordError as e:
        result["refused"] = str(e)
        rep = repair.check(path)
        result["verify"] = _check_dict(rep, path)
        if not a.json:
            out.write(f"{path}: recovery refused: {e}\n")
            out.write("\n".join(_verdict.report_lines(rep, path, width(out))) + "\n")
        _emit(a, out, result)
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
    # recovery reads only what a crash can have torn (nothing of a cleanly closed
    # log): every batch is read next, so that nothing is called clean unread
    rep = repair.check(path)
    result["verify"] = _check_dict(rep, path)
    if not a.json:
        room = width(out)
        if rec is None:
            head = (f"{path}: recovery: closed cleanly, nothing to recover (recovery reads "
                    f"no batch of a cleanly closed log)")
        else:
            head = (f"{path}: recovery: from the recovery point {rec.recovery_point}, "
                    f"scanned {rec.segments_scanned} segment(s), {size(rec.scanned_bytes)}")
        out.write("\n".join(textwrap.wrap(head, room, subsequent_indent="    ")) + "\n")
        for c in rec.cuts if rec is not None else ():
            out.write(_cut_text(c))
        if rec is not None and rec.cuts:
            out.write(f"  in all: {rec.cut_messages} message(s) and {rec.cut_data_bytes} "
                      f"bytes of data cut, {rec.reserved_bytes} bytes of reserved space "
                      f"dropped\n")
        out.write("then every batch read:\n" + "\n".join(
            _verdict.report_lines(rep, os.path.basename(os.path.abspath(path)), room)) + "\n")
    _emit(a, out, result)
    return EXIT_OK if rep.ok else EXIT_DAMAGE


def _check_dict(rep: repair.CheckReport, path: str) -> dict[str, Any]:
    return {"ok": rep.ok, "messages": rep.messages, "bytes": rep.bytes,
            **offset_fields(rep.start_offset, rep.end_offset),
            "problems": problem_dicts(rep, True), "at_stake": stake_dict(rep.cut),
            "next": None if rep.ok else _verdict.next_step(rep, path)}


def cmd_compact(a: argparse.Namespace, out: IO[str]) -> int:
    require_log(a.path)
    with Log.open(a.path) as log:
        before = sum(s.size for s in log.segments)       # stored bytes, not reservations
        if not log.config.compacted:
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


def cmd_retention(a: argparse.Namespace, out: IO[str]) -> int:
    require_log(a.path)
    now = int(time.time() * 1000)
    with Log.open(a.path, readonly=a.dry_run) as log:
        cfg = log.config
        segs = log.segments
        n = 0
        if cfg.deletes:
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
                      f"record {when(d['max_timestamp']) if d['max_timestamp'] >= 0 else '-'}\n")
        verb = ("would become" if due else "stays") if a.dry_run else "now"
        out.write(f"log start offset {verb} {start}\n")
    return EXIT_OK

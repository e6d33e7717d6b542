"""``seglog dump``, ``verify`` and ``stats`` over Apache Kafka's own directories: a
partition directory (``<topic>-<p>`` holding ``<base>.log`` segments, no seglog marker)
or a broker's log dir (partition directories beside ``meta.properties``). Read-only,
through ``seglog.kafka``; the output follows the commands' seglog forms."""

from __future__ import annotations

import argparse
import json
import os
from typing import IO, Any  # Any: values of the JSON documents --json prints

from .. import kafka
from .output import EXIT_DAMAGE, EXIT_OK, header_key, json_value, plural, show_value, span_text
from .._runtime.files import MARKER
from ..errors import CorruptRecordError

_ATTR_FLAGS = ((0x08, "logAppendTime"), (0x10, "transactional"), (0x20, "control"),
               (0x40, "deleteHorizon"))


def _is_partition(path: str) -> bool:
    if not os.path.isdir(path) or os.path.exists(os.path.join(path, MARKER)):
        return False
    names = os.listdir(path)
    return "partition.metadata" in names or any(kafka.SEGMENT_NAME.match(n) for n in names)


def targets(path: str) -> list[tuple[str, str]] | None:
    """(name, partition directory) of every Kafka partition ``path`` is or holds (a
    partition, or a log dir: one copy each), None when it is not Kafka's."""
    if _is_partition(path):
        return [(os.path.basename(os.path.abspath(path)), path)]
    if not os.path.isdir(path) or os.path.exists(os.path.join(path, MARKER)):
        return None
    if not os.path.exists(os.path.join(path, "meta.properties")) and not any(
            _is_partition(os.path.join(path, n)) for n in os.listdir(path)):
        return None
    return [(f"{t}-{p}", d) for (t, p), d in kafka.list_partitions(path).items()]


def _flags(info: kafka.BatchInfo) -> str:
    return ",".join(n for bit, n in _ATTR_FLAGS if info.magic >= 2 and info.attributes & bit) \
        or "-"


def _batch_doc(path: str, info: kafka.BatchInfo) -> dict[str, Any]:
    return {"segment": os.path.basename(path), "position": info.position, "size": info.size,
            "magic": info.magic, "base_offset": info.base_offset,
            "last_offset": info.last_offset, "count": info.records,
            "codec": kafka.CODEC_NAMES[info.codec] if info.codec < 5 else str(info.codec),
            "flags": _flags(info), "producer_id": info.producer_id,
            "base_timestamp": info.base_timestamp, "max_timestamp": info.max_timestamp,
            "checksum": "valid"}


def dump(a: argparse.Namespace, out: IO[str], parts: list[tuple[str, str]]) -> int:
    """Every batch as stored (control batches too), with ``--print-data`` its records."""
    lo = a.from_offset
    hi = a.to_offset
    docs: list[dict[str, Any]] = []
    problem = None
    for name, d in parts:
        part = kafka.open_partition(d)
        seg = None
        try:
            for path, info, recs in part.batches(lo, hi, decode=a.print_data):
                doc = _batch_doc(path, info)
                ms = []
                if recs is not None:
                    ms = [m for m in zip(*recs) if (lo is None or m[0] >= lo)
                          and (hi is None or m[0] < hi)]
                if a.json:
                    if recs is not None:
                        doc["records"] = [
                            {"offset": m[0], "timestamp": m[1],
                             "key": json_value(m[2], a.max_bytes),
                             "value": json_value(m[3], a.max_bytes),
                             "headers": [[k, json_value(v, a.max_bytes)] for k, v in m[4]]}
                            for m in ms]
                    docs.append({"partition": name, **doc})
                    continue
                if path != seg:
                    seg = path
                    out.write(f"segment {path}\n")
                out.write(" ".join(f"{k}: {v}" for k, v in doc.items()
                                   if k != "segment") + "\n")
                for m in ms:
                    hs = " ".join(f"{header_key(k)}={show_value(v, a.max_bytes)}"
                                  for k, v in m[4])
                    out.write(f"| offset: {m[0]} timestamp: {m[1]} key: "
                              f"{show_value(m[2], a.max_bytes)} value: "
                              f"{show_value(m[3], a.max_bytes)}"
                              + (f" headers: {hs}" if hs else "") + "\n")
        except CorruptRecordError as e:
            problem = {"partition": name, "file": e.path, "position": e.position,
                       "offset": e.offset, "message": e.message}
            if not a.json:
                out.write(f"DAMAGE {e.path} position {e.position} offset {e.offset}: "
                          f"{e.message}\n")
    if a.json:
        json.dump({"path": a.path, "kafka": True, "batches": docs,
                   "problems": [problem] if problem else []}, out, indent=1)
        out.write("\n")
    return EXIT_DAMAGE if problem else EXIT_OK


def _survey(d: str) -> dict[str, Any]:
    """One partition read whole: counts, codecs, transactions, the first damage."""
    part = kafka.open_partition(d)
    st = part.stats()
    row: dict[str, Any] = {"path": d, "segments": st["segments"], "bytes": st["bytes"],
                           "start_offset": st["start_offset"], "end_offset": st["end_offset"],
                           "leader_epoch": st["leader_epoch"], "batches": 0, "records": 0,
                           "control_batches": 0, "transactional_batches": 0,
                           "codecs": {}, "min_timestamp": None, "max_timestamp": None,
                           "problem": None}
    try:
        for _, info, recs in part.batches(decode=True):
            row["batches"] += 1
            if info.is_control:
                row["control_batches"] += 1
                continue
            row["transactional_batches"] += info.is_transactional
            name = kafka.CODEC_NAMES[info.codec] if info.codec < 5 else str(info.codec)
            row["codecs"][name] = row["codecs"].get(name, 0) + 1
            if recs is not None and recs.offsets:
                row["records"] += len(recs.offsets)
                lo, hi = min(recs.timestamps), max(recs.timestamps)
                row["min_timestamp"] = lo if row["min_timestamp"] is None else \
                    min(lo, row["min_timestamp"])
                row["max_timestamp"] = hi if row["max_timestamp"] is None else \
                    max(hi, row["max_timestamp"])
        row["last_stable_offset"] = part.last_stable_offset
    except CorruptRecordError as e:
        row["problem"] = {"file": e.path, "position": e.position, "offset": e.offset,
                          "message": e.message}
    return row


def verify(a: argparse.Namespace, out: IO[str], parts: list[tuple[str, str]]) -> int:
    """Every batch of every partition read, checksummed and decoded."""
    rows = [(name, _survey(d)) for name, d in parts]
    bad = [r for _, r in rows if r["problem"]]
    if a.json:
        json.dump({"ok": not bad, "kafka": True,
                   "logs": [{"log": n, **r} for n, r in rows]}, out, indent=1)
        out.write("\n")
    else:
        for name, r in rows:
            state = "ok" if not r["problem"] else "DAMAGED (1 problem)"
            out.write(f"{name}: {state}: {plural(r['segments'], 'segment')}, "
                      f"{plural(r['batches'], 'batch')}, {plural(r['records'], 'record')}, "
                      f"{span_text(r['start_offset'], r['end_offset'])}\n")
            if r["problem"]:
                p = r["problem"]
                out.write(f"  DAMAGE {p['file']} position {p['position']} offset "
                          f"{p['offset']}: {p['message']}\n")
        out.write(f"verified {len(rows)} Kafka partition(s): "
                  + ("no damage\n" if not bad else f"{len(bad)} problem(s)\n"))
    return EXIT_DAMAGE if bad else EXIT_OK


def stats(a: argparse.Namespace, out: IO[str], parts: list[tuple[str, str]]) -> int:
    """Per partition: segments, bytes, batches, records, offsets, codecs, transactions."""
    rows = [(name, _survey(d)) for name, d in parts]
    if a.json:
        json.dump({"path": a.path, "kafka": True,
                   "logs": [{"log": n, **r} for n, r in rows]}, out, indent=1)
        out.write("\n")
    else:
        for name, r in rows:
            codecs = ", ".join(f"{k} {v}" for k, v in sorted(r["codecs"].items())) or "-"
            out.write(f"{name}: {plural(r['segments'], 'segment')}, {r['bytes']:,} bytes, "
                      f"{plural(r['records'], 'record')} in {plural(r['batches'], 'batch')} "
                      f"({r['control_batches']} control, {r['transactional_batches']} "
                      f"transactional), {span_text(r['start_offset'], r['end_offset'])}, "
                      f"last stable {r.get('last_stable_offset', '-')}, leader epoch "
                      f"{r['leader_epoch']}, codecs: {codecs}"
                      + (f", DAMAGE at {r['problem']['file']} position "
                         f"{r['problem']['position']}" if r["problem"] else "") + "\n")
    return EXIT_DAMAGE if any(r["problem"] for _, r in rows) else EXIT_OK

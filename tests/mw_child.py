"""A writer process for the multi-writer tests (test_multi_writer.py).

    python mw_child.py write PATH WID SEED REPORT OPTIONS_JSON MAX_CALLS
        Opens the log with multi_writer=True and OPTIONS_JSON, then makes the calls
        ``calls(SEED, WID)`` lists (append for a single record, append_batch else), the
        records being ``record(WID, seq)``. After each acknowledged call it appends
        ``"<call> <first seq> <count> <first offset>\\n"`` to REPORT with one ``os.write``
        (a SIGKILL may lose the line of the last acknowledged call, never garble an
        earlier one). Stops after MAX_CALLS calls (0: never) or at SIGTERM (after the
        call it is making), closes, exits 0.
    python mw_child.py topic ROOT NAME WID SEED REPORT PARTITIONS MAX_CALLS
        The same against ``Topic.open(..., multi_writer=True)``; each line of REPORT is
        JSON: ``[call, first seq, {partition: [first offset, count]}]``.
    python mw_child.py create ROOT NAME PARTITIONS BARRIER_FD
        Prints ``waiting``, waits until BARRIER_FD reads end-of-file (the barrier), creates the topic with
        ``Topic.open(root, name, partitions, multi_writer=True)``, appends one keyed
        record, prints ``{"partitions": n, "placed": [p, offset]}``, closes.
    python mw_child.py hold PATH OPTIONS_JSON
        Opens the log as OPTIONS_JSON says (``multi_writer`` among them), prints
        ``ready``, waits for end-of-file on stdin, closes.
    python mw_child.py stop PATH OPTIONS_JSON
        Opens the log multi_writer, appends ``b"before"``, prints its offset, then calls
        append_batch with the values ``stopped_values()``, stopping itself (SIGSTOP)
        after its first batch is copied into the segment: it holds the append lock, its
        call half done. Once continued it finishes the call and prints the range.
    python mw_child.py compact-stop PATH OPTIONS_JSON
        Opens the log multi_writer and runs a compaction pass that stops itself
        (SIGSTOP) at its commit point (the rewritten files and the manifest written, no
        file swapped yet); once continued it prints ``[skipped, records read, records
        kept]`` and closes.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys

import seglog
from seglog import Record


def record(wid: int, seq: int) -> tuple[bytes, bytes | None, tuple[tuple[str, bytes], ...]]:
    """The value, key and headers of writer ``wid``'s message ``seq``: fixed, so any
    reader can tell from the value alone what the whole message must be."""
    value = b"w%d.s%d." % (wid, seq) + bytes([97 + (wid + seq) % 26]) * ((wid * 31 + seq * 7) % 120)
    key = b"k%d" % (seq % 7) if seq % 3 == 0 else None
    headers = (("w", b"%d" % wid), ("s", b"%d" % seq)) if seq % 4 == 0 else ()
    return value, key, headers


def parse(value: bytes) -> tuple[int, int]:
    """(wid, seq) of a value ``record`` made; ValueError for anything else."""
    head = value.split(b".", 2)
    if len(head) != 3 or not head[0].startswith(b"w") or not head[1].startswith(b"s"):
        raise ValueError(f"not a test value: {value[:40]!r}")
    return int(head[0][1:]), int(head[1][1:])


def calls(seed: int, wid: int, count: int) -> list[tuple[int, int, bool]]:
    """The first ``count`` calls writer ``wid`` makes: (first seq, records, single)."""
    rnd = random.Random(f"{seed}-{wid}")
    out = []
    seq = 0
    for _ in range(count):
        n = 1 if rnd.random() < 0.3 else rnd.randint(1, 50)
        single = n == 1 and rnd.random() < 0.6
        out.append((seq, n, single))
        seq += n
    return out


def stopped_values() -> list[bytes]:
    return [b"stopped-%d" % i + b"." * 300 for i in range(12)]


def _report(fd: int, line: str) -> None:
    os.write(fd, line.encode())


def _write(path: str, wid: int, seed: int, report: str, options: dict, max_calls: int) -> None:
    fd = os.open(report, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    flushes = random.Random(seed * 31 + wid)
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    log = seglog.Log.open(path, multi_writer=True, **options)
    plan = calls(seed, wid, max_calls or 1_000_000)
    for i, (seq, n, single) in enumerate(plan):
        if stop:
            break
        recs = [record(wid, s) for s in range(seq, seq + n)]
        if single:
            v, k, h = recs[0]
            first = log.append(v, key=k, headers=h)
        else:
            first = log.append_batch([Record(v, k, None, h) for v, k, h in recs]).start
        _report(fd, f"{i} {seq} {n} {first}\n")
        if flushes.random() < 0.05:
            log.flush()
    log.close()
    os.close(fd)


def _topic(root: str, name: str, wid: int, seed: int, report: str, partitions: int,
           max_calls: int) -> None:
    fd = os.open(report, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    topic = seglog.Topic.open(root, name, partitions=partitions, multi_writer=True,
                              segment_bytes=8192)
    for i, (seq, n, single) in enumerate(calls(seed, wid, max_calls)):
        recs = [record(wid, s) for s in range(seq, seq + n)]
        if single:
            v, k, h = recs[0]
            p, off = topic.append(v, key=k, headers=h)
            placed = {p: [off, 1]}
        else:
            got = topic.append_batch([Record(v, k, None, h) for v, k, h in recs])
            placed = {p: [r.start, len(r)] for p, r in got.items()}
        _report(fd, json.dumps([i, seq, placed]) + "\n")
    topic.close()
    os.close(fd)


def _create(root: str, name: str, partitions: int, barrier: int) -> None:
    print("waiting", flush=True)
    while os.read(barrier, 1):
        pass
    with seglog.Topic.open(root, name, partitions=partitions, multi_writer=True) as topic:
        placed = topic.append(b"created by %d" % os.getpid(), key=b"%d" % os.getpid())
        print(json.dumps({"partitions": topic.num_partitions, "placed": list(placed)}),
              flush=True)


def _hold(path: str, options: dict) -> None:
    with seglog.Log.open(path, **options):
        print("ready", flush=True)
        sys.stdin.read()


def _stop(path: str, options: dict) -> None:
    from seglog import segment   # the test's own seam: stop inside the copy of a batch
    log = seglog.Log.open(path, multi_writer=True, **options)
    print(log.append(b"before"), flush=True)
    real = segment.ActiveSegment.append
    stopped = []

    def append_then_stop(self, *a, **k):
        r = real(self, *a, **k)
        if not stopped:
            stopped.append(1)
            os.kill(os.getpid(), signal.SIGSTOP)
        return r
    segment.ActiveSegment.append = append_then_stop
    got = log.append_batch(stopped_values())
    print(f"{got.start} {got.stop}", flush=True)
    log.close()


def _compact_stop(path: str, options: dict) -> None:
    from seglog import cleaner   # the test's own seam: stop inside a compaction pass
    log = seglog.Log.open(path, multi_writer=True, **options)
    real = cleaner.swap_in

    def stop_then_swap(*a, **k):
        os.kill(os.getpid(), signal.SIGSTOP)
        return real(*a, **k)
    cleaner.swap_in = stop_then_swap
    st = log.compact()
    print(json.dumps([st.skipped, st.records_read, st.records_kept]), flush=True)
    log.close()


def main() -> None:
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "write":
        _write(args[0], int(args[1]), int(args[2]), args[3], json.loads(args[4]), int(args[5]))
    elif mode == "topic":
        _topic(args[0], args[1], int(args[2]), int(args[3]), args[4], int(args[5]),
               int(args[6]))
    elif mode == "create":
        _create(args[0], args[1], int(args[2]), int(args[3]))
    elif mode == "hold":
        _hold(args[0], json.loads(args[1]))
    elif mode == "stop":
        _stop(args[0], json.loads(args[1]))
    elif mode == "compact-stop":
        _compact_stop(args[0], json.loads(args[1]))
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()

"""seglog beside what a user would pick instead (lmdb, sqlite3), same data, same run.

    scripts/bench bench_peers.py              # 1,000,000 messages (installs lmdb: bench extra)
    scripts/bench bench_peers.py --n 200000   # quicker

Every workload writes or reads the same 200-byte values (os.urandom), best of 3:

* append 1:  seglog ``append()`` per message; lmdb one ``put`` per write transaction;
             sqlite3 (WAL, synchronous=NORMAL) one INSERT per transaction. None of
             the three fsyncs per message: each survives a crash of the process, not
             a power loss (seglog ``flush_ms`` off, lmdb ``sync=False``, sqlite NORMAL),
             so like is compared with like.
* append 50: seglog ``append_batch`` of 50; lmdb 50 puts in one transaction
             (``putmulti``); sqlite3 ``executemany`` of 50 in one transaction; and a raw
             ``os.write`` of each 50 values pre-joined (no framing, no checksum).
* read:      every value in order: seglog ``iter()`` of the batch-50 log and of the
             append-1 log; lmdb cursor ``iternext(keys=False)``; sqlite3 SELECT;
             seglog ``Log.read_arrow()`` (columnar, into one pyarrow Table).
* disk:      bytes on disk per message beyond the 200-byte value, batch 50.
* recovery:  the scan of an unflushed tail after a crash (framing, checksums, offsets).
* iter() parts: where ``iter()``'s time goes over the batch-50 log, per message: the
             parts any pure-Python reader of the format pays (``pread`` of the files
             in 1 MiB chunks, every batch's checksum, one ``Message`` per value made
             from one buffer in memory: the floor), and the rest, seglog's walk.

Prints each figure and then the target ratios with ok / MISSED. Run by hand on a
quiet machine; never as a test.

    scripts/bench bench_peers.py --compare /path/to/other/checkout/src

runs seglog's workloads again, alternating this tree's seglog and the other source
tree's (each in its own process; ``--rounds``, best of them), and prints the two
side by side with their ratio: a change's cost, measured in one run.
"""

from __future__ import annotations

import argparse
import inspect
import gc
import json
import os
import platform
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
from io import BytesIO
from itertools import repeat

HERE = os.path.dirname(os.path.abspath(__file__))
OWN_SRC = os.path.abspath(os.path.join(HERE, "..", "src"))


def _src_arg() -> str:
    # which seglog to import is decided before the import (--src, for --compare's children)
    for i, a in enumerate(sys.argv):
        if a == "--src" and i + 1 < len(sys.argv):
            return os.path.abspath(sys.argv[i + 1])
    return OWN_SRC


sys.path.insert(0, _src_arg())
sys.path.insert(0, HERE)

import seglog  # noqa: E402
from bench_log import dir_bytes, raw_write, seglog_read, seglog_write, sqlite_read, \
    sqlite_write, timed  # noqa: E402
from seglog import codec  # noqa: E402
try:       # how the read path builds a Message
    from seglog._codec.records import make_message  # noqa: E402
except ImportError:   # --compare with a tree from before the subsystem folders
    from seglog._records import make_message  # type: ignore[no-redef]  # noqa: E402
from seglog.testing import abandon  # noqa: E402

try:
    import lmdb
except ImportError:
    sys.exit("bench_peers needs lmdb (the bench extra): run it with scripts/bench bench_peers.py")

MSG, BATCH = 200, 50
REPEAT = 3


def best(fn) -> float:
    return timed(fn, REPEAT)


# -- lmdb ------------------------------------------------------------------------------
def lmdb_env(path: str, n: int) -> "lmdb.Environment":
    # sync=False: commits reach the file (a process crash keeps them) but are not
    # fsynced, as seglog's append before flush(); one named key per message, big-endian
    # offsets so the cursor walks them in order
    return lmdb.open(path, map_size=max(1 << 30, n * MSG * 4), sync=False, metasync=False,
                     writemap=False, max_dbs=0, lock=True)


def lmdb_write(root: str, msgs: list[bytes], batch: int) -> float:
    keys = [i.to_bytes(8, "big") for i in range(len(msgs))]

    def run() -> None:
        path = os.path.join(root, "lmdb")
        shutil.rmtree(path, ignore_errors=True)
        env = lmdb_env(path, len(msgs))
        if batch == 1:
            begin = env.begin
            for k, v in zip(keys, msgs):
                with begin(write=True) as txn:
                    txn.put(k, v, append=True)
        else:
            for i in range(0, len(msgs), batch):
                with env.begin(write=True) as txn:
                    txn.cursor().putmulti(zip(keys[i:i + batch], msgs[i:i + batch]),
                                          append=True)
        env.close()
    return best(run)


def lmdb_read(root: str, expect: int) -> float:
    env = lmdb_env(os.path.join(root, "lmdb"), expect)
    count = 0

    def run() -> None:
        nonlocal count
        count = 0
        with env.begin(buffers=False) as txn:
            for v in txn.cursor().iternext(keys=False, values=True):
                count += 1
    t = best(run)
    env.close()
    assert count == expect, (count, expect)
    return t


# -- seglog columnar -------------------------------------------------------------------
def arrow_read(path: str, expect: int, views: bool = False) -> float:
    log = seglog.Log.open(path, readonly=True)
    rows = 0

    def run() -> None:
        nonlocal rows
        rows = log.read_arrow(views=views).num_rows if views else log.read_arrow().num_rows
    t = best(run)
    log.close()
    assert rows == expect, (rows, expect)
    return t


def arrow_parts(path: str) -> tuple[float, dict[str, float]]:
    """Where one ``read_arrow()`` of the log at ``path`` spends its time, by part
    (best of 3; the parts are seglog's own functions, timed by wrapping them here)."""
    import seglog._codec.arrow_batches as ab
    from seglog._log import reads as _log_reads
    spent: dict[str, float] = {}
    parts = {(_log_reads, "_pool_pread"): "pread of 4 MiB chunks into Arrow's pool",
             (ab, "_first_pass"): "per batch: header unpack + checksum (Python)",
             (ab, "_gather"): "headers and lengths gathered (one join a chunk)",
             (ab, "_copied"): "values copied into one buffer",
             (ab, "_plain_run"): "the whole numpy build (all of the above but pread)"}
    saved = {k: getattr(*k) for k in parts}

    def timed_part(fn, name):
        def run(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0
        return run
    log = seglog.Log.open(path, readonly=True)
    try:
        for (mod, fn), name in parts.items():
            setattr(mod, fn, timed_part(saved[(mod, fn)], name))
        best_t, best_parts = float("inf"), {}
        for _ in range(REPEAT):
            spent.clear()
            t0 = time.perf_counter()
            log.read_arrow()
            t = time.perf_counter() - t0
            if t < best_t:
                best_t, best_parts = t, dict(spent)
    finally:
        for (mod, fn) in parts:
            setattr(mod, fn, saved[(mod, fn)])
        log.close()
    import xxhash
    with open(os.path.join(path, f"{0:020d}.log"), "rb") as f:
        data = f.read()
    t0 = time.perf_counter()
    xxhash.xxh3_64_intdigest(data)
    best_parts["of which: xxh3 over all bytes, one call"] = time.perf_counter() - t0
    return best_t, best_parts


def recovery_scan(root: str, mb: int) -> float:
    """GB/s of recovery's scan over an unflushed, page-cache-warm tail."""
    path = os.path.join(root, "tail")
    log = seglog.Log.open(path, flush_ms=None, segment_bytes=1 << 30)
    batch = [os.urandom(MSG) for _ in range(BATCH)]
    while log.segments[-1].size < mb << 20:
        log.append_batch(batch)
    abandon(log)                       # as a crash leaves it: nothing flushed
    with open(os.path.join(path, f"{0:020d}.log"), "rb") as f:
        while f.read(1 << 24):
            pass
    log = seglog.Log.open(path, flush_ms=None, segment_bytes=1 << 30)
    rep = log.recovery
    assert rep is not None
    log.close()
    shutil.rmtree(path)
    return rep.scanned_bytes / rep.scan_seconds / 1e9


def iter_parts(path: str, values: list[bytes]) -> list[tuple[str, float]]:
    """ns per message of ``iter()`` over the log at ``path`` (of ``values``) and of its
    parts, best of 3 each, in one run."""
    files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".log"))
    n, chunk = len(values), 1 << 20
    u32 = struct.Struct("<I")

    def walk(check: bool) -> None:
        # iter()'s reads: whole batches of 1 MiB chunks, the next chunk from the first
        # batch the last one cut
        for f in files:
            fd = os.open(f, os.O_RDONLY)
            size, pos = os.fstat(fd).st_size, 0
            while pos < size:
                buf = os.pread(fd, chunk, pos)
                mv, p, end = memoryview(buf), 0, len(buf)
                while p + codec.HEADER_SIZE <= end:
                    # batch_length alone (at 8; it counts the bytes after 12) and the
                    # checksum's span (from 21): the floor of a reader, for any seglog
                    (length,) = u32.unpack_from(buf, p + 8)
                    nxt = p + 12 + length
                    if nxt > end:
                        break
                    if check:
                        codec.CHECKSUM(mv[p + 21:nxt])
                    p = nxt
                pos += p
            os.close(fd)

    data, lens = b"".join(values), list(map(len, values))

    def floor() -> None:
        for m in map(make_message, zip(range(n), repeat(0), repeat(None),
                                      map(BytesIO(data).read, lens), repeat(()))):
            m.value

    log = seglog.Log.open(path, readonly=True)

    def whole() -> None:
        for m in log.iter():
            m.value
    t: dict[str, float] = {}
    for _ in range(REPEAT):         # alternating: the machine's load hits each alike
        for name, fn in (("whole", whole), ("read", lambda: walk(False)),
                         ("check", lambda: walk(True)), ("floor", floor)):
            gc.collect()
            t0 = time.perf_counter()
            fn()
            t[name] = min(t.get(name, float("inf")), time.perf_counter() - t0)
    log.close()
    ns = {k: v / n * 1e9 for k, v in t.items()}
    return [("iter() batch-50 log, whole loop", ns["whole"]),
            ("  pread in 1 MiB chunks, header walk", ns["read"]),
            ("  checksum of every batch", ns["check"] - ns["read"]),
            ("  a Message per value from memory", ns["floor"]),
            ("  the rest: seglog's walk and decode",
             ns["whole"] - ns["check"] - ns["floor"])]


def seglog_figures(root: str, msgs: list[bytes], tail_mb: int) -> tuple[dict[str, float], int, float]:
    """seglog's workloads: msgs/s per workload, bytes on disk of the batch-50 log, and
    the recovery scan's GB/s."""
    n = len(msgs)
    r: dict[str, float] = {}

    def fresh(name: str) -> str:
        p = os.path.join(root, name)
        shutil.rmtree(p, ignore_errors=True)
        return p

    one, fifty = os.path.join(root, "seglog1"), os.path.join(root, "seglog50")

    def seg_write(path: str, batch: int) -> float:
        return min(seglog_write(fresh(os.path.basename(path)), msgs, batch, flush_ms=None)
                   for _ in range(REPEAT))

    r["seglog append"] = n / seg_write(one, 1)
    r["seglog append_batch(50)"] = n / seg_write(fifty, BATCH)
    disk = dir_bytes(fifty)
    r["seglog iter() batch-50 log"] = n / min(seglog_read(fifty, n) for _ in range(REPEAT))
    r["seglog iter() append-1 log"] = n / min(seglog_read(one, n) for _ in range(REPEAT))
    r["seglog read_arrow() batch-50 log"] = n / arrow_read(fifty, n)
    if "views" in inspect.signature(seglog.Log.read_arrow).parameters:  # (--compare: older trees)
        r["seglog read_arrow(views=True) batch-50"] = n / arrow_read(fifty, n, views=True)
    return r, disk, recovery_scan(root, tail_mb)


def compare(other_src: str, n: int, tail_mb: int, where: str | None, rounds: int) -> None:
    """This tree's seglog and ``other_src``'s, alternating, each in its own process."""
    best: dict[str, dict[str, float]] = {OWN_SRC: {}, other_src: {}}
    for rnd in range(rounds):
        for src in (other_src, OWN_SRC):
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                cmd = [sys.executable, os.path.abspath(__file__), "--seglog-only", "--src", src,
                       "--n", str(n), "--tail-mb", str(tail_mb), "--json", out.name]
                if where:
                    cmd += ["--dir", where]
                subprocess.run(cmd, check=True)
                got = json.load(open(out.name))
            for k, v in got.items():
                best[src][k] = max(best[src].get(k, 0.0), v)
            print(f"  round {rnd + 1}: {src} done", flush=True)
    print(f"\n  {'seglog workload, same run':<36} {'other':>10} {'this':>10} {'this/other':>11}")
    print(f"  {'(other = ' + other_src + ')':<36}")
    for k in best[OWN_SRC]:
        if k not in best[other_src]:
            continue                      # a workload the other tree does not have
        a, b = best[other_src][k], best[OWN_SRC][k]
        unit, scale = ("GB/s", 1e9) if k.startswith("recovery") else ("M/s", 1e6)
        print(f"  {k:<36} {a / scale:7.3f} {unit:<5}{b / scale:7.3f} {unit:<5} {b / a:7.3f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000, help="messages per workload")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--tail-mb", type=int, default=256, help="unflushed tail to recover")
    ap.add_argument("--compare", metavar="SRC", default=None,
                    help="also run seglog's workloads with the seglog package under SRC "
                         "(another checkout's src/), alternating, and print both")
    ap.add_argument("--rounds", type=int, default=3,
                    help="with --compare: alternations (each side's best is kept)")
    ap.add_argument("--src", default=OWN_SRC, help=argparse.SUPPRESS)
    ap.add_argument("--seglog-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    n = args.n - args.n % BATCH
    root = tempfile.mkdtemp(prefix="seglog-peers-", dir=args.dir)
    msgs = [os.urandom(MSG) for _ in range(n)]
    if args.seglog_only:
        # one side of --compare: seglog's figures only, as JSON
        try:
            r, disk, gbs = seglog_figures(root, msgs, args.tail_mb)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        r["recovery scan"] = gbs * 1e9
        with open(args.json, "w") as f:
            json.dump(r, f)
        return
    print(f"{n:,} messages of {MSG} bytes, best of {REPEAT}; {platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}, lmdb "
          f"{lmdb.__version__}, sqlite {sqlite3.sqlite_version}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    r: dict[str, float] = {}
    try:
        r, disk, gbs = seglog_figures(root, msgs, args.tail_mb)
        arrow_total, arrow_costs = arrow_parts(os.path.join(root, "seglog50"))
        r["lmdb put per txn"] = n / lmdb_write(root, msgs, 1)
        r["lmdb txn of 50"] = n / lmdb_write(root, msgs, BATCH)
        r["lmdb cursor read"] = n / lmdb_read(root, n)
        chunks = [b"".join(msgs[i:i + BATCH]) for i in range(0, n, BATCH)]
        r["raw os.write of 50"] = n / min(raw_write(os.path.join(root, "raw"), chunks)
                                          for _ in range(REPEAT))
        for batch, name in ((1, "sqlite3 insert per txn"), (BATCH, "sqlite3 executemany 50")):
            db = os.path.join(root, f"sqlite{batch}.db")
            if os.path.exists(db):
                os.remove(db)
            sub = msgs if batch > 1 else msgs[: n // 5]     # one txn per message is slow
            r[name] = len(sub) / sqlite_write(db, sub, batch)
        t, count = sqlite_read(os.path.join(root, f"sqlite{BATCH}.db"))
        r["sqlite3 SELECT"] = count / t
        parts = iter_parts(os.path.join(root, "seglog50"), msgs)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(f"\n  {'workload':<36} {'msgs/s':>10}")
    for k, v in r.items():
        print(f"  {k:<36} {v / 1e6:8.3f} M")
    over = disk / n - MSG
    print(f"  seglog on-disk overhead at batch 50: {over:.2f} B/msg; recovery scan "
          f"{gbs:.2f} GB/s ({args.tail_mb} MB tail)")

    print(f"\n  {'ratio, same run':<48} {'got':>7} {'target':>8}")
    checks = [
        ("append_batch(50) / lmdb txn of 50", r["seglog append_batch(50)"] / r["lmdb txn of 50"], 2.0),
        ("append() / lmdb put per txn", r["seglog append"] / r["lmdb put per txn"], 1.5),
        ("iter() batch-50 / lmdb cursor", r["seglog iter() batch-50 log"] / r["lmdb cursor read"], 1.0),
        ("iter() append-1 / lmdb cursor", r["seglog iter() append-1 log"] / r["lmdb cursor read"], 0.3),
        ("read_arrow() / lmdb cursor", r["seglog read_arrow() batch-50 log"] / r["lmdb cursor read"], 5.0),
        ("read_arrow(views=True) / lmdb cursor",
         r["seglog read_arrow(views=True) batch-50"] / r["lmdb cursor read"], 5.0),
        ("append_batch(50) / raw os.write", r["seglog append_batch(50)"] / r["raw os.write of 50"], 0.7),
    ]
    for name, got, target in checks:
        print(f"  {name:<48} {got:6.2f}x {target:6.1f}x  {'ok' if got >= target else 'MISSED'}")
    print(f"  {'on-disk overhead at batch 50 (B/msg)':<48} {over:7.2f} {'<= 6':>8}  "
          f"{'ok' if over <= 6 else 'MISSED'}")
    print(f"  {'recovery scan of an unflushed tail (GB/s)':<48} {gbs:7.2f} {'>= 1':>8}  "
          f"{'ok' if gbs >= 1 else 'MISSED'}")
    arrow_vps = max(r["seglog read_arrow() batch-50 log"],
                    r["seglog read_arrow(views=True) batch-50"])
    print(f"  {'read_arrow() values/s (M)':<48} {arrow_vps / 1e6:7.2f} {'>= 20':>8}  "
          f"{'ok' if arrow_vps >= 20e6 else 'MISSED'}")
    print(f"\n  read_arrow() of the batch-50 log by part ({arrow_total * 1e3:.1f} ms in all, "
          f"{n / arrow_total / 1e6:.2f} M values/s; parts nest as named):")
    for name, secs in arrow_costs.items():
        print(f"    {name:<56} {secs * 1e3:7.1f} ms  {secs * 1e9 / n:6.1f} ns/value")
    print(f"\n  {'where iter() spends its time, same run':<48} {'ns/msg':>7}")
    for name, ns in parts:
        print(f"  {name:<48} {ns:7.1f}")
    if args.compare:
        del msgs
        compare(os.path.abspath(args.compare), n, args.tail_mb, args.dir, args.rounds)


if __name__ == "__main__":
    main()

"""Several writer processes on one log: seglog's multi_writer beside lmdb and sqlite3.

    scripts/bench bench_writers.py               # 400,000 messages per workload
    scripts/bench bench_writers.py --n 100000 --quick

Every workload writes N messages in total (``--n``) of 200-byte values (os.urandom,
made by each process before the clock starts), best of 3 runs (1 with ``--quick``),
each run into a fresh directory. Each process is started with multiprocessing
("spawn"), opens its log or database, makes its values and waits at a barrier; the
clock runs from the barrier's release (the first process to pass it) to the last
process's last write (each reads CLOCK_MONOTONIC, one clock for the machine), so
interpreter start-up, opening and closing are left out. Figures are aggregate
messages per second over all processes. None of the three fsyncs per write: each
write survives a crash of its process, not a power loss.

1. seglog 4 procs, batch 1:  4 processes, each ``Log.open(path, multi_writer=True,
   flush_ms=None)`` on the same log (created empty before), ``append()`` N/4 values.
2. seglog 4 procs, batch 50: the same with ``append_batch`` of 50 values.
3. lmdb 4 procs: one environment (sync=False, metasync=False, as bench_peers), 4
   processes; batch 1 one ``put`` per write transaction, batch 50 one ``putmulti`` of
   50 per transaction. Keys are (process, sequence) big-endian, so each process
   inserts at the end of its own key range (no ``append=True``: the ranges
   interleave in time). lmdb's writer mutex is a process-shared mutex, in C.
4. sqlite3 4 procs: one WAL database (synchronous=NORMAL), 4 processes, each
   ``BEGIN IMMEDIATE``; one INSERT (batch 1) or ``executemany`` of 50 (batch 50);
   ``COMMIT``; busy_timeout 60 s so a process waits for the write lock rather than
   fail. Batch 1 writes only ``--sqlite-fraction`` of N (default 1/5: one
   transaction per message is slow); its rate is over what it wrote.
5. seglog exclusive: one process, ``Log.open(path, flush_ms=None)``, N values with
   ``append()`` (batch 1) and with ``append_batch`` of 50 (batch 50).
6. seglog 1 multi-writer: one process, ``Log.open(path, multi_writer=True,
   flush_ms=None)`` alone, N values with ``append()`` (and, for information, batch 50).
7. seglog 4 procs, Producer: 4 processes, each a multi-writer ``Log`` and a
   ``Producer(log, linger_ms=5)`` over it, the way the README tells services to
   write: ``send()`` of every value, then ``flush()``; the offsets are the futures'.

``--compare DIR`` runs the seglog workloads 1, 2 and 5 a second time with the seglog
of another checkout (``DIR/src``: the code before a change), in the same run, and
prints the new/old ratios.

Then the floor, in this process: the ns of one ``fcntl.flock(fd, LOCK_EX|LOCK_NB)``
plus ``flock(fd, LOCK_UN)`` pair in CPython, in a loop of nothing else; and the
per-append profile, N appends each in this process, timed in this thread's CPU time
(``time.thread_time_ns``: what a shared machine's other load does not change):
the exclusive ``append()``; the same with a flock pair around each call (on a
separate file); the same with, inside the pair, the least header work a shared
append needs (read counter and holder from a mapped header, write the holder, write
counter, size and next offset back) -- the floor of any design taking the lock per
append; and the multi-writer's ``append()`` alone. Multi-writer minus exclusive is
what multi_writer costs an append; multi-writer minus the floor is what seglog adds
to what CPython and the kernel impose. (A syscall costs more inside the append loop
than in a loop of nothing else: caches and branch predictors are cold after it.)

Every seglog run of 1, 2 and 6 is verified after it: the log read back holds
offsets 0..N-1 densely in order, N messages, the same values the processes wrote
(sums of their XXH64), and the offsets the processes were returned are exactly
0..N-1; lmdb and sqlite3 counts are checked. A failed check stops the bench.

Prints machine facts, date and load, each figure, then the target ratios with ok /
MISSED. Run by hand on a quiet machine; never as a test.
"""

from __future__ import annotations

import fcntl
import gc
import mmap
import multiprocessing as mp
import os
import platform
import shutil
import sqlite3
import struct
import sys
import tempfile
import time
import traceback
from typing import Any

import _common  # bench/'s own (the script's directory is first on sys.path)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..", "src")))

import seglog  # noqa: E402
import xxhash  # noqa: E402

try:
    import lmdb
except ImportError:
    sys.exit("bench_writers needs lmdb (the bench extra): run it with scripts/bench bench_writers.py")

MSG, BATCH, PROCS = 200, 50, 4
MASK = (1 << 64) - 1
WAIT = 600.0                     # seconds: any one run of any workload, at most


def _now() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def _values(count: int) -> tuple[list[bytes], int]:
    vals = [os.urandom(MSG) for _ in range(count)]
    h = xxhash.xxh64_intdigest
    return vals, sum(h(v) for v in vals) & MASK


# -- the worker processes ----------------------------------------------------------------
def _seglog_from(src: str | None) -> Any:
    """seglog as this worker uses it: this checkout's, or (``--compare``) another's,
    imported afresh (a spawned worker has not used it yet)."""
    if src is None:
        return seglog
    for name in [m for m in sys.modules if m == "seglog" or m.startswith("seglog.")]:
        del sys.modules[name]
    sys.path.insert(0, src)
    import importlib
    return importlib.import_module("seglog")


def _work(kind: str, path: str, batch: int, count: int, who: int, src: str | None) -> Any:
    """Open, make values, and return (run, close, hash): ``run()`` does the timed
    writes and returns what the parent checks (offsets given out)."""
    vals, hsum = _values(count)
    chunks = [vals[i:i + batch] for i in range(0, count, batch)]
    if kind == "seglog-producer":
        sl = _seglog_from(src)
        plog = sl.Log.open(path, flush_ms=None, multi_writer=True)
        producer = sl.Producer(plog, linger_ms=5)

        def run_p() -> list[int]:
            gc.disable()
            send = producer.send
            futs = [send(v) for v in vals]
            producer.flush()
            return [f.result() for f in futs]

        def close_p() -> None:
            producer.close()
            plog.close()
        return run_p, close_p, hsum
    if kind in ("seglog-multi", "seglog-excl"):
        log = _seglog_from(src).Log.open(path, flush_ms=None,
                                         multi_writer=kind == "seglog-multi")

        def run() -> list[int]:
            gc.disable()
            if batch == 1:
                ap = log.append
                return [ap(v) for v in vals]
            ab = log.append_batch
            got = []
            for c in chunks:
                r = ab(c)
                got.extend(r)
            return got
        return run, log.close, hsum
    if kind == "lmdb":
        env = lmdb.open(path, map_size=max(1 << 30, 8 * count * PROCS * MSG), sync=False,
                        metasync=False, writemap=False, max_dbs=0, lock=True)
        keys = [who.to_bytes(2, "big") + i.to_bytes(8, "big") for i in range(count)]
        kchunks = [keys[i:i + batch] for i in range(0, count, batch)]

        def run_l() -> list[int]:
            gc.disable()
            begin = env.begin
            if batch == 1:
                for k, v in zip(keys, vals):
                    with begin(write=True) as txn:
                        txn.put(k, v)
            else:
                for kc, vc in zip(kchunks, chunks):
                    with begin(write=True) as txn:
                        txn.cursor().putmulti(zip(kc, vc))
            return []
        return run_l, env.close, hsum
    if kind == "sqlite":
        db = sqlite3.connect(path, isolation_level=None, timeout=60.0)
        db.execute("PRAGMA busy_timeout=60000")
        db.execute("PRAGMA synchronous=NORMAL")
        rows = [[(v,) for v in c] for c in chunks]

        def run_s() -> list[int]:
            gc.disable()
            ex, exm = db.execute, db.executemany
            ins = "INSERT INTO log (value) VALUES (?)"
            if batch == 1:
                for v in vals:
                    ex("BEGIN IMMEDIATE")
                    ex(ins, (v,))
                    ex("COMMIT")
            else:
                for r in rows:
                    ex("BEGIN IMMEDIATE")
                    exm(ins, r)
                    ex("COMMIT")
            return []
        return run_s, db.close, hsum
    raise ValueError(kind)


def worker(kind: str, path: str, batch: int, count: int, who: int, barrier: Any,
           out: Any, src: str | None = None) -> None:
    try:
        run, close, hsum = _work(kind, path, batch, count, who, src)
        barrier.wait(WAIT)
        t0 = _now()
        got = run()
        t1 = _now()
        close()
        out.send(("ok", who, t0, t1, got, hsum))
    except BaseException:
        out.send(("error", who, traceback.format_exc()))
    finally:
        out.close()


def timed_procs(kind: str, path: str, batch: int, total: int, procs: int,
                src: str | None = None) -> tuple[float, list[Any]]:
    """Seconds from the barrier's release to the last process done, and each
    process's (offsets, value hash)."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(procs + 1)
    pipes, ps = [], []
    for who in range(procs):
        rd, wr = ctx.Pipe(duplex=False)
        p = ctx.Process(target=worker,
                        args=(kind, path, batch, total // procs, who, barrier, wr, src))
        p.start()
        wr.close()
        pipes.append(rd)
        ps.append(p)
    results: list[Any] = []
    try:
        barrier.wait(WAIT)
        for rd in pipes:
            if not rd.poll(WAIT):
                raise RuntimeError(f"{kind}: a writer process gave no result in {WAIT:.0f} s")
            results.append(rd.recv())
    finally:
        for p in ps:
            p.join(WAIT)
            if p.is_alive():
                p.kill()
                p.join()
    errors = [r[2] for r in results if r[0] == "error"]
    if errors:
        raise RuntimeError(f"{kind}: a writer process failed:\n" + errors[0])
    t0 = min(r[2] for r in results)
    t1 = max(r[3] for r in results)
    return (t1 - t0) / 1e9, [(r[4], r[5]) for r in results]


# -- the runs ----------------------------------------------------------------------------
def _fresh(root: str, name: str) -> str:
    p = os.path.join(root, name)
    shutil.rmtree(p, ignore_errors=True)
    if os.path.exists(p):
        os.remove(p)
    return p


def verify_seglog(path: str, total: int, parts: list[Any]) -> None:
    given = sorted(o for offs, _ in parts for o in offs)
    if given != list(range(total)):
        raise AssertionError(f"{path}: the offsets returned to the writers are not 0..{total - 1}")
    want = sum(h for _, h in parts) & MASK
    h = xxhash.xxh64_intdigest
    log = seglog.Log.open(path, readonly=True)
    try:
        n = got = 0
        for m in log.iter():
            if m.offset != n:
                raise AssertionError(f"{path}: offset {m.offset} where {n} was due")
            got += h(m.value)
            n += 1
    finally:
        log.close()
    if n != total or got & MASK != want:
        raise AssertionError(f"{path}: {n} messages read back of {total}, or other values")


def seglog_run(root: str, kind: str, batch: int, total: int, procs: int, repeat: int,
               src: str | None = None) -> float:
    best = float("inf")
    for _ in range(repeat):
        path = _fresh(root, f"{kind}-{batch}-{procs}")
        seglog.Log.open(path, flush_ms=None).close()     # created once, empty
        t, parts = timed_procs(kind, path, batch, total, procs, src)
        verify_seglog(path, total, parts)
        best = min(best, t)
    shutil.rmtree(path, ignore_errors=True)
    return total / best


def lmdb_run(root: str, batch: int, total: int, procs: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        path = _fresh(root, f"lmdb-{batch}")
        lmdb.open(path, map_size=max(1 << 30, 8 * total * MSG), sync=False).close()
        t, _ = timed_procs("lmdb", path, batch, total, procs)
        env = lmdb.open(path, readonly=True, lock=False)
        n = env.stat()["entries"]
        env.close()
        if n != total:
            raise AssertionError(f"lmdb: {n} entries of {total}")
        best = min(best, t)
    shutil.rmtree(path, ignore_errors=True)
    return total / best


def sqlite_run(root: str, batch: int, total: int, procs: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        path = _fresh(root, f"sqlite-{batch}.db")
        for ext in ("-wal", "-shm"):
            if os.path.exists(path + ext):
                os.remove(path + ext)
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE log (offset INTEGER PRIMARY KEY, value BLOB)")
        db.close()
        t, _ = timed_procs("sqlite", path, batch, total, procs)
        db = sqlite3.connect(path)
        (n,) = db.execute("SELECT count(*) FROM log").fetchone()
        db.close()
        if n != total:
            raise AssertionError(f"sqlite3: {n} rows of {total}")
        best = min(best, t)
    return total / best


# -- the floor ---------------------------------------------------------------------------
def flock_floor(root: str, pairs: int, repeat: int) -> tuple[float, float, float]:
    """ns per flock(EX|NB)+flock(UN) pair; per pair plus the least header work; per
    empty loop iteration (included in both)."""
    path = os.path.join(root, "floor")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, 4096)
    mm = mmap.mmap(fd, 4096)
    fl, ex, un = fcntl.flock, fcntl.LOCK_EX | fcntl.LOCK_NB, fcntl.LOCK_UN
    peek, q, tail = struct.Struct("<QQ").unpack_from, struct.Struct("<Q").pack_into, \
        struct.Struct("<QQqq").pack_into
    rng = range(pairs)

    def best(fn: Any) -> float:
        b = float("inf")
        for _ in range(repeat):
            gc.collect()
            t = time.perf_counter_ns()
            fn()
            b = min(b, time.perf_counter_ns() - t)
        return b / pairs

    def bare() -> None:
        for _ in rng:
            pass

    def pair() -> None:
        for _ in rng:
            fl(fd, ex)
            fl(fd, un)

    def protocol() -> None:
        seen = 0
        for i in rng:
            fl(fd, ex)
            counter, holder = peek(mm, 16)
            if counter != seen or holder:
                pass
            q(mm, 24, 12345)
            seen += 1
            tail(mm, 16, seen, 0, i, i)
            fl(fd, un)
    try:
        return best(pair), best(protocol), best(bare)
    finally:
        mm.close()
        os.close(fd)
        os.remove(path)


def append_profile(root: str, n: int, repeat: int) -> dict[str, float]:
    """CPU ns per ``append()`` in this thread: exclusive, exclusive inside a flock pair,
    and inside the pair with the least header work, and the multi-writer alone."""
    vals = [os.urandom(MSG) for _ in range(n)]
    lpath = os.path.join(root, "lockfile")
    fd = os.open(lpath, os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, 4096)
    mm = mmap.mmap(fd, 4096)
    fl, ex, un = fcntl.flock, fcntl.LOCK_EX | fcntl.LOCK_NB, fcntl.LOCK_UN
    peek, q, tail = struct.Struct("<QQ").unpack_from, struct.Struct("<Q").pack_into, \
        struct.Struct("<QQqq").pack_into

    def one(mode: str) -> float:
        path = _fresh(root, "profile")
        log = seglog.Log.open(path, flush_ms=None, multi_writer=mode == "multi")
        ap = log.append
        gc.collect()
        gc.disable()
        t = time.thread_time_ns()
        if mode in ("excl", "multi"):
            for v in vals:
                ap(v)
        elif mode == "pair":
            for v in vals:
                fl(fd, ex)
                ap(v)
                fl(fd, un)
        else:
            seen = 0
            for v in vals:
                fl(fd, ex)
                counter, holder = peek(mm, 16)
                if counter != seen or holder:
                    pass
                q(mm, 24, 12345)
                off = ap(v)
                seen += 1
                tail(mm, 16, seen, 0, off, off + 1)
                fl(fd, un)
        t = time.thread_time_ns() - t
        gc.enable()
        log.close()
        return t / n
    try:
        return {m: min(one(m) for _ in range(repeat)) for m in ("excl", "pair", "floor", "multi")}
    finally:
        mm.close()
        os.close(fd)
        shutil.rmtree(os.path.join(root, "profile"), ignore_errors=True)


def main() -> None:
    ap = _common.parser(__doc__, "messages per workload, in total",
                        "also run seglog's workloads with DIR/src's seglog (old code)")
    ap.add_argument("--sqlite-fraction", type=float, default=0.2,
                    help="of N, what sqlite3 batch 1 writes (one transaction per message)")
    args = ap.parse_args()
    old = _common.old_src(args)
    unit = PROCS * BATCH
    n = args.n - args.n % unit
    nsq = max(unit, int(n * args.sqlite_fraction) // unit * unit)
    repeat = _common.repeats(args)
    root = tempfile.mkdtemp(prefix="seglog-writers-", dir=args.dir)
    print(f"{n:,} messages of {MSG} bytes per workload, best of {repeat}; {platform.machine()}, "
          f"{os.cpu_count()} cores, Linux {platform.release()}, Python "
          f"{platform.python_version()}, lmdb {lmdb.__version__}, sqlite "
          f"{sqlite3.sqlite_version}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"{_common.load()}; in {root}")
    r: dict[str, float] = {}
    try:
        for b in (1, BATCH):
            r[f"seglog 4 procs, batch {b}"] = seglog_run(root, "seglog-multi", b, n, PROCS, repeat)
            r[f"lmdb 4 procs, batch {b}"] = lmdb_run(root, b, n, PROCS, repeat)
            r[f"sqlite3 WAL 4 procs, batch {b}"] = sqlite_run(root, b, nsq if b == 1 else n,
                                                              PROCS, repeat)
            r[f"seglog exclusive, batch {b}"] = seglog_run(root, "seglog-excl", b, n, 1, repeat)
            r[f"seglog 1 multi-writer, batch {b}"] = seglog_run(root, "seglog-multi", b, n, 1,
                                                                repeat)
            if old is not None:
                r[f"old: seglog 4 procs, batch {b}"] = seglog_run(root, "seglog-multi", b, n,
                                                                  PROCS, repeat, old)
                r[f"old: seglog exclusive, batch {b}"] = seglog_run(root, "seglog-excl", b, n,
                                                                    1, repeat, old)
        r["seglog 4 procs, Producer (linger 5 ms)"] = seglog_run(root, "seglog-producer", 1, n,
                                                                  PROCS, repeat)
        pair, proto, loop = flock_floor(root, 1_000_000, repeat)
        prof = append_profile(root, n, repeat)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(f"\n  {'workload (aggregate over the processes)':<44} {'msgs/s':>10} {'ns/msg':>8}")
    for k, v in r.items():
        print(f"  {k:<44} {v / 1e6:8.3f} M {1e9 / v:8.0f}")
    print("  (every seglog log above read back: offsets 0..N-1 dense, N messages, the "
          "values written)")

    print(f"\n  floor in CPython on this machine, per iteration of a loop of 1,000,000:")
    print(f"    empty loop                                         {loop:7.0f} ns")
    print(f"    flock(fd, LOCK_EX|LOCK_NB) + flock(fd, LOCK_UN)     {pair - loop:7.0f} ns "
          f"(loop subtracted)")
    print(f"    the pair + read counter/holder, write holder, write the tail "
          f"{proto - loop:5.0f} ns")
    e, fp, fl, mw = prof["excl"], prof["pair"], prof["floor"], prof["multi"]
    print(f"  per append() of {n:,}, this thread's CPU ns, best of {repeat}:")
    print(f"    exclusive                                          {e:7.0f} ns")
    print(f"    exclusive inside a flock pair                      {fp:7.0f} ns  (+{fp - e:.0f})")
    print(f"    ... and the least header work (the floor)          {fl:7.0f} ns  (+{fl - e:.0f})")
    print(f"    multi-writer alone                                 {mw:7.0f} ns  (+{mw - e:.0f})")
    print(f"  multi_writer's overhead per append {mw - e:.0f} ns: the flock pair {fp - e:.0f}, "
          f"the least header work {fl - fp:.0f}, seglog beyond the floor {mw - fl:.0f}; with "
          f"a flock pair per append, a multi-writer alone reaches at most {e / fl:.2f}x the "
          f"exclusive append() here (got {e / mw:.2f}x in CPU time)")

    print(f"\n  {'ratio, same run':<56} {'got':>7} {'target':>8}")
    checks = [
        ("batch 1: seglog 4 procs / lmdb 4 procs",
         r["seglog 4 procs, batch 1"] / r["lmdb 4 procs, batch 1"], 1.0),
        ("batch 1: seglog 4 procs / sqlite3 WAL 4 procs",
         r["seglog 4 procs, batch 1"] / r["sqlite3 WAL 4 procs, batch 1"], 5.0),
        ("batch 1: seglog 4 procs / seglog exclusive",
         r["seglog 4 procs, batch 1"] / r["seglog exclusive, batch 1"], 0.5),
        ("batch 50: seglog 4 procs / lmdb 4 procs",
         r["seglog 4 procs, batch 50"] / r["lmdb 4 procs, batch 50"], 2.0),
        ("batch 50: seglog 4 procs / seglog exclusive",
         r["seglog 4 procs, batch 50"] / r["seglog exclusive, batch 50"], 0.8),
        ("append(): 1 multi-writer alone / exclusive",
         r["seglog 1 multi-writer, batch 1"] / r["seglog exclusive, batch 1"], 0.7),
        ("4 procs, Producer / lmdb 4 procs, batch 1",
         r["seglog 4 procs, Producer (linger 5 ms)"] / r["lmdb 4 procs, batch 1"], 2.0),
    ]
    if old is not None:
        for b in (1, BATCH):
            checks += [
                (f"new / old: seglog exclusive, batch {b}",
                 r[f"seglog exclusive, batch {b}"] / r[f"old: seglog exclusive, batch {b}"],
                 0.95),
                (f"new / old: seglog 4 procs, batch {b}",
                 r[f"seglog 4 procs, batch {b}"] / r[f"old: seglog 4 procs, batch {b}"], 0.95)]
    for name, got, target in checks:
        print(f"  {name:<56} {got:6.2f}x {target:6.1f}x  {'ok' if got >= target else 'MISSED'}")
    print(f"\n  {time.strftime('%H:%M UTC', time.gmtime())}; {_common.load()}")


if __name__ == "__main__":
    main()

"""Many threads, one log: append() and Producer.send() from 1 and 8 threads, and
several writer processes with several threads each beside lmdb.

    scripts/bench bench_threads.py                       # 400,000 messages per workload
    scripts/bench bench_threads.py --compare /path/to/old/checkout

Every workload writes N messages in total (``--n``) of 200-byte values (os.urandom,
made before the clock starts), into a fresh log with ``flush_ms=None`` and
``retention_check_ms=None`` (no fsync per message, no background pass), best of 3
(1 with ``--quick``). Each workload runs in a process of its own (spawned: no state
carried from one to the next), whose threads wait at a barrier; the clock runs from
its release to the last thread's return (for a Producer: the last ``flush()``).

1. append(), 1 thread; append_batch() of 50, 1 thread (the single-thread baseline).
2. append(), 8 threads on one ``Log``, N/8 each.
3. Producer.send(), 1 thread and 8 threads on one ``Producer`` (linger_ms=5, the
   default), then ``flush()``; ``durable=True`` the same with 8 threads (each batch
   fsynced before its futures resolve). Beside it the floor of any producer of
   futures in CPython (``_send_floor``: a call, a future and a queue entry per send,
   one thread appending batches and resolving each in one step, nothing else).
4. Several processes, several threads: 4 processes, each ``Log.open(multi_writer=True)``
   on one log and 4 threads calling ``append()``; beside it lmdb, 4 processes with 4
   threads each, one ``put`` per write transaction (sync=False, metasync=False).

After every seglog run the log is read back: offsets 0..N-1 dense, the values written
(sum of their XXH64); the offsets the calls were given are exactly 0..N-1, and each
thread's are increasing (its appends in its order). A failed check stops the bench.

``--compare DIR`` runs the seglog workloads of one process a second time with the
seglog of another checkout (``DIR/src``: the code before a change), in the same run,
and prints new/old ratios. Prints machine facts, date and load, each figure, then the
target ratios with ok / MISSED. Run by hand on a quiet machine; never as a test.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
import traceback
from typing import Any

import _common  # bench/'s own (the script's directory is first on sys.path)

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", "src"))
MSG, BATCH = 200, 50
MASK = (1 << 64) - 1
WAIT = 600.0                 # seconds: any one run, at most


def _import(src: str) -> Any:
    sys.path.insert(0, src)
    import seglog
    return seglog


def _values(count: int, seed: int) -> list[bytes]:
    return [os.urandom(MSG) for _ in range(count)]


def _run_threads(nthreads: int, body: Any) -> float:
    """Start ``nthreads`` threads running ``body(i, barrier)``; seconds from the
    barrier's release to the last thread's end. A thread's exception is raised."""
    barrier = threading.Barrier(nthreads + 1)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            body(i, barrier)
        except BaseException as e:      # reported to the parent below
            errors.append(e)
            barrier.abort()
    ts = [threading.Thread(target=run, args=(i,)) for i in range(nthreads)]
    for t in ts:
        t.start()
    gc.collect()
    gc.disable()
    try:
        barrier.wait(WAIT)
        t0 = time.perf_counter()
        for t in ts:
            t.join(WAIT)
            if t.is_alive():
                raise RuntimeError(f"a thread still runs after {WAIT:.0f} s")
        dt = time.perf_counter() - t0
    finally:
        gc.enable()
    if errors:
        raise errors[0]
    return dt


def one_process(kind: str, path: str, n: int, nthreads: int, src: str) -> tuple[float, list[list[int]], int]:
    """Run one workload in this process: (seconds, each thread's offsets, hash sum)."""
    seglog = _import(src)
    import xxhash
    per = n // nthreads
    vals = _values(per * nthreads, 0)
    hsum = sum(xxhash.xxh64_intdigest(v) for v in vals) & MASK
    log = seglog.Log.open(path, flush_ms=None, retention_check_ms=None)
    got: list[list[int]] = [[] for _ in range(nthreads)]
    try:
        if kind == "append":
            def body(i: int, barrier: Any) -> None:
                ap, mine = log.append, vals[i * per:(i + 1) * per]
                barrier.wait(WAIT)
                got[i] = [ap(v) for v in mine]
            dt = _run_threads(nthreads, body)
        elif kind == "batch":
            def body(i: int, barrier: Any) -> None:
                ab = log.append_batch
                mine = vals[i * per:(i + 1) * per]
                chunks = [mine[j:j + BATCH] for j in range(0, per, BATCH)]
                out: list[int] = []
                barrier.wait(WAIT)
                for c in chunks:
                    out.extend(ab(c))
                got[i] = out
            dt = _run_threads(nthreads, body)
        elif kind in ("producer", "producer-durable"):
            producer = seglog.Producer(log, durable=kind == "producer-durable")
            futs: list[list[Any]] = [[] for _ in range(nthreads)]

            def body(i: int, barrier: Any) -> None:
                send, mine = producer.send, vals[i * per:(i + 1) * per]
                barrier.wait(WAIT)
                futs[i] = [send(v) for v in mine]
                producer.flush()
            dt = _run_threads(nthreads, body)
            producer.close()
            got = [[f.result() for f in fs] for fs in futs]
        elif kind == "send-floor":
            dt, got = _send_floor(seglog, log, vals, per, nthreads)
        else:
            raise ValueError(kind)
    finally:
        log.close()
    return dt, got, hsum


def _send_floor(seglog: Any, log: Any, vals: list[bytes], per: int,
                nthreads: int) -> tuple[float, list[list[int]]]:
    """The least a producer of futures does in CPython: per send, one Python call that
    makes a future of the round now waiting (seglog's ``FutureRound``: started and
    resolved a batch at a time) and queues it with its value under a lock; one
    thread that takes the round every 5 ms, appends it as batches of 1,000 and
    resolves each batch's futures with their offsets in one step. No checks, no
    buffer bound, no serializers, no partitions, no linger logic."""
    from seglog._runtime.future import FutureRound
    lock = threading.Lock()
    q: list[tuple[list[bytes], list[Any], Any]] = [([], [], FutureRound())]
    stop = threading.Event()

    def send(v: bytes) -> Any:
        box = q[0]
        f = box[2].new()
        with lock:
            if q[0] is not box:         # the round was taken meanwhile
                box = q[0]
                f = box[2].new()
            box[0].append(v)
            box[1].append(f)
        return f

    def drain() -> None:
        while True:
            stopping = stop.wait(0.005)
            with lock:
                (vs, fs, rnd), q[0] = q[0], ([], [], FutureRound())
            rnd.start(fs)
            for i in range(0, len(vs), 1000):
                rnd.resolve(i, log.append_batch(vs[i:i + 1000]))
            if stopping:
                return
    writer = threading.Thread(target=drain)
    writer.start()
    futs: list[list[Any]] = [[] for _ in range(nthreads)]

    def body(i: int, barrier: Any) -> None:
        mine = vals[i * per:(i + 1) * per]
        barrier.wait(WAIT)
        futs[i] = [send(v) for v in mine]
        futs[i][-1].result(WAIT)          # the last of this thread's resolved (in order)
    try:
        dt = _run_threads(nthreads, body)
    finally:
        stop.set()
        writer.join(WAIT)
    return dt, [[f.result() for f in fs] for fs in futs]


def multi_process(kind: str, path: str, count: int, nthreads: int, barrier: Any,
                  src: str) -> tuple[int, int, list[list[int]], int]:
    """One of several processes: (start ns, end ns, each thread's offsets, hash)."""
    import xxhash
    per = count // nthreads
    vals = _values(per * nthreads, 0)
    hsum = sum(xxhash.xxh64_intdigest(v) for v in vals) & MASK
    got: list[list[int]] = [[] for _ in range(nthreads)]
    if kind == "seglog":
        seglog = _import(src)
        log = seglog.Log.open(path, flush_ms=None, retention_check_ms=None, multi_writer=True)

        def put(i: int, mine: list[bytes]) -> None:
            ap = log.append
            got[i] = [ap(v) for v in mine]
        close = log.close
    else:
        import lmdb
        env = lmdb.open(path, map_size=1 << 31, sync=False, metasync=False, lock=True,
                        max_spare_txns=nthreads)
        who = os.getpid()

        def put(i: int, mine: list[bytes]) -> None:
            begin = env.begin
            for j, v in enumerate(mine):
                with begin(write=True) as txn:
                    txn.put(who.to_bytes(4, "big") + i.to_bytes(2, "big") + j.to_bytes(8, "big"), v)
        close = env.close
    ready = threading.Barrier(nthreads + 1)
    stamps: list[int] = []

    def run(i: int) -> None:
        mine = vals[i * per:(i + 1) * per]
        ready.wait(WAIT)
        put(i, mine)
        stamps.append(time.clock_gettime_ns(time.CLOCK_MONOTONIC))
    ts = [threading.Thread(target=run, args=(i,)) for i in range(nthreads)]
    for t in ts:
        t.start()
    gc.collect()
    gc.disable()
    barrier.wait(WAIT)             # every process ready
    t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    ready.wait(WAIT)
    for t in ts:
        t.join(WAIT)
    if len(stamps) != nthreads:
        raise RuntimeError("a writer thread failed")
    close()
    return t0, max(stamps), got, hsum


def _child(target: Any, args: tuple[Any, ...], out: Any) -> None:
    try:
        out.send(("ok", target(*args)))
    except BaseException:
        out.send(("error", traceback.format_exc()))
    finally:
        out.close()


def _spawn(target: Any, args: tuple[Any, ...]) -> Any:
    ctx = mp.get_context("spawn")
    rd, wr = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(target, args, wr))
    p.start()
    wr.close()
    return p, rd


def _collect(procs: list[Any]) -> list[Any]:
    results = []
    try:
        for _, rd in procs:
            if not rd.poll(WAIT):
                raise RuntimeError(f"a bench process gave no result in {WAIT:.0f} s")
            results.append(rd.recv())
    finally:
        for p, _ in procs:
            p.join(WAIT)
            if p.is_alive():
                p.kill()
                p.join()
    for r in results:
        if r[0] == "error":
            raise RuntimeError("a bench process failed:\n" + r[1])
    return [r[1] for r in results]


def verify(path: str, n: int, offsets: list[list[int]], hsum: int) -> None:
    sys.path.insert(0, SRC)
    import seglog
    import xxhash
    for mine in offsets:
        if any(b <= a for a, b in zip(mine, mine[1:])):
            raise AssertionError(f"{path}: a thread's offsets are not increasing")
    if sorted(o for mine in offsets for o in mine) != list(range(n)):
        raise AssertionError(f"{path}: the offsets given are not 0..{n - 1}")
    log = seglog.Log.open(path, readonly=True)
    try:
        k = got = 0
        for m in log.iter():
            if m.offset != k:
                raise AssertionError(f"{path}: offset {m.offset} where {k} was due")
            got += xxhash.xxh64_intdigest(m.value)
            k += 1
    finally:
        log.close()
    if k != n or got & MASK != hsum:
        raise AssertionError(f"{path}: {k} messages read back of {n}, or other values")


def run_one(root: str, kind: str, n: int, nthreads: int, repeat: int, src: str) -> float:
    best = float("inf")
    n -= n % (nthreads * BATCH)
    for _ in range(repeat):
        path = os.path.join(root, f"{kind}-{nthreads}")
        shutil.rmtree(path, ignore_errors=True)
        [(dt, offsets, hsum)] = _collect([_spawn(one_process, (kind, path, n, nthreads, src))])
        verify(path, n, offsets, hsum)
        best = min(best, dt)
        shutil.rmtree(path, ignore_errors=True)
    return n / best


def run_multi(root: str, kind: str, n: int, procs: int, nthreads: int, repeat: int,
              src: str) -> float:
    best = float("inf")
    n -= n % (procs * nthreads)
    for _ in range(repeat):
        path = os.path.join(root, f"multi-{kind}")
        shutil.rmtree(path, ignore_errors=True)
        if kind == "seglog":
            sys.path.insert(0, SRC)
            import seglog
            seglog.Log.open(path, flush_ms=None).close()
        else:
            os.makedirs(path)
        barrier = mp.get_context("spawn").Barrier(procs)
        res = _collect([_spawn(multi_process, (kind, path, n // procs, nthreads, barrier, src))
                        for _ in range(procs)])
        dt = (max(r[1] for r in res) - min(r[0] for r in res)) / 1e9
        if kind == "seglog":
            verify(path, n, [o for r in res for o in r[2]], sum(r[3] for r in res) & MASK)
        else:
            import lmdb
            env = lmdb.open(path, readonly=True, lock=False)
            entries = env.stat()["entries"]
            env.close()
            if entries != n:
                raise AssertionError(f"lmdb: {entries} entries of {n}")
        best = min(best, dt)
        shutil.rmtree(path, ignore_errors=True)
    return n / best


def main() -> None:
    args = _common.parser(__doc__, "messages per workload",
                          "also run the one-process workloads with DIR/src's seglog").parse_args()
    repeat = _common.repeats(args)
    old = _common.old_src(args)
    import lmdb
    root = tempfile.mkdtemp(prefix="seglog-threads-", dir=args.dir)
    print(f"{args.n:,} messages of {MSG} bytes per workload, best of {repeat}; "
          f"{platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}, "
          f"Python {platform.python_version()}, lmdb {lmdb.__version__}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {_common.load()}")
    one = [("append(), 1 thread", "append", 1), ("append_batch(50), 1 thread", "batch", 1),
           ("append(), 8 threads", "append", 8),
           ("Producer.send(), 1 thread", "producer", 1),
           ("Producer.send(), 8 threads", "producer", 8),
           ("Producer(durable=True).send(), 8 threads", "producer-durable", 8),
           ("floor of a producer of futures, 8 threads", "send-floor", 8)]
    r: dict[str, float] = {}
    try:
        for name, kind, t in one:
            r[name] = run_one(root, kind, args.n, t, repeat, SRC)
            if old is not None and kind != "send-floor":
                r["old: " + name] = run_one(root, kind, args.n, t, repeat, old)
        r["seglog 4 procs x 4 threads, append()"] = run_multi(root, "seglog", args.n, 4, 4,
                                                                repeat, SRC)
        r["lmdb 4 procs x 4 threads, put()"] = run_multi(root, "lmdb", args.n, 4, 4, repeat,
                                                           SRC)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n  {'workload':<48} {'msgs/s':>10} {'ns/msg':>8}")
    for k, v in r.items():
        print(f"  {k:<48} {v / 1e6:8.3f} M {1e9 / v:8.0f}")
    print("  (every seglog log above read back: offsets 0..N-1 dense, the values written; "
          "each thread's offsets increasing)")
    base = r["append(), 1 thread"]
    checks = [("append() 8 threads / append() 1 thread", r["append(), 8 threads"] / base, 0.8),
              ("Producer.send() 8 threads / append() 1 thread",
               r["Producer.send(), 8 threads"] / base, 1.5),
              ("Producer(durable) 8 threads / Producer 8 threads",
               r["Producer(durable=True).send(), 8 threads"] / r["Producer.send(), 8 threads"],
               0.9),
              ("seglog 4x4 / lmdb 4x4", r["seglog 4 procs x 4 threads, append()"]
               / r["lmdb 4 procs x 4 threads, put()"], 1.0)]
    print(f"  (the floor: {r['floor of a producer of futures, 8 threads'] / base:.2f}x one "
          f"thread's append(); Producer.send() 8 threads reach "
          f"{r['Producer.send(), 8 threads'] / r['floor of a producer of futures, 8 threads']:.2f}x "
          f"of it)")
    if old is not None:
        checks += [(f"new / old: {name}", r[name] / r["old: " + name], 0.95)
                   for name, kind, _ in one if kind != "send-floor"]
    print(f"\n  {'ratio, same run':<56} {'got':>7} {'target':>8}")
    for name, got, target in checks:
        print(f"  {name:<56} {got:6.2f}x {target:6.2f}x  {'ok' if got >= target else 'MISSED'}")
    print(f"\n  {time.strftime('%H:%M UTC', time.gmtime())}; {_common.load()}")


if __name__ == "__main__":
    main()

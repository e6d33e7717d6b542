"""Consumer groups: consume throughput, failover after SIGKILL, rebalance on a join,
commit latency. Run by hand on a quiet machine (never as a test):

    .venv/bin/python bench/bench_groups.py            # 1,000,000 messages, 20 kills
    .venv/bin/python bench/bench_groups.py --n 200000 --kills 5

* consume: one member polls a topic of 4 partitions written in batches of 50
  (200-byte values) from the start to the end, beside ``Log.iter()`` over the same
  data (each partition in turn) in the same run.
* failover: two member processes own the partitions; one is SIGKILLed; the time
  until the survivor owns every partition (as ``describe_group`` shows it).
* rebalance: a group of 8 member processes; a 9th joins; the time until every
  member has adopted the new generation (each reports when it does).
* commit: ``commit()`` latency with one partition owned (durable: two fsyncs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

import seglog  # noqa: E402

MEMBER = r"""
import sys, time, seglog
root, name, out = sys.argv[1:4]
c = seglog.Consumer(root, "g", topics=["ev"], member_id=name, session_timeout_ms=10_000,
                    auto_commit_ms=None)
gen = c.generation
with open(out, "a", buffering=1) as f:
    f.write(f"{name} {gen} {time.time()}\n")
    while True:
        c.poll(timeout_ms=20)
        if c.generation != gen:
            gen = c.generation
            f.write(f"{name} {gen} {time.time()}\n")
"""


def write_topic(root: str, n: int) -> None:
    value = b"v" * 200
    with seglog.Topic.open(root, "ev", partitions=4) as t:
        for i in range(0, n, 50):
            t.append_batch([value] * 50, partition=(i // 50) % 4)


def consume(root: str, n: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    got = 0
    with seglog.Consumer(root, "bench", topics=["ev"], auto_commit_ms=None) as c:
        while got < n:
            got += len(c.poll(timeout_ms=100, max_records=500))
    t_consume = time.perf_counter() - t0
    t0 = time.perf_counter()
    seen = 0
    with seglog.Topic.open(root, "ev", readonly=True) as t:
        for p in range(4):
            for _ in t.partition(p).iter():
                seen += 1
    t_iter = time.perf_counter() - t0
    assert seen == n
    return n / t_consume, n / t_iter


def wait(cond, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.002)


def failover(root: str, kills: int) -> list[float]:
    times = []
    for k in range(kills):
        names = [f"f{k}a", f"f{k}b"]
        out = os.path.join(root, f"failover-{k}.txt")
        procs = {nm: subprocess.Popen([sys.executable, "-c", MEMBER, root, nm, out]) for nm in names}
        try:
            def both() -> bool:
                if not os.path.isdir(os.path.join(root, "__groups", "g")):
                    return False
                d = seglog.describe_group(root, "g")
                return set(d["members"]) == set(names) and all(
                    v["owner"] in names for v in d["partitions"].values())
            wait(both, 30)
            victim, survivor = names
            procs[victim].send_signal(signal.SIGKILL)
            t0 = time.perf_counter()
            wait(lambda: all(v["owner"] == survivor for v in
                             seglog.describe_group(root, "g")["partitions"].values()), 30)
            times.append(time.perf_counter() - t0)
        finally:
            for p in procs.values():
                p.kill()
                p.wait()
    return times


def rebalance(root: str) -> float:
    out = os.path.join(root, "rebalance.txt")
    names = [f"r{i}" for i in range(8)]
    procs = [subprocess.Popen([sys.executable, "-c", MEMBER, root, nm, out]) for nm in names]
    try:
        wait(lambda: len(seglog.describe_group(root, "g")["members"]) == 8, 60)
        time.sleep(0.5)
        gen = seglog.describe_group(root, "g")["generation"]
        t0 = time.time()
        procs.append(subprocess.Popen([sys.executable, "-c", MEMBER, root, "r8", out]))

        def adopted() -> float | None:
            with open(out) as f:
                rows = [line.split() for line in f]
            at = {nm: float(t) for nm, g, t in rows if int(g) > gen}
            return max(at.values()) if len(at) == 9 else None
        wait(lambda: adopted() is not None, 60)
        with open(out) as f:
            joined = min(float(t) for nm, g, t in (line.split() for line in f) if nm == "r8")
        return (adopted() or 0.0) - max(joined, t0)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def commit_latency(root: str) -> list[float]:
    with seglog.Topic.open(root, "one", partitions=1) as t:
        t.append(b"x")
        with seglog.Consumer(root, "c", topics=["one"], auto_commit_ms=None) as c:
            c.poll(timeout_ms=200)
            lat = []
            for i in range(200):
                c.seek("one", 0, i % 2)
                t0 = time.perf_counter()
                c.commit()
                lat.append(time.perf_counter() - t0)
    return lat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="seglog-bench-groups-", dir=args.dir)
    print(f"seglog {seglog.__version__} group benchmark — {time.strftime('%Y-%m-%d %H:%M')}, "
          f"Python {sys.version.split()[0]}, {os.cpu_count()} cores, {args.n:,} messages")
    try:
        write_topic(root, args.n)
        c_rate, i_rate = consume(root, args.n)
        print(f"  consume (one member, batch-50 data)  {c_rate / 1e6:6.3f} M msgs/s")
        print(f"  Log.iter() over the same partitions  {i_rate / 1e6:6.3f} M msgs/s  "
              f"(consume / iter = {c_rate / i_rate:.2f}x)")
        fo = failover(root, args.kills)
        print(f"  failover after SIGKILL ({len(fo)} kills)  median {statistics.median(fo) * 1000:7.1f} ms"
              f"  max {max(fo) * 1000:7.1f} ms")
        rb = rebalance(root)
        print(f"  rebalance: a 9th member joins 8       {rb * 1000:7.1f} ms until all 9 adopted it")
        lat = sorted(commit_latency(root))
        print(f"  commit() latency                      median {statistics.median(lat) * 1000:6.2f} ms"
              f"  p99 {lat[int(len(lat) * 0.99)] * 1000:6.2f} ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

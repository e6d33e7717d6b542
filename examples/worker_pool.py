"""A pool of worker processes sharing a topic through a consumer group, at least once.

    .venv/bin/python examples/worker_pool.py                       # 4 workers, 200,000 orders
    .venv/bin/python examples/worker_pool.py --workers 3 --orders 50000 --kill-one

A producer appends orders (keyed by customer, so one customer's orders stay in one
partition and in order) to a topic of 8 partitions. N worker processes join the
group "billing"; the group splits the partitions among them, with no broker: only
files and locks under the topic root. Each worker, for every poll:

1. processes the orders (here: the amount with tax, per order);
2. appends its results to its own output log and ``flush()``es them (durable);
3. then ``commit()``s its position.

Results are durable before the position is, so a worker that dies between 2 and 3
is the only way an order is processed twice: its partitions go to the others, who
start at the last committed offset. That is at-least-once delivery; the results
carry the order's (partition, offset), so a reader keeps one per order (idempotent
processing). ``--kill-one`` SIGKILLs a worker a quarter of the way (the second half
of the orders is produced after the kill) to show the hand-over; the check at the
end still finds every order exactly once after de-duplication.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import seglog  # noqa: E402

TOPIC, GROUP = "orders", "billing"


def produce(root: str, first: int, end: int, partitions: int) -> None:
    """Orders ``first`` to ``end - 1``."""
    with seglog.Topic.open(root, TOPIC, partitions=partitions) as topic:
        for start in range(first, end, 500):
            topic.append_batch([
                seglog.Record(json.dumps({"order": i, "cents": 100 + i % 900}).encode(),
                              key=b"customer-%d" % (i % 1000))
                for i in range(start, min(end, start + 500))])


def worker(root: str, out_dir: str, name: str, stop: "mp.synchronize.Event") -> None:
    """One member of the group: process, make the results durable, then commit."""
    with seglog.Log.open(os.path.join(out_dir, name)) as results, \
            seglog.Consumer(root, GROUP, topics=[TOPIC], member_id=name,
                            auto_commit_ms=None,          # commit only after the results
                            session_timeout_ms=5000) as consumer:
        while not stop.is_set():
            batch = consumer.poll(timeout_ms=200)
            if not batch:
                continue
            out = []
            for m in batch:
                order = json.loads(m.value or b"{}")
                out.append(seglog.Record(
                    json.dumps({"cents_with_tax": order["cents"] * 120 // 100}).encode(),
                    key=b"%d:%d" % (m.partition, m.offset)))     # the order's identity
            results.append_batch(out)
            results.flush()              # durable results first ...
            try:
                consumer.commit()        # ... then the position: at least once
            except seglog.CommitFailedError:
                # expelled meanwhile (this process stalled past the session timeout):
                # another member may redo these orders; the consumer rejoins on its own
                pass
    # leaving the with-block closed the consumer: it left the group at once


def committed(root: str) -> tuple[int, int | None]:
    """Orders the group has committed, and the lag (None until every partition has
    a commit)."""
    try:
        d = seglog.describe_group(root, GROUP)
    except seglog.InvalidConfigError:          # no worker has joined yet
        return 0, None
    parts = d["partitions"].values()
    lags = [p["lag"] for p in parts]
    return (sum(p["committed"] or 0 for p in parts),
            None if not lags or None in lags else sum(lags))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--orders", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--kill-one", action="store_true", help="SIGKILL a worker half-way")
    ap.add_argument("--dir", help="where to put the topic (default: a temporary directory)")
    args = ap.parse_args()
    base = args.dir or tempfile.mkdtemp(prefix="seglog-pool-")
    root, out_dir = os.path.join(base, "topics"), os.path.join(base, "results")
    os.makedirs(root, exist_ok=True)
    os.makedirs(out_dir, exist_ok=True)
    stop: "mp.synchronize.Event | None" = None
    procs: "dict[str, mp.process.BaseProcess]" = {}
    try:
        # with --kill-one, half the orders now and half after the kill, so that the
        # survivors are seen taking the killed worker's partitions over
        first = args.orders // 2 if args.kill_one else args.orders
        t0 = time.perf_counter()
        produce(root, 0, first, args.partitions)
        print(f"produced {first:,} orders into {args.partitions} partitions "
              f"in {time.perf_counter() - t0:.2f} s")

        ctx = mp.get_context("spawn")       # a fresh interpreter per worker
        stop = ctx.Event()
        procs.update({f"worker-{i}": ctx.Process(target=worker,
                                                 args=(root, out_dir, f"worker-{i}", stop))
                      for i in range(args.workers)})
        t0 = time.perf_counter()
        for p in procs.values():
            p.start()
        killed = None
        deadline = time.monotonic() + 300
        while True:
            done, lag = committed(root)
            if args.kill_one and killed is None and (done >= args.orders // 4 or lag == 0):
                killed = "worker-0"
                os.kill(procs[killed].pid, signal.SIGKILL)
                t_kill = time.monotonic()
                print(f"SIGKILLed {killed} at {done:,} committed orders")
                # describe_group shows a dead member's partitions with no owner
                while any(v["owner"] in (killed, None) for v in
                          seglog.describe_group(root, GROUP)["partitions"].values()):
                    time.sleep(0.005)
                print(f"  its partitions had new owners {1000 * (time.monotonic() - t_kill):.0f}"
                      f" ms later")
                produce(root, first, args.orders, args.partitions)
                print(f"produced the other {args.orders - first:,} orders")
                continue
            if lag == 0:
                break
            if time.monotonic() > deadline:
                raise SystemExit("the pool did not finish within 300 s")
            time.sleep(0.02)
        elapsed = time.perf_counter() - t0
        d = seglog.describe_group(root, GROUP)
        # a partition may have no owner at this instant (a rebalance under way: the
        # killed member expelled late, or one that stalled past its session rejoining):
        # name the members that own one
        owners = sorted({v["owner"] for v in d["partitions"].values()} - {None})
        stop_workers(stop, procs)
        print(f"{len(procs) - (killed is not None)} live workers ({', '.join(owners)}) "
              f"processed the topic in {elapsed:.2f} s "
              f"({args.orders / elapsed:,.0f} orders/s), generation {d['generation']}")

        # the check: every order has a result; duplicates only from a killed worker
        seen: dict[bytes, int] = {}
        for name in sorted(os.listdir(out_dir)):
            with seglog.Log.open(os.path.join(out_dir, name), readonly=True) as results:
                for m in results.iter():
                    assert m.key is not None
                    seen[m.key] = seen.get(m.key, 0) + 1
        with seglog.Topic.open(root, TOPIC, readonly=True) as topic:
            want = {b"%d:%d" % (p, m.offset)
                    for p in range(topic.num_partitions) for m in topic.partition(p).iter()}
        missing = want - set(seen)
        twice = sum(n - 1 for n in seen.values())
        print(f"results: {len(seen):,} distinct orders of {len(want):,}, "
              f"{len(missing)} missing, {twice} processed twice")
        return 1 if missing or set(seen) - want else 0
    finally:
        stop_workers(stop, procs)       # on an error too: else the exit waits for them
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)


def stop_workers(stop: "mp.synchronize.Event | None",
                 procs: "dict[str, mp.process.BaseProcess]") -> None:
    """Ask the workers to leave, wait for them (30 s each), SIGKILL what is left."""
    if stop is not None:
        stop.set()
    for p in procs.values():
        if p.pid is None:           # never started
            continue
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
            p.join(timeout=30)


if __name__ == "__main__":
    sys.exit(main())

"""Spark reading seglog: ``spark.read.format("seglog")`` beside ``spark.read.text`` of
the same messages as newline-delimited files and ``spark.read.parquet`` of the same
data, in one local SparkSession, with the same two queries (``count()`` and
``sum(length(value))``). Run by hand on a quiet machine (never as a test):

    .venv/bin/python bench/bench_spark.py                  # 2,000,000 access-log lines
    .venv/bin/python bench/bench_spark.py --n 1000000 --record-timestamps

The messages are the demo's access-log lines (examples/access_log.py, about 180
bytes), written to a topic of ``--partitions`` partitions in batches of 500: by
default stamped by the log (one timestamp per batch, as a producer that does not
set them), with ``--record-timestamps`` each with its own (the decoder then builds
the timestamp column per message). The text files and Parquet files hold the same
values, one file per partition; Parquet also holds the other columns of the
seglog schema. Each figure is the best of ``--repeat`` runs of the query (the runs go
round the sources, so that a slow spell of a shared machine is spread over all).

Beside them, two stand-ins over the same ranges: the naive read (a Python tuple per
message, which pyspark converts to Arrow row by row) and the floor of the Python
Data Source API (each task yields prebuilt Arrow batches of the same shape and row
count without reading: what Spark costs a Python source of this data whatever it
does). Then where the time of the seglog query goes: a query of an empty topic
(the fixed cost), the floor above it (Arrow into the JVM, rows, the aggregate), the
rest (reading); and the Python read alone in one process, by stage.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import seglog  # noqa: E402
from access_log import access_log_lines  # noqa: E402
from seglog import spark as sgs  # noqa: E402
from seglog.spark._arrow import CHUNK_BYTES  # noqa: E402
from seglog.spark._options import parse_options  # noqa: E402


def write_data(d: str, n: int, parts: int, stamped: bool) -> tuple[str, str, str, int]:
    """The topic, the text files and the Parquet files of the same n messages."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    root, text, parquet = (os.path.join(d, x) for x in ("topic", "text", "parquet"))
    os.makedirs(text)
    os.makedirs(parquet)
    per: list[list[bytes]] = [[] for _ in range(parts)]
    stamps: list[list[int]] = [[] for _ in range(parts)]
    batch = 500
    nbytes = 0
    with seglog.Topic.open(root, "access", partitions=parts) as t:
        buf: list[tuple[int, bytes]] = []
        k = 0
        for ts, line in access_log_lines(n):
            buf.append((ts, line))
            nbytes += len(line)
            if len(buf) == batch:
                p = k % parts
                k += 1
                t.append_batch([seglog.Record(v, timestamp=s) for s, v in buf] if stamped
                               else [v for _, v in buf], partition=p)
                per[p] += [v for _, v in buf]
                stamps[p] += [s for s, _ in buf]
                buf = []
        if buf:
            p = k % parts
            t.append_batch([seglog.Record(v, timestamp=s) for s, v in buf] if stamped
                           else [v for _, v in buf], partition=p)
            per[p] += [v for _, v in buf]
            stamps[p] += [s for s, _ in buf]
        t.flush()
    for p in range(parts):
        with open(os.path.join(text, f"part-{p}.txt"), "wb") as f:
            f.write(b"\n".join(per[p]) + b"\n")
        with seglog.Log.open(os.path.join(root, f"access-{p}"), readonly=True) as log:
            ts = log.read_arrow().column("timestamp").cast(pa.int64()).to_numpy() * 1000
        m = len(per[p])
        table = pa.table({
            "key": pa.nulls(m, pa.binary()), "value": pa.array(per[p], pa.binary()),
            "topic": pa.array(["access"] * m), "partition": pa.array([p] * m, pa.int32()),
            "offset": pa.array(range(m), pa.int64()),
            "timestamp": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "timestampType": pa.array([0] * m, pa.int32())})
        pq.write_table(table, os.path.join(parquet, f"part-{p}.parquet"))
    return root, text, parquet, nbytes


def best(fn, repeat: int) -> tuple[float, object]:
    out = None
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def python_read(root: str, parts: int) -> dict[str, float]:
    """The seglog Python read of every partition in this process: read_range as a
    task runs it (best of 3), and its two stages timed apart: ``Log.iter_arrow``
    (read, checked, built with numpy) and ``spark_batch`` (Spark's layout)."""
    import pyarrow as pa
    o = parse_options({"path": root, "subscribe": "access"}, streaming=False)
    ranges = []
    for p in range(parts):
        with seglog.Log.open(os.path.join(root, f"access-{p}"), readonly=True) as log:
            ranges.append(sgs.OffsetRange("access", p, log.start_offset, log.end_offset))

    def whole() -> None:
        for r in ranges:
            for _ in sgs.read_range(o, r):
                pass
    t_range, _ = best(whole, 3)
    t_iter = t_arrow = 0.0
    rows = 0
    for r in ranges:
        with seglog.Log.open(os.path.join(root, f"access-{r.partition}"), readonly=True) as log:
            batches = log.iter_arrow(r.fromOffset, r.untilOffset)
            while True:
                t0 = time.perf_counter()
                rb = next(batches, None)
                t1 = time.perf_counter()
                if rb is None:
                    break
                offsets, ms, keys, values, _ = rb.columns
                b = sgs.spark_batch(seglog.ArrowColumns(offsets, ms.view(pa.int64()), keys,
                                                        values, None), "access", r.partition)
                t_iter += t1 - t0
                t_arrow += time.perf_counter() - t1
                rows += b.num_rows
    return {"iter": t_iter, "arrow": t_arrow, "range": t_range, "rows": rows}


def bench_sources(spark: object) -> None:
    """Two stand-ins registered beside "seglog", for the comparison: the same ranges
    read the naive way (a Python tuple per message, converted to Arrow by pyspark),
    and the floor of the Python Data Source API (prebuilt batches of the same shape
    and count, no reading)."""
    from pyspark.sql.datasource import DataSource
    cls = sgs.spark_classes()

    class TupleReader(cls["SeglogReader"]):
        def read(self, partition):
            import datetime
            r = partition.value
            utc = datetime.timezone.utc
            with seglog.Log.open(self.o.directory((r.topic, r.partition)), readonly=True) as log:
                for m in log.iter(r.fromOffset, r.untilOffset):
                    yield (m.key, m.value, r.topic, r.partition, m.offset,
                           datetime.datetime.fromtimestamp(m.timestamp / 1000, utc), 0)

    class FloorReader(cls["SeglogReader"]):
        def read(self, partition):
            r = partition.value
            with seglog.Log.open(self.o.directory((r.topic, r.partition)), readonly=True) as log:
                ms = log.read(r.fromOffset, CHUNK_BYTES)
                b = sgs.spark_batch(ms.arrow_columns(), r.topic, r.partition)
            left = r.untilOffset - r.fromOffset
            while left > 0:
                yield b if b.num_rows <= left else b.slice(0, left)
                left -= b.num_rows

    def source(name: str, reader: type) -> type:
        class Source(cls["SeglogDataSource"]):
            @classmethod
            def name(cls) -> str:
                return name

            def reader(self, schema):
                return reader(parse_options(self.options, streaming=False))
        return Source

    assert issubclass(cls["SeglogDataSource"], DataSource)
    spark.dataSource.register(source("seglog_tuples", TupleReader))
    spark.dataSource.register(source("seglog_floor", FloorReader))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--record-timestamps", action="store_true")
    ap.add_argument("--dir", default=None, help="where to write the data (default: a temp dir)")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    d = tempfile.mkdtemp(prefix="bench_spark-", dir=args.dir)
    try:
        t0 = time.perf_counter()
        root, text, parquet, nbytes = write_data(d, args.n, args.partitions, args.record_timestamps)
        print(f"{args.n:,} access-log lines, {nbytes / args.n:.0f} bytes on average, "
              f"{args.partitions} partitions, "
              f"{'a timestamp per record' if args.record_timestamps else 'stamped per batch'}; "
              f"written in {time.perf_counter() - t0:.1f} s")

        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master(f"local[{os.cpu_count() or 2}]")
                 .appName("bench_spark").config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        sgs.register(spark)
        print(f"Spark {spark.version}, local[{os.cpu_count() or 2}], Python "
              f"{sys.version.split()[0]}; best of {args.repeat}")
        bench_sources(spark)

        def fmt(name: str) -> object:
            return lambda: spark.read.format(name).option("subscribe", "access").load(root)

        sources = {
            'format("seglog")': fmt("seglog"),
            "naive: a tuple per message": fmt("seglog_tuples"),
            "floor: prebuilt batches": fmt("seglog_floor"),
            "text": lambda: spark.read.text(text),
            "parquet": lambda: spark.read.parquet(parquet),
        }
        queries = {
            "count()": lambda df: df.count(),
            "sum(length(value))": lambda df: df.selectExpr("sum(length(value))").first()[0],
        }
        answers: dict[str, set[object]] = {q: set() for q in queries}
        # a whole round first: the JVM's compiled code, the page cache and the Python
        # workers are then warm for every figure, not only for the later ones
        for q in queries.values():
            for make in sources.values():
                q(make())
        # the repeats go round the sources (not one source's repeats in a row), so
        # that a slow spell of a shared machine spreads over all of them
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.repeat):
            for qname, q in queries.items():
                for sname, make in sources.items():
                    t0 = time.perf_counter()
                    out = q(make())
                    times.setdefault((sname, qname), []).append(time.perf_counter() - t0)
                    if not sname.startswith("floor"):     # its rows are copies of the first ones
                        answers[qname].add(out)
        results = {k: min(v) for k, v in times.items()}
        for qname, got in answers.items():
            assert len(got) == 1, f"{qname}: the sources disagree: {got}"
        print(f"\n| query | source | seconds | rows/s | vs text | vs floor |\n"
              f"|---|---|---:|---:|---:|---:|")
        for qname in queries:
            base = results[("text", qname)]
            floor = results[("floor: prebuilt batches", qname)]
            for sname in sources:
                s = results[(sname, qname)]
                print(f"| {qname} | {sname} | {s:.3f} | {args.n / s / 1e6:.2f} M | "
                      f"{base / s:.2f}x | {floor / s:.2f}x |")

        # where the seglog query's time goes
        python_read(root, args.partitions)      # warm: imports, the page cache
        py = python_read(root, args.partitions)
        empty = os.path.join(d, "empty")
        seglog.Topic.open(empty, "access", partitions=args.partitions).close()
        fixed, _ = best(lambda: spark.read.format("seglog").option("subscribe", "access")
                        .load(empty).count(), args.repeat)
        cores = min(os.cpu_count() or 2, args.partitions)
        for qname in queries:
            total = results[('format("seglog")', qname)]
            floor = results[("floor: prebuilt batches", qname)]
            print(f"\nWhere the seglog {qname} goes ({total:.2f} s):")
            print(f"  a query of an empty topic (planning, tasks, Python workers): {fixed:.2f} s")
            print(f"  the same rows from prebuilt Arrow batches, minus that (Arrow to the JVM, "
                  f"rows, the aggregate): {floor - fixed:.2f} s")
            print(f"  reading them from the log (the rest): {total - floor:.2f} s")
        print(f"\nThe Python read alone, in one process ({py['rows']:,} rows; in the queries "
              f"{cores} processes share it):")
        for k, what in (("range", "read_range, as the tasks run it"),
                        ("iter", "  its Log.iter_arrow (read, checked, built with numpy)"),
                        ("arrow", "  its spark_batch (Spark's layout)")):
            print(f"  {what}: {py[k]:.2f} s ({py['rows'] / py[k] / 1e6:.1f} M rows/s)")
        spark.stop()
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()

"""A real Apache Kafka broker as the oracle of seglog.kafka (run by scripts/kafka-fixtures
and scripts/kafka-live; never by the test suite).

``fixtures``: fetches Kafka with Maven into a cache outside the repository, starts one
KRaft broker on loopback with two log dirs, produces with kafka-python (every codec,
keys, headers, tombstones, small segments that roll, transactions committed, aborted
and one left open, a compacted topic after the cleaner ran, a topic moved between the
two log dirs, records deleted below a new log start offset), records what a consumer
reads back at both isolation levels as JSON, stops the broker, and copies the log dirs
to tests/data/kafka/. Legacy segments (magic 0 and 1, which Kafka 4 no longer writes)
are built with kafka-python's legacy record builder, their expectation read back by
kafka-python's own decoder.

``live``: a broker written to by a producer while seglog reads the partition's files;
seglog's view, once the producer stops, must equal a consumer's.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

KAFKA_VERSION = "4.1.1"
CACHE = os.environ.get("SEGLOG_KAFKA_CACHE", os.path.expanduser("~/.cache/seglog-kafka"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "kafka")
PORT = int(os.environ.get("SEGLOG_KAFKA_PORT", "39092"))
BOOT = f"127.0.0.1:{PORT}"
TS0 = 1_750_000_000_000

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>seglog</groupId><artifactId>kafka-fixtures</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{v}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId>
      <version>{v}</version></dependency>
  </dependencies>
</project>
"""


def kafka_lib() -> str:
    """The directory of Kafka's jars, fetched with Maven once."""
    home = os.path.join(CACHE, KAFKA_VERSION)
    lib = os.path.join(home, "lib")
    done = os.path.join(home, ".fetched")
    if not os.path.exists(done):
        os.makedirs(home, exist_ok=True)
        with open(os.path.join(home, "pom.xml"), "w") as f:
            f.write(POM.format(v=KAFKA_VERSION))
        subprocess.run(["mvn", "-q", "-B", "dependency:copy-dependencies",
                        f"-DoutputDirectory={lib}"], cwd=home, check=True, timeout=1800)
        open(done, "w").close()
    return lib


def _java(lib: str, main: str, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["java", "-cp", os.path.join(lib, "*"), main, *args],
                          text=True, capture_output=True, timeout=300, **kw)  # type: ignore


class Broker:
    """One KRaft broker and controller on loopback, log dirs ``dirs``; its metadata
    log apart (not a data dir)."""

    def __init__(self, work: str, dirs: list[str], extra: dict[str, str] | None = None):
        self.lib = kafka_lib()
        self.work = work
        self.dirs = dirs
        props = {
            "process.roles": "broker,controller", "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{PORT + 1}",
            "listeners": f"PLAINTEXT://127.0.0.1:{PORT},CONTROLLER://127.0.0.1:{PORT + 1}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{PORT}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": ",".join(dirs), "metadata.log.dir": os.path.join(work, "meta"),
            "num.partitions": "1", "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1", "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1", "transaction.state.log.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0", "log.cleaner.backoff.ms": "500",
            "log.retention.check.interval.ms": "1000", "auto.create.topics.enable": "false",
        }
        props.update(extra or {})
        self.config = os.path.join(work, "server.properties")
        with open(self.config, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in props.items())
        fmt = _java(self.lib, "kafka.tools.StorageTool", "format", "-t",
                    base64.urlsafe_b64encode(uuid.uuid4().bytes).decode()[:22],
                    "-c", self.config)
        if fmt.returncode:
            raise RuntimeError(f"kafka storage format failed: {fmt.stdout}{fmt.stderr}")
        self.log = open(os.path.join(work, "broker.log"), "w")
        self.proc = subprocess.Popen(
            ["java", "-Xmx512m", "-cp", os.path.join(self.lib, "*"), "kafka.Kafka", self.config],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the broker exited: see {self.log.name}")
            try:
                socket.create_connection(("127.0.0.1", PORT), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the broker did not listen within 120 s")
                time.sleep(0.2)

    def stop(self) -> None:
        """A clean shutdown (SIGTERM): the broker writes its checkpoints and trims its
        indexes, as a stopped broker's volume has them."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def tool(self, main: str, *args: str) -> str:
        r = _java(self.lib, main, *args)
        if r.returncode:
            raise RuntimeError(f"{main} failed: {r.stdout}{r.stderr}")
        return r.stdout


# -- what a consumer reads ----------------------------------------------------------
def hexed(b: bytes | None) -> str | None:
    return None if b is None else b.hex()


def consume(topic: str, partition: int, isolation: str) -> list[dict[str, object]]:
    """Every record a kafka-python consumer reads from the partition's earliest offset
    to its end (the last stable offset under read_committed)."""
    from kafka import KafkaConsumer, TopicPartition
    tp = TopicPartition(topic, partition)
    c = KafkaConsumer(bootstrap_servers=BOOT, isolation_level=isolation,
                      enable_auto_commit=False, auto_offset_reset="earliest",
                      fetch_max_bytes=1 << 20, max_partition_fetch_bytes=1 << 20)
    try:
        c.assign([tp])
        c.seek_to_beginning(tp)
        end = c.end_offsets([tp])[tp]
        out: list[dict[str, object]] = []
        deadline = time.monotonic() + 120
        while c.position(tp) < end:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}-{partition}: the consumer did not reach {end}")
            for recs in c.poll(timeout_ms=500).values():
                out += [{"offset": r.offset, "timestamp": r.timestamp, "key": hexed(r.key),
                         "value": hexed(r.value),
                         "headers": [[k, hexed(v)] for k, v in r.headers]} for r in recs]
        return out
    finally:
        c.close()


def record_expected(topics: dict[str, int], path: str) -> None:
    from kafka import KafkaConsumer, TopicPartition
    expected: dict[str, object] = {}
    c = KafkaConsumer(bootstrap_servers=BOOT)
    for topic, n in topics.items():
        for p in range(n):
            tp = TopicPartition(topic, p)
            name = f"{topic}-{p}"
            c.assign([tp])
            expected[name] = {
                "log_start_offset": c.beginning_offsets([tp])[tp],
                "log_end_offset": c.end_offsets([tp])[tp],
                "read_uncommitted": consume(topic, p, "read_uncommitted"),
                "read_committed": consume(topic, p, "read_committed")}
    c.close()
    with open(path, "w") as f:
        json.dump(expected, f, indent=0, sort_keys=True)


# -- what is produced ------------------------------------------------------------------
def create(topic: str, partitions: int = 1, **config: str) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    a = KafkaAdminClient(bootstrap_servers=BOOT)
    a.create_topics([NewTopic(topic, partitions, 1, topic_configs=config)])
    a.close()


def value(i: int, n: int = 60) -> bytes:
    return (b"record %06d " % i + bytes(range(256)) * 4)[:n]


def produce_codecs() -> None:
    """Every codec, keys, headers, tombstones; small segments (several rolls); one
    topic stamps LogAppendTime."""
    from kafka import KafkaProducer
    # Kafka 4 refuses segment.bytes below 1 MiB: segments roll when their offset index
    # is full instead (5 entries, one each 2 KiB of batches)
    create("codecs", 1, **{"segment.index.bytes": "40", "index.interval.bytes": "2048"})
    create("appendtime", 1, **{"message.timestamp.type": "LogAppendTime"})
    i = 0
    for codec in (None, "gzip", "snappy", "lz4", "zstd"):
        p = KafkaProducer(bootstrap_servers=BOOT, compression_type=codec, linger_ms=50,
                          batch_size=4096, acks="all")
        for j in range(120):
            key = None if j % 3 == 0 else b"key-%d" % (j % 17)
            val = None if j % 29 == 5 else value(i, 20 + (i * 37) % 300)
            headers = [("h%d" % (j % 4), b"v%d" % i), ("codec", (codec or "none").encode())] \
                if j % 5 == 0 else []
            p.send("codecs", val if val is not None or key else b"", key=key,
                   headers=headers, timestamp_ms=TS0 + i * 7)
            p.send("appendtime", value(i), key=key)
            i += 1
            if j % 40 == 39:
                p.flush()
        p.close()


def produce_uniform() -> None:
    """Batches of 50 records of 200 bytes each, no key (the fast path's shape)."""
    from kafka import KafkaProducer
    create("uniform", 1)
    p = KafkaProducer(bootstrap_servers=BOOT, linger_ms=100, batch_size=50 * 220,
                      acks="all")
    for i in range(2000):
        p.send("uniform", (b"u%07d" % i) * 25, timestamp_ms=TS0 + i // 7)
    p.close()


def produce_transactions() -> None:
    """Committed, aborted, and one transaction left open, between plain records; two
    partitions, the open one in partition 0 only."""
    from kafka import KafkaProducer
    create("txn", 2)
    plain = KafkaProducer(bootstrap_servers=BOOT, acks="all")

    def txp(tid: str) -> KafkaProducer:
        p = KafkaProducer(bootstrap_servers=BOOT, transactional_id=tid, acks="all",
                          enable_idempotence=True)
        p.init_transactions()
        return p

    a, b = txp("tx-a"), txp("tx-b")
    n = 0
    for rnd in range(6):
        for prod, fate in ((a, "commit"), (b, "abort")):
            prod.begin_transaction()
            for k in range(5 + rnd):
                for part in (0, 1):
                    prod.send("txn", b"%s round %d #%d" % (fate.encode(), rnd, k),
                              key=b"k%d" % k, partition=part,
                              headers=[("fate", fate.encode())])
            plain.send("txn", b"plain %d" % n, partition=rnd % 2)
            n += 1
            prod.flush()
            if rnd % 2 == 0:
                plain.flush()
            if fate == "commit":
                prod.commit_transaction()
            else:
                prod.abort_transaction()
    plain.flush()
    a.close()
    b.close()
    c = txp("tx-open")
    c.begin_transaction()
    for k in range(4):
        c.send("txn", b"open #%d" % k, partition=0)
    c.flush()
    for k in range(3):                # after the open transaction's start: not committed-readable
        plain.send("txn", b"after open %d" % k, partition=0)
    plain.flush()
    plain.close()
    # the open transaction's producer goes away without committing: its transaction
    # stays open until the coordinator's timeout, after the broker stopped
    c._sender.initiate_close()


def produce_compacted(broker: Broker) -> None:
    """A compacted topic after the cleaner ran: holes in the offsets, tombstones."""
    from kafka import KafkaProducer
    create("compacted", 1, **{"cleanup.policy": "compact", "segment.index.bytes": "40",
                              "index.interval.bytes": "2048",
                              "min.cleanable.dirty.ratio": "0.01", "segment.ms": "100",
                              "delete.retention.ms": "86400000",
                              "min.compaction.lag.ms": "0"})
    p = KafkaProducer(bootstrap_servers=BOOT, acks="all", linger_ms=20)
    for i in range(1500):
        k = i % 40
        p.send("compacted", None if i % 97 == 3 else value(i, 100), key=b"key-%02d" % k)
    p.flush()
    time.sleep(0.3)
    p.send("compacted", b"last", key=b"roll")       # past segment.ms: rolls the segment
    p.close()
    deadline = time.monotonic() + 120
    cp = [os.path.join(d, "cleaner-offset-checkpoint") for d in broker.dirs]
    while True:
        seen = "".join(open(f).read() for f in cp if os.path.exists(f))
        if "compacted 0 " in seen:
            break
        if time.monotonic() > deadline:
            raise RuntimeError("the log cleaner did not compact the topic within 120 s")
        time.sleep(0.5)


def produce_moved(broker: Broker) -> None:
    """A partition moved from one log dir to the other (alterReplicaLogDirs)."""
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient
    create("moved", 1)
    p = KafkaProducer(bootstrap_servers=BOOT, acks="all")
    for i in range(300):
        p.send("moved", value(i, 80), key=b"m%d" % (i % 9))
    p.flush()
    a = KafkaAdminClient(bootstrap_servers=BOOT)
    where = next(d for d in broker.dirs if os.path.isdir(os.path.join(d, "moved-0")))
    other = next(d for d in broker.dirs if d != where)
    a.alter_replica_log_dirs({("moved", 0, 1): other})
    deadline = time.monotonic() + 120
    while not (os.path.isdir(os.path.join(other, "moved-0"))
               and not any(n.startswith("moved-0.") for n in os.listdir(other))):
        if time.monotonic() > deadline:
            raise RuntimeError("the move between log dirs did not finish within 120 s")
        time.sleep(0.3)
    for i in range(300, 350):
        p.send("moved", value(i, 80))
    p.close()
    a.close()


def delete_below(topic: str, offset: int) -> None:
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    a = KafkaAdminClient(bootstrap_servers=BOOT)
    a.delete_records({TopicPartition(topic, 0): offset})
    a.close()


def legacy(out: str) -> None:
    """Segments of magic 0 and 1 (plain and compressed), built with kafka-python's
    legacy builder, in partition dirs of a log dir; their expectation from
    kafka-python's decoder of the same bytes."""
    from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords
    d = os.path.join(out, "legacy")
    expected: dict[str, object] = {}
    for magic in (0, 1):
        for codec_name, codec in (("none", 0), ("gzip", 1), ("snappy", 2), ("lz4", 3)):
            name = f"legacy{magic}{codec_name}-0"
            os.makedirs(os.path.join(d, name))
            data = b""
            off = 0
            for batch in range(6):
                n = 1 if codec == 0 else 4 + batch
                recs = []
                for j in range(n):
                    i = off + j
                    key = None if i % 4 == 0 else b"lk%d" % i
                    val = None if i % 11 == 7 else value(i, 10 + i % 50)
                    recs.append((i, key, val))
                if codec == 0:
                    for i, key, val in recs:
                        b = LegacyRecordBatchBuilder(magic, 0, 1 << 20)
                        b.append(0, TS0 + i, key, val)
                        raw = bytearray(b.build())
                        raw[0:8] = i.to_bytes(8, "big")
                        data += bytes(raw)
                else:
                    b = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
                    for j, (i, key, val) in enumerate(recs):
                        b.append(j, TS0 + i, key, val)
                    raw = bytearray(b.build())
                    last = recs[-1][0]
                    raw[0:8] = last.to_bytes(8, "big")
                    if magic == 0:      # magic 0: inner offsets are absolute
                        raw = bytearray(_absolute_inner(bytes(raw), recs[0][0]))
                    data += bytes(raw)
                off += n + (2 if batch == 3 else 0)         # a hole, as compaction leaves
            with open(os.path.join(d, name, "%020d.log" % 0), "wb") as f:
                f.write(data)
            got = []
            mr = MemoryRecords(data)
            while True:
                batch = mr.next_batch()
                if batch is None:
                    break
                for r in batch:
                    got.append({"offset": r.offset, "timestamp": r.timestamp if magic else -1,
                                "key": hexed(r.key), "value": hexed(r.value), "headers": []})
            expected[name] = {"log_start_offset": 0, "log_end_offset": got[-1]["offset"] + 1,
                              "read_uncommitted": got, "read_committed": got}
    with open(os.path.join(out, "legacy.json"), "w") as f:
        json.dump(expected, f, indent=0, sort_keys=True)


def _absolute_inner(raw: bytes, first: int) -> bytes:
    """A magic 0 compressed message with its inner offsets made absolute (as the
    brokers of that format stored them)."""
    from kafka.codec import gzip_decode, gzip_encode, lz4_decode_old_kafka, \
        lz4_encode_old_kafka, snappy_decode, snappy_encode
    from kafka.record.util import calc_crc32
    codec = raw[17] & 7
    kl = int.from_bytes(raw[18:22], "big", signed=True)
    vstart = 22 + max(kl, 0) + 4
    inner = {1: gzip_decode, 2: snappy_decode, 3: lz4_decode_old_kafka}[codec](raw[vstart:])
    out, p, k = b"", 0, 0
    while p < len(inner):
        size = int.from_bytes(inner[p + 8:p + 12], "big")
        out += (first + k).to_bytes(8, "big") + inner[p + 8:p + 12 + size]
        p += 12 + size
        k += 1
    enc = {1: gzip_encode, 2: snappy_encode, 3: lz4_encode_old_kafka}[codec](out)
    body = raw[16:18] + raw[18:vstart - 4] + len(enc).to_bytes(4, "big") + enc
    crc = calc_crc32(body)
    return raw[:8] + (len(body) + 4).to_bytes(4, "big") + crc.to_bytes(4, "big") + body


def fixtures() -> None:
    work = tempfile.mkdtemp(prefix="seglog-kafka-")
    dirs = [os.path.join(work, "logs-a"), os.path.join(work, "logs-b")]
    broker = Broker(work, dirs)
    try:
        produce_codecs()
        produce_uniform()
        produce_transactions()
        produce_compacted(broker)
        produce_moved(broker)
        delete_below("moved", 120)
        time.sleep(1)
        record_expected({"codecs": 1, "appendtime": 1, "uniform": 1, "txn": 2,
                         "compacted": 1, "moved": 1}, os.path.join(work, "expected.json"))
    finally:
        broker.stop()
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    for d in dirs:
        shutil.copytree(d, os.path.join(OUT, os.path.basename(d)))
    shutil.copy(os.path.join(work, "expected.json"), os.path.join(OUT, "expected.json"))
    legacy(OUT)
    with open(os.path.join(OUT, "VERSION"), "w") as f:
        f.write(f"Apache Kafka {KAFKA_VERSION}, written by scripts/kafka-fixtures\n")
    shutil.rmtree(work)
    print(f"fixtures written to {OUT}")


def live(seconds: float = 30.0) -> None:
    """A broker written to by a producer (every codec, segments rolling) while seglog
    reads the partition's files again and again: every read must be a prefix of the
    final records, and the final read must equal a consumer's."""
    import threading

    from kafka import KafkaProducer

    from seglog import kafka as sk
    work = tempfile.mkdtemp(prefix="seglog-kafka-live-")
    logs = os.path.join(work, "logs")
    broker = Broker(work, [logs])
    reads = 0
    try:
        create("live", 1, **{"segment.index.bytes": "80", "index.interval.bytes": "4096"})
        stop = threading.Event()

        def produce() -> None:
            i = 0
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                codec = (None, "gzip", "snappy", "lz4", "zstd")[i // 500 % 5]
                p = KafkaProducer(bootstrap_servers=BOOT, compression_type=codec,
                                  linger_ms=5, acks=1)
                for _ in range(500):
                    p.send("live", value(i, 30 + i % 200), key=b"k%d" % (i % 13))
                    i += 1
                p.close()
            stop.set()

        t = threading.Thread(target=produce)
        t.start()
        d = os.path.join(logs, "live-0")
        seen: list[list[tuple[int, bytes | None]]] = []
        while not stop.is_set():
            if os.path.isdir(d):
                seen.append([(m.offset, m.value) for m in sk.open_partition(d).iter()])
                reads += 1
        t.join()
        want = consume("live", 0, "read_uncommitted")
        final = [(m.offset, m.value) for m in sk.open_partition(d).iter()]
        assert [(r["offset"], bytes.fromhex(r["value"])) for r in want] == final, \
            "seglog's read of the files differs from the consumer's"
        for s in seen:
            assert s == final[:len(s)], "a read beside the broker is not a prefix of the end"
        print(f"live: {len(final)} records, {reads} reads beside the writing broker, "
              f"every one a prefix of the consumer's view")
    finally:
        broker.stop()
        shutil.rmtree(work)


if __name__ == "__main__":
    if sys.argv[1:] == ["fixtures"]:
        fixtures()
    elif sys.argv[1:2] == ["live"]:
        live(float(sys.argv[2]) if len(sys.argv) > 2 else 30.0)
    else:
        sys.exit("usage: kafka_broker.py fixtures | live [SECONDS]")

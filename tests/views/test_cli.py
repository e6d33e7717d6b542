"""The ``seglog`` command line, run as a user runs it: a subprocess on real logs
(clean, damaged, refused by recovery, a topic root with a consumer group)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Iterator

import pytest

import seglog
import seglog.repair
import seglog.cli
import seglog._cli.inspect
from seglog import Log, Record, Topic, codec
from seglog._cli.inspect import reread_records
from seglog._cli.output import Progress
from seglog.testing import abandon

from day import damage as flip
from kills import kill_inside_compaction_swap

COMMANDS = ["dump", "verify", "recover", "stats", "tail", "groups", "compact", "retention"]


def run(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "seglog", *args], capture_output=True,
                          text=True, input=stdin, timeout=timeout)


def files_digest(path: str) -> str:
    h = hashlib.sha256()
    for name in sorted(os.listdir(path)):
        p = os.path.join(path, name)
        if os.path.isfile(p):
            h.update(name.encode())
            with open(p, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


@pytest.fixture
def log_dir(tmp_path):
    path = str(tmp_path / "ev")
    with Log.open(path) as log:
        for i in range(30):
            log.append_batch([b"line %d" % j for j in range(i * 10, i * 10 + 10)])
        log.append(b"\xff\x00binary", key=b"k1", headers=[("h", b"v")])
    return path


@pytest.fixture
def root(tmp_path):
    r = str(tmp_path / "root")
    with Topic.open(r, "orders", partitions=3) as t:
        for i in range(90):
            t.append(b"order %d" % i, key=b"c%d" % (i % 7))
    with seglog.Consumer(r, "billing", topics=["orders"], auto_commit_ms=None) as c:
        got = 0
        deadline = time.monotonic() + 10
        while got < 60 and time.monotonic() < deadline:
            got += len(c.poll(timeout_ms=100, max_records=20))
        c.commit()
    return r


@pytest.mark.parametrize("cmd", COMMANDS)
def test_every_subcommand_has_help_with_examples(cmd):
    p = run(cmd, "--help")
    assert p.returncode == 0 and "examples:" in p.stdout and "--json" in p.stdout


def test_the_console_script_and_module_agree():
    script = os.path.join(os.path.dirname(sys.executable), "seglog")
    p = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "dump" in p.stdout and "Exit codes" in p.stdout


def test_dump_batches_records_and_json(log_dir):
    p = run("dump", log_dir)
    assert p.returncode == 0
    lines = [x for x in p.stdout.splitlines() if x.startswith("baseOffset")]
    assert len(lines) == 31 and "baseOffset: 0 lastOffset: 9 count: 10 position: 0" in lines[0]
    p = run("dump", log_dir, "--from", "295", "--to", "301", "--print-data")
    assert "baseOffset: 290" in p.stdout and "baseOffset: 280" not in p.stdout
    assert '| offset: 295 ' in p.stdout and '"line 299"' in p.stdout
    assert "| offset: 294 " not in p.stdout
    assert "value: hex:ff0062696e617279" in p.stdout and 'key: "k1"' in p.stdout
    assert 'h="v"' in p.stdout
    doc = json.loads(run("dump", log_dir, "--json", "--from", "300", "--print-data").stdout)
    (b,) = doc["batches"]
    assert b["base_offset"] == 300 and b["flags"] == "keys,headers"
    assert b["records"][0]["value"] == {"hex": "ff0062696e617279"} and not doc["problems"]


def test_verify_clean_and_damaged(log_dir, root):
    p = run("verify", log_dir)
    assert p.returncode == 0 and "no damage" in p.stdout and "301 messages" in p.stdout
    p = run("verify", root, "--json")
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["ok"] and sorted(x["log"] for x in doc["logs"]) == \
        ["orders-0", "orders-1", "orders-2"]
    seg = os.path.join(log_dir, f"{0:020d}.log")
    batches: list = []
    seglog.repair.check(log_dir, batches=batches)
    hit = [b for b in batches if b.position <= 1000 < b.position + b.size][0]
    flip(seg, 1000)
    p = run("verify", log_dir)
    assert p.returncode == 1
    text = " ".join(p.stdout.split())
    assert f"damage: {os.path.basename(seg)}, position {hit.position} (offset " \
        f"{hit.base_offset}): the checksum does not match" in text, p.stdout
    assert f"in 1 of 1 segment); nothing after the damage is read as data" in text
    assert f"next: back up {log_dir}, then `seglog recover --truncate-at-damage {log_dir}`" \
        in text
    assert "checksum: checksum" not in p.stdout
    doc = json.loads(run("verify", log_dir, "--json").stdout)
    assert doc["logs"][0]["problems"][0]["position"] == hit.position


def test_verify_reports_a_bad_index_entry(log_dir):
    ix = os.path.join(log_dir, f"{0:020d}.index")
    with Log.open(log_dir, index_interval_bytes=64) as log:        # entries to spoil
        log.append_batch([b"x" * 100] * 5)
    with open(ix, "r+b") as f:
        data = bytearray(f.read())
        data[4:8] = (7).to_bytes(4, "little")      # first entry's position: not a batch
        f.seek(0)
        f.write(data)
    p = run("verify", log_dir)
    assert p.returncode == 1 and "index" in p.stdout
    assert run("dump", log_dir).returncode == 0            # index checks are --deep there
    assert run("dump", log_dir, "--deep").returncode == 1


def refused_log(path: str) -> tuple[int, int]:
    """A log recovery refuses: flushed, then damaged in the middle, left unclean."""
    log = Log.open(path, flush_ms=None)
    for i in range(20):
        log.append_batch([b"m%d" % j for j in range(i * 10, i * 10 + 10)])
    log.flush()
    abandon(log)
    batches: list = []
    seglog.repair.check(path, batches=batches)
    (at,) = [b.position for b in batches if b.base_offset == 100]
    flip(os.path.join(path, f"{0:020d}.log"), at + 30)
    return at, 100


def test_recover_refuses_then_cuts_only_when_confirmed(tmp_path):
    path = str(tmp_path / "bad")
    pos, off = refused_log(path)
    with pytest.raises(seglog.CorruptRecordError):
        Log.open(path)
    before = files_digest(path)
    p = run("recover", path)
    assert p.returncode == 1 and "recovery refused" in p.stdout and "--truncate-at-damage" in p.stdout
    p = run("recover", path, "--truncate-at-damage", stdin="no\n")
    assert p.returncode == 5 and f"position {pos} (offset {off})" in p.stdout
    text = " ".join(p.stdout.split())
    assert "keeps: the log keeps offsets 0..99" in text
    # the flipped byte is in the damaged batch's header: its count is not believed
    assert "loses: 90 message(s) in batches with a good checksum (offsets up to 199), " \
           "and whatever the damaged bytes held: 1.1 KB of data" in text, text
    assert "after it: 9 batch(es) with a good checksum" in text
    assert files_digest(path) == before                       # nothing changed
    p = run("recover", path, "--truncate-at-damage", "--yes", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    assert doc["cut"]["offset"] == 100 and doc["end_offset"] == 100
    with Log.open(path) as log:
        assert [m.value for m in log.iter()] == [b"m%d" % j for j in range(100)]
    assert run("verify", path).returncode == 0


def test_recover_reports_a_torn_tail(tmp_path):
    path = str(tmp_path / "torn")
    log = Log.open(path, flush_ms=None)
    log.append_batch([b"a"] * 10)
    log.flush()
    at = log.segments[-1].size
    log.append_batch([b"b" * 50] * 10)
    size = log.segments[-1].size
    abandon(log)
    seg = os.path.join(path, f"{0:020d}.log")
    with open(seg, "r+b") as f:
        f.truncate(size - 20)                   # the last batch torn
    p = run("recover", path)
    text = " ".join(p.stdout.split())
    assert p.returncode == 0 and "recovery: from the recovery point 10" in text
    assert f"cut {os.path.basename(seg)} at position {at} (partial): {size - 20 - at} bytes " \
           f"of data (0 message(s) in batches with a good checksum)" in p.stdout
    assert "then every batch read:\ntorn: ok: offsets 0..9, 10 messages, 1 segment," in \
        p.stdout, p.stdout


def test_stats_of_a_log_and_a_root(log_dir, tmp_path, root):
    doc = json.loads(run("stats", log_dir, "--json").stdout)
    (s,) = doc["logs"]
    assert s["messages"] == 301 and s["batches"] == 31 and s["distinct_keys"] == 1
    assert s["start_offset"] == 0 and s["end_offset"] == 301
    lz = str(tmp_path / "lz")
    with Log.open(lz, compression="lz4") as log:
        log.append_batch([b"GET /index.html 200 " * 10] * 50)
    (s,) = json.loads(run("stats", lz, "--json").stdout)["logs"]
    assert s["lz4_batches"] == 1 and s["lz4_stored"] < s["lz4_raw"] / 5
    p = run("stats", root)
    assert p.returncode == 0 and "total: 3 logs, 90 messages, " in p.stdout, p.stdout


def test_tail_log_topic_time_and_follow(log_dir, root):
    p = run("tail", log_dir, "-n", "2")
    assert p.stdout.splitlines()[0].startswith("299 ") and "hex:ff0062696e617279" in p.stdout
    assert 'key="k1" hex:ff0062696e617279 headers: h="v"' in p.stdout
    rows = [json.loads(x) for x in run("tail", root, "orders", "-n", "1", "--json").stdout.splitlines()]
    assert sorted(r["partition"] for r in rows) == [0, 1, 2] and all(r["topic"] == "orders" for r in rows)
    with Log.open(log_dir, readonly=True) as log:
        ts = list(log.iter(300))[0].timestamp
    later = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts / 1000 + 3600)) + "Z"
    assert run("tail", log_dir, "--from-time", later).stdout == ""
    assert run("tail", log_dir, "--from-time", "yesterday").returncode == 2
    proc = subprocess.Popen([sys.executable, "-m", "seglog", "tail", log_dir, "-f", "-n", "1"],
                            stdout=subprocess.PIPE, text=True)
    watchdog = threading.Timer(30, proc.kill)       # a deadline for the blocking reads
    watchdog.start()
    try:
        # its first line, the last message there, shows it has found its place: what is
        # appended from now on is past it, and only following prints it
        first = proc.stdout.readline()
        assert first.startswith("300 ") and "hex:ff00" in first, first
        with Log.open(log_dir) as log:
            log.append(b"fresh")
        deadline = time.monotonic() + 10
        line = ""
        while "fresh" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
        assert "fresh" in line and line.startswith("301 ")
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()


def test_groups_list_and_describe(root):
    p = run("groups", root)
    assert p.returncode == 0 and p.stdout.splitlines()[1].startswith("billing  empty "), \
        p.stdout
    doc = json.loads(run("groups", root, "billing", "--json").stdout)
    lag = {k: v["lag"] for k, v in doc["partitions"].items()}
    assert sum(lag.values()) == 90 - sum(v["committed"] for v in doc["partitions"].values())
    assert doc["total_lag"] == sum(lag.values()) and doc["state"] == "empty"
    p = run("groups", root, "billing")
    assert "PARTITION" in p.stdout and "orders-2" in p.stdout
    assert run("groups", root, "nobody").returncode == 2


def test_groups_list_does_not_call_a_group_without_commits_caught_up(root):
    # a member that polled but never committed: its partitions have no lag, not lag 0
    with seglog.Consumer(root, "fresh", topics=["orders"], auto_commit_ms=None) as c:
        deadline = time.monotonic() + 10
        while not c.poll(timeout_ms=100) and time.monotonic() < deadline:
            pass
        out = run("groups", root).stdout
    lines = {ln.split()[0]: ln.split() for ln in out.splitlines()}
    # GROUP STATE MEMBERS(2 words) LAG ...: the never-committed lag counts from the start
    assert lines["fresh"][:5] == ["fresh", "stable", "1/1", "alive", "90*"], out
    assert lines["billing"][:5] == ["billing", "empty", "0/0", "alive", "30"], out
    assert "* never committed: lag counted from the log start" in out


def test_retention_dry_run_names_the_start_offset_the_real_run_sets(tmp_path):
    path = str(tmp_path / "old")
    with Log.open(path, segment_bytes=1024, retention_bytes=2048) as log:
        for i in range(100):
            log.append(b"x" * 60)
    dry = run("retention", path, "--dry-run")
    doc = json.loads(run("retention", path, "--dry-run", "--json").stdout)
    assert doc["segments"], dry.stdout
    real = run("retention", path, "--json")
    with Log.open(path, readonly=True) as log:
        start = log.start_offset
    assert start > 0 and json.loads(real.stdout)["start_offset"] == start
    assert doc["start_offset"] == start, (doc, start)
    assert f"log start offset would become {start}\n" in dry.stdout, dry.stdout
    # nothing due: the start offset stays where it is
    assert f"log start offset stays {start}\n" in run("retention", path, "--dry-run").stdout


def test_groups_needs_a_root_and_reports_bad_group_files(root, log_dir, tmp_path):
    os.makedirs(tmp_path / "plain")
    for path in (str(tmp_path / "plain"), str(tmp_path / "missing"), log_dir):
        p = run("groups", path)
        assert p.returncode == 3 and "root of topics" in p.stderr + p.stdout, (path, p.stderr)
    # what is not a group directory under __groups is not a group
    with open(os.path.join(root, "__groups", "notes.txt"), "w") as f:
        f.write("mine")
    p = run("groups", root)
    assert p.returncode == 0 and "billing  empty" in p.stdout and "notes" not in p.stdout
    assert json.loads(run("groups", root, "--json").stdout)["groups"][0]["group"] == "billing"
    # a group file of the wrong shape: damage reported with its name, no traceback
    state = os.path.join(root, "__groups", "billing", "state.json")
    with open(state, "w") as f:
        json.dump({"generation": "two", "members": [], "assignment": {}}, f)
    for args in (("groups", root), ("groups", root, "billing")):
        p = run(*args)
        assert p.returncode == 1 and state in p.stderr and "Traceback" not in p.stderr


def test_compact_and_retention(tmp_path):
    path = str(tmp_path / "kv")
    with Log.open(path, cleanup_policy="compact", segment_bytes=2048) as log:
        for i in range(400):
            log.append(b"v%d" % i, key=b"k%d" % (i % 5))
    doc = json.loads(run("compact", path, "--json").stdout)
    assert doc["records_kept"] < doc["records_read"]
    with Log.open(path) as log:
        assert {m.key: m.value for m in log.iter()} == {b"k%d" % k: b"v%d" % (395 + k) for k in range(5)}
    path = str(tmp_path / "old")
    with Log.open(path, segment_bytes=1024, retention_bytes=2048) as log:
        for i in range(100):
            log.append(b"x" * 60)
    with Log.open(path, readonly=True) as log:
        bases = [s.base_offset for s in log.segments]
    before = files_digest(path)
    p = run("retention", path, "--dry-run", "--json")
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["segments"] and files_digest(path) == before
    p = run("retention", path)
    assert p.returncode == 0 and f"deleted {len(doc['segments'])} segment(s)" in p.stdout
    with Log.open(path) as log:
        assert log.start_offset == bases[len(doc["segments"])]


def test_compact_after_a_kill_reports_stored_bytes(tmp_path):
    path = str(tmp_path / "kv")
    log = Log.open(path, cleanup_policy="compact", segment_bytes=2048, flush_ms=None)
    for i in range(400):
        log.append(b"v%d" % i, key=b"k%d" % (i % 5))
    stored = sum(s.size for s in log.segments)
    abandon(log)                          # its active segment keeps its reservation
    assert _sizes(path) > stored
    p = run("compact", path)
    assert p.returncode == 0 and f"the log stored {stored} bytes before" in p.stdout, p.stdout


def test_errors_have_exit_codes(tmp_path, log_dir):
    assert run("verify", str(tmp_path / "none")).returncode == 3
    os.makedirs(tmp_path / "plain")
    assert run("stats", str(tmp_path / "plain")).returncode == 3
    assert run("dump").returncode == 2
    with Log.open(log_dir):
        p = run("compact", log_dir)
        assert p.returncode == 4 and "another writer holds" in p.stderr
        assert run("verify", log_dir).returncode == 0        # readers need no lock


def test_progress_shows_on_a_terminal_only():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True
    t = Tty()
    prog = Progress("verify", 10_000_000, t)
    prog.last -= 1
    prog(5_000_000)
    prog.close()
    assert "verify:" in t.getvalue() and "MB/s" in t.getvalue() and "ETA" in t.getvalue()
    quiet = io.StringIO()
    prog = Progress("verify", 10_000_000, quiet)
    prog.last -= 1
    prog(5_000_000)
    assert quiet.getvalue() == ""


# -- beside a live writer in another process -------------------------------------------
WRITER = r"""
import json, sys, threading, seglog
path, mode, opts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
log = seglog.Log.open(path, **opts)
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
i = 0
if mode == "idle":
    for i in range(5):
        log.append(b"message %d" % i)
    print("ready", log.end_offset, flush=True)
    stop.wait(120)
else:       # appends of every size, retention (and compaction) deleting segments meanwhile
    while not stop.is_set():
        log.append_batch([seglog.Record(b"v%d-" % i + b"x" * ((i * 37 + j * 11) % 700),
                                        key=b"k%d" % ((i + j) % 40))
                          for j in range(1 + i % 9)])
        i += 1
        if i % 3 == 0:
            log.enforce_retention()
        if mode == "compact" and i % 10 == 0:
            log.compact()
        if i == 40:
            print("ready", flush=True)
log.close()
print("closed", flush=True)
"""


@contextlib.contextmanager
def live_writer(path: str, mode: str, **opts: object) -> Iterator[subprocess.Popen]:
    """A writer process holding ``path`` open until the block ends."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, path, mode, json.dumps(opts)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline()            # blocks until the writer says so
        assert line.startswith("ready"), line
        yield proc
        if proc.poll() is None:
            proc.stdin.write("stop\n")
            proc.stdin.flush()
            assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _sizes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path)
               if n.endswith(".log"))


def test_reading_commands_beside_a_live_writer_report_stored_bytes(tmp_path):
    path = str(tmp_path / "live")
    with live_writer(path, "idle"):
        dump = json.loads(run("dump", path, "--json").stdout)
        stored = sum(b["size"] for b in dump["batches"])
        assert len(dump["batches"]) == 5 and not dump["problems"]
        p = run("verify", path)
        assert p.returncode == 0 and "no damage" in p.stdout, p.stdout
        verify = json.loads(run("verify", path, "--json").stdout)["logs"][0]
        p = run("stats", path, "--json")
        assert p.returncode == 0, p.stderr
        stats = json.loads(p.stdout)["logs"][0]
        assert stats["bytes"] == verify["bytes"] == stored < _sizes(path)
        assert stats["reserved_bytes"] == verify["reserved_bytes"] == _sizes(path) - stored
        assert stats["messages"] == verify["messages"] == 5
        out = run("verify", path).stdout
        size = seglog._views.html.size
        assert f"{size(stored)} (+{size(_sizes(path) - stored)} reserved)" in out, out
        assert "reserved:" in run("stats", path).stdout
        assert run("tail", path, "-n", "2").stdout.count("message") == 2


def test_verify_tells_a_batch_being_written_from_a_torn_tail(tmp_path):
    """Half a batch past the data: a live writer may be copying it in (no damage);
    once the writer is dead it is a torn tail, which opening for writing cuts."""
    path = str(tmp_path / "live")
    with live_writer(path, "idle") as proc:
        seg = os.path.join(path, f"{0:020d}.log")
        end = sum(b["size"] for b in json.loads(run("dump", path, "--json").stdout)["batches"])
        half = codec.encode_batch(5, [b"y" * 300], 1)[:200]
        with open(seg, "r+b") as f:
            f.seek(end)
            f.write(half)
        doc = json.loads(run("verify", path, "--json").stdout)
        assert doc["ok"] and doc["logs"][0]["tail"] == "writing", doc
        proc.kill()
        proc.wait()
    p = run("verify", path)
    assert p.returncode == 1 and f"position {end}" in p.stdout and "torn tail" in p.stdout


@pytest.mark.parametrize("policy", ["none", "delete", "compact,delete"])
def test_reading_commands_survive_retention_beside_a_live_writer(policy, tmp_path):
    """The writer appends, rolls and flushes while verify, dump, stats and tail walk
    the log; segments are deleted (and with compaction replaced) under them: not
    damage, not an error."""
    path = str(tmp_path / "churn")
    deadline = time.monotonic() + 240
    with live_writer(path, "compact" if "compact" in policy else "churn",
                     segment_bytes=32 << 10, cleanup_policy=policy.replace("none", "delete"),
                     retention_bytes=None if policy == "none" else 512 << 10,
                     file_delete_delay_ms=0, max_message_bytes=64 << 10, flush_ms=5):
        # without retention the log grows all the while and every pass walks all of
        # it (10 passes took 90 s): fewer passes, the same commands beside the writer
        for _ in range(4 if policy == "none" else 10):
            for args in (["verify", path], ["stats", path], ["dump", path],
                         ["dump", path, "--print-data", "--max-bytes", "8"],
                         ["dump", path, "--from", "2000", "--to", "2100", "--print-data"],
                         ["tail", path, "-n", "3"]):
                assert time.monotonic() < deadline, "too slow"
                p = run(*args)
                assert p.returncode == 0 and "DAMAGE" not in p.stdout, (args, p.stdout, p.stderr)
                assert "No such file" not in p.stderr and "damage" not in p.stderr, p.stderr


def test_recover_after_a_kill_drops_only_reserved_space(tmp_path):
    path = str(tmp_path / "killed")
    with live_writer(path, "idle") as proc:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    p = run("verify", path)
    assert p.returncode == 0 and "reserved" in p.stdout, p.stdout   # killed: no damage
    p = run("recover", path)
    assert p.returncode == 0, p.stderr
    assert "(zeros the writer preallocated past its data): no data cut" in p.stdout
    assert "in all: 0 message(s) and 0 bytes of data cut" in p.stdout
    assert "killed: ok: offsets 0..4, 5 messages" in p.stdout, p.stdout
    with Log.open(path) as log:
        assert [m.value for m in log.iter()] == [b"message %d" % i for i in range(5)]


def test_recover_json_separates_cut_data_from_reserved_space(tmp_path):
    path = str(tmp_path / "killed")
    with live_writer(path, "idle") as proc:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    size = _sizes(path)
    doc = json.loads(run("recover", path, "--json").stdout)
    rec = doc["recovery"]
    (t,) = rec["truncated"]
    assert rec["cut_messages"] == rec["cut_data_bytes"] == t["data_bytes"] == t["messages"] == 0
    assert rec["reserved_bytes"] == t["reserved_bytes"] == t["bytes"] == size - t["position"]
    assert (doc["start_offset"], doc["last_offset"], doc["end_offset"]) == (0, 4, 5)


# -- one offset convention ---------------------------------------------------------------
def test_every_command_prints_offsets_the_same_way(tmp_path):
    path = str(tmp_path / "old")
    with Log.open(path, segment_bytes=1024, retention_bytes=2048, flush_ms=None) as log:
        for i in range(100):
            log.append(b"x" * 60)
        log.enforce_retention()
        start, end = log.start_offset, log.end_offset
        log.flush()
        abandon(log)                   # recover has something to do
    assert start > 0
    want = {"start_offset": start, "last_offset": end - 1, "end_offset": end}
    verify = json.loads(run("verify", path, "--json").stdout)["logs"][0]
    stats = json.loads(run("stats", path, "--json").stdout)["logs"][0]
    dump = json.loads(run("dump", path, "--json").stdout)
    for doc in (verify, stats, dump):
        assert {k: doc[k] for k in want} == want
    assert dump["batches"][-1]["last_offset"] == end - 1
    span = f"offsets {start}..{end - 1}"
    assert span in run("verify", path).stdout
    assert f"  {start}..{end - 1}  " in run("stats", path).stdout
    assert f"lastOffset: {end - 1} " in run("dump", path).stdout
    p = run("recover", path)
    assert p.returncode == 0 and span in p.stdout
    recover = json.loads(run("recover", path, "--json").stdout)
    assert {k: recover[k] for k in want} == want


def test_an_empty_log_says_so_with_its_end_offset(tmp_path):
    path = str(tmp_path / "empty")
    Log.open(path).close()
    assert "empty: ok: empty (end offset 0), 0 messages" in run("verify", path).stdout
    assert "empty (0)" in run("stats", path).stdout
    assert json.loads(run("stats", path, "--json").stdout)["logs"][0]["last_offset"] is None


# -- tail -n holds -------------------------------------------------------------------------
def test_tail_from_time_keeps_to_n(tmp_path):
    path = str(tmp_path / "t")
    t0 = (int(time.time()) - 3600) * 1000
    with Log.open(path) as log:
        for i in range(10):
            log.append(b"m%d" % i, timestamp=t0 + i * 1000)
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t0 / 1000 + 3)) + "Z"
    offsets = lambda p: [int(x.split()[0]) for x in p.stdout.splitlines()]  # noqa: E731
    assert offsets(run("tail", path, "--from-time", at)) == list(range(3, 10))
    assert offsets(run("tail", path, "--from-time", at, "-n", "2")) == [8, 9]
    assert offsets(run("tail", path, "--from-time", at, "-n", "20")) == list(range(3, 10))
    assert offsets(run("tail", path, "-n", "4")) == [6, 7, 8, 9]


def test_tail_of_a_topic_from_time_keeps_to_n_per_partition(root):
    p = run("tail", root, "orders", "--from-time", "2000-01-01T00:00:00Z", "-n", "2", "--json")
    rows = [json.loads(x) for x in p.stdout.splitlines()]
    assert sorted(r["partition"] for r in rows) == [0, 0, 1, 1, 2, 2]


# -- a root with a partition missing -------------------------------------------------------
def test_verify_a_root_with_a_partition_missing_checks_the_rest(root):
    import shutil
    shutil.rmtree(os.path.join(root, "orders-1"))
    p = run("verify", root)
    assert p.returncode == 1, p.stderr
    assert "orders-0: ok" in p.stdout and "orders-2: ok" in p.stdout
    text = " ".join(p.stdout.split())
    assert "orders-1: MISSING" in text and "orders-1: no such directory" in text, text
    doc = json.loads(run("verify", root, "--json").stdout)
    assert not doc["ok"] and [x["log"] for x in doc["logs"]] == ["orders-0", "orders-1", "orders-2"]
    assert [x["problems"][0]["reason"] for x in doc["logs"] if x["problems"]] == ["missing"]
    p = run("stats", root)
    assert p.returncode == 1 and "orders-1: the topic has this partition" in p.stdout
    rows = {ln.split()[0]: ln.split() for ln in p.stdout.splitlines()}
    n0 = [x["messages"] for x in doc["logs"] if x["log"] == "orders-0"][0]
    assert rows["orders-1"][1] == "MISSING" and rows["orders-0"][1] == str(n0), p.stdout
    assert max(map(len, p.stdout.splitlines())) <= 80, p.stdout
    p = run("tail", root, "orders", "-n", "1")
    assert p.returncode == 1 and "orders-1" in p.stderr and len(p.stdout.splitlines()) == 2


# -- dump says what it did not find ---------------------------------------------------------
def test_dump_past_the_end_says_so(log_dir):
    p = run("dump", log_dir, "--from", "5000")
    assert p.returncode == 0 and p.stdout == ""
    assert "no batch holds offsets 5000..: the log has offsets 0..300" in p.stderr
    doc = json.loads(run("dump", log_dir, "--from", "5000", "--json").stdout)
    assert doc["batches"] == [] and "offsets 0..300" in doc["note"]
    assert run("dump", log_dir, "--from", "300").stderr == ""
    p = run("dump", log_dir, "--from", "20", "--to", "10")
    assert p.returncode == 2 and "--to 10 must be above --from 20" in p.stderr
    empty = os.path.join(os.path.dirname(log_dir), "empty")
    Log.open(empty).close()
    assert "the log has empty (end offset 0)" in run("dump", empty, "--from", "0").stderr


def test_dump_print_data_of_a_segment_deleted_or_replaced_after_the_walk(log_dir, tmp_path):
    """dump --print-data reads records again after the walk: a writer's retention or
    compaction may have deleted or replaced the file by then."""
    batches: list = []
    seglog.repair.check(log_dir, batches=batches)
    b = batches[3]
    assert [m[3] for m in reread_records(b, 0, 1 << 63)] == [b"line %d" % j for j in range(30, 40)]
    other = str(tmp_path / "other")
    with Log.open(other) as log:
        log.append_batch([b"other %d" % j for j in range(400)])
    os.replace(os.path.join(other, f"{0:020d}.log"), b.segment)     # compaction's rename
    assert reread_records(b, 0, 1 << 63) is None
    os.remove(b.segment)
    assert reread_records(b, 0, 1 << 63) is None


@pytest.mark.parametrize("cmd", ["dump", "verify", "stats", "recover", "tail", "compact",
                                 "retention"])
def test_a_missing_path_is_no_such_directory(cmd, tmp_path):
    p = run(cmd, str(tmp_path / "nowhere"))
    assert p.returncode == 3 and "nowhere: no such directory" in p.stderr, p.stderr


@pytest.mark.parametrize("cmd", ["dump", "verify", "stats", "recover", "tail", "compact",
                                 "retention", "groups"])
def test_a_file_given_as_path_is_named_not_a_directory(cmd, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("mine")
    p = run(cmd, str(path))
    assert p.returncode == 3 and f"{path} is not a directory" in p.stderr, p.stderr
    assert "no such directory" not in p.stderr and path.read_text() == "mine"


@pytest.mark.parametrize("args, flag", [(("tail", "-n", "-1"), "-n"),
                                        (("dump", "--print-data", "--max-bytes", "-1"),
                                         "--max-bytes"),
                                        (("dump", "--from", "-5", "--to", "3"), "--from"),
                                        (("dump", "--to", "-1"), "--to")])
def test_a_negative_number_is_refused_naming_the_option_as_typed(args, flag, log_dir):
    p = run(args[0], log_dir, *args[1:])
    assert p.returncode == 2 and p.stderr == f"seglog: {flag} must be >= 0\n", p.stderr


def test_verify_does_not_call_the_bytes_after_damage_reserved(tmp_path):
    path = str(tmp_path / "dmg")
    with Log.open(path, segment_bytes=4096) as log:
        for i in range(40):
            log.append_batch([b"line %d" % j for j in range(i * 10, i * 10 + 10)])
    first = os.path.join(path, f"{0:020d}.log")
    with Log.open(path, readonly=True) as log:
        assert len(log.segments) > 1
    flip(first, os.path.getsize(first) // 2)
    p = run("verify", path, "--json")
    r = json.loads(p.stdout)["logs"][0]
    # closed cleanly: no file holds reserved zeros; the rest of the damaged file is data
    assert p.returncode == 1 and r["problems"] and r["reserved_bytes"] == 0, r
    assert r["bytes"] < os.path.getsize(first)
    text = " ".join(run("verify", path).stdout.split())
    assert "reserved" not in text and "nothing after the damage is read as data" in text, text


def test_version_counts_and_a_clean_recover_say_what_they_mean(tmp_path):
    p = run("--version")
    assert p.returncode == 0 and p.stdout.startswith("seglog 0."), p.stdout + p.stderr
    path = str(tmp_path / "one")
    with Log.open(path) as log:
        log.append(b"only")
    out = run("stats", path, "--json").stdout
    assert json.loads(out)["logs"][0]["messages"] == 1
    out = run("verify", path).stdout
    assert "one: ok: offsets 0..0, 1 message, 1 segment," in out, out
    # a clean log's recovery reads nothing: the output says so, and reads every batch
    p = run("recover", path)
    text = " ".join(p.stdout.split())
    assert p.returncode == 0 and "recovery reads no batch of a cleanly closed" in text
    assert "then every batch read: one: ok: offsets 0..0, 1 message" in text, p.stdout
    # --to is the first offset not shown: --to 0 can show nothing, and says so
    p = run("dump", path, "--to", "0")
    assert p.returncode == 2 and "--to 0 must be above --from 0" in p.stderr, p.stderr


def test_a_utf8_value_cut_at_max_bytes_is_still_shown_as_text(tmp_path):
    # --max-bytes may fall inside a character: the cut shows the whole characters
    # before it as text (in text and JSON), not the value as escaped bytes or hex
    path = str(tmp_path / "u")
    value, key = "a€".encode() * 50, "ключ".encode() * 20        # 200 and 160 bytes
    with Log.open(path) as log:
        log.append(value, key=key)
        log.append(b"\xff" * 100)                                 # not UTF-8: bytes
    r = run("tail", path, "--max-bytes", "64")
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()
    assert f'key="{"ключ" * 8}"...(160 bytes)' in first
    assert f'"{"a€" * 16}"...(200 bytes)' in first                # 64 bytes: 16 whole "a€"
    assert "hex:ffffffff" in second and "...(100 bytes)" in second
    docs = [json.loads(line)
            for line in run("tail", path, "--json", "--max-bytes", "10").stdout.splitlines()]
    # cut values are marked with their full length
    assert docs[0]["value"] == {"text": "a€a€a", "length": 200}
    assert docs[0]["key"] == {"text": "ключк", "length": 160}
    assert docs[1]["value"] == {"hex": "ff" * 10, "length": 100}
    d = json.loads(run("dump", path, "--print-data", "--json", "--max-bytes", "10").stdout)
    rec = d["batches"][0]["records"][0]
    assert rec["value"] == {"text": "a€a€a", "length": 200}
    assert rec["key"] == {"text": "ключк", "length": 160}
    out = run("dump", path, "--print-data", "--max-bytes", "10").stdout
    assert 'key: "ключк"...(160 bytes) value: "a€a€a"...(200 bytes)' in out


def test_dump_quotes_header_keys_that_could_pass_for_more_of_the_output(tmp_path):
    # a header key is any str: one holding a newline must not print a line of its
    # own (here one that reads as a DAMAGE report), nor a space or '=' pass for
    # another header
    path = str(tmp_path / "h")
    with Log.open(path) as log:
        log.append(b"v", headers=[("a\nDAMAGE x.log position 0 offset 0: checksum", b"x"),
                                  ("k y=z", b"1"), ("plain", b"2")])
    p = run("dump", path, "--print-data")
    assert p.returncode == 0
    assert not [x for x in p.stdout.splitlines() if x.startswith("DAMAGE")]
    (line,) = [x for x in p.stdout.splitlines() if x.startswith("| offset: 0 ")]
    assert line.endswith('headers: "a\\nDAMAGE x.log position 0 offset 0: checksum"="x" '
                         '"k y=z"="1" plain="2"')


def test_tail_n_counts_messages_across_compaction_gaps(tmp_path):
    # after compaction the last N offsets may hold fewer than N messages: tail -n N
    # still prints the last N messages (it printed the 6 of 56 within offsets 99..108)
    path = str(tmp_path / "c")
    with Log.open(path, cleanup_policy="compact", segment_bytes=1024,
                  min_cleanable_dirty_ratio=0.0) as log:
        for i in range(108):    # unique keys at even offsets, one hot key at odd ones
            log.append(b"v%d" % i, key=b"u%d" % i if i % 2 == 0 else b"h")
        log.append(b"last", key=b"h")                 # alone in the active segment
        log.compact()
        kept = [m.offset for m in log.iter(log.start_offset)]
    assert len(kept) > 20 and kept[-10] < 99        # the gaps reach into the window
    offsets = lambda p: [int(x.split()[0]) for x in p.stdout.splitlines()]  # noqa: E731
    assert offsets(run("tail", path, "-n", "10")) == kept[-10:]
    assert offsets(run("tail", path)) == kept[-10:]                       # the default 10
    assert offsets(run("tail", path, "-n", "1000")) == kept
    assert [json.loads(x)["offset"] for x in run("tail", path, "-n", "3", "--json")
            .stdout.splitlines()] == kept[-3:]


@pytest.mark.parametrize("renamed", [(), (".log",), (".log", ".index", ".timeindex")])
def test_reading_commands_on_a_log_whose_writer_died_inside_a_compaction_swap(tmp_path,
                                                                              monkeypatch,
                                                                              renamed):
    """A writer killed after a swap's commit point (its manifest written) and after
    renaming the new files over the group's first segment, before deleting the
    segments they replace: the next writer's open finishes the swap and loses
    nothing, so verify, stats and dump call it no damage (they reported the first
    replaced segment as starting below where the new one ended, exit 1). Before
    the new .log is renamed in, the old segments are the log, checked against
    their own indexes, not the new ones waiting beside them."""
    path = str(tmp_path / "c")
    with Log.open(path, cleanup_policy="compact", segment_bytes=1024, index_interval_bytes=1,
                  min_cleanable_dirty_ratio=0.0) as log:
        for i in range(200):     # batch sizes vary: old and new positions differ
            log.append(b"v%d" % i + b"." * (i % 13), key=b"k%d" % (i % 7))
        name = kill_inside_compaction_swap(log, monkeypatch)
    for ext in renamed:          # the swap's first steps, as the writer took them
        os.rename(os.path.join(path, ".seglog-cleaned." + name + ext),
                  os.path.join(path, name + ext))
    p = run("verify", path)
    assert p.returncode == 0 and "no damage" in p.stdout, p.stdout
    doc = json.loads(run("verify", path, "--json").stdout)["logs"][0]
    stats = json.loads(run("stats", path, "--json").stdout)["logs"][0]
    assert run("stats", path).returncode == 0 and run("dump", path).returncode == 0
    assert bool(doc["superseded_segments"]) == (".log" in renamed) and not doc["problems"]
    if not renamed:          # the old segments are still the log, every message
        assert doc["messages"] == stats["messages"] == 200
        return
    with Log.open(path) as log:            # finishes the swap
        kept = [m.offset for m in log.iter()]
        segments, end = len(log.segments), log.end_offset
    # what the log holds, not the new segment and the old ones it replaced both
    assert doc["messages"] == stats["messages"] == len(kept) < 30
    assert doc["end_offset"] == stats["end_offset"] == end
    assert doc["segments"] == stats["segments"] == segments
    after = json.loads(run("verify", path, "--json").stdout)["logs"][0]
    assert not after["superseded_segments"] and after["messages"] == len(kept)


def test_a_file_where_a_log_directory_belongs_is_not_called_missing(tmp_path):
    # "no such directory" sent the operator looking for something that is there
    root = str(tmp_path / "r")
    with Topic.open(root, "t", partitions=2) as t:
        t.append(b"x", partition=0)
    part = os.path.join(root, "t-1")
    for name in os.listdir(part):
        os.remove(os.path.join(part, name))
    os.rmdir(part)
    with open(part, "w") as f:
        f.write("not a log")
    p = run("verify", root)
    assert p.returncode == 1
    text = " ".join(p.stdout.split())
    assert f"{part} is not a directory" in text and "no such directory" not in text
    p = run("stats", part)
    assert p.returncode == 3 and f"{part} is not a directory" in p.stderr, p.stderr


# -- dump of a range reads near it (through the offset index) ------------------------------
def _counting_preads(monkeypatch) -> list[int]:
    """Every ``os.pread`` of this process from now on: the bytes it returned."""
    got: list[int] = []
    real = os.pread

    def pread(fd: int, n: int, pos: int) -> bytes:
        b = real(fd, n, pos)
        got.append(len(b))
        return b
    monkeypatch.setattr(os, "pread", pread)
    return got


def test_dump_of_a_range_reads_only_near_it(tmp_path, monkeypatch):
    path = str(tmp_path / "big")
    with Log.open(path, segment_bytes=256 << 10) as log:
        for i in range(600):
            log.append_batch([b"%06d-" % (i * 10 + j) + b"x" * 1000 for j in range(10)])
        stored = sum(s.size for s in log.segments)
        assert len(log.segments) > 20
    want = 4321
    got = _counting_preads(monkeypatch)
    out = io.StringIO()
    assert seglog.cli.main(["dump", path, "--from", str(want), "--to", str(want + 1),
                            "--print-data"], out=out) == 0
    text = out.getvalue()
    assert f"| offset: {want} " in text and f'"{want:06d}-xxx' in text
    assert [ln.split()[1] for ln in text.splitlines() if ln.startswith("baseOffset")] == \
        [str(want - want % 10)]
    # the batch, where the index points before it, and index probes: never the log
    assert sum(got) < 200 << 10, (sum(got), stored)
    got.clear()
    assert seglog.cli.main(["dump", path], out=io.StringIO()) == 0
    assert sum(got) >= stored                       # the counter sees the whole-log reads
    # without the segment's index (or with one that points wrong) the range is found
    # from the segment's start
    seg = [b for b, _ in seglog.repair.segment_paths(path) if b <= want][-1]
    os.remove(os.path.join(path, f"{seg:020d}.index"))
    out = io.StringIO()
    assert seglog.cli.main(["dump", path, "--from", str(want), "--to", str(want + 1)],
                           out=out) == 0
    assert [ln.split()[1] for ln in out.getvalue().splitlines()
            if ln.startswith("baseOffset")] == [str(want - want % 10)]


def test_a_range_past_damage_elsewhere_reads_clean_and_damage_inside_it_is_reported(tmp_path):
    path = str(tmp_path / "d")
    with Log.open(path, segment_bytes=8192) as log:
        for i in range(200):
            log.append_batch([b"m%d" % (i * 5 + j) for j in range(5)])
        segs = log.segments
        first, last = segs[0], segs[-2]
    batches: list = []
    seglog.repair.check(path, batches=batches)
    hit = [b for b in batches if b.segment == first.path][3]
    flip(first.path, hit.position + hit.size - 2)       # inside a batch of the first segment
    p = run("dump", path, "--from", str(last.base_offset), "--to", str(last.base_offset + 3))
    assert p.returncode == 0 and "DAMAGE" not in p.stdout   # only the range is read
    p = run("dump", path, "--from", str(hit.base_offset), "--to", str(hit.base_offset + 1))
    assert p.returncode == 1 and f"DAMAGE {first.path} position {hit.position}" in p.stdout
    assert run("verify", path).returncode == 1


def test_progress_counts_data_not_a_writers_reserved_zeros(tmp_path, monkeypatch):
    path = str(tmp_path / "w")
    totals: list[list[int]] = []

    class Spy(Progress):
        def __init__(self, label: str, total: int, stream: object = None) -> None:
            super().__init__(label, total, stream)
            totals.append([total, 0])

        def __call__(self, n: int) -> None:
            totals[-1][1] += n
            super().__call__(n)
    monkeypatch.setattr(seglog._cli.inspect, "Progress", Spy)
    with Log.open(path, segment_bytes=64 << 20) as log:     # a writer: its file reserved
        log.append_batch([b"y" * 500] * 20)
        log.flush()
        stored = sum(s.size for s in log.segments)
        assert _sizes(path) > 4 * stored      # the reservation's zeros past the data
        assert seglog.repair.data_bytes(path) == stored
        for cmd in ("dump", "verify", "stats"):
            assert seglog.cli.main([cmd, path], out=io.StringIO()) == 0
    assert totals == [[stored, stored]] * 3, totals

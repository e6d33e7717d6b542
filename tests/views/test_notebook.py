"""Notebooks and analysts: reprs, len, stats, to_pandas, and the example notebook run
from top to bottom (its outputs are kept out of git)."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import subprocess
import sys
import time

import pytest

import seglog
from seglog import Log, Record, Topic
from seglog._log import reads as _log_reads

from helpers import header

from htmlview import parse

pd = pytest.importorskip("pandas")

HERE = os.path.dirname(os.path.abspath(__file__))
NOTEBOOK = os.path.join(HERE, "..", "..", "examples", "inspect_log.ipynb")
T0 = 1_700_000_000_000


@pytest.fixture
def log(tmp_path):
    with Log.open(str(tmp_path / "l"), segment_bytes=1024) as log:
        for i in range(100):
            log.append(b"v%d" % i, key=b"k%d" % (i % 3), headers=[("i", b"%d" % i)],
                       timestamp=T0 + i * 1000)
        log.append(b"<script>alert(1)</script>", timestamp=T0 + 5_000)   # out of order
        yield log


def test_message_has_fields_for_pandas(log):
    m = next(iter(log))
    assert isinstance(m, tuple) and m._fields == ("offset", "timestamp", "key", "value", "headers")
    assert m._asdict() == {"offset": 0, "timestamp": T0, "key": b"k0", "value": b"v0",
                           "headers": (("i", b"0"),)}
    assert list(pd.DataFrame(list(log.iter(0, 5))).columns) == list(m._fields)


def test_len_counts_messages_also_after_compaction(tmp_path, log):
    assert len(log) == 101
    with Log.open(str(tmp_path / "kv"), cleanup_policy="compact", segment_bytes=1024) as kv:
        for i in range(200):
            kv.append(b"v", key=b"k%d" % (i % 4))
        kv.compact()
        assert len(kv) == sum(1 for _ in kv.iter()) < kv.end_offset - kv.start_offset


def test_to_pandas_round_trip_and_time_windows(log):
    df = log.to_pandas()
    assert list(df.columns) == ["offset", "timestamp", "key", "value", "headers"]
    assert list(df["offset"]) == list(range(101))
    assert df["value"][7] == b"v7" and df["key"][7] == b"k1"
    assert [tuple(h.values()) for h in df["headers"][7]] == [("i", b"7")]
    assert df["timestamp"][7] == pd.Timestamp(T0 + 7000, unit="ms", tz="UTC")
    since = dt.datetime.fromtimestamp((T0 + 10_000) / 1000, dt.timezone.utc)
    for s, u in [(since, "2023-11-14T22:13:40Z"), (T0 + 10_000, T0 + 20_000),
                 (since.replace(tzinfo=None), since + dt.timedelta(seconds=10))]:
        w = log.to_pandas(since=s, until=u)
        assert list(w["offset"]) == list(range(10, 20)), (s, u)
    # a record older than its neighbours is dropped by the time bounds, kept by offsets
    assert 100 not in set(log.to_pandas(since=T0 + 10_000)["offset"])
    assert list(log.to_pandas(98, 101)["offset"]) == [98, 99, 100]
    with pytest.raises(ValueError):
        log.to_pandas(since="yesterday")
    with pytest.raises(TypeError):
        log.to_pandas(until=1.5)


def test_to_pandas_without_pandas_names_the_extra(log, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"seglog\[spark\]"):
        log.to_pandas()


def test_stats_is_a_plain_dict(log):
    st = log.stats()
    assert st["messages"] == 101 and st["start_offset"] == 0 and st["end_offset"] == 101
    assert st["oldest_timestamp"] == T0 and st["newest_timestamp"] == T0 + 99_000
    assert st["segments"] == len(log.segments) > 1 and st["bytes"] > 0


# -- stats, len and the HTML views read batch headers whatever the batches' sizes ----
MAX_MESSAGE = 256 << 10


def _value(rnd: random.Random, n: int) -> bytes:
    """Half random, half repeated: lz4 halves it, so lz4 batches stay large too."""
    return rnd.randbytes(n // 2) + b"a" * (n - n // 2)


def _shape(name: str, rnd: random.Random) -> list[list[bytes]]:
    """Batches of the named size (a list of values per append_batch call)."""
    if name == "one record":
        return [[_value(rnd, 100)] for _ in range(40)]
    if name == "4 KB":
        return [[_value(rnd, 1000) for _ in range(8)] for _ in range(6)]
    if name == "100 KB":
        return [[_value(rnd, 2000) for _ in range(100)] for _ in range(3)]
    return [[_value(rnd, MAX_MESSAGE - 1024)], [_value(rnd, 50)]]   # near max_message_bytes


SHAPES = ["one record", "4 KB", "100 KB", "near max_message_bytes"]

VIEWS = r"""
import json, sys, seglog
with seglog.Log.open(sys.argv[1], readonly=True) as r:
    st = r.stats()
    html = r._repr_html_()
    print(json.dumps({"stats": st, "len": len(r), "html": "<table>" in html}))
"""


def _fill(append_batch, batches: list[list[bytes]], t0: int) -> int:
    n = 0
    for values in batches:
        append_batch([Record(v, timestamp=t0 + n + i) for i, v in enumerate(values)])
        n += len(values)
    return n


def _expect(log: Log, n: int, t0: int, stored: int) -> None:
    st = log.stats()
    assert (st["start_offset"], st["end_offset"], st["messages"], len(log)) == (0, n, n, n)
    assert (st["oldest_timestamp"], st["newest_timestamp"]) == (t0, t0 + n - 1)
    assert st["bytes"] == stored
    v = parse(log._repr_html_())
    assert v.fields["offsets"] == f"0..{n - 1}" and v.table("offsets").rows


@pytest.mark.parametrize("compression", [None, "lz4"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("policy", ["delete", "compact"])
def test_stats_len_and_html_of_healthy_logs_of_any_batch_size(shape, compression, policy,
                                                               tmp_path):
    """In the writer, a readonly reader in the same process, a reader in another
    process while the writer is open, and a Topic: never damage on a healthy log."""
    seed = random.randrange(1 << 30)
    print("seed", seed)
    batches = _shape(shape, random.Random(seed))
    t0 = int(time.time() * 1000) - 60_000
    path = str(tmp_path / "l")
    opts = dict(max_message_bytes=MAX_MESSAGE, compression=compression, cleanup_policy=policy)
    with Log.open(path, **opts) as w:
        n = _fill(w.append_batch, batches, t0)
        stored = sum(s.size for s in w.segments)
        with open(w.segments[0].path, "rb") as f:
            first = header(f.read(seglog.codec.HEADER_SIZE))
        if shape != "one record":
            assert first.size > seglog.codec.HEADER_SIZE * 64
        if compression and shape in ("4 KB", "100 KB"):
            assert first.attributes & seglog.codec.CODEC_MASK, "not compressed"
        _expect(w, n, t0, stored)
        with Log.open(path, readonly=True) as r:
            _expect(r, n, t0, stored)
        p = subprocess.run([sys.executable, "-c", VIEWS, path], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        assert doc["html"] and doc["len"] == doc["stats"]["messages"] == n
        assert doc["stats"]["bytes"] == stored and doc["stats"]["oldest_timestamp"] == t0
    with Log.open(path, readonly=True) as r:
        _expect(r, n, t0, stored)
    with Topic.open(str(tmp_path / "root"), "t", partitions=2, **opts) as t:
        for p_ in range(2):
            _fill(lambda items: t.append_batch(items, partition=p_), batches, t0)
        st = t.stats()
        assert st["messages"] == len(t) == 2 * n and st["bytes"] == 2 * stored
        assert [p_["oldest_timestamp"] for p_ in st["partitions"]] == [t0, t0]
        assert "<table>" in t._repr_html_()


CHURN = r"""
import sys, threading, seglog
path, policy = sys.argv[1], sys.argv[2]
log = seglog.Log.open(path, segment_bytes=32 << 10, retention_bytes=256 << 10,
                      cleanup_policy=policy, file_delete_delay_ms=0, max_message_bytes=64 << 10)
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
i = 0
while not stop.is_set():
    log.append_batch([seglog.Record(b"x" * (100 + (i * 37 + j) % 900), key=b"k%d" % ((i + j) % 40))
                      for j in range(1 + i % 9)])
    i += 1
    if i % 3 == 0:
        log.enforce_retention()
    if "compact" in policy and i % 10 == 0:
        log.compact()
    if i == 40:
        print("ready", flush=True)
log.close()
"""


@pytest.mark.parametrize("policy", ["delete", "compact,delete"])
def test_views_of_a_reader_beside_a_writer_that_deletes_segments(policy, tmp_path):
    """Retention (and compaction) in the writer's process delete and replace segment
    files under a reader's stats, len and HTML view: they look again."""
    path = str(tmp_path / "l")
    proc = subprocess.Popen([sys.executable, "-c", CHURN, path, policy], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().startswith("ready")
        starts = set()
        deadline = time.monotonic() + 120
        rounds = 0
        with Log.open(path, readonly=True) as r:
            # until retention has moved the start a few times under the reader
            while rounds < 100 or (policy == "delete" and len(starts) < 4):
                assert time.monotonic() < deadline, "retention never ran meanwhile"
                rounds += 1
                st = r.stats()
                assert 0 <= st["start_offset"] <= st["end_offset"] and st["bytes"] > 0
                if policy == "delete":
                    assert st["messages"] == st["end_offset"] - st["start_offset"]
                assert len(r) >= 0 and "<table>" in r._repr_html_()
                starts.add(st["start_offset"])
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_topic_len_stats_and_frame(tmp_path):
    with Topic.open(str(tmp_path), "t", partitions=3) as t:
        for i in range(30):
            t.append(b"m%d" % i, key=b"%d" % i)
        assert len(t) == 30 and t.stats()["messages"] == 30
        df = t.to_pandas()
        assert list(df.columns)[:2] == ["partition", "offset"] and len(df) == 30
        assert sorted(df["value"]) == sorted(b"m%d" % i for i in range(30))
        assert "<table>" in t._repr_html_() and "partition" in t._repr_html_()


def test_html_reprs_are_tables_and_escape_values(log, tmp_path):
    for _ in range(60):
        log.append(b"p" * 100, timestamp=T0 + 100_000)            # more than 10 segments
    log.append(b"<script>alert(1)</script>", timestamp=T0 + 100_000)
    h = log._repr_html_()
    v = parse(h)
    segs = v.table("offsets")
    (gap,) = segs.gaps                                          # a row for those left out
    n = len(log.segments)
    assert len(segs.records()) == 8 and f"{n - 8} segments not shown" in gap
    assert "<script>" not in h and "&lt;script&gt;" in h        # the last message, escaped
    seg = log.segments[0]
    assert f"size={seg.size}" in repr(seg) and "None" not in repr(seg)
    assert "base offset" in seg._repr_html_()
    ms = seglog.MessageSet.from_records([b"x"] * 30, timestamp=T0)
    mv = parse(ms._repr_html_())
    assert "the first 20 messages shown" in mv.notes
    assert mv.titles == ["MessageSet: offsets 0..29, 30 message(s) in "
                         f"{seglog._views.html.size(ms.size_in_bytes)} of whole batches"]
    assert not parse(log.read(0, 1 << 20)._repr_html_()).notes     # a segment's 16
    with Topic.open(str(tmp_path / "r"), "o", partitions=2) as t:
        t.append(b"x", partition=1)
        with seglog.Consumer(t.root, "g", topics=["o"], auto_commit_ms=None) as c:
            c.poll(timeout_ms=500)
            c.commit()
            d = seglog.describe_group(t.root, "g")
            assert d["partitions"][("o", 1)]["committed"] == 1          # still a dict
            gv = parse(d._repr_html_())
            assert "o-1" in gv.table("partition").column("partition")
            assert gv.fields["generation"].startswith(str(d["generation"]))


def test_the_example_notebook_runs_and_is_stored_without_outputs():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code), \
        "strip the notebook's outputs before committing it"
    nbclient.NotebookClient(nb, timeout=180, kernel_name="python3").execute()
    kinds = {k for c in code for o in c.outputs for k in o.get("data", {})}
    assert {"text/html", "image/png"} <= kinds
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    # a view that raises shows as a traceback on stderr, not as an error
    assert not [o for c in code for o in c.outputs
                if o.output_type == "stream" and "Error" in o.get("text", "")]


def test_html_preview_of_a_utf8_value_cut_inside_a_character_is_text(log):
    # a value longer than the table shows (120 characters) is cut between
    # characters, never inside one, and shown as text with its length
    off = log.append("€€a".encode() * 50)                         # 350 bytes
    (value,) = parse(log.read(off)._repr_html_()).table("offset").column("value")
    assert value == "€€a" * 40 + " … 350 bytes" and "xe2" not in value


def test_html_of_a_reader_when_retention_deletes_the_last_messages_meanwhile(tmp_path,
                                                                              monkeypatch):
    """Between the view's snapshot (stats) and its read of the last messages, the
    writer's retention deletes the segment they start in (the active one holds
    fewer than the 5 shown): the view shows those from the new start instead of
    raising OffsetOutOfRangeError."""
    path = str(tmp_path / "l")
    with Log.open(path, segment_bytes=1024, retention_check_ms=None) as w:
        for _ in range(20):
            w.append(b"x" * 60)
        assert [s.base_offset for s in w.segments] == [0, 9, 18]
        with Log.open(path, readonly=True) as r:
            real = _log_reads.last_messages

            def retention_then_last(local, n, end):
                monkeypatch.setattr(_log_reads, "last_messages", real)
                w.enforce_retention(T0 * 10)   # all but the active segment is due
                return real(local, n, end)
            monkeypatch.setattr(_log_reads, "last_messages", retention_then_last)
            h = r._repr_html_()
            assert r.start_offset == 18
    assert parse(h).table("offset").column("offset") == ["18", "19"]


def test_to_pandas_of_a_reader_when_retention_deletes_the_first_messages_meanwhile(
        tmp_path, monkeypatch):
    """to_pandas() (the whole log) computes its window, then the writer's retention
    deletes its start before the read: it reads from the new start instead of
    raising OffsetOutOfRangeError; an explicit start still raises."""
    path = str(tmp_path / "l")
    with Log.open(path, segment_bytes=1024, retention_check_ms=None) as w:
        for _ in range(20):
            w.append(b"x" * 60)
        with Log.open(path, readonly=True) as r:
            real = _log_reads.window

            def window_then_retention(local, *args):
                got = real(local, *args)
                monkeypatch.setattr(_log_reads, "window", real)
                w.enforce_retention(T0 * 10)   # all but the active segment is due
                return got
            monkeypatch.setattr(_log_reads, "window", window_then_retention)
            df = r.to_pandas()
            assert list(df["offset"]) == [18, 19]
            with pytest.raises(seglog.OffsetOutOfRangeError):
                r.to_pandas(start=0)


def test_html_of_a_compacted_log_reads_only_what_it_shows(tmp_path, monkeypatch):
    """The view shows offsets, segments and the last messages, never a message count:
    a compacted log is not read from its start to count its records."""
    with Log.open(str(tmp_path / "l"), cleanup_policy="compact", segment_bytes=1024,
                  retention_check_ms=None) as log:
        for i in range(200):
            log.append(b"v%d" % i, key=b"k%d" % (i % 7))
        starts = []
        real = _log_reads.iterate

        def iter_spy(local, start=None, end=None):
            starts.append(start)
            return real(local, start, end)
        monkeypatch.setattr(_log_reads, "iterate", iter_spy)
        h = log._repr_html_()
        assert parse(h).table("offset").column("offset")[-1] == "199" and starts == [195]

"""Notebooks and analysts: reprs, len, stats, to_pandas, and the example notebook run
from top to bottom (its outputs are kept out of git)."""

from __future__ import annotations

import datetime as dt
import os
import sys

import pytest

import seglog
from seglog import Log, Record, Topic

pd = pytest.importorskip("pandas")

HERE = os.path.dirname(os.path.abspath(__file__))
NOTEBOOK = os.path.join(HERE, "..", "examples", "inspect_log.ipynb")
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
    assert "<table>" in h and "segments" in h and "more in between" in h
    assert "<script>" not in h and "&lt;script&gt;" in h        # the last message, escaped
    seg = log.segments[0]
    assert f"size={seg.size}" in repr(seg) and "None" not in repr(seg)
    assert "base offset" in seg._repr_html_()
    ms = seglog.MessageSet.from_records([b"x"] * 30, timestamp=T0)
    assert "first 20 messages shown" in ms._repr_html_()
    assert "messages shown" not in log.read(0, 1 << 20)._repr_html_()   # a segment's 16
    with Topic.open(str(tmp_path / "r"), "o", partitions=2) as t:
        t.append(b"x", partition=1)
        with seglog.Consumer(t.root, "g", ["o"], auto_commit_ms=None) as c:
            c.poll(timeout_ms=500)
            c.commit()
            d = seglog.describe_group(t.root, "g")
            assert d["partitions"]["o-1"]["committed"] == 1            # still a dict
            assert "o-1" in d._repr_html_() and "generation" in d._repr_html_()


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

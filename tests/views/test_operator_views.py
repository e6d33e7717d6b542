"""What an operator sees when something is wrong, and at a glance: the command line
and the notebook views over a day of realistic data (tests/day.py: a 6-partition
topic of JSON orders with keys and headers, a plain log, a compacted one, a damaged
one, a live consumer group and one whose member was killed). Each test is one
point of what they must say (HTML read back as structure, command text as lines,
80 columns)."""

from __future__ import annotations

import datetime
import io
import json
import os
import subprocess
import sys
import time
import traceback

import pytest

import seglog
from seglog import Log, Topic, cli
from seglog._groups import view as _group_view
from seglog.testing import abandon

import day
from htmlview import parse

WIDTH = 80


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "seglog", *args], capture_output=True,
                          text=True, input=stdin, timeout=120)


def fits(text: str) -> bool:
    return all(len(line) <= WIDTH for line in text.splitlines())


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = day.build(str(tmp_path_factory.mktemp("day") / "data"), live=True)
    yield d
    d.close()


def clean_then_flipped(path: str, n: int = 40) -> tuple[str, int]:
    """A log closed cleanly, then a byte flipped in its first (sealed) segment:
    (that segment's path, the base offset of the damaged batch)."""
    with Log.open(path, segment_bytes=2048) as log:
        for i in range(n):
            log.append_batch([b'{"n": %d, "line": %d}' % (i, j) for j in range(10)])
        assert len(log.segments) > 2
        seg = log.segments[0]
        first = seg.first_header()
        assert first is not None
    size = first.size
    day.damage(seg.path, size + size // 2)              # in the second batch
    return seg.path, 10


# -- 1. recover never calls a log clean that it did not read -------------------------------
def test_recover_of_a_cleanly_closed_damaged_log_reads_it_and_says_damaged(tmp_path):
    path = str(tmp_path / "ev")
    seg, off = clean_then_flipped(path)
    p = run("recover", path)
    assert p.returncode == 1, p.stdout + p.stderr
    text = flat(p.stdout)
    assert "closed cleanly, nothing to recover" in text
    assert "then every batch read: ev: DAMAGED" in text and " clean " not in text
    assert f"damage: {os.path.basename(seg)}, position" in text and f"(offset {off})" in text
    doc = json.loads(run("recover", path, "--json").stdout)
    assert doc["recovery"] is None and doc["verify"]["ok"] is False
    assert doc["verify"]["problems"][0]["offset"] == off
    assert fits(p.stdout)


# -- 2. the cut's plan comes before the question, in both modes -----------------------------
def test_truncate_at_damage_shows_the_plan_before_asking_in_text_and_json(tmp_path,
                                                                          monkeypatch):
    path = str(tmp_path / "ev")
    clean_then_flipped(path)
    before = sorted((n, os.path.getsize(os.path.join(path, n))) for n in os.listdir(path))
    # JSON: the plan (for the person answering) on stderr before the question, the
    # document after, saying nothing was cut
    p = run("recover", path, "--truncate-at-damage", "--json", stdin="no\n")
    assert p.returncode == 5
    plan_at, ask_at = p.stderr.find("the cut at the first damage"), p.stderr.find("type 'yes'")
    assert 0 <= plan_at < ask_at and "loses:" in p.stderr[:ask_at], p.stderr
    doc = json.loads(p.stdout)
    assert doc["declined"] is True and doc["cut"]["offset"] == 10
    assert sorted((n, os.path.getsize(os.path.join(path, n))) for n in os.listdir(path)) == before
    # text: the plan on stdout, then the question; one stream shows the order
    both = io.StringIO()
    monkeypatch.setattr(sys, "stderr", both)
    code = cli.main(["recover", path, "--truncate-at-damage"], out=both, stdin=io.StringIO("no\n"))
    out = both.getvalue()
    assert code == 5 and 0 <= out.find("keeps:") < out.find("type 'yes'"), out
    assert fits(out.split("type 'yes'")[0])
    # confirmed: cut, then every batch read
    p = run("recover", path, "--truncate-at-damage", "--yes")
    assert p.returncode == 0 and "ev: ok: offsets 0..9" in flat(p.stdout), p.stdout


# -- 3. a directory of topics and plain logs: every log read, the rest named -----------------
def test_verify_of_a_data_directory_reads_every_log_and_names_what_it_skipped(data):
    p = run("verify", data.root)
    assert p.returncode == 1
    heads = [ln.split(":")[0] for ln in p.stdout.splitlines() if not ln.startswith(" ")]
    logs = [f"orders-{i}" for i in range(6)] + ["access", "clicks", "users"]
    assert set(logs) <= set(heads), p.stdout
    assert "clicks: DAMAGED" in p.stdout and "no damage" not in p.stdout
    doc = json.loads(run("verify", data.root, "--json").stdout)
    assert sorted(x["log"] for x in doc["logs"]) == sorted(logs)
    assert [x["log"] for x in doc["logs"] if not x["ok"]] == ["clicks"]
    assert doc["skipped"] == []                # __topics and __groups are seglog's own
    os.makedirs(os.path.join(data.root, "archive"))
    with open(os.path.join(data.root, "notes.txt"), "w") as f:
        f.write("mine")
    try:
        p = run("verify", data.root)
        skipped = flat(p.stdout[p.stdout.index("skipped 2 entries"):])
        assert "archive: a directory without seglog.json" in skipped
        assert "notes.txt: not a directory" in skipped
        assert {x["name"] for x in json.loads(run("verify", data.root, "--json").stdout)
                ["skipped"]} == {"archive", "notes.txt"}
    finally:
        os.rmdir(os.path.join(data.root, "archive"))
        os.remove(os.path.join(data.root, "notes.txt"))
    assert fits(p.stdout)


# -- 4. the damage summary, and stats beside the damage ---------------------------------
def test_the_damage_summary_says_each_scope_once_what_is_at_stake_and_what_next(data):
    clicks = os.path.join(data.root, "clicks")
    p = run("verify", clicks)
    lines = p.stdout.splitlines()
    scopes = [ln.split(":")[0].strip() for ln in lines if ln.startswith("  ") and
              not ln.startswith("   ")]
    assert scopes == ["read", "damage", "at stake", "next"], p.stdout
    text = flat(p.stdout)
    assert "checksum: checksum" not in text and "the checksum does not match" in text
    lost = data.clicks_end - data.clicks_damage_offset
    assert (f"at stake: {lost:,} messages (offsets {data.clicks_damage_offset}.."
            f"{data.clicks_end - 1}): 100 in the damaged batch") in text, text
    assert f"next: back up {clicks}, then `seglog recover --truncate-at-damage {clicks}`" in text
    assert f"offsets 0..{data.clicks_damage_offset - 1} ({data.clicks_damage_offset:,} " \
           f"messages" in text
    assert fits(p.stdout)
    doc = json.loads(run("verify", clicks, "--json").stdout)["logs"][0]
    assert doc["at_stake"]["messages"] + doc["at_stake"]["damaged_batch_messages"] == lost
    # stats of the damaged log: its numbers, and the same damage beside them
    p = run("stats", clicks)
    assert p.returncode == 1
    row = p.stdout.splitlines()[1].split()
    assert row[:3] == ["clicks", "!", f"{data.clicks_end:,}"], p.stdout
    assert "damage:" in p.stdout and "at stake:" in p.stdout and fits(p.stdout)


def test_stats_of_a_root_and_the_topic_view_agree_on_a_damaged_partition(tmp_path):
    root = str(tmp_path / "r")
    with Topic.open(root, "t", partitions=3, segment_bytes=2048) as t:
        for i in range(300):
            t.append_batch([b"event %d-%d" % (i, j) for j in range(4)], partition=i % 3)
        seg = t.partition(1).segments[1].path
    day.damage(seg, 200)
    p = run("stats", root)
    table = p.stdout[:p.stdout.index("total:")]
    row = {ln.split()[0]: ln.split() for ln in table.splitlines()}
    with Topic.open(root, "t", readonly=True) as t:
        v = parse(t._repr_html_())
        table = v.table("partition")
        assert row["t-1"][1] == "!" and row["t-1"][2] == table.column("messages")[1], p.stdout
        assert table.column("checked")[:3] == ["not verified"] * 3
        reports = t.verify()
        assert not reports.ok and [r.ok for r in reports] == [True, False, True]
        after = parse(t._repr_html_()).table("partition")
        checked = after.column("checked")
        assert checked[1].startswith("DAMAGE at offset") and checked[0].startswith("ok (")
        assert after.column("messages") == table.column("messages")
        assert parse(reports._repr_html_()).table("log").column("state") == \
            ["ok", "DAMAGED", "ok"]


# -- 5. notebooks: verify(), and views that say what they checked ---------------------------
def test_a_notebook_verify_says_where_what_is_at_stake_and_what_to_do(data):
    with Log.open(os.path.join(data.root, "clicks"), readonly=True) as log:
        before = parse(log._repr_html_())
        assert before.fields["checked"] == "not verified: .verify() reads every batch"
        rep = log.verify()
        assert not rep.ok and rep.problems[0].offset == data.clicks_damage_offset
        v = parse(rep._repr_html_())
        assert {"read", "damage", "at stake", "next"} <= set(v.fields), v.fields
        assert "--truncate-at-damage" in v.fields["next"]
        assert str(rep).splitlines()[0] == "clicks: DAMAGED"
        after = parse(log._repr_html_())
        assert after.fields["checked"].startswith(f"DAMAGE at offset {data.clicks_damage_offset}")
        states = after.table("offsets").records()
        damaged = [r for r in states if "DAMAGE" in r["state"]]
        assert [r["offsets"].split("..")[0] for r in damaged] == [str(data.clicks_damage_offset)]
        # to_pandas: the error says where and what next, raised from the call, not
        # from deep inside the read path
        with pytest.raises(seglog.CorruptRecordError) as e:
            log.to_pandas()
        # frames inside the package (not "seglog" in the path: a checkout named
        # seglog would count this test's own frame)
        package = os.path.dirname(seglog.__file__) + os.sep
        frames = [f for f in traceback.extract_tb(e.value.__traceback__)
                  if f.filename.startswith(package)]
        assert len(frames) <= 2, frames
        assert any("verify()" in n for n in getattr(e.value, "__notes__", []))
    with Log.open(os.path.join(data.root, "access"), readonly=True) as log:
        log.verify()
        fields = parse(log._repr_html_()).fields
        assert fields["checked"].startswith("verified ") and "no damage in offsets 0..3999" \
            in fields["checked"]
        with pytest.raises(seglog.LogClosedError):
            log.close()
            log.verify()


# -- 6. groups: state, lag from the start, time lag, 80 columns -----------------------------
def _desc(members: dict, owners: dict) -> dict:
    parts = {f"t-{p}": {"owner": o, "committed": None, "end": 10, "lag": None}
             for p, o in owners.items()}
    return {"group": "g", "generation": 3, "assignor": "range", "members": members,
            "partitions": parts}


def test_a_groups_state_is_named_as_kafka_names_it():
    alive = {"status": "alive", "assignment": [("t", 0), ("t", 1)], "topics": ["t"]}
    dead = {"status": "dead", "assignment": [("t", 0)], "topics": ["t"]}
    assert _group_view.state(_desc({}, {0: None}))[0] == "empty"
    assert _group_view.state(_desc({"a": dead}, {0: None}))[0] == "no live owner"
    assert _group_view.state(_desc({"a": alive, "b": dead}, {0: "a", 1: "a"}))[0] == \
        "rebalancing"
    assert _group_view.state(_desc({"a": alive}, {0: "a", 1: None}))[0] == "rebalancing"
    assert _group_view.state(_desc({"a": alive}, {0: "a", 1: "a"}))[0] == "stable"
    # the partitions keyed by (topic, partition) tuples read the same
    d = _desc({"a": alive}, {0: "a", 1: "a"})
    d["partitions"] = {_group_view.tp_of(k): v for k, v in d["partitions"].items()}
    assert _group_view.state(d)[0] == "stable"
    d["members"]["a"] = dict(alive, assignment=[["t", 0], ["t", 1]])     # as JSON has them
    assert _group_view.state(d)[0] == "stable"


def test_groups_show_state_total_lag_lag_never_committed_and_time_lag(data):
    p = run("groups", data.root)
    assert fits(p.stdout)
    rows = {ln.split()[0]: ln for ln in p.stdout.splitlines()[1:]}
    assert rows["billing"].split()[1] == "stable", p.stdout
    assert rows["audit"].split()[1:4] == ["no", "live", "owner"]
    never = sum(data.orders_end[p_] for p_ in (4, 5))
    audit = json.loads(run("groups", data.root, "audit", "--json").stdout)
    assert audit["state"] == "no live owner" and audit["never_committed"] == 2
    assert audit["total_lag"] == sum(data.orders_end[q] - 100 for q in range(4)) + never
    assert audit["partitions"]["orders-4"]["lag"] is None          # describe_group's own
    assert audit["partitions"]["orders-4"]["lag_from_start"] == data.orders_end[4]
    assert audit["time_lag_ms"] > 0
    p = run("groups", data.root, "audit")
    assert fits(p.stdout), p.stdout
    table = p.stdout[p.stdout.index("\nPARTITION ") + 1:].splitlines()
    header = table[0].split()
    assert header[:5] == ["PARTITION", "OWNER", "COMMITTED", "END", "LAG"], header
    row4 = [ln for ln in table if ln.startswith("orders-4 ")][0].split()
    assert row4[4] == f"{data.orders_end[4]:,}*"           # not "-": thousands unread
    assert f"lag {audit['total_lag']:,} messages" in flat(p.stdout)
    assert "* never committed" in p.stdout
    # the notebook's view: the same numbers, a state badge and a chart of lag
    v = parse(seglog.describe_group(data.root, "audit")._repr_html_())
    assert "no live owner" in v.pills and v.fields["lag"].startswith(f"{audit['total_lag']:,}")
    parts = v.table("partition")
    assert parts.column("lag")[4] == f"{data.orders_end[4]:,}*"
    assert parts.aligns("lag") == {"right"} and parts.aligns("partition") == {"left"}
    assert all(x != "-" for x in parts.column("time lag"))
    (lag_chart,) = [c for c in v.charts if c.startswith("lag per partition")]
    assert "red: never committed" in lag_chart
    assert "stable" in parse(seglog.describe_group(data.root, "billing")._repr_html_()).pills


# -- 7. offsets, counts, segments and empty logs, one way everywhere ------------------------
def test_offsets_counts_and_segment_rows_read_the_same_in_views_and_commands(data, tmp_path):
    path = os.path.join(data.root, "orders-3")
    end = data.orders_end[3]
    with Log.open(path, readonly=True) as log:
        v = parse(log._repr_html_())
        assert v.fields["offsets"] == f"0..{end - 1}" and v.fields["messages"] == f"{end:,}"
        segs = v.table("offsets")
        assert segs.header == ["offsets", "messages", "size", "oldest record",
                               "newest record", "state"]
        recs = segs.records()
        assert sum(int(r["messages"].replace(",", "")) for r in recs) == end
        assert all(r["oldest record"].endswith("Z") and r["newest record"].endswith("Z")
                   for r in recs)
        # a readonly log's last segment: one state, in its table and its own view
        assert recs[-1]["state"] == "live" == parse(log.segments[-1]._repr_html_()).fields["state"]
        assert f"offsets 0..{end - 1}" in run("verify", path).stdout
    # an empty log says so
    empty = str(tmp_path / "empty")
    Log.open(empty).close()
    with Log.open(empty, readonly=True) as log:
        v = parse(log._repr_html_())
        assert v.fields["offsets"] == "empty (end offset 0)" and "empty: no messages" in v.text
    assert "empty (end offset 0)" in run("verify", empty).stdout
    # many segments: a row says how many are left out, and what they hold
    many = str(tmp_path / "many")
    with Log.open(many, segment_bytes=1024) as log:
        for i in range(400):
            log.append(b"x" * 50)
        (gap,) = parse(log._repr_html_()).table("offsets").gaps
        n = len(log.segments)
        assert gap.startswith(f"… {n - 8} segments not shown: offsets ")


# -- 8. messages: JSON, headers, hex, ISO times, decode -------------------------------------
def test_messages_show_json_headers_and_hex_in_views_and_commands(data, tmp_path):
    path = os.path.join(data.root, "orders-3")
    with Log.open(path, readonly=True) as log:
        ms = log.read(6000, max_bytes=1024)
        v = parse(ms._repr_html_())
        first = v.table("offset").records()[0]
        assert first["value"].startswith('{"order": ') and '\\"' not in first["value"]
        assert "trace-id:" in first["headers"] and "source:" in first["headers"]
        assert v.titles[0].startswith("MessageSet: offsets 6000..")
        df = log.to_pandas(6000, 6010, decode="utf-8")
        assert all(isinstance(x, str) for x in df["value"]) and df["key"][0].startswith("c-")
        assert json.loads(df["value"][0])["order"] >= 0
    p = run("tail", data.root, "orders", "-n", "1")
    line = p.stdout.splitlines()[0]
    assert ' {"order":' in line and "headers: trace-id=" in line and ' source="' in line
    p = run("dump", path, "--from", "6000", "--to", "6001", "--print-data")
    batch = p.stdout.splitlines()[1]
    assert "baseTimestamp: 20" in batch and batch.split("maxTimestamp: ")[1].split()[0].endswith("Z")
    bin_path = str(tmp_path / "bin")
    with Log.open(bin_path) as log:
        log.append(bytes(range(256)) * 2, headers=[("blob", b"\x00\x01")])
        log.append(b"\xff\xfe not text")
        v = parse(log.read(0)._repr_html_())
        with pytest.raises(UnicodeDecodeError, match="at offset 0"):
            log.to_pandas(decode="utf-8")
    value = v.table("offset").records()[0]["value"]
    assert value.startswith("hex 000102") and value.endswith("… 512 bytes")
    assert "blob: hex 0001" in v.table("offset").records()[0]["headers"]
    out = run("tail", bin_path, "--max-bytes", "4").stdout
    assert "hex:00010203...(512 bytes)" in out and 'blob=hex:0001' in out


# -- 9. stats and metrics --------------------------------------------------------------
def test_stats_fit_the_terminal_with_units_time_and_the_direction_of_lz4(data):
    p = run("stats", data.root)
    assert fits(p.stdout), p.stdout
    lines = p.stdout.splitlines()
    header = lines[0].split()
    assert header[:5] == ["LOG", "MESSAGES", "SIZE", "OFFSETS", "SEGS"], header
    orders0 = [ln for ln in lines if ln.startswith("orders-0 ")][0]
    assert " KB " in orders0 and f"{data.orders_end[0]:,}" in orders0
    assert any(ln.startswith("time: ") and ln.count("Z") == 2 for ln in lines)
    assert "LZ4: the size of lz4 batches against their keys and values" in p.stdout
    assert "%" in orders0.split()[-2]                    # the lz4 column: -13%


def test_metrics_and_stats_of_an_idle_readonly_topic_are_short(data):
    with Topic.open(data.root, "orders", readonly=True) as t:
        m = t.metrics()
        assert isinstance(m, dict) and len(m["partitions"]) == 6        # still the dict
        text = seglog._views.notebook.metrics_text(m)
        assert len(text.splitlines()) <= 4, text
        assert "6 partitions" in text and "idle" in text
        v = parse(m._repr_html_())
        assert v.fields == {"counters": "none moved since the log was opened"}
        st = parse(t.stats()._repr_html_())
        assert st.fields["bytes"].endswith(("KB", "MB")) and st.fields["messages"] == \
            f"{sum(data.orders_end.values()):,}"


def test_numbers_are_right_aligned_and_text_left_in_every_view(data):
    with Topic.open(data.root, "orders", readonly=True) as t:
        tv = parse(t._repr_html_()).table("partition")
        for col in ("partition", "messages", "segments", "size"):
            assert tv.aligns(col) == {"right"}, col
        assert tv.aligns("newest record") == {"left"}
        with Log.open(os.path.join(data.root, "orders-0"), readonly=True) as log:
            sv = parse(log._repr_html_()).table("offsets")
            assert sv.aligns("messages") == sv.aligns("size") == {"right"}
            assert sv.aligns("state") == {"left"}
    # the style sheet cannot move them: alignment is in each cell's own style
    html = parse(seglog.describe_group(data.root, "billing")._repr_html_())
    assert html.table("partition").aligns("committed") == {"right"}


# -- 10. pictures ------------------------------------------------------------------------
def test_views_draw_messages_over_time_segment_sizes_and_lag(data):
    with Log.open(os.path.join(data.root, "orders-3"), readonly=True) as log:
        v = parse(log._repr_html_())
        (over_time,) = [i for i, c in enumerate(v.charts) if c.startswith("messages per ")]
        assert v.charts[over_time] == "messages per 30 minutes"      # a day: 48 bars at most
        ticks = v.chart_text[over_time]
        assert any(t.endswith(":00") for t in ticks)
        assert any(t.startswith("UTC from ") and t.endswith(", one bar per 30 minutes")
                   for t in ticks), ticks
        assert any(c.startswith("segment sizes") for c in v.charts)
    with Topic.open(data.root, "orders", readonly=True) as t:
        v = parse(t._repr_html_())
        assert v.charts == ["messages per 30 minutes"]
    # the counts in the chart add up to the messages (every batch read: a small log)
    with Log.open(os.path.join(data.root, "access"), readonly=True) as log:
        bars, label, _ = _time_bars(parse(log._repr_html_()))
        assert "estimated" not in label and sum(c for _, c in bars) == data.access_end
        assert len(bars) <= 48


def _time_bars(v) -> tuple[list[tuple[int, int]], str, list[str]]:
    """A view's messages-over-time chart as a person hovering over it reads it: each
    bar's (start in ms, count) from its tooltip (``2026-11-29T04:00:00Z: 1,234``), the
    chart's label and its text."""
    [i] = [i for i, c in enumerate(v.charts) if c.startswith("messages per ")]
    bars = []
    for tip in v.chart_tips[i]:
        stamp, count = tip.rsplit(": ", 1)
        start = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.timezone.utc)
        bars.append((int(start.timestamp() * 1000), int(count.replace(",", ""))))
    return bars, v.charts[i], v.chart_text[i]


def test_a_batch_whose_records_span_buckets_is_counted_by_its_records(tmp_path):
    now = int(time.time() * 1000)
    t0 = now - now % 3_600_000 - 3_600_000
    with Log.open(str(tmp_path / "l"), compression="lz4") as log:
        # one batch over ten minutes, a burst in the fifth
        stamps = [t0 + (4 if i % 3 else i % 10) * 60_000 + i for i in range(300)]
        log.append_batch([seglog.Record(b"x", timestamp=ts) for ts in stamps])
        bars, _, text = _time_bars(parse(log._repr_html_()))
        assert any(t.endswith("one bar per 15 seconds") for t in text), text
        minute4 = sum(c for start, c in bars if 4 * 60_000 <= start - t0 < 5 * 60_000)
        assert minute4 == sum(1 for s in stamps if 4 * 60_000 <= s - t0 < 5 * 60_000)
        assert sum(c for _, c in bars) == 300


def test_the_estimate_from_the_time_index_covers_every_offset(tmp_path, monkeypatch):
    from seglog._views import notebook as _notebook
    monkeypatch.setattr(_notebook, "EXACT_CHART_BYTES", 0)       # as a large log would
    t0 = int(time.time() * 1000) - 86_400_000
    with Log.open(str(tmp_path / "l"), segment_bytes=4096) as log:
        for i in range(2000):
            log.append(b"v" * 40, timestamp=t0 + i * 40_000)
        bars, label, _ = _time_bars(parse(log._repr_html_()))
        assert label == "messages per 30 minutes (estimated from the time index)"
        assert sum(c for _, c in bars) == 2000


def test_views_survive_a_writer_killed_mid_segment(tmp_path):
    path = str(tmp_path / "k")
    log = Log.open(path, segment_bytes=4096)
    for i in range(100):
        log.append(b"m%d" % i)
    abandon(log)
    with Log.open(path, readonly=True) as r:
        v = parse(r._repr_html_())
        assert v.fields["offsets"] == "0..99" and v.table("offset").column("offset")[-1] == "99"

"""Several producer processes on one topic opened with ``multi_writer=True``, and two
processes creating one topic at once (tests/mw_child.py)."""

from __future__ import annotations

import json
import os
import subprocess

import seglog
from seglog.topic import partition_for_key

from mw_child import calls, record
from mw_harness import DEADLINE, SCALE, expect_message, readline, seed_for, spawn


def test_three_producer_processes_on_one_topic(tmp_path):
    seed = seed_for("multi-writer topic")
    root = str(tmp_path / "root")
    parts, n_calls = 4, 40 * SCALE
    procs = {wid: spawn("topic", root, "events", wid, seed, str(tmp_path / f"w{wid}"), parts,
                        n_calls, stderr=subprocess.PIPE) for wid in (1, 2, 3)}
    try:
        for wid, p in procs.items():
            _, err = p.communicate(timeout=DEADLINE)
            assert p.returncode == 0, err.decode()
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    where: dict[tuple[int, int], tuple[int, int]] = {}
    with seglog.Topic.open(root, "events", readonly=True) as t:
        assert t.num_partitions == parts
        for p in range(parts):
            log = t.partition(p)
            msgs = list(log.iter())
            assert [m.offset for m in msgs] == list(range(log.end_offset)), f"partition {p}"
            for m in msgs:
                ws = expect_message(m)
                assert ws not in where, f"{ws} twice"
                where[ws] = (p, m.offset)
                if m.key is not None:
                    assert p == partition_for_key(m.key, parts), f"{m.key!r} in partition {p}"
    expected = set()
    for wid in procs:
        plan = calls(seed, wid, n_calls)
        with open(tmp_path / f"w{wid}") as f:
            reports = [json.loads(line) for line in f]
        assert [r[0] for r in reports] == list(range(n_calls))
        for (call, seq0, placed), (seq, n, _) in zip(reports, plan):
            assert seq0 == seq
            seqs = list(range(seq, seq + n))
            expected.update((wid, s) for s in seqs)
            keyless = {where[(wid, s)][0] for s in seqs if record(wid, s)[1] is None}
            assert len(keyless) <= 1, f"call {call}: keyless records in {keyless}"
            for p, (first, count) in placed.items():
                mine = [s for s in seqs if where[(wid, s)][0] == int(p)]
                assert [where[(wid, s)] for s in mine] == [(int(p), first + i)
                                                          for i in range(count)], \
                    f"writer {wid} call {call}: not at the acknowledged offsets of {p}"
            assert sum(c for _, c in placed.values()) == n
    assert set(where) == expected


def test_two_processes_create_one_topic_at_once(tmp_path):
    root = str(tmp_path / "root")
    for round_ in range(3 * SCALE):
        name = f"t{round_}"
        r, w = os.pipe()
        procs = [spawn("create", root, name, 5, r, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, pass_fds=(r,)) for _ in range(2)]
        os.close(r)
        try:
            for p in procs:
                assert readline(p, "its barrier") == "waiting"
            os.close(w)           # the barrier opens for both at once
            w = -1
            results = []
            for p in procs:
                out, err = p.communicate(timeout=DEADLINE)
                assert p.returncode == 0, err.decode()
                results.append(json.loads(out))
        finally:
            if w >= 0:
                os.close(w)
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        assert [x["partitions"] for x in results] == [5, 5]
        dirs = {n for n in os.listdir(root) if n.startswith(name + "-")}
        assert dirs == {f"{name}-{p}" for p in range(5)}
        with seglog.Topic.open(root, name, readonly=True) as t:
            assert t.num_partitions == 5
            for x in results:
                p, off = x["placed"]
                assert next(iter(t.partition(p).read(off))).value.startswith(b"created by ")
            assert sum(t.end_offsets().values()) == 2

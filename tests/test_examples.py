"""The examples run as a user would run them (smaller), and check their own results."""

from __future__ import annotations

import os
import re
import subprocess
import sys

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")


def run(script: str, *args: str, tmp: str) -> str:
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), *args, "--dir", tmp],
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_quickstart(tmp_path):
    out = run("quickstart.py", "--events", "20000", "--segment-mib", "1", tmp=str(tmp_path))
    assert "20,000" in out or "20000" in out
    path = os.path.join(str(tmp_path), "access-log")
    logs = sorted(n for n in os.listdir(path) if n.endswith(".log"))
    m = re.search(r"summary: [\d,]+ events \(\+1 deploy\), (\d+) segments", out)
    assert m and int(m.group(1)) == len(logs) > 1, out
    # the demo's data is recent: a writer opened later with the default retention
    # (7 days) keeps every event
    from seglog import Log
    with Log.open(path) as log:
        assert log.enforce_retention() == [] and log.start_offset == 0
        assert log.end_offset == 20_001


def test_worker_pool_survives_a_killed_worker_with_every_order_processed(tmp_path):
    out = run("worker_pool.py", "--workers", "3", "--orders", "20000", "--kill-one",
              tmp=str(tmp_path))
    assert "SIGKILLed worker-0" in out
    m = re.search(r"results: ([\d,]+) distinct orders of ([\d,]+), (\d+) missing", out)
    assert m and m.group(1) == m.group(2) == "20,000" and m.group(3) == "0", out


README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md")

README_RUNNER = r"""
import re, sys, textwrap
text = open(sys.argv[1], encoding="utf-8").read()
for i, block in enumerate(re.findall(r"```python\n(.*?)```", text, re.S)):
    if "SparkSession" in block:
        continue                # tests/test_spark.py runs the data source (Java, minutes)
    if "from seglog import kafka" in block:
        continue                # needs a Kafka broker's directories: tests/test_kafka.py
                                # runs the same calls over a real broker's files
    print(f"--- block {i}", flush=True)
    exec(compile(textwrap.dedent(block), f"README block {i}", "exec"), {"__name__": "__main__"})
print("all blocks ran")
"""


def test_the_readmes_python_blocks_run_in_order(tmp_path):
    """A new user pastes the README's examples one after another in one directory:
    each runs against today's API (later blocks use what earlier ones made)."""
    p = subprocess.run([sys.executable, "-c", README_RUNNER, README], cwd=tmp_path,
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0 and p.stdout.endswith("all blocks ran\n"), p.stdout + p.stderr
    out = p.stdout
    assert "{'orders'}" in out and "{('orders', 0)}" in out       # pattern, pause
    assert "True\nFalse\n" in out                                  # wait_async
    assert re.search(r"^8 \d$", out, re.M), out                    # the topic grew to 8

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
    out = run("quickstart.py", "--events", "20000", tmp=str(tmp_path))
    assert "20,000" in out or "20000" in out


def test_worker_pool_survives_a_killed_worker_with_every_order_processed(tmp_path):
    out = run("worker_pool.py", "--workers", "3", "--orders", "20000", "--kill-one",
              tmp=str(tmp_path))
    assert "SIGKILLed worker-0" in out
    m = re.search(r"results: ([\d,]+) distinct orders of ([\d,]+), (\d+) missing", out)
    assert m and m.group(1) == m.group(2) == "20,000" and m.group(3) == "0", out

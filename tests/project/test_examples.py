"""The examples run as a user would run them (smaller), and check their own results."""

from __future__ import annotations

import collections
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from seglog import Log

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "examples")


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


README = os.path.join(REPO, "README.md")

README_RUNNER = r"""
import re, sys, textwrap
text = open(sys.argv[1], encoding="utf-8").read()
for i, block in enumerate(re.findall(r"```python\n(.*?)```", text, re.S)):
    if "SparkSession" in block:
        continue                # tests/spark/test_spark.py runs the data source (Java, minutes)
    if "from seglog import kafka" in block:
        continue                # needs a Kafka broker's directories: tests/kafka/test_kafka.py
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


# -- the demo installs seglog alone ------------------------------------------------------

FAKE_PYTHON = r"""#!/bin/sh
# records each call; makes a .venv whose python is this script too
echo "$0 $*" >> "$CALLS"
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; fi
exit 0
"""


@pytest.mark.parametrize("script, extras", [("demo", ""), ("test", "[dev,spark,kafka]")])
def test_the_demo_installs_the_runtime_alone(tmp_path, script, extras):
    """scripts/demo installs seglog without extras (the quickstart needs none);
    scripts/test still installs what the tests need."""
    root = tmp_path / "clone"
    (root / "scripts").mkdir(parents=True)
    for name in (script, "venv.sh"):
        shutil.copy(os.path.join(REPO, "scripts", name), root / "scripts" / name)
    shutil.copy(os.path.join(REPO, "pyproject.toml"), root)
    fake = tmp_path / "python3"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    calls = tmp_path / "calls"
    env = {**os.environ, "PYTHON": str(fake), "CALLS": str(calls)}
    env.pop("SEGLOG_EXTRAS", None)
    p = subprocess.run(["bash", str(root / "scripts" / script)], env=env, capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout + p.stderr
    installs = [line.split() for line in calls.read_text().splitlines() if " pip install " in line]
    assert [i[-1] for i in installs] == [f"{root}{extras}"], installs


# -- web servers and task queues: gunicorn and Celery, run for real ---------------------

class Running:
    """A server started in its own session, its output in a file; stopped (SIGTERM,
    then SIGKILL to its whole process group) whatever happens."""

    def __init__(self, cmd: list[str], cwd: str, env: dict[str, str], out: str) -> None:
        self.out_path = out
        self._out = open(out, "wb")
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=self._out,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)

    def output(self) -> str:
        with open(self.out_path, "rb") as f:
            return f.read().decode(errors="replace")

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first match of ``pattern`` in the output, waiting up to ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(pattern, self.output())
            if m:
                return m
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.output()}"
            assert time.monotonic() < deadline, f"no {pattern!r} in {timeout} s:\n{self.output()}"
            time.sleep(0.05)

    def stop(self, timeout: float = 60) -> int | None:
        """SIGTERM (a graceful stop), then SIGKILL to the group after ``timeout`` s;
        the exit code of a graceful stop, None if it had to be killed."""
        code = None
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)     # workers left behind, if any
            except ProcessLookupError:
                pass
            if self.proc.poll() is None:
                self.proc.wait(30)
            self._out.close()
        return code

    def __enter__(self) -> "Running":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _post(port: int, body: bytes) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", "/events", body=body)
        r = conn.getresponse()
        data = r.read()
        assert r.status == 200, (r.status, data)
        return json.loads(data)
    finally:
        conn.close()


@pytest.mark.parametrize("opening", ["post_fork", "lazily"])
def test_gunicorn_workers_append_every_request_exactly_once(tmp_path, opening):
    log_dir = str(tmp_path / "requests")
    # XDG_RUNTIME_DIR: gunicorn's control socket goes there, not in the home directory
    env = {**os.environ, "SEGLOG_LOG": log_dir, "XDG_RUNTIME_DIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "gunicorn", "-w", "3", "-b", "127.0.0.1:0",
           "--graceful-timeout", "20"]
    if opening == "post_fork":
        cmd += ["-c", "gunicorn_conf.py"]
    got: dict[bytes, dict] = {}
    with Running(cmd + ["gunicorn_app:app"], EXAMPLES, env, str(tmp_path / "gunicorn.out")) as server:
        port = int(server.wait_for(r"Listening at: http://127\.0\.0\.1:(\d+)", 120).group(1))
        deadline = time.monotonic() + 180
        with ThreadPoolExecutor(8) as pool:
            # requests 8 at a time, until 300 are answered by at least two workers
            while len(got) < 300 or len({a["pid"] for a in got.values()}) < 2:
                assert time.monotonic() < deadline, f"{len(got)} answered, by " \
                    f"{ {a['pid'] for a in got.values()} }:\n{server.output()}"
                bodies = [b"request %d" % i for i in range(len(got), len(got) + 40)]
                got.update(zip(bodies, pool.map(lambda b: _post(port, b), bodies)))
        assert server.stop() == 0, server.output()
    assert {a["opened"] for a in got.values()} == {opening}
    with Log.open(log_dir, readonly=True) as log:
        stored = [(m.value, m.offset) for m in log.iter()]
    counts = collections.Counter(v for v, _ in stored)
    assert set(counts) == set(got) and set(counts.values()) == {1}   # each request once
    assert dict(stored) == {body: a["offset"] for body, a in got.items()}


def test_celery_prefork_workers_append_every_task_exactly_once(tmp_path):
    log_dir, broker = str(tmp_path / "tasks"), str(tmp_path / "broker")
    os.makedirs(broker)
    env = {**os.environ, "SEGLOG_LOG": log_dir, "CELERY_BROKER_DIR": broker}
    cmd = [sys.executable, "-m", "celery", "-A", "celery_tasks", "worker", "--pool", "prefork",
           "--concurrency", "3", "--loglevel", "INFO", "--without-gossip", "--without-mingle",
           "--without-heartbeat"]
    sent: set[int] = set()
    with Running(cmd, EXAMPLES, env, str(tmp_path / "celery.out")) as worker:
        worker.wait_for(r"celery@\S+ ready", 120)
        deadline = time.monotonic() + 180
        pids: set[int] = set()
        # tasks 200 at a time, until every one sent is in the log, written by at
        # least two pool processes
        while len(pids) < 2:
            assert time.monotonic() < deadline, f"pids {pids}:\n{worker.output()}"
            first = len(sent)
            subprocess.run([sys.executable, "celery_tasks.py", "200", "--first", str(first)],
                           cwd=EXAMPLES, env=env, check=True, timeout=120, capture_output=True)
            sent |= set(range(first, first + 200))
            while not os.path.exists(os.path.join(log_dir, "seglog.json")):
                assert time.monotonic() < deadline, worker.output()
                time.sleep(0.05)
            with Log.open(log_dir, readonly=True) as log:
                assert log.wait(len(sent) - 1, timeout=max(0.0, deadline - time.monotonic())), \
                    worker.output()
                pids = {json.loads(m.value)["pid"] for m in log.iter()}
        worker.stop()
    with Log.open(log_dir, readonly=True) as log:
        orders = collections.Counter(json.loads(m.value)["order"] for m in log.iter())
    assert set(orders) == sent and set(orders.values()) == {1}     # each task once

"""A WSGI app whose gunicorn workers all append to one seglog log.

    cd examples
    SEGLOG_LOG=/tmp/requests gunicorn -w 4 -c gunicorn_conf.py gunicorn_app:app
    curl -d 'hello' http://127.0.0.1:8000/events       # {"offset": 0, "pid": ...}

Every worker process is a writer of the same log, opened with ``multi_writer=True``:
each append is atomic, offsets stay dense, and a worker killed at any instant loses
nothing the others acknowledged. ``POST /events`` appends the request's body and
answers with its offset once it is written (readable by every reader, safe from a
crash of the worker; ``flush_ms`` makes it safe from power loss soon after).

When to open: a writer belongs to the process that opened it (a forked child's copy
refuses every call), so each worker opens its own, after the fork. Two ways:

* in gunicorn's ``post_fork`` hook (``gunicorn_conf.py``): the worker opens it as it
  starts, so a log that cannot be opened fails the worker at once, not its first
  request, and ``worker_exit`` closes it;
* lazily, at the first request of each worker (``writer()`` below, what runs without
  ``-c gunicorn_conf.py``): needs no server hook, so it also serves uwsgi or any
  other pre-forking server, and it is right with ``--preload`` too (the master
  imports the app but never opens the log). The log is closed when the worker
  exits (``atexit``).

The app works either way: ``writer()`` returns what ``post_fork`` opened, or opens.
With threaded workers (``--threads``), a ``seglog.Producer`` over the log batches
the threads' appends (see docs/PRODUCER.md).
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
from typing import Any, Callable, Iterable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import seglog  # noqa: E402

LOG_DIR = os.environ.get("SEGLOG_LOG", "requests-log")
MAX_BODY = 1 << 20

_lock = threading.Lock()
_log: seglog.Log | None = None
_pid = 0
_opened_by = ""


def writer(opened_by: str = "lazily") -> seglog.Log:
    """This worker's writer of the log: opened once per process."""
    global _log, _pid, _opened_by
    with _lock:
        if _log is None or _pid != os.getpid():
            # flush_ms: fsync at most 200 ms after an append (the writers share it)
            _log = seglog.Log.open(LOG_DIR, multi_writer=True, flush_ms=200)
            _pid, _opened_by = os.getpid(), opened_by
            atexit.register(close_writer)
        return _log


def close_writer() -> None:
    """Close this worker's writer (flush, release its share of the log)."""
    global _log
    with _lock:
        if _log is not None and _pid == os.getpid():
            _log.close()
        _log = None


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    path, method = environ.get("PATH_INFO", ""), environ["REQUEST_METHOD"]
    if path == "/events" and method == "POST":
        size = int(environ.get("CONTENT_LENGTH") or 0)
        if size > MAX_BODY:
            return _answer(start_response, "413 Payload Too Large", {"error": "body too large"})
        body = environ["wsgi.input"].read(size)
        offset = writer().append(body)
        return _answer(start_response, "200 OK",
                       {"offset": offset, "pid": os.getpid(), "opened": _opened_by})
    if path == "/events" and method == "GET":
        log = writer()
        return _answer(start_response, "200 OK",
                       {"start": log.start_offset, "end": log.end_offset})
    return _answer(start_response, "404 Not Found", {"error": f"no {method} {path}"})


def _answer(start_response: Callable[..., Any], status: str, doc: dict[str, Any]
            ) -> list[bytes]:
    data = json.dumps(doc).encode()
    start_response(status, [("Content-Type", "application/json"),
                            ("Content-Length", str(len(data)))])
    return [data]

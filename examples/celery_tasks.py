"""Celery tasks whose prefork worker processes all append to one seglog log.

    cd examples
    celery -A celery_tasks worker --pool prefork --concurrency 4    # the workers
    python celery_tasks.py 1000                                     # send 1000 tasks

Each pool process opens its own writer of the log, with ``multi_writer=True``, in
the ``worker_process_init`` signal (a pool process is forked from the worker's main
process: a writer opened there, or at import, would be the main process's, and a
forked copy refuses every call), and closes it in ``worker_process_shutdown``.
The task ``record`` appends one record per call and returns its offset.

The broker here is kombu's file-system transport (a directory, no server: the
messages cross processes as files), so the example runs anywhere; a real
deployment names its Redis or RabbitMQ broker instead, and nothing else changes.
Directories: ``SEGLOG_LOG`` (the log, default ``tasks-log``), ``CELERY_BROKER_DIR``
(the broker's, default ``celery-broker``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from celery import Celery  # noqa: E402
from celery.signals import worker_process_init, worker_process_shutdown  # noqa: E402

import seglog  # noqa: E402

LOG_DIR = os.path.abspath(os.environ.get("SEGLOG_LOG", "tasks-log"))
BROKER_DIR = os.path.abspath(os.environ.get("CELERY_BROKER_DIR", "celery-broker"))
os.makedirs(BROKER_DIR, exist_ok=True)

app = Celery("celery_tasks", broker="filesystem://")
app.conf.update(
    broker_transport_options={"data_folder_in": BROKER_DIR, "data_folder_out": BROKER_DIR,
                              "control_folder": BROKER_DIR, "polling_interval": 0.05},
    # the file-system broker has no fan-out for remote control or events
    worker_enable_remote_control=False, worker_send_task_events=False,
    task_serializer="json", accept_content=["json"],
)

_log: seglog.Log | None = None


@worker_process_init.connect
def open_writer(**_: Any) -> None:
    """In each pool process, after the fork: this process's writer of the log."""
    global _log
    # flush_ms: fsync at most 200 ms after an append (the writers share it)
    _log = seglog.Log.open(LOG_DIR, multi_writer=True, flush_ms=200)


@worker_process_shutdown.connect
def close_writer(**_: Any) -> None:
    global _log
    if _log is not None:
        _log.close()
        _log = None


@app.task
def record(order: int) -> int:
    """Append the order's record; its offset. Written (readable, safe from a crash of
    this process) on return."""
    if _log is None:
        raise RuntimeError("no writer: this process was not started by a prefork pool")
    return _log.append(json.dumps({"order": order, "pid": os.getpid()}).encode())


def send(first: int, count: int) -> None:
    """Send ``record(first)`` to ``record(first + count - 1)``.

    kombu's file-system transport lets a worker take a message file its sender has
    not finished writing; so each message is written aside (``.staging``, which the
    workers never read) and then renamed into the broker's directory, atomically:
    a worker sees whole messages only. A real broker needs none of this."""
    staging = os.path.join(BROKER_DIR, ".staging")
    os.makedirs(staging, exist_ok=True)
    app.conf.broker_transport_options = {**app.conf.broker_transport_options,
                                         "data_folder_out": staging}
    for i in range(first, first + count):
        record.delay(i)
        for name in os.listdir(staging):
            os.rename(os.path.join(staging, name), os.path.join(BROKER_DIR, name))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="send tasks to the workers")
    parser.add_argument("count", type=int, help="tasks to send")
    parser.add_argument("--first", type=int, default=0, help="the first order's number")
    args = parser.parse_args()
    send(args.first, args.count)
    print(f"sent orders {args.first} to {args.first + args.count - 1}")

"""A consumer-group member process for the group tests.

    python group_member.py ROOT GROUP TOPICS MEMBER TRACE SESSION_MS [MODE [ASSIGNOR [SEED]]]

TOPICS is a comma-separated list of topic names, or ``re:PATTERN`` to subscribe by
pattern. It consumes until SIGTERM, then shuts the consumer down the way MODE says,
writing one JSON line per event to TRACE (each written before anything that could
commit what it records):

    ["join", member, generation, t]
    ["y", member, generation, topic, partition, offset, value, t]   one per message
    ["commit", member, generation, t]   ["commit_failed", member, generation, t]
    ["left", member, t]

MODE is how it consumes and how it ends (docs/GROUPS.md, "Shutting a consumer
down"):

* ``poll`` (default): ``poll()`` and ``commit()`` after every batch; SIGTERM sets a
  flag, then ``close()``. While a file TRACE.hold-MEMBER exists it stops after its
  next batch, before committing it (event ["holding", member, generation, t]).
* ``iter-signal``: ``for m in consumer``, auto-commit; the SIGTERM handler calls
  ``close()`` wherever the loop is.
* ``iter-thread``: the loop runs in a thread; the main thread waits for SIGTERM and
  calls ``close()`` from there.
* ``async-cancel``: ``async for`` in a task; SIGTERM (``loop.add_signal_handler``)
  cancels the task and closes the consumer.
* ``async-signal``: ``async for``; a plain SIGTERM handler calls ``close()``.
* ``callbacks``: ``for m in consumer``; besides SIGTERM (handler: ``close()``), it
  closes itself from ``on_revoke``, ``on_assign`` or its value deserializer at a
  random moment (SEED).
"""

from __future__ import annotations

import signal

# a SIGTERM before the mode's handler is in place (while seglog imports, or the
# consumer joins) is kept, and acted on as soon as it is
_TERM: list[int] = []
signal.signal(signal.SIGTERM, lambda *a: _TERM.append(1))

import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import seglog  # noqa: E402


def main() -> None:
    root, group, topics, member, trace, session_ms = sys.argv[1:7]
    mode = sys.argv[7] if len(sys.argv) > 7 else "poll"
    assignor = sys.argv[8] if len(sys.argv) > 8 else "range"
    rnd = random.Random(int(sys.argv[9]) if len(sys.argv) > 9 else 0)
    hold = f"{trace}.hold-{member}"
    out = open(trace, "a", buffering=1)

    def emit(*event: object) -> None:
        out.write(json.dumps(list(event) + [time.time()]) + "\n")

    box: list[seglog.Consumer] = []

    def close_now(*_: object) -> None:
        box[0].close()

    # callbacks mode: which callback ends the member, and when
    ender = rnd.choice(["on_revoke", "on_assign", "deserializer"]) if mode == "callbacks" else ""
    left = [rnd.randrange(1, 400)]

    def on_revoke(tps: set) -> None:
        if ender == "on_revoke" and rnd.random() < 0.5:
            close_now()

    def on_assign(tps: set) -> None:
        if ender == "on_assign" and box and rnd.random() < 0.5:
            close_now()

    def value(v: bytes) -> bytes:
        if ender == "deserializer":
            left[0] -= 1
            if left[0] == 0:
                close_now()
        return v

    pattern = topics[3:] if topics.startswith("re:") else None
    c = seglog.Consumer(root, group, topics=None if pattern else topics.split(","), pattern=pattern,
                        session_timeout_ms=int(session_ms), member_id=member, assignor=assignor,
                        auto_commit_ms=None if mode == "poll" else 50,
                        on_revoke=on_revoke, on_assign=on_assign,
                        value_deserializer=value if mode == "callbacks" else None)
    box.append(c)
    emit("join", member, c.generation)

    def delivered(m: seglog.ConsumerMessage) -> None:
        emit("y", member, c.generation, m.topic, m.partition, m.offset, m.value.decode())

    def loop() -> None:
        for m in c:
            delivered(m)

    if mode == "poll":
        stop = _TERM                   # SIGTERM: leave the loop, then close
        while not stop:
            batch = c.poll(timeout_ms=50, max_records=200)
            if not batch:
                continue
            for m in batch:
                delivered(m)
            if os.path.exists(hold):
                emit("holding", member, c.generation)
                while os.path.exists(hold) and not stop:
                    time.sleep(0.01)
            try:
                c.commit()
                emit("commit", member, c.generation)
            except seglog.CommitFailedError:
                emit("commit_failed", member, c.generation)
        c.close()
    elif mode in ("iter-signal", "callbacks"):
        signal.signal(signal.SIGTERM, close_now)
        if _TERM:
            close_now()
        loop()
    elif mode == "iter-thread":
        term = threading.Event()
        signal.signal(signal.SIGTERM, lambda *a: term.set())
        if _TERM:
            term.set()
        th = threading.Thread(target=loop)
        th.start()
        while not term.wait(0.05) and th.is_alive():
            pass
        c.close()                      # from this thread, wherever the loop is
        th.join()
    elif mode in ("async-cancel", "async-signal"):
        async def run() -> None:
            async def consume() -> None:
                async for m in c:
                    delivered(m)
                    if rnd.random() < 0.05:
                        await asyncio.sleep(0)
            task = asyncio.create_task(consume())
            if mode == "async-cancel":
                def cancel_and_close() -> None:
                    task.cancel()
                    c.close()
                asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, cancel_and_close)
                if _TERM:
                    cancel_and_close()
            else:
                signal.signal(signal.SIGTERM, close_now)
                if _TERM:
                    close_now()
            try:
                await task
            except asyncio.CancelledError:
                pass
        asyncio.run(run())
        # the loop's end put SIGTERM's default action back: another SIGTERM while
        # this process exits is not a failure
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    assert c.closed
    emit("left", member)


if __name__ == "__main__":
    main()

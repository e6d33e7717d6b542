"""A consumer-group member process for the group tests.

    python group_member.py ROOT GROUP TOPIC MEMBER TRACE SESSION_MS [ASSIGNOR]

Consumes until SIGTERM (then closes: commit, leave), writing one JSON line per event
to TRACE: ["join", member, generation, t], ["got", member, generation, [[p, offset],
...], t], ["commit", member, generation, {p: position}, t], ["commit_failed", member,
generation, t], ["left", member, t]. It commits after every batch it got.

While a file TRACE.hold-MEMBER exists, it stops after its next batch, before
committing it (event ["holding", member, generation, t]), until the file is gone:
the moment between poll and commit in which a test stops it.

A TOPIC of the form ``re:PATTERN`` subscribes by pattern instead (``pattern=``); its
"got" events then list [topic, p, offset] triples and its "commit" events key the
positions by "topic-p".
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import seglog
from consumers import owned


def main() -> None:
    root, group, topic, member, trace, session_ms = sys.argv[1:7]
    assignor = sys.argv[7] if len(sys.argv) > 7 else "range"
    stop = []
    hold = f"{trace}.hold-{member}"
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    with open(trace, "a", buffering=1) as out:
        def emit(*event: object) -> None:
            out.write(json.dumps(list(event) + [time.time()]) + "\n")

        pattern = topic[3:] if topic.startswith("re:") else None
        c = seglog.Consumer(root, group, None if pattern else [topic], pattern=pattern,
                            session_timeout_ms=int(session_ms), auto_commit_ms=None,
                            member_id=member, assignor=assignor)
        emit("join", member, c.generation)
        while not stop:
            batch = c.poll(timeout_ms=50, max_records=200)
            if batch:
                emit("got", member, c.generation,
                     [[m.topic, m.partition, m.offset] if pattern else [m.partition, m.offset]
                      for m in batch])
                if os.path.exists(hold):
                    emit("holding", member, c.generation)
                    while os.path.exists(hold) and not stop:
                        time.sleep(0.01)
                try:
                    c.commit()
                    owned_now = owned(c)
                    emit("commit", member, c.generation,
                         {(f"{t}-{p}" if pattern else str(p)): c.position(t, p)
                          for t, p in c.assignment()
                          if (t, p) in owned_now})
                except seglog.CommitFailedError:
                    emit("commit_failed", member, c.generation)
        c.close()
        emit("left", member)


if __name__ == "__main__":
    main()

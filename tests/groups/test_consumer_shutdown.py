"""Shutting a consumer down the ways services do (docs/GROUPS.md, "Shutting a
consumer down"): a task cancelled and the consumer closed, ``close()`` from another
thread or task, from ``on_assign``, ``on_revoke``, a deserializer or a signal
handler. Every way ends the loop cleanly, leaves the group, and commits exactly
what was delivered (yielded by the loop, or returned by ``poll``): nothing ahead of
it, so the next owner starts at the first message nobody received."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import threading
import time

import pytest

from helpers import fill, wait_for
from seglog import Consumer, Topic, describe_group
from seglog.consumer_group import committed_offsets

PARTITIONS = 4


def run(coro, timeout: float = 60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture
def topic(tmp_path):
    t = Topic.open(str(tmp_path), "ev", partitions=PARTITIONS)
    yield t
    t.close()


def firsts_not_delivered(got, n: int) -> dict[tuple[str, int], int]:
    """Per partition, the offset after the last of ``got`` (messages ``fill`` wrote,
    ``n`` of them, each partition's delivered in order from 0)."""
    out = {("ev", p): 0 for p in range(PARTITIONS)}
    for m in got:
        assert m.offset == out[("ev", m.partition)], "delivered out of order or twice"
        out[("ev", m.partition)] += 1
    return out


def assert_committed_is_delivered(root: str, got, n: int) -> None:
    """The group's committed offsets are exactly what was delivered (a partition
    with nothing delivered: nothing committed, or 0)."""
    want = firsts_not_delivered(got, n)
    committed = committed_offsets(root, "g")
    assert {tp: committed.get(tp, 0) for tp in want} == want, \
        f"committed {committed}, delivered up to {want}"


def drain_rest(root: str, got, n: int) -> None:
    """A new member of the group gets every message not delivered before, once."""
    with Consumer(root, "g", topics=["ev"], auto_commit_ms=None, member_id="next") as c:
        rest: list = []
        deadline = time.monotonic() + 20
        while len(got) + len(rest) < n:
            assert time.monotonic() < deadline, f"{len(got) + len(rest)} of {n}"
            rest += c.poll(timeout_ms=50)
    seen = [(m.partition, m.offset) for m in got + rest]
    assert sorted(seen) == sorted((i % PARTITIONS, i // PARTITIONS) for i in range(n))


@contextlib.contextmanager
def watchdog(c: Consumer, seconds: float = 30):
    """A loop that does not end by itself fails the test instead of hanging it."""
    fired: list = []

    def fire() -> None:
        fired.append(1)
        c.close()
    timer = threading.Timer(seconds, fire)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
    assert not fired, f"the loop did not end by itself within {seconds} s"


def blocking_values():
    """A value deserializer that holds the poll in its thread until released."""
    inside, release = threading.Event(), threading.Event()

    def value(b: bytes) -> bytes:
        inside.set()
        release.wait(10)
        return b
    return value, inside, release


# -- asyncio -------------------------------------------------------------------------------

def test_cancel_then_close_commits_only_what_async_for_yielded(topic):
    """A task's ``async for`` is cancelled while its poll is in the worker, and
    another task closes the consumer before the cancelled task runs again: the
    batch that poll returns was never yielded, so close commits none of it (it
    committed the whole batch: 10 a partition, 0 received)."""
    fill(topic, 40)
    value, inside, release = blocking_values()

    async def main() -> list:
        c = Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=60_000, value_deserializer=value)
        got: list = []

        async def consume() -> None:
            async for m in c:
                got.append(m)

        task = asyncio.create_task(consume())
        assert await asyncio.get_running_loop().run_in_executor(None, inside.wait, 10)
        task.cancel()           # the poll is in its worker...
        release.set()           # ...returns its batch...
        c.close()               # ...and the loop closes before the cancelled task runs
        with pytest.raises(asyncio.CancelledError):
            await task
        return got

    got = run(main())
    assert got == []
    assert_committed_is_delivered(topic.root, got, 40)
    drain_rest(topic.root, got, 40)


def test_a_commit_from_another_task_during_async_for_counts_only_what_was_yielded(topic):
    """``commit()`` from another task while the loop's poll is in its worker must
    not commit the batch the loop has not yielded (it committed all of it)."""
    fill(topic, 40)
    value, inside, release = blocking_values()

    async def main() -> None:
        with Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=None, value_deserializer=value) as c:
            got: list = []

            async def consume() -> None:
                async for m in c:
                    got.append(m)
                    if len(got) == 40:
                        return

            task = asyncio.create_task(consume())
            assert await asyncio.get_running_loop().run_in_executor(None, inside.wait, 10)
            release.set()
            c.commit()          # the poll returns its batch; nothing yielded yet
            assert_committed_is_delivered(topic.root, list(got), 40)
            await asyncio.wait_for(task, 20)
            c.commit()
            assert_committed_is_delivered(topic.root, got, 40)

    run(main())


def test_close_from_another_task_or_thread_ends_async_for_and_commits_what_was_yielded(topic):
    rnd = random.Random(seed := int(os.environ.get("SEGLOG_SEED", random.randrange(2**32))))
    print(f"seed {seed}")
    fill(topic, 400)
    got: list = []
    for closer in ("task", "thread"):
        async def main() -> None:
            c = Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=60_000,
                         member_id=f"by-{closer}")

            async def consume() -> None:
                async for m in c:
                    got.append(m)
                    if rnd.random() < 0.1:
                        await asyncio.sleep(0)

            task = asyncio.create_task(consume())
            await asyncio.sleep(rnd.random() * 0.05)        # a random instant
            if closer == "task":
                c.close()
            else:
                await asyncio.get_running_loop().run_in_executor(None, c.close)
            await asyncio.wait_for(task, 10)                 # ends, without error
            assert c.closed

        run(main())
        assert_committed_is_delivered(topic.root, got, 400)
    drain_rest(topic.root, got, 400)


# -- threads --------------------------------------------------------------------------------

def test_close_from_another_thread_at_random_instants_commits_what_the_loop_yielded(topic):
    """A ``for`` loop in one thread, ``close()`` from another at a random instant
    (the window between a poll's return and the loop taking its batch included:
    slow deserializing keeps the closer waiting for a poll): the loop ends cleanly,
    and what is committed is what it yielded, also when the loop stops at the first
    message it sees after the close (the batch a poll returned before the close was
    committed by it, then dropped)."""
    seed = int(os.environ.get("SEGLOG_SEED", random.randrange(2**32)))
    print(f"seed {seed} (rerun with SEGLOG_SEED={seed})")
    rnd = random.Random(seed)
    per_round = 40
    got: list = []

    def slow(b: bytes) -> bytes:
        sum(range(2000))                     # CPU time a message, as parsing takes
        return b
    old = os.sys.getswitchinterval()
    os.sys.setswitchinterval(1e-5)           # threads interleave at many more points
    try:
        for r in range(20):
            fill(topic, per_round, r * per_round)
            c = Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=60_000, member_id=f"r{r}",
                         value_deserializer=slow)
            errors: list = []

            def loop() -> None:
                try:
                    for m in c:
                        got.append(m)        # received (yielded): delivered
                        if c.closed:
                            break            # a service's loop: no more after shutdown
                except BaseException as e:       # noqa: BLE001 - the test's failure
                    errors.append(e)

            th = threading.Thread(target=loop)
            th.start()
            time.sleep(rnd.random() * 0.01)      # a random instant, not a synchronisation
            c.close()
            th.join(10)
            assert not th.is_alive() and not errors, errors
            assert_committed_is_delivered(topic.root, got, (r + 1) * per_round)
    finally:
        os.sys.setswitchinterval(old)
    drain_rest(topic.root, got, 20 * per_round)


def test_close_between_a_polls_return_and_the_loop_taking_its_batch(topic):
    """The narrow window of the test above, made certain: ``close()`` from another
    thread runs right after the loop's poll handed its batch back and before the
    loop yields any of it (a profiler stops the loop there: at the return of the
    call that hands a batch over, ``poll`` once, ``_poll_held`` now). The close
    committed the whole batch; the loop then stopped at its first message."""
    fill(topic, 40)
    c = Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=60_000)
    got: list = []
    fired = threading.Event()

    def profile(frame, event, arg) -> None:
        if event == "return" and frame.f_code.co_name in ("poll", "_poll_held") \
                and getattr(arg, "batch", arg) and not fired.is_set():
            fired.set()
            closer = threading.Thread(target=c.close)
            closer.start()
            closer.join(10)

    def loop() -> None:
        sys.setprofile(profile)
        try:
            for m in c:
                got.append(m)
                if c.closed:
                    break
        finally:
            sys.setprofile(None)

    th = threading.Thread(target=loop)
    th.start()
    th.join(20)
    assert not th.is_alive() and fired.is_set() and c.closed
    assert_committed_is_delivered(topic.root, got, 40)
    drain_rest(topic.root, got, 40)


# -- callbacks ------------------------------------------------------------------------------

def test_close_from_on_assign_ends_the_loop(topic):
    """``on_assign`` closing the consumer (at a rebalance that gives it more) ends
    the loop without an error (it raised OSError: a heartbeat on the closed member
    file) and leaves the group; what was yielded is committed."""
    fill(topic, 40)
    assigned: list = []
    got: list = []

    def on_assign(tps):
        assigned.append(tps)
        if len(assigned) == 2:
            a.close()

    a = Consumer(topic.root, "g", topics=["ev"], member_id="a", auto_commit_ms=60_000,
                 on_assign=on_assign)
    b = Consumer(topic.root, "g", topics=["ev"], member_id="b", auto_commit_ms=None)
    with watchdog(a):
        for m in a:               # a owns 0 and 1 now; once b leaves, it is given 2 and 3
            got.append(m)
            if len(got) == 5:
                b.close()
    assert a.closed and len(got) >= 5 and assigned[1] == {("ev", 2), ("ev", 3)}
    assert set(describe_group(topic.root, "g")["members"]) == set()
    assert_committed_is_delivered(topic.root, got, 40)
    drain_rest(topic.root, got, 40)


def test_close_from_on_revoke_while_closing_does_not_recurse(topic):
    """``on_revoke`` calls ``close()`` (a common way to flush state): during the close
    that revokes it, that call returns at once (it recursed until RecursionError
    and committed nothing)."""
    fill(topic, 40)
    revoked: list = []

    def on_revoke(tps):
        revoked.append(tps)
        c.close()

    c = Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=60_000, on_revoke=on_revoke)
    got = c.poll(timeout_ms=1000, max_records=7)
    c.close()
    assert revoked == [{("ev", p) for p in range(PARTITIONS)}] and c.closed
    assert_committed_is_delivered(topic.root, got, 40)
    drain_rest(topic.root, got, 40)


def test_close_from_on_revoke_at_a_rebalance_ends_the_loop(topic):
    fill(topic, 40)
    got: list = []
    box: list = []
    a = Consumer(topic.root, "g", topics=["ev"], member_id="a", auto_commit_ms=60_000,
                 on_revoke=lambda tps: box[0].close())
    box.append(a)
    others: list = []
    with watchdog(a):
        for m in a:
            got.append(m)
            if len(got) == 5:           # b joins: a's next poll revokes 2 and 3
                others.append(Consumer(topic.root, "g", topics=["ev"], member_id="b",
                                       auto_commit_ms=None))
    others[0].close()
    assert a.closed
    assert_committed_is_delivered(topic.root, got, 40)
    drain_rest(topic.root, got, 40)


def test_close_from_a_deserializer_ends_the_loop(topic):
    fill(topic, 40)
    got: list = []
    box: list = []
    seen = [0]

    def value(b: bytes) -> bytes:
        seen[0] += 1
        if seen[0] == 13:
            box[0].close()
        return b

    c = Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=60_000, value_deserializer=value)
    box.append(c)
    with watchdog(c):
        for m in c:
            got.append(m)
    assert c.closed
    assert_committed_is_delivered(topic.root, got, 40)
    drain_rest(topic.root, got, 40)


# -- signals --------------------------------------------------------------------------------

@pytest.mark.parametrize("delay", [0.0005, 0.003, 0.02, 0.15])
def test_close_from_a_signal_handler_ends_the_loop_and_commits_what_was_yielded(topic, delay):
    """The usual SIGTERM shutdown: the handler calls ``close()`` wherever the loop is
    (inside a waiting poll, in the middle of its group work, between messages). The
    loop ends cleanly (it raised OSError: errno 22, a heartbeat on the closed member
    file)."""
    assert threading.current_thread() is threading.main_thread()
    fill(topic, 400)
    got: list = []
    c = Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=60_000)
    old = signal.signal(signal.SIGALRM, lambda *a: c.close())
    try:
        signal.setitimer(signal.ITIMER_REAL, delay)
        with watchdog(c):
            for m in c:
                got.append(m)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert c.closed
    wait_for(lambda: describe_group(topic.root, "g")["members"] == {}, 10, "the member to leave")
    assert_committed_is_delivered(topic.root, got, 400)
    drain_rest(topic.root, got, 400)


def test_close_from_a_signal_handler_during_an_idle_poll(topic):
    """No data: the loop waits in its poll when SIGALRM's handler closes it."""
    c = Consumer(topic.root, "g", topics=["ev"], auto_commit_ms=60_000)
    old = signal.signal(signal.SIGALRM, lambda *a: c.close())
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with watchdog(c):
            for _ in c:
                raise AssertionError("no message was written")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert c.closed and describe_group(topic.root, "g")["members"] == {}

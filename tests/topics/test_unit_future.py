"""The producer's futures behave as ``concurrent.futures.Future`` for every user:
waiting, timeouts, callbacks, cancellation, ``wait``/``as_completed`` and asyncio."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading

import pytest

from seglog._runtime.future import FutureRound, LightFuture, finish_all


def test_is_a_future_and_light():
    f = LightFuture()
    assert isinstance(f, cf.Future) and isinstance(f, LightFuture)
    assert "_condition" not in vars(f)      # nothing built until someone looks
    assert f.set_running_or_notify_cancel()
    f.set_result(7)
    assert "_condition" not in vars(f)
    assert f.done() and f.result() == 7 and f.exception() is None
    assert "_condition" not in vars(f)      # a finished future is read without one
    g = LightFuture()
    g.set_exception(KeyError("k"))
    with pytest.raises(KeyError):
        g.result(timeout=0)
    assert isinstance(g.exception(), KeyError) and g.done() and "_condition" not in vars(g)


def test_result_waits_for_another_thread_and_times_out():
    f = LightFuture()
    with pytest.raises(cf.TimeoutError):
        f.result(timeout=0.01)
    started = threading.Event()

    def resolve():
        started.wait(5)
        f.set_running_or_notify_cancel()
        f.set_result("x")
    t = threading.Thread(target=resolve)
    t.start()
    started.set()
    assert f.result(timeout=10) == "x"
    t.join(10)


def test_exception_and_callbacks_before_and_after():
    f = LightFuture()
    seen = []
    f.add_done_callback(lambda g: seen.append(("before", g.exception())))
    err = ValueError("bad")
    f.set_exception(err)
    f.add_done_callback(lambda g: seen.append(("after", g.exception())))
    assert seen == [("before", err), ("after", err)]
    with pytest.raises(ValueError):
        f.result()


def test_cancel_before_running_and_not_after():
    f = LightFuture()
    assert f.cancel() and f.cancelled()
    assert not f.set_running_or_notify_cancel()
    with pytest.raises(cf.CancelledError):
        f.result()
    g = LightFuture()
    assert g.set_running_or_notify_cancel()
    assert not g.cancel()
    with pytest.raises(cf.InvalidStateError):
        h = LightFuture()
        h.set_result(1)
        h.set_result(2)


def test_wait_as_completed_and_asyncio():
    fs = [LightFuture() for _ in range(5)]

    def resolve():
        for i, f in enumerate(fs):
            f.set_running_or_notify_cancel()
            f.set_result(i)
    t = threading.Thread(target=resolve)
    t.start()
    done, pending = cf.wait(fs, timeout=10)
    assert not pending and {f.result() for f in done} == set(range(5))
    assert sorted(f.result() for f in cf.as_completed(fs, timeout=10)) == list(range(5))
    t.join(10)

    async def main() -> int:
        g = LightFuture()
        threading.Timer(0.01, lambda: (g.set_running_or_notify_cancel(), g.set_result(42))).start()
        return await asyncio.wait_for(asyncio.wrap_future(g), 10)
    assert asyncio.run(main()) == 42


def test_finish_all_respects_what_users_did():
    fs = [LightFuture() for _ in range(6)]
    assert fs[1].cancel()
    fs[2].done()                        # looked at: its condition exists
    seen = []
    fs[3].add_done_callback(lambda f: seen.append(f.result()))
    plain: cf.Future = cf.Future()      # a plain Future takes Future's own way
    keep = [f.set_running_or_notify_cancel() for f in fs + [plain]]
    assert keep == [True, False, True, True, True, True, True]
    assert not fs[0].cancel() and fs[2].running()
    running = [f for f, k in zip(fs + [plain], keep) if k]
    waiter = threading.Thread(target=lambda: seen.append(("waited", fs[4].result(timeout=10))))
    waiter.start()
    finish_all(running, range(100, 100 + len(running)))
    waiter.join(10)
    assert [f.result() for f in running] == list(range(100, 106))
    assert sorted(seen, key=str) == sorted([102, ("waited", 103)], key=str)
    assert fs[1].cancelled()


# -- a round: futures made together, started together, resolved a span at a time --------
def test_a_round_starts_and_resolves_its_futures_in_one_step_each_without_touching_them():
    rnd = FutureRound()
    fs = [rnd.new() for _ in range(10)]
    assert all(isinstance(f, cf.Future) and not f.running() for f in fs[:1])
    assert rnd.start(fs) is None                # none cancelled: every one runs
    assert not fs[5].cancel() and fs[5].running()
    rnd.resolve(4, range(104, 110))        # the second span first
    assert all(f.done() for f in fs[4:])
    assert fs[6].result() == 106 and "_condition" not in vars(fs[6])
    assert not fs[1].done()         # (the Future way: it now has its condition)
    rnd.resolve(0, range(100, 104))
    assert [f.result() for f in fs] == list(range(100, 110))
    # none but those looked at unfinished has a condition
    assert [("_condition" in vars(f)) for f in fs] == [i in (0, 1, 5) for i in range(10)]
    assert not fs[2].cancel() and not fs[2].cancelled() and fs[2].exception() is None


def test_a_rounds_tag_pairs_each_result():
    rnd = FutureRound(3)
    fs = [rnd.new() for _ in range(3)]
    rnd.start(fs)
    rnd.resolve(0, range(7, 10))
    assert [f.result() for f in fs] == [(3, 7), (3, 8), (3, 9)]


def test_a_round_honours_what_users_did_before_and_after_it_started():
    rnd = FutureRound()
    fs = [rnd.new() for _ in range(8)]
    seen = []
    fs[0].add_done_callback(lambda f: seen.append(("cb0", f.result())))    # before start
    assert fs[1].cancel() and fs[1].cancelled()                           # before start
    waited = []
    waiter = threading.Thread(target=lambda: waited.append(fs[2].result(timeout=30)))
    waiter.start()
    keep = rnd.start(fs)
    assert keep == [True, False] + [True] * 6       # a cancelled one: finished one by one
    assert not fs[0].cancel() and fs[0].running() and fs[1].cancelled()
    fs[3].add_done_callback(lambda f: seen.append(("cb3", f.result())))    # after start
    running = [f for f, k in zip(fs, keep) if k]
    fs[4].set_exception(KeyError("one by one"))     # a record refused: detached, failed
    finish_all([f for f in running if f is not fs[4]], range(50, 56))
    waiter.join(30)
    assert waited == [51] and sorted(seen) == [("cb0", 50), ("cb3", 52)]
    assert isinstance(fs[4].exception(), KeyError)
    with pytest.raises(cf.CancelledError):
        fs[1].result()


def test_a_future_finished_by_its_span_cannot_be_finished_again():
    rnd = FutureRound()
    fs = [rnd.new() for _ in range(2)]
    rnd.start(fs)
    rnd.resolve(0, range(2))
    with pytest.raises(cf.InvalidStateError):
        fs[0].set_result(9)
    with pytest.raises(cf.InvalidStateError):
        fs[1].set_exception(KeyError("late"))
    assert [f.result() for f in fs] == [0, 1]


def test_wait_as_completed_and_asyncio_on_a_rounds_futures():
    rnd = FutureRound()
    fs = [rnd.new() for _ in range(6)]
    got: list[int] = []

    async def main() -> list[int]:
        return list(await asyncio.wait_for(
            asyncio.gather(*(asyncio.wrap_future(f) for f in fs[:2])), 30))
    go = threading.Event()

    def resolve():
        assert go.wait(30)
        rnd.start(fs)
        rnd.resolve(3, range(13, 16))
        rnd.resolve(0, range(10, 13))
    t = threading.Thread(target=resolve)
    t.start()
    threading.Timer(0.01, go.set).start()
    got = asyncio.run(main())
    done, pending = cf.wait(fs, timeout=30)
    assert got == [10, 11] and not pending
    assert sorted(f.result() for f in cf.as_completed(fs, timeout=30)) == list(range(10, 16))
    t.join(30)


def test_a_round_of_plain_futures_where_light_ones_are_unknown(monkeypatch):
    # a Python whose Future has other fields: the round's futures are Future's own
    import seglog._runtime.future as future
    monkeypatch.setattr(future, "_STATES", None)
    rnd = FutureRound(1)
    fs = [rnd.new() for _ in range(4)]
    assert all(type(f) is cf.Future for f in fs)
    assert fs[2].cancel()
    assert rnd.start(fs) == [True, True, False, True]
    rnd.resolve(0, range(5, 7))
    assert [f.result(timeout=0) for f in fs[:2]] == [(1, 5), (1, 6)]
    assert not fs[3].done() and fs[3].running() and fs[2].cancelled()


def test_a_rounds_futures_are_freed_when_dropped_no_cycle():
    # the round refers to no future it has not been asked about: a dropped future is
    # freed at once, without the cycle collector (a busy producer makes millions)
    import gc
    import weakref
    gc.disable()
    try:
        rnd = FutureRound()
        fs = [rnd.new() for _ in range(100)]
        rnd.start(fs)
        rnd.resolve(0, range(100))
        keep = fs[7]
        refs = [weakref.ref(f) for f in fs]
        del fs
        assert [r() is not None for r in refs].count(True) == 1
        assert keep.result() == 7
    finally:
        gc.enable()


def test_threads_read_wait_and_resolve_a_round_at_once():
    # readers (result, done, callbacks, wait) on every future, from several threads,
    # while the round starts and resolves its spans in a random order: each future
    # ends with its own offset, once; every wait has a deadline
    import random as _random
    seed = _random.randrange(1 << 30)
    print(f"seed={seed}")
    rng = _random.Random(seed)
    n = 2000
    rnd = FutureRound()
    fs = [rnd.new() for _ in range(n)]
    cuts = sorted(rng.sample(range(1, n), 20))
    spans = list(zip([0] + cuts, cuts + [n]))
    rng.shuffle(spans)
    calls: list[tuple[int, int]] = []
    lock = threading.Lock()

    def reader(k: int) -> None:
        r = _random.Random(seed + k)
        for i in r.sample(range(n), 300):
            f = fs[i]
            how = r.randrange(4)
            if how == 0:
                assert f.result(timeout=30) == 1000 + i
            elif how == 1:
                f.done()
            elif how == 2:
                f.add_done_callback(lambda g, i=i: (lock.acquire(), calls.append((i, g.result())),
                                                   lock.release()))
            else:
                cf.wait([f], timeout=30)
                assert f.result(timeout=0) == 1000 + i
    readers = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
    for t in readers:
        t.start()
    rnd.start(fs)
    for a, b in spans:
        rnd.resolve(a, range(1000 + a, 1000 + b))
    for t in readers:
        t.join(60)
        assert not t.is_alive()
    assert [f.result(timeout=0) for f in fs] == list(range(1000, 1000 + n))
    assert all(r == 1000 + i for i, r in calls)

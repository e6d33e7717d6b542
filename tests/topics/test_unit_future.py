"""The producer's futures behave as ``concurrent.futures.Future`` for every user:
waiting, timeouts, callbacks, cancellation, ``wait``/``as_completed`` and asyncio."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading

import pytest

from seglog._runtime.future import LightFuture, new_future


def test_is_a_future_and_light():
    f = new_future()
    assert isinstance(f, cf.Future) and isinstance(f, LightFuture)
    assert "_condition" not in vars(f)      # nothing built until someone looks
    assert f.set_running_or_notify_cancel()
    f.set_result(7)
    assert "_condition" not in vars(f)
    assert f.done() and f.result() == 7 and f.exception() is None
    assert "_condition" not in vars(f)      # a finished future is read without one
    g = new_future()
    g.set_exception(KeyError("k"))
    with pytest.raises(KeyError):
        g.result(timeout=0)
    assert isinstance(g.exception(), KeyError) and g.done() and "_condition" not in vars(g)


def test_result_waits_for_another_thread_and_times_out():
    f = new_future()
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
    f = new_future()
    seen = []
    f.add_done_callback(lambda g: seen.append(("before", g.exception())))
    err = ValueError("bad")
    f.set_exception(err)
    f.add_done_callback(lambda g: seen.append(("after", g.exception())))
    assert seen == [("before", err), ("after", err)]
    with pytest.raises(ValueError):
        f.result()


def test_cancel_before_running_and_not_after():
    f = new_future()
    assert f.cancel() and f.cancelled()
    assert not f.set_running_or_notify_cancel()
    with pytest.raises(cf.CancelledError):
        f.result()
    g = new_future()
    assert g.set_running_or_notify_cancel()
    assert not g.cancel()
    with pytest.raises(cf.InvalidStateError):
        h = new_future()
        h.set_result(1)
        h.set_result(2)


def test_wait_as_completed_and_asyncio():
    fs = [new_future() for _ in range(5)]

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
        g = new_future()
        threading.Timer(0.01, lambda: (g.set_running_or_notify_cancel(), g.set_result(42))).start()
        return await asyncio.wait_for(asyncio.wrap_future(g), 10)
    assert asyncio.run(main()) == 42


def test_start_all_and_finish_all_respect_what_users_did():
    from seglog._runtime.future import finish_all, start_all
    fs = [new_future() for _ in range(6)]
    assert fs[1].cancel()
    fs[2].done()                        # looked at: its condition exists
    seen = []
    fs[3].add_done_callback(lambda f: seen.append(f.result()))
    plain: cf.Future = cf.Future()      # a plain Future takes Future's own way
    keep = start_all(fs + [plain])
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

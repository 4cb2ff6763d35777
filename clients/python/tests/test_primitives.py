"""RWLock and Semaphore (shared holds, issue 11), MultiLock (DLOCK.MACQUIRE,
issue 12) and Latch (DLOCK.LATCH/COUNTDOWN/AWAIT, issue 12), threaded and
asyncio. Each test is skipped, saying why, on a server without its command."""

from __future__ import annotations

import asyncio
import random
import threading

import pytest
import redis.asyncio

import dlock
import dlock.asyncio
from conftest import info, require, require_shared, wait_until


def holders(r, key):
    """{owner: (exclusive holds, shared holds)} from DLOCK.INFO's holders."""
    state = info(r, key)
    if state is None:
        return {}
    return {bytes(entry[0]): (int(entry[1]), int(entry[2])) for entry in state["holders"]}


def in_thread(target):
    result = {}

    def run():
        try:
            result["value"] = target()
        except BaseException as error:  # handed to the test
            result["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


# -- RWLock ---------------------------------------------------------------


def test_readers_share_and_a_writer_excludes_them(server, r, key):
    require_shared(server)
    rw1, rw2, rw3 = (dlock.RWLock(r, key, timeout=10) for _ in range(3))
    assert rw1.read_lock().acquire(blocking=False)
    assert rw2.read_lock().acquire(blocking=False)
    assert info(r, key)["shared"] == 2
    assert rw1.read_lock().owned() and rw1.read_lock().locked()
    assert isinstance(rw1.read_lock().fence, int)
    assert not rw3.write_lock().acquire(blocking=False)
    rw1.read_lock().release()
    rw2.read_lock().release()
    assert rw3.write_lock().acquire(blocking=False)
    assert not rw1.read_lock().acquire(blocking=False)
    rw3.write_lock().release()
    assert info(r, key) is None
    with rw3 as writer:  # the RWLock itself: the write lock
        assert writer is rw3.write_lock() and info(r, key)["owner"] == writer.local.token
    assert info(r, key) is None


def test_a_waiting_writer_is_not_starved_by_new_readers(server, r, key):
    require_shared(server)
    reader, writer, late = (dlock.RWLock(r, key, timeout=10) for _ in range(3))
    assert reader.read_lock().acquire()
    thread, result = in_thread(lambda: writer.write_lock().acquire(blocking_timeout=20))
    wait_until(lambda: info(r, key)["waiting"] == 1, what="the writer in the queue")
    assert not late.read_lock().acquire(blocking=False)  # behind the writer
    reader.read_lock().release()
    thread.join(20)
    assert result["value"] is True
    assert info(r, key)["owner"] is not None


def test_downgrade_and_upgrade(server, r, key):
    require_shared(server)
    rw = dlock.RWLock(r, key, timeout=10)
    other = dlock.RWLock(r, key, timeout=10)
    with rw.write_lock():
        with rw.read_lock():  # a writer may read
            pass
        assert rw.read_lock().acquire()
    # Downgraded: still a reader, and other readers come in.
    owner = rw.read_lock().local.token
    assert holders(r, key)[owner] == (0, 1)
    assert other.read_lock().acquire(blocking=False)
    other.read_lock().release()
    # Upgrade as the sole reader is granted at once.
    assert rw.write_lock().acquire(blocking=False)
    assert holders(r, key)[owner] == (1, 1)
    rw.write_lock().release()
    rw.read_lock().release()
    assert info(r, key) is None


def test_second_upgrader_gets_deadlock_error(server, r, key):
    require_shared(server)
    first, second = dlock.RWLock(r, key, timeout=10, thread_local=False), dlock.RWLock(r, key, timeout=10)
    assert first.read_lock().acquire()
    assert second.read_lock().acquire()
    thread, result = in_thread(lambda: first.write_lock().acquire(blocking_timeout=20))
    wait_until(lambda: info(r, key)["waiting"] == 1, what="the first upgrader to wait")
    with pytest.raises(dlock.DeadlockError):
        second.write_lock().acquire(blocking_timeout=5)
    second.read_lock().release()
    thread.join(20)
    assert result["value"] is True  # the upgrade went through once alone


# -- Semaphore ------------------------------------------------------------


def test_semaphore_limits_holders_and_hands_off_in_order(server, r, key):
    require_shared(server)
    permits = [dlock.Semaphore(r, key, 2, timeout=10, thread_local=False) for _ in range(4)]
    assert permits[0].acquire() and permits[1].acquire()
    assert permits[0].limit == 2
    assert not permits[2].acquire(blocking=False)
    t2, r2 = in_thread(lambda: permits[2].acquire(blocking_timeout=20))
    wait_until(lambda: info(r, key)["waiting"] == 1, what="the third permit to wait")
    t3, r3 = in_thread(lambda: permits[3].acquire(blocking_timeout=20))
    wait_until(lambda: info(r, key)["waiting"] == 2, what="the fourth permit to wait")
    permits[0].release()
    t2.join(20)
    assert r2["value"] is True and t3.is_alive()
    permits[1].release()
    t3.join(20)
    assert r3["value"] is True
    assert info(r, key)["shared"] == 2
    permits[2].release()
    permits[3].release()


def test_semaphore_permit_of_a_crashed_holder_is_freed(server, r, key):
    require_shared(server)
    crashed = server.client()
    permit = dlock.Semaphore(crashed, key, 1, timeout=60, session=True)
    assert permit.acquire()
    waiter = dlock.Semaphore(r, key, 1, timeout=10)
    thread, result = in_thread(lambda: waiter.acquire(blocking_timeout=20))
    wait_until(lambda: info(r, key)["waiting"] == 1, what="the waiter")
    crashed.connection_pool.disconnect()  # the holder's process dies
    thread.join(20)
    assert result["value"] is True


def test_semaphore_permit_is_renewed(server, r, key):
    require_shared(server)
    permit = dlock.Semaphore(r, key, 3, watchdog_timeout=0.3)
    assert permit.acquire()
    assert not permit.lost.wait(1.5)
    assert holders(r, key)[permit.local.token] == (0, 1)
    permit.release()


# -- MultiLock ------------------------------------------------------------


def test_multilock_is_all_or_nothing(server, r, key):
    require(server, "dlock.macquire")
    a, b, c = f"{key}:a", f"{key}:b", f"{key}:c"
    blocker = dlock.Lock(r, b, timeout=10)
    assert blocker.acquire()
    multi = dlock.MultiLock(r, [a, b, c], timeout=10)
    assert not multi.acquire(blocking=False)
    assert info(r, a) is None and info(r, c) is None
    thread, result = in_thread(lambda: multi.acquire(blocking_timeout=20))
    wait_until(lambda: info(r, b)["waiting"] == 1, what="the multi-key waiter")
    blocker.release()
    thread.join(20)
    assert result["value"] is True
    assert all(info(r, k)["owner"] is not None for k in (a, b, c))


def test_multilock_holds_release_and_renew_every_key(server, r, key):
    require(server, "dlock.macquire")
    names = [f"{key}:{i}" for i in range(3)]
    with dlock.MultiLock(r, names, watchdog_timeout=0.3) as multi:
        fences = multi.fence
        assert len(fences) == 3 and fences == [info(r, k)["token"] for k in names]
        assert multi.owned() and multi.locked()
        assert not multi.lost.wait(1.5)
        assert all(info(r, k)["owner"] == multi.local.token for k in names)
    assert all(info(r, k) is None for k in names)


def test_overlapping_multilocks_in_any_order_all_finish(server, r, key):
    require(server, "dlock.macquire")
    names = [f"{key}:{i}" for i in range(6)]
    done = []

    def worker(seed):
        rng = random.Random(seed)
        for _ in range(8):
            chosen = rng.sample(names, 3)
            multi = dlock.MultiLock(r, chosen, timeout=5)
            assert multi.acquire(blocking_timeout=20)
            multi.release()
        done.append(seed)

    threads = [threading.Thread(target=worker, args=(seed,), daemon=True) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(done) == list(range(6))


# -- Latch ----------------------------------------------------------------


def test_latch_counts_down_and_wakes_every_waiter(server, r, key):
    require(server, "dlock.latch")
    latch = dlock.Latch(r, key)
    assert latch.wait(0.1) is True  # no latch: open
    assert latch.try_set_count(3, timeout=60)
    assert not latch.try_set_count(10, timeout=60)
    assert latch.count() == 3
    waiters = [in_thread(lambda: dlock.Latch(r, key).wait(20)) for _ in range(3)]
    wait_until(lambda: info(r, key)["waiting"] == 3, what="three waiters")
    assert latch.count_down() == 2
    with latch:  # counts down on exit
        pass
    assert latch.count() == 1
    assert latch.count_down(5) == 0
    for thread, result in waiters:
        thread.join(20)
        assert result["value"] is True
    assert latch.count() is None and r.exists(key) == 0


def test_latch_wait_times_out_or_breaks(server, r, key):
    require(server, "dlock.latch")
    latch = dlock.Latch(r, key)
    assert latch.try_set_count(1, timeout=60)
    assert latch.wait(0.1) is False
    thread, result = in_thread(lambda: latch.wait(20))
    wait_until(lambda: info(r, key)["waiting"] == 1, what="the waiter")
    r.delete(key)
    thread.join(20)
    assert isinstance(result.get("error"), dlock.LatchBrokenError)


# -- asyncio --------------------------------------------------------------


def arun(server, body):
    async def main():
        client = redis.asyncio.Redis(port=server.port)
        try:
            return await body(client)
        finally:
            await client.aclose() if hasattr(client, "aclose") else await client.close()

    return asyncio.run(main())


def test_asyncio_rwlock_and_semaphore(server, r, key):
    require_shared(server)

    async def body(client):
        rw1, rw2 = dlock.asyncio.RWLock(client, key, timeout=10), dlock.asyncio.RWLock(client, key, timeout=10)
        async with rw1.read_lock():
            assert await rw2.read_lock().acquire(blocking=False)
            assert not await dlock.asyncio.RWLock(client, key, timeout=10).write_lock().acquire(blocking=False)
            await rw2.read_lock().release()
        sem = f"{key}:sem"
        one, two = (
            dlock.asyncio.Semaphore(client, sem, 1, timeout=10),
            dlock.asyncio.Semaphore(client, sem, 1, timeout=10),
        )
        assert await one.acquire()
        waiter = asyncio.ensure_future(two.acquire(blocking_timeout=20))
        while (await client.execute_command("DLOCK.INFO", sem)) is None or info(r, sem)["waiting"] != 1:
            await asyncio.sleep(0.002)
        await one.release()
        assert await waiter
        await two.release()

    arun(server, body)


def test_asyncio_multilock(server, r, key):
    require(server, "dlock.macquire")

    async def body(client):
        names = [f"{key}:a", f"{key}:b"]
        async with dlock.asyncio.MultiLock(client, names, timeout=5) as multi:
            assert len(multi.fence) == 2 and await multi.owned()
        assert not await multi.locked()

    arun(server, body)


def test_asyncio_latch(server, r, key):
    require(server, "dlock.latch")

    async def body(client):
        latch = dlock.asyncio.Latch(client, key)
        assert await latch.try_set_count(2, timeout=60)
        assert not await latch.try_set_count(5, timeout=60)
        waiters = [asyncio.ensure_future(dlock.asyncio.Latch(client, key).wait(20)) for _ in range(2)]
        while info(r, key)["waiting"] != 2:
            await asyncio.sleep(0.002)
        assert await latch.count_down() == 1
        assert await latch.count() == 1
        async with latch:
            pass
        assert await asyncio.gather(*waiters) == [True, True]
        assert await latch.count() is None
        assert await latch.wait(0.1) is True

    arun(server, body)

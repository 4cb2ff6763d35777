"""dlock.asyncio.Lock through ``redis.asyncio.Redis.lock(..., lock_class=...)``:
the redis-py asyncio Lock behaviours, the watchdog task, fencing tokens and
cancellation of a blocked wait."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio
from redis.exceptions import LockError, LockNotOwnedError

import dlock.asyncio
from conftest import info


def run(server, body):
    """Runs ``body(client)`` in a fresh event loop with its own client."""

    async def main():
        client = redis.asyncio.Redis(port=server.port)
        try:
            return await body(client)
        finally:
            await client.aclose() if hasattr(client, "aclose") else await client.close()

    return asyncio.run(main())


async def until(predicate, timeout=20.0, what="a condition"):
    end = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.002)


async def ainfo(client, key):
    from dlock._core import parse_info

    return parse_info(await client.execute_command("DLOCK.INFO", key))


def make(client, key, **options):
    lock = client.lock(key, lock_class=dlock.asyncio.Lock, **options)
    assert isinstance(lock, dlock.asyncio.Lock)
    return lock


def test_acquire_release_locked_owned(server, r, key):
    async def body(client):
        lock = make(client, key)
        other = make(client, key)
        assert not await lock.locked()
        assert await lock.acquire(blocking=False)
        assert await lock.locked() and await lock.owned()
        assert not await other.owned()
        assert not await other.acquire(blocking=False)
        assert (await ainfo(client, key))["owner"] == lock.local.token
        await lock.release()
        assert not await lock.locked()
        with pytest.raises(LockError):
            await lock.release()
        assert await other.acquire(blocking=False, token="abc")
        assert other.local.token == b"abc"
        await other.release()

    run(server, body)
    assert info(r, key) is None


def test_blocking_timeout_and_hand_off(server, key):
    async def body(client):
        holder = make(client, key)
        assert await holder.acquire()
        start = time.monotonic()
        assert not await make(client, key, blocking_timeout=0.2).acquire()
        assert time.monotonic() - start >= 0.18
        assert (await ainfo(client, key))["waiting"] == 0
        waiter = make(client, key, sleep=5)
        task = asyncio.ensure_future(waiter.acquire(blocking_timeout=20))

        async def queued():
            return (await ainfo(client, key))["waiting"] == 1

        await until(queued, what="the waiter in the queue")
        # The holder's commands are not stuck behind the blocked waiter.
        assert await holder.owned()
        released = time.monotonic()
        await holder.release()
        assert await task
        assert time.monotonic() - released < 2.5
        assert await waiter.owned()
        await waiter.release()

    run(server, body)


def test_context_manager_and_its_errors(server, key):
    async def body(client):
        async with make(client, key) as lock:
            assert await lock.owned()
        assert not await lock.locked()
        holder = make(client, key)
        assert await holder.acquire()
        with pytest.raises(LockError, match="Unable to acquire"):
            async with make(client, key, blocking_timeout=0.1):
                pass
        await holder.release()
        with pytest.raises(LockNotOwnedError):
            async with make(client, key):
                await client.delete(key)
        async with dlock.asyncio.Lock(client, key, raise_on_release_error=False):
            await client.delete(key)

    run(server, body)


def test_extend_and_reacquire(server, key):
    async def body(client):
        lock = make(client, key, timeout=10)
        with pytest.raises(LockError):
            await lock.extend(1)
        with pytest.raises(LockError):
            await lock.reacquire()
        assert await lock.acquire()
        assert await lock.extend(10)
        assert 16000 < (await ainfo(client, key))["pttl"] <= 20000
        assert await lock.extend(3, replace_ttl=True)
        assert (await ainfo(client, key))["pttl"] <= 3000
        assert await lock.reacquire()
        assert 8000 < (await ainfo(client, key))["pttl"] <= 10000
        await client.delete(key)
        with pytest.raises(LockNotOwnedError):
            await lock.reacquire()
        forever = make(client, key)
        assert await forever.acquire()
        with pytest.raises(LockError, match="no timeout"):
            await forever.extend(1)
        await forever.release()

    run(server, body)


def test_fencing_tokens_increase(server, key):
    async def body(client):
        fences = []
        lock = make(client, key)
        for _ in range(4):
            assert await lock.acquire()
            assert lock.fence == (await ainfo(client, key))["token"]
            fences.append(lock.fence)
            await lock.release()
            assert lock.fence is None
        assert fences == sorted(fences) and len(set(fences)) == 4

    run(server, body)


def test_watchdog_1s_lease_held_for_3s_and_del_sets_lost(server, key):
    async def body(client):
        # Three leases (a 300 ms one left the renewal task too little room
        # on a loaded machine).
        lock = dlock.asyncio.Lock(client, key, watchdog_timeout=1.0)
        assert await lock.acquire()
        fence = lock.fence
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(lock.lost.wait(), 3.0)
        state = await ainfo(client, key)
        assert state["owner"] == lock.local.token and state["token"] == fence
        await client.delete(key)
        await asyncio.wait_for(lock.lost.wait(), 5.0)
        with pytest.raises(dlock.LockLostError):  # every operation but release (R3.4)
            await lock.renew()
        with pytest.raises(LockNotOwnedError):  # the key was deleted: as redis-py (R3.4)
            await lock.release()
        with pytest.raises(LockError):  # released: the token is gone
            await lock.release()
        plain = dlock.asyncio.Lock(client, key, timeout=0.3)
        assert await plain.acquire()
        await asyncio.wait_for(plain.lost.wait(), 5.0)  # nobody renews it

    run(server, body)


def test_cancelled_wait_leaves_no_waiter(server, key):
    async def body(client):
        holder = make(client, key)
        assert await holder.acquire()
        waiter = make(client, key)
        task = asyncio.ensure_future(waiter.acquire(blocking_timeout=60))

        async def queued():
            return (await ainfo(client, key))["waiting"] == 1

        await until(queued, what="the waiter in the queue")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

        # The clean-up runs in the background (R4.7): the waiter leaves soon.
        async def left():
            return (await ainfo(client, key))["waiting"] == 0

        await until(left, what="the waiter to leave")
        assert (await ainfo(client, key))["owner"] == holder.local.token
        await holder.release()
        assert await ainfo(client, key) is None
        # asyncio's own timeouts cancel the same way.
        assert await holder.acquire()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(waiter.acquire(), 0.3)
        await until(left, what="the waiter to leave")
        await holder.release()
        assert await ainfo(client, key) is None

    run(server, body)


def test_cancellation_racing_a_grant_gives_it_back(server, key):
    async def body(client):
        for attempt in range(5):
            name = f"{key}:{attempt}"
            holder = make(client, name)
            assert await holder.acquire()
            waiter = make(client, name)
            task = asyncio.ensure_future(waiter.acquire(blocking_timeout=60))

            async def queued(name=name):
                return (await ainfo(client, name))["waiting"] == 1

            await until(queued, what="the waiter in the queue")
            await holder.release()  # hands the lock to the waiter...
            task.cancel()  # ...which is cancelled at the same moment
            try:
                granted = await task
            except asyncio.CancelledError:
                granted = False

            async def empty(name=name):
                return await ainfo(client, name) is None

            if granted:
                await waiter.release()
            await until(empty, what="no hold and no waiter left")

    run(server, body)


def test_a_fair_poller_keeps_its_place(server, key):
    """R8, as dlock.Lock: one owner for the tries of one fair lock until
    granted."""

    async def body(client):
        holder = make(client, key)
        assert await holder.acquire()
        poller = dlock.asyncio.Lock(client, key, fair=True)
        assert not await poller.acquire(blocking=False)
        assert not await poller.acquire(blocking=False)
        assert len((await ainfo(client, key))["queue"]) == 1
        await holder.release()
        assert not await make(client, key).acquire(blocking=False)
        assert await poller.acquire(blocking=False)
        first = poller.local.token
        await poller.release()
        assert await ainfo(client, key) is None
        assert await poller.acquire(blocking=False) and poller.local.token != first
        await poller.release()

    run(server, body)


def test_tasks_contending_for_one_lock_exclude_each_other(server, key):
    async def body(client):
        fences = []
        inside = []

        async def worker():
            lock = make(client, key, timeout=10, blocking_timeout=30)
            for _ in range(10):
                async with lock:
                    inside.append(1)
                    assert len(inside) == 1
                    fences.append(lock.fence)
                    await asyncio.sleep(0)
                    inside.pop()

        await asyncio.gather(*(worker() for _ in range(6)))
        assert len(fences) == 60 and fences == sorted(fences) and len(set(fences)) == 60
        assert await ainfo(client, key) is None

    run(server, body)

"""Leader election (``Election``: campaign, leader, observe, resign) and
weighted semaphore permits (``weight=``), threaded and asyncio, against the
real servers. The parts that need ``DLOCK.WATCH`` or ``WEIGHT`` skip, saying
why, on a server without them."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest
import redis
import redis.asyncio

import dlock
import dlock.asyncio
from conftest import info, require, wait_until


def require_weights(server) -> None:
    client = server.client()
    probe = f"probe:{uuid.uuid4().hex}"
    try:
        client.execute_command("DLOCK.ACQUIRE", probe, "probe", 1000, "SHARED", "LIMIT", 2, "WEIGHT", 2)
    except redis.ResponseError as error:
        pytest.skip(f"DLOCK.ACQUIRE ... WEIGHT is not on this server yet ({error})")
    client.delete(probe)


def blocked_clients(r) -> int:
    return int(r.info("clients")["blocked_clients"])


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


def waiting(r, key) -> int:
    state = info(r, key)
    return int(state["waiting"]) if state else 0


# -- the owner string --------------------------------------------------------


def test_owner_string_carries_the_value_and_a_unique_id():
    owner = dlock.election_owner("10.0.0.7:8080")
    value, _, ident = owner.rpartition(b"#")
    assert value == b"10.0.0.7:8080"
    assert len(ident) == 32 and all(c in b"0123456789abcdef" for c in ident)
    assert dlock.election_owner("x") != dlock.election_owner("x")
    assert dlock.election_value(b"a#b#" + ident) == b"a#b"
    assert dlock.election_value(b"plain") == b"plain"
    with pytest.raises(ValueError):
        dlock.election_owner("")
    with pytest.raises(ValueError):
        dlock.election_owner("x" * 480)
    assert len(dlock.election_owner("x" * 479)) == 512


# -- threaded ----------------------------------------------------------------


def test_one_candidate_leads_the_other_takes_over_on_resign(r, key):
    election = dlock.Election(r, key)
    assert election.leader() is None
    first = election.campaign("host-a")
    assert first is not None and first.is_leader()
    assert first.value == b"host-a" and first.owner.startswith(b"host-a#")
    state = info(r, key)
    assert bytes(state["owner"]) == first.owner
    assert int(state["token"]) == first.term
    leader = election.leader()
    assert (leader.value, leader.owner, leader.term) == (b"host-a", first.owner, first.term)
    assert leader.text == "host-a" and leader.pttl_ms > 0

    # The same value campaigns under its own owner: it queues.
    assert dlock.Election(r, key).campaign("host-a", timeout=0) is None
    thread, result = in_thread(lambda: dlock.Election(r, key).campaign("host-b", timeout=20))
    wait_until(lambda: waiting(r, key) == 1, what="host-b queued")
    assert thread.is_alive()
    first.resign()
    thread.join(20)
    second = result["value"]
    assert second.term > first.term and second.value == b"host-b"
    assert election.leader().owner == second.owner
    with second:
        assert second.is_leader()
    assert not second.is_leader()
    assert election.leader() is None, "none between terms"
    first.resign()  # twice: no error


def test_observer_sees_each_leader_and_none_between_terms(server, r, key):
    require(server, "DLOCK.WATCH")
    election = dlock.Election(r, key)
    follower = dlock.Election(server.client(), key)
    with follower.observe() as changes:
        assert next(changes) is None, "first: who leads now (nobody)"
        a = election.campaign("host-a")
        seen = next(changes)
        assert (seen.value, seen.term, seen.owner) == (b"host-a", a.term, a.owner)
        thread, result = in_thread(lambda: election.campaign("host-b", timeout=20))
        wait_until(lambda: waiting(r, key) == 1, what="host-b queued")
        a.resign()
        thread.join(20)
        b = result["value"]
        seen = next(changes)
        assert (seen.value, seen.term) == (b"host-b", b.term)
        b.resign()
        assert next(changes) is None, "the end of the term"
        # Terms that pass while nobody reads: the next item is the newest.
        election.campaign("host-c").resign()
        d = election.campaign("host-d")
        seen = next(changes)
        assert (seen.value, seen.term) == (b"host-d", d.term)
        d.resign()


def test_close_unblocks_a_waiting_observer(server, r, key):
    require(server, "DLOCK.WATCH")
    election = dlock.Election(r, key, watch_timeout=60)
    leadership = election.campaign("host-a")
    observer = election.observe()
    assert next(observer).term == leadership.term
    thread, result = in_thread(lambda: list(observer))
    wait_until(lambda: blocked_clients(r) == 1, what="the observer waits in DLOCK.WATCH")
    started = time.monotonic()
    observer.close()
    thread.join(10)
    assert not thread.is_alive() and result == {"value": []}
    assert time.monotonic() - started < 10, "CLIENT UNBLOCK, not the 60 s wait"
    assert blocked_clients(r) == 0
    leadership.resign()


def test_close_as_the_next_wait_begins_ends_it(server, r, key):
    """close() right after an item, while the iterating thread is starting
    its next DLOCK.WATCH (before the wait's CLIENT ID is known), ends that
    wait at once, not after watch_timeout."""
    require(server, "DLOCK.WATCH")
    for round_ in range(20):
        observer = dlock.Election(r, f"{key}:{round_}", watch_timeout=60).observe()
        first = threading.Event()

        def iterate(observer=observer, first=first):
            for _ in observer:
                first.set()

        thread, _result = in_thread(iterate)
        assert first.wait(10)
        observer.close()
        thread.join(5)
        assert not thread.is_alive(), f"round {round_}: the wait outlived close()"
    wait_until(lambda: blocked_clients(r) == 0, what="no wait left")

    async def main():
        client = redis.asyncio.Redis(port=server.port)
        try:
            for round_ in range(20):
                observer = dlock.asyncio.Election(client, f"{key}:a{round_}", watch_timeout=60).observe()
                assert await observer.__anext__() is None
                task = asyncio.ensure_future(observer.__anext__())
                await asyncio.sleep(0)  # the next wait begins: its CLIENT ID not read yet
                await observer.aclose()
                with pytest.raises(StopAsyncIteration):
                    await asyncio.wait_for(task, 5)
        finally:
            await client.aclose() if hasattr(client, "aclose") else await client.close()

    asyncio.run(main())
    wait_until(lambda: blocked_clients(r) == 0, what="no wait left")


def test_a_deleted_key_ends_the_leadership(server, r, key):
    election = dlock.Election(r, key, watchdog_timeout=0.3)
    leadership = election.campaign("host-a")
    watch = server.has_command("DLOCK.WATCH")
    observer = election.observe()
    assert next(observer).term == leadership.term
    r.delete(key)
    assert leadership.lost.wait(10), "the watchdog finds the leadership gone"
    assert not leadership.is_leader()
    if watch:
        assert next(observer) is None
    leadership.resign()  # lost: no error
    observer.close()


# -- asyncio -----------------------------------------------------------------


def test_asyncio_election(server, key):
    async def main():
        r = redis.asyncio.Redis(port=server.port)
        try:
            election = dlock.asyncio.Election(r, key)
            assert await election.leader() is None
            has_watch = server.has_command("DLOCK.WATCH")
            observer = election.observe()
            assert await observer.__anext__() is None
            a = await election.campaign("host-a")
            assert a.is_leader() and a.owner.startswith(b"host-a#")
            assert (await election.leader()).term == a.term
            if has_watch:
                seen = await asyncio.wait_for(observer.__anext__(), 10)
                assert (seen.value, seen.term) == (b"host-a", a.term)
            b_task = asyncio.ensure_future(election.campaign("host-b"))
            await _eventually(lambda: waiting(server.client(), key) == 1)
            # A campaign given up leaves nothing queued.
            assert await election.campaign("host-c", timeout=0.05) is None
            await a.resign()
            b = await asyncio.wait_for(b_task, 10)
            assert b.term > a.term
            if has_watch:
                seen = await asyncio.wait_for(observer.__anext__(), 10)
                assert (seen.value, seen.term) == (b"host-b", b.term)
                # A cancelled wait is ended on the server (CLIENT UNBLOCK).
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(observer.__anext__(), 0.2)
                await _eventually(lambda: blocked_clients(server.client()) == 0)
                async with b:
                    pass
                assert await asyncio.wait_for(observer.__anext__(), 10) is None
            else:
                await b.resign()
            assert await election.leader() is None
            assert info(server.client(), key) is None
        finally:
            await r.aclose() if hasattr(r, "aclose") else await r.close()

    asyncio.run(main())


async def _eventually(predicate, timeout=10.0):
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "condition not met in time"
        await asyncio.sleep(0.002)


# -- weights -----------------------------------------------------------------


def test_weight_arguments_are_checked_before_sending(r, key):
    with pytest.raises(ValueError):
        dlock.Semaphore(r, key, 4, weight=5)
    with pytest.raises(ValueError):
        dlock.Semaphore(r, key, 4, weight=0)
    with pytest.raises(ValueError):
        dlock.MultiLock(r, [key], shared=True, weight=2)
    with pytest.raises(ValueError):
        dlock.asyncio.Semaphore(r, key, 2, weight=3)
    assert dlock.Semaphore(r, key, 4).weight == 1


def test_weighted_permits_add_up_to_the_limit_in_fifo_order(server, r, key):
    require_weights(server)
    three = dlock.Semaphore(r, key, 4, weight=3, timeout=10)
    assert three.acquire(blocking=False) and three.weight == 3
    holders = info(r, key)["holders"]
    assert int(holders[0][5]) == 3, "WEIGHT 3 was sent"
    assert not dlock.Semaphore(r, key, 4, weight=2, timeout=10).acquire(blocking=False), "3 + 2 > 4"
    one = dlock.Semaphore(r, key, 4, timeout=10)
    assert one.acquire(blocking=False), "3 + 1 fits"
    one.release()

    heavy = dlock.Semaphore(r, key, 4, weight=4, timeout=10, thread_local=False)
    heavy_thread, heavy_result = in_thread(lambda: heavy.acquire(blocking_timeout=20))
    wait_until(lambda: waiting(r, key) == 1, what="the heavy request queued")
    light = dlock.Semaphore(r, key, 4, weight=1, timeout=10, thread_local=False)
    light_thread, light_result = in_thread(lambda: light.acquire(blocking_timeout=20))
    wait_until(lambda: waiting(r, key) == 2, what="the light request queued behind it")
    assert light_thread.is_alive(), "a light request does not pass the heavy head"
    three.release()
    heavy_thread.join(20)
    assert heavy_result == {"value": True}
    assert light_thread.is_alive() and waiting(r, key) == 1, "4 of 4 permits held"
    heavy.release()
    light_thread.join(20)
    assert light_result == {"value": True}
    light.release()
    assert info(r, key) is None


def test_asyncio_weighted_permits(server, key):
    require_weights(server)

    async def main():
        r = redis.asyncio.Redis(port=server.port)
        try:
            big = dlock.asyncio.Semaphore(r, key, 3, weight=2, timeout=10)
            assert await big.acquire(blocking=False)
            assert not await dlock.asyncio.Semaphore(r, key, 3, weight=2, timeout=10).acquire(blocking=False)
            small = dlock.asyncio.Semaphore(r, key, 3, timeout=10)
            assert await small.acquire(blocking=False)
            await small.release()
            await big.release()
        finally:
            await r.aclose() if hasattr(r, "aclose") else await r.close()

    asyncio.run(main())

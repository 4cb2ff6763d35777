"""A stalled server (CLIENT PAUSE, a stopped process) never holds a call of
either API past its bound (docs/clients.md R4.2, R4.6, R4.7, R5.3): a wait
ends by its wait plus the 2 s margin, a cancelled wait returns at once, a
renewal by hand ends by the hold's local deadline, and the clean-up runs in
the background, leaving no waiter and no hold once the server answers.

One pause serves every call, threaded and asyncio alike (a pause costs its
whole length: ``CLIENT UNPAUSE`` waits for it too)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ConstantBackoff
from redis.retry import Retry

import dlock
import dlock.asyncio
from conftest import Server, info, server_binary, server_kinds, wait_until
from dlock._sync import _pool_connection

#: R4.2: a wait's read timeout is its wait plus at most 2 s.
MARGIN = 2.0
#: What a loaded machine may add to a bound; the pause outlasts every bound
#: plus this, so a call that waited for the pause's end fails.
SLACK = 1.0
WAIT = 0.2
LEASE = 1.0
PAUSE_MS = 4500
DOWN_LEASE = 0.5


def _warm(r: redis.Redis, n: int) -> None:
    """n idle connections in the pool, connected before the pause (the
    threaded client connects with the library's own settings)."""
    conns = [_pool_connection(r.connection_pool) for _ in range(n)]
    for conn in conns:
        conn.connect()
    for conn in conns:
        r.connection_pool.release(conn)


def _timed(call):
    began = time.monotonic()
    try:
        value = call()
    except Exception as error:  # the outcome is judged by the caller
        value = error
    return value, time.monotonic() - began


async def _atimed(work):
    began = time.monotonic()
    try:
        value = await work
    except Exception as error:
        value = error
    return value, time.monotonic() - began


def test_a_paused_server_holds_no_call_past_its_bound(server):
    if server.kind != server_kinds()[0]:
        pytest.skip("the bounds are the client's own: one server suffices (the stall scenarios run on every one)")
    base = f"stall:{uuid.uuid4().hex[:8]}"
    held, free, afree = f"{base}:held", f"{base}:free", f"{base}:afree"
    r = server.client()
    _warm(r, 4)
    holder = dlock.Lock(r, held, timeout=60)
    assert holder.acquire(blocking=False)
    short = dlock.Lock(r, f"{base}:short", timeout=LEASE, thread_local=False)
    assert short.acquire(blocking=False)
    sync_waiter = dlock.Lock(r, held, timeout=60)
    sync_free = dlock.Lock(r, free, timeout=60)
    # A client whose pool is empty: the wait's connection must be opened,
    # and the paused server answers no handshake.
    sync_fresh = dlock.Lock(server.client(), held, timeout=60)

    async def main():
        ar = redis.asyncio.Redis(port=server.port)
        try:
            await _warm_async(ar, 5)
            ashort = dlock.asyncio.Lock(ar, f"{base}:ashort", timeout=LEASE)
            assert await ashort.acquire(blocking=False)
            loop = asyncio.get_running_loop()
            admin = server.client()
            admin.ping()
            admin.execute_command("CLIENT", "PAUSE", PAUSE_MS, "ALL")
            paused_at = time.monotonic()

            async def cancelled():
                task = asyncio.ensure_future(dlock.asyncio.Lock(ar, held, timeout=60).acquire(blocking_timeout=30))
                await asyncio.sleep(0.1)
                began = time.monotonic()
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError as error:
                    return error, time.monotonic() - began
                return "not cancelled", time.monotonic() - began

            results = await asyncio.gather(
                loop.run_in_executor(None, _timed, lambda: sync_waiter.acquire(blocking_timeout=WAIT)),
                loop.run_in_executor(None, _timed, lambda: sync_free.acquire(blocking_timeout=WAIT)),
                loop.run_in_executor(None, _timed, short.renew),
                loop.run_in_executor(None, _timed, lambda: sync_fresh.acquire(blocking_timeout=WAIT)),
                _atimed(dlock.asyncio.Lock(ar, held, timeout=60).acquire(blocking_timeout=WAIT)),
                _atimed(dlock.asyncio.Lock(ar, afree, timeout=60).acquire(blocking_timeout=WAIT)),
                _atimed(ashort.renew()),
                _atimed(dlock.asyncio.Latch(ar, f"{base}:latch").wait(WAIT)),
                cancelled(),
            )
            assert time.monotonic() - paused_at < PAUSE_MS / 1000, "the pause ended before the calls: no test"
            return results
        finally:
            await ar.aclose() if hasattr(ar, "aclose") else await ar.close()

    (
        (s_wait, s_wait_took),
        (s_free, s_free_took),
        (s_renew, s_renew_took),
        (s_fresh, s_fresh_took),
        (a_wait, a_wait_took),
        (a_free, a_free_took),
        (a_renew, a_renew_took),
        (a_latch, a_latch_took),
        (a_cancel, a_cancel_took),
    ) = asyncio.run(main())
    # A wait ends by its wait plus the margin (R4.2, R4.6), its clean-up in
    # the background (R4.7): with a margin of 5 s, or a clean-up that waits
    # for the server, these return with the pause's end.
    for outcome, took in (
        (s_wait, s_wait_took),
        (s_free, s_free_took),
        (s_fresh, s_fresh_took),
        (a_wait, a_wait_took),
        (a_free, a_free_took),
    ):
        assert isinstance(outcome, redis.exceptions.TimeoutError), outcome
        assert took < WAIT + MARGIN + SLACK, took
    assert isinstance(a_latch, redis.exceptions.TimeoutError) and a_latch_took < WAIT + MARGIN + SLACK
    # A cancelled wait returns at once: its clean-up runs in the background.
    assert isinstance(a_cancel, asyncio.CancelledError) and a_cancel_took < SLACK, (a_cancel, a_cancel_took)
    # A renewal by hand ends by the hold's local deadline (R4.6): lost then.
    for outcome, took in ((s_renew, s_renew_took), (a_renew, a_renew_took)):
        assert isinstance(outcome, (dlock.LockLostError, redis.exceptions.TimeoutError)), outcome
        assert took < LEASE + SLACK, took
    assert isinstance(s_renew, dlock.LockLostError) and short.lost.is_set()
    # Once the server answers: no waiter, no hold of an owner never returned
    # (R5.3 applies to a read timeout), the holder still holds.
    observer = server.client(socket_timeout=30)
    for key in (free, afree):
        wait_until(lambda key=key: info(observer, key) is None, timeout=PAUSE_MS / 1000 + 10, what=f"{key} left free")
    wait_until(lambda: info(observer, held)["waiting"] == 0, what="no waiter left")
    assert info(observer, held)["owner"] == holder.local.token
    holder.release()
    # The next call is not delayed.
    began = time.monotonic()
    assert sync_free.acquire(blocking=False)
    sync_free.release()
    assert time.monotonic() - began < SLACK


async def _warm_async(ar, n: int) -> None:
    pool = ar.connection_pool
    conns = [await dlock.asyncio._pool_connection(pool) for _ in range(n)]
    for conn in conns:
        await pool.release(conn)


def test_with_the_server_down_renew_and_release_end_in_time():
    """A stopped server: a renewal by hand rejects by the hold's deadline
    (never as if renewed) and a release ends within the connect bound,
    whatever the library's connect retries (here 1 s apart, 5 times), with
    both APIs at once (the threaded one opens its connection in a thread of
    its own, the caller waiting at most 2 s)."""
    kind = server_kinds()[0]  # one server suffices, as above
    srv = Server(server_binary(kind), kind)
    try:

        async def main():
            loop = asyncio.get_running_loop()
            ar = redis.asyncio.Redis(port=srv.port, retry=AsyncRetry(ConstantBackoff(1.0), 5))
            try:
                alock = dlock.asyncio.Lock(ar, "down", timeout=DOWN_LEASE)
                assert await alock.acquire(blocking=False)
                sr = redis.Redis(port=srv.port, retry=Retry(ConstantBackoff(1.0), 5))
                slock = dlock.Lock(sr, "sdown", timeout=DOWN_LEASE, thread_local=False)
                assert slock.acquire(blocking=False)
                sr.connection_pool.disconnect()  # the next call opens a connection
                srv.process.kill()
                srv.process.wait()
                renewals = await asyncio.gather(_atimed(alock.renew()), loop.run_in_executor(None, _timed, slock.renew))
                for (renewed, took), lock in zip(renewals, (alock, slock)):
                    assert isinstance(renewed, (dlock.LockLostError, redis.exceptions.RedisError)), renewed
                    assert took < DOWN_LEASE + SLACK, took
                    assert lock.lost.is_set() or isinstance(renewed, redis.exceptions.ConnectionError)
                releases = await asyncio.gather(
                    _atimed(alock.release()), loop.run_in_executor(None, _timed, slock.release)
                )
                for released, took in releases:
                    assert isinstance(released, redis.exceptions.RedisError), released
                    assert took < MARGIN + SLACK, took
            finally:
                await ar.aclose() if hasattr(ar, "aclose") else await ar.close()

        asyncio.run(main())
    finally:
        srv.stop()

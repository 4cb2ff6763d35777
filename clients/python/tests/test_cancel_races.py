"""Every way a Python caller ends a wait, raced 50 times against the grant
(docs/clients.md R4.4): whichever wins, no waiter and no hold is left
behind once the clean-up (in the background, R4.7) is done. Both outcomes
happen over the 50 runs; each run uses a key of its own so that a clean-up
still running cannot hide the next run's leftovers."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import redis.asyncio

import dlock
import dlock.asyncio
from conftest import PATIENCE, info, wait_until

RUNS = 50
#: The wait the caller gives up on, in seconds: the holder releases around it.
WAIT = 0.02


async def _ainfo(client, key):
    from dlock._core import parse_info

    return parse_info(await client.execute_command("DLOCK.INFO", key))


async def _left_nothing(client, key):
    end = time.monotonic() + PATIENCE
    while (state := await _ainfo(client, key)) is not None:
        assert time.monotonic() < end, f"left behind on {key}: {state}"
        await asyncio.sleep(0.002)


def test_asyncio_task_cancel_and_timeouts_race_the_grant(server):
    base = f"race:{uuid.uuid4().hex[:8]}"

    async def main():
        client = redis.asyncio.Redis(port=server.port)
        outcomes = {"cancel": set(), "timeout": set()}
        try:
            for run in range(RUNS):
                for way in ("cancel", "timeout"):
                    key = f"{base}:{way}:{run}"
                    holder = dlock.asyncio.Lock(client, key, timeout=30)
                    assert await holder.acquire(blocking=False)
                    waiter = dlock.asyncio.Lock(client, key, timeout=30)
                    jitter = (run % 5) * 0.0005
                    if way == "cancel":
                        # Task cancellation: the release and the cancel at once.
                        task = asyncio.ensure_future(waiter.acquire(blocking_timeout=10))
                        while (await _ainfo(client, key))["waiting"] != 1:
                            await asyncio.sleep(0.001)
                        release = asyncio.ensure_future(holder.release())
                        await asyncio.sleep(jitter)
                        task.cancel()
                        try:
                            granted = await task
                        except asyncio.CancelledError:
                            granted = False
                        await release
                    else:
                        # asyncio's own deadline (wait_for; asyncio.timeout
                        # too where it exists) ending as the holder releases.
                        async def release_later(holder=holder, jitter=jitter):
                            await asyncio.sleep(WAIT - 0.002 + jitter)
                            await holder.release()

                        release = asyncio.ensure_future(release_later())
                        try:
                            if run % 2 and hasattr(asyncio, "timeout"):
                                async with asyncio.timeout(WAIT):
                                    granted = await waiter.acquire(blocking_timeout=10)
                            else:
                                granted = await asyncio.wait_for(waiter.acquire(blocking_timeout=10), WAIT)
                        except asyncio.TimeoutError:
                            granted = False
                        await release
                    if granted:
                        await waiter.release()  # the grant won: the caller gives it back
                    outcomes[way].add(bool(granted))
                    await _left_nothing(client, key)
            assert await _ainfo(client, base) is None
        finally:
            await client.aclose() if hasattr(client, "aclose") else await client.close()
        return outcomes

    outcomes = asyncio.run(main())
    # The cancel path must have been taken (a grant that always wins races nothing).
    assert False in outcomes["cancel"] and False in outcomes["timeout"], outcomes


def test_threaded_blocking_timeout_races_the_grant(server):
    r = server.client()
    base = f"race:{uuid.uuid4().hex[:8]}"
    outcomes = set()
    for run in range(RUNS):
        key = f"{base}:{run}"
        holder = dlock.Lock(r, key, timeout=30, thread_local=False)
        assert holder.acquire(blocking=False)
        waiter = dlock.Lock(r, key, timeout=30)
        # The server ends the wait by its timeout as the holder releases.
        timer = threading.Timer(WAIT - 0.004 + (run % 5) * 0.002, holder.release)
        timer.start()
        granted = waiter.acquire(blocking_timeout=WAIT)
        timer.join()
        if granted:
            waiter.release()
        outcomes.add(granted)
        wait_until(lambda key=key: info(r, key) is None, what=f"nothing left on {key}")
    assert False in outcomes, outcomes

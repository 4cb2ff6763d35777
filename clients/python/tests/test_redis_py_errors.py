"""The drop-in raises where redis-py raises (R3.4: the familiar API wins).

Each scenario runs twice on the same server, once with redis-py's own
``Lock`` and once with ``dlock.Lock`` (``redis.asyncio``'s and
``dlock.asyncio.Lock`` for the asyncio half), and records what each call
raised. The two records must be equal, and equal to what the scenario
expects: a release, extend or reacquire after the lease ran out, after the
key was deleted or while another owner holds the lock raises
``LockNotOwnedError``; one without a token, or an extend without a
timeout, raises ``LockError``."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Callable

import pytest
import redis
import redis.asyncio
import redis.asyncio.lock
import redis.lock
from redis.exceptions import LockError, LockNotOwnedError

import dlock
import dlock.asyncio
from conftest import PATIENCE

SYNC_CLASSES = [redis.lock.Lock, dlock.Lock]
#: ``raise_on_release_error`` is newer than redis-py 5.0.0, which the suite also runs.
QUIET_RELEASE = "raise_on_release_error" in inspect.signature(redis.Redis.lock).parameters
ASYNC_CLASSES = [redis.asyncio.lock.Lock, dlock.asyncio.Lock]

#: A lease short enough to run out during a test.
SHORT = 0.05


def outcome(error: BaseException | None) -> str:
    """What redis-py's user sees: the most precise of redis-py's classes."""
    if error is None:
        return "ok"
    if isinstance(error, LockNotOwnedError):
        return "LockNotOwnedError"
    if isinstance(error, LockError):
        return "LockError"
    return f"{type(error).__name__}: {error}"


def attempt(call: Callable[[], Any]) -> str:
    try:
        call()
    except Exception as error:  # noqa: BLE001 - recorded and compared
        return outcome(error)
    return "ok"


async def aattempt(call: Callable[[], Any]) -> str:
    try:
        await call()
    except Exception as error:  # noqa: BLE001 - recorded and compared
        return outcome(error)
    return "ok"


def wait_unlocked(lock: Any) -> None:
    end = time.monotonic() + PATIENCE
    while lock.locked():
        assert time.monotonic() < end, "the lease did not run out"
        time.sleep(0.005)


async def await_unlocked(lock: Any) -> None:
    end = time.monotonic() + PATIENCE
    while await lock.locked():
        assert time.monotonic() < end, "the lease did not run out"
        await asyncio.sleep(0.005)


# -- the scenarios (sync) ----------------------------------------------------


def lease_ran_out(r: redis.Redis, key: str, cls: type) -> list[str]:
    lock = r.lock(key, timeout=SHORT, lock_class=cls)
    assert lock.acquire(blocking=False)
    wait_unlocked(lock)
    return [
        attempt(lambda: lock.extend(1)),
        attempt(lock.reacquire),
        attempt(lock.release),
        attempt(lock.release),  # the token was dropped by the first one
    ]


def key_deleted(r: redis.Redis, key: str, cls: type) -> list[str]:
    lock = r.lock(key, timeout=10, lock_class=cls)
    assert lock.acquire(blocking=False)
    r.delete(key)
    first = [attempt(lambda: lock.extend(1, replace_ttl=True)), attempt(lock.reacquire)]
    return first + [attempt(lock.release), attempt(lock.release)]


def another_owner(r: redis.Redis, key: str, cls: type) -> list[str]:
    lock = r.lock(key, timeout=SHORT, lock_class=cls)
    assert lock.acquire(blocking=False)
    wait_unlocked(lock)
    other = r.lock(key, timeout=10, lock_class=cls)
    assert other.acquire(blocking=False)
    seen = [attempt(lambda: lock.extend(1)), attempt(lock.reacquire), attempt(lock.release)]
    assert other.owned(), "the failed release took the new owner's lock"
    return seen + [attempt(other.release)]


def unlocked(r: redis.Redis, key: str, cls: type) -> list[str]:
    lock = r.lock(key, timeout=10, lock_class=cls)
    seen = [attempt(lock.release), attempt(lambda: lock.extend(1)), attempt(lock.reacquire)]
    forever = r.lock(key, lock_class=cls)  # timeout=None
    assert forever.acquire(blocking=False)
    seen += [attempt(lambda: forever.extend(1)), attempt(forever.reacquire), attempt(forever.release)]
    return seen


def overran_in_with(r: redis.Redis, key: str, cls: type) -> list[str]:
    def loud() -> None:
        with r.lock(key, timeout=SHORT, lock_class=cls) as lock:
            wait_unlocked(lock)

    def quiet() -> None:
        with r.lock(key, timeout=SHORT, lock_class=cls, raise_on_release_error=False) as lock:
            wait_unlocked(lock)

    return [attempt(loud), attempt(quiet)]


SYNC_SCENARIOS = {
    lease_ran_out: ["LockNotOwnedError", "LockNotOwnedError", "LockNotOwnedError", "LockError"],
    key_deleted: ["LockNotOwnedError", "LockNotOwnedError", "LockNotOwnedError", "LockError"],
    another_owner: ["LockNotOwnedError", "LockNotOwnedError", "LockNotOwnedError", "ok"],
    unlocked: ["LockError", "LockError", "LockError", "LockError", "LockError", "ok"],
    overran_in_with: ["LockNotOwnedError", "ok"],
}


@pytest.mark.parametrize("scenario", list(SYNC_SCENARIOS), ids=lambda f: f.__name__)
def test_sync_drop_in_raises_where_redis_py_raises(r, key, scenario):
    if scenario is overran_in_with and not QUIET_RELEASE:
        pytest.skip(f"redis-py {redis.__version__}'s Redis.lock has no raise_on_release_error")
    seen = {cls.__module__: scenario(r, f"{key}:{cls.__module__}", cls) for cls in SYNC_CLASSES}
    assert seen["dlock._sync"] == seen["redis.lock"] == SYNC_SCENARIOS[scenario], seen


def test_sync_lost_then_release_raises_and_leaves_the_new_owner(r, key):
    """dlock's own view: the watchdog saw the key deleted (``lost`` set), a
    new owner took it, and the release still raises as redis-py's would."""
    lock = dlock.Lock(r, key, watchdog_timeout=0.3)
    assert lock.acquire()
    r.delete(key)
    assert lock.lost.wait(5.0) and lock.lost.reason.startswith("NOTOWNER")
    other = dlock.Lock(r, key, timeout=10)
    assert other.acquire(blocking=False)
    with pytest.raises(LockNotOwnedError):
        lock.release()
    assert other.owned()
    with pytest.raises(LockError) as again:
        lock.release()
    assert not isinstance(again.value, LockNotOwnedError)
    other.release()


# -- the same scenarios on redis.asyncio ------------------------------------


async def alease_ran_out(client: Any, key: str, cls: type) -> list[str]:
    lock = client.lock(key, timeout=SHORT, lock_class=cls)
    assert await lock.acquire(blocking=False)
    await await_unlocked(lock)
    return [
        await aattempt(lambda: lock.extend(1)),
        await aattempt(lock.reacquire),
        await aattempt(lock.release),
        await aattempt(lock.release),
    ]


async def akey_deleted(client: Any, key: str, cls: type) -> list[str]:
    lock = client.lock(key, timeout=10, lock_class=cls)
    assert await lock.acquire(blocking=False)
    await client.delete(key)
    return [
        await aattempt(lambda: lock.extend(1, replace_ttl=True)),
        await aattempt(lock.reacquire),
        await aattempt(lock.release),
        await aattempt(lock.release),
    ]


async def aanother_owner(client: Any, key: str, cls: type) -> list[str]:
    lock = client.lock(key, timeout=SHORT, lock_class=cls)
    assert await lock.acquire(blocking=False)
    await await_unlocked(lock)
    other = client.lock(key, timeout=10, lock_class=cls)
    assert await other.acquire(blocking=False)
    seen = [
        await aattempt(lambda: lock.extend(1)),
        await aattempt(lock.reacquire),
        await aattempt(lock.release),
    ]
    assert await other.owned(), "the failed release took the new owner's lock"
    return seen + [await aattempt(other.release)]


async def aunlocked(client: Any, key: str, cls: type) -> list[str]:
    lock = client.lock(key, timeout=10, lock_class=cls)
    seen = [
        await aattempt(lock.release),
        await aattempt(lambda: lock.extend(1)),
        await aattempt(lock.reacquire),
    ]
    forever = client.lock(key, lock_class=cls)
    assert await forever.acquire(blocking=False)
    seen += [
        await aattempt(lambda: forever.extend(1)),
        await aattempt(forever.reacquire),
        await aattempt(forever.release),
    ]
    return seen


async def aoverran_in_with(client: Any, key: str, cls: type) -> list[str]:
    async def loud() -> None:
        async with client.lock(key, timeout=SHORT, lock_class=cls) as lock:
            await await_unlocked(lock)

    async def quiet() -> None:
        async with client.lock(key, timeout=SHORT, lock_class=cls, raise_on_release_error=False) as lock:
            await await_unlocked(lock)

    return [await aattempt(loud), await aattempt(quiet)]


ASYNC_SCENARIOS = {
    alease_ran_out: SYNC_SCENARIOS[lease_ran_out],
    akey_deleted: SYNC_SCENARIOS[key_deleted],
    aanother_owner: SYNC_SCENARIOS[another_owner],
    aunlocked: SYNC_SCENARIOS[unlocked],
    aoverran_in_with: SYNC_SCENARIOS[overran_in_with],
}


@pytest.mark.parametrize("scenario", list(ASYNC_SCENARIOS), ids=lambda f: f.__name__)
def test_asyncio_drop_in_raises_where_redis_py_raises(server, key, scenario):
    if scenario is aoverran_in_with and not QUIET_RELEASE:
        pytest.skip(f"redis-py {redis.__version__}'s Redis.lock has no raise_on_release_error")

    async def main() -> dict:
        client = redis.asyncio.Redis(port=server.port)
        try:
            return {cls.__module__: await scenario(client, f"{key}:{cls.__module__}", cls) for cls in ASYNC_CLASSES}
        finally:
            await client.aclose() if hasattr(client, "aclose") else await client.close()

    seen = asyncio.run(main())
    assert seen["dlock.asyncio"] == seen["redis.asyncio.lock"] == ASYNC_SCENARIOS[scenario], seen


def test_asyncio_lost_then_release_raises(server, key):
    async def main() -> None:
        client = redis.asyncio.Redis(port=server.port)
        try:
            lock = dlock.asyncio.Lock(client, key, watchdog_timeout=0.3)
            assert await lock.acquire()
            await client.delete(key)
            await asyncio.wait_for(lock.lost.wait(), 5.0)
            other = dlock.asyncio.Lock(client, key, timeout=10)
            assert await other.acquire(blocking=False)
            with pytest.raises(LockNotOwnedError):
                await lock.release()
            assert await other.owned()
            await other.release()
        finally:
            await client.aclose() if hasattr(client, "aclose") else await client.close()

    asyncio.run(main())

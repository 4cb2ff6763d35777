"""The watchdog renews a lease for as long as the lock is held, and ``lost``
says when the hold is known to be gone."""

from __future__ import annotations

import threading
import time

import pytest
from redis.exceptions import LockNotOwnedError

import dlock
from conftest import info, wait_until


def watchdogs(key: str) -> list:
    return [t for t in threading.enumerate() if t.name == f"dlock-watchdog:{key!r}"]


@pytest.mark.parametrize(
    "options",
    [{"watchdog_timeout": 1.0}, {"timeout": 1.0, "auto_renewal": True}],
    ids=["no-timeout", "timeout-with-auto-renewal"],
)
def test_a_1s_lease_held_for_3s(r, key, options):
    lock = dlock.Lock(r, key, **options)
    assert lock.acquire()
    token = lock.fence
    # 3 s is three leases: without renewals the lock would have ended long
    # ago. (A 300 ms lease, renewed every 100 ms, left a watchdog thread
    # 0.19 s of scheduling delay: a loaded machine lost it now and then.)
    assert not lock.lost.wait(3.0), lock.lost.reason
    state = info(r, key)
    assert state["owner"] == lock.local.token and state["token"] == token
    assert 0 <= state["pttl"] <= 1000
    lock.release()
    assert info(r, key) is None
    wait_until(lambda: not watchdogs(key), what="the watchdog to stop")


def test_without_renewal_the_lease_ends_and_lost_says_so(r, key):
    lock = dlock.Lock(r, key, timeout=0.3)
    assert lock.acquire()
    assert not lock.lost.is_set()
    assert not watchdogs(key)
    assert lock.lost.wait(5.0)  # by the monotonic deadline, no thread needed
    assert "deadline" in lock.lost.reason
    wait_until(lambda: info(r, key) is None, what="the lease to end")
    with pytest.raises(dlock.LockLostError):
        lock.reacquire()
    with pytest.raises(LockNotOwnedError):  # the server kept nothing: as redis-py (R3.4)
        lock.release()


def test_redis_py_default_timeout_none_is_renewed(r, key):
    lock = r.lock(key, lock_class=dlock.Lock)
    assert lock.acquire()
    assert lock.auto_renewal and watchdogs(key)
    assert 25000 < info(r, key)["pttl"] <= 30000
    lock.release()


def test_del_sets_lost(r, key):
    lock = dlock.Lock(r, key, watchdog_timeout=0.3)
    assert lock.acquire()
    r.delete(key)
    start = time.monotonic()
    assert lock.lost.wait(5.0)
    assert time.monotonic() - start < 2.0  # the next renewal (every 100 ms) saw NOTOWNER
    assert lock.lost.reason.startswith("NOTOWNER")
    wait_until(lambda: not watchdogs(key), what="the watchdog to stop")
    with pytest.raises(dlock.LockLostError):
        lock.renew()
    with pytest.raises(LockNotOwnedError):  # the key was deleted: as redis-py (R3.4)
        lock.release()


def test_another_owner_after_del_is_not_renewed_by_the_old_watchdog(r, key):
    lock = dlock.Lock(r, key, watchdog_timeout=0.3)
    assert lock.acquire()
    r.delete(key)
    other = dlock.Lock(r, key, timeout=0.3)
    assert other.acquire()
    assert lock.lost.wait(5.0)
    assert other.lost.wait(5.0)  # nobody renews the other owner's lease
    wait_until(lambda: info(r, key) is None, what="the other lease to end")


def test_lost_when_renewals_cannot_reach_the_server(server, key):
    r = server.client()
    admin = server.client()
    lock = dlock.Lock(r, key, watchdog_timeout=0.3)
    assert lock.acquire()
    admin.execute_command("CLIENT", "PAUSE", 2000, "WRITE")  # RENEW is a write
    try:
        start = time.monotonic()
        assert lock.lost.wait(5.0)
        assert time.monotonic() - start < 1.5
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
    try:
        lock.release()
    except LockNotOwnedError:
        pass


def test_extend_moves_the_deadline_of_lost(r, key):
    lock = dlock.Lock(r, key, timeout=0.3)
    assert lock.acquire()
    assert lock.extend(5, replace_ttl=True)
    assert not lock.lost.wait(0.6)  # past the first lease
    lock.release()
    assert not lock.lost.is_set()


def test_renewed_lock_is_released_by_context_manager(r, key):
    with dlock.Lock(r, key, watchdog_timeout=0.3) as lock:
        assert not lock.lost.wait(0.5)
    assert info(r, key) is None
    assert not lock.lost.is_set()
    wait_until(lambda: not watchdogs(key), what="the watchdog to stop")


def test_a_released_lock_is_not_lost_after_its_lease(r, key):
    lock = dlock.Lock(r, key, timeout=0.1)
    assert lock.acquire()
    lock.release()
    assert not lock.lost.wait(0.3)  # past the lease: released, not lost

"""Every behaviour of redis-py's Lock, through ``r.lock(..., lock_class=dlock.Lock)``,
and what dlock adds to it (fencing, re-entry by token, server-side waits)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import redis
from redis.exceptions import LockError, LockNotOwnedError

import dlock
from conftest import PATIENCE, info, wait_until


def make(r: redis.Redis, key: str, **options: object) -> dlock.Lock:
    lock = r.lock(key, lock_class=dlock.Lock, **options)
    assert isinstance(lock, dlock.Lock)
    return lock


def test_lock_holds_the_key_in_the_server(r, key):
    lock = make(r, key)
    assert lock.acquire(blocking=False)
    state = info(r, key)
    assert state["owner"] == lock.local.token
    assert state["holds"] == 1
    lock.release()
    assert info(r, key) is None
    assert lock.local.token is None


def test_token_is_the_owner(r, key):
    lock = make(r, key)
    assert lock.acquire(blocking=False, token="abc")
    assert lock.local.token == b"abc"
    assert info(r, key)["owner"] == b"abc"
    assert lock.owned()
    lock.release()


def test_locked_and_owned(r, key):
    lock = make(r, key)
    other = make(r, key)
    assert not lock.locked() and not lock.owned()
    assert lock.acquire(blocking=False)
    assert lock.locked() and lock.owned()
    assert other.locked() and not other.owned()
    lock.release()
    assert not lock.locked() and not lock.owned()


def test_competing_locks(r, key):
    lock1 = make(r, key)
    lock2 = make(r, key)
    assert lock1.acquire(blocking=False)
    assert not lock2.acquire(blocking=False)
    lock1.release()
    assert lock2.acquire(blocking=False)
    assert not lock1.acquire(blocking=False)
    lock2.release()


@pytest.mark.parametrize("timeout", [10, 9.5])
def test_timeout_is_the_lease(r, key, timeout):
    lock = make(r, key, timeout=timeout)
    assert lock.acquire(blocking=False)
    assert 8000 < info(r, key)["pttl"] <= timeout * 1000
    lock.release()


def test_blocking_timeout_returns_false_and_leaves_no_waiter(r, key):
    holder = make(r, key)
    assert holder.acquire(blocking=False)
    lock = make(r, key, blocking_timeout=0.2)
    start = time.monotonic()
    assert not lock.acquire()
    assert time.monotonic() - start >= 0.18
    state = info(r, key)
    assert state["waiting"] == 0 and state["owner"] == holder.local.token
    start = time.monotonic()
    assert not lock.acquire(blocking_timeout=0.1)  # the argument wins
    assert time.monotonic() - start >= 0.08
    assert not lock.acquire(blocking_timeout=0)  # 0: one try, as redis-py
    holder.release()


def test_blocking_false_in_constructor(r, key):
    holder = make(r, key)
    assert holder.acquire()
    lock = make(r, key, blocking=False)
    start = time.monotonic()
    assert not lock.acquire()
    assert time.monotonic() - start < 2
    assert lock.acquire(blocking=True, blocking_timeout=0.05) is False
    holder.release()


def test_blocked_acquire_waits_in_the_queue_and_gets_the_hand_off(r, key):
    holder = make(r, key)
    assert holder.acquire()
    # sleep=5: redis-py would poll every 5 s; dlock waits in the server.
    waiter = make(r, key, timeout=5, sleep=5, blocking_timeout=20)
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("ok", waiter.acquire()))
    thread.start()
    wait_until(lambda: info(r, key)["waiting"] == 1, what="the waiter in the queue")
    released = time.monotonic()
    holder.release()
    thread.join(20)
    assert result["ok"] is True
    assert time.monotonic() - released < 2.5
    # The hold belongs to the waiter's thread (thread-local token).
    assert info(r, key)["owner"] != holder.local.token
    assert not waiter.owned()  # this thread never acquired it


def test_context_manager(r, key):
    with make(r, key) as lock:
        assert info(r, key)["owner"] == lock.local.token
    assert info(r, key) is None


def test_context_manager_raises_when_not_acquired(r, key):
    holder = make(r, key)
    assert holder.acquire()
    with pytest.raises(LockError, match="Unable to acquire lock"):
        with make(r, key, blocking_timeout=0.1):
            pass
    holder.release()


def test_context_manager_exit_raises_when_no_longer_owned(r, key):
    with pytest.raises(LockNotOwnedError):
        with make(r, key):
            r.delete(key)
    quiet = dlock.Lock(r, key, raise_on_release_error=False)
    with quiet:
        r.delete(key)  # logged, not raised


def test_release_errors(r, key):
    lock = make(r, key)
    with pytest.raises(LockError):
        lock.release()
    assert lock.acquire()
    r.delete(key)
    with pytest.raises(LockNotOwnedError):
        lock.release()
    assert lock.lost.is_set()
    with pytest.raises(LockError):  # the token is gone
        lock.release()


def test_release_by_another_owner_after_expiry(r, key):
    lock = make(r, key, timeout=0.05)
    assert lock.acquire()
    wait_until(lambda: info(r, key) is None, what="the lease to end")
    other = make(r, key)
    assert other.acquire(blocking=False)
    assert lock.lost.is_set()  # the local deadline passed
    with pytest.raises(dlock.LockLostError):
        lock.extend(1)
    with pytest.raises(LockNotOwnedError):  # as redis-py (R3.4: the familiar API wins)
        lock.release()
    with pytest.raises(LockError):  # the token is gone
        lock.release()
    assert other.owned()
    other.release()


def test_release_by_a_replaced_token(r, key):
    # redis-py: release() releases by local.token, whatever it was set to,
    # and raises LockNotOwnedError when that owner holds nothing.
    lock = make(r, key)
    assert lock.acquire()
    owner = lock.local.token
    lock.local.token = b"somebody-else"
    with pytest.raises(LockNotOwnedError):
        lock.release()
    assert info(r, key)["owner"] == owner
    lock.local.token = owner
    lock.release()
    assert info(r, key) is None


def test_do_release_is_redis_pys_hook(r, key):
    released = []

    class Audited(dlock.Lock):
        def do_release(self, expected_token):
            released.append(expected_token)
            super().do_release(expected_token)

    lock = Audited(r, key)
    assert lock.acquire()
    owner = lock.local.token
    lock.release()
    assert released == [owner] and info(r, key) is None


def test_extend(r, key):
    lock = make(r, key, timeout=10)
    assert lock.acquire()
    assert lock.extend(10) is True
    assert 16000 < info(r, key)["pttl"] <= 20000
    assert lock.extend(5.5, replace_ttl=True)
    assert 4000 < info(r, key)["pttl"] <= 5500
    lock.release()


def test_extend_errors(r, key):
    lock = make(r, key, timeout=10)
    with pytest.raises(LockError):
        lock.extend(10)
    no_timeout = make(r, key)
    assert no_timeout.acquire()
    with pytest.raises(LockError, match="no timeout"):
        no_timeout.extend(10)
    with pytest.raises(LockError, match="no timeout"):
        no_timeout.reacquire()
    no_timeout.release()
    assert lock.acquire()
    r.delete(key)
    with pytest.raises(LockNotOwnedError):
        lock.extend(10)
    assert lock.acquire()
    r.delete(key)
    with pytest.raises(LockNotOwnedError):
        lock.extend(10, replace_ttl=True)


def test_reacquire(r, key):
    lock = make(r, key, timeout=10)
    assert lock.acquire()
    r.execute_command("DLOCK.RENEW", key, lock.local.token, 2000)
    assert info(r, key)["pttl"] <= 2000
    assert lock.reacquire() is True
    assert 8000 < info(r, key)["pttl"] <= 10000
    lock.release()
    with pytest.raises(LockError):
        lock.reacquire()
    assert lock.acquire()
    r.delete(key)
    with pytest.raises(LockNotOwnedError):
        lock.reacquire()


def test_thread_local_token(r, key):
    lock = make(r, key)
    assert lock.acquire()
    seen = {}

    def other_thread():
        seen["token"] = lock.local.token
        try:
            lock.release()
        except LockError as error:
            seen["error"] = error

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert seen["token"] is None and isinstance(seen["error"], LockError)
    assert lock.owned()
    lock.release()


def test_not_thread_local_token(r, key):
    lock = make(r, key, thread_local=False)
    assert lock.acquire()
    thread = threading.Thread(target=lock.release)
    thread.start()
    thread.join()
    assert info(r, key) is None


@pytest.mark.parametrize("protocol", [2, 3])
def test_decoded_responses(server, key, protocol):
    r = server.client(decode_responses=True, protocol=protocol)
    with make(r, key, timeout=5) as lock:
        assert lock.owned() and lock.locked()
        assert lock.extend(1)
        assert isinstance(lock.fence, int)
    assert not lock.locked()
    waiter = make(r, key, blocking_timeout=0.05)
    assert waiter.acquire()
    assert waiter.owned() and waiter.lost.wait(0) is False
    waiter.release()


@pytest.mark.parametrize("protocol", [2, 3])
def test_both_protocols(server, key, protocol):
    r = server.client(protocol=protocol)
    holder = make(r, key, timeout=5)
    assert holder.acquire()
    assert holder.owned() and holder.locked()
    assert holder.extend(1)
    waiter = make(r, key, timeout=5, blocking_timeout=5)
    thread = threading.Thread(target=waiter.acquire)
    thread.start()
    wait_until(lambda: info(r, key)["waiting"] == 1, what="the waiter")
    holder.release()
    thread.join(10)
    assert info(r, key)["owner"] not in (None, holder.local.token)


def test_fencing_tokens_increase(r, key):
    lock = make(r, key)
    fences = []
    for _ in range(5):
        assert lock.fence is None
        assert lock.acquire()
        assert lock.fence == info(r, key)["token"]
        fences.append(lock.fence)
        lock.release()
    other = make(r, key + ":other")
    assert other.acquire()
    fences.append(other.fence)
    other.release()
    assert fences == sorted(fences) and len(set(fences)) == len(fences)


def test_same_token_reenters(r, key):
    lock = make(r, key)
    assert lock.acquire(token="me")
    fence = lock.fence
    assert lock.acquire(token="me")  # redis-py would wait for itself here
    assert info(r, key)["holds"] == 2 and lock.fence == fence
    lock.release()
    assert lock.owned() and info(r, key)["holds"] == 1
    lock.release()
    assert info(r, key) is None


def test_fair_lock(r, key):
    holder = make(r, key)
    assert holder.acquire()
    fair = dlock.Lock(r, key, fair=True)
    assert not fair.acquire(blocking=False, token="fair-one")
    assert info(r, key)["queue"] == [b"fair-one"]
    holder.release()
    # The reservation keeps the lock for its owner.
    assert not make(r, key).acquire(blocking=False)
    assert fair.acquire(blocking=False, token="fair-one")
    fair.release()


def test_a_fair_poller_keeps_its_place(r, key):
    """R8: tries of one fair lock without a token ask under one owner until
    granted, so the reservation of a failed try is the poller's own: with a
    new owner per try it would never get the lock, and its reservations
    would block everyone."""
    holder = make(r, key)
    assert holder.acquire()
    poller = dlock.Lock(r, key, fair=True)
    assert not poller.acquire(blocking=False)
    assert not poller.acquire(blocking=False)
    assert len(info(r, key)["queue"]) == 1  # one place, kept
    holder.release()
    assert not make(r, key).acquire(blocking=False)  # the place is the poller's
    assert poller.acquire(blocking=False)
    first = poller.local.token
    poller.release()
    assert info(r, key) is None
    assert poller.acquire(blocking=False) and poller.local.token != first  # a granted owner is not reused
    poller.release()


def test_session_hold_ends_with_its_connection(server, key):
    client = server.client()
    lock = dlock.Lock(client, key, timeout=60, session=True)
    assert lock.acquire()
    observer = server.client()
    assert info(observer, key)["owner"] == lock.local.token
    client.connection_pool.disconnect()
    wait_until(lambda: info(observer, key) is None, what="the session hold to end")


def test_blocked_wait_does_not_delay_renewals(server, key):
    """R4.1: a wait blocks a connection of its own, so the watchdog of
    another lock of the same client renews while the wait is blocked.
    Asserted by renewals seen to succeed while the waiter is still queued
    (its wait ends only when the test releases the holder), not by a lease
    short enough that a busy machine's scheduling loses it."""
    r = server.client(max_connections=8)
    renewed = dlock.Lock(r, key + ":renewed", watchdog_timeout=1.0, thread_local=False)
    assert renewed.acquire()
    hold = renewed._hold()
    holder = make(r, key, thread_local=False)
    assert holder.acquire()
    outcome = {}

    def wait_in_the_queue():
        waiter = make(r, key)
        outcome["granted"] = waiter.acquire()  # no timeout: until the holder releases
        waiter.release()

    thread = threading.Thread(target=wait_in_the_queue, daemon=True)
    thread.start()
    wait_until(lambda: info(r, key)["waiting"] == 1, what="the waiter in the queue")
    for _renewal in range(2):
        before = hold.lost.deadline.at
        wait_until(lambda before=before: hold.lost.deadline.at != before, what="a renewal during the wait")
    assert info(r, key)["waiting"] == 1  # the wait was blocked all along
    holder.release()
    thread.join(PATIENCE)
    assert outcome == {"granted": True}
    renewed.release()


def _interrupt_when(predicate, then=None):
    """A thread that sends SIGINT to the main thread once ``predicate``."""

    def run():
        wait_until(predicate, what="the wait to begin")
        if then is not None:
            then()
        os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs the main thread")
def test_interrupted_wait_leaves_no_waiter(r, key):
    holder = make(r, key)
    assert holder.acquire()
    waiter = make(r, key)
    thread = _interrupt_when(lambda: info(r, key)["waiting"] == 1)
    with pytest.raises(KeyboardInterrupt):
        waiter.acquire(blocking_timeout=60)
    thread.join()
    # The clean-up runs in the background (R4.7): the waiter leaves soon.
    wait_until(lambda: info(r, key)["waiting"] == 0, what="the waiter to leave")
    assert info(r, key)["owner"] == holder.local.token
    holder.release()
    assert info(r, key) is None  # nobody was handed the lock


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs the main thread")
def test_interrupted_wait_gives_back_a_racing_grant(r, key):
    for attempt in range(5):
        name = f"{key}:{attempt}"
        holder = make(r, name, thread_local=False)
        assert holder.acquire()
        waiter = make(r, name)
        # The hand-off and the interruption happen together.
        thread = _interrupt_when(lambda name=name: info(r, name)["waiting"] == 1, then=holder.release)
        interrupted = False
        try:
            waiter.acquire(blocking_timeout=60)
            thread.join(30)  # the signal is sent: it lands in the loop below at the latest
            for _ in range(3000):
                time.sleep(0.01)
        except KeyboardInterrupt:
            interrupted = True
        thread.join(30)
        assert interrupted
        if waiter.local.token is not None:
            waiter.release()  # the grant came before the signal, and acquire returned
        wait_until(lambda name=name: info(r, name) is None, what="no hold and no waiter left")


def test_threads_contending_for_one_lock_exclude_each_other(r, key):
    lock = make(r, key, timeout=10, blocking_timeout=30)
    inside = []
    fences = []
    errors = []

    def worker():
        try:
            for _ in range(15):
                with lock:
                    inside.append(1)
                    if len(inside) != 1:
                        errors.append("two threads inside")
                    fences.append(lock.fence)
                    inside.pop()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert len(fences) == 90
    assert fences == sorted(fences) and len(set(fences)) == 90  # each hold newer than the last
    assert info(r, key) is None


def test_a_wait_outlasts_the_clients_socket_timeout(server, key):
    r = server.client(socket_timeout=0.3)  # shorter than the waits below
    holder = make(r, key, timeout=10, thread_local=False)
    assert holder.acquire()
    waiter = make(r, key, timeout=10)
    start = time.monotonic()
    assert waiter.acquire(blocking_timeout=1.0) is False  # no TimeoutError at 0.3 s
    assert time.monotonic() - start >= 0.95
    released = threading.Event()

    def release_later():
        wait_until(lambda: info(r, key)["waiting"] == 1, what="the waiter")
        start_wait = time.monotonic()
        while time.monotonic() - start_wait < 0.6:  # past the socket timeout
            time.sleep(0.05)
        released.set()
        holder.release()

    thread = threading.Thread(target=release_later)
    thread.start()
    assert waiter.acquire(blocking_timeout=20)
    assert released.is_set()
    thread.join()
    waiter.release()
    # The pool's connections are back to the client's own timeout.
    assert r.ping()


def dlock_calls(r: redis.Redis) -> int:
    stats = r.info("commandstats")
    return sum(
        value.get("calls", 0) + value.get("rejected_calls", 0)
        for name, value in stats.items()
        if name.startswith("cmdstat_dlock.")
    )


@pytest.mark.parametrize(
    "options, acquire, error",
    [
        ({}, {"token": "*"}, ValueError),
        ({}, {"token": "x" * 513}, ValueError),
        ({"watchdog_timeout": 0}, {}, ValueError),
        ({"watchdog_timeout": -5}, {}, ValueError),
        ({"watchdog_timeout": 2**53 / 1000}, {}, ValueError),
        ({"watchdog_timeout": "30"}, {}, TypeError),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_sent(r, key, options, acquire, error):
    """R9.2 in the sync API (the conformance suite runs the asyncio one)."""
    before = dlock_calls(r)
    with pytest.raises(error):
        dlock.Lock(r, key, **options).acquire(blocking=False, **acquire)
    assert dlock_calls(r) == before
    assert info(r, key) is None


def test_a_null_key_is_refused_before_anything_is_sent(r):
    before = dlock_calls(r)
    with pytest.raises(TypeError):
        dlock.Lock(r, None).acquire(blocking=False)
    with pytest.raises(TypeError):
        dlock.MultiLock(r, ["a", None]).acquire(blocking=False)
    assert dlock_calls(r) == before

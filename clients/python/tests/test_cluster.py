"""dlock and dlock.asyncio over redis-py's ``RedisCluster``, against three
primaries with the module loaded (the ``cluster`` fixture of conftest.py):
locks on the keys of every node, renewed there; a blocking hand-off and a
cancelled wait on a node that is not the client's default one; a lost
guard; a multi-lock on one slot, and one across slots refused before
anything is sent; a latch; an election and its observer; and a slot that
moves to another primary while a wait, a renewal and an observer's watch
are on it (the wait refused by the old node is sent again once, and ends
on the new node; the watch follows MOVED); a manual failover during a wait;
a wait whose connection breaks, not sent again."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import uuid

import pytest
import redis
import redis.asyncio.cluster
from redis.exceptions import ClusterCrossSlotError, LockNotOwnedError

import dlock
import dlock.asyncio
from conftest import info, wait_until
from dlock._core import parse_info
from dlock._sync import call_on_own_connection


@pytest.fixture
def rc(cluster):
    client = cluster.client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def tag():
    return uuid.uuid4().hex[:8]


def other_node(cluster, rc):
    """The index of a primary that is not the client's default node (the
    one a command without a key would go to)."""
    default = rc.get_default_node().port
    return next(i for i, node in enumerate(cluster.nodes) if node.port != default)


def node_info(node, key):
    client = node.client()
    try:
        return info(client, key)
    finally:
        client.close()


def dlock_info(node, field):
    client = node.client()
    try:
        return int(client.info("dlock")[field])
    finally:
        client.close()


def test_locks_on_every_node_are_granted_and_renewed_there(cluster, rc, tag):
    keys = [cluster.key_on(i, f"{tag}:lock") for i in range(3)]
    moved = cluster.errors("MOVED")
    locks = [rc.lock(key, lock_class=dlock.Lock) for key in keys[:1]]
    locks += [dlock.Lock(rc, key, watchdog_timeout=0.5) for key in keys[1:]]
    for lock in locks:
        assert lock.acquire(blocking=False)
    for node, key, lock in zip(cluster.nodes, keys, locks):
        state = node_info(node, key)
        assert state["owner"] == lock.local.token and state["token"] == lock.fence
    assert not dlock.Lock(rc, keys[2]).acquire(blocking=False)
    time.sleep(1.0)  # two leases of 0.5 s: only renewals on each node keep them
    for node, key, lock in zip(cluster.nodes, keys, locks):
        assert not lock.lost.is_set(), lock.lost.reason
        assert lock.owned() and lock.locked()
        assert node_info(node, key)["owner"] == lock.local.token
    for lock in locks:
        lock.release()
    for node, key in zip(cluster.nodes, keys):
        assert node_info(node, key) is None
    assert cluster.errors("MOVED") == moved, "every command went to its key's node at once"


def test_a_blocking_wait_on_another_node_is_handed_the_lock(cluster, rc, tag):
    index = other_node(cluster, rc)
    node, key = cluster.nodes[index], cluster.key_on(index, f"{tag}:handoff")
    holder = dlock.Lock(rc, key, thread_local=False)
    assert holder.acquire(blocking=False)
    first = holder.fence
    waiter = dlock.Lock(rc, key, thread_local=False, blocking_timeout=20)
    got = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire()), daemon=True)
    thread.start()
    wait_until(lambda: node_info(node, key)["waiting"] == 1, what="the waiter in the node's queue")
    assert rc.ping()  # the wait holds a connection of its own, not the client's
    holder.release()
    thread.join(20)
    assert got == [True] and waiter.fence > first
    assert node_info(node, key)["owner"] == waiter.local.token
    waiter.release()
    assert node_info(node, key) is None


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs the main thread")
def test_an_interrupted_wait_leaves_no_waiter_on_its_node(cluster, rc, tag):
    index = other_node(cluster, rc)
    node, key = cluster.nodes[index], cluster.key_on(index, f"{tag}:cancel")
    holder = dlock.Lock(rc, key)
    assert holder.acquire()

    def interrupt():
        wait_until(lambda: node_info(node, key)["waiting"] == 1, what="the wait to begin")
        os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=interrupt, daemon=True)
    thread.start()
    with pytest.raises(KeyboardInterrupt):
        dlock.Lock(rc, key).acquire(blocking_timeout=60)
    thread.join()
    state = node_info(node, key)
    assert state["waiting"] == 0 and state["owner"] == holder.local.token
    holder.release()
    assert node_info(node, key) is None  # nobody was handed the lock


def node_calls(node, command):
    client = node.client()
    try:
        return int(client.info("commandstats").get(f"cmdstat_{command.lower()}", {}).get("calls", 0))
    finally:
        client.close()


def test_a_wait_whose_connection_breaks_is_not_sent_again(cluster, rc, tag):
    """R5.1: redis-py's cluster client would send the command again after a
    connection error; dlock raises it, and the acquire reached the node once."""
    index = other_node(cluster, rc)
    node, key = cluster.nodes[index], cluster.key_on(index, f"{tag}:cut")
    holder = dlock.Lock(rc, key)
    assert holder.acquire()
    sent = node_calls(node, "DLOCK.ACQUIRE")
    failed = []

    def wait():
        try:
            dlock.Lock(rc, key).acquire(blocking_timeout=30)
        except redis.ConnectionError as error:
            failed.append(error)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    wait_until(lambda: node_info(node, key)["waiting"] == 1, what="the wait on the node")
    admin = node.client()
    try:
        waiter = next(c for c in admin.client_list() if c["cmd"] == "dlock.acquire" and "b" in c["flags"])
        admin.execute_command("CLIENT", "KILL", "ID", waiter["id"])
    finally:
        admin.close()
    thread.join(20)
    # A second send would have waited behind the holder instead of failing.
    assert len(failed) == 1, "the connection error reached the caller"
    assert node_calls(node, "DLOCK.ACQUIRE") <= sent + 1, "sent once"  # Valkey counts a call when it ends
    state = node_info(node, key)
    assert state["waiting"] == 0 and state["owner"] == holder.local.token
    holder.release()


def test_a_deleted_key_makes_the_guard_lost(cluster, rc, tag):
    key = cluster.key_on(other_node(cluster, rc), f"{tag}:lost")
    lock = dlock.Lock(rc, key, watchdog_timeout=0.3)
    assert lock.acquire()
    rc.delete(key)
    assert lock.lost.wait(5), "the watchdog saw the lock gone"
    assert "NOTOWNER" in lock.lost.reason
    with pytest.raises(LockNotOwnedError):
        lock.release()


def test_a_multi_lock_takes_one_slot_and_refuses_several_before_sending(cluster, rc, tag):
    index = other_node(cluster, rc)
    base = cluster.key_on(index, f"{tag}:bank")
    keys = [f"{{{base}}}:a", f"{{{base}}}:b"]
    lock = dlock.MultiLock(rc, keys, timeout=None, watchdog_timeout=0.5)
    assert lock.acquire()
    assert len(lock.fence) == 2
    time.sleep(1.0)  # two leases: the renewals of both keys reach their node
    assert not lock.lost.is_set(), lock.lost.reason
    for key in keys:
        assert node_info(cluster.nodes[index], key)["owner"] == lock.local.token
    lock.release()
    assert all(node_info(cluster.nodes[index], key) is None for key in keys)
    spread = [cluster.key_on(i, f"{tag}:spread") for i in range(2)]
    sent, refused = cluster.calls("DLOCK.MACQUIRE"), cluster.errors("CROSSSLOT")
    with pytest.raises(ClusterCrossSlotError):
        dlock.MultiLock(rc, spread).acquire(blocking=False)
    assert (cluster.calls("DLOCK.MACQUIRE"), cluster.errors("CROSSSLOT")) == (sent, refused)


def test_a_latch_a_semaphore_and_a_read_write_lock_on_another_node(cluster, rc, tag):
    key = cluster.key_on(other_node(cluster, rc), f"{tag}:latch")
    latch = dlock.Latch(rc, key)
    assert latch.try_set_count(2, 10)
    opened = []
    thread = threading.Thread(target=lambda: opened.append(latch.wait(20)), daemon=True)
    thread.start()
    assert latch.count_down() == 1 and latch.count() == 1
    assert latch.count_down() == 0
    thread.join(20)
    assert opened == [True] and latch.count() is None
    semaphore = [dlock.Semaphore(rc, "{" + key + "}:sem", 2) for _ in range(3)]
    assert semaphore[0].acquire(blocking=False) and semaphore[1].acquire(blocking=False)
    assert not semaphore[2].acquire(blocking=False)
    semaphore[0].release()
    assert semaphore[2].acquire(blocking=False)
    semaphore[1].release()
    semaphore[2].release()
    rw = dlock.RWLock(rc, "{" + key + "}:rw")
    assert rw.read_lock().acquire(blocking=False) and rw.write_lock().acquire(blocking=False)  # an upgrade
    rw.write_lock().release()
    rw.read_lock().release()
    assert cluster.info("{" + key + "}:sem") is None and cluster.info("{" + key + "}:rw") is None


def test_an_election_on_another_node(cluster, rc, tag):
    index = other_node(cluster, rc)
    node, key = cluster.nodes[index], cluster.key_on(index, f"{tag}:leader")
    election = dlock.Election(rc, key, watchdog_timeout=2)
    first = election.campaign("node-a", timeout=0)
    assert first is not None and election.leader().value == b"node-a"
    seen = []
    observer = election.observe()

    def observe():
        for leader in observer:
            seen.append(leader)

    thread = threading.Thread(target=observe, daemon=True)
    thread.start()
    wait_until(lambda: seen and dlock_info(node, "dlock_watchers") == 1, what="the watch on the key's node")
    waiting = []
    second = threading.Thread(target=lambda: waiting.append(election.campaign("node-b", timeout=20)), daemon=True)
    second.start()
    wait_until(lambda: node_info(node, key)["waiting"] == 1, what="the second candidate queued")
    first.resign()
    second.join(20)
    assert waiting[0] is not None and waiting[0].term > first.term
    wait_until(lambda: seen[-1] is not None and seen[-1].value == b"node-b", what="the observer to see node-b")
    observer.close()  # CLIENT UNBLOCK on the key's node
    thread.join(5)
    assert not thread.is_alive() and dlock_info(node, "dlock_watchers") == 0
    waiting[0].resign()


def _asking_info(node, key):
    """DLOCK.INFO on a node importing ``key``'s slot (after ASKING)."""
    client = node.client()
    try:
        return parse_info(call_on_own_connection(client, [["ASKING"], ["DLOCK.INFO", key]])[1])
    finally:
        client.close()


def test_a_slot_moved_during_a_wait_a_renewal_and_a_watch(cluster, rc, tag):
    """MIGRATE takes the held lock to another primary while a waiter waits
    for it: the old node answers the waiter null, the client sends the wait
    again (ASK, then MOVED) and it is handed the lock on the new node,
    holding it once; the holder's renewals and release follow the slot, and
    an observer's DLOCK.WATCH, answered MOVED by the old node, watches on
    the new one."""
    key, leader_key = f"{{{tag}:move}}:lock", f"{{{tag}:move}}:leader"
    source = cluster.serving(key)
    target = next(node for node in cluster.nodes if node is not source)
    holder = dlock.Lock(rc, key, thread_local=False, watchdog_timeout=1.0)
    assert holder.acquire()
    waiter = dlock.Lock(rc, key, thread_local=False, blocking_timeout=30)
    got = []
    waiting = threading.Thread(target=lambda: got.append(waiter.acquire()), daemon=True)
    waiting.start()
    election = dlock.Election(rc, leader_key)
    observer = election.observe()
    seen = []

    def observe():
        for leader in observer:
            seen.append(leader)

    watching = threading.Thread(target=observe, daemon=True)
    watching.start()
    wait_until(
        lambda: node_info(source, key)["waiting"] == 1 and dlock_info(source, "dlock_watchers") == 1,
        what="the wait and the watch on the old node",
    )
    moved, asked = cluster.errors("MOVED"), cluster.errors("ASK")

    cluster.start_moving(key, target)
    cluster.migrate(key, source, target)
    wait_until(
        lambda: (_asking_info(target, key) or {}).get("waiting") == 1, what="the wait sent again to the new node"
    )
    cluster.finish_moving(key, target)
    wait_until(lambda: dlock_info(target, "dlock_watchers") == 1, what="the watch moved to the new node")
    assert dlock_info(source, "dlock_watchers") == 0

    time.sleep(1.2)  # more than a lease: only a renewal on the new node keeps it
    assert not holder.lost.is_set(), holder.lost.reason
    assert node_info(target, key)["owner"] == holder.local.token
    holder.release()
    waiting.join(20)
    assert got == [True]
    state = node_info(target, key)
    assert state["owner"] == waiter.local.token and state["holds"] == 1  # sent once where it ran
    assert cluster.errors("ASK") > asked and cluster.errors("MOVED") > moved

    leadership = election.campaign("node-c", timeout=5)
    wait_until(lambda: seen and seen[-1] is not None and seen[-1].value == b"node-c", what="the leader seen")
    observer.close()
    watching.join(5)
    leadership.resign()
    waiter.release()
    assert node_info(target, key) is None


# -- asyncio ----------------------------------------------------------------


def arun(cluster, body):
    """Runs ``body(client)`` with a ``redis.asyncio.cluster.RedisCluster``."""

    async def main():
        client = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
        try:
            await client.initialize()  # the slot map read before any lease starts
            return await body(client)
        finally:
            await client.aclose() if hasattr(client, "aclose") else await client.close()

    return asyncio.run(main())


async def until(predicate, timeout=20.0, what="a condition"):
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def test_asyncio_locks_hand_off_and_cancel_on_every_node(cluster, tag):
    keys = [cluster.key_on(i, f"{tag}:async") for i in range(3)]

    async def body(client):
        locks = [dlock.asyncio.Lock(client, key, watchdog_timeout=0.5) for key in keys[:2]]
        locks.append(client.lock(keys[2], lock_class=dlock.asyncio.Lock))  # the drop-in
        for lock in locks:
            assert await lock.acquire(blocking=False)
        await asyncio.sleep(1.0)  # two leases: renewed on each node
        for node, key, lock in zip(cluster.nodes, keys, locks):
            assert not lock.lost.is_set(), lock.lost.reason
            assert await lock.owned()
            assert node_info(node, key)["owner"] == lock.local.token
        # A hand-off on the last node, then a cancelled wait on the first.
        waiter = dlock.asyncio.Lock(client, keys[2], blocking_timeout=20)
        task = asyncio.ensure_future(waiter.acquire())
        await until(lambda: node_info(cluster.nodes[2], keys[2])["waiting"] == 1, what="the waiter queued")
        await locks[2].release()
        assert await task and node_info(cluster.nodes[2], keys[2])["owner"] == waiter.local.token
        await waiter.release()
        cancelled = asyncio.ensure_future(dlock.asyncio.Lock(client, keys[0]).acquire(blocking_timeout=60))
        await until(lambda: node_info(cluster.nodes[0], keys[0])["waiting"] == 1, what="the waiter queued")
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        state = node_info(cluster.nodes[0], keys[0])
        assert state["waiting"] == 0 and state["owner"] == locks[0].local.token
        with pytest.raises(ClusterCrossSlotError):
            await dlock.asyncio.MultiLock(client, keys[:2]).acquire(blocking=False)
        await locks[0].release()
        await locks[1].release()
        for node, key in zip(cluster.nodes, keys):
            assert node_info(node, key) is None

    arun(cluster, body)


def test_asyncio_election_and_a_cancelled_watch_on_another_node(cluster, tag):
    async def body(client):
        index = other_node(cluster, client)
        node, key = cluster.nodes[index], cluster.key_on(index, f"{tag}:aleader")
        election = dlock.asyncio.Election(client, key, watchdog_timeout=2)
        observer = election.observe()
        assert await observer.__anext__() is None
        watch = asyncio.ensure_future(observer.__anext__())
        await until(lambda: dlock_info(node, "dlock_watchers") == 1, what="the watch on the key's node")
        leadership = await election.campaign("node-a", timeout=0)
        assert (await watch).value == b"node-a" and (await election.leader()).term == leadership.term
        watch = asyncio.ensure_future(observer.__anext__())
        await until(lambda: dlock_info(node, "dlock_watchers") == 1, what="the next watch")
        watch.cancel()  # CLIENT UNBLOCK on the key's node
        with pytest.raises(asyncio.CancelledError):
            await watch
        assert dlock_info(node, "dlock_watchers") == 0
        await leadership.resign()
        latch = dlock.asyncio.Latch(client, key + ":latch")
        assert await latch.try_set_count(1, 10)
        opened = asyncio.ensure_future(latch.wait(20))
        assert await latch.count_down() == 0 and await opened

    arun(cluster, body)


def test_asyncio_a_slot_moved_during_a_wait(cluster, tag):
    key = f"{{{tag}:amove}}:lock"
    source = cluster.serving(key)
    target = next(node for node in cluster.nodes if node is not source)

    async def body(client):
        holder = dlock.asyncio.Lock(client, key, watchdog_timeout=2)
        assert await holder.acquire()
        waiter = dlock.asyncio.Lock(client, key, blocking_timeout=30)
        task = asyncio.ensure_future(waiter.acquire())
        await until(lambda: node_info(source, key)["waiting"] == 1, what="the wait on the old node")
        cluster.start_moving(key, target)
        cluster.migrate(key, source, target)
        await until(lambda: (_asking_info(target, key) or {}).get("waiting") == 1, what="the wait on the new node")
        cluster.finish_moving(key, target)
        assert not holder.lost.is_set(), holder.lost.reason  # renewals: the sync test's
        await holder.release()
        assert await task
        state = node_info(target, key)
        assert state["owner"] == waiter.local.token and state["holds"] == 1
        await waiter.release()
        assert node_info(target, key) is None

    arun(cluster, body)


def test_an_early_null_is_sent_again_with_the_rest_of_its_wait():
    """Where the BLOCK of a wait is (never a key or an owner named BLOCK),
    and what is left of it when a null comes before its end."""
    from dlock._cluster import _block_at, _rest_of_wait

    acquire = ["DLOCK.ACQUIRE", "BLOCK", "BLOCK", 1000, "SHARED", "BLOCK", 500]
    assert _block_at(acquire) == 6
    assert _block_at(["DLOCK.MACQUIRE", 2, "BLOCK", "k", "BLOCK", 100, "BLOCK", 0]) == 7
    assert _block_at(["DLOCK.ACQUIRE", "k", "o", 1000]) is None
    assert _block_at(["DLOCK.RELEASE", "k", "BLOCK"]) is None
    left = _rest_of_wait(acquire, 6, time.monotonic() - 0.2)
    assert left is not None and 250 <= left[6] <= 300 and left[:6] == acquire[:6]
    assert _rest_of_wait(acquire, 6, time.monotonic() - 0.6) is None  # a time-out: not sent again
    forever = ["DLOCK.FAIR", "k", "o", 1000, "BLOCK", 0]
    assert _rest_of_wait(forever, 5, time.monotonic() - 60) == forever


def test_a_failover_during_a_wait(cluster, rc, tag):
    """A manual failover while a waiter waits: the old primary answers it
    UNBLOCKED (Redis) or null (Valkey), nothing granted; the client sends the
    wait again to the new primary, once, which hands it the lock at the
    holder's release. Runs last: the cluster then has a fourth node, and
    the failed-over primary is a replica."""
    key = f"{{{tag}:failover}}:lock"
    primary = cluster.serving(key)
    replica = cluster.add_replica(primary)
    # A lease longer than the failover (writes paused on the old primary):
    # a shorter one may end on the new primary before a renewal reaches it.
    holder = dlock.Lock(rc, key, thread_local=False, watchdog_timeout=10)
    assert holder.acquire()
    waiter = dlock.Lock(rc, key, thread_local=False, blocking_timeout=30)
    got = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire()), daemon=True)
    thread.start()
    wait_until(lambda: node_info(primary, key)["waiting"] == 1, what="the wait on the primary")
    cluster.fail_over(replica)

    def waiting_on_new_primary():
        try:
            return (node_info(replica, key) or {}).get("waiting") == 1
        except redis.ResponseError:  # not serving the slot yet
            return False

    wait_until(waiting_on_new_primary, what="the wait sent again to the new primary")
    holder.release()
    thread.join(20)
    assert got == [True]
    state = node_info(replica, key)
    assert state["owner"] == waiter.local.token and state["holds"] == 1
    assert node_calls(replica, "DLOCK.ACQUIRE") == 1, "the wait sent once to the new primary"
    waiter.release()
    assert node_info(replica, key) is None

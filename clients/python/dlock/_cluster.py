"""Redis Cluster: the commands of ``dlock`` and ``dlock.asyncio`` over
redis-py's ``RedisCluster`` (``redis.cluster`` and ``redis.asyncio.cluster``).

Each command goes to the primary of its key's slot, on a connection of that
node taken for the call alone (a blocking wait never shares one: R4.1);
the commands of one call bound for one node go as one pipeline (a
``MultiLock``'s renewals and releases: R2.4). redis-py's own cluster retries
are never used for lock commands: they re-send a command after a connection
error, when it may have run already (R5.1). A command is sent again only
when a reply proves that it did not run, as the Rust client does:

* ``MOVED``: to the slot's new primary (redis-py's slot map updated first);
* ``ASK``: to the node named, preceded by ``ASKING`` (a slot migrating);
* ``TRYAGAIN``, ``CLUSTERDOWN``: after a pause of 10 ms growing to 250 ms
  (the slot map read again after ``CLUSTERDOWN``);

at most ``ATTEMPTS`` sends in all. Renewals and reads (``DLOCK.RENEW``,
``DLOCK.INFO``, ``DLOCK.WATCH``) are also sent again after a connection
error (R5.2), once the slot map was read again (a failover).

A blocking acquire (``BLOCK``) answered null before its wait ended was
refused by a node whose lock moved away (``MIGRATE`` during resharding, a
failover on Valkey: docs/commands.md), and one answered ``UNBLOCKED`` was
waiting on a primary that a failover made a replica (Redis): nothing was
granted, so it is sent again with the rest of its wait, and follows the
redirection the old node answers (after ``UNBLOCKED``, from a slot map read
again).

``DLOCK.MACQUIRE`` needs all its keys in one slot (hash tags); keys of
different slots are refused before anything is sent, with redis-py's
``ClusterCrossSlotError`` (the error the server would answer)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Sequence
from typing import Any, Callable

from redis.exceptions import (
    AskError,
    ClusterCrossSlotError,
    ClusterDownError,
    ConnectionError,
    MovedError,
    ResponseError,
    TimeoutError,
    TryAgainError,
)

try:  # redis-py's cluster clients (always there since redis-py 4.3)
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
    from redis.cluster import RedisCluster
except ImportError:  # pragma: no cover - an older redis-py: no Cluster
    RedisCluster = AsyncRedisCluster = ()  # type: ignore[assignment,misc]

#: Sends of one command at most, the first included (about 3 s of pauses).
ATTEMPTS = 16

#: Commands sent again after a connection error too: they change nothing
#: twice (R5.2).
IDEMPOTENT = frozenset({b"DLOCK.RENEW", b"DLOCK.INFO", b"DLOCK.WATCH"})

#: The acquires whose early null reply is sent again (see the module's doc).
BLOCKING_ACQUIRES = frozenset({b"DLOCK.ACQUIRE", b"DLOCK.FAIR", b"DLOCK.MACQUIRE"})


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is a redis-py ``RedisCluster`` (sync or asyncio)."""
    return isinstance(client, (RedisCluster, AsyncRedisCluster))


def _word(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value.upper()
    return str(value).encode().upper()


def command_keys(command: Sequence[Any]) -> list[Any]:
    """The keys of a dlock command (MACQUIRE: all of them; the others:
    the first argument)."""
    if _word(command[0]) == b"DLOCK.MACQUIRE":
        return list(command[2 : 2 + int(command[1])])
    return [command[1]]


def command_slot(cluster: Any, command: Sequence[Any]) -> int:
    """The slot of a command's keys; ``ClusterCrossSlotError`` before
    anything is sent when they are in different slots."""
    slots = {cluster.keyslot(key) for key in command_keys(command)}
    if len(slots) != 1:
        raise ClusterCrossSlotError(
            "Keys in request don't hash to the same slot: in a Cluster, name a "
            "MultiLock's keys with one hash tag ({order:42}:pay, {order:42}:stock)"
        )
    return slots.pop()


def _block_at(command: Sequence[Any]) -> int | None:
    """The index of a blocking acquire's ``BLOCK`` value, or None."""
    name = _word(command[0])
    if name not in BLOCKING_ACQUIRES:
        return None
    # Options follow the owner and the lease (no key or owner is mistaken for one).
    start = 4 + int(command[1]) if name == b"DLOCK.MACQUIRE" else 4
    for at in range(start, len(command) - 1):
        if _word(command[at]) == b"BLOCK":
            return at + 1
    return None


def _rest_of_wait(command: list[Any], at: int, sent: float) -> list[Any] | None:
    """The command again with the rest of its wait, or None when the wait is
    over (its null was a time-out)."""
    block_ms = int(command[at])
    if block_ms == 0:
        return command  # waits forever
    left = block_ms - int((time.monotonic() - sent) * 1000)
    if left <= 0:
        return None
    again = list(command)
    again[at] = left
    return again


def _unblocked(reply: Any) -> bool:
    """Redis's answer to the clients blocked on a primary that a failover
    made a replica (it closes their connections next): nothing was granted."""
    return isinstance(reply, ResponseError) and str(reply).startswith("UNBLOCKED")


def _pause(attempt: int) -> float:
    """The pause before the send after the ``attempt``-th: 10, 20, 40, 80,
    160, then 250 ms."""
    return min(0.25, 0.01 * (1 << min(max(attempt - 1, 0), 5)))


def _left(timeout: Any, started: float) -> Any:
    """A socket timeout reduced by the time already spent (None: none; a
    caller's "unchanged" marker passes through)."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        return timeout
    return max(0.01, timeout - (time.monotonic() - started))


class _Round:
    """What one round of sends decided for each pending command."""

    def __init__(self) -> None:
        self.again: list[int] = []
        self.refresh = False
        #: Whether the next round waits first (not after ASK, nor after an
        #: early null: the node that answered has nothing more to say).
        self.pause = False


def _judge(
    round_: _Round,
    index: int,
    reply: Any,
    commands: list[list[Any]],
    replies: list[Any],
    asked: dict[int, tuple[str, int]],
    moved: list[MovedError],
    sent: float,
    blocking_retry: bool,
) -> None:
    """Files ``reply`` to command ``index``: a result, or a send again."""
    if isinstance(reply, AskError):
        asked[index] = (reply.host, reply.port)
        replies[index] = reply
        round_.again.append(index)
        return
    if isinstance(reply, MovedError):
        moved.append(reply)
        replies[index] = reply
        round_.again.append(index)
        round_.pause = True
    elif isinstance(reply, (TryAgainError, ClusterDownError)):
        round_.refresh = round_.refresh or isinstance(reply, ClusterDownError)
        replies[index] = reply
        round_.again.append(index)
        round_.pause = True
    elif (reply is None or _unblocked(reply)) and blocking_retry:
        at = _block_at(commands[index])
        again = None if at is None else _rest_of_wait(commands[index], at, sent)
        replies[index] = reply
        if again is not None:
            commands[index] = again
            round_.again.append(index)
            if reply is not None:  # a failover: the slot's new primary, from a new map
                round_.refresh = round_.pause = True
    else:
        replies[index] = reply


def _batch(indices: Sequence[int], commands: list[list[Any]], asked: dict[int, tuple[str, int]]) -> list[list[Any]]:
    batch: list[list[Any]] = []
    for i in indices:
        if i in asked:
            batch.append(["ASKING"])
        batch.append(commands[i])
    return batch


def _unbatch(indices: Sequence[int], got: Sequence[Any], asked: dict[int, tuple[str, int]]) -> list[Any]:
    out: list[Any] = []
    at = 0
    for i in indices:
        if i in asked:
            at += 1  # ASKING's OK
        out.append(got[at])
        at += 1
    return out


# -- redis.cluster.RedisCluster ---------------------------------------------


def _primary(cluster: Any, slot: int) -> Any:
    return cluster.nodes_manager.get_node_from_slot(slot)


def _node_at(cluster: Any, address: tuple[str, int]) -> Any:
    node = cluster.nodes_manager.get_node(host=address[0], port=address[1])
    if node is None:
        cluster.nodes_manager.initialize()
        node = cluster.nodes_manager.get_node(host=address[0], port=address[1])
    if node is None:
        raise ConnectionError(f"ASK named {address[0]}:{address[1]}, a node this client does not know")
    return node


def _learn_moved(cluster: Any, error: MovedError) -> None:
    manager = cluster.nodes_manager
    if hasattr(manager, "move_slot"):  # redis-py 6+
        manager.move_slot(error)
    else:
        manager.update_moved_exception(error)


def _reread_slots(cluster: Any) -> None:
    try:
        cluster.nodes_manager.initialize()
    except Exception:  # noqa: BLE001 - the next send says what is wrong
        pass


def node_client(client: Any, key: Any) -> Any:
    """The ``redis.Redis`` of the primary serving ``key``'s slot (the client
    itself when it is not a ``RedisCluster``)."""
    if not is_cluster(client):
        return client
    return _primary(client, client.keyslot(key)).redis_connection


def redirected(client: Any, error: BaseException, attempt: int = 1) -> bool:
    """After ``error`` from a command on ``node_client(client, key)``: True
    when it proves the command did not run there and it may be sent again
    by slot (the slot map updated, after a pause); False otherwise."""
    if not is_cluster(client) or not isinstance(error, (MovedError, AskError, TryAgainError, ClusterDownError)):
        return False
    if isinstance(error, MovedError):
        _learn_moved(client, error)
    time.sleep(_pause(attempt))
    if isinstance(error, ClusterDownError):
        _reread_slots(client)
    return True


def call(
    cluster: Any,
    commands: Sequence[Sequence[Any]],
    timeout: Any,
    send: Callable[[Any, list[list[Any]], Any], list[Any]],
) -> list[Any]:
    """``call_on_own_connection`` in a Cluster: ``send(node_redis, batch,
    timeout)`` sends each node's commands as one batch on a connection of
    its own; redirections are followed as the module's doc says. The
    replies, in order (an error reply as its ``ResponseError``)."""
    pending = [list(command) for command in commands]
    slots = [command_slot(cluster, command) for command in pending]
    replies: list[Any] = [None] * len(pending)
    asked: dict[int, tuple[str, int]] = {}
    todo = list(range(len(pending)))
    started = time.monotonic()
    attempt = 1
    while True:
        groups: dict[str, tuple[Any, list[int]]] = {}
        for i in todo:
            node = _node_at(cluster, asked[i]) if i in asked else _primary(cluster, slots[i])
            groups.setdefault(node.name, (node, []))[1].append(i)
        round_ = _Round()
        moved: list[MovedError] = []
        sent = time.monotonic()
        for node, indices in groups.values():
            batch = _batch(indices, pending, asked)
            try:
                got = send(node.redis_connection, batch, _left(timeout, started))
            except (ConnectionError, TimeoutError):
                # No reply: sent again only if every command of the batch
                # may run twice, once the slot map was read again.
                if attempt >= ATTEMPTS or any(_word(pending[i][0]) not in IDEMPOTENT for i in indices):
                    raise
                round_.again.extend(indices)
                round_.refresh = True
                round_.pause = True
                continue
            for i, reply in zip(indices, _unbatch(indices, got, asked)):
                asked.pop(i, None)
                _judge(round_, i, reply, pending, replies, asked, moved, sent, True)
        if not round_.again or attempt >= ATTEMPTS:
            return replies
        for error in moved:
            _learn_moved(cluster, error)
        if round_.pause:
            time.sleep(_pause(attempt))
        if round_.refresh:
            _reread_slots(cluster)
        todo = sorted(round_.again)
        attempt += 1


# -- redis.asyncio.cluster.RedisCluster --------------------------------------


class _AsyncNodePool:
    """The connections of one ``redis.asyncio.cluster.ClusterNode``, with the
    interface of a ``redis.asyncio.ConnectionPool`` that dlock uses: a
    connection taken for one call alone, given back after it."""

    def __init__(self, node: Any) -> None:
        self.node = node
        self.connection_class = node.connection_class
        self.connection_kwargs = node.connection_kwargs

    async def get_connection(self, *_args: Any, **_kwargs: Any) -> Any:
        return self.node.acquire_connection()

    async def release(self, connection: Any) -> None:
        release = getattr(self.node, "release", None)
        if release is not None:  # redis-py 6+
            release(connection)
        else:
            self.node._free.append(connection)

    def make_connection(self) -> Any:
        return self.connection_class(**self.connection_kwargs)


class AsyncNodeClient:
    """The primary of a slot as dlock.asyncio uses a ``redis.asyncio.Redis``:
    ``connection_pool`` (its connections), ``execute_command`` (one command
    on one of them) and ``get_encoder``."""

    def __init__(self, cluster: Any, node: Any) -> None:
        self.cluster = cluster
        self.node = node
        self.name = node.name
        self.connection_pool = _AsyncNodePool(node)

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        return await self.node.execute_command(*args, **options)

    def get_encoder(self) -> Any:
        return self.cluster.get_encoder()


async def _aprimary(cluster: Any, slot: int) -> Any:
    await cluster.initialize()
    return cluster.nodes_manager.get_node_from_slot(slot)


async def _anode_at(cluster: Any, address: tuple[str, int]) -> Any:
    node = cluster.nodes_manager.get_node(host=address[0], port=address[1])
    if node is None:
        raise ConnectionError(f"ASK named {address[0]}:{address[1]}, a node this client does not know")
    return node


async def _alearn_moved(cluster: Any, error: MovedError) -> None:
    manager = cluster.nodes_manager
    move = getattr(manager, "move_slot", None)
    if move is not None:  # redis-py 6+
        done = move(error)
        if inspect.isawaitable(done):
            await done
    else:
        manager._moved_exception = error  # redis-py 5: applied at the next look-up


async def _areread_slots(cluster: Any) -> None:
    try:
        await cluster.nodes_manager.initialize()
    except Exception:  # noqa: BLE001 - the next send says what is wrong
        pass


async def anode_client(client: Any, key: Any) -> Any:
    """``node_client`` for ``redis.asyncio``: an ``AsyncNodeClient`` for the
    primary serving ``key``'s slot (the client itself when it is not a
    ``RedisCluster``)."""
    if not is_cluster(client):
        return client
    return AsyncNodeClient(client, await _aprimary(client, client.keyslot(key)))


async def aredirected(client: Any, error: BaseException, attempt: int = 1) -> bool:
    """``redirected`` for ``redis.asyncio``."""
    if not is_cluster(client) or not isinstance(error, (MovedError, AskError, TryAgainError, ClusterDownError)):
        return False
    if isinstance(error, MovedError):
        await _alearn_moved(client, error)
    await asyncio.sleep(_pause(attempt))
    if isinstance(error, ClusterDownError):
        await _areread_slots(client)
    return True


async def acall(
    cluster: Any,
    commands: Sequence[Sequence[Any]],
    timeout: Any,
    send: Callable[[Any, list[list[Any]], Any], Awaitable[list[Any]]],
) -> list[Any]:
    """``call`` for ``redis.asyncio.cluster.RedisCluster``."""
    pending = [list(command) for command in commands]
    slots = [command_slot(cluster, command) for command in pending]
    replies: list[Any] = [None] * len(pending)
    asked: dict[int, tuple[str, int]] = {}
    todo = list(range(len(pending)))
    started = time.monotonic()
    attempt = 1
    while True:
        groups: dict[str, tuple[Any, list[int]]] = {}
        for i in todo:
            node = await _anode_at(cluster, asked[i]) if i in asked else await _aprimary(cluster, slots[i])
            groups.setdefault(node.name, (node, []))[1].append(i)
        round_ = _Round()
        moved: list[MovedError] = []
        sent = time.monotonic()
        for node, indices in groups.values():
            batch = _batch(indices, pending, asked)
            try:
                got = await send(AsyncNodeClient(cluster, node), batch, _left(timeout, started))
            except (ConnectionError, TimeoutError):
                if attempt >= ATTEMPTS or any(_word(pending[i][0]) not in IDEMPOTENT for i in indices):
                    raise
                round_.again.extend(indices)
                round_.refresh = True
                round_.pause = True
                continue
            for i, reply in zip(indices, _unbatch(indices, got, asked)):
                asked.pop(i, None)
                _judge(round_, i, reply, pending, replies, asked, moved, sent, True)
        if not round_.again or attempt >= ATTEMPTS:
            return replies
        for error in moved:
            await _alearn_moved(cluster, error)
        if round_.pause:
            await asyncio.sleep(_pause(attempt))
        if round_.refresh:
            await _areread_slots(cluster)
        todo = sorted(round_.again)
        attempt += 1

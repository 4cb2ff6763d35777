"""The asyncio client, for ``redis.asyncio``: the same classes as ``dlock``
(``Lock`` has the interface of ``redis.asyncio.lock.Lock``), with a
watchdog task instead of a thread and ``lost`` an ``asyncio.Event``.

A cancelled wait (task cancellation, ``asyncio.timeout``) closes its
connection and lets the cancellation go on at once; a task in the background
waits until the server dropped the waiter and gives back any grant that
raced with the cancellation (R4.4, R4.7), for at most ``CLEANUP_PATIENCE``
seconds."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Sequence
from types import SimpleNamespace, TracebackType
from typing import Any, Callable, TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import LockError, LockNotOwnedError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import _cluster, _core
from ._core import (
    CLEANUP_PATIENCE,
    CLEANUP_POLL,
    CONNECT_PATIENCE,
    DEFAULT_WATCHDOG_TIMEOUT,
    WAIT_MARGIN,
    DeadlockError,
    KeyT,
    LatchBrokenError,
    LockLostError,
    Number,
)

__all__ = [
    "DeadlockError",
    "Election",
    "Latch",
    "LatchBrokenError",
    "Leadership",
    "Lock",
    "LockLostError",
    "LostEvent",
    "MultiLock",
    "Observer",
    "ReadLock",
    "RWLock",
    "Semaphore",
]

logger = logging.getLogger("dlock")

_UNCHANGED = object()
#: A read timeout that never ends in practice (redis-py takes None as "the
#: connection's own socket timeout").
_FOREVER = 1e9


_T = TypeVar("_T")

#: The clean-ups running in the background (a strong reference each, so
#: that the loop does not drop them half-way).
_CLEANUPS: set[asyncio.Future[Any]] = set()


async def _get_connection(pool: Any) -> Any:
    try:
        return await pool.get_connection()
    except TypeError:  # redis-py before 5.3 wants a command name
        return await pool.get_connection("DLOCK")


async def _pool_connection(pool: Any) -> Any:
    """A connection of ``pool``, connected within ``CONNECT_PATIENCE``
    seconds (redis-py's connect retries with a backoff of seconds, and a
    paused server answers no handshake): ``redis.exceptions.TimeoutError``
    otherwise, with nothing sent (R4.6)."""
    try:
        return await asyncio.wait_for(_get_connection(pool), CONNECT_PATIENCE)
    except asyncio.TimeoutError:
        raise RedisTimeoutError(f"Timeout connecting to server (within {CONNECT_PATIENCE} s)") from None


async def _within(work: Awaitable[_T], seconds: float | None) -> _T:
    """``work`` ended within ``seconds`` (None: no bound), else
    ``redis.exceptions.TimeoutError``: the bound of a wait or of a renewal
    by hand, whatever stalls (a connection's opening, a paused server)."""
    if seconds is None:
        return await work
    try:
        return await asyncio.wait_for(work, max(0.0, seconds))
    except asyncio.TimeoutError:
        raise RedisTimeoutError(f"no reply within {seconds:.3f} s") from None


def _in_background(work: Awaitable[Any], what: str) -> None:
    """Runs a clean-up (R4.7) as a task of its own, bounded by
    ``CLEANUP_PATIENCE``: it never delays the caller or the next call."""

    async def bounded() -> None:
        try:
            await asyncio.wait_for(work, CLEANUP_PATIENCE)
        except asyncio.TimeoutError:
            logger.warning("dlock: %s did not end within %s s", what, CLEANUP_PATIENCE)
        except Exception as error:  # the lease ends the hold anyway
            logger.warning("dlock: %s failed: %s", what, error)

    task = asyncio.ensure_future(bounded())
    _CLEANUPS.add(task)
    task.add_done_callback(_CLEANUPS.discard)


async def call_on_own_connection(
    client: Any, commands: Sequence[Sequence[Any]], timeout: Any = _UNCHANGED
) -> list[Any]:
    """``dlock._sync.call_on_own_connection`` for redis.asyncio: a
    connection from the pool for this call alone, read with ``timeout``
    seconds (None: no timeout), closed on cancellation or failure."""
    if _cluster.is_cluster(client):  # by slot, redirections followed: dlock/_cluster.py
        return await _cluster.acall(client, commands, timeout, call_on_own_connection)
    pool = client.connection_pool
    conn = await _pool_connection(pool)
    try:
        if len(commands) == 1:
            await conn.send_command(*commands[0])
        else:
            await conn.send_packed_command(conn.pack_commands(commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                if timeout is _UNCHANGED:
                    replies.append(await conn.read_response())
                else:
                    replies.append(await conn.read_response(timeout=_FOREVER if timeout is None else timeout))
            except ResponseError as error:
                replies.append(error)
        return replies
    except BaseException:
        try:
            await asyncio.shield(conn.disconnect())
        except BaseException:  # closing is best effort; the error that got us here matters
            pass
        raise
    finally:
        await pool.release(conn)


async def _once(client: Any, args: Sequence[Any]) -> Any:
    """Sends a command that must not be sent twice (R5.1: ACQUIRE, RELEASE,
    ...) on a pool connection, outside redis-py's retries (which re-send a
    command after a connection error or a read timeout). An error reply is
    raised."""
    reply = (await call_on_own_connection(client, [args]))[0]
    if isinstance(reply, ResponseError):
        raise reply
    return reply


class LostEvent(asyncio.Event):
    """``lock.lost`` for asyncio: set on NOTOWNER or when the lease deadline
    passed on the monotonic clock without a successful renewal;
    ``is_set()`` and ``wait()`` check that deadline themselves."""

    def __init__(self) -> None:
        super().__init__()
        self.deadline = _core.Deadline()
        #: Why the hold is known to be gone (None while it is not).
        self.reason: str | None = None

    def lose(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.set()

    def is_set(self) -> bool:
        if super().is_set():
            return True
        if self.deadline.passed():
            self.lose("the lease deadline passed without a successful renewal")
            return True
        return False

    async def wait(self) -> bool:  # type: ignore[override]
        while not self.is_set():
            remaining = self.deadline.remaining()
            if remaining is None:
                await super().wait()
            else:
                try:
                    await asyncio.wait_for(super().wait(), remaining + 0.001)
                except asyncio.TimeoutError:
                    pass
        return True


class _Local(threading.local):
    token: bytes | None = None
    hold: _Hold | None = None
    lost: LostEvent | None = None
    fair_owner: bytes | None = None


class _Shared(SimpleNamespace):
    token: bytes | None = None
    hold: _Hold | None = None
    lost: LostEvent | None = None
    fair_owner: bytes | None = None


class _Hold:
    def __init__(self, owner: bytes, nkeys: int, lease_ms: int) -> None:
        self.owner = owner
        self.fences: list[int] = [0] * nkeys
        self.counts: list[int] = [0] * nkeys
        self.lease_ms = lease_ms
        self.lost = LostEvent()
        self.watchdog: asyncio.Task | None = None
        self.stopped = False

    def stop_watchdog(self) -> None:
        self.stopped = True
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None


class Lock:
    """A dlock lock with the interface of ``redis.asyncio.lock.Lock``:
    ``r.lock(name, ..., lock_class=dlock.asyncio.Lock)``. The same mapping
    as ``dlock.Lock``; the watchdog is a task of the running loop."""

    _shared = False
    _limit: int | None = None
    _weight: int | None = None
    _multi = False

    def __init__(
        self,
        redis: Any,
        name: Any,
        timeout: Number | None = None,
        sleep: Number = 0.1,
        blocking: bool = True,
        blocking_timeout: Number | None = None,
        thread_local: bool = True,
        raise_on_release_error: bool = True,
        *,
        auto_renewal: bool | None = None,
        watchdog_timeout: Number = DEFAULT_WATCHDOG_TIMEOUT,
        fair: bool = False,
        session: bool = False,
    ) -> None:
        self.redis = redis
        self.name = name
        self.timeout = timeout
        self.sleep = sleep
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.thread_local = bool(thread_local)
        self.raise_on_release_error = raise_on_release_error
        self.auto_renewal = (not timeout) if auto_renewal is None else bool(auto_renewal)
        self.watchdog_timeout = watchdog_timeout
        self.fair = fair
        self.session = session
        self.local: Any = _Local() if self.thread_local else _Shared()
        self._owner_source: Callable[[], bytes] | None = None

    @property
    def _keys(self) -> list[KeyT]:
        return [self.name]

    def _lease_ms(self) -> int:
        return _core.lease_to_ms(self.timeout if self.timeout else self.watchdog_timeout)

    def _hold(self) -> _Hold | None:
        hold = self.local.hold
        if hold is not None and self.local.token == hold.owner:
            return hold
        return None

    def _forget(self, hold: _Hold) -> None:
        hold.stop_watchdog()
        if not hold.lost.is_set():
            hold.lost.deadline.at = None  # given back, not lost
        if self.local.hold is hold:
            self.local.hold = None
            self.local.token = None

    async def __aenter__(self) -> Lock:
        if await self.acquire():
            return self
        raise LockError("Unable to acquire lock within the time specified")

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            await self.release()
        except LockError:
            if self.raise_on_release_error:
                raise
            logger.warning("Lock was unlocked or no longer owned when exiting context manager.")

    async def acquire(
        self,
        blocking: bool | None = None,
        blocking_timeout: Number | None = None,
        token: Any | None = None,
    ) -> bool:
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        if token is not None:
            owner = self.redis.get_encoder().encode(token)
        elif self._owner_source is not None:
            owner = self._owner_source()
        elif self.fair and self.local.fair_owner is not None:
            owner = self.local.fair_owner  # a poller keeps its place (R8)
        else:
            owner = _core.new_owner()
        keep_place = self.fair and token is None and self._owner_source is None
        block_ms: int | None = None
        socket_timeout: float | None = None
        if blocking and (blocking_timeout is None or blocking_timeout > 0):
            if blocking_timeout is None:
                block_ms = 0
            else:
                block_ms = _core.seconds_to_ms(blocking_timeout)
                socket_timeout = blocking_timeout + WAIT_MARGIN
        keys = self._keys
        current = self._hold()
        same = current is not None and current.owner == owner
        before = list(current.counts) if same and current is not None else [0] * len(keys)
        lease_ms = self._lease_ms()
        args = _core.acquire_args(
            keys,
            owner,
            lease_ms,
            multi=self._multi,
            fair=self.fair,
            shared=self._shared,
            limit=self._limit,
            block_ms=block_ms,
            session=self.session,
            weight=self._weight,
        )
        sent = time.monotonic()
        hold: _Hold | None = None
        try:
            try:
                if block_ms is None:
                    reply = await _once(self.redis, args)
                else:
                    # The whole wait, the connection's opening included,
                    # ends by its wait plus the margin (R4.2, R4.6).
                    replies = await _within(call_on_own_connection(self.redis, [args], socket_timeout), socket_timeout)
                    reply = replies[0]
                    if isinstance(reply, ResponseError):
                        raise reply
            except ResponseError as error:
                if _core.is_deadlock(error):
                    raise DeadlockError(str(error)) from None
                raise
            grants = _core.parse_grants(reply, self._multi)
            if grants is None:
                if keep_place:
                    self.local.fair_owner = owner  # its reservation waits for this owner's next try
                return False
            if keep_place:
                self.local.fair_owner = None  # a granted owner is never reused
            if block_ms is not None:
                sent = time.monotonic()
            if same and current is not None:
                hold = current
            else:
                if current is not None:
                    self._forget(current)
                hold = _Hold(owner, len(keys), lease_ms)
            for i, (fence, count) in enumerate(grants):
                hold.fences[i] = fence
                hold.counts[i] = count
            hold.lease_ms = max(hold.lease_ms, lease_ms) if same else lease_ms
            hold.lost.deadline.at = _core.local_deadline(sent, lease_ms)
            self.local.hold = hold
            self.local.token = owner
            self.local.lost = hold.lost
            if self.auto_renewal and hold.watchdog is None:
                hold.watchdog = asyncio.ensure_future(self._watchdog(hold))
            return True
        except (ResponseError, LockError):
            raise
        except BaseException:
            if hold is not None:
                if same:
                    hold.counts = list(before)
                else:
                    self._forget(hold)
            # R4.4, R5.3 (a read timeout included): give back whatever the
            # call may have been granted, in the background (R4.7).
            _in_background(self._abandon(owner, before), f"the clean-up of an interrupted wait on {self.name!r}")
            raise

    async def _abandon(self, owner: bytes, before: list[int]) -> None:
        end = time.monotonic() + CLEANUP_PATIENCE
        for i, key in enumerate(self._keys):
            try:
                while True:
                    info = _core.parse_info(await self.redis.execute_command("DLOCK.INFO", key))
                    if not _core.info_queued(info, owner) or time.monotonic() > end:
                        break
                    await asyncio.sleep(CLEANUP_POLL)
                exclusive, shared, _pttl = _core.info_holds(info, owner)
                extra = (shared if self._shared else exclusive) - before[i]
                for _ in range(max(0, extra)):
                    await _once(self.redis, _core.release_args(key, owner, self._shared))
            except Exception as error:
                logger.warning("dlock: clean-up of an interrupted wait on %r failed: %s", key, error)

    async def _watchdog(self, hold: _Hold) -> None:
        lease = hold.lease_ms / 1000
        interval = lease / 3
        next_at = time.monotonic() + interval
        while not hold.stopped:
            deadline = hold.lost.deadline.at
            wake = next_at if deadline is None else min(next_at, deadline)
            await asyncio.sleep(max(0.0, wake - time.monotonic()))
            if hold.stopped:
                return
            now = time.monotonic()
            if hold.lost.deadline.passed():
                hold.lost.lose("the lease deadline passed without a successful renewal")
                return
            if now < next_at:
                continue
            remaining = hold.lost.deadline.remaining()
            try:
                bound = max(0.01, remaining or lease)
                replies = await _within(self._renew(hold, hold.lease_ms, timeout=bound), bound)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a dropped connection: try again soon (R2.6)
                logger.debug("dlock: renewal of %r failed: %s", self.name, error)
                next_at = time.monotonic() + min(interval, 0.05)
                continue
            if hold.stopped:
                return
            lost, refused = _core.judge_renewal(replies, hold.fences)
            if lost is not None:
                hold.lost.lose(lost)
                return
            if refused is not None:
                logger.warning("dlock: renewal of %r refused: %s", self.name, refused)
                next_at = time.monotonic() + min(interval, 0.05)
                continue
            if hold.lost.is_set():
                return  # the deadline passed while the renewal was in flight: lost for good (R3.3)
            hold.lost.deadline.at = _core.local_deadline(now, hold.lease_ms)
            next_at = now + interval

    async def do_acquire(self, token: Any) -> bool:
        return await self.acquire(blocking=False, token=token)

    async def locked(self) -> bool:
        for key in self._keys:
            if _core.info_locked(_core.parse_info(await self.redis.execute_command("DLOCK.INFO", key))):
                return True
        return False

    async def owned(self) -> bool:
        hold = self._hold()
        if hold is None:
            return False
        for key in self._keys:
            info = _core.parse_info(await self.redis.execute_command("DLOCK.INFO", key))
            exclusive, shared, _pttl = _core.info_holds(info, hold.owner)
            if (shared if self._shared else exclusive) == 0:
                return False
        return True

    async def release(self) -> None:
        """Gives back one hold; raises where redis-py's asyncio
        ``Lock.release`` raises, as ``dlock.Lock.release`` does (R3.4):
        ``LockNotOwnedError`` when the server says the owner holds nothing,
        even for a hold already known lost."""
        token = self.local.token
        if token is None:
            raise LockError("Cannot release an unlocked lock")
        hold = self._hold()
        if hold is None:
            # ``local.token`` was replaced: release by that token, as redis-py does.
            self.local.token = None
            await self.do_release(token)
            return
        lost = hold.lost.is_set()
        try:
            await self.do_release(hold.owner)
        except (ResponseError, LockNotOwnedError):
            self._forget(hold)
            # As redis-py: a release the server refuses raises (R3.4).
            hold.lost.lose("NOTOWNER: the lock is held by nobody or another owner")
            raise
        # As redis-py's asyncio Lock: the token is dropped once released.
        hold.counts = [max(0, c - 1) for c in hold.counts]
        if lost or max(hold.counts) == 0:
            self._forget(hold)

    async def do_release(self, expected_token: Any) -> None:
        """Gives back one hold of the owner ``expected_token`` on every key
        (redis-py's hook); ``LockNotOwnedError`` when that owner holds none."""
        errors = await self._release_keys(_core.as_bytes(expected_token))
        if any(_core.is_notowner(e) for e in errors):
            raise LockNotOwnedError("Cannot release a lock that's no longer owned")
        if errors:
            raise errors[0]

    async def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        hold = self._hold()
        if hold is None:
            raise LockError("Cannot extend an unlocked lock")
        if self.timeout is None:
            raise LockError("Cannot extend a lock with no timeout")
        return await self.do_extend(additional_time, replace_ttl)

    async def do_extend(self, additional_time: Number, replace_ttl: bool) -> bool:
        hold = self._hold()
        if hold is None:
            raise LockError("Cannot extend an unlocked lock")
        if hold.lost.is_set():
            raise LockLostError("Cannot extend a lock that was lost")
        extra_ms = int(additional_time * 1000)
        if replace_ttl:
            ttl_ms = extra_ms
        else:
            if self._multi:
                raise LockError("A MultiLock extends with replace_ttl=True only")
            info = _core.parse_info(await self.redis.execute_command("DLOCK.INFO", self._keys[0]))
            _e, _s, pttl = _core.info_holds(info, hold.owner)
            if pttl < 0:
                hold.lost.lose("NOTOWNER: the lock is held by nobody or another owner")
                hold.stop_watchdog()
                raise LockLostError("Cannot extend a lock that's no longer owned")
            ttl_ms = pttl + extra_ms
        await self._renew_or_raise(hold, ttl_ms, "Cannot extend a lock that's no longer owned")
        return True

    async def reacquire(self) -> bool:
        hold = self._hold()
        if hold is None:
            raise LockError("Cannot reacquire an unlocked lock")
        if self.timeout is None:
            raise LockError("Cannot reacquire a lock with no timeout")
        return await self.do_reacquire()

    async def do_reacquire(self) -> bool:
        hold = self._hold()
        if hold is None:
            raise LockError("Cannot reacquire an unlocked lock")
        await self._renew_or_raise(hold, self._lease_ms(), "Cannot reacquire a lock that's no longer owned")
        return True

    @property
    def fence(self) -> int | None:
        hold = self._hold()
        return hold.fences[0] if hold is not None else None

    @property
    def lost(self) -> LostEvent:
        event = self.local.lost
        if event is None:
            event = LostEvent()
            self.local.lost = event
        return event

    async def renew(self) -> None:
        hold = self._hold()
        if hold is None:
            raise LockError("Cannot renew an unlocked lock")
        await self._renew_or_raise(hold, hold.lease_ms, "Cannot renew a lock that's no longer owned")

    async def _renew(self, hold: _Hold, ttl_ms: int, timeout: Any = _UNCHANGED) -> list[Any]:
        """One ``DLOCK.RENEW`` per key; the replies (errors included)."""
        commands = [_core.renew_args(key, hold.owner, ttl_ms) for key in self._keys]
        return await call_on_own_connection(self.redis, commands, timeout)

    async def _renew_or_raise(self, hold: _Hold, ttl_ms: int, message: str) -> None:
        if hold.lost.is_set():
            raise LockLostError(message)  # R3.4: a lost hold stays lost
        sent = time.monotonic()
        # R4.6: a renewal by hand ends by the hold's local deadline at the
        # latest, with ``LockLostError`` once that has passed.
        remaining = hold.lost.deadline.remaining()
        try:
            read_timeout: Any = _UNCHANGED if remaining is None else max(0.001, remaining)
            replies = await _within(self._renew(hold, ttl_ms, timeout=read_timeout), remaining)
        except (RedisTimeoutError, RedisConnectionError) as error:
            if hold.lost.is_set():
                hold.stop_watchdog()
                raise LockLostError(message) from error
            raise
        lost, refused = _core.judge_renewal(replies, hold.fences)
        if lost is not None:
            hold.lost.lose(lost)
            hold.stop_watchdog()
            raise LockLostError(message)
        if refused is not None:
            raise refused
        if hold.lost.is_set():
            raise LockLostError(message)
        hold.lost.deadline.at = _core.local_deadline(sent, ttl_ms)

    async def _release_keys(self, owner: bytes) -> list[ResponseError]:
        commands = [_core.release_args(key, owner, self._shared) for key in self._keys]
        replies = await call_on_own_connection(self.redis, commands)  # never re-sent (R5.1)
        return [r for r in replies if isinstance(r, ResponseError)]


class ReadLock(Lock):
    """The shared side of an ``RWLock``."""

    _shared = True


class Semaphore(Lock):
    """``limit`` permits; each ``acquire`` takes ``weight`` of them (1 by
    default, ``WEIGHT w``) with its own owner, lease and token."""

    _shared = True

    def __init__(
        self,
        redis: Any,
        name: Any,
        limit: int,
        timeout: Number | None = None,
        *,
        weight: int | None = None,
        **options: Any,
    ) -> None:
        if limit < 1:
            raise ValueError("a semaphore's limit must be at least 1")
        super().__init__(redis, name, timeout, **options)
        self._limit = int(limit)
        self._weight = _core.check_weight(weight, self._limit)

    @property
    def weight(self) -> int:
        """The permits each hold takes."""
        return self._weight or 1

    @property
    def limit(self) -> int:
        return int(self._limit or 0)


class RWLock:
    """``read_lock()`` (shared) and ``write_lock()`` (exclusive) on one key,
    with one owner per thread (per RWLock with ``thread_local=False``)."""

    def __init__(self, redis: Any, name: Any, timeout: Number | None = None, **options: Any) -> None:
        self.redis = redis
        self.name = name
        thread_local = options.get("thread_local", True)
        self._owners: Any = threading.local() if thread_local else SimpleNamespace()
        self._read = ReadLock(redis, name, timeout, **options)
        self._write = Lock(redis, name, timeout, **options)
        self._read._owner_source = self._owner
        self._write._owner_source = self._owner

    def _owner(self) -> bytes:
        owner = getattr(self._owners, "owner", None)
        if owner is None:
            owner = _core.new_owner()
            self._owners.owner = owner
        return owner

    def read_lock(self) -> Lock:
        return self._read

    def write_lock(self) -> Lock:
        return self._write

    async def __aenter__(self) -> Lock:
        """``async with rwlock:`` takes the write (exclusive) lock."""
        return await self._write.__aenter__()

    async def __aexit__(self, *exc: Any) -> None:
        await self._write.__aexit__(*exc)


class MultiLock(Lock):
    """Every key of ``names`` in one atomic step, or none (``DLOCK.MACQUIRE``)."""

    _multi = True

    def __init__(
        self,
        redis: Any,
        names: Sequence[Any],
        timeout: Number | None = None,
        *,
        shared: bool = False,
        limit: int | None = None,
        weight: int | None = None,
        **options: Any,
    ) -> None:
        if not names:
            raise ValueError("a MultiLock needs at least one key")
        if limit is not None and not shared:
            raise ValueError("limit needs shared=True")
        if options.get("fair"):
            raise ValueError("DLOCK.MACQUIRE has no fair mode")
        super().__init__(redis, list(names), timeout, **options)
        self.names = list(names)
        self._shared = shared
        self._limit = limit
        self._weight = _core.check_weight(weight, limit)

    @property
    def _keys(self) -> list[KeyT]:
        return self.names

    @property
    def fence(self) -> list[int] | None:  # type: ignore[override]
        hold = self._hold()
        return list(hold.fences) if hold is not None else None


class Latch:
    """The asyncio count-down latch; ``async with latch`` counts down on exit."""

    def __init__(self, redis: Any, name: Any) -> None:
        self.redis = redis
        self.name = name

    async def try_set_count(self, count: int, timeout: Number) -> bool:
        return bool(await _once(self.redis, ["DLOCK.LATCH", self.name, int(count), _core.seconds_to_ms(timeout)]))

    async def count_down(self, n: int = 1) -> int:
        return int(await _once(self.redis, ["DLOCK.COUNTDOWN", self.name, int(n)]))

    async def count(self) -> int | None:
        """The count now; None when the latch does not exist."""
        info = _core.parse_info(await self.redis.execute_command("DLOCK.INFO", self.name))
        return int(info["count"]) if info is not None else None

    async def wait(self, timeout: Number | None = None) -> bool:
        if timeout is None:
            block_ms, socket_timeout = 0, None
        else:
            block_ms = _core.seconds_to_ms(timeout)
            socket_timeout = timeout + WAIT_MARGIN
        reply = (
            await _within(
                call_on_own_connection(self.redis, [["DLOCK.AWAIT", self.name, block_ms]], socket_timeout),
                socket_timeout,
            )
        )[0]
        if isinstance(reply, ResponseError):
            raise reply
        if reply is None:
            return False
        if int(reply) == 0:
            raise LatchBrokenError("the latch disappeared without opening")
        return True

    async def __aenter__(self) -> Latch:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.count_down()


class Leadership:
    """What a won campaign holds (see ``dlock.Leadership``): ``term`` is the
    fencing token; stop leading as soon as ``lost`` is set, and pass the
    term to what the leader writes. ``async with`` resigns on exit."""

    def __init__(self, lock: Lock, value: bytes) -> None:
        self.lock = lock
        self.value = value
        hold = lock._hold()
        self.owner: bytes = hold.owner if hold is not None else b""
        self.term: int = int(lock.fence or 0)
        self._lost = lock.lost
        self._resigned = False

    @property
    def lost(self) -> LostEvent:
        return self._lost

    def is_leader(self) -> bool:
        return not self._resigned and not self._lost.is_set()

    async def resign(self) -> None:
        """Releases the election's lock (the next candidate leads in the
        same step); twice, or after the leadership was lost, is no error."""
        if self._resigned:
            return
        self._resigned = True
        was_lost = self._lost.is_set()
        try:
            await self.lock.release()
        except LockError:
            if not was_lost:
                raise

    async def __aenter__(self) -> Leadership:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.resign()

    def __repr__(self) -> str:
        return f"Leadership(value={self.value!r}, term={self.term}, leader={self.is_leader()})"


class Observer:
    """The leadership changes of an election as an async iterator (see
    ``dlock.Observer``): who leads now, then each change, the newest state
    each time. Cancelling a task waiting in ``__anext__`` (or ``aclose()``)
    ends the wait on the server with ``CLIENT UNBLOCK``."""

    def __init__(self, election: Election) -> None:
        self.election = election
        self.last_term: int | None = None
        self._closed = False
        self._waiting_id: int | None = None
        self._waiting_client: Any = None  # the node of the wait (Cluster)

    def __aiter__(self) -> Observer:
        return self

    async def __anext__(self) -> _core.Leader | None:
        if self._closed:
            raise StopAsyncIteration
        if self.last_term is None:
            state = await self.election.leader()
        else:
            attempt = 0
            while True:
                try:
                    state = await self._watch(self.last_term)
                except ResponseError as error:  # MOVED: the key's slot moved
                    attempt += 1
                    if attempt < _cluster.ATTEMPTS and await _cluster.aredirected(self.election.redis, error, attempt):
                        continue
                    raise
                if self._closed:
                    raise StopAsyncIteration
                if state is not _core.WATCH_TIMED_OUT:
                    break
        self.last_term = state.term if state is not None else 0
        return state

    async def _watch(self, last: int) -> Any:
        client = await _cluster.anode_client(self.election.redis, self.election.name)
        wait = self.election.watch_timeout
        pool = client.connection_pool
        conn = await _pool_connection(pool)
        clean = False
        try:
            await conn.send_packed_command(
                conn.pack_commands([["CLIENT", "ID"], _core.watch_args(self.election.name, last, wait)])
            )
            client_id = int(await conn.read_response(timeout=wait + WAIT_MARGIN))
            if self._closed:  # aclose() looked before this wait began: end it here
                return _core.WATCH_TIMED_OUT  # (the connection is closed below)
            self._waiting_id, self._waiting_client = client_id, client
            try:
                reply = await conn.read_response(timeout=wait + WAIT_MARGIN)
            except asyncio.CancelledError:
                # The wait goes on in the server: end it, and read the reply
                # it provokes so that the connection can be used again.
                clean = await asyncio.shield(self._unblock(client, conn, client_id))
                raise
            finally:
                self._waiting_id = None
            clean = True
            return _core.parse_watch(reply)
        except ResponseError:
            clean = True
            raise
        finally:
            if not clean:
                try:
                    await asyncio.shield(conn.disconnect())
                except BaseException:  # closing is best effort
                    pass
            await pool.release(conn)

    async def _unblock(self, client: Any, conn: Any, client_id: int) -> bool:
        try:
            await client.execute_command("CLIENT", "UNBLOCK", client_id)  # on the wait's node
            await conn.read_response(timeout=WAIT_MARGIN)
            return True
        except Exception:
            return False

    async def aclose(self) -> None:
        """Ends the iteration; a wait in progress in another task returns
        at once."""
        self._closed = True
        end = time.monotonic() + self.election.watch_timeout + WAIT_MARGIN
        while time.monotonic() < end:
            waiting, node = self._waiting_id, self._waiting_client
            if waiting is None:
                return
            if int(await node.execute_command("CLIENT", "UNBLOCK", waiting)) == 1:  # on the wait's node
                return
            await asyncio.sleep(0.005)  # sent, not blocked yet: try again

    async def __aenter__(self) -> Observer:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class Election:
    """Leader election for ``redis.asyncio`` (see ``dlock.Election``)."""

    def __init__(
        self,
        redis: Any,
        name: Any,
        timeout: Number | None = None,
        *,
        watchdog_timeout: Number = DEFAULT_WATCHDOG_TIMEOUT,
        session: bool = False,
        watch_timeout: Number = _core.DEFAULT_WATCH_TIMEOUT,
    ) -> None:
        self.redis = redis
        self.name = name
        self.timeout = timeout
        self.watchdog_timeout = watchdog_timeout
        self.session = session
        self.watch_timeout = float(watch_timeout)

    async def campaign(self, value: Any, timeout: Number | None = None) -> Leadership | None:
        """Waits to lead, announcing ``value``; None when ``timeout``
        seconds pass first. Cancelling it leaves nothing queued or held."""
        raw = _core.as_bytes(value)
        owner = _core.election_owner(raw)
        lock = Lock(
            self.redis,
            self.name,
            self.timeout,
            thread_local=False,
            watchdog_timeout=self.watchdog_timeout,
            session=self.session,
        )
        if timeout is not None and timeout <= 0:
            granted = await lock.acquire(blocking=False, token=owner)
        else:
            granted = await lock.acquire(blocking=True, blocking_timeout=timeout, token=owner)
        return Leadership(lock, raw) if granted else None

    async def leader(self) -> _core.Leader | None:
        """Who leads now, or None between terms."""
        return _core.leader_of_info(_core.parse_info(await self.redis.execute_command("DLOCK.INFO", self.name)))

    def observe(self) -> Observer:
        """An async iterator of the leadership changes."""
        return Observer(self)

"""The threaded client: ``Lock`` (a drop-in for ``redis.lock.Lock``),
``RWLock``, ``Semaphore``, ``MultiLock`` and ``Latch``."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from types import SimpleNamespace, TracebackType
from typing import Any, Callable

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

logger = logging.getLogger("dlock")

_UNCHANGED = object()


def _pool_connection(pool: Any) -> Any:
    try:
        return pool.get_connection()
    except TypeError:  # redis-py before 5.3 wants a command name
        return pool.get_connection("DLOCK")


def _connection_within(pool: Any, seconds: float) -> Any:
    """A connection of ``pool`` within ``seconds`` (R4.6): a paused server
    answers no handshake, and redis-py's connect retries for seconds. An
    idle connection is taken at once; a new one is opened by a thread,
    which puts it back into the pool if the caller gave up
    (``redis.exceptions.TimeoutError``, nothing sent). A pool of another
    kind is left to the library's own settings."""
    idle = getattr(pool, "_available_connections", None)
    if not isinstance(idle, list) or (idle and getattr(idle[-1], "_sock", None) is not None):
        return _pool_connection(pool)  # the pool's next one is connected
    outcome: dict[str, Any] = {}
    guard = threading.Lock()
    ready = threading.Event()

    def take() -> None:
        try:
            conn = _pool_connection(pool)
        except BaseException as error:  # handed to the caller
            outcome["error"] = error
            ready.set()
            return
        with guard:
            if outcome.get("gave_up"):
                pool.release(conn)  # connected after all: for the next call
                return
            outcome["conn"] = conn
        ready.set()

    threading.Thread(target=take, name="dlock-connect", daemon=True).start()
    ready.wait(max(0.0, seconds))
    with guard:
        if "conn" in outcome:
            return outcome["conn"]
        if "error" in outcome:
            raise outcome["error"]
        outcome["gave_up"] = True
    raise RedisTimeoutError(f"Timeout connecting to server (within {seconds:.3f} s)")


def call_on_own_connection(client: Any, commands: Sequence[Sequence[Any]], timeout: Any = _UNCHANGED) -> list[Any]:
    """Sends ``commands`` on a connection taken from ``client``'s pool for
    this call alone, with a socket timeout of ``timeout`` seconds (None: no
    timeout) while it waits for the replies, and returns the replies (an
    error reply is returned as its ``ResponseError``).

    A blocked ``BLOCK`` wait or a renewal on it never queues behind, nor
    delays, the commands of other threads. On any failure other than an
    error reply (a timeout, a dropped connection, KeyboardInterrupt) the
    connection is closed, so the server forgets a waiter it had queued.

    The connection is taken within ``CONNECT_PATIENCE`` seconds (and within
    ``timeout``), and ``timeout`` counts from the call's start: the whole
    call ends by then (R4.6)."""
    if _cluster.is_cluster(client):  # by slot, redirections followed: dlock/_cluster.py
        return _cluster.call(client, commands, timeout, call_on_own_connection)
    pool = client.connection_pool
    bounded = timeout is not _UNCHANGED and timeout is not None
    end = time.monotonic() + timeout if bounded else None
    conn = _connection_within(pool, min(CONNECT_PATIENCE, timeout) if bounded else CONNECT_PATIENCE)
    try:
        if len(commands) == 1:
            conn.send_command(*commands[0])
        else:
            conn.send_packed_command(conn.pack_commands(commands))
        sock = conn._sock
        if timeout is not _UNCHANGED and sock is not None:
            sock.settimeout(max(0.001, end - time.monotonic()) if end is not None else None)
        replies: list[Any] = []
        try:
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except ResponseError as error:
                    replies.append(error)
        finally:
            sock = conn._sock
            if timeout is not _UNCHANGED and sock is not None:
                sock.settimeout(conn.socket_timeout)
        return replies
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


class LostEvent(threading.Event):
    """``lock.lost``: set when the hold is known to be gone, by a
    ``NOTOWNER`` reply to a renewal (or to ``extend``, ``reacquire``,
    ``release``), or when the lease deadline passed on the monotonic clock
    without a successful renewal. ``is_set()`` and ``wait()`` check that
    deadline themselves, so a lock without a watchdog needs no thread."""

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

    isSet = is_set

    def wait(self, timeout: float | None = None) -> bool:
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.is_set():
                return True
            now = time.monotonic()
            if end is not None and now >= end:
                return False
            limits = [t for t in (end, self.deadline.at) if t is not None]
            if super().wait(max(0.0, min(limits) - now) if limits else None):
                return True


class _Local(threading.local):
    """Per-thread hold state; every thread starts with no token."""

    token: bytes | None = None
    hold: _Hold | None = None
    lost: LostEvent | None = None
    #: The owner of a ``fair`` try that was not granted: the next try asks
    #: under it again, keeping its place in the queue (R8).
    fair_owner: bytes | None = None


class _Shared(SimpleNamespace):
    """The same state shared by every thread (``thread_local=False``)."""

    token: bytes | None = None
    hold: _Hold | None = None
    lost: LostEvent | None = None
    #: The owner of a ``fair`` try that was not granted: the next try asks
    #: under it again, keeping its place in the queue (R8).
    fair_owner: bytes | None = None


class _Hold:
    """One owner's hold on the lock's keys, as this process knows it."""

    def __init__(self, owner: bytes, nkeys: int, lease_ms: int) -> None:
        self.owner = owner
        self.fences: list[int] = [0] * nkeys
        self.counts: list[int] = [0] * nkeys
        self.lease_ms = lease_ms
        self.lost = LostEvent()
        self.watchdog: _Watchdog | None = None

    def stop_watchdog(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
            self.watchdog = None


class _Watchdog(threading.Thread):
    """Renews a hold every third of its lease until stopped; sets ``lost``
    on NOTOWNER or when the deadline passes without a successful renewal.
    Each renewal uses a connection of its own with a socket timeout that
    ends at the deadline, so a stuck connection cannot hide a lost lock."""

    def __init__(self, lock: Lock, hold: _Hold) -> None:
        super().__init__(name=f"dlock-watchdog:{lock.name!r}", daemon=True)
        self.lock = lock
        self.hold = hold
        self.stopped = threading.Event()

    def stop(self) -> None:
        self.stopped.set()

    def run(self) -> None:
        hold = self.hold
        lease = hold.lease_ms / 1000
        interval = lease / 3
        next_at = time.monotonic() + interval
        while True:
            deadline = hold.lost.deadline.at
            wake = next_at if deadline is None else min(next_at, deadline)
            if self.stopped.wait(max(0.0, wake - time.monotonic())):
                return
            now = time.monotonic()
            if hold.lost.deadline.passed():
                hold.lost.lose("the lease deadline passed without a successful renewal")
                return
            if now < next_at:
                continue
            remaining = hold.lost.deadline.remaining()
            try:
                replies = self.lock._renew(hold, hold.lease_ms, timeout=max(0.01, remaining or lease))
            except Exception as error:  # a dropped connection: try again soon (R2.6)
                logger.debug("dlock: renewal of %r failed: %s", self.lock.name, error)
                next_at = time.monotonic() + min(interval, 0.05)
                continue
            if self.stopped.is_set():
                return
            lost, refused = _core.judge_renewal(replies, hold.fences)
            if lost is not None:
                hold.lost.lose(lost)
                return
            if refused is not None:
                logger.warning("dlock: renewal of %r refused: %s", self.lock.name, refused)
                next_at = time.monotonic() + min(interval, 0.05)
                continue
            if hold.lost.is_set():
                return  # the deadline passed while the renewal was in flight: lost for good (R3.3)
            hold.lost.deadline.at = _core.local_deadline(now, hold.lease_ms)
            next_at = now + interval


class Lock:
    """A dlock lock with the interface of ``redis.lock.Lock``:
    ``r.lock(name, ..., lock_class=dlock.Lock)``.

    ``timeout`` (seconds) is the lease of each hold; ``None`` gives a lease
    of ``watchdog_timeout`` seconds renewed by a watchdog thread every third
    of it (``auto_renewal`` turns the watchdog on or off explicitly). The
    ``token`` of ``acquire`` is the hold's owner. Blocking waits wait in the
    lock's queue in the server (``BLOCK``), so ``sleep`` is accepted and
    ignored. ``fair`` uses ``DLOCK.FAIR`` (a place kept in the queue between
    tries) and ``session`` ties the hold to the connection that acquired it.
    """

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
        self.local.token = None
        self._owner_source: Callable[[], bytes] | None = None

    # -- what the subclasses change -------------------------------------

    @property
    def _keys(self) -> list[KeyT]:
        return [self.name]

    def _lease_ms(self) -> int:
        # redis-py: a timeout of 0 or None means no expiry; here, a renewed lease.
        return _core.lease_to_ms(self.timeout if self.timeout else self.watchdog_timeout)

    # -- per-thread state ------------------------------------------------

    def _hold(self) -> _Hold | None:
        hold = getattr(self.local, "hold", None)
        if hold is not None and self.local.token == hold.owner:
            return hold
        return None

    def _forget(self, hold: _Hold) -> None:
        hold.stop_watchdog()
        if not hold.lost.is_set():
            hold.lost.deadline.at = None  # given back, not lost
        if getattr(self.local, "hold", None) is hold:
            self.local.hold = None
            self.local.token = None

    # -- context manager -------------------------------------------------

    def __enter__(self) -> Lock:
        if self.acquire():
            return self
        raise LockError("Unable to acquire lock within the time specified")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self.release()
        except LockError:
            if self.raise_on_release_error:
                raise
            logger.warning("Lock was unlocked or no longer owned when exiting context manager.")

    # -- the redis-py interface ------------------------------------------

    def acquire(
        self,
        sleep: Number | None = None,
        blocking: bool | None = None,
        blocking_timeout: Number | None = None,
        token: Any | None = None,
    ) -> bool:
        """Takes the lock; True once held, False when not granted (at once
        without ``blocking``, or within ``blocking_timeout`` seconds)."""
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
                block_ms = 0  # forever
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
                    reply = self._once(args)
                else:
                    reply = call_on_own_connection(self.redis, [args], socket_timeout)[0]
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
                sent = time.monotonic()  # the lease began when the wait ended
            if same and current is not None:
                hold = current
            else:
                if current is not None:
                    self._forget(current)  # redis-py keeps only the latest token too
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
                hold.watchdog = _Watchdog(self, hold)
                hold.watchdog.start()
            return True
        except (ResponseError, LockError):
            raise
        except BaseException:
            # Interrupted (KeyboardInterrupt, a dropped connection) while the
            # grant may have been made: give back whatever this call got.
            if hold is not None:
                if same:
                    hold.counts = list(before)
                else:
                    self._forget(hold)
            # R4.4, R5.3 (a read timeout included): give back whatever the
            # call may have been granted, in a thread of its own (R4.7): the
            # caller and its next call never wait for a stalled server. Not
            # a daemon: the interpreter's exit waits for it (bounded).
            threading.Thread(target=self._abandon, args=(owner, before), name=f"dlock-cleanup:{self.name!r}").start()
            raise

    def _abandon(self, owner: bytes, before: list[int]) -> None:
        """After an interrupted acquire (its connection closed): waits until
        the server dropped the waiter, then gives back any hold granted in
        the meantime, so that nothing of the call is left behind. Bounded
        by ``CLEANUP_PATIENCE`` (each read by what is left of it)."""
        end = time.monotonic() + CLEANUP_PATIENCE
        for i, key in enumerate(self._keys):
            try:
                while True:
                    left = max(0.01, end - time.monotonic())
                    reply = call_on_own_connection(self.redis, [["DLOCK.INFO", key]], left)[0]
                    if isinstance(reply, ResponseError):
                        raise reply
                    info = _core.parse_info(reply)
                    if not _core.info_queued(info, owner) or time.monotonic() > end:
                        break
                    time.sleep(CLEANUP_POLL)
                exclusive, shared, _pttl = _core.info_holds(info, owner)
                extra = (shared if self._shared else exclusive) - before[i]
                for _ in range(max(0, extra)):
                    left = max(0.01, end - time.monotonic())
                    call_on_own_connection(self.redis, [_core.release_args(key, owner, self._shared)], left)
            except Exception as error:  # the lease ends the hold anyway
                logger.warning("dlock: clean-up of an interrupted wait on %r failed: %s", key, error)

    def _once(self, args: Sequence[Any]) -> Any:
        """Sends a command that must not be sent twice (R5.1: ACQUIRE,
        RELEASE, ...) on a pool connection, outside redis-py's retries
        (which re-send a command after a connection error or a read
        timeout). An error reply is raised."""
        reply = call_on_own_connection(self.redis, [args])[0]
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    def do_acquire(self, token: Any) -> bool:
        """One try without waiting (redis-py's hook)."""
        return self.acquire(blocking=False, token=token)

    def locked(self) -> bool:
        """True if any owner holds the lock (any of the keys of a MultiLock)."""
        return any(
            _core.info_locked(_core.parse_info(self.redis.execute_command("DLOCK.INFO", key))) for key in self._keys
        )

    def owned(self) -> bool:
        """True if this lock (this thread's hold) holds every key now."""
        hold = self._hold()
        if hold is None:
            return False
        for key in self._keys:
            info = _core.parse_info(self.redis.execute_command("DLOCK.INFO", key))
            exclusive, shared, _pttl = _core.info_holds(info, hold.owner)
            if (shared if self._shared else exclusive) == 0:
                return False
        return True

    def release(self) -> None:
        """Gives back one hold (re-entered holds need one release each).
        Raises where redis-py's ``Lock.release`` raises (R3.4): ``LockError``
        when this thread holds no token; ``LockNotOwnedError`` when the
        server says the token's owner holds nothing (the lease ran out, the
        key was deleted, another owner holds it), whether or not the hold
        was already known lost. A lost hold the server kept is given back
        without error."""
        token = self.local.token
        if token is None:
            raise LockError("Cannot release an unlocked lock")
        hold = self._hold()
        if hold is None:
            # ``local.token`` was replaced: release by that token, as redis-py does.
            self.local.token = None
            self.do_release(token)
            return
        lost = hold.lost.is_set()
        if lost or max(hold.counts) <= 1:
            self._forget(hold)  # as redis-py: the token is dropped first
        try:
            self.do_release(hold.owner)
        except (ResponseError, LockNotOwnedError):
            # As redis-py: a release the server refuses raises, so that code
            # learns its critical section overran (R3.4: the familiar API wins).
            hold.lost.lose("NOTOWNER: the lock is held by nobody or another owner")
            self._forget(hold)
            raise
        hold.counts = [max(0, c - 1) for c in hold.counts]

    def do_release(self, expected_token: Any) -> None:
        """Gives back one hold of the owner ``expected_token`` on every key
        (redis-py's hook: ``release`` calls it with this thread's token);
        ``LockNotOwnedError`` when that owner holds none."""
        owner = _core.as_bytes(expected_token)
        errors = self._release_keys(owner)
        if any(_core.is_notowner(e) for e in errors):
            raise LockNotOwnedError("Cannot release a lock that's no longer owned")
        if errors:
            raise errors[0]

    def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        """Adds ``additional_time`` seconds to the lease (or makes it the
        lease with ``replace_ttl``)."""
        hold = self._hold()
        if hold is None:
            raise LockError("Cannot extend an unlocked lock")
        if self.timeout is None:
            raise LockError("Cannot extend a lock with no timeout")
        return self.do_extend(additional_time, replace_ttl)

    def do_extend(self, additional_time: Number, replace_ttl: bool) -> bool:
        hold = self._hold()
        if hold is None:
            raise LockError("Cannot extend an unlocked lock")
        if hold.lost.is_set():
            raise LockLostError("Cannot extend a lock that was lost")
        extra_ms = int(additional_time * 1000)
        if replace_ttl:
            ttl_ms = extra_ms
        else:
            info = _core.parse_info(self.redis.execute_command("DLOCK.INFO", self._keys[0]))
            _e, _s, pttl = _core.info_holds(info, hold.owner)
            if pttl < 0:
                hold.lost.lose("NOTOWNER: the lock is held by nobody or another owner")
                hold.stop_watchdog()
                raise LockLostError("Cannot extend a lock that's no longer owned")
            ttl_ms = pttl + extra_ms
        self._renew_or_raise(hold, ttl_ms, "Cannot extend a lock that's no longer owned")
        return True

    def reacquire(self) -> bool:
        """Resets the lease to ``timeout``."""
        hold = self._hold()
        if hold is None:
            raise LockError("Cannot reacquire an unlocked lock")
        if self.timeout is None:
            raise LockError("Cannot reacquire a lock with no timeout")
        return self.do_reacquire()

    def do_reacquire(self) -> bool:
        hold = self._hold()
        if hold is None:
            raise LockError("Cannot reacquire an unlocked lock")
        self._renew_or_raise(hold, self._lease_ms(), "Cannot reacquire a lock that's no longer owned")
        return True

    # -- beyond redis-py -------------------------------------------------

    @property
    def fence(self) -> int | None:
        """The fencing token of this thread's hold (None when not held).
        Tokens only grow: pass it to the resource, which refuses older ones."""
        hold = self._hold()
        return hold.fences[0] if hold is not None else None

    @property
    def lost(self) -> LostEvent:
        """Set when the current (or last) hold is known to be gone."""
        event = getattr(self.local, "lost", None)
        if event is None:
            event = LostEvent()
            self.local.lost = event
        return event

    def renew(self) -> None:
        """Resets the lease now (what the watchdog does)."""
        hold = self._hold()
        if hold is None:
            raise LockError("Cannot renew an unlocked lock")
        self._renew_or_raise(hold, hold.lease_ms, "Cannot renew a lock that's no longer owned")

    # -- commands --------------------------------------------------------

    def _renew(self, hold: _Hold, ttl_ms: int, timeout: Any = _UNCHANGED) -> list[Any]:
        """One ``DLOCK.RENEW`` per key; the replies (errors included)."""
        commands = [_core.renew_args(key, hold.owner, ttl_ms) for key in self._keys]
        return call_on_own_connection(self.redis, commands, timeout)

    def _renew_or_raise(self, hold: _Hold, ttl_ms: int, message: str) -> None:
        if hold.lost.is_set():
            raise LockLostError(message)  # R3.4: a lost hold stays lost
        sent = time.monotonic()
        # R4.6: a renewal by hand waits for its reply until the hold's local
        # deadline at the latest, and fails with LockLostError once that
        # has passed.
        remaining = hold.lost.deadline.remaining()
        try:
            replies = self._renew(hold, ttl_ms, _UNCHANGED if remaining is None else max(0.001, remaining))
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

    def _release_keys(self, owner: bytes) -> list[ResponseError]:
        commands = [_core.release_args(key, owner, self._shared) for key in self._keys]
        replies = call_on_own_connection(self.redis, commands)  # never re-sent (R5.1)
        return [r for r in replies if isinstance(r, ResponseError)]


class ReadLock(Lock):
    """The shared side of an ``RWLock``."""

    _shared = True


class Semaphore(Lock):
    """``limit`` permits (``SHARED LIMIT n``); each ``acquire`` takes
    ``weight`` of them (1 by default; ``WEIGHT w``) with its own owner,
    lease and token. The queue is FIFO: a heavy request at its head is
    never passed by lighter ones."""

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
        """The permits each hold takes (``weight=``, ``WEIGHT w``): the
        holds' weights add up to at most ``limit``, in FIFO order."""
        return self._weight or 1

    @property
    def limit(self) -> int:
        return int(self._limit or 0)


class RWLock:
    """A read-write lock: ``read_lock()`` (shared) and ``write_lock()``
    (exclusive) on one key and one queue. Both sides of one RWLock use one
    owner per thread (per RWLock with ``thread_local=False``), so a thread
    holding the write lock can take the read lock and release the write
    lock (downgrade), and a sole reader can take the write lock (upgrade)."""

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

    def __enter__(self) -> Lock:
        """``with rwlock:`` takes the write (exclusive) lock."""
        return self._write.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._write.__exit__(*exc)


class MultiLock(Lock):
    """Every key of ``names`` in one atomic step (``DLOCK.MACQUIRE``), or
    none; with blocking, a wait in every key's queue at once, so locking
    overlapping key sets in any order cannot deadlock. ``fence`` is the
    list of tokens, one per key."""

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

    def do_extend(self, additional_time: Number, replace_ttl: bool) -> bool:
        if not replace_ttl:
            raise LockError("A MultiLock extends with replace_ttl=True only")
        return super().do_extend(additional_time, replace_ttl)

    def _release_keys(self, owner: bytes) -> list[ResponseError]:
        commands = [_core.release_args(key, owner, self._shared) for key in self._keys]
        replies = call_on_own_connection(self.redis, commands)
        return [r for r in replies if isinstance(r, ResponseError)]


class Latch:
    """A count-down latch (``DLOCK.LATCH``/``COUNTDOWN``/``AWAIT``): one
    side sets a count, others count down, and every waiter is woken by the
    server in the instant the count reaches zero. As a context manager it
    counts down once on exit (a worker's share of the work is done)."""

    def __init__(self, redis: Any, name: Any) -> None:
        self.redis = redis
        self.name = name

    def _once(self, args: Sequence[Any]) -> Any:
        reply = call_on_own_connection(self.redis, [args])[0]  # never re-sent (R5.1)
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    def try_set_count(self, count: int, timeout: Number) -> bool:
        """Creates the latch with ``count`` for at most ``timeout`` seconds;
        False (and nothing changes) if it already exists."""
        return bool(self._once(["DLOCK.LATCH", self.name, int(count), _core.seconds_to_ms(timeout)]))

    def count_down(self, n: int = 1) -> int:
        """Lowers the count by ``n``; returns what remains (0: open)."""
        return int(self._once(["DLOCK.COUNTDOWN", self.name, int(n)]))

    def count(self) -> int | None:
        """The count now; None when the latch does not exist (it opened,
        expired or was never created). ``await latch.count()`` in
        ``dlock.asyncio``."""
        info = _core.parse_info(self.redis.execute_command("DLOCK.INFO", self.name))
        return int(info["count"]) if info is not None else None

    def wait(self, timeout: Number | None = None) -> bool:
        """True once the latch is open (at once if it does not exist), False
        when ``timeout`` seconds pass first; raises ``LatchBrokenError`` if
        the latch disappears without opening."""
        if timeout is None:
            block_ms, socket_timeout = 0, None
        else:
            block_ms = _core.seconds_to_ms(timeout)
            socket_timeout = timeout + WAIT_MARGIN
        reply = call_on_own_connection(self.redis, [["DLOCK.AWAIT", self.name, block_ms]], socket_timeout)[0]
        if isinstance(reply, ResponseError):
            raise reply
        if reply is None:
            return False
        if int(reply) == 0:
            raise LatchBrokenError("the latch disappeared without opening")
        return True

    def __enter__(self) -> Latch:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.count_down()


class Leadership:
    """What a won campaign holds: the election's lock, renewed by a
    watchdog. ``term`` is the hold's fencing token.

    A leader must stop acting as leader as soon as ``lost`` is set (the
    lease ran out, the key was deleted, a failover lost the grant), and pass
    ``term`` to whatever it writes, so that a resource can refuse the writes
    of a deposed leader that has not noticed yet. As a context manager it
    resigns on exit."""

    def __init__(self, lock: Lock, value: bytes) -> None:
        self.lock = lock
        #: The value this leader announced.
        self.value = value
        hold = lock._hold()
        #: The owner string of the hold (``<value>#<id>``).
        self.owner: bytes = hold.owner if hold is not None else b""
        #: The term: the fencing token of the hold.
        self.term: int = int(lock.fence or 0)
        self._lost = lock.lost
        self._resigned = False

    @property
    def lost(self) -> LostEvent:
        """Set when the leadership is known to be gone: stop leading."""
        return self._lost

    def is_leader(self) -> bool:
        """True while this process leads as far as it knows."""
        return not self._resigned and not self._lost.is_set()

    def resign(self) -> None:
        """Steps down: releases the election's lock, which hands it to the
        next candidate in the same step. Resigning twice, or resigning a
        leadership already known lost, is not an error."""
        if self._resigned:
            return
        self._resigned = True
        was_lost = self._lost.is_set()
        try:
            self.lock.release()
        except LockNotOwnedError:
            if not was_lost:
                raise
        except LockError:
            if not was_lost:
                raise

    def __enter__(self) -> Leadership:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.resign()

    def __repr__(self) -> str:
        return f"Leadership(value={self.value!r}, term={self.term}, leader={self.is_leader()})"


class Observer:
    """The leadership changes of an election, as an iterator: first who leads
    now (a ``Leader``, or None), then each new leader and each end of a term
    (None), as the server makes them (``DLOCK.WATCH``, no polling). A change
    made while nobody iterates is not queued: the next item is the newest
    state, so the latest leader is never missed nor read stale.

    Each wait runs on a connection of the pool taken for it alone. ``close()``
    (from any thread) ends the iteration and a wait in progress (``CLIENT
    UNBLOCK``); so does leaving its ``with`` block."""

    def __init__(self, election: Election) -> None:
        self.election = election
        #: The term of the last state given out (0: no leader); None before
        #: the first.
        self.last_term: int | None = None
        self._closed = threading.Event()
        self._guard = threading.Lock()
        self._waiting_id: int | None = None
        self._waiting_client: Any = None  # the node of the wait (Cluster)

    def __iter__(self) -> Observer:
        return self

    def __next__(self) -> _core.Leader | None:
        if self._closed.is_set():
            raise StopIteration
        if self.last_term is None:
            state = self.election.leader()
        else:
            attempt = 0
            while True:
                try:
                    state = self._watch(self.last_term)
                except ResponseError as error:  # MOVED: the key's slot moved
                    attempt += 1
                    if attempt < _cluster.ATTEMPTS and _cluster.redirected(self.election.redis, error, attempt):
                        continue
                    raise
                if self._closed.is_set():
                    raise StopIteration
                if state is not _core.WATCH_TIMED_OUT:
                    break
        self.last_term = state.term if state is not None else 0
        return state

    def _watch(self, last: int) -> Any:
        client = _cluster.node_client(self.election.redis, self.election.name)
        wait = self.election.watch_timeout
        pool = client.connection_pool
        conn = _pool_connection(pool)
        try:
            conn.send_packed_command(
                conn.pack_commands([["CLIENT", "ID"], _core.watch_args(self.election.name, last, wait)])
            )
            sock = conn._sock
            if sock is not None:
                sock.settimeout(wait + WAIT_MARGIN)
            with self._guard:
                self._waiting_id = int(conn.read_response())
                self._waiting_client = client
                closed = self._closed.is_set()
            if closed:  # close() looked before this wait began: end it here
                with self._guard:
                    self._waiting_id = None
                conn.disconnect()
                return _core.WATCH_TIMED_OUT
            try:
                reply = conn.read_response()
            finally:
                with self._guard:
                    self._waiting_id = None
            sock = conn._sock
            if sock is not None:
                sock.settimeout(conn.socket_timeout)
            return _core.parse_watch(reply)
        except BaseException:
            conn.disconnect()  # the server forgets a wait it still had
            raise
        finally:
            pool.release(conn)

    def close(self) -> None:
        """Ends the iteration; a wait in progress in another thread returns
        at once (``CLIENT UNBLOCK``)."""
        self._closed.set()
        end = time.monotonic() + self.election.watch_timeout + WAIT_MARGIN
        while time.monotonic() < end:
            with self._guard:
                waiting, node = self._waiting_id, self._waiting_client
            if waiting is None:
                return
            if int(node.execute_command("CLIENT", "UNBLOCK", waiting)) == 1:  # on the wait's node
                return
            time.sleep(0.005)  # sent, not blocked yet: try again

    def __enter__(self) -> Observer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Election:
    """Leader election on the key ``name``: candidates ``campaign`` with a
    value (their address); the one holding the key's lock leads; anyone can
    ask who ``leader()`` is or ``observe()`` each change.

    ``timeout`` is the leader's lease in seconds; None (the default) gives a
    lease of ``watchdog_timeout`` seconds renewed by a watchdog while the
    leader lives. ``session`` ties the leadership to its connection, so the
    server ends the term as soon as the leader's process dies.
    ``watch_timeout`` is how long each wait of an observer lasts on the
    server before it asks again (its socket waits ``WAIT_MARGIN`` more).

    A campaign holds the lock under the owner ``<value>#<32 hex digits>``
    (a new id per campaign), as every dlock client does."""

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

    def campaign(self, value: Any, timeout: Number | None = None) -> Leadership | None:
        """Waits to lead, announcing ``value`` (str or bytes, 1 to 479
        bytes): queues for the lock under a new unique owner and returns the
        ``Leadership`` once granted, or None when ``timeout`` seconds pass
        first (None: wait as long as it takes). Candidates lead in the order
        they campaigned."""
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
            granted = lock.acquire(blocking=False, token=owner)
        else:
            granted = lock.acquire(blocking=True, blocking_timeout=timeout, token=owner)
        return Leadership(lock, raw) if granted else None

    def leader(self) -> _core.Leader | None:
        """Who leads now, or None between terms."""
        return _core.leader_of_info(_core.parse_info(self.redis.execute_command("DLOCK.INFO", self.name)))

    def observe(self) -> Observer:
        """An iterator of the leadership changes (see ``Observer``)."""
        return Observer(self)

"""What the threaded and the asyncio clients share: the command lines they
send, the parsing of the server's replies, the errors and the time rules.

Nothing here does I/O, so both clients build the same commands and read the
same replies the same way."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Sequence
from typing import Any, NamedTuple, Union

from redis.exceptions import LockError, LockNotOwnedError, ResponseError

Number = Union[int, float]
KeyT = Union[str, bytes]

#: The lease of a hold renewed by the watchdog when no ``timeout`` is given,
#: in seconds (Redisson's ``lockWatchdogTimeout``).
DEFAULT_WATCHDOG_TIMEOUT = 30.0

#: How much longer than a ``BLOCK`` wait the socket of the waiting connection
#: waits for the reply, in seconds: the server answers a timed-out waiter
#: itself, so the socket timeout only catches a dead connection. A whole
#: wait (the connection taken from the pool included) ends within its wait
#: plus this (R4.2, R4.6: at most 2 s).
WAIT_MARGIN = 2.0

#: How long dlock lets the library connect a pool connection for one of
#: dlock's calls (its handshake and its own retries included), in seconds,
#: before the call fails with ``redis.exceptions.TimeoutError``: a stalled
#: or stopped server never holds a caller longer than that before a command
#: is even sent (R4.6).
CONNECT_PATIENCE = 2.0

#: How long an interrupted wait may take to clean up after itself (to see
#: its waiter leave the queue and to release a grant that raced with the
#: interruption), in seconds.
CLEANUP_PATIENCE = 10.0

#: How often the clean-up of an interrupted wait looks at the queue.
CLEANUP_POLL = 0.005


class DeadlockError(LockError):
    """The server refused an upgrade that would wait for another upgrader
    (reply ``DEADLOCK``): a second owner holding the lock shared asked for
    it exclusively with ``BLOCK`` while a first one already waits."""


class LockLostError(LockNotOwnedError):
    """The hold was lost (docs/clients.md R3): a renewal found the lock gone
    or held under another token, or no renewal succeeded before the local
    deadline. Every operation on a lost hold but ``release`` raises it; it
    is a ``LockNotOwnedError``, which redis-py's users already catch."""


class LatchBrokenError(LockError):
    """The latch disappeared without opening while it was awaited (its
    ``ttl`` ended, or it was deleted)."""


def new_owner() -> bytes:
    """A fresh owner name for a hold, as redis-py makes a fresh token."""
    return uuid.uuid4().hex.encode()


def seconds_to_ms(seconds: Number) -> int:
    """A lease or a wait in whole milliseconds, at least 1."""
    if seconds < 0:
        raise ValueError("a time in seconds must not be negative")
    return max(1, int(seconds * 1000))


# The largest lease every client and the server hold exactly (R2.1).
MAX_LEASE_MS = 2**53 - 1
# An owner is 1 to 512 bytes (R1.3).
MAX_OWNER_LEN = 512


def lease_to_ms(seconds: Number) -> int:
    """A lease in whole milliseconds: refused (ValueError, TypeError)
    unless it is 1 ms to 2^53-1 ms, never changed into another value
    (R9.2)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"a lease is a number of seconds, not {type(seconds).__name__}")
    if not math.isfinite(seconds) or seconds * 1000 < 1:
        raise ValueError(f"a lease must be at least 1 ms, not {seconds!r} s")
    ms = int(seconds * 1000)
    if ms > MAX_LEASE_MS:
        raise ValueError(f"a lease must be at most 2^53-1 ms, not {seconds!r} s")
    return ms


def check_owner(owner: bytes) -> None:
    """R1.3: never send ``*`` (the server would generate an owner the
    client does not know) nor an owner outside 1 to 512 bytes."""
    if owner == b"*" or not 1 <= len(owner) <= MAX_OWNER_LEN:
        raise ValueError(f"an owner is 1 to {MAX_OWNER_LEN} bytes and not '*'")


def check_keys(keys: Sequence[Any]) -> None:
    """A key is never None (redis-py would send it as nothing at all)."""
    if any(key is None for key in keys):
        raise TypeError("a key must be str or bytes, not None")


def as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, memoryview):
        return value.tobytes()
    return str(value).encode()


def acquire_args(
    keys: Sequence[KeyT],
    owner: bytes,
    ttl_ms: int,
    *,
    multi: bool,
    fair: bool,
    shared: bool,
    limit: int | None,
    block_ms: int | None,
    session: bool,
    weight: int | None = None,
) -> list[Any]:
    """The command that asks for a hold (one key, or all of ``keys``)."""
    check_keys(keys)
    check_owner(owner)
    if multi:
        args: list[Any] = ["DLOCK.MACQUIRE", len(keys), *keys, owner, ttl_ms]
    else:
        args = ["DLOCK.FAIR" if fair else "DLOCK.ACQUIRE", keys[0], owner, ttl_ms]
    if shared:
        args.append("SHARED")
        if limit is not None:
            args += ["LIMIT", limit]
            if weight is not None:
                args += ["WEIGHT", weight]
    if block_ms is not None:
        args += ["BLOCK", block_ms]
    if session:
        args.append("SESSION")
    return args


def release_args(key: KeyT, owner: bytes, shared: bool) -> list[Any]:
    args: list[Any] = ["DLOCK.RELEASE", key, owner]
    if shared:
        args.append("SHARED")
    return args


def renew_args(key: KeyT, owner: bytes, ttl_ms: int) -> list[Any]:
    return ["DLOCK.RENEW", key, owner, ttl_ms]


def safety_margin(lease_ms: int) -> float:
    """R3.2's margin, in seconds: 5 ms plus 1% of the lease (the clocks of
    client and server may run at slightly different rates)."""
    return 0.005 + lease_ms / 100_000


def local_deadline(sent: float, lease_ms: int) -> float:
    """When a hold granted or renewed by a command sent at ``sent``
    (``time.monotonic()``) counts as lost unless renewed again (R3.2)."""
    return sent + lease_ms / 1000 - safety_margin(lease_ms)


def judge_renewal(replies: Sequence[Any], fences: Sequence[int]) -> tuple[str | None, ResponseError | None]:
    """The replies of one renewal (one ``DLOCK.RENEW`` per key): (why the
    hold is lost, or None; the first other error reply, or None). Anything
    but the hold's own token for a key means lost (R3.1)."""
    lost: str | None = None
    other: ResponseError | None = None
    for reply, fence in zip(replies, fences):
        if isinstance(reply, ResponseError):
            if is_notowner(reply):
                lost = lost or "NOTOWNER: a renewal found the lock held by nobody or another owner"
            elif str(reply).startswith("WRONGTYPE"):
                lost = lost or "WRONGTYPE: the key now holds another type"
            elif other is None:
                other = reply
        elif reply is None:
            lost = lost or "a renewal replied null"
        elif int(reply) != fence:
            lost = lost or "a renewal replied another token: a new hold of the same owner name"
    return lost, other


def parse_grant(reply: Any) -> tuple[int, int]:
    """``[token, holds, owner]`` -> (token, holds)."""
    return int(reply[0]), int(reply[1])


def parse_grants(reply: Any, multi: bool) -> list[tuple[int, int]] | None:
    """The grants of an acquire, one per key, or None when not granted."""
    if reply is None:
        return None
    if multi:
        return [parse_grant(grant) for grant in reply]
    return [parse_grant(reply)]


def is_notowner(error: BaseException) -> bool:
    return isinstance(error, ResponseError) and str(error).startswith("NOTOWNER")


def is_deadlock(error: BaseException) -> bool:
    return isinstance(error, ResponseError) and str(error).startswith("DEADLOCK")


def _key(name: Any) -> str:
    return name.decode() if isinstance(name, bytes) else str(name)


def parse_info(reply: Any) -> dict[str, Any] | None:
    """``DLOCK.INFO``'s reply (flat pairs in RESP2, a map in RESP3) as a
    dict with str keys, or None for a missing key."""
    if reply is None:
        return None
    if isinstance(reply, dict):
        return {_key(name): value for name, value in reply.items()}
    return {_key(reply[i]): reply[i + 1] for i in range(0, len(reply) - 1, 2)}


def info_holds(info: dict[str, Any] | None, owner: bytes) -> tuple[int, int, int]:
    """(exclusive holds, shared holds, pttl ms or -1) of ``owner`` in a
    lock's INFO. Uses ``holders`` when the server reports it (shared holds),
    the exclusive fields otherwise."""
    if info is None:
        return 0, 0, -1
    holders = info.get("holders")
    if holders is not None:
        for entry in holders:
            if as_bytes(entry[0]) == owner:
                return int(entry[1]), int(entry[2]), int(entry[4])
        return 0, 0, -1
    if info.get("owner") is not None and as_bytes(info["owner"]) == owner:
        return int(info["holds"]), 0, int(info["pttl"])
    return 0, 0, -1


def info_locked(info: dict[str, Any] | None) -> bool:
    """Whether anyone holds the lock, in either mode."""
    if info is None:
        return False
    return info.get("owner") is not None or int(info.get("shared") or 0) > 0


def info_queued(info: dict[str, Any] | None, owner: bytes) -> bool:
    if info is None:
        return False
    return any(as_bytes(entry) == owner for entry in info.get("queue") or [])


class Deadline:
    """The monotonic instant by which a hold is known to be gone unless it
    was renewed: the time a grant or renewal was *sent* plus its lease (the
    server starts the lease later, so this errs on the early side)."""

    __slots__ = ("at",)

    def __init__(self, at: float | None = None) -> None:
        self.at = at

    def passed(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at

    def remaining(self) -> float | None:
        if self.at is None:
            return None
        return max(0.0, self.at - time.monotonic())


def check_weight(weight: int | None, limit: int | None) -> int | None:
    """A semaphore's weight (permits per hold) as the server will take it:
    1 to ``limit``, and only with a limit."""
    if weight is None:
        return None
    if limit is None:
        raise ValueError("a weight needs a limit (a semaphore)")
    weight = int(weight)
    if weight < 1 or weight > limit:
        raise ValueError(f"the weight must be 1 to the limit ({limit})")
    return weight


# -- leader election --------------------------------------------------------
#
# A campaign holds the election's key exclusively under the owner
# ``<value>#<id>``: the value the candidate announces (its address), ``#``,
# and 32 lowercase hexadecimal digits new for each campaign (a UUID v4
# without dashes). The value is the owner up to its last ``#`` (the whole
# owner when it has none). Every dlock client reads and writes it this way.

#: Separates a campaign's value from its unique id in the owner string.
OWNER_SEPARATOR = b"#"

#: The longest value a campaign can announce (an owner is at most 512 bytes;
#: the separator and the id take 33).
MAX_VALUE_LEN = 512 - 33

#: How long one ``DLOCK.WATCH`` of an observer waits on the server before it
#: asks again, in seconds; the socket waits this plus ``WAIT_MARGIN``.
DEFAULT_WATCH_TIMEOUT = 30.0


class Leader(NamedTuple):
    """Who leads an election."""

    #: The owner string of the leader's hold (``<value>#<id>``).
    owner: bytes
    #: The value the leader announced (its address, host name, ...).
    value: bytes
    #: The term: the fencing token of the leader's hold. Terms only grow.
    term: int
    #: Milliseconds left on its lease when the server answered (-1: unknown).
    pttl_ms: int

    @property
    def text(self) -> str:
        """The value as text."""
        return self.value.decode("utf-8", "replace")


def election_owner(value: Any) -> bytes:
    """The owner string of a new campaign announcing ``value``."""
    raw = as_bytes(value)
    if not 1 <= len(raw) <= MAX_VALUE_LEN:
        raise ValueError(f"a campaign's value must be 1 to {MAX_VALUE_LEN} bytes")
    return raw + OWNER_SEPARATOR + uuid.uuid4().hex.encode()


def election_value(owner: Any) -> bytes:
    """The value a campaign announced, read from its owner string."""
    raw = as_bytes(owner)
    at = raw.rfind(OWNER_SEPARATOR)
    return raw if at < 0 else raw[:at]


def make_leader(owner: Any, term: Any, pttl: Any) -> Leader:
    raw = as_bytes(owner)
    return Leader(raw, election_value(raw), int(term), int(pttl))


def leader_of_info(info: dict[str, Any] | None) -> Leader | None:
    """The leader in a parsed ``DLOCK.INFO``: the exclusive holder, or (a
    key held shared, outside an election) the holder of the newest token."""
    if info is None:
        return None
    if info.get("owner") is not None:
        return make_leader(info["owner"], info["token"], info["pttl"])
    newest: Leader | None = None
    for entry in info.get("holders") or []:
        if newest is None or int(entry[3]) > newest.term:
            newest = make_leader(entry[0], entry[3], entry[4])
    return newest


#: ``parse_watch``'s answer when the server's timeout passed unchanged.
WATCH_TIMED_OUT = object()


def watch_args(key: KeyT, last: int, timeout: Number) -> list[Any]:
    return ["DLOCK.WATCH", key, int(last), seconds_to_ms(timeout)]


def parse_watch(reply: Any) -> Any:
    """``DLOCK.WATCH``'s reply: ``WATCH_TIMED_OUT`` for null, None for
    ``[0, nil, -1]`` (no leader), the leader otherwise."""
    if reply is None:
        return WATCH_TIMED_OUT
    token, owner, pttl = reply
    if int(token) == 0 or owner is None:
        return None
    return make_leader(owner, token, pttl)

"""dlock: the Python client of the dlock Redis module.

``redis.Redis.lock(name, ..., lock_class=dlock.Lock)`` replaces redis-py's
SET NX lock with a server-side lock (FIFO queue, blocking hand-off, fencing
tokens, leases renewed by a watchdog); ``RWLock``, ``Semaphore``,
``MultiLock`` and ``Latch`` add the other primitives, ``Election`` leader
election on a lock, and ``dlock.asyncio`` has the same classes for
``redis.asyncio``. See docs/clients.md."""

from redis.exceptions import LockError, LockNotOwnedError

from ._core import (
    DEFAULT_WATCHDOG_TIMEOUT,
    DeadlockError,
    LatchBrokenError,
    Leader,
    LockLostError,
    election_owner,
    election_value,
)
from ._sync import Election, Latch, Leadership, Lock, LostEvent, MultiLock, Observer, ReadLock, RWLock, Semaphore

__all__ = [
    "DEFAULT_WATCHDOG_TIMEOUT",
    "DeadlockError",
    "Election",
    "LatchBrokenError",
    "Latch",
    "Leader",
    "Leadership",
    "Lock",
    "LockError",
    "LockLostError",
    "LockNotOwnedError",
    "LostEvent",
    "MultiLock",
    "Observer",
    "ReadLock",
    "RWLock",
    "Semaphore",
    "election_owner",
    "election_value",
]
__version__ = "0.1.0"

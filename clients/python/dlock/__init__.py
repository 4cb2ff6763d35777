"""dlock: the Python client of the dlock Redis module.

``redis.Redis.lock(name, ..., lock_class=dlock.Lock)`` replaces redis-py's
SET NX lock with a server-side lock (FIFO queue, blocking hand-off, fencing
tokens, leases renewed by a watchdog); ``RWLock``, ``Semaphore``,
``MultiLock`` and ``Latch`` add the other primitives, and ``dlock.asyncio``
has the same classes for ``redis.asyncio``. See docs/clients.md."""

from redis.exceptions import LockError, LockNotOwnedError

from ._core import DEFAULT_WATCHDOG_TIMEOUT, DeadlockError, LatchBrokenError, LockLostError
from ._sync import Latch, Lock, LostEvent, MultiLock, ReadLock, RWLock, Semaphore

__all__ = [
    "DEFAULT_WATCHDOG_TIMEOUT",
    "DeadlockError",
    "LatchBrokenError",
    "Latch",
    "Lock",
    "LockError",
    "LockLostError",
    "LockNotOwnedError",
    "LostEvent",
    "MultiLock",
    "ReadLock",
    "RWLock",
    "Semaphore",
]
__version__ = "0.1.0"

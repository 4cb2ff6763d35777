package dev.dlock;

import java.util.List;
import java.util.concurrent.locks.ReadWriteLock;

/**
 * A read-write lock on one key: read locks are shared holds, the write lock an exclusive hold.
 * Readers that arrive after a waiting writer queue behind it. A thread's read and write holds use
 * one owner, so a writer may take the read lock and release the write lock (a downgrade), and
 * the only reader may take the write lock (an upgrade: it waits ahead of everyone for the other
 * readers to leave; a second thread that tries the same while one waits gets {@link
 * DeadlockException}).
 */
public final class DReadWriteLock implements ReadWriteLock {
    private final DLock read;
    private final DLock write;

    DReadWriteLock(DLockClient client, String key) {
        ThreadOwners owners = new ThreadOwners();
        this.read = new DLockImpl(client, List.of(key), false, true, 0, 0, owners);
        this.write = new DLockImpl(client, List.of(key), false, false, 0, 0, owners);
    }

    /** @return the read side (shared holds) */
    @Override
    public DLock readLock() {
        return read;
    }

    /** @return the write side (an exclusive hold) */
    @Override
    public DLock writeLock() {
        return write;
    }
}

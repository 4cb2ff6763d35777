package dev.dlock;

/** The lock was not granted within the wait ({@code acquire(wait)} of the handle API). */
public class LockBusyException extends DLockException {
    /** @param key the lock's key, for the message */
    public LockBusyException(String key) {
        super("lock '" + key + "' was not granted within the wait");
    }
}

package dev.dlock;

/**
 * Thrown by {@code unlock()} of a lock whose hold was lost before it (its lease ran out, the key
 * was deleted, or renewals failed until the deadline). The lost event has already been
 * delivered to {@link Lease#lost()} listeners when this is thrown.
 */
public class LockLostException extends IllegalMonitorStateException {
    private final LostReason reason;

    /**
     * @param key the lock's key
     * @param reason why the hold was lost
     */
    public LockLostException(String key, LostReason reason) {
        super("lock '" + key + "' was lost before unlock: " + reason);
        this.reason = reason;
    }

    /** @return why the hold was lost */
    public LostReason reason() {
        return reason;
    }
}

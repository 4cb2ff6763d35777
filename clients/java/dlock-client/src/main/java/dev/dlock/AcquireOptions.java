package dev.dlock;

import java.time.Duration;

/**
 * Every option of one acquisition through the handle API; immutable, each setter returns a copy.
 *
 * <pre>{@code
 * Lease lease = lock.acquire(AcquireOptions.defaults().waitFor(Duration.ofSeconds(5)).lease(Duration.ofSeconds(10)));
 * }</pre>
 */
public final class AcquireOptions {
    private static final AcquireOptions DEFAULTS = new AcquireOptions(0, null, true, null, false);

    private final long waitNanos;
    private final Duration lease;
    private final boolean renewed;
    private final String owner;
    private final boolean session;

    private AcquireOptions(long waitNanos, Duration lease, boolean renewed, String owner, boolean session) {
        this.waitNanos = waitNanos;
        this.lease = lease;
        this.renewed = renewed;
        this.owner = owner;
        this.session = session;
    }

    /** @return no wait, the client's default lease renewed by the watchdog, a new owner, no SESSION */
    public static AcquireOptions defaults() {
        return DEFAULTS;
    }

    /**
     * @param wait the longest wait in the lock's queue ({@code BLOCK}); zero: one try
     * @return a copy
     */
    public AcquireOptions waitFor(Duration wait) {
        return new AcquireOptions(Arguments.waitNanos(wait), lease, renewed, owner, session);
    }

    /** @return a copy that waits without end ({@code BLOCK 0}) */
    public AcquireOptions waitForever() {
        return new AcquireOptions(-1, lease, renewed, owner, session);
    }

    /**
     * @param lease the lease ({@code ttl}), renewed by the watchdog unless {@link #fixedLease}
     * @return a copy
     */
    public AcquireOptions lease(Duration lease) {
        Arguments.leaseMs(lease);
        return new AcquireOptions(waitNanos, lease, renewed, owner, session);
    }

    /**
     * @param lease a lease the watchdog does not renew: the hold ends (and is reported lost) when it
     *     passes, unless {@link Lease#renew} extends it
     * @return a copy
     */
    public AcquireOptions fixedLease(Duration lease) {
        return lease(lease).renewedCopy(false);
    }

    private AcquireOptions renewedCopy(boolean value) {
        return new AcquireOptions(waitNanos, lease, value, owner, session);
    }

    /**
     * An owner of the caller's own instead of a new UUID: the same owner re-enters a lock it
     * holds. Keep it unique to one holder.
     *
     * @param owner 1 to 512 bytes, not {@code *}
     * @return a copy
     * @throws IllegalArgumentException for {@code *} or an owner outside 1 to 512 bytes
     */
    public AcquireOptions owner(String owner) {
        return new AcquireOptions(waitNanos, lease, renewed, Arguments.owner(owner), session);
    }

    /**
     * @param session true: {@code SESSION}, the hold ends when the connection that took it closes
     * @return a copy
     */
    public AcquireOptions session(boolean session) {
        return new AcquireOptions(waitNanos, lease, renewed, owner, session);
    }

    long waitNanos() {
        return waitNanos;
    }

    long leaseMs(DLockConfig config) {
        return (lease == null ? config.defaultLease() : lease).toMillis();
    }

    boolean renewed() {
        return renewed;
    }

    String owner() {
        return owner;
    }

    boolean session() {
        return session;
    }
}
